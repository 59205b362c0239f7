"""CONTRIBUTING.md's layout is checked against the tree: no module missing, none made up."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _layout() -> str:
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = text.split("## The layout in one screen", 1)[1]
    return section.split("```", 2)[1]


def _modules() -> set[str]:
    names = set()
    for path in (ROOT / "agora_cli").rglob("*.py"):
        rel = path.relative_to(ROOT / "agora_cli")
        if rel.parts[0] not in ("store", "cli") or len(rel.parts) < 2:
            continue
        names.add(path.name)
        if path.name == "__init__.py" and len(rel.parts) > 2:
            names.add(rel.parts[-2] + "/")
    return names


def test_every_module_of_the_library_and_the_cli_is_in_the_layout() -> None:
    named = set(re.findall(r"(?<![\w.])(_{0,2}[a-z][a-z0-9_]*\.py|_?[a-z][a-z0-9_]*/)", _layout()))
    missing = sorted(_modules() - named)
    assert missing == [], f"CONTRIBUTING.md's layout does not name {missing}"


def test_every_module_the_layout_names_exists() -> None:
    named = set(re.findall(r"(?<![\w./])(_?[a-z][a-z0-9_]*\.py)", _layout()))
    every = {p.name for top in ("agora_cli", "migrations") for p in (ROOT / top).rglob("*.py")}
    assert sorted(named - every) == []
