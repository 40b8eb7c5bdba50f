"""Trainer end to end on the bundled corpus: zero traces after warm-up, falling loss, NaN guard,
checkpoint fallback, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import yaml

from myxtts.config import config_from_dict
from myxtts.diagnostics import FIRST_TRACE

# the trainer tests' model: the default parallel decoder at its smallest (its steps trace and run ~20% faster than
# the autoregressive one's); TINY_TINY_AR runs the trainer with the other decoder
TINY_TINY = {"preset": "tiny", "decoder": "parallel", "reduction_factor": 1, "d_model": 32, "num_heads": 2,
             "ff_dim": 64, "text_layers": 1, "conditioning_layers": 1, "postnet_channels": 32, "postnet_layers": 2,
             "decoder_conv_blocks": 2, "decoder_layers": None, "prenet_dim": None}
TINY_TINY_AR = {**TINY_TINY, "decoder": "autoregressive", "reduction_factor": 2, "decoder_conv_blocks": None,
                "decoder_layers": 1, "prenet_dim": 32}


def trainer_config(prepared, data=None, model=None, training=None, audio=None):
    """The prepared cache's config with overrides (tiny-tiny model by default)."""
    raw = prepared.to_dict()
    raw["data"].update(corpus_path=str(prepared.corpus_path), cache_dir=str(prepared.cache_dir), **(data or {}))
    raw["audio"].update(**(audio or {}))
    raw["model"].update({**TINY_TINY, **(model or {})})
    raw["training"].update(**(training or {}))
    return config_from_dict(raw, base_dir=prepared.base_dir)


def write_config(cfg, path: Path) -> Path:
    from myxtts.config import save_config
    save_config(cfg, path)
    return path


@pytest.mark.slow
def test_cli_trains_40_shuffled_steps_without_a_single_retrace(prepared_cache, tmp_path, monkeypatch):
    """The autoregressive decoder through the whole trainer (the other trainer tests run the parallel one)."""
    from click.testing import CliRunner

    from myxtts.cli import main
    # listening here is about its compiled functions and records; what the recognizer hears: test_train_listening
    monkeypatch.setattr("myxtts.evaluation.listening_measures.recognizer_available", lambda: False)
    # 2 buckets: shuffled across shapes all the same; each further bucket is one more train + validate warm-up
    training = {"max_steps": 40, "learning_rate": 0.003, "warmup_steps": 10, "log_every": 10, "validate_every": 20,
                "checkpoint_every": 20, "summary_every": 20, "strict_retracing": True, "listen_sentences": 2}
    cfg = trainer_config(prepared_cache, data={"num_buckets": 2}, model=TINY_TINY_AR, audio={"griffin_lim_iters": 4},
                         training=training)
    config_path = write_config(cfg, tmp_path / "train.yaml")
    result = CliRunner().invoke(main, ["train", "--config", str(config_path), "--workdir", str(tmp_path / "run"),
                                       "--no-progress"], standalone_mode=False, catch_exceptions=False)
    summary = result.return_value
    assert "Training summary" in result.output and "retraces after warm-up: 0" in result.output
    assert summary["steps"] == 40 and summary["retraces_after_warmup"] == 0
    shapes = summary["batch_shapes"]
    assert shapes >= 2  # variable-length buckets really were exercised
    assert all(info["traces"] == 1 for info in summary["traces"].values())  # traced once each, at warm-up
    # train per shape, + validate per validated shape, + the summary function, + the listening synthesis:
    # its duration function and a decode function per mel bucket
    from myxtts.synthesis.decoding import mel_buckets

    listening = [name for name in summary["traces"] if name.startswith("listening_")]
    assert len(listening) == 2 + len(mel_buckets(cfg.data.max_mel_frames))  # latents, durations, decode per bucket
    # a validate step only for each bucket the validation clips fall in: no other shape ever reaches it
    from myxtts.data.pipeline import InputPipeline

    validated = sorted(name.split(": ")[1] for name in summary["traces"] if name.startswith("validate_step["))
    emitted = sorted({f"batch {b} x text {t} x mel {m}]" for b, t, m in (
        (*batch["tokens"].shape, batch["mel"].shape[1]) for batch in InputPipeline(cfg, "validation").dataset(False))})
    assert validated == emitted and len(emitted) < shapes  # the 2 validation clips fill 1 of the 2 buckets
    assert summary["warmup_traces"] == shapes + len(validated) + 1 + len(listening)
    # warm-up calls go through the retrace monitor: retraces.jsonl holds exactly those first traces, all expected
    events = [json.loads(line) for line in (tmp_path / "run" / "retraces.jsonl").read_text().splitlines()]
    assert len(events) == summary["warmup_traces"] and all(event["cause"] == FIRST_TRACE for event in events)
    assert summary["loss_last"] < 0.8 * summary["loss_first"]  # learns on real speech
    assert summary["validation_loss"] is not None and np.isfinite(summary["validation_loss"])
    run = tmp_path / "run"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["split"] == "train"]
    assert train[-1]["step"] == 40 and all(r["traces_after_warmup"] == 0 for r in train)
    assert {"total", "learning_rate", "grad_norm", "step_time", "input_wait_share", "mel_frames_per_second"} <= set(train[0])
    assert any(r["split"] == "validation" for r in records)
    assert [r["step"] for r in records if r["split"] == "listening"] == [20, 40]  # free-running, at validation
    assert yaml.safe_load((run / "config.yaml").read_text())["training"]["max_steps"] == 40
    assert (run / "vocab.json").is_file() and tf.train.latest_checkpoint(str(run / "checkpoints")).endswith("ckpt-40")
    assert list((run / "tensorboard" / "validation").glob("events.*"))
    # a second run in the same workdir without --resume is refused with a clear message
    again = CliRunner().invoke(main, ["train", "--config", str(config_path), "--workdir", str(run)])
    assert again.exit_code == 2 and "--resume" in again.output


