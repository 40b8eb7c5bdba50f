"""The config's sections: frozen dataclasses holding every key and its default (the one place for defaults), the
``Config`` that groups them, and the keys of the original codebase that are rejected or moved."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from myxtts.errors import InputError


class ConfigError(InputError):
    """A config file, key or value that cannot be used: the message names the key path and what to do."""

AUTOTUNE = -1  # value for num_workers / prefetch_buffer_size meaning "let tf.data decide"

# the model's top-level modules (myxtts.model.tts.TTSModel; a test keeps the two in step): what training.freeze names
MODEL_MODULES = ("text_encoder", "conditioning_encoder", "aligner", "duration_predictor", "decoder", "postnet")


CorpusFormat = Literal["ljspeech", "list", "vctk", "libritts", "librispeech", "commonvoice"]


@dataclass(frozen=True)
class CorpusSource:
    """One corpus of a multi-corpus run (an item of ``data.corpora``)."""

    path: str  # as data.corpus_path: a folder, or a list file (list); relative to the config file
    format: CorpusFormat = "list"
    # its share of the training utterances drawn (weights are normalised over the corpora); 1 each: equal shares
    weight: float = 1.0
    name: str = ""  # prefix of its ids and speakers ("NAME/id", "NAME:speaker"); "": the folder's / file's name
    language: str = ""  # "": data.language
    # speakers kept out of training and validation (the manifest's "held_out" split: zero-shot development voices),
    # chosen deterministically: among speakers with >= 4 clips, the fewest clips first, then the longest audio
    held_out_speakers: int = 0
    # commonvoice only: a clip needs at least this many up-votes and at most this many down-votes of its reviewers
    min_up_votes: int = 2
    max_down_votes: int = 0


@dataclass(frozen=True)
class DataConfig:
    """Corpus, cache and input pipeline."""

    corpus_path: str = "data/ljspeech-bundled"  # folder (ljspeech, vctk, libritts) or list file (list); relative to the config file
    corpus_format: CorpusFormat = "ljspeech"
    # several corpora in one cache (CorpusSource items; then corpus_path / corpus_format stay unset): ids and speakers
    # are prefixed by each corpus' name, and training draws from each corpus by its weight
    corpora: tuple[CorpusSource, ...] = ()
    cache_dir: str = "cache/ljspeech-bundled"  # prepared features; relative to the config file
    language: str = "en"  # language of entries that name none: picks the cleaner / espeak voice; cached as a language id
    min_duration: float = 0.5  # seconds; shorter clips are rejected at prepare
    max_duration: float = 12.0  # seconds; longer clips are rejected at prepare
    silence_threshold_db: float = -60.0  # a clip whose peak is below this (dBFS) is rejected as silent
    validation_size: int = 2  # utterances held out for validation (taken deterministically)
    # shape policy
    pad_to_fixed_length: bool = False  # True: pad every batch to one fixed shape; False: length buckets
    max_text_length: int = 200  # tokens incl. bos/eos; longer entries are reported and skipped
    max_mel_frames: int = 880  # frames; longer entries are reported and skipped
    batch_size: int = 32  # fixed mode: the batch size; buckets: an upper bound per bucket
    batch_frames: int = 12000  # buckets: mel-frame budget per batch (batch * bucket frames)
    num_buckets: int = 12  # buckets: number of (text, mel) shapes
    bucket_multiple: int = 8  # bucket boundaries are multiples of this (>= reduction factor)
    min_batch_size: int = 1  # buckets: a bucket never gets fewer items per batch than this
    reference_frames: int = 256  # fixed length of the voice-conditioning reference mel (~3 s at 22050 Hz / hop 256)
    # a speaker with one clip: "skip" leaves the clip out of training; "slice" trains on it with a crop of the clip
    # itself as the reference (at most reference_frames, at most half the clip) whose frames the mel losses do not
    # score (XTTS's masked prompt), so the model cannot score by copying it. Validation always uses other clips.
    single_clip_policy: Literal["skip", "slice"] = "skip"
    # the share of the other training examples (speakers with several clips) that also take a slice of their own clip
    # as the reference, unscored like a single-clip speaker's (XTTS conditions on the same file): the model learns to
    # copy what it hears in the reference rather than to recognise a speaker it knows. 0: always another clip; 1:
    # always a slice. Validation always takes references from other clips.
    self_reference_share: float = 0.0
    # speaker augmentation (myxtts.data.voice_warp): each training example's target mel, reference mel and F0 are
    # moved along the frequency axis by one factor exp(u), u ~ U(-voice_warp, voice_warp) (formants and harmonics
    # together, as speed perturbation without its tempo change), so every speaker is heard as a range of voices.
    # 0: off; at most 0.5. Validation is never warped.
    voice_warp: float = 0.0
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
    # parallel decoder: every block's LayerNorm also takes a scale and a shift from the speaker vector (style-adaptive
    # layer norm, Meta-StyleSpeech), so the voice reaches every block rather than entering once; its projections start
    # at zero, so a warm start from a model without them begins as that model (the warm start adds them fresh)
    speaker_adaptive_norm: bool = False
    # parallel decoder: the reference also enters frame by frame, as this many tokens (the conditioning encoder's frames
    # averaged over equal stretches of the reference window) that every decoder frame attends over beside the pooled
    # speaker latents (frame-level reference attention, Attentron): the voice as it sounds, not only a summary of it.
    # The attention's output starts at zero, so a warm start from a model without it begins as that model. 0: off
    reference_tokens: int = 0
    # parallel decoder: the decoder's mel is moved this share (0-1) of the way from its long-term spectrum (the mean
    # log mel over the frames that speak) to the reference's, in training as at synthesis, so the decoder leaves that
    # part of the voice to the reference (model/spectrum.py). No new weights: a warm start begins as its model moved
    # that share. 0: off
    reference_spectrum: float = 0.0
    text_ff_kernel: int | None = None  # text encoder feed-forward: 1 position-wise, > 1 convolution over k tokens
    # frames per decoder step; None: the decoder's own (parallel 1, the only value it takes; autoregressive 2)
    reduction_factor: int | None = None
    dropout: float = 0.1
    max_attention_sequence_length: int = 1024  # positions table size; must cover text and decoder steps
    mel_l2_weight: float = 0.0  # weight of an extra L2 mel loss after the postnet (0: L1 only)
    # weight of an L1 loss on the mel's changes after the postnet, frame to frame and bin to bin (0: off)
    mel_delta_weight: float = 0.0
    # a discriminator on the mel (model/mel_discriminator.py), trained with the model: the weights of its
    # least-squares adversarial loss and of its feature-matching loss in the model's total (both 0: no discriminator)
    mel_adversarial_weight: float = 0.0
    mel_feature_matching_weight: float = 0.0
    mel_discriminator_channels: int | None = None  # None: the discriminator's own (MelDiscriminator.DEFAULT_CHANNELS)
    # the aligner's forward-sum loss, the duration predictor's loss (MSE of log(1 + frames)),
    # and the binarisation loss (soft alignment towards the hard one), ramped in linearly from
    # binarization_start_step over binarization_ramp_steps optimizer steps
    forward_sum_weight: float = 1.0
    duration_weight: float = 1.0
    binarization_weight: float = 1.0
    binarization_start_step: int = 400
    binarization_ramp_steps: int = 200
    # synthesis: the decoder's log mel sharpened across bins, mel + this x (mel - the mean of each bin and its two
    # neighbours), the contrast between neighbouring bands an L1-trained decoder smooths away partly restored (0: the
    # mel as decoded); every mel the model says (synthesize, serve, export, evaluate, listening), not its training
    mel_sharpening: float = 0.0
    # the voice's pitch as an input (FastPitch-style): a predictor of each token's pitch (its log F0 standardised over
    # the utterance's voiced frames), trained on the recordings' F0 (myxtts.f0.tracker), and an embedding of it added to the
    # text before the decoder: the recordings' pitch in training and teacher forcing, the predicted one in synthesis
    pitch_conditioning: bool = False
    # pitch conditioning: each token's pitch also says the voice's level (absolute log F0: the utterance's mean and
    # spread with the standardised contour), the recordings' in training, at synthesis predicted from the speaker
    # latents (a head trained on the utterance's level, model/pitch.py): a voice the model never heard gets its own
    # pitch rather than an average the decoder has to guess harmonics for
    pitch_level: bool = False
    # synthesis (pitch conditioning): the predicted pitch contour scaled by this about the utterance's mean (1: as
    # predicted; > 1 livelier, as FastPitch's pitch amplification): a predictor trained by MSE says a flatter contour
    # than the voice's; every mel the model says, not its training or teacher forcing
    pitch_variation: float = 1.0
    # synthesis: a reference clip longer than data.reference_frames gives up to this many consecutive windows of that
    # length from its middle, their speaker latents averaged with the other windows' and clips' (1: its middle window
    # alone); every voice the model is given (synthesize, serve, evaluate, the benchmarks), not its training
    reference_windows: int = 1


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
    # compute dtype (variables stay float32); train-vocoder: bfloat16 discriminators, float16 refused
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
    # a warm start's mel normalisation: "source" keeps the statistics the source was trained with (its model already
    # reads and writes that scale), "corpus" uses this corpus' own (prepare's manifest)
    init_mel_stats: Literal["source", "corpus"] = "source"
    # model modules kept fixed (excluded from the optimizer): any of MODEL_MODULES
    freeze: tuple[str, ...] = ()
    # > 0: an exponential moving average of the trainable weights, updated after every applied update and read by
    # everything that loads the trained model (model/weight_average.py); 0: none
    ema_decay: float = 0.0


@dataclass(frozen=True)
class VocoderConfig:
    """The neural vocoder (log mel -> waveform) and its GAN training (``myxtts train-vocoder``).

    The run keys of ``training`` (max_steps, max_minutes, learning_rate, warmup_steps, decay, min_learning_rate,
    weight_decay, gradient_clip_norm, log / validate / checkpoint / summary cadence, seed, strict_retracing,
    max_nonfinite_steps, deterministic) apply to both trainers; the keys below are the vocoder's own.
    """

    # vocos: ConvNeXt blocks at frame rate + an inverse-STFT head; istftnet: HiFi-GAN's upsampling + a small iSTFT
    family: Literal["vocos", "istftnet"] = "vocos"
    preset: Literal["cpu", "gpu"] = "cpu"  # the family's sizes; None keys take the preset's value
    dim: int | None = None  # vocos: channels of the frame-rate backbone
    intermediate_dim: int | None = None  # vocos: ConvNeXt block's inner width
    layers: int | None = None  # vocos: ConvNeXt blocks
    kernel_size: int = 7  # vocos: depthwise convolution over frames
    # vocos: the head predicts the log magnitude as a residual over the mel's pseudo-inverse (FreeV) instead of alone
    magnitude_prior: bool = False
    upsample_rates: tuple[int, ...] = (8, 8)  # istftnet: transposed-convolution rates (their product divides the hop)
    upsample_channels: int | None = None  # istftnet: width before the first upsampling (halved by each)
    resblock_kernels: tuple[int, ...] | None = None  # istftnet: one residual block per kernel size, averaged
    resblock_dilations: tuple[int, ...] | None = None  # istftnet: dilations of each residual block's convolutions
    # audio per training example, a multiple of audio.hop_length: one static shape. None: 32 hops (8192 at hop 256)
    segment_samples: int | None = None
    batch_size: int = 16  # segments per step
    # generator alone on the reconstruction losses for this many steps, then the discriminators join
    adversarial_start_step: int = 1000
    discriminator_periods: tuple[int, ...] = (2, 3, 5, 7, 11)  # multi-period discriminator (HiFi-GAN)
    discriminator_channels: int = 16  # multi-period discriminator's first width (x4, x8 deeper)
    resolution_ffts: tuple[int, ...] = (512, 1024, 2048)  # multi-resolution STFT discriminator (hop = fft / 4)
    resolution_channels: int = 32  # multi-resolution discriminator's width
    # alternating: the discriminators step on the generated audio, then the generator steps against the updated
    # discriminators (HiFi-GAN, Vocos); simultaneous: both from one discriminator pass (cheaper, a weaker signal)
    discriminator_update: Literal["alternating", "simultaneous"] = "alternating"
    mel_loss_weight: float = 45.0  # L1 between log mels of generated and real audio
    stft_loss_weight: float = 1.0  # multi-resolution STFT loss (spectral convergence + log magnitude)
    feature_loss_weight: float = 2.0  # feature matching (L1 between the discriminators' feature maps)
    adversarial_loss_weight: float = 1.0  # hinge loss of the generator
    discriminator_learning_rate: float = 2e-4  # the generator's is training.learning_rate
    # synthesis: the output's STFT magnitude is the generator's times (mel pseudo-inverse / generator) ** this (a
    # geometric blend; the generator's phase, re-analysed, kept): 0 the generator's audio as is, 1 the mel's magnitude
    magnitude_from_mel: float = 0.0
    # train-vocoder --acoustic-run: the share of training segments that read the recordings' own mels instead of the
    # acoustic model's teacher-forced ones (0: the model's alone; a mix keeps the vocoder rendering real mels too)
    recorded_mel_share: float = 0.0


@dataclass(frozen=True)
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    audio: AudioConfig = field(default_factory=AudioConfig)
    text: TextConfig = field(default_factory=TextConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    vocoder: VocoderConfig = field(default_factory=VocoderConfig)
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
                for f in config_sections()}

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
            **({"corpora": [[str(self.resolve(c.path)), c.format, c.name, c.language, c.held_out_speakers,
                             c.min_up_votes, c.max_down_votes] for c in d.corpora]} if d.corpora else {}),
            "filters": [d.min_duration, d.max_duration, d.silence_threshold_db],
            "format_version": 2,
        }
        relevant["audio"].pop("griffin_lim_iters")  # synthesis only
        blob = json.dumps(relevant, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def replace(self, **sections: Any) -> "Config":
        return dataclasses.replace(self, **sections)


def default_corpus_name(path: Path) -> str:
    """A corpus' default name: its folder's name (a list file's folder, when the file is ``list.txt`` or similar)."""
    return path.parent.name if path.suffix else path.name


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


def config_sections() -> list[dataclasses.Field]:
    """The fields of ``Config`` a config file holds (one per YAML section: audio, data, ...), not the internal ones."""
    return [f for f in dataclasses.fields(Config) if not f.metadata.get("internal")]


