"""Every config key does something: each one is read by executable code outside myxtts.config, and documented.

"Read" means an attribute load in the syntax tree (``cfg.data.batch_size``, ``d.batch_size``) or a
``getattr(.., "key")`` call, never a mention in a comment, docstring or string. Keys with a
behavioural test of their effect are listed in BEHAVIOUR_TESTS, and those tests must exist.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
from pathlib import Path

import pytest

from myxtts import config as config_module

SRC = Path(config_module.__file__).resolve().parents[1]  # src/myxtts (config_module: myxtts/config/__init__.py)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def all_keys() -> list[tuple[str, str]]:
    keys = []
    for section in dataclasses.fields(config_module.Config):
        if section.metadata.get("internal"):
            continue
        for field in dataclasses.fields(section.type if isinstance(section.type, type)
                                        else getattr(config_module, section.type)):
            keys.append((section.name, field.name))
    return keys


TESTS = Path(__file__).resolve().parents[1]  # tests/, its files grouped in folders by area
# key -> (test file, test function) asserting the key's effect on real inputs
BEHAVIOUR_TESTS = {
    "data.language": ("test_language.py", "test_language_picks_the_cleaner_and_gets_an_id"),
    "data.corpus_format": ("test_corpus_layouts.py", "test_vctk_layout_as_published"),
    "data.shuffle_buffer_size": ("test_pipeline.py", "test_three_shuffled_epochs_only_produce_declared_shapes"),
}


@functools.lru_cache(maxsize=1)
def attributes_read_outside_config() -> frozenset[str]:
    """Names read as attributes (or through getattr with a literal) by code outside the config package."""
    names: set[str] = set()
    for path in SRC.rglob("*.py"):
        if path.parent.name == "config":  # myxtts/config/: where keys are defined and validated, not used
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                names.add(node.attr)
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                  and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)):
                names.add(str(node.args[1].value))
    return frozenset(names)


@pytest.mark.parametrize("section,key", all_keys())
def test_key_is_read_by_code(section: str, key: str) -> None:
    assert key in attributes_read_outside_config(), f"config key {section}.{key} is accepted but no code reads it"


@pytest.mark.parametrize("key", sorted(BEHAVIOUR_TESTS))
def test_behaviour_tests_exist(key: str) -> None:
    file, function = BEHAVIOUR_TESTS[key]
    section, name = key.split(".")
    assert (section, name) in all_keys()
    (path,) = TESTS.rglob(file)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    assert function in {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}


@pytest.mark.parametrize("section,key", all_keys())
def test_key_is_documented(section: str, key: str) -> None:
    text = DOCS.read_text(encoding="utf-8")
    assert f"`{section}.{key}`" in text, f"config key {section}.{key} missing from docs/configuration.md"
