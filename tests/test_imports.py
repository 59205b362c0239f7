"""Imports go one way and stay lazy: the library never loads Typer/Rich; `--help` loads no SQL."""

from __future__ import annotations

import subprocess
import sys


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys; print(' '.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


def test_store_imports_neither_typer_nor_rich() -> None:
    mods = _modules_after(
        "import agora_cli.store as s\n"
        "import pathlib, importlib\n"
        "root = pathlib.Path(s.__file__).parent\n"
        "for p in sorted(root.rglob('*.py')):\n"
        "    parts = p.relative_to(root.parent.parent).with_suffix('').parts\n"
        "    importlib.import_module('.'.join(x for x in parts if x != '__init__'))\n"
    )
    assert "sqlalchemy" in mods
    assert not {"typer", "rich", "click"} & mods


def test_help_imports_neither_sqlalchemy_nor_httpx() -> None:
    mods = _modules_after(
        "import sys\n"
        "from agora_cli.cli import main\n"
        "sys.argv = ['agora', '--help']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
    )
    assert "typer" in mods
    assert "sqlalchemy" not in mods and "httpx" not in mods and "alembic" not in mods


def test_error_classes_import_without_sqlalchemy() -> None:
    mods = _modules_after("from agora_cli.store import NotFound, AgoraError")
    assert "sqlalchemy" not in mods
