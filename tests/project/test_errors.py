"""Bad input ends a command with one `Error: ...` line naming the file and exit 2; a bug or a full disk ends it with
its traceback and exit 1 (``myxtts.errors``, ``myxtts.cli.failures``)."""

from __future__ import annotations

import ast
import errno
import importlib
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from myxtts.cli import main
from myxtts.cli.failures import is_expected
from myxtts.errors import ExpectedError, InputError, SetupError

REPO = Path(__file__).resolve().parents[2]

INPUT_ERRORS = [("myxtts.data.cache_manifest", "CacheError"), ("myxtts.data.prepare", "CacheParametersChanged"),
                ("myxtts.data.entries", "CorpusError"), ("myxtts.run_dir", "RunError"),
                ("myxtts.outputs", "OutputRefused"), ("myxtts.text", "TextError"),
                ("myxtts.locks", "DirectoryBusyError"), ("myxtts.locks", "LockFileError"),
                ("myxtts.training.checkpoint", "WorkdirError"), ("myxtts.training.warm_start", "WarmStartError"),
                ("myxtts.training.vocoder_trainer", "VocoderTrainingError"),
                ("myxtts.data.vocoder_segments", "VocoderDataError"), ("myxtts.data.mel_stats", "MelStatsError"),
                ("myxtts.training.distribute", "DistributionError"), ("myxtts.espeak", "UnknownVoiceError")]
SETUP_ERRORS = [("myxtts.espeak", "EspeakUnavailableError"), ("myxtts.text", "PhonemizerError"),
                ("myxtts.data.espeak_corpus", "EspeakMissingError"), ("myxtts.data.espeak_corpus", "EspeakRenderError"),
                ("myxtts.evaluation.whisper_listener", "WhisperError")]
# expected failures that are neither: a training that diverged, an unreadable checkpoint, strict retracing
OTHER_EXPECTED = [("myxtts.training.trainer", "NonFiniteLossError"), ("myxtts.training.checkpoint", "CheckpointError"),
                  ("myxtts.diagnostics.events", "RetraceError")]


def _error_class(module: str, name: str) -> type:
    return getattr(importlib.import_module(module), name)


def _bad_transcripts(tmp_path: Path) -> Path:
    path = tmp_path / "transcripts.csv"
    path.write_text("LJ001-0001|Printing, in the only sense.|printing, in the only sense.\nno separator here\n",
                    encoding="utf-8")
    return path


def test_the_project_errors_share_the_expected_bases():
    """Each error class a command reports cleanly has its family's base, and keeps its old one (ValueError /
    RuntimeError), so code catching that still does."""
    for module, name in INPUT_ERRORS:
        error = _error_class(module, name)
        assert issubclass(error, InputError) and issubclass(error, ValueError), name
    for module, name in SETUP_ERRORS:
        error = _error_class(module, name)
        assert issubclass(error, SetupError) and issubclass(error, RuntimeError), name
    for module, name in OTHER_EXPECTED:
        error = _error_class(module, name)
        assert issubclass(error, ExpectedError) and issubclass(error, RuntimeError), name


