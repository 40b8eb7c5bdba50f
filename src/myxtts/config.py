"""Typed configuration: one place for defaults, validated on load.

A config is five sections (data / audio / text / model / training), each a frozen dataclass.
``load_config`` reads YAML, rejects unknown keys naming the key path and the closest valid key,
checks every type and range, and raises ``ValueError`` (never ``assert``).  Every key is read by
some part of the system; keys of the original codebase that would do nothing are rejected with a
message naming what replaces them.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import os
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping

import yaml

AUTOTUNE = -1  # value for num_workers / prefetch_buffer_size meaning "let tf.data decide"

# the model's top-level modules (myxtts.model.tts.TTSModel; a test keeps the two in step): what training.freeze names
MODEL_MODULES = ("text_encoder", "conditioning_encoder", "aligner", "duration_predictor", "decoder", "postnet")


@dataclass(frozen=True)
class DataConfig:
    """Corpus, cache and input pipeline."""

    corpus_path: str = "data/ljspeech-bundled"  # folder (ljspeech, vctk, libritts) or list file (list); relative to the config file
    corpus_format: Literal["ljspeech", "list", "vctk", "libritts"] = "ljspeech"
    cache_dir: str = "cache/ljspeech-bundled"  # prepared features; relative to the config file
    language: str = "en"  # language of entries that name none: picks the cleaner / espeak voice; cached as a language id
    min_duration: float = 0.5  # seconds; shorter clips are rejected at prepare
    max_duration: float = 12.0  # seconds; longer clips are rejected at prepare
    silence_threshold_db: float = -60.0  # a clip whose peak is below this (dBFS) is rejected as silent
    validation_size: int = 2  # utterances held out for validation (taken deterministically)
    # shape policy
    pad_to_fixed_length: bool = False  # True: the old fixed padding; False: length buckets
    max_text_length: int = 200  # tokens incl. bos/eos; longer entries are reported and skipped
    max_mel_frames: int = 880  # frames; longer entries are reported and skipped
    batch_size: int = 32  # fixed mode: the batch size; buckets: an upper bound per bucket
    batch_frames: int = 12000  # buckets: mel-frame budget per batch (batch * bucket frames)
    num_buckets: int = 12  # buckets: number of (text, mel) shapes
    bucket_multiple: int = 8  # bucket boundaries are multiples of this (>= reduction factor)
    min_batch_size: int = 1  # buckets: a bucket never gets fewer items per batch than this
    reference_frames: int = 256  # fixed length of the voice-conditioning reference mel (~3 s at 22050 Hz / hop 256)
    shuffle_buffer_size: int = 65536  # row indices (4 bytes each); >= utterances: a full uniform shuffle, else a
    # sliding window over a seeded permutation of the split (every window spans all speakers)
    seed: int = 1234
    # loading
    use_tf_native_loading: bool = False  # True: decode + mel with TF ops in the pipeline (no cache)
    num_workers: int = AUTOTUNE  # num_parallel_calls of the parse map; -1 = AUTOTUNE
    prefetch_buffer_size: int = AUTOTUNE  # batches prefetched at the end; -1 = AUTOTUNE
    prefetch_to_gpu: bool = True  # prefetch to the accelerator as the last step when one exists
    service_address: str = ""  # grpc://HOST:PORT of a tf.data service dispatcher: its workers run the pipeline


@dataclass(frozen=True)
class AudioConfig:
    """Waveform and mel front-end (shared by prepare, the on-the-fly path and synthesis)."""

    sample_rate: int = 22050
    n_fft: int = 1024
    win_length: int = 1024
    hop_length: int = 256
    n_mels: int = 80
    fmin: float = 0.0
    fmax: float = 8000.0
    mel_power: float = 1.0  # 1: magnitude mel, 2: power mel
    log_compression: Literal["natural", "log10", "none"] = "natural"
    log_floor: float = 1e-5  # clip before the log
    griffin_lim_iters: int = 32  # synthesis vocoder iterations


@dataclass(frozen=True)
class TextConfig:
    cleaner: Literal["english", "basic"] = "english"  # english: numbers, abbreviations, currency
    use_phonemes: bool = True  # IPA phonemes from espeak-ng (bundled by pip: espeakng-loader); false: characters
    phoneme_language: str = "en-us"


@dataclass(frozen=True)
class ModelConfig:
    preset: Literal["tiny", "small", "base"] = "tiny"
    # both read the text through durations from a learned alignment; parallel: all frames at once;
    # autoregressive: reduction_factor frames per step from the previous ones
    decoder: Literal["parallel", "autoregressive"] = "parallel"
    # None: take the preset's value
    d_model: int | None = None
    num_heads: int | None = None
    ff_dim: int | None = None
    text_layers: int | None = None
    decoder_layers: int | None = None
    conditioning_layers: int | None = None
    num_speaker_latents: int | None = None
    prenet_dim: int | None = None
    postnet_channels: int | None = None
    postnet_layers: int | None = None
    decoder_conv_blocks: int | None = None  # parallel decoder: residual dilated convolution blocks
    # frames per decoder step; None: the decoder's own (parallel 1, the only value it takes; autoregressive 2)
    reduction_factor: int | None = None
    dropout: float = 0.1
    max_attention_sequence_length: int = 1024  # positions table size; must cover text and decoder steps
    mel_l2_weight: float = 0.0  # weight of an extra L2 mel loss after the postnet (0: L1 only)
    # the aligner's forward-sum loss, the duration predictor's loss (MSE of log(1 + frames)),
    # and the binarisation loss (soft alignment towards the hard one), ramped in linearly from
    # binarization_start_step over binarization_ramp_steps optimizer steps
    forward_sum_weight: float = 1.0
    duration_weight: float = 1.0
    binarization_weight: float = 1.0
    binarization_start_step: int = 400
    binarization_ramp_steps: int = 200


@dataclass(frozen=True)
class TrainingConfig:
    max_steps: int = 1000
    max_minutes: float = 0.0  # stop and checkpoint after this many training minutes (resumes add up); 0: no limit
    learning_rate: float = 1e-3
    warmup_steps: int = 200
    decay: Literal["cosine", "noam", "constant"] = "cosine"
    min_learning_rate: float = 1e-5
    weight_decay: float = 0.0
    gradient_clip_norm: float = 1.0  # 0 disables clipping
    gradient_accumulation_steps: int = 1
    # optimizer steps per compiled call: K batches of one bucket run in one tf.function (a graph loop)
    steps_per_execution: int = 1
    mixed_precision: Literal["float32", "bfloat16", "float16"] = "float32"
    enable_graph_mode: bool = True  # compiled tf.function steps (False: eager, for debugging only)
    enable_xla_compilation: bool = False
    enable_eager_debug: bool = False  # run every tf.function eagerly (tf.config.run_functions_eagerly)
    strict_retracing: bool = False  # raise on any trace after warm-up
    max_nonfinite_steps: int = 10  # stop after this many NaN/Inf steps in a row
    log_every: int = 10
    validate_every: int = 200
    checkpoint_every: int = 200
    keep_checkpoints: int = 3
    summary_every: int = 500  # mel / alignment images and an audio sample (0 disables)
    listen_sentences: int = 2  # validation sentences synthesised free-running at each validation (0 disables; max 4)
    distribution: Literal["none", "mirrored", "multi_worker"] = "none"
    seed: int = 1234
    deterministic: bool = False  # tf.config.experimental.enable_op_determinism
    # warm start: model weights of another run (its directory, or a checkpoint prefix / folder; relative to the
    # config file); a fresh optimizer, step 0 and this config's schedule. Ignored by --resume of a saved run
    init_from: str = ""
    # model modules kept fixed (excluded from the optimizer): any of MODEL_MODULES
    freeze: tuple[str, ...] = ()


@dataclass(frozen=True)
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    audio: AudioConfig = field(default_factory=AudioConfig)
    text: TextConfig = field(default_factory=TextConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    # folder the relative paths are resolved against (the config file's folder); not a YAML key
    base_dir: str = field(default=".", metadata={"internal": True})

    # ---- derived -----------------------------------------------------------------------------
    def resolve(self, path: str) -> Path:
        """A path from the config, made absolute against the config file's folder."""
        p = Path(os.path.expanduser(path))
        return p if p.is_absolute() else (Path(self.base_dir) / p).resolve()

    @property
    def corpus_path(self) -> Path:
        return self.resolve(self.data.corpus_path)

    @property
    def cache_dir(self) -> Path:
        return self.resolve(self.data.cache_dir)

    def to_dict(self) -> dict[str, Any]:
        """Plain YAML-ready values (tuples as lists)."""
        return {f.name: {key: list(value) if isinstance(value, tuple) else value
                         for key, value in dataclasses.asdict(getattr(self, f.name)).items()}
                for f in _sections()}

    @property
    def init_from(self) -> Path | None:
        """training.init_from resolved against the config file's folder (None: start from random weights)."""
        return self.resolve(self.training.init_from) if self.training.init_from else None

    def feature_hash(self) -> str:
        """Hash of every parameter the cached features depend on (audio, text, corpus, filters)."""
        d = self.data
        relevant = {
            "audio": dataclasses.asdict(self.audio),
            "text": dataclasses.asdict(self.text),
            "corpus": [str(self.corpus_path), d.corpus_format, d.language],
            "filters": [d.min_duration, d.max_duration, d.silence_threshold_db],
            "format_version": 2,
        }
        relevant["audio"].pop("griffin_lim_iters")  # synthesis only
        blob = json.dumps(relevant, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def replace(self, **sections: Any) -> "Config":
        return dataclasses.replace(self, **sections)


# Keys of the original codebase that would do nothing here: rejected, naming the replacement.
REMOVED_KEYS: dict[str, str] = {
    "data.enhanced_gpu_prefetch": "prefetch is always the last pipeline step; use data.prefetch_to_gpu "
    "and data.prefetch_buffer_size",
    "data.optimize_cpu_gpu_overlap": "features come from the prepared cache (myxtts prepare) and the "
    "pipeline ends with prefetch; measure overlap with `myxtts diagnose pipeline`",
    "data.cache_shard_size": "the cache stores one file per utterance (random access for the shuffle and for "
    "references; see docs/architecture.md); nothing to size",
    "data.auto_tune_performance": "use -1 (AUTOTUNE) for data.num_workers and data.prefetch_buffer_size",
    "training.enhanced_gpu_prefetch": "use data.prefetch_to_gpu",
    "training.optimize_cpu_gpu_overlap": "measure overlap with `myxtts diagnose pipeline`",
    "training.auto_tune_performance": "use -1 (AUTOTUNE) for data.num_workers and data.prefetch_buffer_size",
}

# Keys users of the original system put in another section: moved, with a conflict check.
MOVED_KEYS: dict[str, str] = {
    "data.n_mels": "audio.n_mels",
    "data.sample_rate": "audio.sample_rate",
    "data.hop_length": "audio.hop_length",
    "data.n_fft": "audio.n_fft",
    "data.win_length": "audio.win_length",
}


def _sections() -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(Config) if not f.metadata.get("internal")]


