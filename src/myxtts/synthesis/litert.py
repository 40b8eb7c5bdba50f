"""``myxtts export --format litert``: a trained run as one LiteRT (TFLite) model that runs with built-in ops only.

The model holds the synthesis engine's compiled functions as signatures, every shape static (``decoding.py``'s
buckets), the vocoder inside and the weights shared by all of them:

    speaker_embedding(window float32 [1, (reference_frames - 1) * hop + n_fft], frames int32 [1])
        -> embedding float32 [1, K, d]: the log mel of a window the caller cut from the reflect-padded clip
        (``myxtts.litert_voice.reference_window``: the same frames the engine's centre crop reads), normalised,
        frames past ``frames`` zeroed, through the conditioning encoder.
    durations_T (one per text bucket T): token_ids int32 [1, T] (zero-padded), token_count int32 [1], speed float32 [1]
        -> text float32 [1, max_text, d], durations int32 [1, max_text]: the text encoder and the durations divided
        by the speed, padded to data.max_text_length so any decode signature takes them.
    decode_F (one per mel bucket F): text, durations, embedding -> waveform float32 [1, (F - 1) * hop], samples
        int32 [1]: the mel of F frames, denormalised, through the vocoder; the first ``samples`` are the speech.

The caller encodes the text, picks the smallest text bucket that holds it, reads the total of the durations and
picks the smallest mel bucket that holds it (a longer text: split it into sentences first). ``litert.json`` beside
the model says the buckets and shapes; ``vocab.json`` and ``config.yaml`` give the text front-end, ``mel_stats.json``
the normalisation the graph applies
(``myxtts.litert_voice.LiteRtVoice`` runs it all without TensorFlow).

Built-in ops only: the STFTs of the front-end and the vocoder trace as real matmuls with fixed DFT bases
(``myxtts.spectral``), the conversion allows ``TFLITE_BUILTINS`` alone, so a device needs no Flex runtime.
``quantize``: ``float16`` stores the weights in half precision (computed in float32), ``int8`` quantises them to 8
bits (dynamic-range quantisation).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import tensorflow as tf

from myxtts.config import Config, save_config
from myxtts.data.mel_stats import MelStats
from myxtts.data.run_features import load_run_mel_stats
from myxtts.errors import InputError
from myxtts.mel import MelFrontend, sharpen_across_bins
from myxtts.model.layers import length_mask
from myxtts.outputs import LITERT_EXPORT, check_output_folder, write_staged
from myxtts.run_dir import RunDir, checkpoint_step, latest_checkpoint
from myxtts.synthesis.decoding import CompiledDecoder
from myxtts.synthesis.export import SPEED_RANGE, Untracked
from myxtts.synthesis.lengths import LengthPolicy
from myxtts.synthesis.run_files import load_model_from_run
from myxtts.vocoder.neural import NeuralVocoder, choose_vocoder, load_vocoder

MODEL_FILE = "model.tflite"
RECORD_FILE = "litert.json"
QUANTIZATIONS = ("none", "float16", "int8")


class LiteRtModule(tf.Module):
    """The signatures of the module docstring over one model and vocoder (their variables tracked for saving)."""

    def __init__(self, cfg: Config, model, mel_stats: MelStats, vocoder: NeuralVocoder):
        super().__init__(name="myxtts_litert")
        self.model_variables = [getattr(variable, "value", variable) for variable in model.variables]
        self.vocoder_variables = [getattr(variable, "value", variable) for variable in vocoder.generator.variables]
        self.frontend = MelFrontend(cfg.audio)
        self.frontend.builtin_ops = True
        vocoder.use_builtin_ops(True)
        self.mel_mean = tf.constant(mel_stats.mean, tf.float32)  # [n_mels]
        self.mel_std = tf.constant(mel_stats.std, tf.float32)
        self.mel_sharpening = float(cfg.model.mel_sharpening)
        self.reference_frames = int(cfg.data.reference_frames)
        self.window_samples = (self.reference_frames - 1) * cfg.audio.hop_length + cfg.audio.n_fft
        self.hop_length = cfg.audio.hop_length
        self.decoder = CompiledDecoder(model, cfg.data.max_text_length, cfg.data.max_mel_frames,
                                       self.reference_frames)
        self.text_buckets = LengthPolicy.from_config(cfg).text_buckets()
        self.mel_buckets = list(self.decoder.buckets)
        # held untracked: saving must not trace the Keras objects' calls, only these functions
        self._vocoder = Untracked(vocoder)
        functions = {
            "speaker_embedding": tf.function(self._speaker_embedding, autograph=False, input_signature=[
                tf.TensorSpec([1, self.window_samples], tf.float32, name="window"),
                tf.TensorSpec([1], tf.int32, name="frames")])}
        for bucket in self.text_buckets:
            functions[f"durations_{bucket}"] = tf.function(self._durations, autograph=False, input_signature=[
                tf.TensorSpec([1, bucket], tf.int32, name="token_ids"),
                tf.TensorSpec([1], tf.int32, name="token_count"), tf.TensorSpec([1], tf.float32, name="speed")])
        d_model, latents, max_text = model.dims.d_model, model.dims.conditioning_vectors, cfg.data.max_text_length
        for frames in self.mel_buckets:
            functions[f"decode_{frames}"] = tf.function(
                lambda text, durations, embedding, frames=frames: self._decode(text, durations, embedding, frames),
                autograph=False, input_signature=[tf.TensorSpec([1, max_text, d_model], tf.float32, name="text"),
                                                  tf.TensorSpec([1, max_text], tf.int32, name="durations"),
                                                  tf.TensorSpec([1, latents, d_model], tf.float32, name="embedding")])
        self._functions = Untracked(functions)

    @property
    def functions(self) -> dict:
        """Signature name -> its tf.function (one input signature each)."""
        return self._functions.value

    def _speaker_embedding(self, window, frames):
        mel = (self.frontend.log_mel_of_padded(window) - self.mel_mean) / self.mel_std  # [1, reference_frames, n_mels]
        frames = tf.clip_by_value(frames, 1, self.reference_frames)
        mel = tf.where(length_mask(frames, self.reference_frames)[..., None], mel, 0.0)  # as reference_crop pads
        return {"embedding": self.decoder.latents_function(1)(mel, frames)}  # [1, K, d]

    def _durations(self, token_ids, token_count, speed):
        speed = tf.clip_by_value(speed, SPEED_RANGE[0], SPEED_RANGE[1])  # as the SavedModel and `serve` bound it
        text, durations = self.decoder.durations_function(1, int(token_ids.shape[1]))(
            token_ids, token_count, 1.0 / speed)
        return {"text": text, "durations": durations}  # [1, max_text, d], [1, max_text]

    def _decode(self, text, durations, embedding, frames: int):
        outputs = self.decoder.decode_function(1, frames)(text, durations, embedding)
        log_mel = outputs["mel"] * self.mel_std + self.mel_mean  # [1, frames, n_mels]: the real log mel
        if self.mel_sharpening > 0:  # model.mel_sharpening, as Synthesizer applies it
            log_mel = sharpen_across_bins(log_mel, self.mel_sharpening)
        lengths = outputs["mel_lengths"]  # [1]
        # [1, (frames - 1) * hop]: the speech as its own frames vocoded alone, zeros after it
        wave = self._vocoder.value.waveform(log_mel, mel_lengths=lengths)
        samples = tf.maximum(lengths - 1, 0) * self.hop_length  # [1]
        return {"waveform": wave, "samples": samples}


def convert(module: LiteRtModule, quantize: str = "none") -> bytes:
    """The module's signatures as one LiteRT flatbuffer, built-in ops only (a SavedModel in a temporary folder is
    the converter's input: it keeps the signature names)."""
    if quantize not in QUANTIZATIONS:
        raise InputError(f"--quantize {quantize!r}: choose one of {', '.join(QUANTIZATIONS)}.")
    with tempfile.TemporaryDirectory(prefix="myxtts-litert-") as staging:
        signatures = {name: function.get_concrete_function() for name, function in module.functions.items()}
        tf.saved_model.save(module, staging, signatures=signatures)
        converter = tf.lite.TFLiteConverter.from_saved_model(staging, signature_keys=list(signatures))
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        if quantize != "none":
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        if quantize == "float16":
            converter.target_spec.supported_types = [tf.float16]
        return converter.convert()


