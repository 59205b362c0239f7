"""Every command and group has help, and every command's help has an example."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import run_cli
from typer.main import get_command

from agora_cli.cli import app


def _commands(group: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    found = []
    for name, command in sorted(group.commands.items()):
        found.append(((*path, name), command))
        if hasattr(command, "commands"):
            found.extend(_commands(command, (*path, name)))
    return found


ALL = _commands(get_command(app))


def test_the_tree_is_complete() -> None:
    names = {" ".join(path) for path, _ in ALL}
    expected = {
        "db provision",
        "db upgrade",
        "db status",
        "db check",
        "db sql",
        "db backfill",
        "db seal",
        "keys create",
        "keys list",
        "keys rotate",
        "prices seed",
        "prices set",
        "prices list",
        "prices resolve",
        "prices reprice",
        "spend",
        "quota",
        "frames purge",
        "frames close",
        "frames stats",
        "frames tail",
        "proposals list",
        "proposals show",
        "proposals decide",
        "proposals create",
        "proposals claim",
        "proposals claim-next",
        "proposals renew",
        "proposals settle",
        "proposals expire",
        "proposals inbox",
        "proposals requeue",
        "proposals cancel",
        "runs list",
        "runs show",
        "tools stats",
        "threads list",
        "threads show",
        "threads delete",
        "demo",
    }
    assert expected <= names


@pytest.mark.parametrize("path", [p for p, _ in ALL], ids=[" ".join(p) for p, _ in ALL])
def test_help_has_text_and_an_example(path: tuple[str, ...]) -> None:
    command = dict(ALL)[path]
    assert (command.help or "").strip(), f"agora {' '.join(path)} has no help"
    result = run_cli(*path, "--help")
    assert result.exit_code == 0
    if not hasattr(command, "commands"):
        assert "Example: agora " in result.stdout, f"agora {' '.join(path)} has no example"
