"""Range and cross-key checks of a built ``Config``: ``validate`` raises ``ValueError`` naming the key."""

from __future__ import annotations

import dataclasses
import re

from myxtts.config.sections import (AUTOTUNE, MODEL_MODULES, Config, ConfigError, CorpusSource, DataConfig, ModelConfig,
                                    VocoderConfig, default_corpus_name)


def _positive(cfg: Config, *paths: str) -> None:
    for path in paths:
        section, key = path.split(".")
        value = getattr(getattr(cfg, section), key)
        if value is not None and value <= 0:
            raise ConfigError(f"Config key '{path}' must be > 0, got {value}.")


DEFAULT_REDUCTION_FACTOR = {"parallel": 1, "autoregressive": 2}


POSITIVE_KEYS = ("data.max_text_length", "data.max_mel_frames", "data.batch_size", "data.batch_frames",
                 "data.num_buckets", "data.bucket_multiple", "data.min_batch_size", "data.reference_frames",
                 "data.shuffle_buffer_size", "data.min_duration", "data.max_duration", "audio.sample_rate",
                 "audio.n_fft", "audio.win_length", "audio.hop_length", "audio.n_mels", "audio.log_floor",
                 "audio.griffin_lim_iters", "audio.mel_power", "model.d_model", "model.num_heads", "model.ff_dim",
                 "model.text_layers", "model.decoder_layers", "model.conditioning_layers",
                 "model.num_speaker_latents", "model.prenet_dim", "model.postnet_channels",
                 "model.decoder_conv_blocks", "model.text_ff_kernel", "model.reduction_factor",
                 "model.max_attention_sequence_length", "model.reference_windows", "training.max_steps", "training.learning_rate",
                 "training.gradient_accumulation_steps", "training.steps_per_execution",
                 "training.max_nonfinite_steps", "training.log_every", "training.validate_every",
                 "training.checkpoint_every", "training.keep_checkpoints")


def validate(cfg: Config) -> Config:
    """Cross-field and range checks; raises ValueError naming the key. Returns the config with the defaults that
    depend on other keys resolved (``model.reduction_factor`` by ``model.decoder``)."""
    if cfg.model.reduction_factor is None:
        cfg = cfg.replace(model=dataclasses.replace(cfg.model,
                                                    reduction_factor=DEFAULT_REDUCTION_FACTOR[cfg.model.decoder]))
    _positive(cfg, *POSITIVE_KEYS)
    _check_data_keys(cfg)
    _check_audio_keys(cfg)
    _check_model_keys(cfg)
    _check_training_keys(cfg)
    return _check_vocoder_keys(cfg)


def _check_data_keys(cfg: Config) -> None:
    d, m = cfg.data, cfg.model
    for path, value in (("data.num_workers", d.num_workers), ("data.prefetch_buffer_size", d.prefetch_buffer_size)):
        if value != AUTOTUNE and value < 1:
            raise ConfigError(f"Config key '{path}' must be >= 1 or -1 (AUTOTUNE), got {value}.")
    if d.service_address and not re.fullmatch(r"(grpc://)?[\w.\-\[\]:]+:\d+", d.service_address):
        raise ConfigError(f"Config key 'data.service_address' must look like grpc://HOST:PORT (a tf.data service "
                         f"dispatcher), got {d.service_address!r}.")
    _check_corpora(cfg)
    if d.min_duration >= d.max_duration:
        raise ConfigError(f"Config key 'data.min_duration' ({d.min_duration}) must be below "
                         f"'data.max_duration' ({d.max_duration}).")
    if d.validation_size < 0:
        raise ConfigError("Config key 'data.validation_size' must be >= 0.")
    if d.bucket_multiple % m.reduction_factor:
        raise ConfigError(f"Config key 'data.bucket_multiple' ({d.bucket_multiple}) must be a multiple of "
                         f"'model.reduction_factor' ({m.reduction_factor}) so every bucket holds whole "
                         "decoder steps.")
    if d.max_mel_frames % m.reduction_factor:
        raise ConfigError(f"Config key 'data.max_mel_frames' ({d.max_mel_frames}) must be a multiple of "
                         f"'model.reduction_factor' ({m.reduction_factor}).")
    if d.pad_to_fixed_length and d.batch_size * d.max_mel_frames <= 0:
        raise ConfigError("Config key 'data.batch_size' must be > 0 with data.pad_to_fixed_length.")


