"""Tool health and run reliability over a window, aggregated by the database.

``stats_by_tool`` counts each tool's calls in a window of ``created_at`` by outcome, with the p50
and p95 of their latency and the last failure; ``run_reliability`` counts each agent's runs in
a window of ``started_at`` by status, with the median duration of the finished ones. Both are one
``GROUP BY`` statement; no row of the window is loaded into Python.

**Reading a window of tool calls.** The only index with ``created_at`` is
``agent_tool_call_status_created_idx (status, created_at)``, whose leading column is the status.
The statuses are few, so the store first lists them (``tool_call_statuses``: a loose index scan
— MySQL/MariaDB's own ``DISTINCT``, elsewhere a recursive CTE that hops from one status to the
next through the index), then reads ``status IN (…) AND created_at BETWEEN …``: one index range
per status. A day of calls costs that day's rows, not the table's.

**Latency.** A call's ``execution_ms`` when a writer recorded one, else ``executed_at −
created_at`` (the upstream runtime never writes ``execution_ms``; it sets ``executed_at`` when
the call is executed or failed). For an action that waited for a person, the time from the
timestamps includes the wait. Calls with neither (not settled, rejected) have no latency;
``ToolStat.derived`` counts the latencies taken from the timestamps.

**Percentiles.** PostgreSQL has ``percentile_cont``. MySQL, MariaDB and SQLite have no percentile
aggregate; there the same value is computed exactly from window functions: each value's rank
``ROW_NUMBER() OVER (PARTITION BY tool ORDER BY latency)`` and the group's size ``n``;
``percentile_cont(p)`` is the value at 0-based position ``p * (n - 1)`` interpolated linearly
between its two neighbours, and the ``GROUP BY`` picks those two values out with integer
arithmetic (no float rounding decides a rank). Memory and time stay those of one sort of the
window's rows, done by the database. Calls without a latency are left out of the percentiles;
runs that have not finished are left out of the median.

**Outcomes.** A tool call's ``status`` is the runtime's text; the groups are
``vocabulary.TOOL_STATUS_GROUPS`` (the runtime's words and the older ones that mean the same;
anything else counts as ``other``, so the groups and ``other`` add up to ``calls``). A run's
status is ``completed``, ``failed``, ``cancelled`` or ``running``; anything else is ``other``.
``tenant_ref`` reaches a tool call through its message's thread (two primary-key lookups a row)
and a run directly.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, bindparam, case, func, literal_column, select, text

from agora_cli.store._dialects import dialect_of
from agora_cli.store._errors import InvalidInput
from agora_cli.store._schema import message, run, thread, tool_call
from agora_cli.store._sqlexpr import exact_eq
from agora_cli.store._values import check_instant, check_optional_identity
from agora_cli.store._vocabulary import TOOL_STATUS_GROUPS
from agora_cli.store._windows import TOOL_SORTS

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, RowMapping
    from sqlalchemy.sql import ColumnElement, Select

__all__ = [
    "RUN_STATUS_GROUPS",
    "TOOL_SORTS",
    "TOOL_STATUS_GROUPS",
    "AgentReliability",
    "ToolFailure",
    "ToolStat",
    "run_reliability",
    "stats_by_tool",
    "tool_call_statuses",
]

RUN_STATUS_GROUPS: dict[str, tuple[str, ...]] = {
    "completed": ("completed",),
    "failed": ("failed",),
    "cancelled": ("cancelled",),
    "running": ("running",),
}
# More distinct statuses than this and the per-status ranges stop paying: read the window whole.
MAX_STATUS_RANGES = 64
ERROR_CHARS = 500


@dataclass(frozen=True)
class ToolFailure:
    """A tool's most recent failed call in the window."""

    tool_call_id: str
    run_id: str | None
    at: int
    error: str | None  # its first 500 characters


