"""`myxtts export`: a SavedModel that TensorFlow alone runs and that says what `myxtts synthesize` says."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import BUNDLED_CORPUS, bundled_wavs

TEXT = "Printing, in the only sense with which we are at present concerned, differs from most arts."
MIN_SNR_DB = 30.0  # the stated tolerance: measured 40.6 dB on a trained run (the vocoder amplifies float noise)

# runs in a fresh interpreter: TensorFlow alone, no myxtts import
SERVE = """
import json, sys
import numpy as np, soundfile, tensorflow as tf
model = tf.saved_model.load(sys.argv[1])
reference, _ = soundfile.read(sys.argv[2], dtype="float32")
tokens = np.array(json.loads(sys.argv[3]), np.int32)[None]
embedding = model.signatures["speaker_embedding"](waveform=tf.constant(reference[None]))["embedding"]
out = {}
for speed in (1.0, 2.0):
    waveform = model.signatures["synthesize"](token_ids=tf.constant(tokens), embedding=embedding,
                                              speed=tf.constant(speed))["waveform"]
    out[str(speed)] = waveform.numpy()[0].tolist()
for name, ids, speed in (("bad_speed", tokens, -1.0), ("bad_id", np.where(tokens == tokens[0, 1], 10 ** 6, tokens),
                          1.0), ("negative_id", np.where(tokens == tokens[0, 1], -1, tokens), 1.0)):
    try:
        model.signatures["synthesize"](token_ids=tf.constant(ids, tf.int32), embedding=embedding,
                                       speed=tf.constant(speed))
        out[name] = "accepted"
    except tf.errors.InvalidArgumentError as err:
        out[name] = err.message
for speed in (1e-3, 0.25):  # clamped to 0.25: a tiny speed cannot ask for unbounded frames
    out[f"length_{speed}"] = int(model.signatures["synthesize"](token_ids=tf.constant(tokens), embedding=embedding,
                                                              speed=tf.constant(speed))["waveform"].shape[1])
out["myxtts_imported"] = "myxtts" in sys.modules
out["signatures"] = {name: [sorted(f.structured_input_signature[1]), sorted(f.structured_outputs)]
                     for name, f in model.signatures.items()}  # what `saved_model_cli show` would list