def _check_corpora(cfg: Config) -> None:
    d, defaults = cfg.data, DataConfig()
    if not d.corpora:
        return
    for key in ("corpus_path", "corpus_format"):
        if getattr(d, key) != getattr(defaults, key):
            raise ConfigError(f"Config keys 'data.{key}' and 'data.corpora' are both set: list every corpus in "
                             f"data.corpora (path, format, weight) and remove 'data.{key}'.")
    if d.use_tf_native_loading and len(d.corpora) > 1:
        raise ConfigError("Config key 'data.corpora' with several corpora is not implemented with "
                         "'data.use_tf_native_loading: true' (that path would draw by clip count, not by the corpora's "
                         "weights): train from the prepared cache (use_tf_native_loading: false), or list one corpus.")
    names = [c.name or default_corpus_name(cfg.resolve(c.path)) for c in d.corpora]
    record = CorpusSource(path="")
    for index, corpus in enumerate(d.corpora):
        where = f"data.corpora[{index}]"
        if not corpus.path:
            raise ConfigError(f"Config key '{where}.path' must name the corpus folder or list file.")
        if not 0.0 < corpus.weight < float("inf"):
            raise ConfigError(f"Config key '{where}.weight' must be a number > 0, got {corpus.weight}.")
        if corpus.held_out_speakers < 0:
            raise ConfigError(f"Config key '{where}.held_out_speakers' must be >= 0, got {corpus.held_out_speakers}.")
        if not re.fullmatch(r"[\w.\-]+", names[index]):
            raise ConfigError(f"Config key '{where}.name' must be letters, digits, '.', '-' or '_' (it prefixes the "
                             f"corpus' ids and speakers), got {names[index]!r}.")
        if names.count(names[index]) > 1:
            raise ConfigError(f"Config key '{where}.name': two corpora are named {names[index]!r}; give each its "
                             "own name.")
        if corpus.format != "commonvoice":
            for key in ("min_up_votes", "max_down_votes"):
                if getattr(corpus, key) != getattr(record, key):
                    raise ConfigError(f"Config key '{where}.{key}' is read only by the commonvoice format; "
                                     f"this corpus is '{corpus.format}'. Remove the key.")
        if corpus.min_up_votes < 0 or corpus.max_down_votes < 0:
            raise ConfigError(f"Config keys '{where}.min_up_votes' / '{where}.max_down_votes' must be >= 0.")


def _check_audio_keys(cfg: Config) -> None:
    a = cfg.audio
    if a.win_length > a.n_fft:
        raise ConfigError(f"Config key 'audio.win_length' ({a.win_length}) must be <= 'audio.n_fft' ({a.n_fft}).")
    if not 0 <= a.fmin < a.fmax <= a.sample_rate / 2:
        raise ConfigError(f"Config keys 'audio.fmin'/'audio.fmax' must satisfy 0 <= fmin < fmax <= "
                         f"sample_rate/2 = {a.sample_rate / 2}, got {a.fmin}/{a.fmax}.")


