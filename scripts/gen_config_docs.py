"""Regenerate the key tables of docs/configuration.md from src/myxtts/config.py (defaults + comments).

Usage: .venv/bin/python scripts/gen_config_docs.py > docs/configuration.md
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from myxtts import config

SOURCE = Path(config.__file__).read_text(encoding="utf-8")
INTRO = """# Configuration

One YAML file with five sections. Unknown keys are errors naming the key path and the closest valid key;
wrong types and ranges are errors naming the key. Relative paths resolve against the config file's folder.
Override any key from the command line with `--set section.key=value`.

Keys of the original codebase that would do nothing are rejected with the replacement:
{removed}

Keys the original codebase kept under `data` that belong to `audio` are moved (`{moved}`); giving both
with different values is an error.
"""


# Keys whose meaning the inline comment in config.py does not give.
MEANINGS = {
    "data.corpus_format": "ljspeech: metadata.csv `id|text|normalized` + wavs/; list: `path|text|speaker[|language]`",
    "data.shuffle_buffer_size": "utterances in the shuffle buffer (row indices, not features)",
    "data.seed": "seed of shuffling and reference selection (a run is reproducible)",
    "audio.sample_rate": "Hz; every clip is resampled to it (soxr) at prepare",
    "audio.n_fft": "FFT size of the STFT",
    "audio.win_length": "Hann window length (<= n_fft, centred like librosa)",
    "audio.hop_length": "samples between frames; frames = 1 + samples // hop_length",
    "audio.n_mels": "mel bands (slaney scale and norm, as librosa htk=False norm='slaney')",
    "audio.fmin": "lowest mel frequency, Hz",
    "audio.fmax": "highest mel frequency, Hz (<= sample_rate / 2)",
    "audio.log_compression": "natural: ln(max(mel, log_floor)); log10; none",
    "text.phoneme_language": "espeak-ng voice used for phonemes",
    "model.preset": "tiny (~1.1M parameters, CPU tests), small (~9.5M), base (~61M)",
    "model.d_model": "model width",
    "model.num_heads": "attention heads",
    "model.ff_dim": "feed-forward width of the transformer blocks",
    "model.text_layers": "transformer blocks of the text encoder",
    "model.decoder_layers": "autoregressive: causal transformer blocks of the mel decoder",
    "model.conditioning_layers": "conv layers of the conditioning (reference voice) encoder",
    "model.num_speaker_latents": "K speaker latent vectors from the reference clip",
    "model.prenet_dim": "autoregressive: width of the prenet over the previous frames",
    "model.postnet_channels": "postnet conv channels",
    "model.postnet_layers": "postnet conv layers",
    "model.reduction_factor": "mel frames produced per decoder step; unset: the decoder's own (parallel 1, the only "
                              "value it takes; autoregressive 2)",
    "model.dropout": "dropout rate of the model's blocks; with the autoregressive decoder any value > 0 also turns on the prenet's fixed 0.5 dropout (kept at synthesis, seeded), 0 turns every dropout off",
    "model.decoder": "both read the text through durations from an alignment learned online (aligner + MAS); "
    "parallel: every frame at once (conv decoder); autoregressive: r frames per step from the previous ones",
    "model.forward_sum_weight": "weight of the aligner's forward-sum (CTC over the text positions) loss",
    "model.duration_weight": "weight of the duration predictor's MSE of log(1 + frames)",
    "model.binarization_weight": "weight of the binarisation loss (soft alignment towards the MAS path)",
    "model.binarization_start_step": "optimizer step where the binarisation loss starts ramping in",
    "model.binarization_ramp_steps": "steps over which its weight rises linearly from 0 to full",
    "training.max_steps": "optimizer updates to train",
    "training.learning_rate": "peak learning rate",
    "training.warmup_steps": "linear warm-up steps of the schedule",
    "training.decay": "decay after warm-up",
    "training.min_learning_rate": "floor of the decay",
    "training.weight_decay": "AdamW decoupled weight decay (0: none)",
    "training.gradient_accumulation_steps": "micro-batches accumulated in the compiled graph per update",
    "training.mixed_precision": "compute dtype; float16 uses dynamic loss scaling",
    "training.enable_xla_compilation": "jit_compile the same per-shape step functions",
    "training.log_every": "steps between metrics.jsonl / TensorBoard scalars",
    "training.validate_every": "steps between teacher-forced validation passes",
    "training.checkpoint_every": "steps between checkpoints",
    "training.keep_checkpoints": "checkpoints kept by the CheckpointManager",
    "training.distribution": "none, mirrored (MirroredStrategy), multi_worker (MultiWorkerMirroredStrategy, TF_CONFIG)",
    "training.seed": "seed of initialisation and dropout (with deterministic: bit-exact resume)",
}


def comment_for(key: str) -> str:
    name = key.split(".")[1]
    match = re.search(rf"^\s+{name}: .*?#\s*(.*)$", SOURCE, re.MULTILINE)
    return match.group(1).strip() if match else MEANINGS.get(key, "")


def main() -> None:
    removed = "\n".join(f"- `{key}`: {why}." for key, why in config.REMOVED_KEYS.items())
    moved = ", ".join(f"{a} -> {b}" for a, b in config.MOVED_KEYS.items())
    print(INTRO.format(removed=removed, moved=moved))
    defaults = config.Config()
    for section in dataclasses.fields(config.Config):
        if section.metadata.get("internal"):
            continue
        print(f"## `{section.name}`\n\n| key | default | meaning |\n|---|---|---|")
        values = getattr(defaults, section.name)
        for field in dataclasses.fields(values):
            default = getattr(values, field.name)
            path = f"{section.name}.{field.name}"
            shown = ("by decoder" if path == "model.reduction_factor" else "preset") if default is None else repr(default)
            print(f"| `{section.name}.{field.name}` | `{shown}` | {comment_for(section.name + '.' + field.name)} |")
        print()


if __name__ == "__main__":
    main()