def test_the_errors_module_imports_nothing_of_myxtts():
    """Every module may import myxtts.errors: it must never import one back (no cycle, no TensorFlow)."""
    tree = ast.parse((REPO / "src" / "myxtts" / "errors.py").read_text(encoding="utf-8"))
    imported = [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    imported += [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    assert not [name for name in imported if name.split(".")[0] == "myxtts"], imported


def test_what_counts_as_expected():
    assert is_expected(InputError("bad")) and is_expected(SetupError("missing"))
    assert is_expected(FileNotFoundError(errno.ENOENT, "No such file or directory", "clip.wav"))
    assert is_expected(PermissionError(errno.EACCES, "Permission denied", "out"))
    assert not is_expected(ValueError("operands could not be broadcast together with shapes (3,) (4,)"))
    assert not is_expected(OSError(errno.ENOSPC, "No space left on device", "cache/x.utt"))
    assert not is_expected(OSError(errno.EIO, "Input/output error", "cache/x.utt"))
    assert not is_expected(KeyError("mel"))


def test_a_bad_config_is_expected_a_value_error_elsewhere_is_not(tmp_path):
    """myxtts.config raises a ConfigError for a bad key (an InputError): it counts as input, a plain ValueError does
    not."""
    from myxtts.config import ConfigError, load_config

    config = tmp_path / "config.yaml"
    config.write_text("data: {batch_sise: 4}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="batch_sise") as raised:
        load_config(config)
    assert is_expected(raised.value)
    try:
        raise ValueError("a bug of this test module")
    except ValueError as err:
        assert not is_expected(err)


def test_every_error_class_of_a_bad_input_is_an_input_error():
    """The input errors of the modules that read audio, vocoders, config and text are InputErrors (exit 2)."""
    for module, name in (("myxtts.audio", "AudioError"), ("myxtts.vocoder.neural", "VocoderError"),
                         ("myxtts.synthesis.decoding", "SynthesisLengthError"),
                         ("myxtts.synthesis.lengths", "TextTooLongError"),
                         ("myxtts.synthesis.text_split", "UnsplittableTextError"), ("myxtts.config", "ConfigError")):
        error = _error_class(module, name)
        assert issubclass(error, InputError) and issubclass(error, ValueError), name
        assert is_expected(error.__new__(error)), name


def test_bad_input_exits_2_with_one_line_naming_the_file(tmp_path):
    transcripts = _bad_transcripts(tmp_path)
    result = CliRunner().invoke(main, ["corpus", "espeak", "--transcripts", str(transcripts),
                                       "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert lines == [f"Error: {transcripts}:2: expected 'id|text|normalized' (or 'id|text'), got 'no separator "
                     "here'."], result.output
    assert not (tmp_path / "out").exists()


def test_a_missing_path_exits_2_naming_it(tmp_path):
    result = CliRunner().invoke(main, ["lint", str(tmp_path / "nowhere.py")])
    assert result.exit_code == 2 and result.output.strip() == f"Error: lint: path not found: {tmp_path / 'nowhere.py'}"


def test_an_os_error_about_a_user_path_exits_2_without_the_errno(tmp_path, monkeypatch):
    import myxtts.data.espeak_corpus as espeak_corpus

    def unreadable(path):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(espeak_corpus, "read_transcripts", unreadable)
    transcripts = _bad_transcripts(tmp_path)
    result = CliRunner().invoke(main, ["corpus", "espeak", "--transcripts", str(transcripts),
                                       "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and result.output.strip() == f"Error: Permission denied: {transcripts}"


@pytest.mark.parametrize("bug", [ValueError("shapes (80,) and (64,) not aligned"),
                                 OSError(errno.ENOSPC, "No space left on device", "out/list.txt")])
def test_a_bug_or_a_full_disk_is_no_bad_input(tmp_path, monkeypatch, bug):
    """A plain ValueError from deep inside, or ENOSPC, propagates (CliRunner keeps it as result.exception)."""
    import myxtts.data.espeak_corpus as espeak_corpus

    def broken(path):
        raise bug

    monkeypatch.setattr(espeak_corpus, "read_transcripts", broken)
    result = CliRunner().invoke(main, ["corpus", "espeak", "--transcripts", str(_bad_transcripts(tmp_path)),
                                       "--out", str(tmp_path / "out")])
    assert result.exit_code == 1 and result.exception is bug and "Error:" not in result.output, result.output


def test_a_bad_config_still_exits_2_and_a_bug_while_loading_it_does_not(tmp_path, monkeypatch):
    config = tmp_path / "config.yaml"
    config.write_text("data: {batch_sise: 4}\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["stats", "--config", str(config)])
    assert result.exit_code == 2 and "data.batch_sise" in result.output and str(config) in result.output

    import myxtts.cli.common as common

    def broken(path, overrides):
        raise ValueError("a bug while loading")

    monkeypatch.setattr(common, "load_config", broken)
    result = CliRunner().invoke(main, ["stats", "--config", str(config)])
    assert result.exit_code == 1 and str(result.exception) == "a bug while loading"


def test_a_full_disk_prints_its_traceback_and_exits_1(tmp_path):
    """The real process: Python prints the traceback of the OSError (errno and path) and exits 1."""
    script = ("import errno, sys\n"
              "import myxtts.data.espeak_corpus as espeak_corpus\n"
              "def full(path):\n"
              "    raise OSError(errno.ENOSPC, 'No space left on device', str(path))\n"
              "espeak_corpus.read_transcripts = full\n"
              "from myxtts.cli import main\n"
              "main(['corpus', 'espeak', '--transcripts', sys.argv[1], '--out', sys.argv[2]])\n")
    transcripts = _bad_transcripts(tmp_path)
    done = subprocess.run([sys.executable, "-c", script, str(transcripts), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert "Traceback (most recent call last)" in done.stderr and "in full" in done.stderr
    assert f"OSError: [Errno {errno.ENOSPC}] No space left on device: '{transcripts}'" in done.stderr
    assert "Error:" not in done.stderr.replace("OSError:", "")
