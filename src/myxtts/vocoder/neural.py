"""A trained neural vocoder as a ``Vocoder``, and what ties it to its front-end.

A vocoder directory (a ``train-vocoder`` run, or one packed from it: ``pretrained/``) holds ``config.yaml`` (its audio
front-end and ``vocoder`` section), ``vocoder.json`` (family, sizes and the audio settings it reads, as written at
training) and ``checkpoints/`` (the generator's weights, with the discriminators and optimizers in a run).

A vocoder only understands mels made by the front-end it was trained with: ``load_vocoder`` compares its audio
settings with the acoustic model's and refuses a mismatch (``VocoderMismatchError``, naming both and the key).
"""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

from myxtts.mel import MelFrontend
from myxtts.config import VocoderConfig, load_config, save_config
from myxtts.errors import InputError
from myxtts.run_dir import RunDir
from myxtts.vocoder.base import Vocoder
from myxtts.vocoder.generators import PRIOR_FLOOR, SIZE_DEFAULTS, build_generator, generator_sizes
from myxtts.vocoder.griffin_lim import GriffinLim
from myxtts.spectral import stft_in_builtin_ops
from myxtts.vocoder.istft import InverseStft

GRIFFIN_LIM = "griffin-lim"
# the front-end settings a mel depends on: a vocoder and an acoustic model must agree on every one
AUDIO_KEYS = ("sample_rate", "n_fft", "win_length", "hop_length", "n_mels", "fmin", "fmax", "mel_power",
              "log_compression", "log_floor")


class VocoderError(InputError):
    """A vocoder directory is missing, incomplete or of an unknown family."""


class VocoderMismatchError(VocoderError):
    """The vocoder reads other mels than the acoustic model makes (sample rate, hop, mel bins, compression...)."""


def audio_settings(audio_cfg: Any) -> dict[str, Any]:
    return {key: getattr(audio_cfg, key) for key in AUDIO_KEYS}


def write_vocoder_json(directory: Path, cfg: Any, generator: Any, trained_on: str = "", **origin: Any) -> Path:
    """``vocoder.json``: family, sizes, the audio settings it reads, parameters, and where it came from (``origin``:
    e.g. the warm start's checkpoint, the acoustic run whose mels it trained on)."""
    record = {"family": generator.family, **generator_sizes(cfg.vocoder), "audio": audio_settings(cfg.audio),
              "parameters": int(generator.count_params()), "trained_on": trained_on,
              **{key: value for key, value in origin.items() if value is not None}}
    run = RunDir(directory)
    return run.write_json(run.vocoder_record, record)


def save_vocoder(directory: str | Path, cfg: Any, generator: Any, trained_on: str = "", step: int = 0,
                 discriminators: Any = None) -> Path:
    """A vocoder directory: config.yaml, vocoder.json, checkpoints/ckpt-STEP holding the generator (and the
    discriminators when given: a starting point for fine-tuning; synthesis reads the generator alone)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    save_config(cfg, RunDir(directory).config)
    write_vocoder_json(directory, cfg, generator, trained_on)
    objects = {"generator": generator, **({"discriminators": discriminators} if discriminators is not None else {})}
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(**objects), str(RunDir(directory).checkpoints),
                                         max_to_keep=1)
    manager.save(checkpoint_number=step)
    return directory


def own_vocoder(run_dir: str | Path) -> Path | None:
    """An acoustic run's (or packed model's) own vocoder, ``RUN/vocoder`` (``myxtts.vocoder.packing``), or None."""
    folder = RunDir(run_dir).own_vocoder
    return folder if folder.is_dir() else None


def choose_vocoder(choice: str | Path | None, run_dir: str | Path | None) -> str:
    """The vocoder an acoustic run is heard through: ``choice`` when given (a vocoder directory or ``griffin-lim``),
    else the run's own (``RUN/vocoder``) when it has one, else ``griffin-lim``."""
    if choice is not None:
        return str(choice)
    own = own_vocoder(run_dir) if run_dir is not None else None
    return str(own) if own is not None else GRIFFIN_LIM