print("RESULT " + json.dumps(out))
"""


def _snr_db(expected: np.ndarray, waveform: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(expected ** 2) / np.sum((waveform - expected) ** 2)))


def untrained_run(root: Path, model_keys: dict, data_keys: dict | None = None) -> Path:
    import keras
    import tensorflow as tf

    from myxtts.config import config_from_dict
    from myxtts.model import build_model
    from myxtts.synthesis import save_run
    from myxtts.text import Vocabulary
    from test_synthesize import bundled_mel_stats

    cfg = config_from_dict({"data": {"corpus_path": str(BUNDLED_CORPUS), "cache_dir": str(root / "no-cache"),
                                     "reference_frames": 96, **(data_keys or {})}, "audio": {"griffin_lim_iters": 8},
                            "model": {"preset": "tiny", "text_layers": 1, **model_keys}}, base_dir=root)
    vocabulary = Vocabulary.for_config(cfg.text)
    keras.utils.set_random_seed(5)
    model = build_model(cfg, len(vocabulary))
    projection = model.duration_predictor.output_proj  # ~4 frames per token: speech of a plausible length
    projection.bias.assign([np.log(1.0 + 4.0)])
    projection.kernel.assign(0.01 * tf.random.stateless_normal(projection.kernel.shape, seed=[5, 0]))
    if cfg.model.pitch_conditioning:  # both pitch modules start at zero: made to act, so the export must carry them
        pitch_output = model.pitch_predictor.output_proj
        pitch_output.kernel.assign(0.1 * tf.random.stateless_normal(pitch_output.kernel.shape, seed=[5, 1]))
        pitch_output.bias.assign([0.5])
        embedding = model.pitch_embedding.conv
        embedding.kernel.assign(0.1 * tf.random.stateless_normal(embedding.kernel.shape, seed=[5, 2]))
    if cfg.model.pitch_level:  # the level head starts at zero too: made to say a level of its own per voice
        level_output = model.pitch_level.output_proj
        level_output.kernel.assign(0.1 * tf.random.stateless_normal(level_output.kernel.shape, seed=[5, 3]))
    save_run(root / "run", cfg, model, vocabulary, mel_stats=bundled_mel_stats(cfg))
    return root / "run"


# the clone recipe's model: the parallel decoder with pitch conditioning (a predictor says each token's pitch), its
# contour said wider than predicted (model.pitch_variation: the SavedModel's graph scales it as synthesize does); the
# serving tests' run too (conftest.py, `serving_run`)
PARALLEL_RUN_KEYS = {"decoder_conv_blocks": 2, "pitch_conditioning": True, "pitch_variation": 1.5}


@pytest.fixture(scope="module")
def parallel_run(tmp_path_factory) -> Path:
    return untrained_run(tmp_path_factory.mktemp("export"), PARALLEL_RUN_KEYS)


@pytest.fixture(scope="module")
def autoregressive_run(tmp_path_factory) -> Path:
    # 3 frames per step: the durations' total is not a whole number of steps (the export rounds up, then cuts)
    # and the mel sharpened (model.mel_sharpening): the SavedModel's graph sharpens it as synthesize does
    return untrained_run(tmp_path_factory.mktemp("export-ar"), {"decoder": "autoregressive", "decoder_layers": 1,
                                                                 "reduction_factor": 3, "mel_sharpening": 0.5},
                          {"bucket_multiple": 24, "max_mel_frames": 864})


@pytest.fixture(scope="module")
def neural_vocoder(tmp_path_factory) -> Path:
    """A small Vocos-style vocoder directory (untrained: the export must reproduce whatever it computes), its
    magnitude half the mel's (``vocoder.magnitude_from_mel``: part of the exported graph too)."""
    import keras

    from myxtts.config import config_from_dict
    from myxtts.vocoder.generators import build_generator
    from myxtts.vocoder.neural import save_vocoder

    root = tmp_path_factory.mktemp("vocoder")
    cfg = config_from_dict({"vocoder": {"dim": 32, "intermediate_dim": 64, "layers": 1, "magnitude_from_mel": 0.5}},
                           base_dir=root)
    keras.utils.set_random_seed(7)
    return save_vocoder(root / "vocoder", cfg, build_generator(cfg))


