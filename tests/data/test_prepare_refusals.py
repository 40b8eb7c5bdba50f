"""``prepare`` writes only into a new or empty folder or a cache it made: a corpus folder, a dataset's
``manifest.json`` or ``shards/`` are refused, named and left as they were; lock files and reader records are the
only things it ever takes for its own elsewhere. Nothing is built here (each refusal comes first)."""

from __future__ import annotations

from pathlib import Path

import pytest

from myxtts.data.prepare import prepare
from myxtts.outputs import OutputRefused


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("files", [
    {"utterances/s/x.wav": b"RIFF a recording", "metadata.csv": b"x|some text"},  # a corpus prepared into itself
    {"shards/train-000.tar": b"tar", "manifest.json": b'{"shards": 1}'},  # a WebDataset, a foreign manifest
    {"readers/notes.json": b"{}"},  # a folder named like the lock's records, holding something else
])
def test_prepare_into_a_folder_of_other_files_refuses_and_leaves_it(files, tmp_path, make_config):
    cache = tmp_path / "corpus"
    for name, data in files.items():
        (cache / name).parent.mkdir(parents=True, exist_ok=True)
        (cache / name).write_bytes(data)
    cfg = make_config(data={"cache_dir": str(cache)})
    with pytest.raises(OutputRefused, match="is not empty and is not a myxtts cache") as refused:
        prepare(cfg, progress=False)
    assert any(Path(name).parts[0] in str(refused.value) for name in files)  # what is there is named
    assert "data.cache_dir" in str(refused.value) and "nothing was written" in str(refused.value)
    assert _tree(cache) == files  # not even a lock file


def test_a_folder_holding_only_lock_leftovers_is_empty_to_prepare(tmp_path, make_config):
    from myxtts.locks import lock_cache_for_reading
    from myxtts.outputs import check_cache_dir

    cache = tmp_path / "cache"
    lock_cache_for_reading(cache).release()  # a training that found no cache there left its lock file
    check_cache_dir(cache)
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(OutputRefused, match="is a training run"):
        check_cache_dir(run)
