"""Options every command shares, written after its name: ``--db``, ``--json``, ``--csv``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from agora_cli.cli.errors import remember_json

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
JsonOpt = Annotated[
    bool,
    typer.Option(
        "--json",
        help="Print one JSON document on stdout (errors too).",
        callback=remember_json,
    ),
]
CsvOpt = Annotated[bool, typer.Option("--csv", help="Print CSV on stdout.")]


def open_db(db: str | None, *, create: bool = False, readonly: bool = False) -> Engine:
    """Open (and prove) the engine for ``--db`` / ``AGORA_DATABASE_URL`` / the SQLite default.

    Only the commands that create a database pass ``create=True`` (``db provision``, ``db
    upgrade``, ``demo``); anything else refuses a SQLite file that does not exist. Reports pass
    ``readonly=True``: on SQLite they then never take the write lock.
    """
    from agora_cli.store.engine import open_engine

    return open_engine(db, create=create, readonly=readonly)
