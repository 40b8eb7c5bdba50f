"""`myxtts export --format litert`: one LiteRT model of built-in ops that ai-edge-litert runs without TensorFlow and
that says what `myxtts synthesize` says, every bucket signature included."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile
from click.testing import CliRunner

from conftest import bundled_wavs
from test_export import (MIN_SNR_DB, TEXT, autoregressive_run, neural_vocoder,  # noqa: F401  (fixtures)
                         untrained_run)

pytest.importorskip("ai_edge_litert")

REPO = Path(__file__).resolve().parents[2]

# three sentences, each within the largest text bucket (64 tokens), together past it
LONG_TEXT = "Printing differs from most arts. It is comparatively modern. The first books were printed in Mainz."

# runs in a fresh interpreter: ai-edge-litert, numpy and the text front-end, never TensorFlow
SPEAK = """
import json, sys
import numpy as np, soundfile
from myxtts.litert_voice import LiteRtLengthError, LiteRtVoice
voice = LiteRtVoice(sys.argv[1], threads=1)
reference, _ = soundfile.read(sys.argv[2], dtype="float32")
embedding = voice.speaker_embedding(reference)
out = {"embedding": embedding.tolist(), "said": voice.say(sys.argv[3], embedding).tolist()}
out["faster"] = int(voice.say(sys.argv[3], embedding, speed=2.0).size)
try:
    voice.say(sys.argv[3], embedding, speed=0.0)
    out["bad_speed"] = "said"
except ValueError as error:  # InputError
    out["bad_speed"] = str(error)
ops = {op["op_name"] for op in voice.interpreter._get_ops_details()}
out["ops"] = sorted(ops)
shapes = {}
for name in voice.interpreter.get_signature_list():  # every signature runs, on inputs of its own static shapes
    runner = voice.runner(name)
    inputs = {key: np.ones(detail["shape"], detail["dtype"]) for key, detail in runner.get_input_details().items()}
    outputs = runner(**inputs)
    shapes[name] = {key: [list(value.shape), bool(np.isfinite(value).all())] for key, value in outputs.items()}
out["shapes"] = shapes
try:
    voice.say(sys.argv[4], embedding)
    out["long"] = "said"
except LiteRtLengthError as error:
    out["long"] = str(error)
out["long_split"] = int(voice.say_long(sys.argv[4], embedding).size)
out["tensorflow_imported"] = "tensorflow" in sys.modules
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def litert_run(tmp_path_factory, neural_vocoder) -> Path:  # noqa: F811  (the fixture imported above)
    """A pitch-conditioned parallel run with its voice's pitch level, two text buckets and two mel buckets, packed with
    a small neural vocoder as its own."""
    from myxtts.cli import main

    root = tmp_path_factory.mktemp("litert")
    run = untrained_run(root, {"decoder_conv_blocks": 2, "pitch_conditioning": True, "pitch_level": True},
                        {"max_text_length": 64, "max_mel_frames": 256})
    result = CliRunner().invoke(main, ["pack", "--run", str(run), "--out", str(root / "packed"), "--vocoder",
                                       str(neural_vocoder)])
    assert result.exit_code == 0, result.output
    return root / "packed"


@pytest.mark.slow
def test_litert_export_runs_without_tensorflow_and_matches_synthesize(litert_run, tmp_path):
    from myxtts.cli import main
    from myxtts.synthesis import Synthesizer

    out = tmp_path / "litert"
    result = CliRunner().invoke(main, ["export", "--run", str(litert_run), "--out", str(out), "--format", "litert"])
    assert result.exit_code == 0, result.output
    assert "built-in ops only" in result.output
    assert {path.name for path in out.iterdir()} == {".myxtts.json", "model.tflite", "litert.json", "vocab.json",
                                                     "mel_stats.json", "config.yaml"}
    record = json.loads((out / "litert.json").read_text())
    assert record["text_buckets"] == [32, 64] and record["mel_buckets"] == [128, 256]
    assert set(record["signatures"]) == {"speaker_embedding", "durations_32", "durations_64", "decode_128",
                                         "decode_256"}

    reference = bundled_wavs(3)[2]
    synthesizer = Synthesizer.from_run(litert_run)  # what `myxtts synthesize` says, through the run's own vocoder
    expected, = synthesizer.synthesize(TEXT[:40], reference)
    mel, length = synthesizer.engine.reference_mel(str(reference))
    latents = synthesizer.engine.latents([mel], [length])
    spoken = subprocess.run([sys.executable, "-c", SPEAK, str(out), str(reference), TEXT[:40], LONG_TEXT],
                            capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert spoken.returncode == 0, spoken.stderr
    answer = json.loads(spoken.stdout.split("RESULT ", 1)[1])
    assert answer["tensorflow_imported"] is False
    assert not [op for op in answer["ops"] if op.startswith("Flex") or op == "CUSTOM"], answer["ops"]
    np.testing.assert_allclose(np.asarray(answer["embedding"]), latents, atol=1e-4)
    said = np.asarray(answer["said"], np.float32)
    assert said.shape == expected.waveform.shape
    snr = float(10 * np.log10(np.sum(expected.waveform ** 2) / np.sum((said - expected.waveform) ** 2)))
    assert snr >= MIN_SNR_DB, snr
    assert 0.4 * said.size <= answer["faster"] <= 0.6 * said.size  # speed divides the durations
    assert "speed must be in [0.25, 4]" in answer["bad_speed"]
    for name, outputs in answer["shapes"].items():
        assert all(finite for _, finite in outputs.values()), (name, outputs)
        if name.startswith("decode_"):
            assert outputs["waveform"][0] == [1, (int(name.split("_")[1]) - 1) * 256]
    # a text past the largest bucket is refused with what to do, never cut; split at its sentences it is said whole
    assert "split it" in answer["long"]
    assert answer["long_split"] > said.size

    # the example a device runs: the export, a clip and a text in, a WAV out, never TensorFlow
    example = subprocess.run([sys.executable, str(REPO / "examples" / "litert_speak.py"), str(out), str(reference),
                              LONG_TEXT, str(tmp_path / "said.wav"), "--threads", "1"],
                             capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert example.returncode == 0, example.stderr
    assert "TensorFlow imported: False" in example.stdout
    written, rate = soundfile.read(tmp_path / "said.wav", dtype="float32")
    assert rate == 22050 and written.size >= answer["long_split"] - 1


def test_litert_export_errors_are_clear(litert_run, autoregressive_run, neural_vocoder, tmp_path):  # noqa: F811
    from myxtts.cli import main

    result = CliRunner().invoke(main, ["export", "--run", str(autoregressive_run), "--out", str(tmp_path / "c"),
                                       "--format", "litert", "--vocoder", str(neural_vocoder)])
    assert result.exit_code != 0 and "parallel decoder" in result.output and "SavedModel" in result.output
    assert not (tmp_path / "c").exists()

    result = CliRunner().invoke(main, ["export", "--run", str(litert_run), "--out", str(tmp_path / "a"),
                                       "--quantize", "int8"])
    assert result.exit_code != 0 and "--format litert only" in result.output
    result = CliRunner().invoke(main, ["export", "--run", str(litert_run), "--out", str(tmp_path / "b"),
                                       "--format", "litert", "--vocoder", "griffin-lim"])
    assert result.exit_code != 0 and "needs one" in result.output and "--vocoder" in result.output
    assert not (tmp_path / "b").exists()
