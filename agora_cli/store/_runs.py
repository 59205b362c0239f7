"""Runs as an operator reads them: a filtered listing, newest first, paged by a keyset cursor; and
one run with its tool calls, ledger rows, proposals and buffered stream frames.

``list_runs`` orders by ``(started_at, id)`` descending and reads one range of a run index —
``agent_run_started_idx``, or with an actor or a status filter ``agent_run_actor_started_idx`` /
``agent_run_status_started_idx`` (``agent_run_thread_idx`` for one thread). A page costs the rows
it returns, wherever it starts: the cursor is the last row's ``(started_at, id)`` and the next page
is ``started_at <= s AND (started_at < s OR id < i)``, which the planners read as an index range
from that point (no ``OFFSET``). Rows written while an operator pages are never repeated and never
make a page skip an older row: a newer run sorts before the cursor, so it simply is not on the
pages that follow. (On MySQL two ids that differ only by trailing spaces, started in the same
millisecond, compare equal under PAD SPACE; that tie is the one the cursor cannot split.)

The cursor is opaque text for the command line: base64url of ``[started_at, id]`` as JSON.

**A run's cost is its ledger rows'** (``agent_token_usage.run_id``), summed like a thread's:
known costs added, unpriced rows counted apart (``ThreadUsageTotals``), so ``runs`` and
``threads show`` agree, and agree again after ``prices reprice``. The run row's own
``cost_usd`` is the runtime's rollup at write time (its estimates then, never repriced): it is
kept as the recorded figure, not the run's cost. A page's totals are one ``GROUP BY`` over
``agent_token_usage_run_idx`` (``usage_by_run``).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, case, func, or_, select

from agora_cli.store._dialects import dialect_of
from agora_cli.store._errors import InvalidInput
from agora_cli.store._proposals.model import Proposal
from agora_cli.store._proposals.queries import proposal_row, select_rows
from agora_cli.store._proposals.sealed import open_proposals
from agora_cli.store._schema import (
    action_proposal,
    message,
    run,
    stream_frame,
    token_usage,
    tool_call,
)
from agora_cli.store._sqlexpr import exact_eq
from agora_cli.store._steps import get_run
from agora_cli.store._thread_model import Message, Run, ThreadUsageRow, ThreadUsageTotals, ToolCall
from agora_cli.store._threads import (
    _run,
    _tool_calls,
    _usage_row,
    _usage_sums,
    _usage_totals,
    list_run_messages,
)
from agora_cli.store._values import (
    check_identity,
    check_instant,
    check_int,
    check_optional_identity,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection
    from sqlalchemy.sql import ColumnElement

__all__ = [
    "MAX_DETAIL_ROWS",
    "MAX_RUNS_PAGE",
    "RunDetail",
    "RunFrames",
    "RunPage",
    "decode_run_cursor",
    "encode_run_cursor",
    "get_run_detail",
    "list_runs",
    "usage_by_run",
]

MAX_RUNS_PAGE = 1000
# A runaway loop can leave thousands of tool calls or ledger rows on one run: the detail shows
# the first ones and counts them all.
MAX_DETAIL_ROWS = 1000


@dataclass(frozen=True)
class RunPage:
    """One page of ``list_runs``; ``next_cursor`` is ``None`` on the last page. ``usage`` holds
    each run's ledger totals (runs without ledger rows are absent)."""

    runs: list[Run]
    next_cursor: str | None
    usage: dict[str, ThreadUsageTotals] = field(default_factory=dict)


@dataclass(frozen=True)
class RunFrames:
    """A run's stream frames still buffered in ``agent_stream_frame`` (see frames.md)."""

    rows: int
    last_seq: int
    ended: bool  # the end marker (a NULL frame) is there: the stream finished
    first_at: int
    last_at: int


@dataclass(frozen=True)
class RunDetail:
    """One run and what hangs off it; each list holds at most ``MAX_DETAIL_ROWS`` rows and
    its ``*_total`` counts them all. ``ledger`` sums all the run's ledger rows: the run's cost.
    ``frames`` is ``None`` when none are buffered (never streamed through the SQL sink, or
    purged past their TTL)."""

    run: Run
    messages: list[Message]
    messages_total: int
    tool_calls: list[ToolCall]
    tool_calls_total: int
    usage: list[ThreadUsageRow]
    usage_total: int
    ledger: ThreadUsageTotals
    proposals: list[Proposal]
    frames: RunFrames | None


