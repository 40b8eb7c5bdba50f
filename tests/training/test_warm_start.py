"""Warm start (training.init_from / --init-from) and frozen modules (training.freeze), on the bundled real clips."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from conftest import bundled_wavs
from test_train import TINY_TINY, TINY_TINY_AR, trainer_config, write_config

# the trainer tests' parallel model (test_train.TINY_TINY); another decoder is checked below
SMALL: dict = {}


def _config(prepared, model=None, training=None):
    # no validation split (nothing here reads it: validation is the trainer tests'), a short Griffin-Lim (nothing
    # here judges the audio): less to trace and run in every warm-start run
    return trainer_config(prepared, data={"num_buckets": 1, "validation_size": 0}, model={**SMALL, **(model or {})},
                          audio={"griffin_lim_iters": 4}, training={
        "max_steps": 4, "warmup_steps": 2, "log_every": 1, "validate_every": 100, "checkpoint_every": 100,
        "summary_every": 0, **(training or {})})


@pytest.fixture(scope="module")
def source_run(prepared_cache, tmp_path_factory):
    """A trained source run (6 steps) every test starts from; read-only."""
    from myxtts.training import run

    workdir = tmp_path_factory.mktemp("source") / "run"
    run(_config(prepared_cache, training={"max_steps": 6}), workdir, progress=False, echo=lambda _: None)
    return workdir


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "run.lock"}


def _weights(model) -> dict[str, np.ndarray]:
    """Variables by their path inside the model (the model's own name dropped)."""
    return {v.path.split("/", 1)[1]: v.numpy() for v in model.weights}


def test_init_from_copies_weights_fresh_optimizer_frozen_modules_stay_resume_exact(prepared_cache, source_run,
                                                                                     tmp_path):
    from click.testing import CliRunner

    from myxtts.cli import main
    from myxtts.model import build_model
    from myxtts.synthesis.run_files import load_model_from_run
    from myxtts.training import run
    from myxtts.training.checkpoint import WorkdirError

    source_dir = tmp_path / "source"  # a copy: deleted before the resume below
    shutil.copytree(source_run, source_dir, ignore=shutil.ignore_patterns("run.lock"))
    # the source's normalisation made unlike this corpus' (a base trained on other voices): the warm start keeps it
    stats = json.loads((source_dir / "mel_stats.json").read_text())
    stats["mean"] = [m + 0.5 for m in stats["mean"]]
    (source_dir / "mel_stats.json").write_text(json.dumps(stats))
    before = _digest(source_dir)
    _, source_model, _ = load_model_from_run(source_dir)
    source = _weights(source_model)
    # with a weight average (training.ema_decay): loading the run reads the average, and it resumes exactly too
    settings = {"freeze": ["text_encoder", "aligner"], "deterministic": True, "checkpoint_every": 2, "ema_decay": 0.5}
    config = write_config(_config(prepared_cache, training=settings), tmp_path / "finetune.yaml")
    result = CliRunner().invoke(main, ["train", "--config", str(config), "--workdir", str(tmp_path / "run"),
                                       "--init-from", str(source_dir), "--no-progress"],
                                standalone_mode=False, catch_exceptions=False)
    summary = result.return_value
    assert "warm start:" in result.output and summary["init_from"].endswith("ckpt-6")
    assert "weight average: decay 0.5" in result.output and summary["weight_average_decay"] == 0.5
    # step 0 and a fresh optimizer: 4 steps of its own, the first logged step is 1
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["split"] == "train"][0] == 1
    assert summary["steps"] == 4 and summary["updates"] == 4
    record = json.loads((tmp_path / "run" / "init_from.json").read_text())
    assert record["checkpoint"].endswith("ckpt-6") and record["source_step"] == 6
    assert record["frozen"] == ["text_encoder", "aligner"] and record["new_symbols"] == []
    assert record["variables"] == len(source) and record["mel_stats"] == "source"
    assert json.loads((tmp_path / "run" / "mel_stats.json").read_text()) == stats
    tuned_config, tuned_model, vocabulary = load_model_from_run(tmp_path / "run")
    tuned = _weights(tuned_model)
    frozen = [k for k in tuned if k.startswith(("text_encoder/", "aligner/"))]
    moving = [k for k in tuned if k.startswith(("decoder/", "postnet/", "duration_predictor/"))
              and "seed_generator" not in k]
    assert frozen and moving
    assert all(np.array_equal(tuned[k], source[k]) for k in frozen)  # frozen: never moved
    moved = [k for k in moving if not np.array_equal(tuned[k], source[k])]
    assert len(moved) > 0.9 * len(moving)  # trained from the source's values ...
    near = [k for k in moving if np.abs(tuned[k] - source[k]).max() < 0.05]  # ... 4 small steps away
    assert len(near) == len(moving)
    # the optimizer only holds slots of the trainable variables
    latest = tf.train.latest_checkpoint(str(tmp_path / "run" / "checkpoints"))
    reader = tf.train.load_checkpoint(latest)
    assert not [name for name in reader.get_variable_to_shape_map() if name.startswith("optimizer/")
                and "text_encoder" in name]
    # the average of every trainable weight (none of the frozen modules') sits beside the weights, and is what the
    # run is loaded with; the weights themselves (what a resume trains on) are 4 steps further from the source
    averages = {name.split("/")[2].replace(":", "/").split("/", 1)[1]: reader.get_tensor(name)
                for name in reader.get_variable_to_shape_map() if name.startswith("weight_average/by_path/")}
    assert set(averages) == {k for k in tuned if not k.startswith(("text_encoder/", "aligner/"))
                             and "seed_generator" not in k}
    assert all(np.array_equal(tuned[k], averages[k]) for k in averages)
    trained = build_model(tuned_config, len(vocabulary))
    tf.train.Checkpoint(model=trained).restore(latest).expect_partial()
    trained = _weights(trained)
    assert all(np.array_equal(trained[k], source[k]) for k in frozen)
    steps_away = [np.abs(trained[k] - source[k]).max() - np.abs(tuned[k] - source[k]).max() for k in moved]
    assert np.mean(np.array(steps_away) > 0) > 0.9  # the average lags behind the weights it averages
    assert _digest(source_dir) == before  # the source run is only read

    # the same run resumed from its step-2 checkpoint (a copy of the run, as if stopped there): the resume
    # restores its own checkpoint, never reads the source again, and ends where the uninterrupted run did
    shutil.copytree(tmp_path / "run", tmp_path / "halves", ignore=shutil.ignore_patterns("run.lock", "ckpt-4.*"))
    checkpoints = tmp_path / "halves" / "checkpoints"
    # the state file a CheckpointManager reads: ckpt-2 the newest and only one (timestamps after the last
    # preserved one, or the manager lists no checkpoint)
    tf.compat.v1.train.update_checkpoint_state(
        str(checkpoints), str(checkpoints / "ckpt-2"), all_model_checkpoint_paths=[str(checkpoints / "ckpt-2")],
        all_model_checkpoint_timestamps=[time.time()], last_preserved_timestamp=time.time() - 1)
    shutil.rmtree(source_dir)
    summary = run(_config(prepared_cache, training={**settings, "init_from": str(source_dir)}), tmp_path / "halves",
                  resume=True, progress=False, echo=lambda _: None)
    assert summary["resumed_from"].endswith("ckpt-2") and summary["init_from"] is None
    assert json.loads((tmp_path / "halves" / "mel_stats.json").read_text()) == stats  # its own copy, kept
    resumed = _weights(load_model_from_run(tmp_path / "halves")[1])
    assert resumed.keys() == tuned.keys()
    assert all(np.array_equal(tuned[k], resumed[k]) for k in tuned)
    # a resume that would drop the average (or start one midway) is refused, naming the key
    with pytest.raises(WorkdirError, match="weight average.*training.ema_decay: 0.0"):
        run(_config(prepared_cache, training={**settings, "ema_decay": 0.0}), tmp_path / "halves", resume=True,
            progress=False, echo=lambda _: None)


