"""What a myxtts command may write, and what it may replace: the one rule every writer asks.

**The rule.** A command writes into a new or empty path, or replaces an earlier output *of the same command and
kind*; never a run, a cache, a corpus, a training run of any kind, nor a folder holding files it does not know.
Whatever it would remove is named in the refusal (``OutputRefused``), with what to do instead.

**Markers.** Every folder a command creates carries ``.myxtts.json`` (``MARKER``): the command that made it and
its kind (``write_marker``). A file output carries its mark inside: an evaluation report's ``written_by`` key, a
synthesized WAV's software tag (``file_made_by``). Folders written before markers existed are attributed by the
records myxtts writes into them (``made_by``): a packed model's ``model.json``, a packed vocoder's ``vocoder.json``
naming its ``source_checkpoint``, an export's ``assets/export.json``, a cache's ``manifest.json`` (a myxtts manifest,
not any file of that name), a run's ``run.lock`` / ``metrics.jsonl``.

**Files it does not know.** An output of a kind with a fixed layout (``LAYOUTS``: packed model, packed vocoder,
export) is replaced only when every file in it belongs to that layout; any other file (a ``CARD.md`` added by hand)
is named in the refusal and never deleted.

Who asks (``rules``): ``pack`` / ``export`` (``check_output_folder``), the install of a run's own vocoder
(``check_own_vocoder_slot``), ``train`` / ``train-vocoder`` / ``demo`` (``check_workdir``,
``check_outside_acoustic_run``, ``check_replaceable_run``), ``prepare`` (``check_cache_dir``), ``corpus espeak`` /
``corpus transcribe`` (``check_corpus_folder``); ``evaluate --json`` / ``synthesize --out`` (``files``:
``check_output_file``). What they judge by: ``markers``. How the writers then write, whole or not at all:
``staging``. A file named from data (a corpus id: ``evaluate --plots``, ``corpus espeak``, ``corpus transcribe``)
takes ``names.safe_file_name`` and is written at ``names.path_in_folder``, never outside its folder. Every name is
importable from ``myxtts.outputs``.
"""

from myxtts.outputs.files import FILE_MARK_KEY, MARK_PREFIX, check_output_file, file_made_by
from myxtts.outputs.markers import (CACHE, CORPUS, EXPORT, KINDS, LAYOUTS, LITERT_EXPORT, MARKER, OWN_VOCODER,
                                    PACKED_MODEL,
                                    PACKED_VOCODER, RUN, RUN_LAYOUT, TRAINING_RUNS, VOCODER_RUN, Maker,
                                    OutputRefused, describe_writer, folder_kind, made_by, read_marker, unknown_files,
                                    write_marker)
from myxtts.outputs.names import path_in_folder, safe_file_name
from myxtts.outputs.rules import (check_cache_dir, check_corpus_folder, check_outside_acoustic_run,
                                  check_output_folder, check_own_vocoder_slot, check_replaceable_run, check_workdir)
from myxtts.outputs.staging import discard, put_back, set_aside, write_file_atomically, write_staged

__all__ = ["CACHE", "CORPUS", "EXPORT", "FILE_MARK_KEY", "KINDS", "LAYOUTS", "LITERT_EXPORT", "MARKER", "MARK_PREFIX", "OWN_VOCODER",
           "PACKED_MODEL", "PACKED_VOCODER", "RUN", "RUN_LAYOUT", "TRAINING_RUNS", "VOCODER_RUN", "Maker",
           "OutputRefused", "check_cache_dir", "check_corpus_folder", "check_output_file", "check_output_folder",
           "check_outside_acoustic_run", "check_own_vocoder_slot", "check_replaceable_run", "check_workdir",
           "describe_writer", "discard", "file_made_by", "folder_kind", "made_by", "path_in_folder", "put_back",
           "read_marker", "safe_file_name", "set_aside", "unknown_files", "write_file_atomically", "write_marker",
           "write_staged"]
