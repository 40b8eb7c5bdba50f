"""The parallel model on real clips: exact durations in several buckets, training without retraces, the
wall-clock budget, and the config rules of the two decoders."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from myxtts.config import config_from_dict

PARALLEL_TINY = {"preset": "tiny", "decoder": "parallel", "reduction_factor": 1, "d_model": 32, "num_heads": 2,
                 "ff_dim": 64, "text_layers": 1, "conditioning_layers": 1, "postnet_channels": 32,
                 "postnet_layers": 2, "decoder_conv_blocks": 2}


def parallel_config(prepared, data=None, model=None, training=None, audio=None):
    raw = prepared.to_dict()
    raw["data"].update(corpus_path=str(prepared.corpus_path), cache_dir=str(prepared.cache_dir), **(data or {}))
    raw["audio"].update(**(audio or {}))
    raw["model"] = {**PARALLEL_TINY, **(model or {})}
    raw["training"].update(**(training or {}))
    return config_from_dict(raw, base_dir=prepared.base_dir)


def warm_started(prepared, model: dict):
    """The plain tiny parallel model, and one with ``model``'s keys warm-started from it (``copy_weights``), seeded:
    (plain, the new model, its config, the paths of its fresh variables). Every plain weight is copied, none dropped."""
    import keras

    from myxtts.model import build_model
    from myxtts.text import Vocabulary
    from myxtts.training.warm_start import copy_weights

    keras.utils.set_random_seed(1)
    vocabulary = Vocabulary.load(prepared.cache_dir / "vocab.json")
    plain = build_model(parallel_config(prepared), len(vocabulary))
    cfg = parallel_config(prepared, model=model)
    grown = build_model(cfg, len(vocabulary))
    copied, fresh, dropped = copy_weights(grown, plain, vocabulary, vocabulary)
    assert copied == len(plain.weights) and not dropped
    return plain, grown, cfg, fresh


def mel_loss_gradients(model, batch: dict, hard_alignment, variables: list) -> list:
    """The gradients of the masked L1 mel loss after the postnet on ``batch``, decoded through ``hard_alignment``
    (the model's own, from a forward pass), with respect to ``variables``."""
    mel, mel_lengths = tf.cast(batch["mel"], tf.float32), batch["mel_lengths"]
    frame_mask = tf.sequence_mask(mel_lengths, tf.shape(mel)[1], tf.float32)[..., None]  # [batch, frames, 1]
    with tf.GradientTape() as tape:
        text = model.encode_text(batch["tokens"], batch["token_lengths"])
        latents = model.encode_reference(batch["reference_mel"], batch["reference_lengths"])
        _, mel_after = model.decode(text, hard_alignment, mel_lengths, latents)
        loss = tf.reduce_sum(tf.abs(mel_after - mel) * frame_mask) / tf.reduce_sum(frame_mask)
    return tape.gradient(loss, variables)


def test_durations_sum_to_each_mel_length_on_real_clips_in_several_buckets(prepared_cache):
    from myxtts.data.pipeline import InputPipeline
    from myxtts.model import build_model
    from myxtts.text import Vocabulary

    cfg = parallel_config(prepared_cache)
    vocabulary = Vocabulary.load(cfg.cache_dir / "vocab.json")
    model = build_model(cfg, len(vocabulary))
    seen = {}
    for batch in InputPipeline(cfg, "train").dataset(repeat=False):
        seen.setdefault(tuple(batch["mel"].shape[:2]), batch)
    assert len(seen) >= 3  # several buckets of real, unequal lengths
    for batch in seen.values():
        outputs = model(batch, training=False)
        durations = outputs["durations"].numpy()
        mel_lengths, token_lengths = batch["mel_lengths"].numpy(), batch["token_lengths"].numpy()
        assert len(set(mel_lengths.tolist())) > 1 or len(mel_lengths) == 1
        np.testing.assert_array_equal(durations.sum(axis=1), mel_lengths)
        hard = outputs["hard_alignment"].numpy()
        for item, (tokens, frames) in enumerate(zip(token_lengths, mel_lengths)):
            assert (durations[item, :tokens] >= 1).all() and (durations[item, tokens:] == 0).all()
            path = hard[item, :frames].argmax(axis=1)
            assert (hard[item, :frames].sum(axis=1) == 1).all()  # each real frame on exactly one token
            assert path[0] == 0 and path[-1] == tokens - 1 and set(np.diff(path)) <= {0, 1}
            assert hard[item, frames:].sum() == 0
        soft = outputs["alignments"].numpy()
        np.testing.assert_allclose(soft[0, : mel_lengths[0], : token_lengths[0]].sum(axis=1), 1.0, rtol=1e-4)


@pytest.mark.slow
def test_parallel_training_stops_at_its_time_budget_without_retracing(prepared_cache, tmp_path):
    """A wall-clock budget stops training early at a checkpoint; a resume with the same budget trains no more (and
    compiles nothing), a larger one continues from where it stopped. (That a model learns through the trainer:
    test_train's 120-step run; the parallel model: test_voice_cloning, test_alignment.)"""
    from myxtts.training import run

    budget = {"max_steps": 100000, "learning_rate": 0.003, "warmup_steps": 10, "log_every": 10,
              "validate_every": 100000, "checkpoint_every": 100000, "summary_every": 0, "strict_retracing": True,
              "max_minutes": 0.02}
    # one bucket and no validation split: the point is the budget and the resume (bucketed, validated runs without
    # a retrace: test_train)
    cfg = parallel_config(prepared_cache, data={"num_buckets": 1, "validation_size": 0}, training=budget)
    first = run(cfg, tmp_path / "budget", progress=False, echo=lambda _: None)
    assert first["stopped"] == "max_minutes" and 0 < first["steps"] < 100000
    assert first["retraces_after_warmup"] == 0 and first["batch_shapes"] == 1
    assert first["checkpoint"].endswith(f"ckpt-{first['steps']}")
    again = run(cfg, tmp_path / "budget", resume=True, progress=False, echo=lambda _: None)
    assert again["stopped"] == "max_minutes" and again["steps_this_run"] == 0 and again["steps"] == first["steps"]
    assert again["warmup_seconds"] == 0  # nothing left to train: nothing compiled either
    more = parallel_config(prepared_cache, data={"num_buckets": 1, "validation_size": 0},
                           training=dict(budget, max_minutes=0.06))
    later = run(more, tmp_path / "budget", resume=True, progress=False, echo=lambda _: None)
    assert later["stopped"] == "max_minutes" and later["steps"] > first["steps"]
    assert later["retraces_after_warmup"] == 0


@pytest.mark.parametrize("model, message", [
    ({"decoder": "parallel", "reduction_factor": 2}, "reduction_factor' must be 1"),
    ({"decoder": "parallel", "reduction_factor": 1, "prenet_dim": 64}, "prenet_dim.*does nothing"),
    ({"decoder": "autoregressive", "decoder_conv_blocks": 3}, "decoder_conv_blocks.*does nothing"),
    ({"decoder": "autoregressive", "speaker_adaptive_norm": True}, "speaker_adaptive_norm.*does nothing"),
    ({"decoder": "autoregressive", "reference_tokens": 8}, "reference_tokens.*does nothing"),
    ({"decoder": "parallel", "reduction_factor": 1, "reference_tokens": -1}, "reference_tokens' must be >= 0"),
    ({"decoder": "parallel", "reduction_factor": 1, "reference_tokens": 300}, "reference_tokens.*reference_frames"),
    ({"decoder": "autoregressive", "guided_attention_weight": 1.0}, "guided_attention_weight"),
    ({"decoder": "parallel", "reduction_factor": 1, "decoder_conv_blocks": 0}, "decoder_conv_blocks"),
])
def test_decoder_specific_keys_are_checked(model, message):
    with pytest.raises(ValueError, match=message):
        config_from_dict({"model": model})


def test_a_checkpoint_of_the_earlier_design_is_a_clear_error(tmp_path):
    """A model saved with a decoder and no aligner (the free-attention autoregressive design) is named as such, and
    nothing is written."""
    import keras
    import yaml

    from myxtts.synthesis import RunError, Synthesizer
    from myxtts.model.restore import EARLIER_DESIGN, checkpoint_decoder_type

    earlier = tf.Module()
    earlier.decoder = tf.Module()
    earlier.decoder.cross_attention = tf.Variable(tf.zeros([4, 4]))
    earlier.text_encoder = tf.Module()
    earlier.text_encoder.embedding = tf.Variable(tf.zeros([8, 4]))
    prefix = tf.train.Checkpoint(model=earlier, optimizer=keras.optimizers.Adam()).save(str(tmp_path / "ckpt"))
    assert checkpoint_decoder_type(prefix) == EARLIER_DESIGN
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"model": {"preset": "tiny", "decoder": "autoregressive"}}))
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(RunError, match="earlier myxtts design.*train a new run"):
        Synthesizer.from_checkpoint(prefix, config)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_max_minutes_must_not_be_negative():
    with pytest.raises(ValueError, match="training.max_minutes"):
        config_from_dict({"training": {"max_minutes": -1}})