@pytest.mark.slow
# each decoder and each kind of vocoder once (pairwise): the default pair, and the other decoder with the other vocoder
@pytest.mark.parametrize("run_fixture,vocoder", [("parallel_run", "griffin-lim"), ("autoregressive_run", "neural")])
def test_exported_model_runs_with_tensorflow_alone_and_matches_synthesize(run_fixture, vocoder, request, tmp_path):
    """Both decoders (the autoregressive one exports its compiled step loop, a while_loop over None dims) and both
    kinds of vocoder (a neural one's generator is saved inside the SavedModel). The neural one is the model's own:
    packed with it (``pack --vocoder``), then used by export and synthesis without being named."""
    from myxtts.cli import main
    from myxtts.synthesis import Synthesizer
    from myxtts.vocoder.neural import NeuralVocoder

    parallel_run = request.getfixturevalue(run_fixture)
    export_args = ["--vocoder", "griffin-lim"]
    if vocoder == "neural":
        packed = tmp_path / "packed"
        result = CliRunner().invoke(main, ["pack", "--run", str(parallel_run), "--out", str(packed),
                                           "--vocoder", str(request.getfixturevalue("neural_vocoder"))])
        assert result.exit_code == 0 and f"its own vocoder from {request.getfixturevalue('neural_vocoder')}" in \
            result.output, result.output
        parallel_run, export_args = packed, []

    saved = tmp_path / "saved"
    result = CliRunner().invoke(main, ["export", "--run", str(parallel_run), "--out", str(saved), *export_args])
    assert result.exit_code == 0, result.output
    assert {p.name for p in (saved / "assets").iterdir()} == {"vocab.json", "mel_stats.json", "export.json"}
    info = json.loads((saved / "assets" / "export.json").read_text())
    assert info["sample_rate"] == 22050 and info["embedding_shape"][0] == 1
    assert info["vocoder"] == (f"{parallel_run.name}/vocoder" if vocoder == "neural" else "griffin-lim")
    assert not any(str(value).startswith("/") for value in info.values())  # no absolute path leaves the machine

    reference = bundled_wavs(3)[2]
    synthesizer = Synthesizer.from_run(parallel_run)  # what `myxtts synthesize` runs (before its 16-bit file)
    assert isinstance(synthesizer.vocoder, NeuralVocoder) == (vocoder == "neural")  # the run's own, if it has one
    result, = synthesizer.synthesize(TEXT, reference)
    expected, tokens = result.waveform, result.tokens
    if synthesizer.cfg.model.pitch_conditioning:  # the predicted pitch shapes the mel the export must reproduce
        embedding = synthesizer.model.pitch_embedding.conv.kernel
        trained = embedding.numpy()
        embedding.assign(np.zeros_like(trained))
        without_pitch, = synthesizer.synthesize(TEXT, reference)
        embedding.assign(trained)
        # an export without the pitch modules would miss the tolerance below by far
        assert _snr_db(expected, without_pitch.waveform) < MIN_SNR_DB - 10
        unscaled = Synthesizer.from_run(parallel_run)  # the contour as predicted: set before its first trace
        unscaled.model.pitch_variation = 1.0
        unscaled.vocoder = synthesizer.vocoder
        as_predicted, = unscaled.synthesize(TEXT, reference)
        assert _snr_db(expected, as_predicted.waveform) < MIN_SNR_DB  # an export ignoring the scale would fail below

    served = subprocess.run([sys.executable, "-c", SERVE, str(saved), str(reference), json.dumps(tokens.tolist())],
                            capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert served.returncode == 0, served.stderr
    answer = json.loads(served.stdout.split("RESULT ", 1)[1])
    assert answer["myxtts_imported"] is False
    assert answer["signatures"] == {"speaker_embedding": [["waveform"], ["embedding"]],
                                    "synthesize": [["embedding", "speed", "token_ids"], ["waveform"]]}
    waveform = np.asarray(answer["1.0"], np.float32)
    assert waveform.shape == expected.shape
    if run_fixture == "autoregressive_run":
        assert (len(expected) // 256 + 1) % 3, "the durations' total should not be a whole number of steps here"
    snr = _snr_db(expected, waveform)
    assert snr >= MIN_SNR_DB, snr
    faster = np.asarray(answer["2.0"], np.float32)
    assert 0.4 * waveform.size <= faster.size <= 0.6 * waveform.size  # speed divides the durations
    assert "speed must be > 0" in answer["bad_speed"]
    assert "outside the symbol table" in answer["bad_id"] and "outside the symbol table" in answer["negative_id"]
    assert answer["length_0.001"] == answer["length_0.25"]


def test_installing_a_runs_own_vocoder_waits_for_its_writer_and_replaces_the_earlier_one_whole(
        parallel_run, neural_vocoder, tmp_path):
    """``install_own_vocoder`` (what ``train-vocoder --acoustic-run`` ends with): refused while another process
    writes the run and for a vocoder of other mels, the run untouched each time; a second install replaces the first
    whole, and synthesis then speaks through it unasked."""
    import shutil

    from myxtts.locks import DirectoryBusyError, lock_run_directory
    from myxtts.synthesis import Synthesizer
    from myxtts.vocoder.neural import VocoderMismatchError
    from myxtts.vocoder.packing import install_own_vocoder

    run = tmp_path / "run"
    shutil.copytree(parallel_run, run)
    before = _digest(run)
    lock = lock_run_directory(run)  # a training writing the run
    with pytest.raises(DirectoryBusyError, match="is being written by another process"):
        install_own_vocoder(neural_vocoder, run)
    lock.release()
    assert not (run / "vocoder").exists()
    other = tmp_path / "other-mels"
    shutil.copytree(neural_vocoder, other)
    record = json.loads((other / "vocoder.json").read_text())
    record["audio"]["hop_length"] = 128
    (other / "vocoder.json").write_text(json.dumps(record))
    with pytest.raises(VocoderMismatchError, match="audio.hop_length: vocoder 128, acoustic model 256"):
        install_own_vocoder(other, run)
    assert _digest(run) == {**before, "run.lock": b""} and not (run / "vocoder").exists()

    # a linked own vocoder (as the shipped base's) is replaced as a link: the folder it names is left untouched
    linked = tmp_path / "linked-vocoder"
    shutil.copytree(neural_vocoder, linked)
    linked_before = _digest(linked)
    (run / "vocoder").symlink_to(linked, target_is_directory=True)
    first = install_own_vocoder(neural_vocoder, run)
    assert not (run / "vocoder").is_symlink() and _digest(linked) == linked_before
    (run / "vocoder" / "note.txt").write_text("a file no install wrote")
    from myxtts.outputs import OutputRefused

    with pytest.raises(OutputRefused, match="note.txt"):  # named, never deleted
        install_own_vocoder(neural_vocoder, run)
    assert (run / "vocoder" / "note.txt").read_text() == "a file no install wrote"
    (run / "vocoder" / "note.txt").unlink()
    second = install_own_vocoder(neural_vocoder, run)
    assert first["step"] == second["step"] == 0 and (run / "vocoder" / ".myxtts.json").is_file()
    assert sorted(p.name for p in run.iterdir()) == sorted([*{Path(k).parts[0] for k in before}, "run.lock",
                                                            "vocoder"])  # no staging folder left
    assert Synthesizer.from_run(run).vocoder.path == str(run / "vocoder")


def test_export_errors_are_clear(parallel_run, tmp_path):
    import shutil

    from myxtts.cli import main

    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "something").write_text("x")
    no_checkpoint = tmp_path / "no-checkpoint"
    no_checkpoint.mkdir()
    shutil.copy(parallel_run / "config.yaml", no_checkpoint / "config.yaml")
    for run, out, expected in ((parallel_run, taken, "not empty"), (no_checkpoint, tmp_path / "o", "No checkpoint"),
                               (tmp_path / "missing", tmp_path / "o", "not found")):
        result = CliRunner().invoke(main, ["export", "--run", str(run), "--out", str(out)])
        assert result.exit_code == 2 and expected in result.output and "Traceback" not in result.output, result.output
    assert (taken / "something").read_text() == "x"  # nothing overwritten


def test_a_checkpoint_of_the_other_decoder_is_a_clear_error(parallel_run, tmp_path):
    import yaml

    from myxtts.synthesis import RunError, Synthesizer

    raw = yaml.safe_load((parallel_run / "config.yaml").read_text())
    raw["model"] = {"preset": "tiny", "decoder": "autoregressive", "text_layers": 1}
    (tmp_path / "ar.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(RunError, match="holds a model of the parallel decoder.*model.decoder: autoregressive"):
        Synthesizer.from_checkpoint(parallel_run / "checkpoints", tmp_path / "ar.yaml")


def _digest(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes: equal digests, nothing removed or changed."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("command", ["export", "pack"])
def test_a_run_or_cache_is_never_an_output_even_with_force(command, parallel_run, autoregressive_run, prepared_cache):
    """--out is the run, its parent, inside it, a folder holding another run, a cache, inside or above a cache:
    exit 2 naming --out and what it would have destroyed, and nothing is removed."""
    from myxtts.cli import main

    cache = prepared_cache.cache_dir
    before = {folder: _digest(folder) for folder in (parallel_run, autoregressive_run, cache)}
    cases = [(parallel_run, "is the run given to --run", parallel_run),
             (parallel_run.parent, "contains the run given to --run", parallel_run),
             (parallel_run / "exported", "lies inside the run given to --run", parallel_run),
             (autoregressive_run.parent, "contains a training run", autoregressive_run),
             (cache, "is a prepared cache", cache),
             (cache / "exported", "lies inside a prepared cache", cache),
             (cache.parent, "contains a prepared cache", cache)]
    for out, expected, named in cases:
        result = CliRunner().invoke(main, [command, "--run", str(parallel_run), "--out", str(out), "--force"])
        assert result.exit_code == 2 and expected in result.output and "Traceback" not in result.output, \
            (out, result.output)
        assert f"--out {out}" in result.output and str(named) in result.output, result.output
    assert {folder: _digest(folder) for folder in before} == before
    assert not (parallel_run / "exported").exists() and not (cache / "exported").exists()


def _no_staging_left(out: Path) -> bool:
    return [p.name for p in out.parent.iterdir()] == [out.name]


@pytest.mark.parametrize("command", ["export", "pack"])
def test_force_replaces_an_earlier_output_only_once_the_new_one_is_complete(command, parallel_run, tmp_path,
                                                                            monkeypatch, request):
    """A run that cannot be loaded, then a failure while the new output is written (the disk fills): the earlier
    output is left whole and no staging folder stays; a complete new one replaces it. The record names the step of
    the weights written."""
    import shutil

    import tensorflow as tf

    from myxtts.cli import main
    from myxtts.synthesis import run_files

    out = tmp_path / "outputs" / "model"
    record = out / ("assets/export.json" if command == "export" else "model.json")
    # a packed model holding its own vocoder (OUT/vocoder, a packed vocoder): part of it, replaced with it
    own_vocoder = ["--vocoder", str(request.getfixturevalue("neural_vocoder"))] if command == "pack" else []
    first = CliRunner().invoke(main, [command, "--run", str(parallel_run), "--out", str(out), *own_vocoder])
    assert first.exit_code == 0, first.output
    assert (out / "vocoder" / "vocoder.json").is_file() == (command == "pack")
    info = json.loads(record.read_text())
    assert info["step"] == 0 and Path(info["source_checkpoint" if command == "pack" else "checkpoint"]).name == \
        Path(run_files.latest_checkpoint(parallel_run)).name
    earlier = _digest(out)

    again = CliRunner().invoke(main, [command, "--run", str(parallel_run), "--out", str(out)])
    assert again.exit_code == 2 and "already holds" in again.output and "--force" in again.output, again.output
    (out / "CARD.md").write_text("a file added by hand")  # not the command's: named in the refusal, never deleted
    refused = CliRunner().invoke(main, [command, "--run", str(parallel_run), "--out", str(out), "--force"])
    assert refused.exit_code == 2 and "CARD.md" in refused.output and "never deleted" in refused.output, \
        refused.output
    assert _digest(out) == {**earlier, "CARD.md": b"a file added by hand"}
    (out / "CARD.md").unlink()
    no_checkpoint = tmp_path / "no-checkpoint"
    no_checkpoint.mkdir()
    shutil.copy(parallel_run / "config.yaml", no_checkpoint / "config.yaml")
    failed = CliRunner().invoke(main, [command, "--run", str(no_checkpoint), "--out", str(out), "--force"])
    assert failed.exit_code == 2 and "No checkpoint" in failed.output, failed.output
    assert _digest(out) == earlier and _no_staging_left(out)

    def disk_full(folder) -> None:
        (Path(folder) / "half-written").write_text("x")
        raise OSError(28, "No space left on device")

    if command == "export":  # tf.saved_model.save(module, folder, ...)
        monkeypatch.setattr(tf.saved_model, "save", lambda module, folder, **kwargs: disk_full(folder))
    else:  # save_run(folder, cfg, model, ...)
        monkeypatch.setattr(run_files, "save_run", lambda folder, *args, **kwargs: disk_full(folder))
    failed = CliRunner().invoke(main, [command, "--run", str(parallel_run), "--out", str(out), "--force"])
    # a full disk is no bad input: the error propagates (a traceback, exit 1), and the earlier output stays
    assert failed.exit_code == 1 and isinstance(failed.exception, OSError) and failed.exception.errno == 28, \
        failed.output
    assert _digest(out) == earlier and _no_staging_left(out)

    monkeypatch.undo()
    replaced = CliRunner().invoke(main, [command, "--run", str(parallel_run), "--out", str(out), "--force"])
    assert replaced.exit_code == 0, replaced.output
    assert json.loads(record.read_text())["step"] == 0 and _no_staging_left(out)
    assert json.loads((out / ".myxtts.json").read_text())["command"] == command
    assert not (out / "vocoder").exists()  # the run has no vocoder of its own: the new pack has none
