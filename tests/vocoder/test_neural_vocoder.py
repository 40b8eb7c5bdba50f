"""The neural vocoder's training and use: segment pipeline alignment, GAN training on the bundled clips (learns, never
retraces, resumes), loading, packing, fine-tuning on an acoustic model's mels and the audio-settings check. The
generators themselves: test_vocoder_generators.py."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest
import tensorflow as tf
from click.testing import CliRunner

from conftest import REPO_ROOT, bundled_wavs
from myxtts.audio import load_audio
from myxtts.mel import MelFrontend
from myxtts.config import AudioConfig, config_from_dict, save_config

# a vocoder small enough to train a few hundred steps in a test (the recipe's sizes are in configs/vocoder.yaml)
SMALL_VOCODER = {"dim": 48, "intermediate_dim": 144, "layers": 2, "segment_samples": 4096, "batch_size": 4,
                 "discriminator_periods": [3], "discriminator_channels": 4, "resolution_ffts": [512],
                 "resolution_channels": 4, "adversarial_start_step": 150}


@pytest.fixture(scope="module")
def vocoder_cfg(prepared_cache, tmp_path_factory):
    """The prepared bundled cache with a small vocoder section and a short GAN schedule."""
    raw = prepared_cache.to_dict()
    raw["model"] = {}
    raw["training"] = {"max_steps": 240, "learning_rate": 2e-3, "min_learning_rate": 1e-4, "warmup_steps": 20,
                       "gradient_clip_norm": 0.0, "log_every": 20, "validate_every": 120, "checkpoint_every": 120,
                       "summary_every": 240, "keep_checkpoints": 2}
    raw["vocoder"] = dict(SMALL_VOCODER)
    return config_from_dict(raw, base_dir=prepared_cache.base_dir)


@pytest.fixture(scope="module")
def trained_vocoder(vocoder_cfg, tmp_path_factory):
    from myxtts.training.vocoder_trainer import train_vocoder

    workdir = tmp_path_factory.mktemp("vocoder") / "run"
    summary = train_vocoder(vocoder_cfg, workdir, progress=False, echo=lambda line: None)
    return workdir, summary


def test_segments_align_audio_with_the_cached_mel(vocoder_cfg):
    """Each segment's audio is the samples its mel frames are centred on: the front-end's mel of the audio segment
    equals the cached frames away from the segment's edges (where the cache saw real context, not reflection)."""
    from myxtts.data.vocoder_segments import VocoderSegments

    segments = VocoderSegments(vocoder_cfg, "train")
    frontend = MelFrontend(vocoder_cfg.audio)
    spec = segments.signature()
    for batch in segments.dataset().take(3):
        assert batch["mel"].shape == spec["mel"].shape and batch["audio"].shape == spec["audio"].shape
        rebuilt = frontend(batch["audio"]).numpy()  # [batch, segment_frames, n_mels]
        assert rebuilt.shape == batch["mel"].shape
        inner = slice(3, -3)  # n_fft / 2 = 2 hops of reflection at each end
        error = np.abs(rebuilt[:, inner] - batch["mel"].numpy()[:, inner])
        assert float(np.median(error)) < 0.01 and float(error.max()) < 0.1


@pytest.mark.parametrize("share", [0.0, 0.5, 1.0])
def test_a_share_of_segments_reads_the_recordings_mels_beside_the_acoustic_models(vocoder_cfg, tmp_path, share):
    """vocoder.recorded_mel_share under --acoustic-run: each example reads the model's mel of its clip, or (a seeded
    draw, at the share asked) the recordings' own; the audio and the offset are the same either way."""
    from myxtts.data.cache import FeatureCache, read_utterance, write_utterance
    from myxtts.data.vocoder_segments import VocoderSegments

    cache = FeatureCache.load(vocoder_cfg)
    acoustic = tmp_path / "acoustic-mels"  # a stand-in for the model's mels: each clip's real mel shifted by +4
    for name in cache.files:
        utterance = read_utterance(cache.cache_dir / name)
        (acoustic / name).parent.mkdir(parents=True, exist_ok=True)
        write_utterance(acoustic / name, utterance.tokens, utterance.mel.astype(np.float32) + 4.0, utterance.pitch)
    cfg = dataclasses.replace(vocoder_cfg, vocoder=dataclasses.replace(vocoder_cfg.vocoder, recorded_mel_share=share))
    mixed, recorded = VocoderSegments(cfg, "train", mel_dir=acoustic), VocoderSegments(vocoder_cfg, "train")
    kinds = []
    for mixed_batch, recorded_batch in zip(mixed.dataset().take(12), recorded.dataset().take(12)):
        np.testing.assert_array_equal(mixed_batch["audio"].numpy(), recorded_batch["audio"].numpy())
        difference = (mixed_batch["mel"] - recorded_batch["mel"]).numpy()  # [batch, frames, n_mels]
        for example in difference:
            assert np.allclose(example, 0.0) or np.allclose(example, 4.0, atol=0.02)  # one clip's mel or the other
            kinds.append(bool(np.allclose(example, 0.0)))
    recorded_count = sum(kinds)  # 48 examples
    if share == 0.0:
        assert recorded_count == 0
    elif share == 1.0:
        assert recorded_count == len(kinds)
    else:
        assert 0.25 * len(kinds) < recorded_count < 0.75 * len(kinds), recorded_count


