"""`agora frames`: Read, tail and purge the SQL token sink's stream frames."""

from __future__ import annotations

import typer

app = typer.Typer(help="Read, tail and purge the SQL token sink's stream frames.", no_args_is_help=True)