def _closest(name: str, options: list[str]) -> str:
    match = difflib.get_close_matches(name, options, n=1, cutoff=0.5)
    return f" Did you mean '{match[0]}'?" if match else f" Valid keys: {', '.join(sorted(options))}."


def _check_value(path: str, value: Any, annotation: Any) -> Any:
    """Check (and lightly coerce: int -> float) one value against its annotation."""
    origin = typing.get_origin(annotation)
    if origin is Literal:
        choices = typing.get_args(annotation)
        if value not in choices:
            raise ValueError(f"Config key '{path}': {value!r} is not one of {list(choices)}.")
        return value
    if origin is tuple:  # tuple[str, ...]: a YAML list
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"Config key '{path}': expected a list, got {value!r}.")
        item = typing.get_args(annotation)[0]
        return tuple(_check_value(f"{path}[{index}]", element, item) for index, element in enumerate(value))
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if value is None:
            return None
        return _check_value(path, value, args[0])
    if annotation is bool:
        if not isinstance(value, bool):
            raise ValueError(f"Config key '{path}': expected true/false, got {value!r}.")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"Config key '{path}': expected an integer, got {value!r}.")
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"Config key '{path}': expected a number, got {value!r}.")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise ValueError(f"Config key '{path}': expected a string, got {value!r}.")
        return value
    raise TypeError(f"unsupported annotation {annotation} for {path}")  # programming error


