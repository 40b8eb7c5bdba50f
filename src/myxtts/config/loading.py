"""YAML in and out: ``load_config`` (overrides, legacy keys moved, unknown keys named with the closest valid one,
every value type-checked, then ``validate``), ``config_from_dict``, ``apply_overrides``, ``save_config``."""

from __future__ import annotations

import dataclasses
import difflib
import os
import types
import typing
from pathlib import Path
from typing import Any, Literal, Mapping

import yaml

from myxtts.config.sections import ConfigError, MOVED_KEYS, REMOVED_KEYS, Config, config_sections
from myxtts.config.validation import validate
from myxtts.durable import write_durably


def _closest(name: str, options: list[str]) -> str:
    match = difflib.get_close_matches(name, options, n=1, cutoff=0.5)
    return f" Did you mean '{match[0]}'?" if match else f" Valid keys: {', '.join(sorted(options))}."


def _check_value(path: str, value: Any, annotation: Any) -> Any:
    """Check (and lightly coerce: int -> float) one value against its annotation."""
    origin = typing.get_origin(annotation)
    if dataclasses.is_dataclass(annotation):  # a nested record (data.corpora items): its keys checked like a section's
        return _build_section(path, annotation, value)
    if origin is Literal:
        choices = typing.get_args(annotation)
        if value not in choices:
            raise ConfigError(f"Config key '{path}': {value!r} is not one of {list(choices)}.")
        return value
    if origin is tuple:  # tuple[str, ...]: a YAML list
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"Config key '{path}': expected a list, got {value!r}.")
        item = typing.get_args(annotation)[0]
        return tuple(_check_value(f"{path}[{index}]", element, item) for index, element in enumerate(value))
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if value is None:
            return None
        return _check_value(path, value, args[0])
    if annotation is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"Config key '{path}': expected true/false, got {value!r}.")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"Config key '{path}': expected an integer, got {value!r}.")
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"Config key '{path}': expected a number, got {value!r}.")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise ConfigError(f"Config key '{path}': expected a string, got {value!r}.")
        return value
    raise TypeError(f"unsupported annotation {annotation} for {path}")  # programming error


def _build_section(name: str, cls: type, raw: Any) -> Any:
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"Config section '{name}' must be a mapping, got {type(raw).__name__}.")
    hints = typing.get_type_hints(cls)
    valid = [f.name for f in dataclasses.fields(cls)]
    required = [f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [key for key in required if key not in raw]
    if missing:
        raise ConfigError(f"Config key '{name}.{missing[0]}' is required.")
    kwargs = {}
    for key, value in raw.items():
        path = f"{name}.{key}"
        if path in REMOVED_KEYS:
            raise ConfigError(f"Config key '{path}' is not supported: it would do nothing here. "
                             f"Instead: {REMOVED_KEYS[path]}.")
        if key not in valid:
            raise ConfigError(f"Unknown config key '{path}'.{_closest(str(key), valid)}")
        kwargs[key] = _check_value(path, value, hints[key])
    return cls(**kwargs)


def _move_legacy_keys(raw: dict[str, Any]) -> dict[str, Any]:
    raw = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in raw.items()}
    for old, new in MOVED_KEYS.items():
        old_section, key = old.split(".")
        new_section, new_key = new.split(".")
        section = raw.get(old_section)
        if not isinstance(section, dict) or key not in section:
            continue
        value = section.pop(key)
        target = raw.setdefault(new_section, {}) or {}
        raw[new_section] = target
        if new_key in target and target[new_key] != value:
            raise ConfigError(f"Config keys '{old}' ({value!r}) and '{new}' ({target[new_key]!r}) disagree; "
                             f"set only '{new}'.")
        target[new_key] = value
    return raw


def config_from_dict(raw: Mapping[str, Any] | None, base_dir: str | os.PathLike = ".") -> Config:
    raw = dict(raw or {})
    if not isinstance(raw, Mapping):
        raise ConfigError("A config must be a mapping of sections.")
    raw = _move_legacy_keys(raw)
    sections = {f.name: f for f in config_sections()}
    kwargs: dict[str, Any] = {}
    for name, value in raw.items():
        if name not in sections:
            raise ConfigError(f"Unknown config section '{name}'.{_closest(str(name), list(sections))}")
        cls = typing.get_type_hints(Config)[name]
        kwargs[name] = _build_section(name, cls, value)
    return validate(Config(**kwargs, base_dir=str(Path(base_dir).resolve())))


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``section.key=value`` overrides (value parsed as YAML) to a raw config dict."""
    raw = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in raw.items()}
    for item in overrides:
        if "=" not in item or "." not in item.split("=", 1)[0]:
            raise ConfigError(f"Override {item!r} must look like section.key=value.")
        path, text = item.split("=", 1)
        section, key = path.split(".", 1)
        raw.setdefault(section, {})
        if raw[section] is None:
            raw[section] = {}
        raw[section][key] = yaml.safe_load(text)
    return raw


def load_config(path: str | os.PathLike, overrides: list[str] | None = None) -> Config:
    """Load and validate a YAML config; relative paths inside resolve against its folder."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"Config file not found: {path}")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"Config file {path} is not valid YAML{where}: {err}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"Config file {path} must hold a mapping of sections, got {type(raw).__name__}.")
    raw = apply_overrides(raw, overrides or [])
    try:
        return config_from_dict(raw, base_dir=path.parent)
    except ValueError as err:
        raise ConfigError(f"{path}: {err}") from None


def save_config(cfg: Config, path: str | os.PathLike) -> None:
    """Write the resolved config (every key, defaults included) as YAML, whole or not at all (temporary name,
    fsync, rename): a run's config.yaml is rewritten on every start and resume, and a kill mid-write must leave the
    previous one, never half a file."""
    data = cfg.to_dict()
    if not cfg.data.corpora:  # with data.corpora the one-corpus keys stay at their defaults (validation requires it)
        data["data"]["corpus_path"] = str(cfg.corpus_path)
    data["data"]["cache_dir"] = str(cfg.cache_dir)
    for corpus in data["data"]["corpora"]:
        corpus["path"] = str(cfg.resolve(corpus["path"]))
    if cfg.init_from is not None:
        data["training"]["init_from"] = str(cfg.init_from)
    write_durably(Path(path), yaml.safe_dump(data, sort_keys=False))
