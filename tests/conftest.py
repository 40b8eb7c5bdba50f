"""Shared fixtures. Tests use the bundled real LJSpeech clips (data/ljspeech-bundled), never ../shared."""

from __future__ import annotations

import gc
import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import myxtts  # noqa: E402,F401  (first: records the environment TF reads at import, runtime.py)

# Each pytest worker traces hundreds of graphs: Python's full (generation-2) collections then walk a heap of millions
# of objects (docs/benchmarks.md, "Test time"). Objects alive now (the imports) are never garbage: keep them out of
# every collection, and collect the oldest generation a tenth as often.
gc.freeze()
gc.set_threshold(700, 10, 100)

REPO_ROOT = Path(__file__).resolve().parents[1]
BUNDLED_CORPUS = REPO_ROOT / "data" / "ljspeech-bundled"


@pytest.fixture(scope="session")
def bundled_corpus() -> Path:
    """The bundled corpus (read-only: copy it with `corpus_copy` before changing anything)."""
    assert (BUNDLED_CORPUS / "metadata.csv").is_file(), "bundled corpus missing from the repository"
    return BUNDLED_CORPUS


@pytest.fixture
def corpus_copy(tmp_path: Path, bundled_corpus: Path) -> Path:
    """A writable copy of the bundled corpus in tmp_path/corpus."""
    target = tmp_path / "corpus"
    shutil.copytree(bundled_corpus, target)
    return target


def bundled_wavs(count: int | None = None) -> list[Path]:
    wavs = sorted((BUNDLED_CORPUS / "wavs").glob("*.wav"))
    return wavs if count is None else wavs[:count]


@pytest.fixture
def make_config(tmp_path: Path):
    """Build a validated Config: corpus = bundled corpus, cache in tmp_path; sections override defaults.

    Example: make_config(data={"num_buckets": 4}, model={"preset": "tiny"})
    """
    from myxtts.config import config_from_dict

    def build(**sections):
        raw = {name: dict(values) for name, values in sections.items()}
        data = raw.setdefault("data", {})
        data.setdefault("corpus_path", str(BUNDLED_CORPUS))
        data.setdefault("cache_dir", str(tmp_path / "cache"))
        return config_from_dict(raw, base_dir=tmp_path)

    return build


@pytest.fixture(scope="session")
def prepared_cache(tmp_path_factory):
    """A Config (configs/mini.yaml settings) whose cache_dir holds the prepared bundled corpus.

    Built once per session with `myxtts.data.prepare.prepare`; treat it as read-only.
    """
    from myxtts.config import config_from_dict
    from myxtts.data.prepare import prepare

    root = tmp_path_factory.mktemp("prepared")
    cfg = config_from_dict({
        "data": {"corpus_path": str(BUNDLED_CORPUS), "cache_dir": str(root / "cache"), "max_text_length": 192,
                 "max_mel_frames": 880, "batch_frames": 2400, "batch_size": 8, "num_buckets": 4,
                 "validation_size": 2, "reference_frames": 96},
        "model": {"preset": "tiny", "decoder": "autoregressive", "reduction_factor": 2},
        # listening while training (pocketsphinx on free-running synthesis) only where a test asks for it
        "training": {"listen_sentences": 0},
    }, base_dir=root)
    prepare(cfg, progress=False)
    return cfg


@pytest.fixture(scope="session")
def serving_run(tmp_path_factory) -> Path:
    """test_export's pitch-conditioned parallel run (untrained, plausible durations), once per worker for the serving
    tests; read-only."""
    from test_export import PARALLEL_RUN_KEYS, untrained_run  # tests/synthesis: imported by then (collection)

    return untrained_run(tmp_path_factory.mktemp("serving"), PARALLEL_RUN_KEYS)


@pytest.fixture(scope="session")
def serving_synthesizer(serving_run):
    """One Synthesizer of ``serving_run`` (batch 4) per worker: each serving module builds its own engine and server on
    it, one module's after the last one's is closed, so its compiled calls are traced once, not once per module.
    A test that changes a weight puts it back."""
    from myxtts.synthesis import Synthesizer

    return Synthesizer.from_run(serving_run, batch_size=4)
