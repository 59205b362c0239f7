"""Ending runs' frames: closing one run, the bounded TTL purge, and the buffer's statistics."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    String,
    and_,
    bindparam,
    case,
    column,
    delete,
    func,
    literal,
    or_,
    select,
)
from sqlalchemy.dialects.postgresql import ARRAY

from agora_cli.store._clock import Clock, SystemClock
from agora_cli.store._dialects import Dialect, dialect_of
from agora_cli.store._engine import retry_transient
from agora_cli.store._errors import InvalidInput
from agora_cli.store._frames.reader import check_run_id
from agora_cli.store._schema import run, stream_frame
from agora_cli.store._sqlexpr import exact_eq
from agora_cli.store._tenant_guard import run_tenant, runs_with_threads

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine
    from sqlalchemy.sql import ColumnElement, Select

__all__ = [
    "DEFAULT_FRAME_TTL_S",
    "DEFAULT_PURGE_BATCH",
    "FrameStats",
    "PurgeReport",
    "close",
    "delete_frames_of_runs",
    "frame_stats",
    "purge_expired",
]

sf = stream_frame

DEFAULT_FRAME_TTL_S = 3600


DEFAULT_PURGE_BATCH = 100


MAX_PURGE_BATCH = 10_000


# The purge reads the (created_at, run_id) index in pages of this many entries per run of batch.
_SCAN_ENTRIES_PER_RUN = 10


@dataclass(frozen=True)
class PurgeReport:
    """What ``purge_expired`` did (or, with ``dry_run``, would do)."""

    cutoff: int | None
    runs_purged: int
    rows_deleted: int
    runs_still_active: int
    batches: int
    dry_run: bool


@dataclass(frozen=True)
class FrameStats:
    """The sink at a glance: runs, rows, ended runs, the oldest row, runs past the TTL."""

    runs: int
    rows: int
    ended_runs: int
    oldest: int | None
    expired_runs: int
    cutoff: int | None


def close(conn: Connection, run_id: str) -> int:
    """Delete one run's rows at once; return how many were deleted."""
    result = conn.execute(delete(sf).where(exact_eq(sf.c.run_id, check_run_id(run_id))))
    return int(result.rowcount)


# Run ids per DELETE in ``delete_frames_of_runs``: one statement per this many, each an OR of
# exact equalities (MySQL's PAD SPACE would make an IN match 'r1 ' for 'r1').
_RUNS_PER_DELETE = 500


def delete_frames_of_runs(conn: Connection, run_ids: Sequence[str]) -> int:
    """Delete every frame of ``run_ids`` (a deleted thread's runs); return how many were deleted.

    Frames have no foreign key to their run (a run's frames may be written before its row), so
    deleting a thread, which cascades to its runs, must delete their frames itself, in the same
    transaction and before the runs go: a frame left behind outlives its tenant's thread
    (issue 24, finding 5). One statement per 500 runs; the caller owns the transaction. Under
    row-level security the session deletes only the frames it sees: its tenant's.
    """
    ids = list(dict.fromkeys(check_run_id(r) for r in run_ids))
    deleted = 0
    for start in range(0, len(ids), _RUNS_PER_DELETE):
        chunk = ids[start : start + _RUNS_PER_DELETE]
        result = conn.execute(delete(sf).where(or_(*(exact_eq(sf.c.run_id, r) for r in chunk))))
        deleted += int(result.rowcount)
    return deleted


def _aged_page(
    conn: Connection, *, cutoff: int, after: tuple[int, str] | None, limit: int
) -> tuple[list[str], tuple[int, str] | None, int]:
    """Read the next ``limit`` entries of the ``(created_at, run_id)`` index older than ``cutoff``
    and past the keyset cursor ``after``, grouped by run in the database.

    Returns the page's runs (in index order), the cursor after the page, and its entry count.
    """
    entries = select(sf.c.created_at, sf.c.run_id).where(sf.c.created_at < cutoff)
    if after is not None:
        at, run_id = after
        entries = entries.where(
            sf.c.created_at >= at, or_(sf.c.created_at > at, sf.c.run_id > run_id)
        )
    page = entries.order_by(sf.c.created_at, sf.c.run_id).limit(limit).subquery("page")
    query = (
        select(
            page.c.run_id,
            func.min(page.c.created_at).label("first_at"),
            func.max(page.c.created_at).label("last_at"),
            func.count().label("n"),
        )
        .group_by(page.c.run_id)
        .order_by(func.min(page.c.created_at), page.c.run_id)
    )
    rows = conn.execute(query).all()
    # The page's last entry is the greatest (created_at, run_id) of all its runs' last entries.
    cursor = max(((int(r.last_at), str(r.run_id)) for r in rows), default=None)
    return [str(r.run_id) for r in rows], cursor, sum(int(r.n) for r in rows)


