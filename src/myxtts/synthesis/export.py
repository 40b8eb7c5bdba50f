"""``myxtts export``: a trained run as a SavedModel that TensorFlow alone (TF Serving, another process) can run.

Two serving signatures, each one concrete function traced once at export (``None`` dims: one graph for every
length, nothing traces when serving):

    speaker_embedding(waveform float32 [1, samples] at the model's sample rate) -> embedding float32 [1, K, d]
        the log mel of the clip (the training front-end), normalised with the run's mel statistics, its middle
        ``data.reference_frames`` frames (zero-padded when shorter), through the conditioning encoder: the
        same steps as ``SynthesisEngine.reference_mel`` + ``encode_reference``.
    synthesize(token_ids int32 [1, tokens], embedding float32 [1, K, d], speed float32 []) -> waveform float32
        [1, samples]: text encoder, duration predictor (durations divided by ``speed``), length regulator,
        decoder and postnet, denormalised, then the vocoder (Griffin-Lim, or the neural vocoder given to
        ``export --vocoder``: its generator's weights are saved with the model's), all inside the graph.

``token_ids`` are what ``myxtts`` encodes a text to (``<bos>`` + symbols + ``<eos>``); the symbol table
(``assets/vocab.json``: the text front-end's kind, language and symbols) and the mel statistics
(``assets/mel_stats.json``) travel with the model, with ``assets/export.json`` (run, checkpoint and its step, shapes).
Both decoders export (the autoregressive one runs its steps in a ``tf.while_loop`` inside ``synthesize``).
"""

from __future__ import annotations

import json
from pathlib import Path

import tensorflow as tf

from myxtts.mel import MelFrontend, sharpen_across_bins
from myxtts.config import Config
from myxtts.data.mel_stats import MelStats
from myxtts.data.run_features import load_run_mel_stats
from myxtts.model.durations import alignment_from_durations, durations_from_log
from myxtts.outputs import EXPORT, check_output_folder, write_staged
from myxtts.run_dir import checkpoint_step, latest_checkpoint
from myxtts.synthesis.run_files import load_model_from_run
from myxtts.vocoder import GriffinLim, Vocoder
from myxtts.vocoder.neural import NeuralVocoder, choose_vocoder, load_vocoder

ASSETS = ("vocab.json", "mel_stats.json", "export.json")
SPEED_RANGE = (0.25, 4.0)  # the synthesize signature clamps its speed to this range (serve refuses outside it)
MAX_CALL_FRAMES_FACTOR = 4  # one synthesize call says at most this many times data.max_mel_frames


class Untracked:
    """A plain holder: what it holds is invisible to TensorFlow's object tracking."""

    def __init__(self, value):
        self.value = value


