"""Regenerate the key tables of docs/configuration.md from src/myxtts/config.py (defaults + comments).

Usage: .venv/bin/python scripts/gen_config_docs.py > docs/configuration.md
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from myxtts import config

SOURCE = Path(config.__file__).read_text(encoding="utf-8")
INTRO = """# Configuration

One YAML file with five sections. Unknown keys are errors naming the key path and the closest valid key;
wrong types and ranges are errors naming the key. Relative paths resolve against the config file's folder.
Override any key from the command line with `--set section.key=value`.

Keys of the original codebase that would do nothing are rejected with the replacement:
{removed}

Keys the original codebase kept under `data` that belong to `audio` are moved (`{moved}`); giving both
with different values is an error.
"""


def comment_for(name: str) -> str:
    match = re.search(rf"^\s+{name}: .*?#\s*(.*)$", SOURCE, re.MULTILINE)
    return match.group(1).strip() if match else ""


def main() -> None:
    removed = "\n".join(f"- `{key}`: {why}." for key, why in config.REMOVED_KEYS.items())
    moved = ", ".join(f"{a} -> {b}" for a, b in config.MOVED_KEYS.items())
    print(INTRO.format(removed=removed, moved=moved))
    defaults = config.Config()
    for section in dataclasses.fields(config.Config):
        if section.metadata.get("internal"):
            continue
        print(f"## `{section.name}`\n\n| key | default | meaning |\n|---|---|---|")
        values = getattr(defaults, section.name)
        for field in dataclasses.fields(values):
            default = getattr(values, field.name)
            shown = "preset" if default is None else repr(default)
            print(f"| `{section.name}.{field.name}` | `{shown}` | {comment_for(field.name)} |")
        print()


if __name__ == "__main__":
    main()