def _candidate_runs(engine: Engine, cutoff: int, page: int) -> Iterator[str]:
    """Yield the runs with a row older than ``cutoff``, a page of the index per short read.

    The keyset cursor only moves forward over a range bounded by the cutoff: this ends.
    """
    cursor: tuple[int, str] | None = None
    while True:
        with engine.connect().execution_options(sqlite_deferred=True) as conn:
            runs, cursor, entries = _aged_page(conn, cutoff=cutoff, after=cursor, limit=page)
        yield from runs
        if entries < page:
            return


def _newest_query(d: Dialect) -> Select[Any]:
    """Each listed run's newest row's ``created_at`` (bind ``ids``), through the primary key."""
    if d.loose_index_scan:
        # MySQL/MariaDB read MAX(seq) per run off the primary key by a loose index scan
        # ("Using index for group-by"), then one eq_ref probe per run.
        newest = (
            select(sf.c.run_id, func.max(sf.c.seq).label("seq"))
            .where(sf.c.run_id.in_(bindparam("ids", expanding=True)))
            .group_by(sf.c.run_id)
            .subquery("newest")
        )
        return select(sf.c.run_id, sf.c.created_at.label("last_at")).join(
            newest, (sf.c.run_id == newest.c.run_id) & (sf.c.seq == newest.c.seq)
        )
    # PostgreSQL (no loose index scan) and SQLite: one backward primary-key probe per run,
    # driven by the list as a table (an array / a JSON array), so the statement caches.
    if d.binds_arrays:
        ids = (
            func.unnest(bindparam("ids", type_=ARRAY(String())))
            .table_valued(column("run_id", String))
            .render_derived(name="ids")
        )
        run_id = ids.c.run_id
    else:
        ids = func.json_each(bindparam("ids", type_=String())).table_valued("value").alias("ids")
        run_id = ids.c.value
    last_at = (
        select(sf.c.created_at)
        .where(sf.c.run_id == run_id)
        .order_by(sf.c.seq.desc())
        .limit(1)
        .scalar_subquery()
    )
    return select(run_id.label("run_id"), last_at.label("last_at"))


def _newest_created(conn: Connection, run_ids: Sequence[str]) -> dict[str, int]:
    """Each run's newest row's ``created_at`` (runs without rows left out); one query."""
    d = dialect_of(conn)
    # A list binds as a list (expanded) or an array, else as the JSON array json_each reads.
    as_list = d.loose_index_scan or d.binds_arrays
    ids: Any = list(run_ids) if as_list else json.dumps(list(run_ids))
    return {
        str(row.run_id): int(row.last_at)
        for row in conn.execute(_newest_query(d), {"ids": ids})
        if row.last_at is not None
    }


def _tenant_frames(tenant: str) -> ColumnElement[bool]:
    """The frames of ``tenant``: written under it, or (older frames, the runtime's) with no
    tenant of their own on a run of its (the run's tenant_ref, else its thread's)."""
    owned = select(run.c.id).select_from(runs_with_threads()).where(exact_eq(run_tenant(), tenant))
    return or_(
        exact_eq(sf.c.tenant_ref, tenant), and_(sf.c.tenant_ref.is_(None), sf.c.run_id.in_(owned))
    )


def _purge_chunk(
    engine: Engine,
    run_ids: Sequence[str],
    cutoff: int,
    *,
    dry_run: bool,
    tenant: str | None = None,
) -> tuple[list[str], list[str], int]:
    """Check and delete one chunk of candidates in one short transaction.

    Returns the expired runs, the still-active runs and the rows deleted (would be, dry run).
    With ``tenant``, only that tenant's frames count and go.
    """

    def run() -> tuple[list[str], list[str], int]:
        conn_cm = engine.connect()
        if dry_run:
            conn_cm = conn_cm.execution_options(sqlite_deferred=True)
        with conn_cm as conn, conn.begin():
            newest = _newest_created(conn, run_ids)
            expired = [r for r in run_ids if r in newest and newest[r] < cutoff]
            active = [r for r in run_ids if r in newest and newest[r] >= cutoff]
            scope: list[ColumnElement[bool]] = []
            if tenant is not None:
                scope = [_tenant_frames(tenant)]
                mine = select(sf.c.run_id).where(sf.c.run_id.in_(run_ids), *scope).distinct()
                own = {str(r) for r in conn.execute(mine).scalars()}
                expired = [r for r in expired if r in own]
                active = [r for r in active if r in own]
            if not expired:
                return expired, active, 0
            # created_at < cutoff: a row a writer appends meanwhile is never deleted.
            where = (sf.c.run_id.in_(expired), sf.c.created_at < cutoff, *scope)
            if dry_run:
                rows = int(conn.execute(select(func.count()).where(*where)).scalar_one())
            else:
                rows = int(conn.execute(delete(sf).where(*where)).rowcount)
            return expired, active, rows

    return retry_transient(run)


