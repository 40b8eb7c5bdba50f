"""A vocoder as a folder of its own: packed to ship, or installed as an acoustic run's own vocoder.

- ``pack_vocoder`` (``myxtts pack --run VOCODER_RUN``): a vocoder run's newest generator without its optimizers, as
  a folder to ship (``pretrained/vocoder-...``).
- An acoustic run, or a packed model, may hold **its own vocoder** in ``RUN/vocoder/``: a packed vocoder that reads
  the run's mels. ``synthesize``, ``serve``, ``export`` and ``evaluate`` use it when no ``--vocoder`` is given, and
  Griffin-Lim when the run has none (``neural.choose_vocoder``). ``train-vocoder --acoustic-run RUN`` installs there
  the vocoder it fine-tuned on the run's mels once its training ends (``install_own_vocoder``); a warm start
  (``train --init-from SOURCE``) gives the new run SOURCE's own vocoder; ``pack`` carries a run's own vocoder into
  the packed model, or the one given to ``pack --vocoder``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import tensorflow as tf

from myxtts.config import load_config
from myxtts.locks import lock_run_directory
from myxtts.outputs import (OWN_VOCODER, PACKED_VOCODER, RUN, check_output_folder, check_own_vocoder_slot, folder_kind,
                            write_staged)
from myxtts.run_dir import RunDir, relative_config_paths
from myxtts.vocoder.discriminators import build_discriminators
from myxtts.vocoder.generators import build_generator
from myxtts.vocoder.neural import check_audio_match, newest_checkpoint, read_vocoder_dir, save_vocoder


def write_vocoder_pack(source: str | Path, directory: Path, with_discriminators: bool = False) -> dict[str, Any]:
    """``source``'s (a vocoder run or a packed vocoder) newest generator, and its discriminators when
    ``with_discriminators``, written into the new folder ``directory`` in the packed layout, without optimizers.
    Returns the packed ``vocoder.json``: the source's record (where it came from) with step, minutes and size."""
    cfg, record = read_vocoder_dir(source)
    checkpoint = newest_checkpoint(Path(source))  # resolved once: the weights, step and minutes come from it
    generator = build_generator(cfg)
    discriminators = build_discriminators(cfg) if with_discriminators else None
    objects = {"generator": generator, **({"discriminators": discriminators} if with_discriminators else {})}
    tf.train.Checkpoint(**objects).restore(checkpoint).expect_partial().assert_existing_objects_matched()
    step = int(checkpoint.rsplit("-", 1)[1])
    try:  # a run's checkpoint counts its training seconds; a packed vocoder's record carries its minutes
        minutes = round(float(tf.train.load_variable(checkpoint, "trained_seconds/.ATTRIBUTES/VARIABLE_VALUE")) / 60,
                        1)
    except (tf.errors.NotFoundError, ValueError):
        minutes = record.get("training_minutes")
    save_vocoder(directory, cfg, generator, record.get("trained_on", ""), step, discriminators)
    run = RunDir(directory)
    relative_config_paths(run.config)  # a sibling of the source's folder: the same relative paths
    packed = {**record, **json.loads(run.vocoder_record.read_text(encoding="utf-8")), "step": step,
              "training_minutes": minutes, "source_checkpoint": Path(checkpoint).name,
              "discriminators": with_discriminators, "bytes": run.checkpoint_bytes()}
    run.write_json(run.vocoder_record, packed)
    return packed


def pack_vocoder(run_dir: str | Path, out_dir: str | Path, force: bool = False,
                 with_discriminators: bool = False) -> dict[str, Any]:
    """A vocoder run's newest generator, without optimizers (and without discriminators unless
    ``with_discriminators``: what ``train-vocoder --init-from`` fine-tunes from), as a folder to ship. ``out_dir``
    follows ``myxtts.outputs.check_output_folder``: new, empty or (``force``) an earlier packed vocoder of ``pack``,
    replaced only once the new one is complete; never the run, a packed model, a cache, nor a folder that holds or
    lies inside one."""
    check_output_folder(Path(out_dir), run_dir, "pack", PACKED_VOCODER, force)
    read_vocoder_dir(run_dir)  # a clear error before anything is written
    return write_staged(out_dir, "pack", PACKED_VOCODER,
                        lambda staging: write_vocoder_pack(run_dir, staging, with_discriminators))


def check_vocoder_for(vocoder: str | Path, acoustic_cfg: Any, acoustic_name: str) -> None:
    """VocoderError unless ``vocoder`` is a readable vocoder directory reading the mels ``acoustic_cfg`` makes."""
    _, record = read_vocoder_dir(vocoder)
    check_audio_match(vocoder, record["audio"], acoustic_name, acoustic_cfg.audio)


def install_own_vocoder(source: str | Path, acoustic_run: str | Path, acoustic_cfg: Any = None,
                        lock: bool = True) -> dict[str, Any]:
    """Make ``source`` (a vocoder run or a packed vocoder) ``acoustic_run``'s own vocoder: its generator packed into
    a staged folder beside ``RUN/vocoder`` and swapped in only once complete (``outputs.write_staged``).
    What is at ``RUN/vocoder`` is replaced only when ``outputs.check_own_vocoder_slot`` allows it: an earlier own
    vocoder, or a link (replaced itself once the new folder is complete; the folder it names is never touched);
    never a training run (OutputRefused, before anything is written). Refused (VocoderMismatchError) when it reads
    other mels than the run makes (``acoustic_cfg``, else the run's ``config.yaml``); with ``lock``, a training run
    is locked meanwhile (DirectoryBusyError while another process writes it; ``lock=False`` for the writer itself).
    Returns the packed ``vocoder.json``."""
    run = RunDir(acoustic_run)
    check_own_vocoder_slot(run.own_vocoder, source)  # first: what is there is never touched, whatever else is wrong
    acoustic_cfg = acoustic_cfg if acoustic_cfg is not None else load_config(run.config)
    check_vocoder_for(source, acoustic_cfg, f"the acoustic model {acoustic_run}")
    # a packed model has no writer to exclude, and a lock file would make it look like a training run
    held = lock_run_directory(acoustic_run) if lock and folder_kind(run.path) == RUN else None
    try:
        check_own_vocoder_slot(run.own_vocoder, source)  # again under the lock: a writer may have changed it
        return write_staged(run.own_vocoder, OWN_VOCODER, PACKED_VOCODER,
                            lambda staging: write_vocoder_pack(source, staging), replace_link=True)
    finally:
        if held is not None:
            held.release()