def export_litert(run_dir: str | Path, out_dir: str | Path, config: str | Path | None = None, force: bool = False,
                  vocoder: str | Path | None = None, quantize: str = "none") -> Path:
    """Write ``out_dir``: ``model.tflite`` (the module docstring's signatures), ``litert.json``, ``vocab.json``,
    ``mel_stats.json`` and ``config.yaml``. ``vocoder``: a neural vocoder directory (None: the run's own); Griffin-Lim, an iterative
    algorithm, is not exported. ``out_dir`` must be new, empty or (``force``) an earlier LiteRT export; it is written
    beside and swapped in once complete."""
    out_dir = Path(out_dir)
    if quantize not in QUANTIZATIONS:
        raise InputError(f"--quantize {quantize!r}: choose one of {', '.join(QUANTIZATIONS)}.")
    check_output_folder(out_dir, run_dir, "export", LITERT_EXPORT, force)
    checkpoint = latest_checkpoint(run_dir)
    cfg, model, vocabulary = load_model_from_run(run_dir, config, checkpoint=checkpoint)
    chosen = load_vocoder(choose_vocoder(vocoder, run_dir), cfg.audio, f"the run {run_dir}")
    if cfg.model.decoder != "parallel":
        raise InputError(f"A LiteRT export takes the parallel decoder; the run {run_dir} has model.decoder "
                         f"{cfg.model.decoder!r} (its step loop is no built-in op): export it as a SavedModel instead.")
    if not isinstance(chosen, NeuralVocoder):
        raise InputError(f"The run {run_dir} has no neural vocoder of its own: a LiteRT export needs one (give "
                         "--vocoder, e.g. pretrained/vocoder-vocos-ljspeech); Griffin-Lim is not exported.")
    if chosen.generator.family != "vocos":
        raise InputError(f"A LiteRT export takes a vocoder of the vocos family; {chosen.path or 'this one'} is "
                         f"{chosen.generator.family}: export with a vocos vocoder (--vocoder, e.g. "
                         "pretrained/vocoder-vocos-ljspeech).")
    if cfg.audio.n_fft % cfg.audio.hop_length:
        raise InputError(f"A LiteRT export needs audio.n_fft ({cfg.audio.n_fft}) to be a multiple of "
                         f"audio.hop_length ({cfg.audio.hop_length}): its STFTs are framed by reshaping.")
    mel_stats = load_run_mel_stats(run_dir, cfg)
    module = LiteRtModule(cfg, model, mel_stats, chosen)
    flatbuffer = convert(module, quantize)
    record = {"run": Path(run_dir).resolve().name, "checkpoint": Path(checkpoint).name,
              "step": checkpoint_step(checkpoint), "quantize": quantize, "sample_rate": cfg.audio.sample_rate,
              "hop_length": cfg.audio.hop_length, "n_fft": cfg.audio.n_fft,
              "reference_frames": module.reference_frames, "window_samples": module.window_samples,
              "max_text_length": cfg.data.max_text_length, "text_buckets": module.text_buckets,
              "mel_buckets": module.mel_buckets,
              "embedding_shape": [1, model.dims.conditioning_vectors, model.dims.d_model],
              "vocoder": Path(chosen.path).name if chosen.path else "", "signatures": sorted(module.functions)}

    def write(staging: Path) -> Path:
        (staging / MODEL_FILE).write_bytes(flatbuffer)
        (staging / RECORD_FILE).write_text(json.dumps(record, indent=1), encoding="utf-8")
        vocabulary.save(staging / RunDir.VOCAB)
        mel_stats.save(staging / RunDir.MEL_STATS)  # inside the graph too; beside it for who reads the mels
        save_config(cfg, staging / RunDir.CONFIG)
        return out_dir

    return write_staged(out_dir, "export", LITERT_EXPORT, write)