def vocoder_name(vocoder: Vocoder, choice: str | Path | None = None) -> str:
    """What a command says it spoke through: a neural vocoder's directory (``choice`` None: the run's own, said so)
    or ``griffin-lim``."""
    path = getattr(vocoder, "path", "")
    return (f"{path} (the run's own)" if choice is None else path) if path else GRIFFIN_LIM


def read_vocoder_dir(path: str | Path) -> tuple[Any, dict[str, Any]]:
    """(config, vocoder.json record) of a vocoder directory; VocoderError naming what is missing."""
    directory = Path(path)
    if not directory.is_dir():
        raise VocoderError(f"Vocoder {directory} not found: pass a vocoder directory (a `myxtts train-vocoder` run or "
                           f"a packed vocoder such as pretrained/vocoder-vocos-ljspeech) or '{GRIFFIN_LIM}'.")
    record_path, config_path = RunDir(directory).vocoder_record, RunDir(directory).config
    for required in (record_path, config_path):
        if not required.is_file():
            raise VocoderError(f"{directory} is not a vocoder: {required.name} is missing (an acoustic run? pass it "
                               "with --run; a vocoder comes from `myxtts train-vocoder`).")
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise VocoderError(f"{record_path} is unreadable: {err}.") from None
    families = typing.get_args(typing.get_type_hints(VocoderConfig)["family"])
    if record.get("family") not in families:
        raise VocoderError(f"{record_path}: vocoder family {record.get('family')!r} is not one this myxtts knows "
                           f"({', '.join(families)}).")
    cfg = load_config(config_path)
    check_same_generator(directory, record, cfg, f"Its {record_path.name} and {config_path.name} disagree: restore "
                         "the files as training wrote them.")
    return cfg, record


def check_same_generator(path: Any, record: dict[str, Any], cfg: Any, fix: str) -> None:
    """The generator ``record`` (a ``vocoder.json``) describes is the one ``cfg.vocoder`` builds: the family and every
    size, the magnitude prior included (same weight shapes, another meaning). VocoderError naming each difference."""
    ours = {"family": cfg.vocoder.family, **generator_sizes(cfg.vocoder)}
    theirs = {key: record.get(key, SIZE_DEFAULTS.get(key)) for key in ours}
    if theirs != ours:
        differing = ", ".join(f"{key} {theirs[key]} (this config: {ours[key]})" for key in ours
                              if theirs[key] != ours[key])
        raise VocoderError(f"Vocoder {path} is another generator: {differing}. {fix}")


def check_audio_match(vocoder_path: Any, vocoder_audio: dict[str, Any], acoustic_name: Any, acoustic_cfg: Any) -> None:
    """Raise VocoderMismatchError naming every front-end key on which the vocoder and the acoustic model differ."""
    wanted = audio_settings(acoustic_cfg)
    differ = [f"audio.{key}: vocoder {vocoder_audio.get(key)!r}, acoustic model {wanted[key]!r}"
              for key in AUDIO_KEYS if vocoder_audio.get(key) != wanted[key]]
    if differ:
        raise VocoderMismatchError(f"Vocoder {vocoder_path} was trained on other mels than {acoustic_name} makes ("
                                   + "; ".join(differ) + "). Use a vocoder trained with the same audio settings "
                                   f"(`myxtts train-vocoder` on a cache prepared with them) or '{GRIFFIN_LIM}'.")


def newest_checkpoint(directory: Path) -> str:
    folder = RunDir(directory).checkpoints
    checkpoint = tf.train.latest_checkpoint(str(folder))
    if checkpoint is None:
        raise VocoderError(f"Vocoder {directory} has no checkpoint in {folder}.")
    return checkpoint