def test_a_grown_symbol_set_gets_fresh_rows_for_the_new_symbols_only(prepared_cache, source_run, tmp_path):
    from myxtts.data.mel_stats import MelStats
    from myxtts.model import build_model
    from myxtts.synthesis.run_files import load_model_from_run, save_run
    from myxtts.text import Vocabulary
    from myxtts.training.warm_start import warm_start

    cfg, _, vocabulary = load_model_from_run(source_run)
    dropped = vocabulary.symbols[10]
    small = Vocabulary(vocabulary.kind, vocabulary.cleaner, vocabulary.phoneme_language,
                       [s for s in vocabulary.symbols if s != dropped])
    source_model = build_model(cfg, len(small))
    save_run(tmp_path / "small", cfg, source_model, small, MelStats.load(source_run / "mel_stats.json"))
    run_cfg = _config(prepared_cache, training={"init_from": str(tmp_path / "small")})
    model = build_model(run_cfg, len(vocabulary))
    fresh = model.text_encoder.embedding.embeddings.numpy().copy()
    result = warm_start(run_cfg, model, vocabulary, ["en"], tmp_path / "run", echo=lambda _: None, record=False)
    assert result["new_symbols"] == [dropped]
    table = model.text_encoder.embedding.embeddings.numpy()
    source_table = source_model.text_encoder.embedding.embeddings.numpy()
    for row, symbol in enumerate(small.symbols):  # rows follow the symbols, not the positions
        np.testing.assert_array_equal(table[vocabulary.symbol_to_id[symbol]], source_table[row])
    np.testing.assert_array_equal(table[10], fresh[10])


