"""No command deletes or overwrites what it did not make (``myxtts.outputs``): each writer refuses, naming what it
would have destroyed, and writes its records whole. Real files in tmp_path; nothing is trained."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from myxtts.cli import main

REPO = Path(__file__).resolve().parents[2]
SHIPPED_BASE = REPO / "pretrained" / "base-espeak-tiny"
SHIPPED_VOCODER = REPO / "pretrained" / "vocoder-vocos-ljspeech"


def _digest(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _invoke(*args: str):
    return CliRunner().invoke(main, [str(arg) for arg in args])


# ---- pack and export ------------------------------------------------------------------------------------------------

def test_an_acoustic_pack_never_replaces_a_packed_vocoder_nor_the_reverse(tmp_path):
    """The shipped vocoder's folder (other runs' RUN/vocoder links name it) as an acoustic pack's --out, and the
    shipped base as a vocoder pack's, with --force: refused before anything is read or written."""
    vocoder = tmp_path / "vocoder-vocos-ljspeech"  # the shipped folder, byte for byte (the repository's is not risked)
    shutil.copytree(SHIPPED_VOCODER, vocoder)
    base = tmp_path / "base-espeak-tiny"
    shutil.copytree(SHIPPED_BASE, base, symlinks=True)
    before = {vocoder: _digest(vocoder), base: _digest(base)}
    result = _invoke("pack", "--run", SHIPPED_BASE, "--out", vocoder, "--force")
    assert result.exit_code == 2 and f"--out {vocoder} is a packed vocoder made by `myxtts pack`" in result.output \
        and "replaces only a packed model" in result.output and "Traceback" not in result.output, result.output
    result = _invoke("pack", "--run", SHIPPED_VOCODER, "--out", base, "--force")
    assert result.exit_code == 2 and "is a packed model made by `myxtts pack`" in result.output, result.output
    result = _invoke("export", "--run", SHIPPED_BASE, "--out", vocoder, "--force")
    assert result.exit_code == 2 and "is a packed vocoder" in result.output, result.output
    assert {folder: _digest(folder) for folder in before} == before


def test_what_a_folder_is_comes_from_its_marker_or_its_records(tmp_path):
    from myxtts.outputs import (CACHE, PACKED_MODEL, PACKED_VOCODER, VOCODER_RUN, Maker, folder_kind, made_by,
                                unknown_files, write_marker, LAYOUTS)

    assert made_by(SHIPPED_VOCODER) == Maker("pack", PACKED_VOCODER)
    assert made_by(SHIPPED_BASE) == Maker("pack", PACKED_MODEL)
    assert unknown_files(SHIPPED_BASE, LAYOUTS[PACKED_MODEL]) == []  # its vocoder link belongs to the layout
    assert unknown_files(SHIPPED_VOCODER, LAYOUTS[PACKED_VOCODER]) == []
    foreign = tmp_path / "dataset"
    foreign.mkdir()
    (foreign / "manifest.json").write_text('{"files": ["a.wav"]}')  # not a myxtts manifest
    assert folder_kind(foreign) is None
    write_marker(foreign, "prepare", CACHE)
    assert folder_kind(foreign) == CACHE
    run = tmp_path / "vocoder-run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("{}")
    (run / "vocoder.json").write_text('{"family": "vocos"}')  # a run's record names no source_checkpoint
    assert made_by(run) == Maker("train-vocoder", VOCODER_RUN)


# ---- training runs ---------------------------------------------------------------------------------------------------

def test_train_refuses_a_workdir_that_is_not_a_run_before_writing(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "config.yaml").write_text("mine: true\n")
    (notes / "vocab.json").write_text("[]")
    before = _digest(notes)
    result = _invoke("train", "--config", REPO / "configs" / "mini.yaml", "--workdir", notes, "--no-progress")
    assert result.exit_code == 2 and f"--workdir {notes} exists, is not empty and is not a training run" in \
        result.output and "config.yaml, vocab.json" in result.output, result.output
    assert _digest(notes) == before and sorted(p.name for p in notes.iterdir()) == ["config.yaml", "vocab.json"]
    # a packed model is no run either, resumed or not
    result = _invoke("train", "--config", REPO / "configs" / "mini.yaml", "--workdir", SHIPPED_BASE, "--resume")
    assert result.exit_code == 2 and "is a packed model made by `myxtts pack`" in result.output, result.output


