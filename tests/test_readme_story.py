"""The README's operator story is what agora prints, at a fixed date (issue 28).

The section "The operator's story" is a console session on the embedded SQLite default: `agora
demo`, then `agora proposals review`, then the reports an operator reads next. This test runs it
in a fresh folder with the store's clock fixed at ``STORY_NOW`` (every "now" agora reads comes
from ``SystemClock``) and compares each command's output with the README, line for line: stdout,
then stderr (the notes a terminal shows under a table), trailing spaces dropped. A line that is
only ``…`` stands for any lines (a long output abridged).

`proposals review` runs on a scripted terminal read off the transcript itself: each key's word
after ``›`` (``approve``, ``reject``, ``skip``, ``quit``) is its key, each ``reason (…): TEXT``
line the reason typed.

When the story changes on purpose: ``python tests/test_readme_story.py --write`` runs it and
writes the outputs into the README (keeping each ``…`` abridgement's first and last lines).
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from helpers import ROOT, Script, run_cli

README = ROOT / "README.md"
HEADING = "## The operator's story"
# 09:00 UTC on the 1st of a month: the story shows the default spend window's choice too.
STORY_NOW = "2026-12-01T09:00:00.000Z"
_KEYS = {"approve": "a", "reject": "r", "skip": "s", "quit": "q", "open thread": "o"}
_REASON = "reason (recorded as the note; empty: back): "


def story_section(text: str) -> tuple[int, int]:
    """The story section's span in the README text (its heading to the next ``## ``)."""
    start = text.index(f"\n{HEADING}\n") + 1
    end = text.index("\n## ", start + len(HEADING))
    return start, end + 1


def without_story(text: str) -> str:
    """The README without the story (which other README tests must not run: it decides)."""
    start, end = story_section(text)
    return text[:start] + text[end:]


def _steps(section: str) -> list[tuple[str, list[str]]]:
    """(command line after ``$ ``, the output lines shown under it), in order."""
    steps: list[tuple[str, list[str]]] = []
    for block in re.findall(r"```console\n(.*?)```", section, flags=re.S):
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            else:
                steps[-1][1].append(line)
    return steps


def _script(transcript: list[str]) -> Script:
    steps: list[Any] = []
    for line in transcript:
        if line.startswith(_REASON):
            steps.append(line[len(_REASON) :])
        elif (m := re.search(r" › (\w[\w ]*)$", line)) and m.group(1) in _KEYS:
            steps.append(_KEYS[m.group(1)])
    return Script(*steps, echo=True)


@contextmanager
def _at_story_time(folder: Path) -> Iterator[dict[str, Any]]:
    """A fresh folder as the working directory, the clock at STORY_NOW, no outside settings."""
    import os

    from agora_cli.cli import review
    from agora_cli.store import _clock

    now = _clock.parse_instant(STORY_NOW, what="STORY_NOW")
    saved_cwd = Path.cwd()
    saved = (_clock.SystemClock.now_ms, review.on_a_terminal, review.open_terminal)
    os.chdir(folder)
    _clock.SystemClock.now_ms = lambda self: now  # type: ignore[method-assign]
    try:
        unset: dict[str, str | None] = dict.fromkeys(
            ("AGORA_PROFILE", "AGORA_DATABASE_URL", "AGORA_READ_DATABASE_URL", "AGORA_TENANT",
             "AGORA_TZ", "AGORA_KEK", "AGORA_KEK_FILE", "COLUMNS", "NO_COLOR", "FORCE_COLOR")
        )  # fmt: skip
        yield {"AGORA_CONFIG": str(folder / "no-config.toml"), **unset}
    finally:
        _clock.SystemClock.now_ms, review.on_a_terminal, review.open_terminal = saved  # type: ignore[method-assign]
        os.chdir(saved_cwd)


def run_story(folder: Path, steps: list[tuple[str, list[str]]]) -> list[list[str]]:
    """Each step's output (stdout lines, then stderr lines), run at STORY_NOW in ``folder``."""
    from agora_cli.cli import review

    outputs: list[list[str]] = []
    with _at_story_time(folder) as env:
        for command, shown in steps:
            argv = shlex.split(command.partition("  #")[0])
            assert argv[0] == "agora", command
            if argv[1:3] == ["proposals", "review"]:
                script = _script(shown)
                review.on_a_terminal = lambda: True
                review.open_terminal = lambda script=script: script
            result = run_cli(*argv[1:], env=env)
            expected = int(m.group(1)) if (m := re.search(r"# exit (\d+)", command)) else 0
            assert result.exit_code == expected, f"{command}: {result.stderr}"
            lines = [*result.stdout.splitlines(), *result.stderr.splitlines()]
            outputs.append([line.rstrip() for line in lines])
    return outputs


def _matches(shown: list[str], actual: list[str]) -> bool:
    """``shown`` equals ``actual``, a line ``…`` standing for any lines."""
    if not shown:
        return not actual
    if shown[0] == "…":
        return any(_matches(shown[1:], actual[i:]) for i in range(len(actual) + 1))
    return bool(actual) and shown[0] == actual[0] and _matches(shown[1:], actual[1:])


def test_the_story_is_what_agora_prints(tmp_path: Path) -> None:
    text = README.read_text()
    start, end = story_section(text)
    steps = _steps(text[start:end])
    commands = [command.split()[:3] for command, _ in steps]
    assert commands[0] == ["agora", "demo"]
    assert commands[1] == ["agora", "proposals", "review"]
    for (command, shown), actual in zip(steps, run_story(tmp_path, steps), strict=True):
        shown = [line.rstrip() for line in shown]
        assert _matches(shown, actual), f"$ {command}\n" + "\n".join(actual)


def _write() -> None:
    """Run the story and write what it printed into the README (abridgements kept)."""
    import tempfile

    text = README.read_text()
    start, end = story_section(text)
    section = text[start:end]
    steps = _steps(section)
    with tempfile.TemporaryDirectory() as folder:
        outputs = run_story(Path(folder), steps)
    for (command, shown), actual in zip(steps, outputs, strict=True):
        new = actual
        if "…" in shown:  # keep the abridgement: as many lines before and after it as shown
            cut = shown.index("…")
            after = len(shown) - cut - 1
            new = [*actual[:cut], "…", *(actual[len(actual) - after :] if after else [])]
        old = "\n".join([f"$ {command}", *shown])
        assert section.count(old + "\n") == 1, command
        section = section.replace(old + "\n", "\n".join([f"$ {command}", *new]) + "\n")
    README.write_text(text[:start] + section + text[end:])


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    if sys.argv[1:] == ["--write"]:
        _write()
    else:
        sys.exit("usage: python tests/test_readme_story.py --write")