@pytest.mark.parametrize("change, message", [
    ({"model": {"d_model": 48}}, "model.d_model: source 32, this run 48"),
    ({"model": {"decoder_conv_blocks": 3}}, "model.decoder_conv_blocks: source 2, this run 3"),
    ({"model": TINY_TINY_AR}, "parallel decoder"),
])
def test_another_model_is_a_clear_error_naming_the_difference(prepared_cache, source_run, tmp_path, change, message):
    from myxtts.training import run
    from myxtts.training.warm_start import WarmStartError

    cfg = _config(prepared_cache, model=change.get("model"), training={"init_from": str(source_run)})
    with pytest.raises(WarmStartError, match=message):
        run(cfg, tmp_path / "run", progress=False, echo=lambda _: None)
    assert not list((tmp_path / "run").glob("checkpoints/ckpt-*"))


def test_resuming_a_run_without_the_mel_discriminator_with_one_is_refused(prepared_cache, source_run, tmp_path):
    """Its checkpoint has no discriminator to resume: a clear error naming both ways on, nothing written."""
    from myxtts.training import run
    from myxtts.training.trainer import WorkdirError

    workdir = tmp_path / "run"
    shutil.copytree(source_run, workdir, ignore=shutil.ignore_patterns("run.lock"))
    before = _digest(workdir)
    cfg = _config(prepared_cache, model={"mel_adversarial_weight": 0.5}, training={"max_steps": 8})
    with pytest.raises(WorkdirError, match="without the mel discriminator.*--init-from"):
        run(cfg, workdir, resume=True, progress=False, echo=lambda _: None)
    assert _digest(workdir) == before


@pytest.mark.parametrize("data", [{"self_reference_share": 0.5}, {"voice_warp": 0.1}, {"batch_frames": 1800}],
                         ids=["a_batch_component_more", "a_graph_the_checkpoint_does_not_hold", "other_batch_shapes"])
