"""Every `<placeholder>` a help text writes reaches the reader (issue 28, item 7).

The root app renders help as Markdown (``rich_markup_mode="markdown"``: wrapped docstring lines
join into paragraphs), and Markdown reads ``<provider>`` as an HTML tag and drops it:
``models.dev:<provider>`` came out as ``models.dev:``. A placeholder goes in backticks
(`` `models.dev:<provider>` ``), which Markdown shows as written.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from helpers import run_cli
from typer.main import get_command

from agora_cli.cli import app

PLACEHOLDER = re.compile(r"<[^<>\s]+>")


def _commands(group: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """The group itself, then every command and group under it."""
    found = [(path, group)]
    for name, command in sorted(group.commands.items()):
        if hasattr(command, "commands"):
            found.extend(_commands(command, (*path, name)))
        else:
            found.append(((*path, name), command))
    return found


def _placeholders(command: Any) -> list[str]:
    texts = [command.help or "", command.epilog or ""]
    texts += [getattr(p, "help", None) or "" for p in command.params]
    return [token for text in texts for token in PLACEHOLDER.findall(text)]


ALL = _commands(get_command(app))
WITH_PLACEHOLDERS = [(path, _placeholders(cmd)) for path, cmd in ALL if _placeholders(cmd)]


def test_the_walk_finds_the_placeholders_it_guards() -> None:
    found = {" ".join(path): tokens for path, tokens in WITH_PLACEHOLDERS}
    assert "<provider>" in found.get("prices seed", [])
    assert "<provider>" in found.get("prices list", [])
    assert {"<tag>", "<hmac>"} <= set(found.get("db redact", []))


@pytest.mark.parametrize(
    ("path", "tokens"),
    WITH_PLACEHOLDERS,
    ids=[" ".join(path) or "agora" for path, _ in WITH_PLACEHOLDERS],
)
def test_help_shows_every_placeholder_it_writes(path: tuple[str, ...], tokens: list[str]) -> None:
    result = run_cli(*path, "--help", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.stderr
    shown = re.sub(r"[\s│]+", " ", result.stdout)
    eaten = [token for token in tokens if token not in shown]
    assert eaten == [], f"agora {' '.join(path)} --help drops {eaten} (put them in backticks)"