def restore_generator(path: str | Path, cfg: Any, generator: Any, discriminators: Any = None) -> dict[str, Any]:
    """Load another vocoder's weights into ``generator`` (and ``discriminators`` when it has them: a run, not a packed
    vocoder). Its sizes and audio settings must be ``cfg``'s. Returns what was restored, for the run's record."""
    source_cfg, record = read_vocoder_dir(path)
    check_audio_match(path, record["audio"], "this config's cache", cfg.audio)
    check_same_generator(path, record, cfg, "Set the vocoder section's family, sizes (or preset) and magnitude_prior "
                         "to the source's.")
    checkpoint = newest_checkpoint(Path(path))
    has_discriminators = discriminators is not None and "discriminators" in _checkpoint_children(checkpoint) and \
        tuple(source_cfg.vocoder.discriminator_periods) == tuple(cfg.vocoder.discriminator_periods) and \
        tuple(source_cfg.vocoder.resolution_ffts) == tuple(cfg.vocoder.resolution_ffts) and \
        (source_cfg.vocoder.discriminator_channels, source_cfg.vocoder.resolution_channels) == \
        (cfg.vocoder.discriminator_channels, cfg.vocoder.resolution_channels)
    objects = {"generator": generator, **({"discriminators": discriminators} if has_discriminators else {})}
    tf.train.Checkpoint(**objects).restore(checkpoint).expect_partial().assert_existing_objects_matched()
    return {"checkpoint": checkpoint, "discriminators": has_discriminators}