def test_resuming_with_other_data_settings_is_refused_naming_them(prepared_cache, source_run, tmp_path, data):
    """The checkpoint's data iterator cannot continue in another pipeline (TensorFlow failed at the first batch, at the
    restore, or on a batch shape never compiled): a clear error naming the key, nothing written; where the files are
    and how fast they are read may change."""
    from myxtts.training import run
    from myxtts.training.checkpoint import check_data_resumable
    from myxtts.training.trainer import WorkdirError

    workdir = tmp_path / "run"
    shutil.copytree(source_run, workdir, ignore=shutil.ignore_patterns("run.lock"))
    before = _digest(workdir)
    key, value = next(iter(data.items()))
    cfg = trainer_config(prepared_cache, data={"num_buckets": 1, "validation_size": 0, **data},
                         model=SMALL, audio={"griffin_lim_iters": 4}, training={"max_steps": 8})
    with pytest.raises(WorkdirError, match=rf"data.{key}: .* -> {value}\).*config.yaml.*--init-from"):
        run(cfg, workdir, resume=True, progress=False, echo=lambda _: None)
    assert _digest(workdir) == before
    latest = str(workdir / "checkpoints" / "ckpt-6")
    elsewhere = trainer_config(prepared_cache, data={"num_buckets": 1, "validation_size": 0, "num_workers": 1,
                                                     "prefetch_buffer_size": 1})  # another machine: the same batches
    check_data_resumable(workdir / "config.yaml", elsewhere, workdir / "checkpoints", latest, workdir)


def test_pitch_conditioning_warm_starts_from_a_model_without_it_trains_and_speaks(prepared_cache, source_run,
                                                                                     tmp_path):
    """The pitch modules start fresh (the rest copied), the pitch loss is trained on the clips' own F0 without a
    retrace, the run synthesises with its predicted pitch; resuming it without pitch, or the source with it, is
    refused."""
    from myxtts.synthesis import Synthesizer
    from myxtts.training import run
    from myxtts.training.trainer import WorkdirError

    pitch = {"pitch_conditioning": True}
    summary = run(_config(prepared_cache, model=pitch, training={"init_from": str(source_run)}), tmp_path / "run",
                  progress=False, echo=lambda _: None)
    assert summary["retraces_after_warmup"] == 0 and summary["updates"] == 4
    record = json.loads((tmp_path / "run" / "init_from.json").read_text())
    assert record["fresh_variables"] and record["variables"] == len(_weights(Synthesizer.from_run(source_run).model))
    assert all(path.split("/")[1] in ("pitch_predictor", "pitch_embedding") for path in record["fresh_variables"])
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    pitch_losses = [r["pitch"] for r in records if r["split"] == "train"]
    assert len(pitch_losses) == 4 and all(0 < value < 10 for value in pitch_losses)
    synthesizer = Synthesizer.from_run(tmp_path / "run", truncate_long=True)  # its predicted pitch; 4 steps: long
    texts = ["A short one.", "The model reads this longer sentence aloud."]
    results = synthesizer.synthesize(texts, bundled_wavs(3)[2], batch_size=1)
    assert [r.frames > 0 and np.isfinite(r.waveform).all() for r in results] == [True, True]
    traced = synthesizer.tracing_count()
    again = synthesizer.synthesize(texts, bundled_wavs(3)[2], batch_size=1)
    assert synthesizer.tracing_count() == traced  # compiled once per shape
    np.testing.assert_allclose(again[1].mel, results[1].mel, atol=1e-5)
    with pytest.raises(WorkdirError, match="trained with pitch conditioning"):
        run(_config(prepared_cache, training={"max_steps": 6}), tmp_path / "run", resume=True, progress=False,
            echo=lambda _: None)
    with pytest.raises(WorkdirError, match="trained without the pitch level predictor.*--init-from"):
        run(_config(prepared_cache, model={**pitch, "pitch_level": True}, training={"max_steps": 6}),
            tmp_path / "run", resume=True, progress=False, echo=lambda _: None)
    resumed = tmp_path / "source"
    shutil.copytree(source_run, resumed, ignore=shutil.ignore_patterns("run.lock"))
    with pytest.raises(WorkdirError, match="trained without pitch conditioning.*--init-from"):
        run(_config(prepared_cache, model=pitch, training={"max_steps": 8}), resumed, resume=True, progress=False,
            echo=lambda _: None)