def test_alternating_update_answers_the_updated_discriminators(vocoder_cfg):
    """From the same weights and batch, both update orders step the discriminators identically (same generated
    audio), but only the alternating generator sees the stepped discriminators, so the generators differ."""
    from myxtts.data.vocoder_segments import VocoderSegments
    from myxtts.training.vocoder_steps import GanSteps
    from myxtts.vocoder.discriminators import build_discriminators
    from myxtts.vocoder.generators import build_generator

    batch = next(iter(VocoderSegments(vocoder_cfg, "train").dataset()))
    results = {}
    for mode in ("alternating", "simultaneous"):
        cfg = vocoder_cfg.replace(vocoder=dataclasses.replace(vocoder_cfg.vocoder, discriminator_update=mode))
        tf.keras.utils.set_random_seed(3)
        generator, discriminators = build_generator(cfg), build_discriminators(cfg)
        before = [np.asarray(v).copy() for v in generator.trainable_variables]
        out = GanSteps(cfg, generator, discriminators).adversarial_step(batch)
        assert np.isfinite(float(out["total"])) and float(out["discriminator"]) > 0
        assert any(not np.array_equal(b, np.asarray(v)) for b, v in zip(before, generator.trainable_variables))
        results[mode] = ([np.asarray(v) for v in generator.trainable_variables],
                         [np.asarray(v) for v in discriminators.trainable_variables], float(out["discriminator"]))
    (g_alt, d_alt, loss_alt), (g_sim, d_sim, loss_sim) = results["alternating"], results["simultaneous"]
    assert loss_alt == pytest.approx(loss_sim, rel=1e-5)
    for one, other in zip(d_alt, d_sim):
        np.testing.assert_allclose(one, other, rtol=1e-4, atol=1e-6)
    assert max(float(np.max(np.abs(one - other))) for one, other in zip(g_alt, g_sim)) > 1e-7


def test_clips_shorter_than_a_segment_are_skipped_and_counted(vocoder_cfg):
    from myxtts.data.vocoder_segments import VocoderDataError, VocoderSegments

    def segments(samples: int) -> VocoderSegments:
        return VocoderSegments(vocoder_cfg.replace(vocoder=dataclasses.replace(vocoder_cfg.vocoder,
                                                                               segment_samples=samples)))

    train = len(segments(4096))
    six_seconds = segments(256 * 517)  # ~6 s: some bundled clips are shorter
    assert 0 < len(six_seconds.skipped) < train and len(six_seconds) + len(six_seconds.skipped) == train
    with pytest.raises(VocoderDataError, match="lower vocoder.segment_samples"):
        segments(256 * 2000)  # ~23 s: longer than every clip