def test_nan_guard_stops_and_keeps_last_good_checkpoint(prepared_cache, tmp_path):
    """With the mel discriminator on: a poisoned batch skips its update too, and it is checkpointed with the run."""
    from myxtts.training import NonFiniteLossError, run
    adversarial = {"mel_adversarial_weight": 0.5, "mel_feature_matching_weight": 1.0, "mel_discriminator_channels": 4}
    # no validation split: the run stops at step 4, before any validation (and nothing need trace one)
    cfg = trainer_config(prepared_cache, data={"num_buckets": 1, "validation_size": 0}, model=adversarial, training={
        "max_steps": 20, "checkpoint_every": 2, "max_nonfinite_steps": 2, "validate_every": 100,
        "summary_every": 0, "log_every": 1})

    def poison(step, batch):
        if step < 2:
            return batch
        mel = batch["mel"].numpy()
        mel[:, 0, 0] = np.inf
        return {**batch, "mel": tf.constant(mel)}

    with pytest.raises(NonFiniteLossError, match="2 steps in a row") as caught:
        run(cfg, tmp_path / "run", progress=False, batch_filter=poison, echo=lambda _: None)
    assert "ckpt-2" in str(caught.value)
    latest = tf.train.latest_checkpoint(str(tmp_path / "run" / "checkpoints"))
    assert latest.endswith("ckpt-2")  # no checkpoint after the poisoned steps
    reader = tf.train.load_checkpoint(latest)
    names = [name for name, _ in tf.train.list_variables(latest)]
    for owner in ("model/", "mel_discriminator/", "mel_discriminator_optimizer/"):
        values = [reader.get_tensor(name) for name in names if name.startswith(owner)]
        assert values and all(np.isfinite(v).all() for v in values if np.issubdtype(np.asarray(v).dtype, np.floating))


def test_checkpoint_falls_back_when_newest_is_half_written(tmp_path):
    from myxtts.training.checkpoint import Checkpoints
    variable = tf.Variable([1.0, 2.0])
    iterator = iter(tf.data.Dataset.range(100))
    checkpoints = Checkpoints(tmp_path, keep=3, weights=variable, iterator=iterator)
    next(iterator)
    checkpoints.save(1)
    variable.assign([3.0, 4.0])
    next(iterator)
    checkpoints.save(2)
    # a crash while writing step 3: files exist, the state file was never updated -> step 2 stays latest
    (tmp_path / "ckpt-3.index").write_bytes(b"partial")
    fresh_variable, fresh_iterator = tf.Variable([0.0, 0.0]), iter(tf.data.Dataset.range(100))
    restored = Checkpoints(tmp_path, keep=3, weights=fresh_variable, iterator=fresh_iterator)
    assert restored.restore_latest().endswith("ckpt-2")
    assert fresh_variable.numpy().tolist() == [3.0, 4.0] and int(next(fresh_iterator)) == 2
    # the newest named checkpoint itself truncated -> the previous one is restored
    data_file = next(tmp_path.glob("ckpt-2.data-*"))
    data_file.write_bytes(data_file.read_bytes()[:5])
    older_variable = tf.Variable([0.0, 0.0])
    older = Checkpoints(tmp_path, keep=3, weights=older_variable, iterator=iter(tf.data.Dataset.range(100)))
    assert older.restore_latest().endswith("ckpt-1") and older_variable.numpy().tolist() == [1.0, 2.0]