def test_bad_sources_are_clear_errors(prepared_cache, source_run, tmp_path):
    from myxtts.training import run
    from myxtts.training.warm_start import WarmStartError

    def attempt(init_from, workdir="run"):
        cfg = _config(prepared_cache, training={"init_from": str(init_from)})
        with pytest.raises(WarmStartError) as caught:
            run(cfg, tmp_path / workdir, progress=False, echo=lambda _: None)
        return str(caught.value)

    assert "neither a run directory nor a checkpoint prefix" in attempt(tmp_path / "nowhere")
    partial = tmp_path / "partial"
    shutil.copytree(source_run / "checkpoints", partial / "checkpoints")  # weights without their config
    assert "no config.yaml" in attempt(partial)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "No checkpoint" in attempt(empty)
    # a checkpoint prefix works as a source, and so does the checkpoints folder
    from myxtts.model import build_model
    from myxtts.synthesis.run_files import load_model_from_run
    from myxtts.training.warm_start import warm_start

    _, _, vocabulary = load_model_from_run(source_run)
    prefix = tf.train.latest_checkpoint(str(source_run / "checkpoints"))
    for source in (prefix, str(source_run / "checkpoints")):
        cfg = _config(prepared_cache, training={"init_from": source})
        result = warm_start(cfg, build_model(cfg, len(vocabulary)), vocabulary, ["en"], tmp_path, record=False)
        assert result["checkpoint"] == prefix


def test_the_normalisation_a_warm_start_reads(prepared_cache, source_run, tmp_path):
    from myxtts.data.mel_stats import MelStats
    from myxtts.training.warm_start import WarmStartError, warm_start_mel_stats

    source_stats = MelStats.load(source_run / "mel_stats.json")
    for source in (source_run, source_run / "checkpoints", tf.train.latest_checkpoint(str(source_run / "checkpoints"))):
        kept = warm_start_mel_stats(_config(prepared_cache, training={"init_from": str(source)}), tmp_path, False)
        np.testing.assert_array_equal(kept.mean, source_stats.mean)
    own = _config(prepared_cache, training={"init_from": str(source_run), "init_mel_stats": "corpus"})
    assert warm_start_mel_stats(own, tmp_path, False) is None  # the pipeline then reads the manifest's
    assert warm_start_mel_stats(_config(prepared_cache), tmp_path, False) is None  # no warm start
    bare = tmp_path / "bare"  # a run directory without its statistics: which normalisation is unknown
    shutil.copytree(source_run, bare, ignore=shutil.ignore_patterns("run.lock", "mel_stats.json"))
    with pytest.raises(WarmStartError, match="no mel_stats.json beside .*init_mel_stats: corpus"):
        warm_start_mel_stats(_config(prepared_cache, training={"init_from": str(bare)}), tmp_path, False)
    with pytest.raises(ValueError, match="init_mel_stats"):
        _config(prepared_cache, training={"init_mel_stats": "base"})


def test_text_front_end_checks():
    from myxtts.text import Vocabulary
    from myxtts.training.warm_start import WarmStartError, check_text

    phonemes = Vocabulary("phonemes", "english", "en-us")
    characters = Vocabulary("characters", "english")
    assert check_text(phonemes, phonemes, ["en"], ["en"], "base") == []
    with pytest.raises(WarmStartError, match="reads phonemes, this config reads characters"):
        check_text(characters, phonemes, ["en"], ["en"], "base")
    with pytest.raises(WarmStartError, match="this corpus is in de, which base was never trained on"):
        check_text(Vocabulary("phonemes", "basic", "de"), phonemes, ["de"], ["en"], "base")
    fewer = Vocabulary("phonemes", "english", "en-us", phonemes.symbols[:-2])
    with pytest.raises(WarmStartError, match="2 symbol\\(s\\) this run's vocabulary lacks"):
        check_text(fewer, phonemes, ["en"], ["en"], "base")
    assert check_text(phonemes, fewer, ["en"], ["en"], "base") == phonemes.symbols[-2:]


