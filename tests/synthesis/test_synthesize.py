"""Synthesis from a run directory (a freshly built, untrained tiny model saved in the trainer's layout)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile
from click.testing import CliRunner

from conftest import BUNDLED_CORPUS, bundled_wavs

TEXTS = [line.split("|")[2] for line in (BUNDLED_CORPUS / "metadata.csv").read_text(encoding="utf-8").splitlines()]


def bundled_mel_stats(cfg, count: int = 8):
    """Per-bin statistics of the log mels of ``count`` bundled clips (no cache: what prepare would compute)."""
    from myxtts.audio import load_audio
    from myxtts.mel import MelFrontend
    from myxtts.data.mel_stats import MelStats

    frontend = MelFrontend(cfg.audio)
    return MelStats.from_mels(frontend(load_audio(path, cfg.audio.sample_rate)).numpy()
                              for path in bundled_wavs(count))


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    from myxtts.config import config_from_dict
    from myxtts.model import build_model
    from myxtts.synthesis import save_run
    from myxtts.text import Vocabulary

    root = tmp_path_factory.mktemp("synth")
    cfg = config_from_dict({"data": {"corpus_path": str(BUNDLED_CORPUS), "cache_dir": str(root / "no-cache"),
                                     "max_text_length": 192, "reference_frames": 96},
                            "audio": {"griffin_lim_iters": 4},
                            "model": {"preset": "tiny", "decoder": "autoregressive", "decoder_layers": 1}},
                           base_dir=root)
    vocabulary = Vocabulary.for_config(cfg.text)
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(1234)  # the same untrained model whatever ran before in this worker
    model = build_model(cfg, len(vocabulary))
    projection = model.duration_predictor.output_proj  # 2-6 frames per token: speech of a plausible length
    projection.bias.assign([np.log(1.0 + 4.0)])
    projection.kernel.assign(0.05 * tf.random.stateless_normal(projection.kernel.shape, seed=[12, 34]))
    save_run(root / "run", cfg, model, vocabulary, mel_stats=bundled_mel_stats(cfg))
    return root / "run"


@pytest.fixture(scope="module")
def synthesizer(tiny_run):
    from myxtts.synthesis import Synthesizer

    return Synthesizer.from_run(tiny_run)


def _frames(samples: int, hop: int) -> int:
    return samples // hop + 1  # GriffinLim returns (frames - 1) * hop samples


def test_cli_writes_playable_16bit_wav(tiny_run, synthesizer, tmp_path):
    from myxtts.cli import main

    out = tmp_path / "out.wav"
    result = CliRunner().invoke(main, ["synthesize", "--run", str(tiny_run), "--text", TEXTS[0],
                                       "--reference", str(bundled_wavs(1)[0]), "--out", str(out)])
    assert result.exit_code == 0, result.output
    info = soundfile.info(str(out))
    assert info.subtype == "PCM_16" and info.samplerate == 22050 and info.channels == 1
    wave, _ = soundfile.read(str(out), dtype="float32")
    assert np.all(np.isfinite(wave))
    assert np.sqrt(np.mean(wave ** 2)) > 1e-3  # not silent
    same = synthesizer.synthesize([TEXTS[0]], bundled_wavs(1)[0])[0]  # the API says what the CLI said
    assert _frames(len(wave), 256) == same.frames == same.durations.sum()
    # the voice's latents, one duration function, one decode function
    assert "compiled decoder graphs: 3" in result.output


def test_several_references_of_one_voice_are_averaged(tiny_run, synthesizer, tmp_path):
    from myxtts.cli import main

    first, second = bundled_wavs(3)[1:]
    one, other, both = synthesizer.voice(first), synthesizer.voice(second), synthesizer.voice([first, second])
    assert not np.allclose(one, other, atol=1e-3)  # two clips give two different latents ...
    np.testing.assert_allclose(both, (one + other) / 2, atol=1e-5)  # ... the voice of both is their mean
    np.testing.assert_allclose(synthesizer.voice([second, first]), both, atol=1e-6)
    np.testing.assert_allclose(synthesizer.voice([first, first]), one, atol=1e-6)
    mels = {name: synthesizer.synthesize([TEXTS[3]], reference)[0].mel
            for name, reference in (("one", first), ("other", second), ("both", [first, second]))}
    assert not np.allclose(mels["both"], mels["one"], atol=1e-3)
    assert not np.allclose(mels["both"], mels["other"], atol=1e-3)
    # a voice per text, in one batch: each text sounds as it does with its own voice alone
    mixed = synthesizer.synthesize([TEXTS[3], TEXTS[3]], voices=[other, both], batch_size=2, vocode=False)
    assert mixed[0].waveform is None and mixed[1].waveform is None
    np.testing.assert_allclose(mixed[0].mel, mels["other"], atol=1e-4)
    np.testing.assert_allclose(mixed[1].mel, mels["both"], atol=1e-4)
    for voice_arguments in ({}, {"reference": first, "voices": [one]}, {"voices": [one, other]}):
        with pytest.raises(ValueError, match="voice"):  # neither, both, or not one voice per text
            synthesizer.synthesize([TEXTS[3]], **voice_arguments)
    # the CLI takes --reference more than once, and names a missing clip
    out = tmp_path / "both.wav"
    result = CliRunner().invoke(main, ["synthesize", "--run", str(tiny_run), "--text", TEXTS[3], "--reference",
                                       str(first), "--reference", str(second), "--out", str(out)])
    assert result.exit_code == 0, result.output
    wave, _ = soundfile.read(str(out), dtype="float32")
    assert _frames(len(wave), 256) == mels["both"].shape[0]
    missing = CliRunner().invoke(main, ["synthesize", "--run", str(tiny_run), "--text", TEXTS[3], "--reference",
                                        str(first), "--reference", str(tmp_path / "nope.wav"), "--out", str(out)])
    assert missing.exit_code == 2 and "nope.wav" in missing.output


def test_cli_checkpoint_and_text_file(tiny_run, tmp_path):
    from myxtts.cli import main

    text_file = tmp_path / "texts.txt"
    text_file.write_text(f"{TEXTS[1]}\n\nShort one.\n{TEXTS[2]}\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["synthesize", "--checkpoint", str(tiny_run / "checkpoints"), "--config",
                                       str(tiny_run / "config.yaml"), "--text-file", str(text_file), "--reference",
                                       str(bundled_wavs(2)[1]), "--out-dir", str(tmp_path / "many"),
                                       "--batch-size", "2"])
    assert result.exit_code == 0, result.output
    written = sorted((tmp_path / "many").glob("*.wav"))
    assert [p.name for p in written] == ["001.wav", "002.wav", "003.wav"]
    lengths = [soundfile.info(str(p)).frames for p in written]
    assert lengths[1] < lengths[0] and lengths[1] < lengths[2]  # "Short one." is far shorter


def test_cli_says_a_text_file_of_paragraphs_as_one_wav(tiny_run, tmp_path):
    from myxtts.cli import main
    from myxtts.synthesis.text_split import PARAGRAPH_PAUSE, SENTENCE_PAUSE

    text_file = tmp_path / "chapter.txt"
    text_file.write_text("The first paragraph. It has two\nsentences.\n\nThe second one.\n", encoding="utf-8")
    out = tmp_path / "chapter.wav"
    result = CliRunner().invoke(main, ["synthesize", "--run", str(tiny_run), "--text-file", str(text_file),
                                       "--reference", str(bundled_wavs(1)[0]), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "3 pieces" in result.output
    wave, rate = soundfile.read(str(out), dtype="float32")
    assert wave.size > (SENTENCE_PAUSE + PARAGRAPH_PAUSE) * rate


def test_python_api_keeps_mel_and_alignment(synthesizer):
    result, = synthesizer.synthesize("The quick brown fox jumps over the lazy dog.", bundled_wavs(1)[0])
    wave = result.waveform
    assert wave.dtype == np.float32 and wave.ndim == 1 and np.all(np.isfinite(wave))
    assert result.mel.shape == (result.frames, 80)
    # the alignment is the predicted durations laid out: every frame on exactly one token, in order
    assert result.alignment.shape == (result.frames, len(result.tokens))
    np.testing.assert_array_equal(result.alignment.sum(axis=1), 1.0)
    np.testing.assert_array_equal(result.alignment.sum(axis=0), result.durations)
    positions = result.alignment.argmax(axis=1)
    assert np.all(np.diff(positions) >= 0) and positions[0] == 0 and positions[-1] == len(result.tokens) - 1
    assert result.ended_by == "durations" and result.frames == result.durations.sum()
    assert _frames(len(wave), 256) == result.frames


def test_each_item_of_a_batch_equals_itself_decoded_alone(synthesizer):
    """Items of unequal lengths share a batch (and the longest one's mel bucket) without touching each other."""
    texts = ["Hi there.", TEXTS[3], "A mid length sentence for the test."]
    reference = bundled_wavs(1)[0]
    results = synthesizer.synthesize(texts, reference, batch_size=3)
    frames = [r.frames for r in results]
    assert len(set(frames)) == 3, frames
    for text, result in zip(texts, results):
        alone = synthesizer.synthesize(text, reference, batch_size=1)[0]
        assert alone.frames == result.frames == result.durations.sum()
        np.testing.assert_allclose(result.mel, alone.mel, atol=1e-4)
        assert len(result.waveform) == (result.frames - 1) * 256


def test_reference_in_another_format_and_rate(synthesizer, tmp_path):
    wave, rate = soundfile.read(str(bundled_wavs(3)[2]), dtype="float32")
    import soxr

    flac = tmp_path / "reference.flac"
    soundfile.write(str(flac), soxr.resample(wave, rate, 16000), 16000, format="FLAC")
    mel_flac, length_flac = synthesizer.engine.reference_mel(flac)
    mel_wav, length_wav = synthesizer.engine.reference_mel(bundled_wavs(3)[2])
    assert mel_flac.shape == mel_wav.shape == (96, 80) and length_flac == length_wav == 96
    assert np.all(np.isfinite(synthesizer.synthesize("Hello.", flac)[0].waveform))


def test_no_retrace_over_twenty_texts(synthesizer):
    from myxtts.diagnostics import RetraceMonitor

    texts = [" ".join(TEXTS[i].split()[: 2 + i]) for i in range(20)]  # 2..21 words: two text buckets
    token_counts = [len(t) for t in synthesizer.engine.encode(texts)]
    assert len(set(token_counts)) >= 15
    buckets = {synthesizer.lengths.text_bucket(n) for n in token_counts}
    for bucket in buckets:  # warm-up: one compiled graph per (batch 1, text bucket)
        synthesizer.warm_up(bucket, batch_size=1)
    before = synthesizer.tracing_count()
    monitor = RetraceMonitor(strict=True)
    for key, function in list(synthesizer.decoder.functions.items()):
        synthesizer.decoder.functions[key] = monitor.watch(function, name=f"decode{key}")
    monitor.end_warmup()
    for text in texts:
        synthesizer.synthesize(text, bundled_wavs(1)[0])
    assert synthesizer.tracing_count() == before
    assert not monitor.events
    assert synthesizer.vocoder.tracing_count() == 1


@pytest.mark.parametrize("case", ["empty_text", "unknown_characters", "missing_reference", "unreadable_reference",
                                  "missing_run", "run_without_checkpoint", "run_without_mel_stats",
                                  "missing_checkpoint", "word_too_long", "unknown_script_in_the_middle"])
def test_cli_errors(case, tiny_run, tmp_path):
    from myxtts.cli import main

    text, reference, run = TEXTS[0], str(bundled_wavs(1)[0]), ["--run", str(tiny_run)]
    expected = {"empty_text": "empty", "unknown_characters": "cannot say: '你' '好'", "missing_reference": "not found",
                "unreadable_reference": "reference.wav", "missing_run": "not found", "run_without_checkpoint":
                "No checkpoint", "run_without_mel_stats": "mel_stats.json is missing",
                "missing_checkpoint": "Checkpoint not found", "word_too_long": "alone is longer",
                "unknown_script_in_the_middle": "'Привет, как дела?' cannot be spoken"}[case]
    if case == "empty_text":
        text = "   "
    elif case == "unknown_characters":
        text = "你好 ☃"
    elif case == "missing_reference":
        reference = str(tmp_path / "nope.wav")
    elif case == "unreadable_reference":
        reference = str(tmp_path / "reference.wav")
        Path(reference).write_text("not audio at all", encoding="utf-8")
    elif case == "missing_run":
        run = ["--run", str(tmp_path / "no-run")]
    elif case == "run_without_checkpoint":
        (tmp_path / "empty-run").mkdir()
        (tmp_path / "empty-run" / "config.yaml").write_text((tiny_run / "config.yaml").read_text())
        run = ["--run", str(tmp_path / "empty-run")]
    elif case == "run_without_mel_stats":
        import shutil

        shutil.copytree(tiny_run, tmp_path / "old-run")
        (tmp_path / "old-run" / "mel_stats.json").unlink()
        run = ["--run", str(tmp_path / "old-run")]
    elif case == "missing_checkpoint":
        run = ["--checkpoint", str(tmp_path / "ckpt-9"), "--config", str(tiny_run / "config.yaml")]
    elif case == "word_too_long":  # a long text is split; a word no piece can hold is an error
        text = "It said " + "abracadabra" * 30 + " twice."
    elif case == "unknown_script_in_the_middle":  # never two pieces spoken and the middle one dropped
        text = "Hello. Привет, как дела? Goodbye."
    result = CliRunner().invoke(main, ["synthesize", *run, "--text", text, "--reference", reference,
                                       "--out", str(tmp_path / "o.wav")])
    assert result.exit_code == 2, result.output
    assert "Error:" in result.output and expected in result.output, result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "o.wav").exists()


