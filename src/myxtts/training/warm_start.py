"""Warm start (``training.init_from`` / ``myxtts train --init-from``) and frozen modules (``training.freeze``).

A warm start copies the model weights of another run into the freshly built model, variable by variable, before
anything is traced; the optimizer, the step counter and the schedule start from scratch. The source is only
read. What must agree, each checked with an error naming both sides:

- the decoder type (``model.decoder``) and every size of the model (``model.*`` keys through the preset);
- the audio front-end (``audio.*``: the mels must mean the same thing);
- the text: the vocabulary's kind (phonemes or characters), its language, and its symbols. Symbols the source
  lacks get fresh embedding rows (logged, and recorded); symbols the source has and this run lacks are an error.

``model.pitch_conditioning``, ``model.pitch_level``, ``model.speaker_adaptive_norm`` and ``model.reference_tokens`` need
not agree: a run that adds the pitch modules, the pitch level predictor, the decoder's speaker-adaptive norms or the
reference attention starts them fresh (logged, and recorded as ``fresh_variables``; the pitch embedding, the norms'
projections and the reference attention's output start at zero, so the run begins as its source), one without them
leaves the source's out (logged, and recorded as ``dropped_variables``). ``model.reference_spectrum`` has no
variable: a run that sets it begins as its source moved toward each reference's long-term spectrum.

Mel normalisation (``training.init_mel_stats``): by default the run keeps the source's statistics
(``mel_stats.json``), the scale its model learned to read and write, so the first step starts where the source
left off (a new voice is then an offset the model can learn, as the base's voices were); ``corpus`` uses this
corpus' own statistics (standardised mels of the new voice: the first steps re-learn the scale).

The run records its origin in ``RUN_DIR/init_from.json``; a resumed run restores its own checkpoint and never reads
the source again.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from myxtts.config import Config, load_config
from myxtts.data.language import base_language
from myxtts.data.run_features import find_vocabulary, load_run_mel_stats
from myxtts.errors import InputError
from myxtts.model.presets import resolve_dims
from myxtts.model.restore import checkpoint_decoder_type, decoder_mismatch, restore_model
from myxtts.run_dir import RunDir, RunError, latest_checkpoint
from myxtts.vocoder.packing import install_own_vocoder

logger = logging.getLogger(__name__)

# model sizes that need not agree: dropout and the reference spectrum have no variable, the positions table is a
# constant
_FREE_DIMS = ("vocab_size", "dropout", "max_positions", "pitch_conditioning", "speaker_adaptive_norm", "pitch_level",
              "reference_tokens", "reference_spectrum")
# modules a warm start may add or drop (copy_weights), each a test on a variable's plain path: the pitch predictor and
# embedding (model/pitch.py), the parallel decoder's speaker-adaptive norms (model/parallel_decoder.py), and the pitch
# level predictor (model/pitch.py), the reference tokens' projection and the decoder's attention over them
OPTIONAL_MODULES = {
    "the pitch modules": lambda path: path.startswith(("pitch_predictor/", "pitch_embedding/")),
    "the speaker-adaptive norms": lambda path: "/speaker_film/" in path,
    "the pitch level predictor": lambda path: path.startswith("pitch_level/"),
    "the reference attention": lambda path: re.search(r"(^|/)reference_(proj|norm|attention)/", path) is not None,
}


class WarmStartError(InputError):
    """A source run or checkpoint the model cannot start from."""


@dataclasses.dataclass
class Source:
    """What ``training.init_from`` points at: a checkpoint prefix and the config and folders beside it."""

    given: Path
    checkpoint: str
    config_path: Path
    folders: list[Path]  # where its vocab.json / mel_stats.json / corpus.json may be (first wins)


def find_source(path: Path) -> Source:
    """A run directory (``config.yaml`` + ``checkpoints/``), a checkpoint folder or a checkpoint prefix."""
    path = Path(path)
    if Path(str(path) + ".index").is_file():  # a prefix: RUN/checkpoints/ckpt-N
        checkpoint, folders = str(path), [path.parent, path.parent.parent]
    elif path.is_dir():
        try:
            checkpoint = latest_checkpoint(path)
        except RunError as err:
            raise WarmStartError(f"training.init_from: {err}") from None
        folders = [path, path.parent] if path.name == RunDir.CHECKPOINTS else [path]
    else:
        raise WarmStartError(f"training.init_from: {path} is neither a run directory nor a checkpoint prefix "
                             f"(no {path.name}.index beside it). Pass a run directory (e.g. "
                             "pretrained/base-espeak-tiny) or RUN_DIR/checkpoints/ckpt-N.")
    config_path = next((RunDir(folder).config for folder in folders if RunDir(folder).config.is_file()), None)
    if config_path is None:
        raise WarmStartError(f"training.init_from: no {RunDir.CONFIG} beside {checkpoint} (looked in "
                             f"{', '.join(str(f) for f in folders)}): the source's config says how to build its model;"
                             " a partial run directory cannot be started from.")
    return Source(path, checkpoint, config_path, folders)


def source_languages(source_cfg: Config, folders: list[Path]) -> list[str]:
    """The languages the source was trained on: its ``corpus.json`` (written by the trainer), else its config."""
    for folder in folders:
        path = RunDir(folder).corpus
        if path.is_file():
            try:
                return list(json.loads(path.read_text(encoding="utf-8"))["languages"])
            except (ValueError, KeyError, TypeError):
                raise WarmStartError(f"training.init_from: {path} is not a valid corpus summary.") from None
    return [source_cfg.data.language]


def check_compatible(cfg: Config, source_cfg: Config, checkpoint: str, where: str) -> None:
    """WarmStartError naming every model / audio key on which the two configs build different models."""
    problem = decoder_mismatch(where, checkpoint_decoder_type(checkpoint), cfg.model.decoder)
    if source_cfg.model.decoder != cfg.model.decoder and problem is None:
        problem = (f"{where} holds a model of the {source_cfg.model.decoder} decoder, but this config says "
                   f"'model.decoder: {cfg.model.decoder}'.")
    if problem:
        raise WarmStartError(f"training.init_from: {problem}")
    n_mels = cfg.audio.n_mels
    ours = dataclasses.asdict(resolve_dims(cfg.model, 3, n_mels))
    theirs = dataclasses.asdict(resolve_dims(source_cfg.model, 3, source_cfg.audio.n_mels))
    differ = [f"model.{key}: source {theirs[key]}, this run {ours[key]}" for key in ours
              if key not in _FREE_DIMS and ours[key] != theirs[key]]
    audio_ours, audio_theirs = dataclasses.asdict(cfg.audio), dataclasses.asdict(source_cfg.audio)
    differ += [f"audio.{key}: source {audio_theirs[key]}, this run {audio_ours[key]}" for key in audio_ours
               if key != "griffin_lim_iters" and audio_ours[key] != audio_theirs[key]]
    if differ:
        raise WarmStartError(f"training.init_from: {where} was trained with a different model or front-end ("
                             f"preset {source_cfg.model.preset!r}); these differ: {'; '.join(differ)}. Use the "
                             "source's model and audio sections (copy them from its config.yaml) or train from "
                             "scratch.")


def check_text(vocabulary: Any, source_vocabulary: Any, languages: list[str], source_langs: list[str],
               where: str) -> list[str]:
    """The symbols this run adds to the source's (they get fresh embedding rows); WarmStartError when the text
    front-ends differ, the source has symbols this run lacks, or this corpus speaks a language the source never
    heard."""
    if vocabulary.kind != source_vocabulary.kind:
        raise WarmStartError(f"training.init_from: {where} reads {source_vocabulary.kind}, this config reads "
                             f"{vocabulary.kind} (text.use_phonemes); set text.use_phonemes to the source's value.")
    heard = {base_language(language) for language in source_langs}
    if source_vocabulary.phoneme_language:
        heard.add(base_language(source_vocabulary.phoneme_language))
    unheard = sorted({language for language in languages if base_language(language) not in heard})
    if unheard:
        raise WarmStartError(f"training.init_from: this corpus is in {', '.join(unheard)}, which {where} was never "
                             f"trained on (its languages: {', '.join(sorted(heard))}); start from a base of that "
                             "language or train from scratch.")
    lost = [symbol for symbol in source_vocabulary.symbols if symbol not in vocabulary.symbol_to_id]
    if lost:
        raise WarmStartError(f"training.init_from: {where} has {len(lost)} symbol(s) this run's vocabulary lacks "
                             f"({' '.join(repr(s) for s in lost[:10])}); its embedding rows would be dropped. Use a "
                             "myxtts version whose symbol set covers the source's.")
    return [symbol for symbol in vocabulary.symbols if symbol not in source_vocabulary.symbol_to_id]


def warm_start_mel_stats(cfg: Config, workdir: Path, resume: bool) -> Any:
    """The mel statistics a warm-started run normalises with, or None for the corpus' own: the source's
    (``training.init_mel_stats: source``), and on resume the run's own copy (``workdir/mel_stats.json``), so a
    resumed run never reads the source again."""
    record = RunDir(workdir).init_from
    if resume and record.is_file():  # a warm-started run resumed: the statistics it recorded at its start
        try:
            kept = json.loads(record.read_text(encoding="utf-8")).get("mel_stats") == "source"
            return load_run_mel_stats(workdir, cfg) if kept else None
        except (ValueError, AttributeError, RunError) as err:
            raise WarmStartError(f"{record}: the warm-started run's record cannot be read ({err}).") from None
    if cfg.init_from is None or cfg.training.init_mel_stats != "source":
        return None
    source = find_source(cfg.init_from)
    for folder in source.folders:  # only the source's own files: never this config's cache
        if RunDir(folder).mel_stats.is_file():
            try:
                return load_run_mel_stats(folder, cfg)
            except RunError as err:
                raise WarmStartError(f"training.init_from: {err}") from None
    raise WarmStartError(f"training.init_from: no {RunDir.MEL_STATS} beside {source.checkpoint} (looked in "
                         f"{', '.join(str(f) for f in source.folders)}), so the normalisation its model was trained "
                         "with is unknown. Set training.init_mel_stats: corpus to use this corpus' statistics.")


def _plain_path(variable: Any) -> str:
    """A variable's path without Keras' auto-name counters (``conv1d_7/kernel`` -> ``conv1d/kernel``), which depend
    on how many layers the process built before."""
    return "/".join(re.sub(r"_\d+$", "", part) for part in variable.path.split("/")[1:])


def _optional_group(variable: Any) -> str | None:
    """Which of OPTIONAL_MODULES a variable belongs to (None: the model's fixed part)."""
    path = _plain_path(variable)
    return next((name for name, holds in OPTIONAL_MODULES.items() if holds(path)), None)


class WeightCopy(NamedTuple):
    """What ``copy_weights`` did."""

    copied: int  # variables copied
    fresh: list[str]  # paths of this model's variables the source has not (kept at their initialisation)
    dropped: list[str]  # paths of the source's variables this model has not (not copied)


def copy_weights(model: Any, source_model: Any, vocabulary: Any, source_vocabulary: Any) -> WeightCopy:
    """Copy every variable of ``source_model`` into ``model`` (same architecture, built in the same order); the text
    embedding row by row by symbol. Each group of OPTIONAL_MODULES may be on one side only: a model that adds it
    keeps its fresh weights (they start at zero, so it begins as the source), one that drops it leaves the
    source's out."""
    embedding = model.text_encoder.embedding.embeddings
    ours = [variable for variable in model.weights if _optional_group(variable) is None]
    theirs = [variable for variable in source_model.weights if _optional_group(variable) is None]
    fresh, dropped = [], []
    for group in OPTIONAL_MODULES:
        group_ours = [variable for variable in model.weights if _optional_group(variable) == group]
        group_theirs = [variable for variable in source_model.weights if _optional_group(variable) == group]
        if group_ours and group_theirs:  # both have them: copied like the rest
            ours, theirs = ours + group_ours, theirs + group_theirs
        elif group_ours:
            fresh += [variable.path for variable in group_ours]
        else:
            dropped += [variable.path for variable in group_theirs]
    if len(ours) != len(theirs):
        raise WarmStartError(f"training.init_from: the source model has {len(theirs)} variables, this one "
                             f"{len(ours)}: not the same architecture.")
    for target, value in zip(ours, theirs):
        if _plain_path(target) != _plain_path(value):
            raise WarmStartError(f"training.init_from: variable {target.path} meets the source's {value.path}: not "
                                 "the same architecture.")
        if target is embedding:
            table = np.array(target.numpy())  # [this vocabulary, d]: rows of new symbols keep their fresh init
            source_table = value.numpy()  # [source vocabulary, d]
            for row, symbol in enumerate(source_vocabulary.symbols):
                table[vocabulary.symbol_to_id[symbol]] = source_table[row]
            target.assign(table)
            continue
        if tuple(target.shape) != tuple(value.shape):
            raise WarmStartError(f"training.init_from: variable {target.path} has shape {tuple(target.shape)} "
                                 f"here and {tuple(value.shape)} in the source.")
        target.assign(value)
    return WeightCopy(len(ours), fresh, dropped)


def warm_start(cfg: Config, model: Any, vocabulary: Any, languages: list[str], workdir: Path,
               echo: Any = print, record: bool = True) -> dict:
    """Load ``cfg.init_from`` into ``model``; returns what it did, written to ``workdir/init_from.json`` when
    ``record`` (every worker of a multi-worker run loads; the chief records and prints)."""
    source = find_source(cfg.init_from)
    where = f"{source.checkpoint} (from {source.given})"
    try:
        source_cfg = load_config(source.config_path)
    except ValueError as err:
        raise WarmStartError(f"training.init_from: the source's config cannot be read: {err}") from None
    check_compatible(cfg, source_cfg, source.checkpoint, where)
    try:
        source_vocabulary = find_vocabulary(source_cfg, *source.folders)
    except RunError as err:
        raise WarmStartError(f"training.init_from: {err}") from None
    new_symbols = check_text(vocabulary, source_vocabulary, languages,
                             source_languages(source_cfg, source.folders), where)
    try:  # the source's own model: its vocabulary size, restored and checked against the checkpoint
        source_model = restore_model(source_cfg, source_vocabulary, source.checkpoint)
    except RunError as err:
        raise WarmStartError(f"training.init_from: {err}") from None
    copied, fresh, dropped = copy_weights(model, source_model, vocabulary, source_vocabulary)
    del source_model
    step = _checkpoint_step(source.checkpoint)
    result = {"source": str(source.given), "checkpoint": source.checkpoint, "source_step": step,
              "source_config": str(source.config_path), "variables": copied, "new_symbols": new_symbols,
              "fresh_variables": fresh, "dropped_variables": dropped, "frozen": list(cfg.training.freeze),
              "mel_stats": cfg.training.init_mel_stats}
    if not record:
        return result
    result["vocoder"] = _inherit_vocoder(source, cfg, workdir)
    RunDir(workdir).write_json(RunDir(workdir).init_from, result)
    echo(f"warm start: {copied} variables from {source.checkpoint}" + (f" (step {step})" if step is not None else "")
         + (f"; fresh embedding rows for {len(new_symbols)} new symbol(s): {' '.join(new_symbols)}"
            if new_symbols else "") + (f"; {len(fresh)} new variable(s) start fresh ({_groups(fresh)})" if fresh else "")
         + (f"; {len(dropped)} of the source's variables left out ({_groups(dropped)}: off in this config)"
            if dropped else "")
         + (f"; its own vocoder too ({RunDir(workdir).own_vocoder})" if result["vocoder"] else ""))
    if new_symbols:
        logger.info("Warm start: symbols new to the source (fresh rows): %s", new_symbols)
    return result


def _inherit_vocoder(source: Source, cfg: Config, workdir: Path) -> str | None:
    """The source's own vocoder (``SOURCE/vocoder``: the shipped base's is the shipped vocoder) made the new run's,
    unless the run has one already: a model fine-tuned from it reads the mels it was made for. Returns where it came
    from, or None. The trainer holds the run's lock."""
    own = next((RunDir(folder).own_vocoder for folder in source.folders if RunDir(folder).own_vocoder.is_dir()), None)
    if own is None or RunDir(workdir).own_vocoder.exists():
        return None
    install_own_vocoder(own, workdir, acoustic_cfg=cfg, lock=False)
    return str(own)


def freeze_modules(model: Any, names: tuple[str, ...]) -> list[str]:
    """Mark the named top-level modules non-trainable (so the optimizer never sees them); returns their variable
    paths."""
    frozen = []
    for name in names:
        module = getattr(model, name, None)
        if module is None:  # the config checks names against MODEL_MODULES; this catches a model that drifted
            raise WarmStartError(f"training.freeze: the model has no module {name!r}.")
        module.trainable = False
        frozen += [variable.path for variable in module.weights]
    return frozen


def _groups(paths: list[str]) -> str:
    """The OPTIONAL_MODULES groups the variable paths belong to, for a message."""
    plain = ["/".join(re.sub(r"_\d+$", "", part) for part in path.split("/")[1:]) for path in paths]
    return ", ".join(name for name, holds in OPTIONAL_MODULES.items() if any(holds(path) for path in plain))


def _checkpoint_step(checkpoint: str) -> int | None:
    match = re.search(r"-(\d+)$", checkpoint)
    return int(match.group(1)) if match else None