@dataclass(frozen=True)
class ToolStat:
    """One tool over the window; ``calls`` = the five groups + ``other``. ``timed`` calls have a
    latency (``execution_ms``, else ``executed_at − created_at``: ``derived`` of them); the
    percentiles (``None`` without timed calls) are over those. ``tool_type`` is the calls' type
    (``read``, ``action`` …), ``"mixed"`` when they disagree."""

    tool_name: str
    tool_type: str
    calls: int
    succeeded: int
    failed: int
    rejected: int
    pending_approval: int
    running: int
    other: int
    timed: int
    derived: int
    p50_ms: float | None
    p95_ms: float | None
    last_failure: ToolFailure | None

    @property
    def settled(self) -> int:
        """The calls with an outcome of the tool's own: succeeded or failed."""
        return self.succeeded + self.failed

    @property
    def fail_rate(self) -> float | None:
        """``failed / (succeeded + failed)``; ``None`` with no settled call. Calls awaiting
        approval, running, rejected (a person's decision) or ``other`` are not in it."""
        return self.failed / self.settled if self.settled else None


def _sort_key(sort: str) -> Any:
    def key(s: ToolStat) -> tuple[Any, ...]:
        if sort == "failures":
            first: tuple[Any, ...] = (-s.failed,)
        elif sort == "fail_rate":
            first = (s.fail_rate is None, -(s.fail_rate or 0.0), -s.failed)
        elif sort == "p95":
            first = (s.p95_ms is None, -(s.p95_ms or 0.0))
        else:
            first = ()
        return (*first, -s.calls, s.tool_name)

    return key


@dataclass(frozen=True)
class AgentReliability:
    """One agent's runs over the window (``agent_name`` ``None``: runs without one)."""

    agent_name: str | None
    runs: int
    completed: int
    failed: int
    cancelled: int
    running: int
    other: int
    finished: int
    median_ms: float | None


# --- helpers ----------------------------------------------------------------------------------


def _window(from_ms: int, to_ms: int) -> tuple[int, int]:
    check_instant("from_ms", from_ms)
    check_instant("to_ms", to_ms)
    if from_ms > to_ms:
        raise InvalidInput("the window starts after it ends (from_ms > to_ms)", param="from_ms")
    return from_ms, to_ms


def _count_in(column: Any, statuses: Sequence[str]) -> ColumnElement[Any]:
    return func.sum(case((column.in_(statuses), 1), else_=0))


def _percentile_bounds(
    value: ColumnElement[Any], rank: Any, size: Any, percent: int
) -> tuple[ColumnElement[Any], ColumnElement[Any]]:
    """The two values around 0-based position ``percent/100 * (size - 1)``, as aggregates over
    rows ranked 1..size by ``value`` (integer arithmetic only)."""
    k = literal_column(str(percent)) * (size - 1)
    low = func.max(case((and_((rank - 1) * 100 <= k, rank * 100 > k), value)))
    high = func.max(case((and_((rank - 1) * 100 >= k, (rank - 2) * 100 < k), value)))
    return low, high


def _interpolate(low: Any, high: Any, size: int, percent: int) -> float | None:
    """``percentile_cont``'s linear interpolation between the two neighbours."""
    if not size or low is None or high is None:
        return None
    fraction = (percent * (size - 1) % 100) / 100
    return float(low) + (float(high) - float(low)) * fraction


def _ms(value: Any) -> float | None:
    return None if value is None else float(value)


# --- tool calls -------------------------------------------------------------------------------

_LOOSE_SCAN = (
    "WITH RECURSIVE s(status) AS ("
    " SELECT MIN(status) FROM agent_tool_call"
    " UNION ALL"
    " SELECT (SELECT MIN(t.status) FROM agent_tool_call t WHERE t.status > s.status)"
    " FROM s WHERE s.status IS NOT NULL"
    ") SELECT status FROM s WHERE status IS NOT NULL"
)