def _build_section(name: str, cls: type, raw: Any) -> Any:
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"Config section '{name}' must be a mapping, got {type(raw).__name__}.")
    hints = typing.get_type_hints(cls)
    valid = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in raw.items():
        path = f"{name}.{key}"
        if path in REMOVED_KEYS:
            raise ValueError(f"Config key '{path}' is not supported: it would do nothing here. "
                             f"Instead: {REMOVED_KEYS[path]}.")
        if key not in valid:
            raise ValueError(f"Unknown config key '{path}'.{_closest(str(key), valid)}")
        kwargs[key] = _check_value(path, value, hints[key])
    return cls(**kwargs)


def _positive(cfg: Config, *paths: str) -> None:
    for path in paths:
        section, key = path.split(".")
        value = getattr(getattr(cfg, section), key)
        if value is not None and value <= 0:
            raise ValueError(f"Config key '{path}' must be > 0, got {value}.")


DEFAULT_REDUCTION_FACTOR = {"parallel": 1, "autoregressive": 2}


def validate(cfg: Config) -> Config:
    """Cross-field and range checks; raises ValueError naming the key. Returns the config with the defaults that
    depend on other keys resolved (``model.reduction_factor`` by ``model.decoder``)."""
    if cfg.model.reduction_factor is None:
        cfg = cfg.replace(model=dataclasses.replace(cfg.model,
                                                    reduction_factor=DEFAULT_REDUCTION_FACTOR[cfg.model.decoder]))
    _positive(cfg, "data.max_text_length", "data.max_mel_frames", "data.batch_size", "data.batch_frames",
              "data.num_buckets", "data.bucket_multiple", "data.min_batch_size", "data.reference_frames",
              "data.shuffle_buffer_size", "data.min_duration",
              "data.max_duration", "audio.sample_rate", "audio.n_fft", "audio.win_length",
              "audio.hop_length", "audio.n_mels", "audio.log_floor", "audio.griffin_lim_iters",
              "audio.mel_power", "model.d_model", "model.num_heads", "model.ff_dim",
              "model.text_layers", "model.decoder_layers", "model.conditioning_layers",
              "model.num_speaker_latents", "model.prenet_dim", "model.postnet_channels", "model.decoder_conv_blocks",
              "model.reduction_factor", "model.max_attention_sequence_length",
              "training.max_steps", "training.learning_rate", "training.gradient_accumulation_steps",
              "training.steps_per_execution",
              "training.max_nonfinite_steps", "training.log_every", "training.validate_every",
              "training.checkpoint_every", "training.keep_checkpoints")
    d, a, m, t = cfg.data, cfg.audio, cfg.model, cfg.training
    for path, value in (("data.num_workers", d.num_workers), ("data.prefetch_buffer_size", d.prefetch_buffer_size)):
        if value != AUTOTUNE and value < 1:
            raise ValueError(f"Config key '{path}' must be >= 1 or -1 (AUTOTUNE), got {value}.")
    if d.service_address and not re.fullmatch(r"(grpc://)?[\w.\-\[\]:]+:\d+", d.service_address):
        raise ValueError(f"Config key 'data.service_address' must look like grpc://HOST:PORT (a tf.data service "
                         f"dispatcher), got {d.service_address!r}.")
    if d.min_duration >= d.max_duration:
        raise ValueError(f"Config key 'data.min_duration' ({d.min_duration}) must be below "
                         f"'data.max_duration' ({d.max_duration}).")
    if t.steps_per_execution > 1:
        if t.gradient_accumulation_steps > 1:
            raise ValueError("Config keys 'training.steps_per_execution' and 'training.gradient_accumulation_steps' "
                             "cannot both be > 1: a compiled call runs either K whole updates of one bucket or one "
                             "micro-batch of an accumulation cycle. Set one of them to 1.")
        if t.max_steps % t.steps_per_execution:
            raise ValueError(f"Config key 'training.max_steps' ({t.max_steps}) must be a multiple of "
                             f"'training.steps_per_execution' ({t.steps_per_execution}): every compiled call runs "
                             "that many steps.")
    if d.validation_size < 0:
        raise ValueError("Config key 'data.validation_size' must be >= 0.")
    if a.win_length > a.n_fft:
        raise ValueError(f"Config key 'audio.win_length' ({a.win_length}) must be <= 'audio.n_fft' ({a.n_fft}).")
    if not 0 <= a.fmin < a.fmax <= a.sample_rate / 2:
        raise ValueError(f"Config keys 'audio.fmin'/'audio.fmax' must satisfy 0 <= fmin < fmax <= "
                         f"sample_rate/2 = {a.sample_rate / 2}, got {a.fmin}/{a.fmax}.")
    if d.bucket_multiple % m.reduction_factor:
        raise ValueError(f"Config key 'data.bucket_multiple' ({d.bucket_multiple}) must be a multiple of "
                         f"'model.reduction_factor' ({m.reduction_factor}) so every bucket holds whole "
                         "decoder steps.")
    if d.max_mel_frames % m.reduction_factor:
        raise ValueError(f"Config key 'data.max_mel_frames' ({d.max_mel_frames}) must be a multiple of "
                         f"'model.reduction_factor' ({m.reduction_factor}).")
    if d.pad_to_fixed_length and d.batch_size * d.max_mel_frames <= 0:
        raise ValueError("Config key 'data.batch_size' must be > 0 with data.pad_to_fixed_length.")
    if not 0.0 <= m.dropout < 1.0:
        raise ValueError(f"Config key 'model.dropout' must be in [0, 1), got {m.dropout}.")
    _check_decoder_keys(m)
    if m.mel_l2_weight < 0:
        raise ValueError(f"Config key 'model.mel_l2_weight' must be >= 0, got {m.mel_l2_weight}.")
    # the position table covers the text, and the autoregressive decoder's steps (the parallel one has none)
    longest = d.max_text_length if m.decoder == "parallel" else \
        max(d.max_text_length, d.max_mel_frames // m.reduction_factor + 1)
    if m.max_attention_sequence_length < longest:
        raise ValueError(f"Config key 'model.max_attention_sequence_length' ({m.max_attention_sequence_length}) "
                         f"is below the longest sequence the model sees ({longest}: max_text_length"
                         f"{'' if m.decoder == 'parallel' else ' or max_mel_frames / reduction_factor + 1'}).")
    if t.min_learning_rate < 0 or t.min_learning_rate > t.learning_rate:
        raise ValueError("Config key 'training.min_learning_rate' must be in [0, training.learning_rate].")
    if t.max_minutes < 0:
        raise ValueError(f"Config key 'training.max_minutes' must be >= 0 (0: no limit), got {t.max_minutes}.")
    if t.warmup_steps < 0 or t.weight_decay < 0 or t.gradient_clip_norm < 0 or t.summary_every < 0:
        raise ValueError("Config keys 'training.warmup_steps', 'training.weight_decay', "
                         "'training.gradient_clip_norm' and 'training.summary_every' must be >= 0.")
    if not 0 <= t.listen_sentences <= 4:
        raise ValueError(f"Config key 'training.listen_sentences' must be in [0, 4] (validation sentences "
                         f"synthesised at each validation; 0 disables), got {t.listen_sentences}.")
    unknown = [name for name in t.freeze if name not in MODEL_MODULES]
    if unknown:
        raise ValueError(f"Config key 'training.freeze': {unknown[0]!r} is not a module of the model; modules: "
                         f"{', '.join(MODEL_MODULES)}.")
    if len(set(t.freeze)) != len(t.freeze):
        raise ValueError(f"Config key 'training.freeze' names a module twice: {list(t.freeze)}.")
    if set(t.freeze) == set(MODEL_MODULES):
        raise ValueError("Config key 'training.freeze' names every module of the model: nothing would train.")
    if t.enable_eager_debug and t.enable_xla_compilation:
        raise ValueError("Config keys 'training.enable_eager_debug' and 'training.enable_xla_compilation' "
                         "cannot both be true: eager functions are not compiled.")
    if not t.enable_graph_mode and t.enable_xla_compilation:
        raise ValueError("Config key 'training.enable_xla_compilation' needs 'training.enable_graph_mode: true'.")
    return cfg


# keys that only one decoder reads: set to anything but the default for the other decoder, they are rejected
AUTOREGRESSIVE_ONLY_KEYS = ("decoder_layers", "prenet_dim")
PARALLEL_ONLY_KEYS = ("decoder_conv_blocks",)


def _check_decoder_keys(m: ModelConfig) -> None:
    defaults = ModelConfig()
    other = AUTOREGRESSIVE_ONLY_KEYS if m.decoder == "parallel" else PARALLEL_ONLY_KEYS
    for key in other:
        if getattr(m, key) != getattr(defaults, key):
            raise ValueError(f"Config key 'model.{key}' ({getattr(m, key)!r}) does nothing with "
                             f"'model.decoder: {m.decoder}'; remove it or choose the other decoder.")
    if m.decoder == "parallel" and m.reduction_factor != 1:
        raise ValueError(f"Config key 'model.reduction_factor' must be 1 with 'model.decoder: parallel' (it predicts "
                         f"every frame at once), got {m.reduction_factor}.")
    for key in ("forward_sum_weight", "duration_weight", "binarization_weight", "binarization_start_step",
                "binarization_ramp_steps"):
        if getattr(m, key) < 0:
            raise ValueError(f"Config key 'model.{key}' must be >= 0, got {getattr(m, key)}.")


def _move_legacy_keys(raw: dict[str, Any]) -> dict[str, Any]:
    raw = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in raw.items()}
    for old, new in MOVED_KEYS.items():
        old_section, key = old.split(".")
        new_section, new_key = new.split(".")
        section = raw.get(old_section)
        if not isinstance(section, dict) or key not in section:
            continue
        value = section.pop(key)
        target = raw.setdefault(new_section, {}) or {}
        raw[new_section] = target
        if new_key in target and target[new_key] != value:
            raise ValueError(f"Config keys '{old}' ({value!r}) and '{new}' ({target[new_key]!r}) disagree; "
                             f"set only '{new}'.")
        target[new_key] = value
    return raw


