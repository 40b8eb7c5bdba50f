"""Every config key does something: each one is read somewhere outside config.py, and documented."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from myxtts import config as config_module

SRC = Path(config_module.__file__).resolve().parent
DOCS = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def all_keys() -> list[tuple[str, str]]:
    keys = []
    for section in dataclasses.fields(config_module.Config):
        if section.metadata.get("internal"):
            continue
        for field in dataclasses.fields(section.type if isinstance(section.type, type)
                                        else getattr(config_module, section.type)):
            keys.append((section.name, field.name))
    return keys


def source_outside_config() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in SRC.rglob("*.py") if p.name != "config.py")


@pytest.mark.parametrize("section,key", all_keys())
def test_key_is_read_by_code(section: str, key: str) -> None:
    source = source_outside_config()
    # attribute access such as `cfg.data.batch_size`, `data.batch_size`, `d.batch_size`, or getattr(.., "key")
    pattern = rf"\.{key}\b|getattr\([^)]*['\"]{key}['\"]"
    assert re.search(pattern, source), f"config key {section}.{key} is accepted but nothing reads it"


@pytest.mark.parametrize("section,key", all_keys())
def test_key_is_documented(section: str, key: str) -> None:
    text = DOCS.read_text(encoding="utf-8")
    assert f"`{section}.{key}`" in text, f"config key {section}.{key} missing from docs/configuration.md"
