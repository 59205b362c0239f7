"""The SQL token sink: a run's stream frames as rows of ``agent_stream_frame`` (frames.md).

With several replicas and no Redis, a running turn streams its frames through the application's
own database, and any replica can serve and resume any run's stream.

Frames are JSON objects with a ``type``; the names follow the AI SDK's UI message stream:

====================================  ==================================  =====================
type                                  fields besides ``type``             coalesced
====================================  ==================================  =====================
``text-delta``                        ``delta``, ``id``?                  yes
``reasoning-delta``                   ``delta``, ``id``?                  yes
``tool-input-delta``                  ``tool_call_id``, ``delta``         yes, per tool call
``text-start`` / ``text-end``         ``id``?                             no
``reasoning-start`` / ``-end``        ``id``?                             no
``tool-input-start``                  ``tool_call_id``, ``tool_name``     no
``tool-input-available``              ``tool_call_id``, ``tool_name``,    no
                                      ``input``
``tool-result``                       ``tool_call_id``, ``output``        no
``data-<name>``                       ``data`` (a UI component)           no
``error``                             ``error_text``                      no
``start``, ``finish``,                as the runtime likes                no
``start-step``, ``finish-step``
====================================  ==================================  =====================

Any other ``type`` is stored as it is. The end of a run is not a frame: it is a row whose
``frame`` is NULL (``FrameWriter.end``).

Writer (``FrameWriter``): appends ``(run_id, seq, frame, created_at)`` with ``seq`` gapless from
1, each write its own short transaction, committed, so readers on other replicas see it (the
exception to "the caller owns the transaction"). Consecutive deltas of one kind — text; reasoning;
tool input of one tool call; all other fields equal — written within ``flush_ms`` (default 50)
become one row holding their concatenation; any other frame, ``flush()`` and ``end()`` first
write the gathered delta (in the same transaction), so order is kept. A timer writes a gathered
delta once it is ``flush_ms`` old, so at most ``flush_ms`` of text lives only in the process. A
writer for a run that already has rows continues after its highest ``seq``; the primary key makes
a duplicate ``seq`` impossible (a second live writer for the run gets ``Conflict``).

Reader (``read_frames``, ``follow``): ``follow`` reads the rows past its cursor every ``poll_ms``
(default 250) until the end marker. A reader that attaches late, or after the end, replays from
the first row. Each read also re-reads the last row it already has: when that row is gone or
differs, the run was purged, closed or its numbering started over; the reader then replays from
the run's new first row (a ``seq`` not above the previous one tells a consumer to reset), or ends
when the run has no rows left.

Purge (``purge_expired``): a run's rows lapse ``ttl_s`` (default 3600) after its *last* write.
Candidate runs come from the ``(created_at, run_id)`` index (rows older than the cutoff, walked
with a keyset cursor, so it always terminates, old-but-active runs included); each candidate's
newest row is read through the primary key; runs whose newest row is older than the cutoff are
deleted whole, ``batch`` runs per short transaction. The delete also requires
``created_at < cutoff``, so a row a writer appends during the purge is never deleted. Its cost
follows the rows that aged out, not the size of the table. ``ttl_s=0`` turns expiry off.
``FrameWriter(auto_purge=True)`` (the default) runs it after ``end()``, at most once a minute per
process; cron with ``agora frames purge`` covers the rest.

Costs a user should know: delivery is polled — a frame reaches a reader up to ``poll_ms`` (plus
``flush_ms`` for deltas) after it was produced. A streamed answer is about twenty single-row
inserts (commits) a second per run; each open reader a few small primary-key reads a second
(``1000 / poll_ms``). Fine for tens of concurrent chats on a database that is already there; for
hundreds, use a push transport.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any

from sqlalchemy import String, bindparam, case, column, delete, func, insert, literal, or_, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from agora_cli.store.clock import Clock, SystemClock
from agora_cli.store.engine import dialect_name, retry_transient
from agora_cli.store.errors import AgoraError, Conflict, InvalidInput
from agora_cli.store.schema import stream_frame
from agora_cli.store.sqlexpr import exact_eq
from agora_cli.store.values import check_identity, dump_json, load_json

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine
    from sqlalchemy.sql import Select

__all__ = [
    "COALESCED_FRAME_TYPES",
    "DEFAULT_FLUSH_MS",
    "DEFAULT_FRAME_TTL_S",
    "DEFAULT_POLL_MS",
    "DEFAULT_PURGE_BATCH",
    "FrameStats",
    "FrameWriter",
    "PurgeReport",
    "StreamFrame",
    "close",
    "find_last_frame",
    "follow",
    "frame_stats",
    "purge_expired",
    "read_frames",
]

log = logging.getLogger(__name__)

DEFAULT_FLUSH_MS = 50
DEFAULT_POLL_MS = 250
DEFAULT_FRAME_TTL_S = 3600
DEFAULT_PURGE_BATCH = 100
MAX_PURGE_BATCH = 10_000
AUTO_PURGE_EVERY_MS = 60_000
COALESCED_FRAME_TYPES = frozenset({"text-delta", "reasoning-delta", "tool-input-delta"})

# The purge reads the (created_at, run_id) index in pages of this many entries per run of batch.
_SCAN_ENTRIES_PER_RUN = 10
_READ_PAGE = 500

sf = stream_frame


@dataclass(frozen=True)
class StreamFrame:
    """One row of a run's stream: ``frame`` is the JSON text, ``None`` for the end marker."""

    run_id: str
    seq: int
    frame: str | None
    created_at: int

    @property
    def is_end(self) -> bool:
        return self.frame is None

    def payload(self) -> Any:
        """Return the frame as a JSON value (``None`` for the end marker; text that is not JSON
        as it is)."""
        if self.frame is None:
            return None
        return load_json(self.frame)


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