def _chunks(items: Iterator[str], size: int) -> Iterator[list[str]]:
    while chunk := list(dict.fromkeys(islice(items, size))):
        yield chunk


def purge_expired(
    engine: Engine,
    ttl_s: int = DEFAULT_FRAME_TTL_S,
    batch: int = DEFAULT_PURGE_BATCH,
    *,
    dry_run: bool = False,
    clock: Clock | None = None,
    on_batch: Callable[[int, int], None] | None = None,
    tenant: str | None = None,
) -> PurgeReport:
    """Delete the runs whose newest row is older than ``ttl_s``, ``batch`` runs per transaction.

    Commits per batch (each batch its own short transaction; it takes an engine, not a
    connection). Candidates come from the ``(created_at, run_id)`` index, read in pages of
    ``10 * batch`` entries with a keyset cursor, so it always terminates, old-but-active runs
    among them or not. ``on_batch(runs, rows)`` is called after each batch. With ``dry_run``
    nothing is deleted and the report counts what would be. With ``tenant``, only that
    tenant's frames are purged (a frame's own ``tenant_ref``, else its run's), on every dialect;
    under PostgreSQL row-level security the session sees no other tenant's anyway.
    """
    if ttl_s < 0:
        raise InvalidInput(f"ttl must be >= 0 seconds (0 turns expiry off), not {ttl_s}")
    if not 1 <= batch <= MAX_PURGE_BATCH:
        raise InvalidInput(f"batch must be between 1 and {MAX_PURGE_BATCH}, not {batch}")
    if ttl_s == 0:
        return PurgeReport(None, 0, 0, 0, 0, dry_run)
    cutoff = (clock or SystemClock()).now_ms() - ttl_s * 1000
    seen: set[str] = set()  # runs found active (and, dry run, expired): their rows stay
    candidates = (
        r for r in _candidate_runs(engine, cutoff, batch * _SCAN_ENTRIES_PER_RUN) if r not in seen
    )
    active_runs = runs_purged = rows_deleted = batches = 0
    for chunk in _chunks(candidates, batch):
        expired, active, rows = _purge_chunk(engine, chunk, cutoff, dry_run=dry_run, tenant=tenant)
        seen.update(active)
        if dry_run:
            seen.update(expired)
        active_runs += len(active)
        runs_purged += len(expired)
        rows_deleted += rows
        batches += 1
        if on_batch is not None:
            on_batch(len(expired), rows)
    return PurgeReport(cutoff, runs_purged, rows_deleted, active_runs, batches, dry_run)


def frame_stats(
    conn: Connection, *, ttl_s: int = DEFAULT_FRAME_TTL_S, clock: Clock | None = None
) -> FrameStats:
    """Return runs, rows, ended runs, the oldest row and the runs past ``ttl_s`` (one query)."""
    if ttl_s < 0:
        raise InvalidInput(f"ttl must be >= 0 seconds (0 turns expiry off), not {ttl_s}")
    cutoff = None if ttl_s == 0 else (clock or SystemClock()).now_ms() - ttl_s * 1000
    per_run = (
        select(
            func.count().label("n"),
            func.max(case((sf.c.frame.is_(None), 1), else_=0)).label("ended"),
            func.min(sf.c.created_at).label("first_at"),
            func.max(sf.c.created_at).label("last_at"),
        )
        .group_by(sf.c.run_id)
        .subquery("per_run")
    )
    expired = (
        func.sum(case((per_run.c.last_at < cutoff, 1), else_=0))
        if cutoff is not None
        else literal(0)
    )
    row = conn.execute(
        select(
            func.count().label("runs"),
            func.sum(per_run.c.n).label("rows"),
            func.sum(per_run.c.ended).label("ended"),
            func.min(per_run.c.first_at).label("oldest"),
            expired.label("expired"),
        )
    ).one()
    return FrameStats(
        runs=int(row.runs),
        rows=int(row.rows or 0),
        ended_runs=int(row.ended or 0),
        oldest=None if row.oldest is None else int(row.oldest),
        expired_runs=int(row.expired or 0),
        cutoff=cutoff,
    )
