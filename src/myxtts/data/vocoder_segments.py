"""The vocoder's input pipeline: fixed-length (mel, audio) segments from the prepared cache, TF ops only.

Every training example is ``vocoder.segment_samples`` samples of a clip's audio and the ``segment_samples / hop + 1``
mel frames centred on them, so every batch has one static shape: the GAN step is traced once and never again.
Frame ``k`` of the cached mel is centred on sample ``k * hop`` (the front-end's centre padding), so a segment starting
at frame ``f`` is the audio ``[f * hop, f * hop + segment_samples)`` with frames ``f .. f + segment_samples / hop``:
the vocoder maps those frames to exactly those samples (its output has ``(frames - 1) * hop`` samples).

Order (docs/architecture.md): source (the split's utterance and audio paths) -> shuffle (paths only: memory flat in
the corpus size) -> repeat -> zip with a seeded random stream (each example's segment offset; a dataset, so a
checkpointed iterator resumes the same offsets) -> parse map (read the ``.utt`` mel and the ``.wav`` audio, cut the
segment) -> batch (drop the remainder: one shape) -> prefetch. Clips shorter than one segment are skipped and counted.

The mels may come from elsewhere than the cache's own (``mel_dir``): ``train-vocoder --acoustic-run`` writes an
acoustic model's teacher-forced mels in the same utterance-file layout, so the vocoder learns the mels it will read.
With ``vocoder.recorded_mel_share`` a seeded share of the examples reads the recordings' own mel of the clip instead
(drawn per example from the same random stream as its offset), so the vocoder keeps rendering real mels too.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import soundfile
import tensorflow as tf

from myxtts.data.cache import FeatureCache, audio_file, read_utterance, tf_read_utterance
from myxtts.errors import InputError

logger = logging.getLogger(__name__)


class VocoderDataError(InputError):
    """The cache cannot feed the vocoder (no audio stored, no clip long enough, another sample rate)."""


class VocoderSegments:
    """Segments of one split of ``cfg``'s prepared cache; ``dataset()`` yields ``{"mel": [batch, frames, n_mels],
    "audio": [batch, segment_samples]}`` float32 batches."""

    def __init__(self, cfg: Any, split: str = "train", mel_dir: Path | None = None) -> None:
        v, a = cfg.vocoder, cfg.audio
        self.cfg, self.split = cfg, split
        self.cache = FeatureCache.load(cfg)
        self.segment_samples, self.hop_length, self.n_mels = v.segment_samples, a.hop_length, a.n_mels
        self.segment_frames = v.segment_samples // a.hop_length + 1  # [f, f + segment / hop]: both ends centred
        self.batch_size, self.seed = v.batch_size, cfg.training.seed
        rows = self.cache.split_indices(split)
        long_enough = [int(row) for row in rows if self.cache.mel_lengths[row] >= self.segment_frames]
        self.skipped = [self.cache.ids[row] for row in rows if self.cache.mel_lengths[row] < self.segment_frames]
        if self.skipped:
            logger.warning("vocoder: %d of %d %s clips are shorter than one segment (%d samples) and are skipped: %s",
                           len(self.skipped), len(rows), split, self.segment_samples,
                           ", ".join(self.skipped[:5]) + (" ..." if len(self.skipped) > 5 else ""))
        if split == "train" and not long_enough:
            raise VocoderDataError(f"No {split} clip of {self.cache.cache_dir} is as long as one vocoder segment "
                                   f"(vocoder.segment_samples = {self.segment_samples} samples, "
                                   f"{len(self.skipped)} skipped): lower vocoder.segment_samples.")
        self.rows = long_enough
        mel_root = Path(mel_dir) if mel_dir is not None else self.cache.cache_dir
        self.utterance_paths = [str(mel_root / self.cache.files[row]) for row in self.rows]
        self.recorded_paths = [str(self.cache.cache_dir / self.cache.files[row]) for row in self.rows]
        # the recordings' share: meaningful only when the mels come from elsewhere (otherwise both paths are one)
        self.recorded_share = float(v.recorded_mel_share) if mel_dir is not None else 0.0
        self.audio_paths = [str(self.cache.cache_dir / audio_file(self.cache.files[row])) for row in self.rows]
        missing = [path for path in self.audio_paths[:1] + self.utterance_paths[:1] if not Path(path).is_file()]
        if missing:
            raise VocoderDataError(f"{missing[0]} is missing: the cache holds no audio for the vocoder (prepared by "
                                   "an older myxtts?). Run `myxtts prepare --config <your config> --force`.")

    def __len__(self) -> int:
        return len(self.rows)

    def signature(self) -> dict[str, tf.TensorSpec]:
        return {"mel": tf.TensorSpec([self.batch_size, self.segment_frames, self.n_mels], tf.float32),
                "audio": tf.TensorSpec([self.batch_size, self.segment_samples], tf.float32)}

    def _parse(self, utterance_path: tf.Tensor, recorded_path: tf.Tensor, audio_path: tf.Tensor,
               seed: tf.Tensor) -> dict[str, tf.Tensor]:
        draw = tf.random.stateless_uniform([], seed=tf.stack([seed, tf.constant(1, tf.int64)]))
        utterance_path = tf.where(draw < self.recorded_share, recorded_path, utterance_path)
        _, mel, _ = tf_read_utterance(utterance_path, self.n_mels)  # [frames, n_mels] float16
        audio, _ = tf.audio.decode_wav(tf.io.read_file(audio_path), desired_channels=1)  # [samples, 1]
        frames = tf.shape(mel)[0]
        start = tf.random.stateless_uniform([], seed=tf.stack([seed, tf.constant(0, tf.int64)]), minval=0,
                                            maxval=frames - self.segment_frames + 1, dtype=tf.int32)
        mel = tf.cast(mel[start:start + self.segment_frames], tf.float32)  # [segment_frames, n_mels]
        audio = audio[start * self.hop_length:start * self.hop_length + self.segment_samples, 0]  # [segment_samples]
        mel.set_shape([self.segment_frames, self.n_mels])
        audio.set_shape([self.segment_samples])
        return {"mel": mel, "audio": audio}

    def dataset(self) -> tf.data.Dataset:
        """Endless, shuffled (seeded, reshuffled each pass), one static shape; checkpointable."""
        paths = tf.data.Dataset.from_tensor_slices((self.utterance_paths, self.recorded_paths, self.audio_paths))
        paths = paths.shuffle(len(self.rows), seed=self.seed, reshuffle_each_iteration=True).repeat()
        offsets = tf.data.Dataset.random(seed=self.seed)  # one int64 per example: its segment's offset
        parse = tf.autograph.experimental.do_not_convert(lambda paths, seed: self._parse(*paths, seed))
        examples = tf.data.Dataset.zip((paths, offsets)).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
        return examples.batch(self.batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def validation_clips(cfg: Any, count: int = 4, mel_dir: Path | None = None) -> list[dict[str, Any]]:
    """Up to ``count`` whole clips of the validation split (the train split's first when it has none) as numpy:
    ``{"id", "mel" [frames, n_mels] float32, "audio" [(frames - 1) * hop] float32}``: fixed clips the trainer
    resynthesises at each validation."""
    cache = FeatureCache.load(cfg)
    rows = cache.split_indices("validation")
    if not len(rows):
        rows = cache.split_indices("train")
    clips = []
    mel_root = Path(mel_dir) if mel_dir is not None else cache.cache_dir
    for row in rows[:count]:
        mel = read_utterance(mel_root / cache.files[row]).mel.astype(np.float32)  # [frames, n_mels]
        audio, rate = soundfile.read(str(cache.cache_dir / audio_file(cache.files[row])), dtype="float32")
        if rate != cfg.audio.sample_rate:
            raise VocoderDataError(f"{cache.cache_dir / audio_file(cache.files[row])} is at {rate} Hz, the config's "
                                   f"audio.sample_rate is {cfg.audio.sample_rate}: run `myxtts prepare --force`.")
        length = (mel.shape[0] - 1) * cfg.audio.hop_length
        clips.append({"id": cache.ids[row], "mel": mel, "audio": audio[:length]})
    return clips