@pytest.mark.slow
def test_trainer_with_steps_per_execution_runs_blocks_without_retracing(prepared_cache, tmp_path, monkeypatch):
    """training.steps_per_execution = 2 on several buckets, the mel discriminator on: one traced call per bucket runs
    2 steps (its losses averaged over the block like the others); logs, validation, summaries and checkpoints land on
    the first block boundary at or after their interval; 0 retraces.
    The run is self-contained: mel_stats.json (the cache's train-split statistics, what the batches were normalised
    with) sits next to vocab.json; the summary images / Griffin-Lim audio get denormalised (real) log mels."""
    from myxtts.data.cache import FeatureCache
    from myxtts.data.mel_stats import MelStats
    from myxtts.training import reporting, run

    captured = []
    original = reporting.MetricsLog.images_and_audio

    def capture(self, step, mel, target, alignment, audio, sample_rate):
        captured.append((step, mel, target, audio))
        return original(self, step, mel, target, alignment, audio, sample_rate)

    monkeypatch.setattr(reporting.MetricsLog, "images_and_audio", capture)
    adversarial = {"mel_adversarial_weight": 0.5, "mel_feature_matching_weight": 1.0, "mel_discriminator_channels": 4}
    # a short Griffin-Lim: the summary's audio is only checked finite
    cfg = trainer_config(prepared_cache, data={"num_buckets": 2}, model=adversarial, audio={"griffin_lim_iters": 4},
                         training={"max_steps": 12, "steps_per_execution": 2, "log_every": 3, "validate_every": 5,
                                   "checkpoint_every": 5, "summary_every": 7, "strict_retracing": True,
                                   "warmup_steps": 2})
    summary = run(cfg, tmp_path / "run", progress=False, echo=lambda _: None)
    assert summary["steps"] == 12 and summary["updates"] == 12 and summary["retraces_after_warmup"] == 0
    train_names = [name for name in summary["traces"] if name.startswith("train_")]
    assert len(train_names) == summary["batch_shapes"] >= 2
    assert all(name.startswith("train_2_steps[") for name in train_names)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["split"] == "train"] == [2, 4, 6, 10, 12]
    assert [r["step"] for r in records if r["split"] == "validation"] == [6, 10, 12]
    assert not [r for r in records if r["split"] == "listening"]  # listen_sentences 0 (the 40-step test listens)
    assert all(np.isfinite(r["total"]) for r in records)
    assert all(r["mel_discriminator"] > 0 for r in records if r["split"] == "train")
    checkpoints = sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("ckpt-*.index"))
    assert checkpoints == ["ckpt-10.index", "ckpt-12.index", "ckpt-6.index"]

    cache = FeatureCache.load(prepared_cache)
    stats = MelStats.load(tmp_path / "run" / "mel_stats.json")
    np.testing.assert_array_equal(stats.mean, cache.mel_mean)
    np.testing.assert_array_equal(stats.std, cache.mel_std)
    assert [step for step, *_ in captured] == [8]  # the first block boundary at or after step 7
    _, mel, target, audio = captured[-1]
    # the target image is the cached (real) log mel of the first validation utterance, not its normalised form
    matches = [row for row in cache.split_indices("validation") if cache.mel_lengths[row] == target.shape[0]]
    assert any(np.allclose(target, cache.utterance_mel(row).astype(np.float32), atol=1e-4) for row in matches)
    assert mel.shape == target.shape and audio is not None and np.all(np.isfinite(audio))
    # a briefly trained model's normalised output is near 0: denormalised, it sits at the corpus' level (mean ~ -5)
    assert abs(float(mel.mean()) - float(cache.mel_mean.mean())) < 2.0


def test_resuming_with_a_misaligned_steps_per_execution_is_a_clear_error():
    from myxtts.training.trainer import check_block_alignment
    check_block_alignment(0, 12, 2)
    check_block_alignment(250, 1000, 2)
    with pytest.raises(ValueError, match=r"Resuming at step 250: training.max_steps \(1000\)"):
        check_block_alignment(250, 1000, 4)  # 250 + 4 x 188 = 1002: past max_steps


def test_a_signal_asks_the_loop_to_stop_and_a_second_one_acts_at_once():
    """The trainer's stop request (its use end to end: test_locks): the first SIGINT / SIGTERM is only recorded, the
    same signal again at once is a duplicate, again later it reaches the handler there was before (here Python's
    KeyboardInterrupt); restore() puts the handlers back; an ignored signal stays ignored; off, nothing is touched."""
    import signal
    import threading

    from myxtts.training.interrupt import StopOnSignals

    assert threading.current_thread() is threading.main_thread()  # pytest and its workers run tests here
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever the test runner had
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        interrupt = StopOnSignals(repeat_window=3600.0)  # every repeat counts as a duplicate
        interrupt.install()
        signal.raise_signal(signal.SIGTERM)  # the handler runs before raise_signal returns
        signal.raise_signal(signal.SIGTERM)
        assert interrupt.requested == "SIGTERM"
        interrupt.restore()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.getsignal(signal.SIGTERM) is sigterm

        interrupt = StopOnSignals(repeat_window=0.0)  # every repeat is a second request
        interrupt.install()
        try:
            signal.raise_signal(signal.SIGINT)
            assert interrupt.requested == "SIGINT"
            with pytest.raises(KeyboardInterrupt):
                signal.raise_signal(signal.SIGINT)
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back before acting
        finally:
            interrupt.restore()

        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a background job's Ctrl-C
        interrupt = StopOnSignals()
        interrupt.install()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN and signal.getsignal(signal.SIGTERM) is not sigterm
        interrupt.restore()
        off = StopOnSignals(enabled=False)
        off.install()
        assert signal.getsignal(signal.SIGTERM) is sigterm and off.requested is None
    finally:
        signal.signal(signal.SIGINT, outer)
        signal.signal(signal.SIGTERM, sigterm)