def _checkpoint_children(checkpoint: str) -> set[str]:
    """Names of the objects a checkpoint saved at its root (a run: generator, discriminators, optimizers...)."""
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(tf.train.load_checkpoint(checkpoint).get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    return {child.local_name for child in graph.nodes[0].children}


class NeuralVocoder(Vocoder):
    """A trained generator behind the ``Vocoder`` interface: one compiled graph for every mel length and batch.

    ``magnitude_from_mel`` (``vocoder.magnitude_from_mel``) > 0: the generator's audio is analysed again with the
    front-end's STFT, its phase kept and its magnitude moved geometrically towards the mel's pseudo-inverse (Griffin-
    Lim's magnitude) by that share, then inverted: one STFT and one inverse STFT more per clip."""

    def __init__(self, generator: Any, audio_cfg: Any, path: str = "", checkpoint: str = "",
                 magnitude_from_mel: float = 0.0) -> None:
        self.generator, self.path, self.checkpoint = generator, path, checkpoint  # checkpoint: the prefix restored
        self.sample_rate, self.n_mels, self.hop_length = audio_cfg.sample_rate, audio_cfg.n_mels, audio_cfg.hop_length
        self.audio = audio_settings(audio_cfg)
        self.magnitude_from_mel = float(magnitude_from_mel)
        self.frontend = MelFrontend(audio_cfg) if self.magnitude_from_mel > 0 else None
        self.inverse = InverseStft(audio_cfg.n_fft, audio_cfg.hop_length, self.frontend.window.numpy()) \
            if self.frontend is not None else None
        self._batched = tf.function(self.waveform, autograph=False,
                                    input_signature=[tf.TensorSpec([None, None, self.n_mels], tf.float32)])
        self.builtin_ops = False  # use_builtin_ops: the graph a LiteRT export traces

    def use_builtin_ops(self, on: bool = True) -> None:
        """Trace ``waveform`` with built-in LiteRT ops only (its STFTs as real matmuls with fixed DFT bases, no
        complex numbers): the same audio within float32 rounding; set before tracing (an export for LiteRT)."""
        self.builtin_ops = bool(on)
        for layer in (getattr(self.generator, "istft", None), self.inverse):
            if layer is not None:
                layer.builtin_ops = self.builtin_ops

    def waveform(self, log_mel: tf.Tensor, mel_lengths: tf.Tensor | None = None) -> tf.Tensor:
        """``[batch, frames, n_mels]`` -> ``[batch, (frames - 1) * hop]`` (graph code: also the exports'). With
        ``mel_lengths`` ``[batch]`` (a padded batch, the vocos family): each item's first ``(length - 1) * hop``
        samples are those of its own frames vocoded alone, zeros after them."""
        frame_mask = None
        if mel_lengths is not None:
            if getattr(self.generator, "family", "") != "vocos":
                raise ValueError("Vocoding a padded batch by its lengths needs the vocos family.")
            frame_mask = tf.sequence_mask(mel_lengths, tf.shape(log_mel)[1])  # [batch, frames]
        masked = {} if frame_mask is None else {"frame_mask": frame_mask}
        wave = self.generator(log_mel, training=False, **masked)  # [batch, (frames - 1) * hop]
        if frame_mask is not None:  # the samples past each item's speech, as past the end of its own waveform
            # sample s belongs to frame s // hop: a frame-level mask repeated hop times (no range over the samples,
            # which a converter may fold into a constant of every bucket's length)
            hops = tf.cast(tf.sequence_mask(mel_lengths - 1, tf.shape(log_mel)[1] - 1), wave.dtype)  # [batch, F - 1]
            speech = tf.reshape(tf.broadcast_to(hops[:, :, None], [tf.shape(hops)[0], tf.shape(hops)[1],
                                                                   self.hop_length]), tf.shape(wave))
            wave = wave * speech  # [batch, samples]
        if self.frontend is None:
            return wave
        n_fft = self.frontend.n_fft
        # centred frames as the front-end's (zeros, not its reflection, at the edges: any length, a frame included)
        padded = tf.pad(wave, [[0, 0], [n_fft // 2, n_fft // 2]])  # [batch, (frames - 1) * hop + n_fft]
        if self.builtin_ops:  # each [batch, frames, n_fft // 2 + 1]
            real, imaginary = stft_in_builtin_ops(padded, n_fft, self.hop_length, self.frontend.window.numpy())
        else:
            stft = tf.signal.stft(padded, frame_length=n_fft, frame_step=self.hop_length, fft_length=n_fft,
                                  window_fn=self.frontend.window_fn, pad_end=False)
            real, imaginary = tf.math.real(stft), tf.math.imag(stft)
        magnitude = tf.sqrt(tf.square(real) + tf.square(imaginary))
        unit = 1.0 / tf.maximum(magnitude, 1e-9)  # the phase alone: a unit-length phasor (real, imaginary) * unit
        prior = self.frontend.pseudo_inverse_magnitude(log_mel)  # [batch, frames, n_fft // 2 + 1]
        share, floor = self.magnitude_from_mel, PRIOR_FLOOR  # the floor the magnitude prior's log uses too
        blended = tf.math.exp(share * tf.math.log(tf.maximum(prior, floor)) +
                              (1.0 - share) * tf.math.log(tf.maximum(magnitude, floor)))
        wave = self.inverse(blended * real * unit, blended * imaginary * unit, frame_mask=frame_mask)
        return wave if frame_mask is None else wave * speech

    def tracing_count(self) -> int:
        return self._batched.experimental_get_tracing_count()

    def __call__(self, log_mel: tf.Tensor | np.ndarray) -> tf.Tensor:
        log_mel = tf.convert_to_tensor(log_mel, dtype=tf.float32)
        if log_mel.shape.rank == 2 and log_mel.shape[-1] == self.n_mels:
            return self._batched(log_mel[tf.newaxis])[0]  # [(frames - 1) * hop]
        if log_mel.shape.rank == 3 and log_mel.shape[-1] == self.n_mels:
            return self._batched(log_mel)  # [batch, (frames - 1) * hop]
        raise ValueError(f"The vocoder expects a log mel of shape [frames, {self.n_mels}] or [batch, frames, "
                         f"{self.n_mels}] (audio.n_mels), got {log_mel.shape}.")


def load_vocoder(path: str | Path | None, audio_cfg: Any, acoustic_name: str = "the acoustic model",
                 checkpoint: str | None = None) -> Vocoder:
    """``griffin-lim`` (or None) -> ``GriffinLim(audio_cfg)``; a vocoder directory -> its ``NeuralVocoder`` (the newest
    checkpoint, or ``checkpoint``: a prefix of the same vocoder's), after checking it reads the mels ``audio_cfg``
    describes (VocoderMismatchError otherwise)."""
    if path is None or str(path) == GRIFFIN_LIM:
        return GriffinLim(audio_cfg)
    cfg, record = read_vocoder_dir(path)
    check_audio_match(path, record["audio"], acoustic_name, audio_cfg)
    generator = build_generator(cfg)
    checkpoint = checkpoint or newest_checkpoint(Path(path))  # resolved once, kept on the vocoder for records
    tf.train.Checkpoint(generator=generator).restore(checkpoint).expect_partial().assert_existing_objects_matched()
    return NeuralVocoder(generator, cfg.audio, str(path), checkpoint, cfg.vocoder.magnitude_from_mel)
