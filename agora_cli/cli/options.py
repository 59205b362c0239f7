"""Options every command shares, written after its name: ``--db``, ``--json``, ``--csv``."""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING, Annotated

import typer

from agora_cli.cli.errors import remember_json

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

__all__ = [
    "CsvOpt",
    "DbOpt",
    "FromOpt",
    "JsonOpt",
    "NoPagerOpt",
    "ToOpt",
    "days_window",
    "open_db",
]

DbOpt = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Database URL (else the environment, else the profile's db, else sqlite:///agora.db).",
        envvar="AGORA_DATABASE_URL",
        show_envvar=True,
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
NoPagerOpt = Annotated[
    bool,
    typer.Option(
        "--no-pager",
        help="Print straight to the terminal (else through AGORA_PAGER, PAGER or less).",
    ),
]
FromOpt = Annotated[
    str | None,
    typer.Option(
        "--from", metavar="YYYY-MM-DD", help="First UTC day, inclusive.", show_default=False
    ),
]
ToOpt = Annotated[
    str | None,
    typer.Option("--to", metavar="YYYY-MM-DD", help="Last UTC day, inclusive.", show_default=False),
]


def days_window(
    from_text: str | None, to_text: str | None, *, default_days: int | None = None
) -> tuple[int | None, int | None, date | None, date | None]:
    """``--from``/``--to`` as the first and last millisecond of those UTC days, and the days.

    With ``default_days``, a missing ``--to`` is today and a missing ``--from`` that many days
    back (today included); without, a missing bound stays open (``None``). ``--from`` after
    ``--to`` is exit 2.
    """
    from datetime import timedelta

    from agora_cli.store.clock import SystemClock, day_window, ms_to_date, parse_day
    from agora_cli.store.errors import InvalidInput

    start = parse_day(from_text, what="--from") if from_text is not None else None
    end = parse_day(to_text, what="--to") if to_text is not None else None
    if default_days is not None:
        if end is None:
            end = ms_to_date(SystemClock().now_ms())
        if start is None:
            back = timedelta(days=default_days - 1)
            start = end - back if end > date.min + back else date.min
    if start is not None and end is not None and start > end:
        raise InvalidInput(f"--from {start.isoformat()} is after --to {end.isoformat()}")
    return (
        None if start is None else day_window(start)[0],
        None if end is None else day_window(end)[1],
        start,
        end,
    )


def open_db(db: str | None, *, create: bool = False, readonly: bool = False) -> Engine:
    """Open (and prove) the engine for ``--db`` / ``AGORA_DATABASE_URL`` / the SQLite default.

    Only the commands that create a database pass ``create=True`` (``db provision``, ``db
    upgrade``, ``demo``); anything else refuses a SQLite file that does not exist. Reports pass
    ``readonly=True``: on SQLite they then never take the write lock.
    """
    from agora_cli.cli import startup_done
    from agora_cli.store.engine import open_engine

    engine = open_engine(db, create=create, readonly=readonly)
    startup_done()  # the heavy imports are done: the collector is back before any real work
    return engine
