"""`agora threads`: List, show and delete conversation threads."""

from __future__ import annotations

import typer

app = typer.Typer(help="List, show and delete conversation threads.", no_args_is_help=True)