def config_from_dict(raw: Mapping[str, Any] | None, base_dir: str | os.PathLike = ".") -> Config:
    raw = dict(raw or {})
    if not isinstance(raw, Mapping):
        raise ValueError("A config must be a mapping of sections.")
    raw = _move_legacy_keys(raw)
    sections = {f.name: f for f in _sections()}
    kwargs: dict[str, Any] = {}
    for name, value in raw.items():
        if name not in sections:
            raise ValueError(f"Unknown config section '{name}'.{_closest(str(name), list(sections))}")
        cls = typing.get_type_hints(Config)[name]
        kwargs[name] = _build_section(name, cls, value)
    return validate(Config(**kwargs, base_dir=str(Path(base_dir).resolve())))


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``section.key=value`` overrides (value parsed as YAML) to a raw config dict."""
    raw = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in raw.items()}
    for item in overrides:
        if "=" not in item or "." not in item.split("=", 1)[0]:
            raise ValueError(f"Override {item!r} must look like section.key=value.")
        path, text = item.split("=", 1)
        section, key = path.split(".", 1)
        raw.setdefault(section, {})
        if raw[section] is None:
            raw[section] = {}
        raw[section][key] = yaml.safe_load(text)
    return raw


def load_config(path: str | os.PathLike, overrides: list[str] | None = None) -> Config:
    """Load and validate a YAML config; relative paths inside resolve against its folder."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"Config file not found: {path}")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ValueError(f"Config file {path} is not valid YAML{where}: {err}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ValueError(f"Config file {path} must hold a mapping of sections, got {type(raw).__name__}.")
    raw = apply_overrides(raw, overrides or [])
    try:
        return config_from_dict(raw, base_dir=path.parent)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


def save_config(cfg: Config, path: str | os.PathLike) -> None:
    """Write the resolved config (every key, defaults included) as YAML."""
    data = cfg.to_dict()
    data["data"]["corpus_path"] = str(cfg.corpus_path)
    data["data"]["cache_dir"] = str(cfg.cache_dir)
    if cfg.init_from is not None:
        data["training"]["init_from"] = str(cfg.init_from)
    Path(path).write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
