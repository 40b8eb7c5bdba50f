"""`prepare` stopped at each of its write stages leaves the cache as it was or as it becomes, never half, and the
rerun processes only what the stopped one did not finish; the journal, the reader records and lock waits of a
stopped or stuck process. Real bundled clips; the stops come from the fault hook (``myxtts.durable``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from myxtts import durable
from myxtts.cache_files import JOURNAL_FILE
from myxtts.data.cache import FeatureCache
from myxtts.data.cache_manifest import CacheError
from myxtts.durable import WRITE_STAGES
from myxtts.data.journal import PrepareJournal
from myxtts.data.prepare import prepare
from myxtts.locks import (CACHE_READ_LOCK, CACHE_WRITE_LOCK, READERS_DIR, DirectoryBusyError, DirectoryLock, Holder,
                          lock_cache_for_reading, lock_cache_for_writing)

COMMITTED = WRITE_STAGES.index("manifest")  # stages from here on leave the new cache
TODO = 2  # clips the update processes: one added, one whose transcript changed


class Stopped(BaseException):
    """What the fault hook raises: like a kill, nothing catches it."""


def _config(corpus: Path, cache_dir: Path):
    from myxtts.config import config_from_dict

    return config_from_dict({"data": {"corpus_path": str(corpus), "corpus_format": "list", "cache_dir": str(cache_dir),
                                      "validation_size": 1}}, base_dir=cache_dir.parent)


def _write_list(corpus: Path, rows: list[tuple[str, str]]) -> None:
    corpus.write_text("".join(f"wavs/{clip}.wav|{text}|ljs\n" for clip, text in rows), encoding="utf-8")


@pytest.fixture(scope="module")
def states(tmp_path_factory, bundled_corpus: Path):
    """(corpus list, the cache before the update, the cache after it): five clips, then one removed, one added
    and one transcript changed. The list stays at one path (it is part of the feature hash) and holds the
    updated corpus after this fixture."""
    root = tmp_path_factory.mktemp("crash")
    (root / "wavs").mkdir()
    rows = []
    for line in (bundled_corpus / "metadata.csv").read_text(encoding="utf-8").splitlines()[:6]:
        clip, text = line.split("|")[0], line.split("|")[-1]
        (root / "wavs" / f"{clip}.wav").symlink_to(bundled_corpus / "wavs" / f"{clip}.wav")
        rows.append((clip, text))
    corpus = root / "list.txt"
    _write_list(corpus, rows[:5])
    prepare(_config(corpus, root / "before"), progress=False, workers=1)
    _write_list(corpus, [rows[0], rows[1], (rows[2][0], "an entirely different transcript"), rows[3], rows[5]])
    shutil.copytree(root / "before", root / "after")
    update = prepare(_config(corpus, root / "after"), progress=False, workers=1).manifest["update"]
    assert (update["processed"], update["reused"]) == (TODO, 3)
    return corpus, FeatureCache.load(_config(corpus, root / "before")), FeatureCache.load(_config(corpus, root / "after"))


def _same_cache(loaded: FeatureCache, expected: FeatureCache) -> None:
    assert loaded.ids == expected.ids and loaded.files == expected.files
    np.testing.assert_array_equal(loaded.tokens, expected.tokens)
    assert loaded.manifest["mel_stats"] == expected.manifest["mel_stats"]
    assert loaded.manifest["splits"] == expected.manifest["splits"]
    for row in range(len(loaded)):  # every file it names is there and whole
        np.testing.assert_array_equal(loaded.utterance_mel(row), expected.utterance_mel(row))


def _stop_at(stage: str):
    def hook(reached: str) -> None:
        if reached == stage:
            raise Stopped(stage)
    return hook


@pytest.mark.parametrize("stage", WRITE_STAGES)
def test_prepare_stopped_at_each_write_stage_leaves_the_old_or_the_new_cache(stage, states, tmp_path, monkeypatch):
    corpus, before, after = states
    shutil.copytree(before.cache_dir, tmp_path / "cache")
    cfg = _config(corpus, tmp_path / "cache")
    monkeypatch.setattr(durable, "fault_hook", _stop_at(stage))
    with pytest.raises(Stopped):
        prepare(cfg, progress=False, workers=1)
    monkeypatch.setattr(durable, "fault_hook", None)
    committed = WRITE_STAGES.index(stage) >= COMMITTED
    _same_cache(FeatureCache.load(cfg), after if committed else before)  # loads, as before or as after
    rerun = prepare(cfg, progress=False, workers=1)
    if committed:
        assert rerun.reused  # the stopped one's leftovers are cleared
        assert not (cfg.cache_dir / JOURNAL_FILE).exists() and len(list(cfg.cache_dir.glob("index*.npz"))) == 1
        plan = json.loads((cfg.cache_dir / "bucket_plan.json").read_text())
        assert plan == rerun.manifest["bucket_plan"]
    else:
        update = rerun.manifest["update"]
        processed = {"reused": TODO, "clip": TODO - 1}.get(stage, 0)  # only what the stopped one did not finish
        assert (update["processed"], update["resumed"]) == (processed, TODO - processed)
        assert update["reused"] - update["resumed"] == 3  # the unchanged clips, from the cache as it was
    _same_cache(FeatureCache.load(cfg), after)
    on_disk = {p.relative_to(cfg.cache_dir).as_posix() for p in (cfg.cache_dir / "utterances").glob("*/*")}
    assert on_disk == set(after.files) | {file[:-len(".utt")] + ".wav" for file in after.files}


def test_reused_clips_are_journalled_so_a_rerun_without_the_old_manifest_processes_nothing(states, tmp_path,
                                                                                          monkeypatch):
    corpus, before, after = states
    shutil.copytree(before.cache_dir, tmp_path / "cache")
    cfg = _config(corpus, tmp_path / "cache")
    monkeypatch.setattr(durable, "fault_hook", _stop_at("index"))
    with pytest.raises(Stopped):
        prepare(cfg, progress=False, workers=1)
    monkeypatch.setattr(durable, "fault_hook", None)
    journalled = PrepareJournal(cfg.cache_dir, cfg.feature_hash()).finished()
    assert set(journalled) == set(after.ids)  # the three reused clips and the two processed ones
    (cfg.cache_dir / "manifest.json").unlink()  # the old cache lost: only the journal is left to go by
    update = prepare(cfg, progress=False, workers=1).manifest["update"]
    assert (update["processed"], update["resumed"]) == (0, len(after.ids))
    _same_cache(FeatureCache.load(cfg), after)


def test_an_index_that_is_not_the_manifests_is_refused(states, tmp_path):
    corpus, before, _ = states
    shutil.copytree(before.cache_dir, tmp_path / "cache")
    cfg = _config(corpus, tmp_path / "cache")
    index = cfg.cache_dir / before.manifest["index"]["file"]
    data = bytearray(index.read_bytes())
    data[-40] ^= 0xFF  # same size, other content
    index.write_bytes(bytes(data))
    with pytest.raises(CacheError, match="sha256 differs"):
        FeatureCache.load(cfg)


def test_a_manifest_without_an_index_hash_loads_and_its_next_update_records_one(states, tmp_path):
    corpus, before, after = states
    shutil.copytree(before.cache_dir, tmp_path / "cache")
    cfg = _config(corpus, tmp_path / "cache")
    manifest_path = cfg.cache_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    index = cfg.cache_dir / manifest["index"]["file"]
    index.rename(cfg.cache_dir / "index.npz")
    manifest["index"] = {"file": "index.npz", "bytes": (cfg.cache_dir / "index.npz").stat().st_size}
    manifest_path.write_text(json.dumps(manifest))
    _same_cache(FeatureCache.load(cfg), before)  # checked by size, as it was written
    updated = prepare(cfg, progress=False, workers=1).manifest
    assert updated["index"]["file"].startswith("index-") and len(updated["index"]["sha256"]) == 64
    assert not (cfg.cache_dir / "index.npz").exists()
    _same_cache(FeatureCache.load(cfg), after)


# ---- the journal ----------------------------------------------------------------------------------

def test_a_torn_journal_tail_is_cut_before_the_next_record(tmp_path):
    journal = PrepareJournal(tmp_path, "hash")
    journal.open(keep=False)
    journal.accepted("a", "fa", "utterances/aa/a.utt", 100)
    journal.close(delete=False)
    with open(journal.path, "a", encoding="utf-8") as handle:
        handle.write('{"id": "b", "fingerp')  # a kill in the middle of a line
    journal.open(keep=True)
    journal.rejected("c", "fc", "too_short", "c.wav", "0.1 s")
    journal.close(delete=False)
    lines = journal.path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line).get("id") for line in lines] == [None, "a", "c"]  # every line whole
    assert set(journal.finished()) == {"a", "c"}
    journal.path.write_text('{"feature_ha', encoding="utf-8")  # not even the header is whole: a new journal
    journal.open(keep=True)
    journal.close(delete=False)
    assert json.loads(journal.path.read_text(encoding="utf-8"))["feature_hash"] == "hash"
    # the utterance files hold the F0 track: a journal of other tracker settings is not reused
    journal.open(keep=True)
    journal.accepted("a", "fa", "utterances/aa/a.utt", 100)
    journal.close(delete=False)
    assert set(journal.finished()) == {"a"}
    header, *records = journal.path.read_text(encoding="utf-8").splitlines()
    other = {**json.loads(header), "pitch_tracker": {**json.loads(header)["pitch_tracker"], "threshold": 0.2}}
    journal.path.write_text("\n".join([json.dumps(other), *records]) + "\n", encoding="utf-8")
    assert journal.finished() == {}


# ---- reader records and lock waits --------------------------------------------------------------------

def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def test_reader_records_of_dead_processes_are_removed(tmp_path):
    readers = tmp_path / READERS_DIR
    readers.mkdir()
    dead = Holder(_dead_pid(), Holder.this_process().host, "2026-01-01T00:00:00+00:00", "myxtts train")
    dead.write(readers / f"{dead.host}-{dead.pid}.json")
    (readers / f"{dead.host}-{dead.pid + 1}.json").write_text('{"pid": ', encoding="utf-8")  # torn, named by pid
    elsewhere = Holder(1, "another-host", dead.started, "myxtts train")
    elsewhere.write(readers / "another-host-1.json")
    lock = lock_cache_for_reading(tmp_path)
    mine = f"{dead.host}-{os.getpid()}.json"
    alive = {p.name for p in readers.glob("*.json")}
    assert f"{dead.host}-{dead.pid}.json" not in alive and mine in alive
    assert "another-host-1.json" in alive  # another host's process cannot be checked: kept while readers remain
    lock.release()
    DirectoryLock(tmp_path, CACHE_READ_LOCK).acquire().release()  # exclusive: no reader holds it, none is left
    assert not list(readers.glob("*.json"))


def test_a_lock_wait_names_the_holder_and_honours_the_timeout(tmp_path, states):
    cache = tmp_path / "cache"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom myxtts.locks import lock_cache_for_writing\n"
                               f"lock = lock_cache_for_writing({str(cache)!r})\nprint('held', flush=True)\ntime.sleep(120)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        said: list[str] = []
        with pytest.raises(DirectoryBusyError) as error:
            lock_cache_for_writing(cache, said.append, timeout=0.3)
        assert f"pid {holder.pid}" in said[0] and "giving up after 0.3 s" in said[0]
        assert "Gave up after waiting 0.3 s" in str(error.value) and f"pid {holder.pid}" in str(error.value)
        assert "--lock-timeout" in str(error.value)
        from click.testing import CliRunner

        from myxtts.cli import main
        from myxtts.config import save_config

        save_config(_config(states[0], cache), tmp_path / "config.yaml")
        result = CliRunner().invoke(main, ["prepare", "--config", str(tmp_path / "config.yaml"), "--no-progress",
                                           "--lock-timeout", "0.2"])
        assert result.exit_code == 2 and f"pid {holder.pid}" in result.output, result.output
    finally:
        holder.kill()
        holder.wait(30)
        holder.stdout.close()
    lock_cache_for_writing(cache, timeout=0).release()  # the kernel freed the killed holder's lock
    assert Holder.read(cache / CACHE_WRITE_LOCK) is None