def test_parallel_loss_binarization_ramp():
    from myxtts.model.losses import binarization_schedule
    values = [float(binarization_schedule(tf.constant(step), 100, 50)) for step in (0, 100, 125, 150, 400)]
    assert values == [0.0, 0.0, 0.5, 1.0, 1.0]
    assert float(binarization_schedule(None, 100, 50)) == 1.0


@pytest.mark.slow
def test_parallel_synthesis_compiles_every_bucket_at_warm_up_and_never_again(prepared_cache, tmp_path, bundled_corpus):
    from myxtts.model import build_model
    from myxtts.synthesis import Synthesizer
    from myxtts.synthesis.run_files import save_run
    from myxtts.synthesis.decoding import SynthesisLengthError
    from myxtts.text import Vocabulary

    cfg = parallel_config(prepared_cache, audio={"griffin_lim_iters": 4})  # only the waveforms' lengths are asserted
    vocabulary = Vocabulary.load(cfg.cache_dir / "vocab.json")
    model = build_model(cfg, len(vocabulary))
    projection = model.duration_predictor.output_proj  # exactly 4 frames per token: several mel buckets
    projection.kernel.assign(tf.zeros_like(projection.kernel))
    projection.bias.assign([np.log(1.0 + 4.0)])
    save_run(tmp_path / "run", cfg, model, vocabulary)
    synthesizer = Synthesizer.from_run(tmp_path / "run", batch_size=2)
    synthesizer.warm_up()
    traced = synthesizer.tracing_count()
    assert traced == len(synthesizer.decoder.functions) > 2
    reference = sorted((bundled_corpus / "wavs").glob("*.wav"))[0]
    texts = ["Hello.", "The quick brown fox jumps over the lazy dog.",
             "Printing, in the only sense with which we are at present concerned, differs from most if not from all "
             "the arts and crafts represented in the Exhibition.", "A short one."]
    results = synthesizer.synthesize(texts, reference)
    assert synthesizer.tracing_count() == traced  # nothing traced after warm-up
    for result in results:
        # the length is the sum of the durations: 4 frames per token for this predictor
        assert result.frames == 4 * len(result.tokens) and result.ended_by == "durations"
        assert result.alignment.shape == (result.frames, len(result.tokens))
        np.testing.assert_array_equal(result.alignment.sum(axis=0), 4)  # each token its 4 frames, in order
        assert (np.diff(result.alignment.argmax(axis=1)) >= 0).all()
        assert np.isfinite(result.mel).all() and result.waveform.size > 0
    assert len({synthesizer.decoder.mel_bucket(r.frames) for r in results}) >= 2
    slow = Synthesizer.from_run(tmp_path / "run", batch_size=2, length_scale=8.0)
    with pytest.raises(SynthesisLengthError, match="Printing, in the only sense.*data.max_mel_frames"):
        slow.synthesize(texts[2:3], reference)

    # any length of text: split into pieces that fit, decoded in the warmed-up buckets, joined with pauses
    transcripts = [line.split("|")[2] for line in (bundled_corpus / "metadata.csv").read_text().splitlines()]
    document = " ".join(transcripts[:6]) + "\n\n" + " ".join(transcripts[6:9])
    long, = synthesizer.synthesize_long(document, reference)
    assert synthesizer.tracing_count() == traced
    budget = synthesizer.lengths.piece_token_budget()
    assert len(long.pieces) >= 9 and max(len(r.tokens) for r in long.results) <= budget
    assert " ".join(p.text for p in long.pieces).split() == document.split()  # every word, in order, once
    assert [p.paragraph for p in long.pieces].count(1) >= 3 and long.pieces[-1].pause_after == 0
    pauses = sum(int(round(p.pause_after * synthesizer.sample_rate)) for p in long.pieces)
    assert long.waveform.size == sum(r.waveform.size for r in long.results) + pauses
    assert all(r.frames == 4 * len(r.tokens) for r in long.results)
    spoken, = slow.synthesize_long(texts[2], reference)  # the sentence that was too long at this speed
    assert len(spoken.pieces) >= 2 and all(r.ended_by == "durations" for r in spoken.results)

    # without warm-up, each bucket's function traces on its first use, by design: TF's "frequent retracing" warning
    # must not cry wolf about it (a fresh process: TF logs that warning at most twice per process)
    import subprocess
    import sys

    script = ("import sys; from myxtts.synthesis import Synthesizer; s = Synthesizer.from_run(sys.argv[1]); "
              "words = sys.argv[3].split(); "
              "[s.synthesize([' '.join(words[:n])], sys.argv[2], batch_size=b) "
              "for n in (1, 8, 14, 20, 28) for b in (1, 2)]; print('traced', s.tracing_count())")
    fresh = subprocess.run([sys.executable, "-c", script, str(tmp_path / "run"), str(reference), document],
                           capture_output=True, text=True, timeout=600)
    assert fresh.returncode == 0, fresh.stderr
    assert int(fresh.stdout.split("traced")[-1]) >= 10
    assert "triggered tf.function retracing" not in fresh.stderr, fresh.stderr
