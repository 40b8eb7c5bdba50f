"""Installing a run's own vocoder (``RUN/vocoder``) never replaces a training run, and stages the new folder before
it swaps anything: ``train-vocoder --acoustic-run R --workdir R/vocoder`` is refused before training, a vocoder run
copied to ``RUN/vocoder`` is left resumable, and a failed install leaves a linked own vocoder as it was. Real
folders; the vocoder pack itself is stubbed where only the swap is under test."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from myxtts.cli import main

REPO = Path(__file__).resolve().parents[2]
SHIPPED_BASE = REPO / "pretrained" / "base-espeak-tiny"
SHIPPED_VOCODER = REPO / "pretrained" / "vocoder-vocos-ljspeech"


def _digest(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def acoustic_run(tmp_path) -> Path:
    """An acoustic run's folder as far as an install reads it: its config.yaml (the shipped base's mels)."""
    run = tmp_path / "acoustic"
    run.mkdir()
    shutil.copy(SHIPPED_BASE / "config.yaml", run / "config.yaml")
    return run


def _vocoder_run(folder: Path) -> Path:
    """A vocoder training run, as train-vocoder leaves one: config, record, checkpoints, metrics."""
    (folder / "checkpoints").mkdir(parents=True)
    for name, text in (("config.yaml", "{}"), ("vocoder.json", '{"family": "vocos"}'), ("metrics.jsonl", "{}\n"),
                       ("checkpoints/checkpoint", 'model_checkpoint_path: "ckpt-7"'),
                       ("checkpoints/ckpt-7.index", "index"), ("tensorboard/events", "events")):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def test_train_vocoder_into_the_acoustic_runs_own_vocoder_folder_is_refused_before_training(acoustic_run):
    from myxtts.config import load_config
    from myxtts.outputs import OutputRefused
    from myxtts.training.vocoder_trainer import train_vocoder

    before = _digest(acoustic_run)
    for workdir in (acoustic_run / "vocoder", acoustic_run / "vocoder-ft", acoustic_run):
        result = CliRunner().invoke(main, ["train-vocoder", "--config", str(REPO / "configs" / "vocoder.yaml"),
                                           "--acoustic-run", str(acoustic_run), "--workdir", str(workdir),
                                           "--no-progress"])
        assert result.exit_code == 2 and "of the acoustic run given to --acoustic-run" in result.output \
            and "runs/NAME-vocoder" in result.output and "Traceback" not in result.output, result.output
    with pytest.raises(OutputRefused, match="its own vocoder's folder"):  # the library refuses it too
        train_vocoder(load_config(REPO / "configs" / "vocoder.yaml"), acoustic_run / "vocoder",
                      acoustic_run=acoustic_run, progress=False)
    assert _digest(acoustic_run) == before and sorted(p.name for p in acoustic_run.iterdir()) == ["config.yaml"]


def test_an_install_never_replaces_a_training_run_at_run_vocoder(acoustic_run):
    from myxtts.outputs import OutputRefused
    from myxtts.vocoder.packing import install_own_vocoder

    copied = _vocoder_run(acoustic_run / "vocoder")  # a vocoder run a user moved there
    before = _digest(copied)
    with pytest.raises(OutputRefused, match="is a vocoder training run made by `myxtts train-vocoder`: installing a "
                                            "run's own vocoder never replaces a training run"):
        install_own_vocoder(SHIPPED_VOCODER, acoustic_run)
    assert _digest(copied) == before  # still resumable: optimizer, metrics and TensorBoard are where they were
    # the vocoder being installed is the run there itself
    with pytest.raises(OutputRefused, match="is \\(or holds\\) the vocoder being installed"):
        install_own_vocoder(copied, acoustic_run)
    assert _digest(copied) == before


def test_a_linked_own_vocoder_is_staged_before_the_link_is_swapped(acoustic_run, tmp_path, monkeypatch):
    from myxtts.vocoder import packing

    target = tmp_path / "shipped-copy"
    shutil.copytree(SHIPPED_VOCODER, target)
    target_before = _digest(target)
    (acoustic_run / "vocoder").symlink_to(target, target_is_directory=True)

    def disk_full(source, staging, with_discriminators=False):
        (staging / "config.yaml").write_text("half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(packing, "write_vocoder_pack", disk_full)
    with pytest.raises(OSError, match="No space left"):
        packing.install_own_vocoder(SHIPPED_VOCODER, acoustic_run)
    assert (acoustic_run / "vocoder").is_symlink() and (acoustic_run / "vocoder").resolve() == target.resolve()
    assert sorted(p.name for p in acoustic_run.iterdir()) == ["config.yaml", "vocoder"]  # no staging left

    def packed(source, staging, with_discriminators=False):
        (staging / "checkpoints").mkdir()
        for name in ("config.yaml", "vocoder.json", "checkpoints/checkpoint", "checkpoints/ckpt-1.index"):
            (staging / name).write_text(name)
        return {"step": 1}

    monkeypatch.setattr(packing, "write_vocoder_pack", packed)
    assert packing.install_own_vocoder(SHIPPED_VOCODER, acoustic_run) == {"step": 1}
    own = acoustic_run / "vocoder"
    assert not own.is_symlink() and json.loads((own / ".myxtts.json").read_text())["command"] == "own-vocoder"
    assert _digest(target) == target_before  # the folder the link named is untouched
    assert packing.install_own_vocoder(SHIPPED_VOCODER, acoustic_run) == {"step": 1}  # its own: replaced
    assert sorted(p.name for p in acoustic_run.iterdir()) == ["config.yaml", "vocoder"]
