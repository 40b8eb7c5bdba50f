"""model.speaker_adaptive_norm on real clips: a model that adds the norms to one without them starts as that model,
the norms learn, and a run cannot be resumed with the key flipped."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from test_parallel_model import mel_loss_gradients, parallel_config, warm_started
from test_pitch_conditioning import _real_batches


def _film_kernels(model) -> list:
    return [block.speaker_film.kernel for block in model.decoder.blocks]


def test_adding_the_norms_starts_from_the_plain_model_then_they_learn(prepared_cache):
    plain, model, cfg, fresh = warm_started(prepared_cache, {"speaker_adaptive_norm": True})
    # a kernel and a bias per decoder block, nothing else
    assert sorted(fresh) == sorted(v.path for block in model.decoder.blocks for v in block.speaker_film.weights)
    assert len(fresh) == 2 * len(model.decoder.blocks)
    batch = _real_batches(cfg, count=1)[0]  # real clips of unequal lengths, each with another clip as its reference
    batch = {key: value[:2] for key, value in batch.items()}  # two: the model runs eagerly here
    outputs = model(batch)
    np.testing.assert_allclose(outputs["mel_after"].numpy(), plain(batch)["mel_after"].numpy(), atol=1e-5)

    # they learn: the mel loss on these clips (through the alignment found above) reaches every block's projection
    gradients = mel_loss_gradients(model, batch, outputs["hard_alignment"], _film_kernels(model))
    assert all(gradient is not None and np.abs(gradient.numpy()).max() > 0 for gradient in gradients)

def test_resuming_with_the_norms_flipped_is_refused_and_the_checkpoint_says_which(prepared_cache, tmp_path):
    from myxtts.model import build_model
    from myxtts.model.restore import checkpoint_has_adaptive_norm
    from myxtts.text import Vocabulary
    from myxtts.training.checkpoint import WorkdirError, check_resumable

    vocabulary = Vocabulary.load(prepared_cache.cache_dir / "vocab.json")
    batch = {key: value[:1] for key, value in _real_batches(parallel_config(prepared_cache), count=1)[0].items()}
    saved = {}
    for adaptive in (True, False):
        model = build_model(parallel_config(prepared_cache, model={"speaker_adaptive_norm": adaptive}), len(vocabulary))
        model(batch)  # built
        saved[adaptive] = tf.train.Checkpoint(model=model).save(str(tmp_path / f"adaptive-{adaptive}" / "ckpt"))
        assert checkpoint_has_adaptive_norm(saved[adaptive]) is adaptive
    for adaptive, checkpoint in saved.items():
        other = parallel_config(prepared_cache, model={"speaker_adaptive_norm": not adaptive})
        with pytest.raises(WorkdirError, match=f"trained {'with' if adaptive else 'without'} speaker-adaptive norms"
                                               ".*--init-from"):
            check_resumable(tmp_path, checkpoint, other, False, tmp_path)
        same = parallel_config(prepared_cache, model={"speaker_adaptive_norm": adaptive})
        check_resumable(tmp_path, checkpoint, same, False, tmp_path)  # the run's own config resumes
