"""Options every command shares, written after its name: ``--db``, ``--json``, ``--csv``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

__all__ = ["CsvOpt", "DbOpt", "JsonOpt", "open_db"]

DbOpt = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Database URL (else $AGORA_DATABASE_URL, else sqlite:///agora.db).",
        show_default=False,
        metavar="URL",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
CsvOpt = Annotated[bool, typer.Option("--csv", help="Print CSV on stdout.")]


def open_db(db: str | None) -> Engine:
    """Open (and prove) the engine for ``--db`` / ``AGORA_DATABASE_URL`` / the SQLite default."""
    from agora_cli.store.engine import open_engine

    return open_engine(db)