def test_synthesis_is_reproducible_with_the_prenet_dropout_on(tiny_run, synthesizer):
    """The autoregressive decoder keeps its prenet's dropout at synthesis, seeded per step: two synthesizers
    (two processes' worth of fresh graphs) say the same thing."""
    from myxtts.synthesis import Synthesizer

    reference = bundled_wavs(1)[0]
    first = synthesizer.synthesize([TEXTS[4]], reference)[0]
    second = Synthesizer.from_run(tiny_run).synthesize([TEXTS[4]], reference)[0]
    np.testing.assert_array_equal(first.mel, second.mel)


# ---- normalised mels: the model's space in, real log mels out ----------------------------------------

def test_mel_stats_round_trip_numpy_tf_and_storage(tmp_path):
    import tensorflow as tf

    from myxtts.config import config_from_dict
    from myxtts.data.mel_stats import STD_FLOOR, MelStats

    stats = bundled_mel_stats(config_from_dict({}), count=4)
    assert stats.mean.dtype == stats.std.dtype == np.float32 and stats.n_mels == 80 and stats.frames > 0
    log_mel = np.random.default_rng(0).normal(-5.0, 2.5, [37, 80]).astype(np.float32)
    normalized = stats.normalize(log_mel)
    assert normalized.dtype == np.float32
    np.testing.assert_allclose(stats.denormalize(normalized), log_mel, rtol=1e-6, atol=1e-5)
    tensor = stats.normalize(tf.constant(log_mel)[None])  # TF ops, any leading shape
    assert tf.is_tensor(tensor) and tensor.shape == (1, 37, 80)
    np.testing.assert_allclose(tensor.numpy()[0], normalized, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(stats.denormalize(tensor).numpy()[0], log_mel, rtol=1e-6, atol=1e-5)
    loaded = MelStats.load(stats.save(tmp_path / "mel_stats.json"))
    np.testing.assert_array_equal(loaded.mean, stats.mean)
    np.testing.assert_array_equal(loaded.std, stats.std)
    constant = MelStats.from_mels([np.full([10, 3], -11.5), np.full([4, 3], -11.5)])  # a bin that never moves
    np.testing.assert_array_equal(constant.std, np.float32(STD_FLOOR))
    assert np.all(np.isfinite(constant.normalize(np.full([2, 3], -11.5))))
    identity = MelStats.identity(80)
    np.testing.assert_array_equal(identity.normalize(log_mel), log_mel)


def test_synthesis_normalises_the_reference_and_denormalises_the_output(tiny_run, synthesizer):
    from myxtts.audio import load_audio
    from myxtts.data.mel_stats import MelStats
    from myxtts.synthesis import Synthesizer

    stats = synthesizer.mel_stats
    np.testing.assert_array_equal(stats.mean, MelStats.load(tiny_run / "mel_stats.json").mean)
    reference = bundled_wavs(3)[2]
    mel, length = synthesizer.engine.reference_mel(reference)
    raw = synthesizer.frontend(load_audio(reference, 22050)).numpy()
    start = (raw.shape[0] - 96) // 2
    np.testing.assert_allclose(mel, stats.normalize(raw[start:start + 96]), rtol=1e-6, atol=1e-6)
    # the same model without statistics returns its raw (normalised-space) output: the run's result is that,
    # denormalised, and the vocoder receives it
    raw_model = Synthesizer(synthesizer.cfg, synthesizer.model, synthesizer.vocabulary)
    voice = synthesizer.engine.latents([mel], [length])[0]
    result, = synthesizer.synthesize(TEXTS[5], voices=[voice])
    normalized, = raw_model.synthesize(TEXTS[5], voices=[voice], vocode=False)
    np.testing.assert_allclose(result.mel, stats.denormalize(normalized.mel), rtol=1e-5, atol=1e-5)
    wave = result.waveform
    assert wave.dtype == np.float32 and len(wave) == (result.frames - 1) * 256 and np.all(np.isfinite(wave))
    np.testing.assert_array_equal(wave, np.asarray(synthesizer.vocoder(result.mel)))


def test_mel_sharpening_sharpens_every_said_mel_before_the_vocoder(synthesizer):
    """model.mel_sharpening > 0: each item of a batch of unequal lengths comes out as the plain mel sharpened across
    bins (``mel.sharpen_across_bins``), and the vocoder hears that mel."""
    import copy
    import dataclasses

    from myxtts.mel import sharpen_across_bins
    from myxtts.synthesis import Synthesizer

    cfg = synthesizer.cfg
    sharp_cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, mel_sharpening=0.5))
    assert Synthesizer(sharp_cfg, synthesizer.model, synthesizer.vocabulary).mel_sharpening == 0.5
    assert synthesizer.mel_sharpening == 0.0  # the key's default: the mel as decoded
    sharp = copy.copy(synthesizer)  # the same compiled decoder (no new trace), the run's key set
    sharp.mel_sharpening = 0.5
    texts, reference = ["Hi there.", TEXTS[3]], bundled_wavs(1)[0]
    plain = synthesizer.synthesize(texts, reference, batch_size=2)
    sharpened = sharp.synthesize(texts, reference, batch_size=2)
    assert plain[0].frames != plain[1].frames
    for before, after in zip(plain, sharpened):
        assert after.frames == before.frames
        np.testing.assert_allclose(after.mel, sharpen_across_bins(before.mel, 0.5).numpy(), atol=1e-4)
        assert not np.allclose(after.mel, before.mel, atol=1e-3)
        np.testing.assert_array_equal(after.waveform, np.asarray(synthesizer.vocoder(after.mel)))