def _check_model_keys(cfg: Config) -> None:
    d, m = cfg.data, cfg.model
    if m.text_ff_kernel is not None and m.text_ff_kernel % 2 == 0:
        raise ConfigError(f"Config key 'model.text_ff_kernel' must be odd (a token reads as many neighbours on each "
                         f"side), got {m.text_ff_kernel}.")
    if not 0.0 <= m.dropout < 1.0:
        raise ConfigError(f"Config key 'model.dropout' must be in [0, 1), got {m.dropout}.")
    _check_decoder_keys(m)
    if m.reference_tokens > d.reference_frames:
        raise ConfigError(f"Config key 'model.reference_tokens' ({m.reference_tokens}) exceeds 'data.reference_frames' "
                         f"({d.reference_frames}): each token averages a stretch of at least one reference frame; "
                         "choose at most data.reference_frames.")
    if not 0.0 <= m.reference_spectrum <= 1.0:  # NaN fails too
        raise ConfigError(f"Config key 'model.reference_spectrum' must be a share in [0, 1] (0: off, 1: the "
                         f"reference's long-term spectrum in full), got {m.reference_spectrum}.")
    for key in ("mel_l2_weight", "mel_delta_weight", "mel_adversarial_weight", "mel_feature_matching_weight"):
        if getattr(m, key) < 0:
            raise ConfigError(f"Config key 'model.{key}' must be >= 0, got {getattr(m, key)}.")
    if not 0.0 <= m.mel_sharpening < float("inf"):  # NaN fails too
        raise ConfigError(f"Config key 'model.mel_sharpening' must be a number >= 0 (0: the mel as decoded), got "
                         f"{m.mel_sharpening}.")
    if not 0.0 <= m.pitch_variation < float("inf"):  # NaN fails too
        raise ConfigError(f"Config key 'model.pitch_variation' must be a number >= 0 (1: the pitch as predicted), got "
                         f"{m.pitch_variation}.")
    if m.pitch_variation != 1.0 and not m.pitch_conditioning:
        raise ConfigError(f"Config key 'model.pitch_variation' ({m.pitch_variation}) does nothing without pitch "
                         "conditioning: set 'model.pitch_conditioning: true' or leave it at 1.")
    if m.pitch_level and not m.pitch_conditioning:
        raise ConfigError("Config key 'model.pitch_level' needs pitch conditioning (the level is part of each token's "
                          "pitch): set 'model.pitch_conditioning: true' or 'model.pitch_level: false'.")
    if not 0.0 <= d.self_reference_share <= 1.0:  # NaN fails too
        raise ConfigError(f"Config key 'data.self_reference_share' must be in [0, 1] (the share of training examples "
                         f"whose reference is a slice of their own clip; 0: off), got {d.self_reference_share}.")
    if not 0.0 <= d.voice_warp <= 0.5:  # NaN fails too
        raise ConfigError(f"Config key 'data.voice_warp' must be in [0, 0.5] (the largest |log| of the frequency "
                         f"factor; 0: off), got {d.voice_warp}.")
    discriminator = m.mel_adversarial_weight > 0 or m.mel_feature_matching_weight > 0
    if m.mel_discriminator_channels is not None and not discriminator:
        raise ConfigError(f"Config key 'model.mel_discriminator_channels' ({m.mel_discriminator_channels}) does nothing "
                         "without the mel discriminator: set 'model.mel_adversarial_weight' or "
                         "'model.mel_feature_matching_weight' > 0, or remove it.")
    if m.mel_discriminator_channels is not None and m.mel_discriminator_channels < 1:
        raise ConfigError(f"Config key 'model.mel_discriminator_channels' must be >= 1, got "
                         f"{m.mel_discriminator_channels}.")
    if discriminator and cfg.training.mixed_precision == "float16":
        raise ConfigError("Config keys 'model.mel_adversarial_weight' / 'model.mel_feature_matching_weight' > 0 are "
                         "not implemented with 'training.mixed_precision: float16' (the mel discriminator's loss is "
                         "not loss-scaled): use bfloat16 or float32, or set both weights to 0.")
    # the position table covers the text, and the autoregressive decoder's steps (the parallel one has none)
    longest = d.max_text_length if m.decoder == "parallel" else \
        max(d.max_text_length, d.max_mel_frames // m.reduction_factor + 1)
    if m.max_attention_sequence_length < longest:
        raise ConfigError(f"Config key 'model.max_attention_sequence_length' ({m.max_attention_sequence_length}) "
                         f"is below the longest sequence the model sees ({longest}: max_text_length"
                         f"{'' if m.decoder == 'parallel' else ' or max_mel_frames / reduction_factor + 1'}).")


def _check_training_keys(cfg: Config) -> None:
    t = cfg.training
    if t.steps_per_execution > 1 and t.gradient_accumulation_steps > 1:
        raise ConfigError("Config keys 'training.steps_per_execution' and 'training.gradient_accumulation_steps' "
                         "cannot both be > 1: a compiled call runs either K whole updates of one bucket or one "
                         "micro-batch of an accumulation cycle. Set one of them to 1.")
    if t.steps_per_execution > 1 and t.max_steps % t.steps_per_execution:
        raise ConfigError(f"Config key 'training.max_steps' ({t.max_steps}) must be a multiple of "
                         f"'training.steps_per_execution' ({t.steps_per_execution}): every compiled call runs "
                         "that many steps.")
    if t.min_learning_rate < 0 or t.min_learning_rate > t.learning_rate:
        raise ConfigError("Config key 'training.min_learning_rate' must be in [0, training.learning_rate].")
    if t.max_minutes < 0:
        raise ConfigError(f"Config key 'training.max_minutes' must be >= 0 (0: no limit), got {t.max_minutes}.")
    if t.warmup_steps < 0 or t.weight_decay < 0 or t.gradient_clip_norm < 0 or t.summary_every < 0:
        raise ConfigError("Config keys 'training.warmup_steps', 'training.weight_decay', "
                         "'training.gradient_clip_norm' and 'training.summary_every' must be >= 0.")
    if not 0 <= t.listen_sentences <= 4:
        raise ConfigError(f"Config key 'training.listen_sentences' must be in [0, 4] (validation sentences "
                         f"synthesised at each validation; 0 disables), got {t.listen_sentences}.")
    unknown = [name for name in t.freeze if name not in MODEL_MODULES]
    if unknown:
        raise ConfigError(f"Config key 'training.freeze': {unknown[0]!r} is not a module of the model; modules: "
                         f"{', '.join(MODEL_MODULES)}.")
    if len(set(t.freeze)) != len(t.freeze):
        raise ConfigError(f"Config key 'training.freeze' names a module twice: {list(t.freeze)}.")
    if not 0.0 <= t.ema_decay < 1.0:
        raise ConfigError(f"Config key 'training.ema_decay' must be in [0, 1) (0: no weight average; e.g. 0.995 "
                         f"averages over about the last 200 updates), got {t.ema_decay}.")
    if set(t.freeze) == set(MODEL_MODULES):
        raise ConfigError("Config key 'training.freeze' names every module of the model: nothing would train.")
    if t.enable_eager_debug and t.enable_xla_compilation:
        raise ConfigError("Config keys 'training.enable_eager_debug' and 'training.enable_xla_compilation' "
                         "cannot both be true: eager functions are not compiled.")
    if not t.enable_graph_mode and t.enable_xla_compilation:
        raise ConfigError("Config key 'training.enable_xla_compilation' needs 'training.enable_graph_mode: true'.")


DEFAULT_SEGMENT_HOPS = 32  # vocoder.segment_samples when unset: 32 hops (8192 samples at hop 256)


def _check_vocoder_keys(cfg: Config) -> Config:
    hop = cfg.audio.hop_length
    if cfg.vocoder.segment_samples is None:
        cfg = cfg.replace(vocoder=dataclasses.replace(cfg.vocoder, segment_samples=DEFAULT_SEGMENT_HOPS * hop))
    v = cfg.vocoder
    _positive(cfg, "vocoder.dim", "vocoder.intermediate_dim", "vocoder.layers", "vocoder.kernel_size",
              "vocoder.segment_samples", "vocoder.batch_size", "vocoder.discriminator_channels",
              "vocoder.resolution_channels", "vocoder.discriminator_learning_rate")
    if v.segment_samples % hop or v.segment_samples < 4 * hop:
        raise ConfigError(f"Config key 'vocoder.segment_samples' ({v.segment_samples}) must be a multiple of "
                         f"'audio.hop_length' ({hop}) and at least 4 hops: a segment is whole mel frames.")
    if v.kernel_size % 2 == 0:
        raise ConfigError(f"Config key 'vocoder.kernel_size' must be odd, got {v.kernel_size}.")
    _check_vocoder_family_keys(cfg)
    if v.adversarial_start_step < 0:
        raise ConfigError(f"Config key 'vocoder.adversarial_start_step' must be >= 0, got {v.adversarial_start_step}.")
    if not v.discriminator_periods or any(p < 2 for p in v.discriminator_periods) or \
            len(set(v.discriminator_periods)) != len(v.discriminator_periods):
        raise ConfigError(f"Config key 'vocoder.discriminator_periods' must be distinct periods >= 2, got "
                         f"{list(v.discriminator_periods)}.")
    if not v.resolution_ffts or any(n < 64 or n & (n - 1) for n in v.resolution_ffts) or \
            max(v.resolution_ffts) > v.segment_samples:
        raise ConfigError(f"Config key 'vocoder.resolution_ffts' must be powers of two from 64 up to "
                         f"'vocoder.segment_samples' ({v.segment_samples}), got {list(v.resolution_ffts)}.")
    for key in ("mel_loss_weight", "stft_loss_weight", "feature_loss_weight", "adversarial_loss_weight"):
        if getattr(v, key) < 0:
            raise ConfigError(f"Config key 'vocoder.{key}' must be >= 0, got {getattr(v, key)}.")
    if not 0.0 <= v.recorded_mel_share <= 1.0:
        raise ConfigError(f"Config key 'vocoder.recorded_mel_share' must be in [0, 1] (the share of segments read from "
                         f"the recordings' mels under --acoustic-run), got {v.recorded_mel_share}.")
    if not 0.0 <= v.magnitude_from_mel <= 1.0:
        raise ConfigError(f"Config key 'vocoder.magnitude_from_mel' must be in [0, 1] (0: the generator's magnitude, 1: "
                         f"the mel's pseudo-inverse), got {v.magnitude_from_mel}.")
    if v.mel_loss_weight == 0 and v.stft_loss_weight == 0:
        raise ConfigError("Config keys 'vocoder.mel_loss_weight' and 'vocoder.stft_loss_weight' are both 0: the "
                         "generator would have no reconstruction loss.")
    return cfg


# keys that only one vocoder family reads: set to anything but the default for the other family, they are rejected
VOCOS_ONLY_KEYS = ("dim", "intermediate_dim", "layers", "kernel_size", "magnitude_prior")
ISTFTNET_ONLY_KEYS = ("upsample_rates", "upsample_channels", "resblock_kernels", "resblock_dilations")


def _check_vocoder_family_keys(cfg: Config) -> None:
    v, defaults = cfg.vocoder, VocoderConfig()
    other = ISTFTNET_ONLY_KEYS if v.family == "vocos" else VOCOS_ONLY_KEYS
    for key in other:
        if getattr(v, key) != getattr(defaults, key):
            raise ConfigError(f"Config key 'vocoder.{key}' is read only by another vocoder family; vocoder.family is "
                             f"'{v.family}'. Remove the key, or set vocoder.family to the family that reads it.")
    if v.family != "istftnet":
        return
    _positive(cfg, "vocoder.upsample_channels")
    for key in ("upsample_rates", "resblock_kernels", "resblock_dilations"):
        values = getattr(v, key)
        if values is not None and (not values or any(value < 1 for value in values)):
            raise ConfigError(f"Config key 'vocoder.{key}' must be a non-empty list of integers >= 1, got "
                             f"{list(values)}.")
    upsampling = 1
    for rate in v.upsample_rates:
        upsampling *= rate
    if cfg.audio.hop_length % upsampling or cfg.audio.hop_length // upsampling < 2:
        raise ConfigError(f"Config key 'vocoder.upsample_rates' {list(v.upsample_rates)} (x{upsampling}) must divide "
                         f"'audio.hop_length' ({cfg.audio.hop_length}) leaving a hop of at least 2 samples for the "
                         "inverse STFT.")
    if v.upsample_channels is not None and v.upsample_channels % 2 ** len(v.upsample_rates):
        raise ConfigError(f"Config key 'vocoder.upsample_channels' ({v.upsample_channels}) must be divisible by "
                         f"{2 ** len(v.upsample_rates)}: each upsampling halves it.")
    if v.resblock_kernels is not None and any(kernel % 2 == 0 for kernel in v.resblock_kernels):
        raise ConfigError(f"Config key 'vocoder.resblock_kernels' must be odd sizes, got {list(v.resblock_kernels)}.")


# keys that only one decoder reads: set to anything but the default for the other decoder, they are rejected
AUTOREGRESSIVE_ONLY_KEYS = ("decoder_layers", "prenet_dim")
PARALLEL_ONLY_KEYS = ("decoder_conv_blocks", "speaker_adaptive_norm", "reference_tokens", "reference_spectrum")


def _check_decoder_keys(m: ModelConfig) -> None:
    defaults = ModelConfig()
    other = AUTOREGRESSIVE_ONLY_KEYS if m.decoder == "parallel" else PARALLEL_ONLY_KEYS
    for key in other:
        if getattr(m, key) != getattr(defaults, key):
            raise ConfigError(f"Config key 'model.{key}' ({getattr(m, key)!r}) does nothing with "
                             f"'model.decoder: {m.decoder}'; remove it or choose the other decoder.")
    if m.decoder == "parallel" and m.reduction_factor != 1:
        raise ConfigError(f"Config key 'model.reduction_factor' must be 1 with 'model.decoder: parallel' (it predicts "
                         f"every frame at once), got {m.reduction_factor}.")
    for key in ("forward_sum_weight", "duration_weight", "binarization_weight", "binarization_start_step",
                "binarization_ramp_steps", "reference_tokens"):
        if getattr(m, key) < 0:
            raise ConfigError(f"Config key 'model.{key}' must be >= 0, got {getattr(m, key)}.")