def tool_call_statuses(conn: Connection) -> list[str]:
    """Every distinct ``agent_tool_call.status``, by a loose scan of the status index."""
    if dialect_of(conn).loose_index_scan:
        sql = "SELECT DISTINCT status FROM agent_tool_call"  # a loose index scan of its own
    else:
        sql = _LOOSE_SCAN
    return sorted(str(s) for s in conn.execute(text(sql)).scalars())


def _tenant_of_call(q: Select[Any]) -> Select[Any]:
    """``q`` over tool calls, narrowed to the calls of the tenant ``:tenant`` (via the thread)."""
    return (
        q.join(message, message.c.id == tool_call.c.message_id)
        .join(thread, thread.c.id == message.c.thread_id)
        .where(exact_eq(thread.c.tenant_ref, bindparam("tenant")))
    )


def _latency() -> ColumnElement[Any]:
    """``execution_ms``, else ``executed_at − created_at`` (0 if the clocks disagree)."""
    tc = tool_call
    measured = case(
        (tc.c.executed_at.is_(None), None),
        (tc.c.executed_at > tc.c.created_at, tc.c.executed_at - tc.c.created_at),
        else_=0,
    )
    return func.coalesce(tc.c.execution_ms, measured)


def _exact_keys(column: ColumnElement[Any], padded: bool) -> tuple[ColumnElement[Any], ...]:
    """A grouping key, and on MySQL/MariaDB its length: their PAD SPACE collation would put
    ``'lookup'`` and ``'lookup '`` in one group (and one window partition)."""
    return (column, func.char_length(column)) if padded else (column,)


@functools.cache
def _tool_stats_statement(
    percentiles: bool, ranges: bool, tenant: bool, padded: bool = False
) -> Select[Any]:
    """The per-tool ``GROUP BY`` over the window ``:lo``–``:hi`` (statuses ``:statuses``), built
    once per shape: SQLAlchemy then caches its SQL per dialect, as for a hand-written string.
    ``padded``: MySQL/MariaDB, where each tool name's length is a key too (``_exact_keys``)."""
    tc = tool_call
    name = _exact_keys(tc.c.tool_name, padded)
    latency = _latency()
    derived = case((and_(tc.c.execution_ms.is_(None), tc.c.executed_at.is_not(None)), 1), else_=0)
    source = select(
        tc.c.tool_name,
        tc.c.tool_type,
        tc.c.status,
        latency.label("latency"),
        derived.label("derived"),
        tc.c.created_at,
        *(func.char_length(tc.c.tool_name).label("name_length") for _ in range(int(padded))),
    ).where(tc.c.created_at >= bindparam("lo"), tc.c.created_at <= bindparam("hi"))
    if ranges:
        source = source.where(tc.c.status.in_(bindparam("statuses", expanding=True)))
    if tenant:
        source = _tenant_of_call(source)
    if not percentiles:
        untimed = case((latency.is_(None), 1), else_=0)
        source = source.add_columns(
            func.row_number().over(partition_by=(*name, untimed), order_by=latency).label("rank"),
            func.count(latency).over(partition_by=name).label("size"),
        )
    w = source.subquery("w")
    groups = TOOL_STATUS_GROUPS
    columns: list[ColumnElement[Any]] = [
        w.c.tool_name,
        func.min(w.c.tool_type).label("type_low"),
        func.max(w.c.tool_type).label("type_high"),
        func.count().label("calls"),
        *(_count_in(w.c.status, statuses).label(name) for name, statuses in groups.items()),
        func.count(w.c.latency).label("timed"),
        func.sum(w.c.derived).label("derived"),
        func.max(case((w.c.status.in_(groups["failed"]), w.c.created_at))).label("failed_at"),
    ]
    if percentiles:
        columns += [
            func.percentile_cont(0.5).within_group(w.c.latency).label("p50"),
            func.percentile_cont(0.95).within_group(w.c.latency).label("p95"),
        ]
    else:
        for percent in (50, 95):
            # untimed calls rank in a partition of their own; their NULLs never win a MAX
            low, high = _percentile_bounds(w.c.latency, w.c.rank, w.c.size, percent)
            columns += [low.label(f"p{percent}_low"), high.label(f"p{percent}_high")]
    return select(*columns).group_by(w.c.tool_name, *([w.c.name_length] if padded else []))