# --- the cursor -------------------------------------------------------------------------------


def encode_run_cursor(started_at: int, run_id: str) -> str:
    """The cursor that continues a listing after the run ``(started_at, run_id)``."""
    raw = json.dumps([started_at, run_id], ensure_ascii=False, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_run_cursor(cursor: str) -> tuple[int, str]:
    """``(started_at, id)`` from a cursor that ``encode_run_cursor`` made, else ``InvalidInput``."""
    bad = InvalidInput(
        f"after {cursor!r} is not a cursor a runs listing printed (copy its `next`)", param="after"
    )
    if not isinstance(cursor, str) or not cursor or len(cursor) > 2048:
        raise bad
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = json.loads(raw.decode())
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise bad from None
    if (
        not isinstance(value, list)
        or len(value) != 2
        or isinstance(value[0], bool)
        or not isinstance(value[0], int)
        or not isinstance(value[1], str)
    ):
        raise bad
    try:
        check_instant("after", value[0])
        check_identity("after", value[1])
    except InvalidInput:
        raise bad from None
    return value[0], value[1]


# --- list -------------------------------------------------------------------------------------


def list_runs(
    conn: Connection,
    *,
    actor_ref: str | None = None,
    tenant_ref: str | None = None,
    agent_name: str | None = None,
    status: str | None = None,
    thread_id: str | None = None,
    from_ms: int | None = None,
    to_ms: int | None = None,
    after: str | None = None,
    limit: int = 50,
) -> RunPage:
    """List runs newest first (``started_at``, then ``id``), filtered, one page at a time.

    ``from_ms``/``to_ms`` bound ``started_at`` (inclusive). ``after`` is the ``next_cursor`` of
    the previous page (``InvalidInput`` when it is not one); ``limit`` is 1–1000.
    """
    check_int("limit", limit, low=1, high=MAX_RUNS_PAGE)
    filters: list[ColumnElement[bool]] = []
    for column, value, name in (
        (run.c.actor_ref, actor_ref, "actor_ref"),
        (run.c.tenant_ref, tenant_ref, "tenant_ref"),
        (run.c.agent_name, agent_name, "agent_name"),
        (run.c.status, status, "status"),
        (run.c.thread_id, thread_id, "thread_id"),
    ):
        if check_optional_identity(name, value) is not None:
            filters.append(exact_eq(column, value))
    if from_ms is not None:
        filters.append(run.c.started_at >= check_instant("from_ms", from_ms))
    if to_ms is not None:
        filters.append(run.c.started_at <= check_instant("to_ms", to_ms))
    if from_ms is not None and to_ms is not None and from_ms > to_ms:
        raise InvalidInput("the window starts after it ends (from_ms > to_ms)", param="from_ms")
    if after is not None:
        started, last_id = decode_run_cursor(after)
        filters.append(run.c.started_at <= started)
        filters.append(or_(run.c.started_at < started, run.c.id < last_id))
    q = (
        select(run)
        .where(*filters)
        .order_by(run.c.started_at.desc(), run.c.id.desc())
        .limit(limit + 1)
    )
    rows = [_run(r) for r in conn.execute(q).mappings()]
    page, more = rows[:limit], len(rows) > limit
    last = page[-1] if page else None
    cursor = encode_run_cursor(last.started_at, last.id) if more and last else None
    return RunPage(runs=page, next_cursor=cursor, usage=usage_by_run(conn, [r.id for r in page]))


def usage_by_run(conn: Connection, run_ids: Sequence[str]) -> dict[str, ThreadUsageTotals]:
    """The ledger totals of each run in ``run_ids`` (at most 1,000): one ``GROUP BY`` over
    ``agent_token_usage_run_idx``. Runs without ledger rows are absent from the result."""
    ids = list(dict.fromkeys(run_ids))
    if len(ids) > MAX_RUNS_PAGE:
        raise InvalidInput("usage_by_run takes at most 1,000 run ids", param="run_ids")
    if not ids:
        return {}
    key = token_usage.c.run_id
    keys: list[ColumnElement[Any]] = [key]
    pad = dialect_of(conn).pads_spaces
    if pad:
        # PAD SPACE: 'r' and 'r ' are one group and both match IN ('r'); their lengths part them,
        # and only the row whose run_id is exactly the id counts (run_id has no foreign key).
        keys.append(func.length(key))
    q = select(key, *_usage_sums()).where(key.in_(ids)).group_by(*keys)
    wanted = set(ids)
    found: dict[str, ThreadUsageTotals] = {}
    for r in conn.execute(q).mappings():
        if r["run_id"] in wanted:
            found[r["run_id"]] = _usage_totals(r)
    return found


# --- detail -----------------------------------------------------------------------------------


def _count(conn: Connection, column: Any, where: ColumnElement[bool]) -> int:
    q = select(func.count()).select_from(column.table).where(where)
    return int(conn.execute(q).scalar_one())


def get_run_detail(conn: Connection, run_id: str) -> RunDetail:
    """Return a run with its messages, tool calls, ledger rows (and their sum: the run's cost),
    proposals and buffered frames.

    ``NotFound`` if there is no such run. Each part is one indexed read: the messages (in the
    thread's order), the tool calls and the ledger rows by their ``run_id`` indexes, the
    proposals through the run's thread, the frames through their primary key (the ledger's sum
    reads the same index range as its rows).
    """
    found = get_run(conn, run_id)
    messages = list_run_messages(conn, found, limit=MAX_DETAIL_ROWS)
    messages_total = len(messages)
    if messages_total == MAX_DETAIL_ROWS:
        messages_total = _count(conn, message.c.id, exact_eq(message.c.run_id, found.id))
    of_run = exact_eq(tool_call.c.run_id, found.id)
    calls = conn.execute(
        select(tool_call)
        .where(of_run)
        .order_by(tool_call.c.created_at, tool_call.c.id)
        .limit(MAX_DETAIL_ROWS)
    ).mappings()
    tool_calls = _tool_calls(conn, calls.all())
    calls_total = len(tool_calls)
    if calls_total == MAX_DETAIL_ROWS:
        calls_total = _count(conn, tool_call.c.id, of_run)

    usage_cols = [token_usage.c[name] for name in ThreadUsageRow.__dataclass_fields__]
    of_run = exact_eq(token_usage.c.run_id, found.id)
    usage_rows = conn.execute(
        select(*usage_cols)
        .where(of_run)
        .order_by(token_usage.c.created_at, token_usage.c.id)
        .limit(MAX_DETAIL_ROWS)
    ).mappings()
    usage = [_usage_row(r) for r in usage_rows]
    usage_total = len(usage)
    if usage_total == MAX_DETAIL_ROWS:
        usage_total = _count(conn, token_usage.c.id, of_run)
    ledger = _usage_totals(conn.execute(select(*_usage_sums()).where(of_run)).mappings().one())

    p = action_proposal
    proposals = open_proposals(
        conn,
        [
            proposal_row(r)
            for r in conn.execute(
                select_rows()
                .where(p.c.thread_id == found.thread_id, exact_eq(p.c.run_id, found.id))
                .order_by(p.c.created_at, p.c.id)
                .limit(MAX_DETAIL_ROWS)
            ).mappings()
        ],
    )
    return RunDetail(
        run=found,
        messages=messages,
        messages_total=messages_total,
        tool_calls=tool_calls,
        tool_calls_total=calls_total,
        usage=usage,
        usage_total=usage_total,
        ledger=ledger,
        proposals=proposals,
        frames=_frames(conn, found.id),
    )


def _frames(conn: Connection, run_id: str) -> RunFrames | None:
    f = stream_frame
    row = (
        conn.execute(
            select(
                func.count().label("rows"),
                func.max(f.c.seq).label("last_seq"),
                func.sum(case((f.c.frame.is_(None), 1), else_=0)).label("ends"),
                func.min(f.c.created_at).label("first_at"),
                func.max(f.c.created_at).label("last_at"),
            ).where(and_(exact_eq(f.c.run_id, run_id)))
        )
        .mappings()
        .one()
    )
    if not row["rows"]:
        return None
    return RunFrames(
        rows=int(row["rows"]),
        last_seq=int(row["last_seq"]),
        ended=bool(row["ends"]),
        first_at=int(row["first_at"]),
        last_at=int(row["last_at"]),
    )