def test_gan_training_learns_on_the_bundled_clips_and_never_retraces(vocoder_cfg, trained_vocoder):
    from myxtts.vocoder.generators import build_generator
    from myxtts.vocoder.neural import NeuralVocoder, load_vocoder

    workdir, summary = trained_vocoder
    assert summary["steps"] == 240 and summary["retraces_after_warmup"] == 0
    assert summary["traces"] == {"reconstruction_step": 1, "adversarial_step": 1, "generate": 1}
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    adversarial = [r for r in records if r.get("phase") == "adversarial"]
    assert adversarial and all(np.isfinite(r["discriminator"]) and r["discriminator"] > 0 for r in adversarial)
    assert all(r["nonfinite_in_a_row"] == 0 for r in records if r["split"] == "train")
    # every weight is restored from the checkpoint (layers held in lists included): two loads are identical
    first, second = load_vocoder(workdir, vocoder_cfg.audio), load_vocoder(workdir, vocoder_cfg.audio)
    for one, other in zip(first.generator.variables, second.generator.variables):
        np.testing.assert_array_equal(np.asarray(one), np.asarray(other), err_msg=one.path)
    # held-out clips (the cache's validation split, never trained on): resynthesis beats the untrained generator
    untrained = NeuralVocoder(build_generator(vocoder_cfg), vocoder_cfg.audio)
    assert held_out_mel_error(vocoder_cfg, first) < 0.75 * held_out_mel_error(vocoder_cfg, untrained)


def held_out_mel_error(cfg, vocoder) -> float:
    """Mean |mel(vocoder(mel)) - mel| over the cache's validation clips (never trained on)."""
    from myxtts.data.vocoder_segments import validation_clips

    frontend = MelFrontend(cfg.audio)
    return float(np.mean([np.mean(np.abs(frontend(vocoder(clip["mel"])).numpy() - clip["mel"]))
                          for clip in validation_clips(cfg)]))


def test_resume_continues_from_the_checkpoint(vocoder_cfg, trained_vocoder, tmp_path):
    from myxtts.training.checkpoint import WorkdirError
    from myxtts.training.vocoder_trainer import VocoderTrainingError, train_vocoder

    workdir, _ = trained_vocoder
    copy = tmp_path / "run"
    shutil.copytree(workdir, copy, ignore=shutil.ignore_patterns("run.lock"))
    config = (copy / "config.yaml").read_bytes()
    other = vocoder_cfg.replace(training=dataclasses.replace(vocoder_cfg.training, max_steps=999))
    with pytest.raises(VocoderTrainingError, match="--resume"):
        train_vocoder(other, copy, progress=False, echo=lambda line: None)
    assert (copy / "config.yaml").read_bytes() == config  # the refused config is not written over the run's
    flipped = vocoder_cfg.replace(vocoder=dataclasses.replace(vocoder_cfg.vocoder, magnitude_prior=True))
    with pytest.raises(VocoderTrainingError, match=r"magnitude_prior False \(this config: True\)"):
        train_vocoder(flipped, copy, resume=True, progress=False, echo=lambda line: None)  # same shapes, other meaning
    assert (copy / "config.yaml").read_bytes() == config
    # the checkpointed iterator yields the run's segments (TensorFlow failed at the first batch: "Incompatible shapes")
    shorter = vocoder_cfg.replace(vocoder=dataclasses.replace(vocoder_cfg.vocoder, segment_samples=2048))
    with pytest.raises(WorkdirError, match=r"vocoder.segment_samples: 4096 -> 2048.*--init-from"):
        train_vocoder(shorter, copy, resume=True, progress=False, echo=lambda line: None)
    assert (copy / "config.yaml").read_bytes() == config
    longer = vocoder_cfg.replace(training=dataclasses.replace(vocoder_cfg.training, max_steps=250,
                                                              validate_every=1000, summary_every=0))
    summary = train_vocoder(longer, copy, resume=True, progress=False, echo=lambda line: None)
    assert summary["resumed_from"].endswith("ckpt-240")
    assert summary["steps"] == 250 and summary["steps_this_run"] == 10 and summary["retraces_after_warmup"] == 0