def stats_by_tool(
    conn: Connection,
    *,
    from_ms: int,
    to_ms: int,
    tenant_ref: str | None = None,
    sort: str = "calls",
) -> list[ToolStat]:
    """Each tool's calls created in ``[from_ms, to_ms]`` (optionally one tenant's), by outcome,
    with p50/p95 of their latency (``execution_ms``, else ``executed_at − created_at``) and the
    last failure; ordered by ``sort`` (``TOOL_SORTS``: most calls first by default)."""
    if sort not in TOOL_SORTS:
        raise InvalidInput(f"sort must be one of {', '.join(TOOL_SORTS)}, not {sort!r}")
    lo, hi = _window(from_ms, to_ms)
    check_optional_identity("tenant_ref", tenant_ref)
    statuses = tool_call_statuses(conn)
    if not statuses:
        return []
    d = dialect_of(conn)
    percentiles = d.has_percentiles  # percentile_cont (PostgreSQL), else interpolated ranks
    ranges = len(statuses) <= MAX_STATUS_RANGES
    padded = d.pads_spaces
    q = _tool_stats_statement(percentiles, ranges, tenant_ref is not None, padded)
    params: dict[str, Any] = {"lo": lo, "hi": hi}
    if ranges:
        params["statuses"] = statuses
    if tenant_ref is not None:
        params["tenant"] = tenant_ref
    rows = conn.execute(q, params).mappings().all()
    failures = _last_failures(conn, rows, tenant_ref)
    found = [_tool_stat(r, percentiles, failures.get(r["tool_name"])) for r in rows]
    return sorted(found, key=_sort_key(sort))


def _tool_stat(row: RowMapping, percentiles: bool, failure: ToolFailure | None) -> ToolStat:
    counts = {name: int(row[name] or 0) for name in TOOL_STATUS_GROUPS}
    calls, timed = int(row["calls"]), int(row["timed"])
    if percentiles:
        p50, p95 = _ms(row["p50"]), _ms(row["p95"])
    else:
        p50 = _interpolate(row["p50_low"], row["p50_high"], timed, 50)
        p95 = _interpolate(row["p95_low"], row["p95_high"], timed, 95)
    low, high = row["type_low"], row["type_high"]
    return ToolStat(
        tool_name=row["tool_name"],
        tool_type=str(low) if low == high else "mixed",
        calls=calls,
        other=calls - sum(counts.values()),
        timed=timed,
        derived=int(row["derived"] or 0),
        p50_ms=p50,
        p95_ms=p95,
        last_failure=failure,
        **counts,
    )


@functools.cache
def _last_failures_statement(tenant: bool) -> Select[Any]:
    tc = tool_call
    q = select(
        tc.c.id,
        tc.c.tool_name,
        tc.c.run_id,
        tc.c.created_at,
        func.substr(tc.c.error, 1, ERROR_CHARS).label("error"),
    ).where(
        tc.c.status.in_(TOOL_STATUS_GROUPS["failed"]),
        tc.c.created_at.in_(bindparam("at", expanding=True)),
    )
    return _tenant_of_call(q) if tenant else q