# --- reading -------------------------------------------------------------------------------


def _frame(row: Any) -> StreamFrame:
    return StreamFrame(str(row.run_id), int(row.seq), row.frame, int(row.created_at))


def _check_run_id(run_id: str) -> str:
    return check_identity("run id", run_id)


def read_frames(
    conn: Connection, run_id: str, *, after: int = 0, limit: int | None = None
) -> list[StreamFrame]:
    """Return a run's rows with ``seq > after``, in order (at most ``limit``)."""
    query = (
        select(sf.c.run_id, sf.c.seq, sf.c.frame, sf.c.created_at)
        .where(exact_eq(sf.c.run_id, _check_run_id(run_id)), sf.c.seq > after)
        .order_by(sf.c.seq)
    )
    if limit is not None:
        query = query.limit(limit)
    return [_frame(row) for row in conn.execute(query)]


def find_last_frame(conn: Connection, run_id: str) -> StreamFrame | None:
    """Return a run's newest row (highest ``seq``), or ``None`` when it has no rows."""
    row = conn.execute(
        select(sf.c.run_id, sf.c.seq, sf.c.frame, sf.c.created_at)
        .where(exact_eq(sf.c.run_id, _check_run_id(run_id)))
        .order_by(sf.c.seq.desc())
        .limit(1)
    ).first()
    return None if row is None else _frame(row)


def _same_row(a: StreamFrame, b: StreamFrame) -> bool:
    return a.seq == b.seq and a.created_at == b.created_at and a.frame == b.frame


def _next_rows(
    conn: Connection, run_id: str, *, last: StreamFrame | None, anchor: int, page: int
) -> tuple[list[StreamFrame], StreamFrame | None] | None:
    """The rows a follower has not seen, and its new last row; ``None`` if the run has none."""
    if last is not None:
        rows = read_frames(conn, run_id, after=last.seq - 1, limit=page + 1)
        if rows and _same_row(rows[0], last):
            return rows[1:], last
    elif anchor > 0:
        rows = read_frames(conn, run_id, after=anchor - 1, limit=page + 1)
        if rows and rows[0].seq == anchor:
            return rows[1:], rows[0]
    # A late reader, or the last row is gone (purged, closed, numbering started over): replay.
    rows = read_frames(conn, run_id, after=0, limit=page)
    if not rows:
        return None
    return rows, None