def test_the_demo_writes_only_into_its_own_run_and_fresh_replaces_only_that(tmp_path):
    from myxtts.outputs import discard, put_back, set_aside
    from myxtts.outputs import RUN, OutputRefused, check_replaceable_run, check_workdir, write_marker

    trained = tmp_path / "trained"  # a run `myxtts train` made
    (trained / "checkpoints").mkdir(parents=True)
    (trained / "checkpoints" / "checkpoint").write_text("x")
    write_marker(trained, "train", RUN)
    assert check_workdir(trained, "train", RUN) is False  # train continues it
    with pytest.raises(OutputRefused, match="made by `myxtts train`: `myxtts demo` continues only a training run it"):
        check_workdir(trained, "demo", RUN, own_only=True)
    result = _invoke("demo", "--config", REPO / "configs" / "demo.yaml", "--workdir", trained, "--fresh")
    assert result.exit_code == 2 and "`myxtts demo` continues only" in result.output, result.output
    assert (trained / "checkpoints" / "checkpoint").read_text() == "x"

    demo = tmp_path / "demo"
    assert check_workdir(demo, "demo", RUN, own_only=True) is True  # new: the demo marks it
    for name in ("checkpoints/ckpt-3.index", "metrics.jsonl", "tensorboard/train/events.out", "demo.wav",
                 "listening/sentence-1.png", "config.yaml"):
        (demo / name).parent.mkdir(parents=True, exist_ok=True)
        (demo / name).write_text(name)
    write_marker(demo, "demo", RUN)
    check_replaceable_run(demo, "demo")
    (demo / "my-notes.md").write_text("mine")
    with pytest.raises(OutputRefused, match="my-notes.md. They are never deleted"):
        check_replaceable_run(demo, "demo")
    (demo / "my-notes.md").unlink()
    before = _digest(demo)
    aside = set_aside(demo)  # what --fresh does while the new run trains
    (demo / "checkpoints").mkdir(parents=True)
    (demo / "checkpoints" / "half").write_text("a failed new run")
    put_back(aside, demo)
    assert _digest(demo) == before and not aside.exists()
    discard(set_aside(demo))
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("demo")] == []


# ---- files -----------------------------------------------------------------------------------------------------------