def test_freeze_names_are_checked_against_the_model(make_config):
    from myxtts.config import MODEL_MODULES
    from myxtts.model import build_model

    with pytest.raises(ValueError, match="'text_encodr' is not a module of the model; modules: text_encoder"):
        make_config(training={"freeze": ["text_encodr"]})
    with pytest.raises(ValueError, match="nothing would train"):
        make_config(training={"freeze": list(MODEL_MODULES)})
    with pytest.raises(ValueError, match="expected a list"):
        make_config(training={"freeze": "decoder"})
    for model_keys in (TINY_TINY, TINY_TINY_AR):  # the config's module list is the model's, for both decoders
        model = build_model(make_config(model=model_keys), 40)
        top = {layer.name for layer in model.layers}
        assert top == set(MODEL_MODULES), model_keys["decoder"]


def test_pack_ships_the_model_alone_and_both_synthesis_and_warm_start_take_it(source_run, tmp_path):
    from click.testing import CliRunner

    from myxtts.cli import main
    from myxtts.model import build_model
    from myxtts.synthesis import Synthesizer
    from myxtts.training.warm_start import warm_start

    packed = tmp_path / "packed"
    result = CliRunner().invoke(main, ["pack", "--run", str(source_run), "--out", str(packed)])
    assert result.exit_code == 0, result.output
    record = json.loads((packed / "model.json").read_text())
    assert record["step"] == 6 and record["checkpoint"] == "ckpt-6" and record["training_minutes"] > 0
    size = sum(p.stat().st_size for p in (packed / "checkpoints").iterdir())
    trained = sum(p.stat().st_size for p in (source_run / "checkpoints").glob("ckpt-6.*"))
    assert size < 0.5 * trained  # the weights without Adam's two slots per variable
    assert {"config.yaml", "vocab.json", "mel_stats.json", "corpus.json"} <= {p.name for p in packed.iterdir()}
    text, reference = "The model reads this sentence.", bundled_wavs(3)[2]
    source_synthesizer = Synthesizer.from_run(source_run)
    original = source_synthesizer.synthesize([text], reference)[0]
    shipped_synthesizer = Synthesizer.from_run(packed)
    shipped = shipped_synthesizer.synthesize([text], reference)[0]
    np.testing.assert_allclose(shipped.mel, original.mel, atol=1e-5)
    cfg, vocabulary = shipped_synthesizer.cfg, shipped_synthesizer.vocabulary
    run_cfg = dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, init_from=str(packed)))
    model = build_model(run_cfg, len(vocabulary))
    warm_start(run_cfg, model, vocabulary, ["en"], tmp_path, echo=lambda _: None, record=False)
    source = _weights(source_synthesizer.model)
    assert all(np.array_equal(value, source[key]) for key, value in _weights(model).items())
    again = CliRunner().invoke(main, ["pack", "--run", str(source_run), "--out", str(packed)])
    assert again.exit_code == 2 and "already holds a packed model" in again.output


def test_the_fine_tuning_recipe_builds_the_base_recipes_model():
    from myxtts.config import load_config
    from myxtts.training.warm_start import check_compatible

    configs = Path(__file__).resolve().parents[2] / "configs"
    base, finetune = load_config(configs / "base-real.yaml"), load_config(configs / "finetune.yaml")
    check_compatible(finetune, base, "ckpt", "the base recipe")  # raises naming any key that differs
    assert finetune.init_from == (configs.parent / "pretrained" / "base-real-tiny").resolve()
    assert base.data.reference_frames == finetune.data.reference_frames >= 256  # ~3 s references
