"""What a run's model reads its input with: its vocabulary (text -> token ids) and its mel statistics (the
normalisation it was trained with), each the run's own (``myxtts.run_dir``: ``RUN/vocab.json``, ``RUN/mel_stats.json``)
or else the config's prepared cache's (``myxtts.data.cache_manifest``).

Synthesis, export, ``pack`` and a warm start read them here; the run's paths stay in ``myxtts.run_dir``, which knows
nothing of the cache's formats.
"""

from __future__ import annotations

from pathlib import Path

from myxtts.cache_files import MANIFEST_FILE, VOCAB_FILE
from myxtts.config import Config
from myxtts.data.cache_manifest import CacheError, manifest_mel_stats, read_manifest
from myxtts.data.mel_stats import MelStats, MelStatsError
from myxtts.run_dir import RunDir, RunError
from myxtts.text import Vocabulary


def find_vocabulary(cfg: Config, *folders: Path) -> Vocabulary:
    """The vocabulary saved with the run (or the config's cache); else the one the text config implies."""
    for path in [RunDir(folder).vocab for folder in folders] + [cfg.cache_dir / VOCAB_FILE]:
        if path.is_file():
            try:
                return Vocabulary.load(path, cfg.text)
            except (ValueError, OSError) as err:
                raise RunError(f"Cannot load the vocabulary {path}: {err}") from None
    # the symbol set is fixed in code per text config, so this is the same table prepare saved
    return Vocabulary.for_config(cfg.text)


def load_run_mel_stats(run_dir: str | Path, cfg: Config | None = None) -> MelStats:
    """The mel statistics of a run (``RUN/mel_stats.json``, written by the trainer); RunError naming the file when it
    is missing or does not fit ``cfg.audio.n_mels``."""
    path = RunDir(run_dir).mel_stats
    try:
        stats = MelStats.load(path)
    except MelStatsError as err:
        raise RunError(f"{err} The run's mel statistics (the normalisation its model was trained with, written "
                       f"by `myxtts train` next to vocab.json) are needed to synthesize; runs trained before mels "
                       "were normalised must be retrained.") from None
    check_n_mels(stats, cfg, path)
    return stats


def find_mel_stats(cfg: Config, *folders: Path) -> MelStats:
    """``mel_stats.json`` of the first folder holding one (a checkpoint's folder, its run), else the statistics of
    the config's prepared cache; RunError naming every place looked at."""
    for folder in folders:
        if RunDir(folder).mel_stats.is_file():
            return load_run_mel_stats(folder, cfg)
    manifest = read_manifest(cfg.cache_dir)
    try:
        if manifest is not None:
            stats = manifest_mel_stats(cfg.cache_dir, manifest)
            check_n_mels(stats, cfg, cfg.cache_dir / MANIFEST_FILE)
            return stats
    except CacheError:
        pass
    looked = [f"{RunDir(folder).mel_stats} missing" for folder in folders]
    looked.append(f"no usable 'mel_stats' in {cfg.cache_dir / MANIFEST_FILE}")
    raise RunError(f"No mel statistics found ({'; '.join(looked)}): they are the normalisation the model was "
                   "trained with. Use the run directory (--run), or run `myxtts prepare` for the config's corpus.")


def check_n_mels(stats: MelStats, cfg: Config | None, source: Path) -> None:
    """RunError when ``stats`` (read from ``source``) has other mel bins than ``cfg.audio.n_mels``."""
    if cfg is not None and stats.n_mels != cfg.audio.n_mels:
        raise RunError(f"{source}: mel statistics of {stats.n_mels} bins, but audio.n_mels is {cfg.audio.n_mels}.")
