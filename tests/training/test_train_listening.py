"""Listening while training: validation sentences synthesised free-running at each validation, compiled once at
warm-up, logged to TensorBoard (audio, mel, alignment) and metrics.jsonl (pocketsphinx CER when installed)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from test_parallel_model import parallel_config


def _events(folder) -> dict[int, dict[str, str]]:
    """step -> {tag: plugin name} of every TensorBoard event file in ``folder``."""
    seen: dict[int, dict[str, str]] = {}
    for path in sorted(folder.glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                seen.setdefault(event.step, {})[value.tag] = value.metadata.plugin_data.plugin_name
    return seen


@pytest.mark.slow
def test_listening_while_training_parallel_decoder(prepared_cache, tmp_path):
    from myxtts.evaluation.listening_measures import recognizer_available
    from myxtts.synthesis import Synthesizer
    from myxtts.training import Trainer

    training = {"max_steps": 2, "warmup_steps": 1, "log_every": 1, "validate_every": 1, "checkpoint_every": 2,
                "summary_every": 0, "strict_retracing": True, "listen_sentences": 2}
    # a short Griffin-Lim: the listening's measures are asserted as measured, not their values; 640 frames still hold
    # both validation clips (608 and 154 frames) in 5 decode buckets to warm up
    cfg = parallel_config(prepared_cache, data={"num_buckets": 1, "max_mel_frames": 640}, training=training,
                          audio={"griffin_lim_iters": 4})
    lines: list[str] = []
    trainer = Trainer(cfg, tmp_path / "run", progress=False, echo=lines.append, listen_with=Synthesizer)
    summary = trainer.run()

    listener = trainer.listener
    assert listener is not None and len(listener.sentences) == 2  # the validation split holds 2 utterances
    assert {s.id for s in listener.sentences} == {trainer.validation_pipeline.source.ids[r]
                                                  for r in trainer.validation_pipeline.rows}
    assert all(s.text and s.reference_id != s.id for s in listener.sentences)
    # compiled at warm-up (the voices' latents, one durations function, one decode function per mel bucket),
    # never after
    assert listener.traced > 0 and listener.synthesizer.tracing_count() == listener.traced
    names = [name for name in summary["traces"] if name.startswith("listening_")]
    assert len(names) == 2 + len(listener.synthesizer.decoder.buckets)
    assert all(summary["traces"][name]["traces"] == 1 for name in names)
    assert summary["retraces_after_warmup"] == 0 and "listening" in trainer.warmup

    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    listened = [r for r in records if r["split"] == "listening"]
    assert [r["step"] for r in listened] == [1, 2]
    for record in listened:
        assert record["traces_after_warmup"] == 0
        assert record["frames_0"] > 0 and record["frames_1"] > 0
        if recognizer_available():
            assert record["cer"] >= 0 and record["cer_0"] >= 0 and record["cer_1"] >= 0
            assert isinstance(record["heard_0"], str)

    events = _events(tmp_path / "run" / "tensorboard" / "listening")
    for step in (1, 2):
        tags = events[step]
        for index in (0, 1):
            assert tags[f"sentence_{index}/audio"] == "audio"
            assert tags[f"sentence_{index}/mel"] == "images"
            assert tags[f"sentence_{index}/alignment"] == "images"
        assert "frames_0" in tags and ("cer" in tags) == recognizer_available()


def test_sentence_and_reference_choice():
    from myxtts.data.mel_stats import MelStats, reference_crop
    from myxtts.training.listener import choose_rows, reference_row

    speakers = np.array([0, 0, 1, 1, 2, 0])
    assert choose_rows(np.array([1, 3, 5, 4]), speakers, 3) == [1, 3, 4]  # one per speaker first
    assert choose_rows(np.array([0, 1, 2]), speakers, 4) == [0, 2, 1]
    assert reference_row(1, speakers) == 5 and reference_row(5, speakers) == 0  # the next of the speaker, wrapping
    assert reference_row(4, speakers) == 4  # alone
    stats = MelStats(np.full([2], -5.0, np.float32), np.full([2], 2.0, np.float32))
    mel, length = reference_crop(np.full([3, 2], -1.0, np.float16), 5, stats)
    assert length == 3 and mel.shape == (5, 2) and (mel[:3] == 2.0).all() and (mel[3:] == 0).all()
    mel, length = reference_crop(np.arange(20, dtype=np.float32).reshape(10, 2), 4, stats)
    assert length == 4 and mel[0, 0] == (6 + 5) / 2  # the middle 4 of 10 frames start at frame 3


@pytest.mark.parametrize("value", [-1, 5])
def test_listen_sentences_range(value):
    from myxtts.config import config_from_dict

    with pytest.raises(ValueError, match="training.listen_sentences"):
        config_from_dict({"training": {"listen_sentences": value}})


def test_a_trainer_given_no_synthesizer_says_it_does_not_listen(prepared_cache):
    from myxtts.training.listener import Listener

    cfg = parallel_config(prepared_cache, training={"listen_sentences": 2})
    lines: list[str] = []
    assert Listener.create(cfg, None, None, None, pipeline=object(), chief=True, synthesizer=None,
                           echo=lines.append) is None
    assert len(lines) == 1 and "listening: skipped" in lines[0] and "training.listen_sentences: 0" in lines[0]
