"""Reading a run's frames: in order, and following them as they are written (polling)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from agora_cli.store._errors import InvalidInput
from agora_cli.store._schema import run, stream_frame, thread
from agora_cli.store._sealing import frame_row_id, is_sealed, open_cells
from agora_cli.store._sqlexpr import exact_eq
from agora_cli.store._values import check_identity, load_json

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine

__all__ = [
    "DEFAULT_POLL_MS",
    "StreamFrame",
    "find_last_frame",
    "follow",
    "read_frames",
    "run_tenant",
]

sf = stream_frame

DEFAULT_POLL_MS = 250


_READ_PAGE = 500


@dataclass(frozen=True)
class StreamFrame:
    """One row of a run's stream: ``frame`` is the JSON text, ``None`` for the end marker."""

    run_id: str
    seq: int
    frame: str | None
    created_at: int
    # how the payload reads (``sealing.Opened`` states): "plain", "opened", "locked" (no KEK:
    # ``[sealed]`` in its place), "broken" or "shredded"
    seal_state: str = "plain"

    @property
    def is_end(self) -> bool:
        return self.frame is None

    def payload(self) -> Any:
        """Return the frame as a JSON value (``None`` for the end marker; text that is not JSON
        as it is)."""
        if self.frame is None:
            return None
        return load_json(self.frame)


def _frame(row: Any) -> StreamFrame:
    return StreamFrame(str(row.run_id), int(row.seq), row.frame, int(row.created_at))


def check_run_id(run_id: str) -> str:
    return check_identity("run id", run_id)


def run_tenant(conn: Connection, run_id: str) -> str | None:
    """The tenant a run's frames are sealed for: its thread's (``None`` for a run that is not
    there: frames have no foreign key)."""
    q = select(thread.c.tenant_ref).join(run, run.c.thread_id == thread.c.id)
    return conn.execute(q.where(run.c.id == run_id)).scalar()


def _opened(conn: Connection, run_id: str, frames: list[StreamFrame]) -> list[StreamFrame]:
    """The frames with sealed payloads opened for the run's tenant (a marker in place of one
    that does not open, or without the KEK); one read of the run's tenant, only if needed."""
    if not any(is_sealed(f.frame) for f in frames):
        return frames
    tenant = run_tenant(conn, run_id)
    cells = [
        (stream_frame.name, "frame", frame_row_id(f.run_id, f.seq), tenant, f.frame) for f in frames
    ]
    return [
        replace(f, frame=o.text, seal_state=o.state)
        for f, o in zip(frames, open_cells(conn, cells), strict=True)
    ]


def read_frames(
    conn: Connection, run_id: str, *, after: int = 0, limit: int | None = None
) -> list[StreamFrame]:
    """Return a run's rows with ``seq > after``, in order (at most ``limit``); sealed payloads
    opened (a marker in place without the KEK)."""
    query = (
        select(sf.c.run_id, sf.c.seq, sf.c.frame, sf.c.created_at)
        .where(exact_eq(sf.c.run_id, check_run_id(run_id)), sf.c.seq > after)
        .order_by(sf.c.seq)
    )
    if limit is not None:
        query = query.limit(limit)
    return _opened(conn, run_id, [_frame(row) for row in conn.execute(query)])


def find_last_frame(conn: Connection, run_id: str, *, raw: bool = False) -> StreamFrame | None:
    """Return a run's newest row (highest ``seq``), or ``None`` when it has no rows (``raw``:
    its payload as stored, not opened)."""
    row = conn.execute(
        select(sf.c.run_id, sf.c.seq, sf.c.frame, sf.c.created_at)
        .where(exact_eq(sf.c.run_id, check_run_id(run_id)))
        .order_by(sf.c.seq.desc())
        .limit(1)
    ).first()
    if row is None:
        return None
    return _frame(row) if raw else _opened(conn, run_id, [_frame(row)])[0]


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
    check_run_id(run_id)
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
