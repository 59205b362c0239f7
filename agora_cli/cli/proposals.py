"""`agora proposals`: Inspect and decide action proposals; the privileged worker side."""

from __future__ import annotations

import typer

app = typer.Typer(help="Inspect and decide action proposals; the privileged worker side.", no_args_is_help=True)