def test_a_vocoder_of_other_audio_settings_is_refused(trained_vocoder, tmp_path):
    from myxtts.cli import main
    from myxtts.vocoder.neural import VocoderMismatchError, load_vocoder

    workdir, _ = trained_vocoder
    with pytest.raises(VocoderMismatchError, match=r"audio.sample_rate: vocoder 22050, acoustic model 16000"):
        load_vocoder(workdir, AudioConfig(sample_rate=16000, fmax=7600.0))
    other = tmp_path / "other"
    shutil.copytree(workdir, other, ignore=shutil.ignore_patterns("run.lock", "tensorboard"))
    record = json.loads((other / "vocoder.json").read_text())
    record["audio"]["n_mels"] = 64
    (other / "vocoder.json").write_text(json.dumps(record))
    result = CliRunner().invoke(main, [
        "synthesize", "--run", str(REPO_ROOT / "pretrained" / "base-espeak-tiny"), "--vocoder", str(other),
        "--text", "Hello.", "--reference", str(bundled_wavs(1)[0]), "--out", str(tmp_path / "y.wav")])
    assert result.exit_code == 2, result.output
    assert "audio.n_mels: vocoder 64, acoustic model 80" in result.output
    assert not (tmp_path / "y.wav").exists()
    result = CliRunner().invoke(main, ["export", "--run", str(REPO_ROOT / "pretrained" / "base-espeak-tiny"),
                                       "--vocoder", str(other), "--out", str(tmp_path / "saved")])
    assert result.exit_code == 2 and "audio.n_mels: vocoder 64, acoustic model 80" in result.output, result.output
    assert not (tmp_path / "saved").exists()
    result = CliRunner().invoke(main, ["serve", "--run", str(REPO_ROOT / "pretrained" / "base-espeak-tiny"),
                                       "--voice", f"a={bundled_wavs(1)[0]}", "--vocoder", str(other)])
    assert result.exit_code == 2 and "audio.n_mels: vocoder 64, acoustic model 80" in result.output, result.output
    result = CliRunner().invoke(main, ["pack", "--run", str(REPO_ROOT / "pretrained" / "base-espeak-tiny"),
                                       "--vocoder", str(other), "--out", str(tmp_path / "packed")])
    assert result.exit_code == 2 and "audio.n_mels: vocoder 64, acoustic model 80" in result.output, result.output
    assert not (tmp_path / "packed").exists()


def test_synthesize_speaks_through_the_trained_vocoder(trained_vocoder, tmp_path):
    import soundfile

    from myxtts.cli import main

    workdir, _ = trained_vocoder
    out = tmp_path / "hello.wav"
    result = CliRunner().invoke(main, [
        "synthesize", "--run", str(REPO_ROOT / "pretrained" / "base-espeak-tiny"), "--vocoder", str(workdir),
        "--text", "Hello there.", "--reference", str(bundled_wavs(1)[0]), "--out", str(out)])
    assert result.exit_code == 0, result.output
    audio, rate = soundfile.read(out)
    frames = int(result.output.split(" frames")[0].rsplit(" ", 1)[-1])
    assert rate == 22050 and audio.shape == ((frames - 1) * 256,) and np.abs(audio).max() > 0.01


def test_pack_keeps_the_generator_alone(trained_vocoder, tmp_path):
    from myxtts.cli import main
    from myxtts.vocoder.neural import load_vocoder

    workdir, summary = trained_vocoder
    packed = tmp_path / "packed"
    result = CliRunner().invoke(main, ["pack", "--run", str(workdir), "--out", str(packed)])
    assert result.exit_code == 0 and "packed vocoder step 240" in result.output, result.output
    names = {name for name, _ in tf.train.list_variables(tf.train.latest_checkpoint(str(packed / "checkpoints")))}
    assert not any(name.startswith(("discriminators/", "generator_optimizer/")) for name in names)
    record = json.loads((packed / "vocoder.json").read_text())
    assert record["step"] == 240 and record["training_minutes"] > 0
    run_bytes = sum(path.stat().st_size for path in (workdir / "checkpoints").glob("ckpt-240.*"))
    assert record["bytes"] < run_bytes / 2
    audio_cfg = AudioConfig()
    mel = MelFrontend(audio_cfg)(load_audio(bundled_wavs(1)[0], audio_cfg.sample_rate)).numpy()
    np.testing.assert_array_equal(load_vocoder(packed, audio_cfg)(mel).numpy(),
                                  load_vocoder(workdir, audio_cfg)(mel).numpy())
    result = CliRunner().invoke(main, ["pack", "--run", str(workdir), "--out", str(packed)])
    assert result.exit_code == 2 and "already holds a packed vocoder" in result.output
    result = CliRunner().invoke(main, ["pack", "--run", str(workdir), "--out", str(workdir), "--force"])
    assert result.exit_code == 2 and "is the run given to --run" in result.output, result.output
    assert tf.train.latest_checkpoint(str(workdir / "checkpoints")).endswith("ckpt-240")  # the run is untouched
    result = CliRunner().invoke(main, ["pack", "--run", str(workdir), "--out", str(packed), "--force"])
    assert result.exit_code == 0 and "packed vocoder step 240" in result.output, result.output
    assert [p.name for p in packed.parent.iterdir()] == ["packed"]  # no staging folder left beside it
    made_here = tmp_path / "probe"
    made_here.mkdir()
    assert packed.stat().st_mode & 0o777 == made_here.stat().st_mode & 0o777  # not the staging folder's 0700
    # --with-discriminators: a starting point for fine-tuning, whose trained discriminators a warm start restores
    from myxtts.config import load_config
    from myxtts.vocoder.discriminators import build_discriminators
    from myxtts.vocoder.generators import build_generator
    from myxtts.vocoder.neural import restore_generator

    full = tmp_path / "with-discriminators"
    result = CliRunner().invoke(main, ["pack", "--run", str(workdir), "--out", str(full), "--with-discriminators"])
    assert result.exit_code == 0 and "generator and discriminators" in result.output, result.output
    cfg = load_config(workdir / "config.yaml")
    generator, discriminators = build_generator(cfg), build_discriminators(cfg)
    assert restore_generator(full, cfg, generator, discriminators)["discriminators"] is True
    from_run = build_discriminators(cfg)
    tf.train.Checkpoint(discriminators=from_run).restore(
        tf.train.latest_checkpoint(str(workdir / "checkpoints"))).expect_partial()
    for restored, original in zip(discriminators.variables, from_run.variables):
        np.testing.assert_array_equal(np.asarray(restored), np.asarray(original), err_msg=restored.path)
    assert restore_generator(packed, cfg, build_generator(cfg), build_discriminators(cfg))["discriminators"] is False