def follow(
    engine: Engine,
    run_id: str,
    *,
    after: int = 0,
    poll_ms: int = DEFAULT_POLL_MS,
    wait_ms: int = 0,
    page: int = _READ_PAGE,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[StreamFrame]:
    """Yield a run's rows in order as they are written, polling every ``poll_ms``.

    Starts after ``seq`` ``after`` (0: from the first row; an ``after`` whose row is gone means
    the numbering started over, so it replays from the first row). Ends after yielding the end
    marker, or when the run has no rows left (purged or closed); a run with no rows at all is
    waited for up to ``wait_ms`` first. When the run's numbering started over, it replays from
    the new first row: a ``seq`` not above the previous one tells the consumer to reset. Each
    poll is one short read on a pooled connection, released before the rows are yielded.
    """
    _check_run_id(run_id)
    if after < 0 or poll_ms < 1 or page < 1:
        raise InvalidInput("after must be >= 0, poll_ms and page >= 1")
    last: StreamFrame | None = None
    waited_ms = 0
    while True:
        with engine.connect().execution_options(sqlite_deferred=True) as conn:
            found = _next_rows(conn, run_id, last=last, anchor=after, page=page)
        if found is None:
            if last is None and waited_ms < wait_ms:
                sleep(poll_ms / 1000)
                waited_ms += poll_ms
                continue
            return
        rows, last = found
        for row in rows:
            yield row
            if row.is_end:
                return
        if rows:
            last = rows[-1]
        if len(rows) < page:
            sleep(poll_ms / 1000)


# --- writing -------------------------------------------------------------------------------


def _checked_frame(frame: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(frame, Mapping):
        raise InvalidInput(f"a frame must be a JSON object, not {type(frame).__name__}")
    body = dict(frame)
    kind = body.get("type")
    if not isinstance(kind, str) or not kind:
        raise InvalidInput("a frame needs a non-empty string 'type'")
    if kind in COALESCED_FRAME_TYPES and not isinstance(body.get("delta"), str):
        raise InvalidInput(f"a {kind} frame needs a string 'delta'")
    if kind == "tool-input-delta":
        call = body.get("tool_call_id")
        if not isinstance(call, str) or not call:
            raise InvalidInput("a tool-input-delta frame needs a non-empty 'tool_call_id'")
    return body


def _dumps(body: Mapping[str, Any]) -> str:
    return dump_json("frame", body)


class _PurgeGate:
    """At most one automatic purge per interval in this process."""

    def __init__(self, every_ms: int = AUTO_PURGE_EVERY_MS) -> None:
        self.every_ms = every_ms
        self._lock = threading.Lock()
        self._last: int | None = None

    def take(self, now_ms: int) -> bool:
        with self._lock:
            if self._last is not None and now_ms - self._last < self.every_ms:
                return False
            self._last = now_ms
            return True


_AUTO_PURGE = _PurgeGate()


class FrameWriter:
    """Append one run's frames: gapless ``seq``, coalesced deltas, the end marker.

    One producer per writer (the internal lock only guards against the flush timer). Each write
    is its own committed transaction on ``engine``. ``autoflush`` starts a timer that writes a
    gathered delta ``flush_ms`` after its first part (pass ``False`` with a ``ManualClock``; then
    only the next frame, ``flush()`` or ``end()`` writes it). An error in the timer's write is
    raised by the next call. Use as a context manager to flush on exit (it does not end the run).
    """

    def __init__(
        self,
        engine: Engine,
        run_id: str,
        *,
        flush_ms: int = DEFAULT_FLUSH_MS,
        clock: Clock | None = None,
        autoflush: bool = True,
        auto_purge: bool = True,
        ttl_s: int = DEFAULT_FRAME_TTL_S,
    ) -> None:
        if flush_ms < 0 or ttl_s < 0:
            raise InvalidInput("flush_ms and ttl_s must be >= 0")
        self.engine = engine
        self.run_id = _check_run_id(run_id)
        self.flush_ms = flush_ms
        self.clock: Clock = clock or SystemClock()
        self.autoflush = autoflush
        self.auto_purge = auto_purge
        self.ttl_s = ttl_s
        self._lock = threading.RLock()
        self._next_seq: int | None = None
        self._ended = False
        self._error: BaseException | None = None
        self._pending: dict[str, Any] | None = None
        self._pending_key: dict[str, Any] | None = None
        self._parts: list[str] = []
        self._pending_since = 0
        self._generation = 0
        self._timer: threading.Timer | None = None

    def __enter__(self) -> FrameWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._cancel_timer()
            if self._ended:
                return
            if exc[0] is None:
                self.flush()
                return
            try:  # keep what the model produced, without masking the error in flight
                self.flush()
            except (AgoraError, SQLAlchemyError) as flush_exc:
                log.warning("could not flush run %r on error: %s", self.run_id, flush_exc)

    @property
    def last_seq(self) -> int:
        """The highest ``seq`` this writer wrote or found (0 before its first write)."""
        return 0 if self._next_seq is None else self._next_seq - 1

    @property
    def ended(self) -> bool:
        return self._ended

    def append(self, frame: Mapping[str, Any]) -> None:
        """Append one frame; a delta may wait up to ``flush_ms`` to be joined by the next one."""
        body = _checked_frame(frame)
        with self._lock:
            self._raise_timer_error()
            if self._ended:
                raise Conflict(f"run {self.run_id!r} has ended; it takes no more frames")
            now = self.clock.now_ms()
            if body["type"] in COALESCED_FRAME_TYPES:
                key = {k: v for k, v in body.items() if k != "delta"}
                if (
                    self._pending is not None
                    and key == self._pending_key
                    and now - self._pending_since < self.flush_ms
                ):
                    self._parts.append(body["delta"])
                    return
                if self.flush_ms == 0:
                    self._write([*self._gathered(), _dumps(body)])
                    return
                self._write(self._gathered())
                self._gather(body, key, now)
                return
            self._write([*self._gathered(), _dumps(body)])

    def flush(self) -> None:
        """Write the gathered delta now, if any."""
        with self._lock:
            self._raise_timer_error()
            self._write(self._gathered())

    def end(self) -> int:
        """Write the gathered delta and the end marker; return the marker's ``seq``.

        Idempotent. Then, with ``auto_purge``, purges expired runs (at most once a minute per
        process; a failure there is logged, not raised: the run has ended).
        """
        with self._lock:
            self._raise_timer_error()
            if self._ended:
                return self.last_seq
            self._write([*self._gathered(), None])
            self._ended = True
        if self.auto_purge and self.ttl_s > 0 and _AUTO_PURGE.take(self.clock.now_ms()):
            try:
                purge_expired(self.engine, self.ttl_s, clock=self.clock)
            except (AgoraError, SQLAlchemyError) as exc:
                log.warning("automatic frame purge failed: %s", exc)
        return self.last_seq

    # internals (called with the lock held)

    def _gather(self, body: dict[str, Any], key: dict[str, Any], now: int) -> None:
        self._pending, self._pending_key = body, key
        self._parts = [body["delta"]]
        self._pending_since = now
        if self.autoflush:
            self._generation += 1
            self._timer = threading.Timer(
                self.flush_ms / 1000, self._on_timer, args=(self._generation,)
            )
            self._timer.start()

    def _gathered(self) -> list[str | None]:
        if self._pending is None:
            return []
        return [_dumps({**self._pending, "delta": "".join(self._parts)})]

    def _cancel_timer(self) -> None:
        self._generation += 1
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self, generation: int) -> None:
        with self._lock:
            if generation != self._generation or self._pending is None:
                return
            try:
                self._write(self._gathered())
            except BaseException as exc:
                self._error = exc

    def _raise_timer_error(self) -> None:
        if self._error is not None:
            exc, self._error = self._error, None
            raise exc

    def _write(self, frames: Sequence[str | None]) -> None:
        if not frames:
            return
        try:
            with self.engine.begin() as conn:
                if self._next_seq is None:
                    last = find_last_frame(conn, self.run_id)
                    self._next_seq = 1 if last is None else last.seq + 1
                now = self.clock.now_ms()
                conn.execute(
                    insert(sf),
                    [
                        {
                            "run_id": self.run_id,
                            "seq": self._next_seq + i,
                            "frame": text,
                            "created_at": now,
                        }
                        for i, text in enumerate(frames)
                    ],
                )
        except IntegrityError as exc:
            self._next_seq = None  # another writer got there: re-read the highest seq next time
            raise Conflict(
                f"another writer is appending to run {self.run_id!r} (duplicate seq); "
                "a run takes one writer at a time"
            ) from exc
        self._next_seq += len(frames)
        self._pending = self._pending_key = None
        self._parts = []
        self._cancel_timer()


# --- closing, purging, stats ---------------------------------------------------------------


def close(conn: Connection, run_id: str) -> int:
    """Delete one run's rows at once; return how many were deleted."""
    result = conn.execute(delete(sf).where(exact_eq(sf.c.run_id, _check_run_id(run_id))))
    return int(result.rowcount)


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


def _newest_query(dialect: str) -> Select[Any]:
    """Each listed run's newest row's ``created_at`` (bind ``ids``), through the primary key."""
    if dialect == "mysql":
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
    if dialect == "postgresql":
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
    dialect = dialect_name(conn)
    ids: Any = json.dumps(list(run_ids)) if dialect == "sqlite" else list(run_ids)
    return {
        str(row.run_id): int(row.last_at)
        for row in conn.execute(_newest_query(dialect), {"ids": ids})
        if row.last_at is not None
    }


def _purge_chunk(
    engine: Engine, run_ids: Sequence[str], cutoff: int, *, dry_run: bool
) -> tuple[list[str], list[str], int]:
    """Check and delete one chunk of candidates in one short transaction.

    Returns the expired runs, the still-active runs and the rows deleted (would be, dry run).
    """

    def run() -> tuple[list[str], list[str], int]:
        conn_cm = engine.connect()
        if dry_run:
            conn_cm = conn_cm.execution_options(sqlite_deferred=True)
        with conn_cm as conn, conn.begin():
            newest = _newest_created(conn, run_ids)
            expired = [r for r in run_ids if r in newest and newest[r] < cutoff]
            active = [r for r in run_ids if r in newest and newest[r] >= cutoff]
            if not expired:
                return expired, active, 0
            # created_at < cutoff: a row a writer appends meanwhile is never deleted.
            where = (sf.c.run_id.in_(expired), sf.c.created_at < cutoff)
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
) -> PurgeReport:
    """Delete the runs whose newest row is older than ``ttl_s``, ``batch`` runs per transaction.

    Commits per batch (each batch its own short transaction; it takes an engine, not a
    connection). Candidates come from the ``(created_at, run_id)`` index, read in pages of
    ``10 * batch`` entries with a keyset cursor, so it always terminates, old-but-active runs
    among them or not. ``on_batch(runs, rows)`` is called after each batch. With ``dry_run``
    nothing is deleted and the report counts what would be.
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
        expired, active, rows = _purge_chunk(engine, chunk, cutoff, dry_run=dry_run)
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
