"""`agora prices`: Price models from models.dev, set prices by hand, resolve and reprice."""

from __future__ import annotations

import typer

app = typer.Typer(help="Price models from models.dev, set prices by hand, resolve and reprice.", no_args_is_help=True)