def test_fine_tuning_on_an_acoustic_models_teacher_forced_mels(vocoder_cfg, trained_vocoder, tmp_path):
    """--acoustic-run: the shipped base reads each clip's text and real mel through its aligner; the vocoder (warm
    started from the trained one, discriminators included) trains on those mels, aligned with the clips' audio,
    and becomes the acoustic model's own: its synthesis speaks through it without being told."""
    import soundfile

    from myxtts.data.cache import FeatureCache, read_utterance
    from myxtts.data.prepare import prepare
    from myxtts.synthesis.acoustic_mels import write_acoustic_mels
    from myxtts.training.vocoder_trainer import train_vocoder

    corpus = tmp_path / "corpus"
    (corpus / "wavs").mkdir(parents=True)
    # 3 real clips of unequal lengths (406, 431 and 444 frames) in one teacher-forced shape: one compile of the base
    wanted = {"LJ001-0083", "LJ001-0137", "LJ001-0156"}
    lines = [line for line in (REPO_ROOT / "data" / "ljspeech-bundled" / "metadata.csv").read_text().splitlines()
             if line.split("|")[0] in wanted]
    (corpus / "metadata.csv").write_text("\n".join(lines) + "\n")
    for line in lines:
        name = line.split("|")[0] + ".wav"
        shutil.copy(REPO_ROOT / "data" / "ljspeech-bundled" / "wavs" / name, corpus / "wavs" / name)
    raw = vocoder_cfg.to_dict()
    raw["data"].update(corpus_path=str(corpus), cache_dir=str(tmp_path / "cache"), validation_size=1)
    raw["training"].update(max_steps=4, validate_every=4, checkpoint_every=4, summary_every=0)
    raw["vocoder"].update(adversarial_start_step=2)
    cfg = config_from_dict(raw, base_dir=tmp_path)
    prepare(cfg, progress=False)
    workdir, _ = trained_vocoder
    base = tmp_path / "base"  # a copy: the fine-tuned vocoder is installed into it
    shutil.copytree(REPO_ROOT / "pretrained" / "base-espeak-tiny", base)
    lines_out = []
    summary = train_vocoder(cfg, tmp_path / "finetuned", init_from=workdir, acoustic_run=base,
                            write_acoustic_mels=write_acoustic_mels, progress=False, echo=lines_out.append)
    assert summary["steps"] == 4 and summary["retraces_after_warmup"] == 0
    assert any("generator and discriminators" in line for line in lines_out), lines_out
    record = json.loads((tmp_path / "finetuned" / "vocoder.json").read_text())
    assert record["init_from"].startswith(str(workdir)) and record["acoustic_run"] == str(base.resolve())
    assert summary["installed_in"] == str(base / "vocoder") and "own vocoder" in lines_out[-1], lines_out
    own = json.loads((base / "vocoder" / "vocoder.json").read_text())
    assert own["step"] == 4 and own["acoustic_run"] == record["acoustic_run"] and own["discriminators"] is False
    from myxtts.cli import main

    out = tmp_path / "own.wav"
    result = CliRunner().invoke(main, ["synthesize", "--run", str(base), "--text", "Hello there.",
                                       "--reference", str(bundled_wavs(1)[0]), "--out", str(out)])
    assert result.exit_code == 0 and f"vocoder: {base / 'vocoder'} (the run's own)" in result.output, result.output
    audio, _ = soundfile.read(out)
    frames = int(result.output.split(" frames")[0].rsplit(" ", 1)[-1])
    assert audio.shape == ((frames - 1) * 256,) and np.abs(audio).max() > 0.01
    cache = FeatureCache.load(cfg)
    mels = tmp_path / "finetuned" / "acoustic-mels"
    assert json.loads((mels / "source.json").read_text())["clips"] == len(cache) == 3
    for row in range(len(cache)):
        generated = read_utterance(mels / cache.files[row]).mel.astype(np.float32)
        real = cache.utterance_mel(row).astype(np.float32)
        assert generated.shape == real.shape  # teacher-forced: the clip's own frames, aligned with its audio
        assert 0.05 < float(np.mean(np.abs(generated - real))) < 2.0  # the model's mel, near the real one
    # a resumed or repeated run reuses the mels of the same checkpoint
    lines_out.clear()
    write_acoustic_mels(cfg, base, mels, progress=False, echo=lines_out.append)
    assert lines_out and lines_out[0].startswith("acoustic mels: reusing")