def test_a_long_reference_gives_its_middle_windows_averaged(tiny_run, synthesizer, tmp_path):
    """model.reference_windows N: a clip longer than data.reference_frames gives up to N consecutive windows from
    its middle, and the voice is the mean of their latents; 1 (the default) is the middle window alone."""
    import yaml

    from myxtts.audio import load_audio
    from myxtts.data.mel_stats import reference_crop, reference_windows
    from myxtts.synthesis import Synthesizer

    clip = max(bundled_wavs(6), key=lambda path: soundfile.info(str(path)).frames)  # several windows long
    raw = yaml.safe_load((tiny_run / "config.yaml").read_text(encoding="utf-8"))
    raw["model"]["reference_windows"] = 3
    (tmp_path / "windows.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
    windowed = Synthesizer.from_run(tiny_run, config=tmp_path / "windows.yaml")
    frames = synthesizer.cfg.data.reference_frames
    log_mel = synthesizer.frontend(load_audio(clip, synthesizer.sample_rate)).numpy()  # [time, n_mels]
    assert log_mel.shape[0] >= 3 * frames
    windows = reference_windows(log_mel, frames, synthesizer.mel_stats, 3)
    assert len(windows) == 3 and all(length == frames for _, length in windows)
    middle = reference_crop(log_mel, frames, synthesizer.mel_stats)[0]
    np.testing.assert_array_equal(windows[1][0], middle)  # the three windows sit around the middle crop
    latents = synthesizer.decoder.latents(np.stack([mel for mel, _ in windows]), np.full([3], frames, np.int32),
                                          synthesizer.batch_size)  # [3, K, d]
    np.testing.assert_allclose(windowed.voice(clip), latents.mean(axis=0), atol=1e-5)
    assert not np.allclose(windowed.voice(clip), synthesizer.voice(clip), atol=1e-4)
    short = reference_windows(log_mel[: frames + 10], frames, synthesizer.mel_stats, 3)
    assert len(short) == 1  # only one window fits: the middle crop, as with 1


def test_a_reference_over_the_bound_is_refused_before_decoding(synthesizer, tmp_path, monkeypatch):
    """A reference longer than the longer of REFERENCE_MAX_SECONDS and data.max_duration (a whole recording by mistake)
    is an AudioError naming the file, its duration and the bound, decided from its header: nothing is decoded."""
    from myxtts.audio import AudioError
    from myxtts.synthesis.engine import REFERENCE_MAX_SECONDS

    bound = max(REFERENCE_MAX_SECONDS, synthesizer.cfg.data.max_duration)
    path = tmp_path / "recording.flac"
    second = np.random.default_rng(0).integers(-2, 3, (8000, 8), dtype=np.int16)  # 8 channels at 8 kHz
    with soundfile.SoundFile(str(path), "w", 8000, 8, "PCM_16", format="FLAC") as out:
        for _ in range(int(bound) + 5):
            out.write(second)
    decoded = []
    original = soundfile.SoundFile.read
    monkeypatch.setattr(soundfile.SoundFile, "read", lambda self, *a, **k: decoded.append(self.name) or original(
        self, *a, **k))
    for load in (synthesizer.engine.reference_mel, synthesizer.voice):
        with pytest.raises(AudioError) as caught:
            load(path)
        assert caught.value.reason == "too_long"
        assert str(path) in str(caught.value) and f"{bound + 5:.3f} s" in str(caught.value)
        assert f"({bound:g} s)" in str(caught.value)
    assert decoded == []
    synthesizer.engine.reference_mel(bundled_wavs(1)[0])  # a clip within the bound loads as before
