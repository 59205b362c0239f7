"""`agora db backfill`: the proposals' discovery index for rows older writers left without it."""

from __future__ import annotations

# internal on purpose: the operator's commands import the store's private modules (cli/__init__.py)
import time
from typing import Annotated

import typer

from agora_cli.cli.options import DbOpt, JsonOpt, open_db
from agora_cli.cli.output import finish, progress

__all__ = ["backfill"]


def backfill(
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=10000, help="Rows per batch (1-10000).")
    ] = 500,
    max_batches: Annotated[
        int | None,
        typer.Option("--max-batches", min=1, help="Stop after N batches.", show_default=False),
    ] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Fill the discovery index of proposals written by older writers, in bounded batches.

    Each batch is its own short transaction; an interrupted run is safe to repeat.

    Example: agora db backfill --limit 500 --max-batches 100   # e.g. nightly from cron
    """
    from agora_cli.store._proposals import backfill_discovery_index, count_legacy_proposals

    engine = open_db(db)
    with engine.connect() as conn:
        remaining = count_legacy_proposals(conn)
        conn.rollback()
    batches = backfilled = 0
    with progress("backfilling", remaining) as advance:
        while remaining and (max_batches is None or batches < max_batches):
            with engine.begin() as conn:
                # counted once at the end: a count per batch would make the run quadratic
                result = backfill_discovery_index(conn, limit=limit, count_remaining=False)
            batches += 1
            backfilled += result.backfilled
            advance(result.backfilled)
            if result.remaining == 0:
                break
            if result.backfilled == 0:
                # Every row this batch read was filled by a concurrent backfill first (its
                # version fence lost): others remain, so go on after a short pause.
                time.sleep(0.01)
    if batches:
        with engine.connect() as conn:
            remaining = count_legacy_proposals(conn)
            conn.rollback()
    finish(
        {"batches": batches, "backfilled": backfilled, "remaining": remaining},
        as_json=as_json,
        show=f"Backfilled {backfilled:,} proposal(s) in {batches} batch(es); {remaining:,} remain.",
    )