def test_diagnose_pipeline_reads_the_vocoder_segments(vocoder_cfg, tmp_path):
    from myxtts.cli import main

    config = tmp_path / "vocoder.yaml"
    save_config(vocoder_cfg, config)
    report = tmp_path / "report.json"
    result = CliRunner().invoke(main, ["diagnose", "pipeline", "--config", str(config), "--vocoder", "--steps", "8",
                                       "--json", str(report)])
    assert result.exit_code == 0, result.output
    data = json.loads(report.read_text())  # TF ops only, parallel parse map, prefetch last
    assert data["py_functions"] == [] and data["generator_sources"] == 0 and data["sequential_maps"] == 0
    assert data["final_prefetch"] is True and data["producer_batches_per_second"] > 0


def test_train_vocoder_refuses_acoustic_only_keys_and_bad_segments(vocoder_cfg, tmp_path):
    from myxtts.cli import main

    config = tmp_path / "vocoder.yaml"
    save_config(vocoder_cfg, config)
    runner = CliRunner()
    result = runner.invoke(main, ["train-vocoder", "--config", str(config), "--workdir", str(tmp_path / "run"),
                                  "--set", "training.steps_per_execution=2", "--set", "training.max_steps=240"])
    assert result.exit_code == 2 and "training.steps_per_execution" in result.output
    assert "does nothing in train-vocoder" in result.output
    result = runner.invoke(main, ["train-vocoder", "--config", str(config), "--workdir", str(tmp_path / "run"),
                                  "--set", "training.mixed_precision=float16"])
    assert result.exit_code == 2 and "'float16'" in result.output and "bfloat16" in result.output
    result = runner.invoke(main, ["train-vocoder", "--config", str(config), "--set", "vocoder.segment_samples=1000"])
    assert result.exit_code == 2 and "vocoder.segment_samples" in result.output and "hop_length" in result.output
    # the recordings' share of the mels means something only beside an acoustic model's mels
    result = runner.invoke(main, ["train-vocoder", "--config", str(config), "--workdir", str(tmp_path / "run"),
                                  "--set", "vocoder.recorded_mel_share=0.5"])
    assert result.exit_code == 2 and "vocoder.recorded_mel_share" in result.output and "--acoustic-run" in result.output
    assert not (tmp_path / "run" / "checkpoints").exists()
    result = runner.invoke(main, ["train-vocoder", "--config", str(config), "--set", "vocoder.recorded_mel_share=1.5"])
    assert result.exit_code == 2 and "vocoder.recorded_mel_share" in result.output and "[0, 1]" in result.output