def test_evaluate_json_never_overwrites_a_runs_config(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("model: {preset: tiny}\n")
    result = _invoke("evaluate", "--run", run, "--json", run / "config.yaml")
    assert result.exit_code == 2 and "was not written by `myxtts evaluate`: it is never overwritten" in \
        result.output, result.output
    assert (run / "config.yaml").read_text() == "model: {preset: tiny}\n"
    from myxtts.outputs import FILE_MARK_KEY, check_output_file

    earlier = tmp_path / "report.json"
    earlier.write_text(json.dumps({FILE_MARK_KEY: "myxtts evaluate", "clips": 1}))
    check_output_file(earlier, "evaluate", "--json")  # its own earlier report: replaced
    earlier.write_text(json.dumps({"clips": 1}))
    with pytest.raises(ValueError, match="never overwritten"):
        check_output_file(earlier, "evaluate", "--json")


def test_synthesize_out_replaces_only_its_own_wav_and_writes_it_whole(tmp_path):
    from myxtts.outputs import OutputRefused, check_output_file, file_made_by
    from myxtts.vocoder import write_wav

    reference = sorted((REPO / "data" / "ljspeech-bundled" / "wavs").glob("*.wav"))[0]
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    result = _invoke("synthesize", "--run", SHIPPED_BASE, "--text", "Hello.", "--reference", reference,
                     "--out", notes)
    assert result.exit_code == 2 and f"--out {notes} exists and was not written by `myxtts synthesize`" in \
        result.output, result.output
    assert notes.read_text() == "mine"
    recording = tmp_path / "recording.wav"
    shutil.copy(reference, recording)
    with pytest.raises(OutputRefused, match="never overwritten"):  # a WAV someone else made: a recording
        check_output_file(recording, "synthesize", "--out")
    out = write_wav(tmp_path / "out.wav", np.full(2205, 0.1, np.float32), 22050, made_by="synthesize")
    assert file_made_by(out) == "synthesize" and sorted(p.name for p in tmp_path.iterdir()) == \
        ["notes.txt", "out.wav", "recording.wav"]  # no temporary file left
    check_output_file(out, "synthesize", "--out")  # an earlier synthesize's: replaced
    os.symlink(notes, tmp_path / "link.wav")
    with pytest.raises(OutputRefused, match="is a link"):
        check_output_file(tmp_path / "link.wav", "synthesize", "--out")


def test_corpus_espeak_refuses_a_folder_it_did_not_write(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "list.txt").write_text("clips/a.wav|my own transcript|me\n")
    result = _invoke("corpus", "espeak", "--out", corpus, "--sentences", "4", "--voices", "2", "--no-progress")
    assert result.exit_code == 2 and "list.txt" in result.output and "nothing in it is overwritten" in \
        result.output, result.output
    assert (corpus / "list.txt").read_text() == "clips/a.wav|my own transcript|me\n" and \
        sorted(p.name for p in corpus.iterdir()) == ["list.txt"]
    from myxtts.data.espeak_corpus import is_earlier_render

    rendered = tmp_path / "rendered"  # one rendered before outputs were marked: taken as this command's
    (rendered / "wavs" / "ljs-f").mkdir(parents=True)
    (rendered / "list.txt").write_text("wavs/ljs-f/LJ001.wav|Some text.|ljs-f\n")
    assert is_earlier_render(rendered) and not is_earlier_render(corpus)


# ---- records and locks -----------------------------------------------------------------------------------------------

def test_run_records_are_replaced_whole_never_rewritten_in_place(tmp_path, make_config):
    """save_config, RunDir.write_json and mel statistics write a new file and rename it: a hard link to the old file
    (what a reader holding it open sees) keeps the old bytes, and no temporary file is left."""
    from myxtts.config import save_config
    from myxtts.durable import write_durably
    from myxtts.data.mel_stats import MelStats
    from myxtts.run_dir import RunDir

    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    writers = {run.config: lambda: save_config(make_config(), run.config),
               run.corpus: lambda: run.write_json(run.corpus, {"speakers": 1}),
               run.mel_stats: lambda: MelStats(np.zeros(80, np.float32), np.ones(80, np.float32)).save(run.mel_stats),
               run.vocab: lambda: write_durably(run.vocab, b"[]")}
    for path, write in writers.items():
        path.write_text("the previous version")
        os.link(path, tmp_path / f"held-{path.name}")
        write()
        assert (tmp_path / f"held-{path.name}").read_text() == "the previous version"
        assert path.read_text() != "the previous version"
    assert sorted(p.name for p in run.path.iterdir()) == sorted(path.name for path in writers)


def test_lock_files_are_never_opened_through_a_link(tmp_path):
    from myxtts.locks import CACHE_READ_LOCK, LockFileError, lock_cache_for_reading, lock_run_directory

    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.lock").symlink_to(notes)
    with pytest.raises(LockFileError, match="is a link"):
        lock_run_directory(run)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / CACHE_READ_LOCK).symlink_to(notes)
    with pytest.raises(LockFileError):
        lock_cache_for_reading(cache)
    assert notes.read_text() == "my notes"
    result = _invoke("train", "--config", REPO / "configs" / "mini.yaml", "--workdir", run)
    assert result.exit_code == 2 and "is a link" in result.output and notes.read_text() == "my notes", result.output
