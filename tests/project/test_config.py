"""Config: defaults, YAML loading, unknown keys, types, ranges, removed and moved legacy keys."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from myxtts.config import Config, config_from_dict, load_config, save_config

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, data: dict | str) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.mark.parametrize("name", ["mini", "ljspeech", "fixed_padding", "vocoder", "vocoder-ljspeech-mini",
                                  "vocoder-finetune", "vocoder-ljspeech-mini-stage2"])
def test_shipped_configs_load(name: str) -> None:
    cfg = load_config(REPO / "configs" / f"{name}.yaml")
    assert isinstance(cfg, Config)
    assert cfg.corpus_path.is_absolute()


def test_mini_config_points_at_bundled_corpus() -> None:
    cfg = load_config(REPO / "configs" / "mini.yaml")
    assert (cfg.corpus_path / "metadata.csv").is_file()
    assert cfg.model.preset == "tiny"
    assert not cfg.data.pad_to_fixed_length


def test_fixed_padding_config_is_the_old_setup() -> None:
    cfg = load_config(REPO / "configs" / "fixed_padding.yaml")
    assert cfg.data.pad_to_fixed_length
    assert (cfg.data.max_text_length, cfg.data.max_mel_frames) == (200, 800)


def test_unknown_key_names_path_and_closest(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"Unknown config key 'data\.batch_sise'.*Did you mean 'batch_size'"):
        load_config(write(tmp_path, {"data": {"batch_sise": 4}}))


def test_unknown_section(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"Unknown config section 'trainig'.*'training'"):
        load_config(write(tmp_path, {"trainig": {}}))


@pytest.mark.parametrize("section,key,value,message", [
    ("data", "batch_size", "32", "expected an integer"),
    ("data", "batch_size", 2.5, "expected an integer"),
    ("data", "pad_to_fixed_length", "yes", "expected true/false"),
    ("training", "learning_rate", "fast", "expected a number"),
    ("training", "mixed_precision", "int8", "is not one of"),
    ("model", "preset", "huge", "is not one of"),
])
def test_wrong_type_names_key(tmp_path: Path, section: str, key: str, value, message: str) -> None:
    with pytest.raises(ValueError, match=rf"'{section}\.{key}'.*{message}"):
        load_config(write(tmp_path, {section: {key: value}}))


@pytest.mark.parametrize("section,key,value", [
    ("data", "batch_size", 0),
    ("data", "max_mel_frames", -5),
    ("audio", "hop_length", 0),
    ("training", "gradient_accumulation_steps", 0),
    ("model", "dropout", 1.5),
    ("model", "mel_sharpening", -0.5),
    ("model", "mel_sharpening", float("nan")),
    ("model", "pitch_variation", -1.0),
    ("model", "pitch_variation", 1.5),  # without pitch conditioning: it would do nothing
    ("model", "pitch_level", True),  # without pitch conditioning: there is no token pitch to put a level on
    ("data", "num_workers", 0),
    ("vocoder", "segment_samples", 1000),  # not whole hops
    ("vocoder", "discriminator_periods", [1, 2]),
    ("vocoder", "resolution_ffts", [300]),
    ("vocoder", "kernel_size", 4),
])
def test_out_of_range_names_key(tmp_path: Path, section: str, key: str, value) -> None:
    with pytest.raises(ValueError, match=rf"{section}\.{key}"):
        load_config(write(tmp_path, {section: {key: value}}))


@pytest.mark.parametrize("key", ["enhanced_gpu_prefetch", "optimize_cpu_gpu_overlap", "auto_tune_performance"])
def test_removed_keys_rejected_with_replacement(tmp_path: Path, key: str) -> None:
    with pytest.raises(ValueError, match=rf"'data\.{key}' is not supported.*Instead:"):
        load_config(write(tmp_path, {"data": {key: True}}))


def test_legacy_keys_of_original_system_are_honoured(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, {
        "data": {"pad_to_fixed_length": True, "max_text_length": 180, "max_mel_frames": 600, "n_mels": 64,
                 "batch_size": 6, "use_tf_native_loading": True, "prefetch_to_gpu": False, "num_workers": 2,
                 "prefetch_buffer_size": 3},
        "training": {"enable_graph_mode": True, "enable_xla_compilation": True, "enable_eager_debug": False,
                     "gradient_accumulation_steps": 4, "mixed_precision": "bfloat16"},
        "model": {"max_attention_sequence_length": 700},
    }))
    assert cfg.audio.n_mels == 64  # data.n_mels moved to audio.n_mels
    assert cfg.data.pad_to_fixed_length and cfg.data.use_tf_native_loading and not cfg.data.prefetch_to_gpu
    assert (cfg.data.num_workers, cfg.data.prefetch_buffer_size) == (2, 3)
    assert cfg.training.gradient_accumulation_steps == 4
    assert cfg.model.max_attention_sequence_length == 700


def test_moved_key_conflict(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"'data\.n_mels'.*'audio\.n_mels'.*disagree"):
        load_config(write(tmp_path, {"data": {"n_mels": 64}, "audio": {"n_mels": 80}}))


def test_cross_field_checks(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="bucket_multiple"):
        config_from_dict({"data": {"bucket_multiple": 6}, "model": {"reduction_factor": 4}})
    with pytest.raises(ValueError, match="max_attention_sequence_length"):
        config_from_dict({"data": {"max_text_length": 300}, "model": {"max_attention_sequence_length": 200}})
    with pytest.raises(ValueError, match="fmax"):
        config_from_dict({"audio": {"fmax": 20000.0}})


def test_invalid_yaml_reports_line(tmp_path: Path) -> None:
    path = write(tmp_path, "data:\n  batch_size: [1, 2\n")
    with pytest.raises(ValueError, match=r"not valid YAML at line \d+"):
        load_config(path)


def test_overrides_and_relative_paths(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "c.yaml"
    path.write_text("data:\n  corpus_path: ../corpus\n", encoding="utf-8")
    cfg = load_config(path, ["training.max_steps=7", "data.pad_to_fixed_length=true"])
    assert cfg.training.max_steps == 7 and cfg.data.pad_to_fixed_length
    assert cfg.corpus_path == (tmp_path / "corpus").resolve()
    with pytest.raises(ValueError, match="section.key=value"):
        load_config(path, ["max_steps=7"])


def test_feature_hash_tracks_feature_parameters_only() -> None:
    base = config_from_dict({})
    assert base.feature_hash() == config_from_dict({"training": {"max_steps": 5}}).feature_hash()
    assert base.feature_hash() != config_from_dict({"audio": {"hop_length": 200}}).feature_hash()
    assert base.feature_hash() != config_from_dict({"text": {"cleaner": "basic"}}).feature_hash()


def test_save_and_reload_roundtrip(tmp_path: Path) -> None:
    cfg = load_config(REPO / "configs" / "mini.yaml")
    out = tmp_path / "resolved.yaml"
    save_config(cfg, out)
    again = load_config(out)
    assert again.corpus_path == cfg.corpus_path and again.cache_dir == cfg.cache_dir
    expected, actual = cfg.to_dict(), again.to_dict()
    for section in (expected, actual):
        section["data"].pop("corpus_path"), section["data"].pop("cache_dir")
    assert actual == expected


def test_mel_discriminator_keys_are_checked() -> None:
    """Its channels without it do nothing (refused); float16 is refused; on, its keys reach the config."""
    with pytest.raises(ValueError, match="mel_discriminator_channels' \\(8\\) does nothing"):
        config_from_dict({"model": {"mel_discriminator_channels": 8}})
    with pytest.raises(ValueError, match="mel_discriminator_channels' must be >= 1"):
        config_from_dict({"model": {"mel_adversarial_weight": 1.0, "mel_discriminator_channels": 0}})
    with pytest.raises(ValueError, match="mel_feature_matching_weight' must be >= 0"):
        config_from_dict({"model": {"mel_feature_matching_weight": -1.0}})
    with pytest.raises(ValueError, match="float16"):
        config_from_dict({"model": {"mel_adversarial_weight": 1.0}, "training": {"mixed_precision": "float16"}})
    cfg = config_from_dict({"model": {"mel_feature_matching_weight": 1.0, "mel_discriminator_channels": 8}})
    assert cfg.model.mel_discriminator_channels == 8 and cfg.model.mel_adversarial_weight == 0.0
