"""`myxtts evaluate` on a tiny (untrained) run whose config points at the prepared bundled cache."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import tensorflow as tf
from click.testing import CliRunner


@pytest.fixture(scope="module")
def cached_run(prepared_cache, tmp_path_factory):
    from myxtts.model import build_model
    from myxtts.synthesis import save_run
    from myxtts.text import Vocabulary

    vocabulary = Vocabulary.load(prepared_cache.cache_dir / "vocab.json")
    run = tmp_path_factory.mktemp("evaluate") / "run"
    save_run(run, prepared_cache, build_model(prepared_cache, len(vocabulary)), vocabulary)
    return run


def test_length_policy_comes_from_the_cache(cached_run, prepared_cache):
    from myxtts.data.cache import FeatureCache
    from myxtts.synthesis import Synthesizer

    policy = Synthesizer.from_run(cached_run).lengths
    assert "cache" in policy.source
    cache = FeatureCache.load(prepared_cache, lengths_only=True)
    ratios = cache.mel_lengths / cache.token_lengths
    assert policy.typical_frames_per_token == pytest.approx(np.median(ratios))
    assert ratios.min() < policy.typical_frames_per_token < ratios.max()


def test_evaluate_cli_json_table_and_plots(cached_run, prepared_cache, tmp_path):
    from myxtts.cli import main

    out, plots = tmp_path / "report.json", tmp_path / "plots"
    result = CliRunner().invoke(main, ["evaluate", "--run", str(cached_run), "--json", str(out),
                                       "--plots", str(plots)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    validation = json.loads((prepared_cache.cache_dir / "manifest.json").read_text())["splits"]["validation"]
    assert sorted(item["id"] for item in report["items"]) == sorted(validation)
    assert report["clips"] == 2 and "validation split" in report["data"]
    for item in report["items"]:
        assert item["reference_id"] != item["id"]  # another clip of the (single) speaker
        for key in ("mcd_dtw_db", "teacher_forced_mel_l1", "duration_error", "aligner_focus_rate",
                    "aligner_diagonality", "real_time_factor", "length_ratio"):
            assert math.isfinite(item[key]), key
        assert 0.0 < item["aligner_focus_rate"] <= 1.0 and 0.0 <= item["aligner_diagonality"] <= 1.0
        assert item["duration_error"] > 0  # an untrained duration predictor misses the aligner's durations
        assert item["mcd_dtw_db"] > 0 and item["real_time_factor"] > 0
        for path in item["plots"]:
            image = tf.io.decode_png(tf.io.read_file(path)).numpy()
            assert image.ndim == 3 and image.shape[2] in (3, 4) and image.std() > 0
    assert set(report["summary"]) >= {"mcd_dtw_db", "teacher_forced_mel_l1", "duration_error", "real_time_factor"}
    assert np.isclose(report["summary"]["mcd_dtw_db"], np.mean([i["mcd_dtw_db"] for i in report["items"]]))
    assert report["machine"]["cores"] >= 1
    for item in report["items"]:
        assert item["id"] in result.output  # the readable table
    assert "MCD dB" in result.output and "mean" in result.output


def test_evaluate_on_a_corpus_folder_with_limit(cached_run, bundled_corpus, tmp_path):
    from myxtts.evaluation.evaluate import evaluate_run

    report = evaluate_run(cached_run, data=bundled_corpus, limit=1)
    assert report["clips"] == 1 and str(bundled_corpus) in report["data"]
    assert report["decoder_traces"] == 3  # the voice's latents, the clip's duration function, its mel bucket's decode


def test_evaluate_errors(cached_run, tmp_path):
    from myxtts.cli import main

    result = CliRunner().invoke(main, ["evaluate", "--run", str(cached_run), "--data", str(tmp_path / "none")])
    assert result.exit_code == 2 and "Error:" in result.output and "not found" in result.output
    result = CliRunner().invoke(main, ["evaluate", "--run", str(tmp_path / "no-run")])
    assert result.exit_code == 2 and "Run directory not found" in result.output


FRAMES_PER_TOKEN = 8


def test_evaluate_reports_speech_cut_at_the_largest_bucket(prepared_cache, bundled_corpus, tmp_path):
    """A duration predictor that overruns data.max_mel_frames (as a briefly trained one can) is a finding of the
    report (cut_at_maximum, the table's 'cut' column), not an error that ends it; clips that fit are not cut."""
    from myxtts.cli import main
    from myxtts.model import build_model
    from myxtts.synthesis import save_run
    from myxtts.text import Vocabulary
    from test_train import trainer_config

    # the smallest parallel model: the cut is the decoders' shared length rule (a short Griffin-Lim: the MCD is only
    # checked finite)
    cfg = trainer_config(prepared_cache, audio={"griffin_lim_iters": 4})
    vocabulary = Vocabulary.load(prepared_cache.cache_dir / "vocab.json")
    model = build_model(cfg, len(vocabulary))
    # 8 frames per token: texts over 110 tokens overrun 880 (the first four clips: 25, 116, 117 and 89 tokens)
    projection = model.duration_predictor.output_proj
    projection.kernel.assign(tf.zeros_like(projection.kernel))
    projection.bias.assign([np.log(1.0 + FRAMES_PER_TOKEN)])
    save_run(tmp_path / "run", cfg, model, vocabulary)
    out = tmp_path / "report.json"
    result = CliRunner().invoke(main, ["evaluate", "--run", str(tmp_path / "run"), "--data", str(bundled_corpus),
                                       "--limit", "4", "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    maximum = prepared_cache.data.max_mel_frames
    items = report["items"]
    assert report["clips"] == 4 and len({item["tokens"] for item in items}) == 4  # unequal lengths
    for item in items:
        assert item["cut_at_maximum"] == (FRAMES_PER_TOKEN * item["tokens"] > maximum), item
        assert item["synthesized_frames"] == min(FRAMES_PER_TOKEN * item["tokens"], maximum), item
        assert math.isfinite(item["mcd_dtw_db"])
    cut = sum(item["cut_at_maximum"] for item in items)
    assert 0 < cut < len(items)  # both kinds in one report
    assert report["summary"]["cut_at_maximum"] == pytest.approx(cut / len(items))
    assert f"{cut / len(items):.0%}" in result.output


def test_plots_of_any_list_id_stay_in_the_plots_folder(cached_run, bundled_corpus, tmp_path):
    """A list corpus keeps the ids its lines write (their audio paths): ``../escape.wav``, an absolute path,
    ``a/../../b.wav``. `evaluate --plots` still writes every PNG inside the plots folder, named from the id
    (``myxtts.outputs.safe_file_name``), and nothing anywhere else."""
    import shutil

    from myxtts.cli import main
    from myxtts.outputs import safe_file_name

    rows = [line.split("|") for line in (bundled_corpus / "metadata.csv").read_text(encoding="utf-8").splitlines()]
    shortest = sorted(rows, key=lambda row: len(row[2]))[:3]  # the quickest clips to say
    corpus, plots = tmp_path / "work" / "corpus", tmp_path / "work" / "plots"
    corpus.mkdir(parents=True)
    ids = ["../escape.wav", str(tmp_path / "work" / "abs.wav"), "a/../../b.wav"]
    lines = []
    for identifier, (name, _, text) in zip(ids, shortest):
        shutil.copy(bundled_corpus / "wavs" / f"{name}.wav", (corpus / identifier).resolve())
        lines.append(f"{identifier}|{text}|reader")
    (corpus / "list.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    before = {path for path in tmp_path.rglob("*")}

    result = CliRunner().invoke(main, ["evaluate", "--run", str(cached_run), "--data", str(corpus / "list.txt"),
                                       "--plots", str(plots)])
    assert result.exit_code == 0, result.output
    written = {path for path in tmp_path.rglob("*")} - before
    assert written and all(path.is_relative_to(plots) for path in written), sorted(written)
    listed = {entry_id: safe_file_name(entry_id) for entry_id in ("../escape.wav", ids[1], "../b.wav")}  # normpath
    expected = {plots / f"{name}_{kind}.png" for name in listed.values()
                for kind in ("mel", "alignment", "teacher_forced_mel")}
    assert {path for path in written if path.is_file()} == expected