def _last_failures(
    conn: Connection, rows: Sequence[RowMapping], tenant_ref: str | None
) -> dict[str, ToolFailure]:
    """The last failed call of each tool: one read of the status index at the failure times
    the aggregate found (a handful of rows; ties broken by the highest id)."""
    wanted = {r["tool_name"]: int(r["failed_at"]) for r in rows if r["failed_at"] is not None}
    if not wanted:
        return {}
    params: dict[str, Any] = {"at": sorted(set(wanted.values()))}
    if tenant_ref is not None:
        params["tenant"] = tenant_ref
    found: dict[str, ToolFailure] = {}
    q = _last_failures_statement(tenant_ref is not None)
    for r in conn.execute(q, params).mappings():
        name = r["tool_name"]
        if wanted.get(name) != int(r["created_at"]):
            continue
        if name in found and found[name].tool_call_id > r["id"]:
            continue
        found[name] = ToolFailure(r["id"], r["run_id"], int(r["created_at"]), r["error"])
    return found


# --- runs -------------------------------------------------------------------------------------


@functools.cache
def _run_reliability_statement(
    percentiles: bool, tenant: bool, padded: bool = False
) -> Select[Any]:
    agent = _exact_keys(run.c.agent_name, padded)
    duration = case((run.c.finished_at.is_not(None), run.c.finished_at - run.c.started_at))
    source = select(
        run.c.agent_name,
        run.c.status,
        duration.label("duration"),
        *(func.char_length(run.c.agent_name).label("name_length") for _ in range(int(padded))),
    ).where(run.c.started_at >= bindparam("lo"), run.c.started_at <= bindparam("hi"))
    if tenant:
        source = source.where(exact_eq(run.c.tenant_ref, bindparam("tenant")))
    if not percentiles:
        unfinished = case((run.c.finished_at.is_(None), 1), else_=0)
        source = source.add_columns(
            func.row_number()
            .over(partition_by=(*agent, unfinished), order_by=duration)
            .label("rank"),
            func.count(duration).over(partition_by=agent).label("size"),
        )
    w = source.subquery("w")
    columns: list[ColumnElement[Any]] = [
        w.c.agent_name,
        func.count().label("runs"),
        *(_count_in(w.c.status, s).label(name) for name, s in RUN_STATUS_GROUPS.items()),
        func.count(w.c.duration).label("finished"),
    ]
    if percentiles:
        columns.append(func.percentile_cont(0.5).within_group(w.c.duration).label("median"))
    else:
        low, high = _percentile_bounds(w.c.duration, w.c.rank, w.c.size, 50)
        columns += [low.label("median_low"), high.label("median_high")]
    return select(*columns).group_by(w.c.agent_name, *([w.c.name_length] if padded else []))


def run_reliability(
    conn: Connection, *, from_ms: int, to_ms: int, tenant_ref: str | None = None
) -> list[AgentReliability]:
    """Each agent's runs started in ``[from_ms, to_ms]`` (optionally one tenant's), by status,
    with the median duration of the finished ones; most runs first.

    One read of ``agent_run_started_idx``'s range; the tenant is a filter on those rows.
    """
    lo, hi = _window(from_ms, to_ms)
    check_optional_identity("tenant_ref", tenant_ref)
    d = dialect_of(conn)
    percentiles = d.has_percentiles  # percentile_cont (PostgreSQL), else interpolated ranks
    q = _run_reliability_statement(percentiles, tenant_ref is not None, d.pads_spaces)
    params: dict[str, Any] = {"lo": lo, "hi": hi}
    if tenant_ref is not None:
        params["tenant"] = tenant_ref
    found = []
    for r in conn.execute(q, params).mappings():
        counts = {name: int(r[name] or 0) for name in RUN_STATUS_GROUPS}
        runs, finished = int(r["runs"]), int(r["finished"])
        median = (
            _ms(r["median"])
            if percentiles
            else _interpolate(r["median_low"], r["median_high"], finished, 50)
        )
        found.append(
            AgentReliability(
                agent_name=r["agent_name"],
                runs=runs,
                other=runs - sum(counts.values()),
                finished=finished,
                median_ms=median,
                **counts,
            )
        )
    return sorted(found, key=lambda a: (-a.runs, a.agent_name or ""))
