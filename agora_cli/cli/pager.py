"""Long output for people goes through a pager on a terminal: `threads show`, `runs show`.

The pager is ``AGORA_PAGER``, else ``PAGER``, else ``less`` (with ``LESS=FRX`` unless ``LESS`` is
set: it quits at once when the text fits one screen, keeps colours, and leaves the text on the
screen). It runs through the shell, as git runs its pager. There is no pager when stdout is not a
terminal, with ``--json``/``--csv``, with ``--no-pager``, or when ``AGORA_PAGER`` is empty or
``cat``. A pager that cannot be started, or that fails (exits non-zero: ``AGORA_PAGER=false``),
prints the text directly, with a note on stderr; one ended by a signal (Ctrl-C) does not.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Callable
from contextlib import redirect_stdout

__all__ = ["page", "pager_command"]

DEFAULT_PAGER = "less"


def pager_command() -> str | None:
    """The pager to run, or None for none (``AGORA_PAGER`` set empty, or ``cat``)."""
    command = os.environ.get("AGORA_PAGER")
    if command is None:
        command = os.environ.get("PAGER") or DEFAULT_PAGER
    command = command.strip()
    return None if command in ("", "cat") else command


class _Screen(io.StringIO):
    """Collects what a renderer prints as if to the terminal (width and colours kept)."""

    def isatty(self) -> bool:
        return True


def page(render: Callable[[], None], *, no_pager: bool) -> None:
    """Run ``render`` (which prints to stdout); on a terminal, show what it printed in the pager."""
    command = None if no_pager or not sys.stdout.isatty() else pager_command()
    if command is None:
        render()
        return
    screen = _Screen()
    with redirect_stdout(screen):
        render()
    text = screen.getvalue()
    env = dict(os.environ)
    env.setdefault("LESS", "FRX")
    try:
        sys.stdout.flush()
        done = subprocess.run(command, shell=True, input=text.encode(), env=env, check=False)
    except (OSError, KeyboardInterrupt):
        done = None
    if done is not None and done.returncode > 0:  # a pager that failed (`AGORA_PAGER=false`)
        from agora_cli.cli.output import say

        say(f"note: the pager {command!r} failed (exit {done.returncode}); printed without it")
    if done is None or done.returncode > 0:  # not started, or failed: never lose the text
        sys.stdout.write(text)
        sys.stdout.flush()
