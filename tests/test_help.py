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
        "proposals review",
        "proposals requeue",
        "proposals cancel",
        "runs list",
        "runs show",
        "tools stats",
        "threads list",
        "threads show",
        "threads delete",
        "demo",
        "metrics",
        "metrics serve",
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


def test_root_help_groups_commands_by_job() -> None:
    """`agora --help` lists every command under the job it does, in the operator's order."""
    import re

    from agora_cli.cli import COMMANDS

    result = run_cli("--help", env={"COLUMNS": "120"})
    assert result.exit_code == 0
    panels: dict[str, list[str]] = {}
    current = None
    for line in result.stdout.splitlines():
        if m := re.match(r"╭─ (.+?) ─", line):
            current = m.group(1)
            panels[current] = []
        elif current and (m := re.match(r"│ ([a-z][a-z-]*) ", line)):
            panels[current].append(m.group(1))
    jobs = [panel for panel in panels if panel != "Options"]
    assert jobs == ["Set up", "Watch", "Decide", "Money", "Maintenance"]
    assert panels["Decide"] == ["proposals"]
    assert panels["Set up"][0] == "demo"
    listed = [name for job in jobs for name in panels[job]]
    assert listed == [name for name, _, _ in COMMANDS]