class ExportedSynthesizer(tf.Module):
    """The module that is saved: the model's variables, the mel statistics and the two signatures."""

    def __init__(self, cfg: Config, model, mel_stats: MelStats, vocoder: Vocoder | None = None):
        super().__init__(name="myxtts")
        # the Keras model is held where tf.Module does not track it (saving would trace its call); its variables are
        # tracked as plain tf.Variables, which is all the traced signatures capture
        self._held = Untracked(model)
        self.model_variables = [getattr(variable, "value", variable) for variable in model.variables]
        self.reference_frames = int(cfg.data.reference_frames)
        self.vocab_size = int(model.dims.vocab_size)
        self.max_tokens = int(cfg.model.max_attention_sequence_length)  # the position table's length
        # the longest speech one call says (a text that would be longer is cut there): the memory one request takes
        self.max_frames = MAX_CALL_FRAMES_FACTOR * int(cfg.data.max_mel_frames)
        self.mel_mean = tf.constant(mel_stats.mean, tf.float32)  # [n_mels]
        self.mel_std = tf.constant(mel_stats.std, tf.float32)
        self.mel_sharpening = float(cfg.model.mel_sharpening)
        self.frontend = MelFrontend(cfg.audio)
        self.n_fft = cfg.audio.n_fft
        vocoder = GriffinLim(cfg.audio) if vocoder is None else vocoder
        # a neural vocoder's generator is held like the model: untracked, its variables tracked as plain variables
        self._vocoder = Untracked(vocoder)
        self.vocoder_variables = [getattr(variable, "value", variable) for variable in vocoder.generator.variables] \
            if isinstance(vocoder, NeuralVocoder) else []
        latents, d_model = model.dims.conditioning_vectors, model.dims.d_model
        self.speaker_embedding = tf.function(
            self._speaker_embedding, input_signature=[tf.TensorSpec([1, None], tf.float32, name="waveform")],
            autograph=False)
        self.synthesize = tf.function(self._synthesize, input_signature=[
            tf.TensorSpec([1, None], tf.int32, name="token_ids"),
            tf.TensorSpec([1, latents, d_model], tf.float32, name="embedding"),
            tf.TensorSpec([], tf.float32, name="speed")], autograph=False)

    @property
    def model(self):
        return self._held.value

    def _speaker_embedding(self, waveform):
        check = tf.debugging.assert_greater(tf.shape(waveform)[1], self.n_fft,
                                            message="the reference waveform is too short")
        with tf.control_dependencies([check]):
            mel = self.frontend.single_log_mel(waveform[0])  # [frames, n_mels] log mel
        mel = (mel - self.mel_mean) / self.mel_std
        frames = tf.shape(mel)[0]
        start = tf.maximum((frames - self.reference_frames) // 2, 0)  # the middle, as SynthesisEngine.reference_mel
        crop = mel[start:start + self.reference_frames]
        length = tf.shape(crop)[0]
        padded = tf.pad(crop, [[0, self.reference_frames - length], [0, 0]])  # [reference_frames, n_mels]
        latents = self.model.encode_reference(padded[None], length[None])  # [1, K, d]
        return {"embedding": tf.cast(latents, tf.float32)}

    def _synthesize(self, token_ids, embedding, speed):
        checks = [tf.debugging.assert_greater(speed, 0.0, message="speed must be > 0 (1: the trained rate)"),
                  tf.debugging.assert_all_finite(speed, message="speed must be a finite number"),
                  tf.debugging.assert_greater(tf.shape(token_ids)[1], 2, message="token_ids needs <bos>, at least "
                                              "one symbol and <eos> (assets/vocab.json)"),
                  tf.debugging.assert_less_equal(tf.shape(token_ids)[1], self.max_tokens, message="token_ids is "
                                                 "longer than the model's position table: split the text into "
                                                 "sentences"),
                  tf.debugging.assert_non_negative(token_ids, message="a token id is outside the symbol table "
                                                   "(assets/vocab.json)"),
                  tf.debugging.assert_less(token_ids, self.vocab_size, message="a token id is outside the symbol "
                                           "table (assets/vocab.json)")]
        with tf.control_dependencies(checks):  # every use of the ids and the speed waits for the checks
            token_ids = tf.identity(token_ids)
            token_lengths = tf.shape(token_ids)[1:2]  # [1]
            speed = tf.clip_by_value(speed, SPEED_RANGE[0], SPEED_RANGE[1])  # as `serve` accepts it
        text = self.model.encode_text(token_ids, token_lengths)  # [1, tokens, d]
        log_durations = self.model.predict_log_durations(text, token_lengths)
        durations = durations_from_log(log_durations, token_lengths, 1.0 / speed)  # [1, tokens] int32
        # at most max_frames in all: the tokens past the bound get no frames (the speech is cut there)
        before = tf.cumsum(durations, axis=1, exclusive=True)  # [1, tokens]
        durations = tf.clip_by_value(self.max_frames - before, 0, durations)
        frames = tf.reduce_sum(durations)
        r = self.model.dims.reduction_factor  # the autoregressive decoder works in whole steps of r frames
        hard = alignment_from_durations(durations, (frames + r - 1) // r * r)  # [1, frames rounded up, tokens]
        _, mel = self.model.decode(text, hard, frames[None], tf.cast(embedding, self.model.compute_dtype))
        log_mel = mel[0, :frames] * self.mel_std + self.mel_mean  # [frames, n_mels]: the real log mel
        if self.mel_sharpening > 0:  # model.mel_sharpening, as Synthesizer applies it
            log_mel = sharpen_across_bins(log_mel, self.mel_sharpening)
        # both vocoders' batched graph code (GriffinLim.waveform, NeuralVocoder.waveform), traced into this graph
        return {"waveform": self._vocoder.value.waveform(log_mel[None])}  # [1, (frames - 1) * hop]


def export_run(run_dir: str | Path, out_dir: str | Path, config: str | Path | None = None,
               force: bool = False, vocoder: str | Path | None = None) -> Path:
    """Write the SavedModel of a run's latest checkpoint to ``out_dir`` (see the module docstring); ``vocoder``: a
    neural vocoder directory or ``griffin-lim`` (None: the run's own, ``RUN/vocoder``, when it has one, else
    Griffin-Lim), refused when it reads other mels than the run's.

    ``out_dir`` must be new, empty, or (``force``) an earlier export holding only an export's files: never the run, a
    cache, nor a folder that holds or lies inside one of them (``outputs.check_output_folder``, checked before anything
    is loaded). The export is written beside it and swapped in only once complete, so a failure leaves ``out_dir`` as
    it was."""
    out_dir = Path(out_dir)
    check_output_folder(out_dir, run_dir, "export", EXPORT, force)
    checkpoint = latest_checkpoint(run_dir)  # resolved once: the weights and export.json name the same step
    cfg, model, vocabulary = load_model_from_run(run_dir, config, checkpoint=checkpoint)
    vocoder = choose_vocoder(vocoder, run_dir)
    chosen = load_vocoder(vocoder, cfg.audio, f"the run {run_dir}")
    mel_stats = load_run_mel_stats(run_dir, cfg)
    module = ExportedSynthesizer(cfg, model, mel_stats, chosen)
    neural = isinstance(chosen, NeuralVocoder)
    # names, never absolute paths: an export is shipped to other machines and should not tell them this one's folders
    record = {
        "run": Path(run_dir).resolve().name, "checkpoint": Path(checkpoint).name, "step": checkpoint_step(checkpoint),
        "sample_rate": cfg.audio.sample_rate, "reference_frames": cfg.data.reference_frames,
        "embedding_shape": [1, model.dims.conditioning_vectors, model.dims.d_model],
        "bos_id": vocabulary.symbols.index("<bos>"), "eos_id": vocabulary.symbols.index("<eos>"),
        "vocoder": _vocoder_label(vocoder, run_dir) if neural else "griffin-lim",
        **({"vocoder_checkpoint": Path(chosen.checkpoint).name} if neural else {}),
        "griffin_lim_iters": cfg.audio.griffin_lim_iters}

    def write(staging: Path) -> Path:
        tf.saved_model.save(module, str(staging), signatures={"speaker_embedding": module.speaker_embedding,
                                                              "synthesize": module.synthesize})
        assets = staging / "assets"
        assets.mkdir(exist_ok=True)
        vocabulary.save(assets / "vocab.json")
        mel_stats.save(assets / "mel_stats.json")
        (assets / "export.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
        return out_dir

    # complete or absent: never a half-written SavedModel under the asked name
    return write_staged(out_dir, "export", EXPORT, write)


def _vocoder_label(vocoder: str | Path, run_dir: str | Path) -> str:
    """The vocoder as export.json names it: ``RUN/vocoder`` for the run's own, else the vocoder folder's name."""
    vocoder, run = Path(vocoder).resolve(), Path(run_dir).resolve()
    return f"{run.name}/{vocoder.relative_to(run)}" if vocoder.is_relative_to(run) else vocoder.name
