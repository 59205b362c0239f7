"""The figures ``agora metrics`` exports, read in groups: what waits for a decision, what runs,
what was spent, how budgets stand, how far the fold lags, what the frame buffer holds, whether
the schema is current.

Each group is one function over the caller's connection that returns frozen values; no
prometheus-client here (the command line builds the exposition from these values, and caps and
escapes its labels). ``collect_metrics`` reads every group, each in its own short read-only
transaction, and records each group's failure and time instead of raising: a group that fails
(a table an old schema lacks, a lost connection) leaves the others' figures standing, and the
failure is a figure of its own.

**Cost.** Every statement is set-based and reads one range of a named index, so a collection's
cost follows what waits, runs or was spent recently, not the size of the tables (measured on a
2,000,000-row ledger and 2,000,000 runs in ``tests/bench/bench_metrics.py``):

- the inbox: the ``pending`` range of ``agent_action_proposal_discovery_idx``, and the
  runtime's waiting tool calls through ``agent_tool_call_status_created_idx``;
- executions: the ``queued`` and ``running`` ranges of the discovery index, and the ``failed``
  range of ``agent_action_proposal_execution_idx`` (revision 0010; the discovery index's ``done``
  range would grow with every finished proposal);
- runs: the last hour of ``agent_run_started_idx``;
- spend: today and this month by model and tenant, whole folded days from the daily fold
  (``agent_usage_daily``) and the rest from the ledger's ``created_at`` range, as ``spend``
  reads them (``fold.window_parts``);
- budgets: ``budgets.evaluate_budgets`` (one grouped statement per scope kind and period);
- the fold: the ledger's first instant (one index endpoint) and the fold's day list;
- frames: the runs with rows older than the TTL, through ``(created_at, run_id)``;
- the schema: the catalog read ``db check`` makes, and the migrations' version table.

**Who reads.** The figures span every tenant: on PostgreSQL with row-level security they must be
read by a role that bypasses it (a superuser, or a ``BYPASSRLS`` role such as a dedicated
read-only monitoring login), never by the app role, whose untenanted session would see only
untenanted rows and report a partial inbox and partial spend as if whole.
``check_metrics_privilege`` refuses such a session.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date
from typing import TYPE_CHECKING, Any, Literal, TypeVar, get_args

from sqlalchemy import and_, case, func, inspect, literal_column, or_, select, text

from agora_cli.store._budgets import (
    BudgetStatus,
    Sums,
    add_sums,
    evaluate_budgets,
    list_budgets,
    status_from_sums,
)
from agora_cli.store._clock import DAY_MS, Clock, SystemClock, day_start_ms, ms_to_date
from agora_cli.store._dialects import dialect_of
from agora_cli.store._engine import translate_error
from agora_cli.store._errors import AgoraError, InvalidInput
from agora_cli.store._fold import (
    DEFAULT_GRACE_MS,
    WindowParts,
    fold_filter,
    raw_filter,
    window_parts,
)
from agora_cli.store._frames.purge import DEFAULT_FRAME_TTL_S
from agora_cli.store._ledger_tenant import effective_tenant, ledger_with_threads
from agora_cli.store._masking import scrub
from agora_cli.store._migrate import MAIN_BRANCH, VERSION_TABLE, script_directory
from agora_cli.store._proposals.tool_calls import count_waiting_tool_calls
from agora_cli.store._provision import check_agent_tables
from agora_cli.store._schema import action_proposal as p
from agora_cli.store._schema import run as r
from agora_cli.store._schema import stream_frame as sf
from agora_cli.store._schema import token_usage as u
from agora_cli.store._schema import usage_daily as d
from agora_cli.store._schema import usage_fold as f
from agora_cli.store._sqlexpr import finite_cost
from agora_cli.store._values import check_int

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine
    from sqlalchemy.sql import ColumnElement

__all__ = [
    "GROUPS",
    "ExecutionCount",
    "ExecutionFigures",
    "ExecutionState",
    "FoldFigures",
    "FrameFigures",
    "InboxFigures",
    "MetricsCache",
    "MetricsGroup",
    "MetricsSnapshot",
    "PendingCount",
    "RunCount",
    "SchemaFigures",
    "SpendCell",
    "SpendFigures",
    "check_metrics_privilege",
    "collect_metrics",
    "count_runs_started_since",
    "read_budget_figures",
    "read_execution_figures",
    "read_fold_figures",
    "read_frame_figures",
    "read_inbox_figures",
    "read_schema_figures",
    "read_spend_figures",
]

MetricsGroup = Literal[
    "schema", "inbox", "executions", "runs", "spend", "budgets", "fold", "frames"
]
GROUPS: tuple[MetricsGroup, ...] = get_args(MetricsGroup)
ExecutionState = Literal["queued", "running", "stuck", "failed"]
HOUR_MS = 3_600_000
MAX_FRAME_TTL_S = 1_000_000_000  # as `frames purge --ttl`

T = TypeVar("T")


# --- the inbox ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PendingCount:
    """What waits for a decision, of one kind, tool and tenant (``None``: no tenant)."""

    kind: Literal["proposal", "tool_call"]
    tool_name: str
    tenant_ref: str | None
    count: int


@dataclass(frozen=True)
class InboxFigures:
    """The inbox's ``pending`` state at ``now``: what waits (proposals not past their expiry,
    and the runtime's waiting tool calls), when the oldest of them was asked, how many
    proposals expire within the hour, and how many are past their expiry (``proposals expire``
    marks them)."""

    pending: tuple[PendingCount, ...]
    oldest_pending_at: int | None
    expiring_within_hour: int
    past_expiry: int


def _exact(conn: Connection, keys: list[ColumnElement[Any]]) -> list[ColumnElement[Any]]:
    """GROUP BY ``keys``, on MySQL/MariaDB with each one's length: PAD SPACE would put ``'a'``
    and ``'a '`` in one group."""
    if not dialect_of(conn).pads_spaces:
        return keys
    return [*keys, *(func.char_length(k) for k in keys)]


def read_inbox_figures(conn: Connection, *, now_ms: int) -> InboxFigures:
    """The inbox's pending figures: one read of the discovery index's ``pending`` range grouped
    by tool and tenant, and one of the waiting tool calls (``tool_calls.py``)."""
    at = p.c.discovery_at
    decidable = or_(at.is_(None), at > now_ms)
    expiring = and_(at > now_ms, at <= now_ms + HOUR_MS)
    past = at <= now_ms
    q = (
        select(
            p.c.tool_name,
            p.c.tenant_ref,
            func.sum(case((decidable, 1), else_=0)).label("pending"),
            func.sum(case((expiring, 1), else_=0)).label("expiring"),
            func.sum(case((past, 1), else_=0)).label("past"),
            func.min(case((decidable, p.c.created_at))).label("oldest"),
        )
        .where(p.c.discovery_state == "pending")
        .group_by(*_exact(conn, [p.c.tool_name, p.c.tenant_ref]))
    )
    pending: list[PendingCount] = []
    oldest: list[int] = []
    expiring_n = past_n = 0
    for row in conn.execute(q):
        if int(row.pending):
            pending.append(
                PendingCount("proposal", row.tool_name, row.tenant_ref, int(row.pending))
            )
        expiring_n += int(row.expiring)
        past_n += int(row.past)
        if row.oldest is not None:
            oldest.append(int(row.oldest))
    for tool, tenant, count, first in count_waiting_tool_calls(conn):
        pending.append(PendingCount("tool_call", tool, tenant, count))
        oldest.append(first)
    return InboxFigures(
        pending=tuple(pending),
        oldest_pending_at=min(oldest, default=None),
        expiring_within_hour=expiring_n,
        past_expiry=past_n,
    )


# --- approved work ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExecutionCount:
    """Approved work of one tool in one state: ``queued`` (waiting for a worker), ``running``
    (under a live lease), ``stuck`` (running under a lease that ran out: its worker died, and the
    next claim recovers it), ``failed`` (settled as failed, ever). The states do not overlap."""

    state: ExecutionState
    tool_name: str
    count: int


@dataclass(frozen=True)
class ExecutionFigures:
    counts: tuple[ExecutionCount, ...]
    oldest_queued_at: int | None  # when the longest-waiting queued work was queued


def read_execution_figures(conn: Connection, *, now_ms: int) -> ExecutionFigures:
    """Approved work by state and tool: one read of the discovery index's ``queued`` and
    ``running`` ranges (``discovery_at``: when it was queued; the lease's expiry), and the
    ``failed`` range of the execution index (revision 0010)."""
    state, at = p.c.discovery_state, p.c.discovery_at
    live = (
        select(
            p.c.tool_name,
            func.sum(case((state == "queued", 1), else_=0)).label("queued"),
            func.sum(
                case((and_(state == "running", or_(at.is_(None), at > now_ms)), 1), else_=0)
            ).label("running"),
            func.sum(case((and_(state == "running", at <= now_ms), 1), else_=0)).label("stuck"),
            func.min(case((state == "queued", at))).label("oldest"),
        )
        .where(state.in_(("queued", "running")))
        .group_by(*_exact(conn, [p.c.tool_name]))
    )
    counts: list[ExecutionCount] = []
    oldest: list[int] = []
    for row in conn.execute(live):
        states: tuple[tuple[ExecutionState, Any], ...] = (
            ("queued", row.queued),
            ("running", row.running),
            ("stuck", row.stuck),
        )
        for name, n in states:
            if int(n):
                counts.append(ExecutionCount(name, row.tool_name, int(n)))
        if row.oldest is not None:
            oldest.append(int(row.oldest))
    failed = (
        select(p.c.tool_name, func.count().label("n"))
        .where(p.c.execution_state == "failed", state == "done")
        .group_by(*_exact(conn, [p.c.tool_name]))
    )
    counts += [ExecutionCount("failed", row.tool_name, int(row.n)) for row in conn.execute(failed)]
    return ExecutionFigures(counts=tuple(counts), oldest_queued_at=min(oldest, default=None))


# --- runs ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunCount:
    status: str
    count: int


def count_runs_started_since(conn: Connection, *, since_ms: int) -> list[RunCount]:
    """Runs started at or after ``since_ms``, by status (one range of ``agent_run_started_idx``),
    most first."""
    q = (
        select(r.c.status, func.count().label("n"))
        .where(r.c.started_at >= since_ms)
        .group_by(*_exact(conn, [r.c.status]))
    )
    found = [RunCount(row.status, int(row.n)) for row in conn.execute(q)]
    return sorted(found, key=lambda c: (-c.count, c.status))


# --- spend --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpendCell:
    """A (model, tenant)'s spend over a window: ``cost_usd`` sums the known costs and is
    ``None`` when every turn was unpriced; ``unpriced_turns`` counts the turns of unknown cost,
    never summed as $0. The tenant is a row's own, else its thread's (``None``: neither)."""

    model_id: str
    tenant_ref: str | None
    turns: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    unpriced_turns: int


@dataclass(frozen=True)
class SpendFigures:
    """Spend today and this month (UTC, to ``now``) by model and tenant; ``folded_days`` of the
    month's ``earlier_days`` (its days before today) were read from the daily fold."""

    day: tuple[SpendCell, ...]
    month: tuple[SpendCell, ...]
    folded_days: int
    earlier_days: int
    at_ms: int = 0  # the instant read to


_Key = tuple[str, str | None]


def _add(cells: dict[_Key, SpendCell], cell: SpendCell) -> None:
    old = cells.get((cell.model_id, cell.tenant_ref))
    if old is None:
        cells[(cell.model_id, cell.tenant_ref)] = cell
        return
    costs = [c for c in (old.cost_usd, cell.cost_usd) if c is not None]
    cells[(cell.model_id, cell.tenant_ref)] = SpendCell(
        cell.model_id,
        cell.tenant_ref,
        old.turns + cell.turns,
        old.input_tokens + cell.input_tokens,
        old.output_tokens + cell.output_tokens,
        sum(costs) if costs else None,
        old.unpriced_turns + cell.unpriced_turns,
    )


def _cell(model: str, tenant: str | None, row: Any) -> SpendCell:
    turns = int(row.turns)
    return SpendCell(
        model,
        tenant,
        turns,
        int(row.input_tokens or 0),
        int(row.output_tokens or 0),
        None if row.cost_usd is None else float(row.cost_usd),
        turns - int(row.priced or 0),
    )


def _raw_cells(
    conn: Connection, where: ColumnElement[bool], *, by_actor: dict[str, Sums] | None = None
) -> list[SpendCell]:
    """The ledger's rows matching ``where`` by model and effective tenant (one statement).

    With ``by_actor``, the same statement groups by actor too and adds each actor's sums there
    (``read_budget_figures`` takes actors' day budgets from them instead of reading today's
    rows again)."""
    known = finite_cost(u.c.cost_usd)
    tenant = effective_tenant()
    keys: list[ColumnElement[Any]] = [u.c.model_id, tenant]
    if by_actor is not None:
        keys.append(u.c.actor_ref)
    q = (
        select(
            *keys,
            func.count().label("turns"),
            func.sum(u.c.input_tokens).label("input_tokens"),
            func.sum(u.c.output_tokens).label("output_tokens"),
            func.sum(known).label("cost_usd"),
            func.count(known).label("priced"),
        )
        .select_from(ledger_with_threads())
        .where(where)
        .group_by(*_exact(conn, keys))
    )
    cells = []
    for row in conn.execute(q):
        cell = _cell(row[0], row[1], row)
        cells.append(cell)
        if by_actor is not None:
            add_sums(by_actor, str(row[2]), _sums_of(cell))
    return cells


def _fold_cells(conn: Connection, where: ColumnElement[bool]) -> list[SpendCell]:
    """The daily fold's rows matching ``where`` by model and tenant (``''``: none)."""
    q = (
        select(
            d.c.model_id,
            d.c.tenant_key,
            func.sum(d.c.turns).label("turns"),
            func.sum(d.c.input_tokens).label("input_tokens"),
            func.sum(d.c.output_tokens).label("output_tokens"),
            func.sum(finite_cost(d.c.cost_usd)).label("cost_usd"),
            (func.sum(d.c.turns) - func.sum(d.c.unpriced_turns)).label("priced"),
        )
        .where(where)
        .group_by(*_exact(conn, [d.c.model_id, d.c.tenant_key]))
    )
    return [_cell(row.model_id, row.tenant_key or None, row) for row in conn.execute(q)]


class MetricsCache:
    """What a long-running exporter (``agora metrics serve``) keeps from one collection to the
    next: the sums of the month's folded days, by model and tenant, under the versions of those
    days (each one's ``folded_at`` and row count in ``agent_usage_fold``).

    A folded day's rows change only when it is folded again, which sets a new ``folded_at``;
    a write to it marks it dirty first, which takes it out of the clean days. So while the
    versions read before and after are the ones cached, the cached sums are what the fold rows
    hold, and the month's fold rows are not read again (one 14-row read of the versions
    instead). Not thread-safe: one collector uses it."""

    def __init__(self) -> None:
        self._fold: tuple[tuple[Any, ...], list[SpendCell]] | None = None
        self.hits = 0

    def fold_cells(
        self, conn: Connection, parts: WindowParts
    ) -> tuple[tuple[Any, ...], list[SpendCell]]:
        """The fold rows' cells of ``parts`` and the versions they were read under."""
        versions = _fold_versions(conn, parts)
        if self._fold is not None and self._fold[0] == versions:
            self.hits += 1
            return versions, list(self._fold[1])
        return versions, _fold_cells(conn, fold_filter(parts))

    def keep(self, versions: tuple[Any, ...], cells: list[SpendCell]) -> None:
        self._fold = (versions, list(cells))


def _fold_versions(conn: Connection, parts: WindowParts) -> tuple[Any, ...]:
    """The clean folded days of ``parts`` with each one's ``folded_at`` and row count."""
    q = (
        select(f.c.day, f.c.folded_at, f.c.rows)
        .where(or_(*(f.c.day.between(lo, hi) for lo, hi in parts.fold_days)), f.c.dirty == 0)
        .order_by(f.c.day)
    )
    return tuple((int(a), int(b), int(c)) for a, b, c in conn.execute(q))


def _window_cells(
    conn: Connection,
    from_ms: int,
    to_ms: int,
    *,
    by_actor: dict[str, Sums] | None = None,
    cache: MetricsCache | None = None,
) -> tuple[dict[_Key, SpendCell], int]:
    """``[from_ms, to_ms]`` by model and tenant: folded clean days from the fold, the rest from
    the ledger. The fold's state is read before and after, as ``ledger.spend`` does: if a fold
    or a dirty mark landed in between, the reads are repeated (at worst, the window is read
    raw), so no day is counted twice or missed. With a ``cache``, the fold rows' sums are taken
    from it while their days' versions are unchanged (``MetricsCache``)."""
    cells: dict[_Key, SpendCell] = {}
    if from_ms > to_ms:
        return cells, 0
    for _ in range(3 if by_actor is None else 0):  # by actor: today, never folded
        parts = window_parts(conn, from_ms, to_ms)
        if not parts.fold_days:
            break
        versions: tuple[Any, ...] = ()
        if cache is None:
            found = _fold_cells(conn, fold_filter(parts))
        else:
            versions, found = cache.fold_cells(conn, parts)
        folded = list(found)
        if parts.raw:
            found += _raw_cells(conn, raw_filter(parts))
        if window_parts(conn, from_ms, to_ms) == parts and (
            cache is None or _fold_versions(conn, parts) == versions
        ):
            if cache is not None:
                cache.keep(versions, folded)
            for cell in found:
                _add(cells, cell)
            return cells, parts.folded_days
    for cell in _raw_cells(conn, u.c.created_at.between(from_ms, to_ms), by_actor=by_actor):
        _add(cells, cell)
    return cells, 0


def read_spend_figures(
    conn: Connection,
    *,
    now_ms: int,
    by_actor: dict[str, Sums] | None = None,
    cache: MetricsCache | None = None,
) -> SpendFigures:
    """Spend today and this month to ``now_ms`` (UTC) by model and tenant. Today is read once
    (raw: a day is folded only once it has closed) and added to the month's earlier days; with
    ``by_actor``, today's sums by actor are added there from the same statement."""
    today = ms_to_date(now_ms)
    day_start = day_start_ms(today)
    month_start = day_start_ms(date(today.year, today.month, 1))
    day, _ = _window_cells(conn, day_start, now_ms, by_actor=by_actor)
    earlier, folded = _window_cells(conn, month_start, day_start - 1, cache=cache)
    month = dict(earlier)
    for cell in day.values():
        _add(month, cell)
    return SpendFigures(
        day=tuple(day.values()),
        month=tuple(month.values()),
        folded_days=folded,
        earlier_days=today.day - 1,
        at_ms=now_ms,
    )


# --- budgets ------------------------------------------------------------------------------------


def _sums_of(cell: SpendCell) -> Sums:
    return (cell.input_tokens + cell.output_tokens, cell.cost_usd or 0.0, cell.unpriced_turns)


@dataclass(frozen=True)
class _SpendRead:
    """What the spend group read, handed to the budgets group: the figures and today's sums by
    actor from the same statement."""

    figures: SpendFigures
    actors_today: dict[str, Sums]


def _derived_sums(read: _SpendRead) -> dict[tuple[str, str], dict[str, Sums]]:
    """Each (scope kind, period) the spend figures cover, its sums by scope ref: tenants' and
    the platform's day and month (from the cells by model and tenant), actors' day."""
    out: dict[tuple[str, str], dict[str, Sums]] = {("actor", "day"): read.actors_today}
    for period, cells in (("day", read.figures.day), ("month", read.figures.month)):
        tenants: dict[str, Sums] = {}
        platform: dict[str, Sums] = {}
        for cell in cells:
            if cell.tenant_ref is not None:
                add_sums(tenants, cell.tenant_ref, _sums_of(cell))
            add_sums(platform, "", _sums_of(cell))
        out[("tenant", period)] = tenants
        out[("global", period)] = platform
    return out


def read_budget_figures(
    conn: Connection, *, now_ms: int, spend: _SpendRead | None = None
) -> list[BudgetStatus]:
    """Every saved budget's period holding ``now_ms`` (``budgets.evaluate_budgets``).

    Given what the spend group has just read at the same instant (``agora metrics``), the
    tenants' and the platform's day and month budgets and the actors' day budgets are taken from
    it rather than read again (today's rows and the month's fold rows were each read once; the
    sums are the same, measured in tests/metrics); the others (weeks, actors' months) are
    evaluated here."""
    budgets = list_budgets(conn)
    if spend is None or spend.figures.at_ms != now_ms:
        return evaluate_budgets(conn, budgets, at_ms=now_ms)
    derived = _derived_sums(spend)
    rest = [b for b in budgets if (b.scope_kind, b.period) not in derived]
    evaluated = {
        id(b): s for b, s in zip(rest, evaluate_budgets(conn, rest, at_ms=now_ms), strict=True)
    }
    out = []
    for budget in budgets:
        sums = derived.get((budget.scope_kind, budget.period))
        if sums is None:
            out.append(evaluated[id(budget)])
        else:
            used = sums.get(budget.scope_ref, (0, 0.0, 0))
            out.append(status_from_sums(budget, at_ms=now_ms, sums=used))
    return out


# --- the fold -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FoldFigures:
    """How far the daily fold lags at ``now``: closed days (their end plus the grace period
    past) from the ledger's first day that have no fold row (``unfolded_days``: the next ``agora
    spend fold`` folds them), folded days marked dirty (reports read them raw until refolded),
    and when a day was last folded."""

    unfolded_days: int
    dirty_days: int
    last_folded_at: int | None


def read_fold_figures(
    conn: Connection, *, now_ms: int, grace_ms: int = DEFAULT_GRACE_MS
) -> FoldFigures:
    """The fold's lag: the ledger's first instant (an index endpoint) and one read of the fold's
    day list (a row a day)."""
    last = (now_ms - grace_ms) // DAY_MS - 1  # the last closed day, as ``fold`` decides
    first_ms = conn.execute(select(func.min(u.c.created_at))).scalar()
    first = None if first_ms is None else int(first_ms) // DAY_MS
    in_range = (
        literal_column("0")
        if first is None or first > last
        else func.coalesce(func.sum(case((f.c.day.between(first, last), 1), else_=0)), 0)
    )
    row = conn.execute(
        select(
            in_range.label("folded"),
            func.coalesce(func.sum(case((f.c.dirty != 0, 1), else_=0)), 0).label("dirty"),
            func.max(f.c.folded_at).label("last"),
        )
    ).one()
    closed = 0 if first is None or first > last else last - first + 1
    return FoldFigures(
        unfolded_days=max(0, closed - int(row.folded)),
        dirty_days=int(row.dirty),
        last_folded_at=None if row.last is None else int(row.last),
    )


# --- frames -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FrameFigures:
    """What ``frames purge`` with the same TTL would delete now: runs idle past the TTL, and
    their rows."""

    runs: int
    rows: int


def read_frame_figures(conn: Connection, *, now_ms: int, ttl_s: int) -> FrameFigures:
    """Runs whose newest frame is older than ``ttl_s``: the runs with a row before the cutoff
    (a range of ``(created_at, run_id)``), each read through the primary key."""
    check_int("ttl_s", ttl_s, low=1, high=MAX_FRAME_TTL_S)
    cutoff = now_ms - ttl_s * 1000
    aged = select(sf.c.run_id).where(sf.c.created_at < cutoff)
    per_run = (
        select(sf.c.run_id, func.count().label("n"))
        .where(sf.c.run_id.in_(aged))
        .group_by(sf.c.run_id)
        .having(func.max(sf.c.created_at) < cutoff)
        .subquery()
    )
    row = conn.execute(
        select(func.count().label("runs"), func.coalesce(func.sum(per_run.c.n), 0).label("rows"))
    ).one()
    return FrameFigures(runs=int(row.runs), rows=int(row.rows))


# --- the schema ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SchemaFigures:
    """The main chain's applied revision (``None``: migrations never ran; a provisioned schema
    can still be current), its head, and how many differences ``db check`` finds."""

    revision: str | None
    head: str
    problems: int

    @property
    def current(self) -> bool:
        return self.problems == 0


@functools.cache
def _main_chain() -> tuple[str, frozenset[str]]:
    """The main chain's head and every revision on it: the shipped migrations do not change
    while a process runs, so they are read once (Alembic parses every script: ~20-50 ms)."""
    script = script_directory()
    head = script.get_revision(f"{MAIN_BRANCH}@head")
    assert head is not None
    chain = frozenset(rev.revision for rev in script.iterate_revisions(head.revision, "base"))
    return str(head.revision), chain


_VERSIONS = f"SELECT version_num FROM {VERSION_TABLE}"


def _applied_revision(conn: Connection, chain: frozenset[str]) -> str | None:
    """The main chain's revision in the version table, or ``None`` (no table, no row)."""
    if not inspect(conn).has_table(VERSION_TABLE):
        return None
    found = [str(v) for (v,) in conn.execute(text(_VERSIONS)) if str(v) in chain]
    return found[0] if found else None


def read_schema_figures(conn: Connection) -> SchemaFigures:
    """The revision, the head and the drift: what ``db status`` reports as ``revision``,
    ``head`` and ``schema_current``."""
    head, chain = _main_chain()
    return SchemaFigures(
        revision=_applied_revision(conn, chain),
        head=head,
        problems=len(check_agent_tables(conn)),
    )


# --- who may read them --------------------------------------------------------------------------

# Whether row-level security applies to this session on any agent table that has it enabled.
_RLS_ACTIVE = (
    "SELECT coalesce(bool_or(row_security_active(t)), false) FROM (VALUES "
    "(to_regclass('agent_thread')), (to_regclass('agent_token_usage')), "
    "(to_regclass('agent_action_proposal')), (to_regclass('agent_run')), "
    "(to_regclass('agent_usage_daily')), (to_regclass('agent_stream_frame'))) AS v(t) "
    "WHERE t IS NOT NULL"
)


def check_metrics_privilege(conn: Connection) -> None:
    """Refuse (``InvalidInput``) a session that row-level security would narrow to some
    tenants' rows (PostgreSQL): the figures span every tenant. One query; nothing elsewhere."""
    if not dialect_of(conn).has_row_level_security:
        return
    if conn.execute(text(_RLS_ACTIVE)).scalar():
        role = conn.execute(text("SELECT current_user")).scalar()
        raise InvalidInput(
            f"metrics read every tenant's rows, and row-level security narrows role {role!r} "
            "to some of them: read them as a superuser or a BYPASSRLS role (a read-only "
            "monitoring login), never as the app role"
        )


# --- one collection -----------------------------------------------------------------------------


@dataclass(frozen=True)
class MetricsSnapshot:
    """One collection at ``at_ms``: each group's figures (``None`` where it failed), each
    group's error (one line, credentials scrubbed) and seconds, and the whole collection's
    seconds."""

    at_ms: int
    seconds: float
    schema: SchemaFigures | None = None
    inbox: InboxFigures | None = None
    executions: ExecutionFigures | None = None
    runs: tuple[RunCount, ...] | None = None
    spend: SpendFigures | None = None
    budgets: tuple[BudgetStatus, ...] | None = None
    fold: FoldFigures | None = None
    frames: FrameFigures | None = None
    errors: dict[str, AgoraError] = field(default_factory=dict)
    group_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors


def _failure(exc: Exception) -> AgoraError:
    translated = translate_error(exc)
    if translated is not None:
        return translated
    return AgoraError(f"unexpected {type(exc).__name__}: {scrub(str(exc))}")


def collect_metrics(
    engine: Engine,
    *,
    clock: Clock | None = None,
    frames_ttl_s: int = DEFAULT_FRAME_TTL_S,
    groups: Iterable[MetricsGroup] = GROUPS,
    cache: MetricsCache | None = None,
) -> MetricsSnapshot:
    """Read every group (each in its own read-only transaction, so one failing leaves the rest)
    at one instant of ``clock``.

    A group's failure is recorded, never raised: an ``AgoraError`` (a driver error translated
    once, by ``engine.translate_error``; anything else as "unexpected …"). Its figures are then
    ``None``: a failed group exports nothing rather than stale or partial figures.
    """
    check_int("frames_ttl_s", frames_ttl_s, low=1, high=MAX_FRAME_TTL_S)
    now = (clock or SystemClock()).now_ms()
    spent: list[_SpendRead] = []  # the spend group's read, for the budgets group

    def spend_group(conn: Connection) -> SpendFigures:
        actors: dict[str, Sums] = {}
        figures = read_spend_figures(conn, now_ms=now, by_actor=actors, cache=cache)
        spent.append(_SpendRead(figures, actors))
        return figures

    readers: dict[MetricsGroup, Callable[[Connection], Any]] = {
        "schema": read_schema_figures,
        "inbox": lambda c: read_inbox_figures(c, now_ms=now),
        "executions": lambda c: read_execution_figures(c, now_ms=now),
        "runs": lambda c: tuple(count_runs_started_since(c, since_ms=now - HOUR_MS)),
        "spend": spend_group,
        "budgets": lambda c: tuple(
            read_budget_figures(c, now_ms=now, spend=spent[0] if spent else None)
        ),
        "fold": lambda c: read_fold_figures(c, now_ms=now),
        "frames": lambda c: read_frame_figures(c, now_ms=now, ttl_s=frames_ttl_s),
    }
    values: dict[str, Any] = {}
    errors: dict[str, AgoraError] = {}
    seconds: dict[str, float] = {}
    began = time.perf_counter()
    for group in groups:
        if group not in readers:
            raise InvalidInput(f"no metrics group {group!r}: one of {', '.join(GROUPS)}")
        start = time.perf_counter()
        try:
            with engine.connect().execution_options(sqlite_deferred=True) as conn:
                values[group] = readers[group](conn)
                conn.rollback()
        except Exception as exc:  # a group's failure is a figure (agora_metrics_group_up 0)
            errors[group] = _failure(exc)
        seconds[group] = time.perf_counter() - start
    return MetricsSnapshot(
        at_ms=now,
        seconds=time.perf_counter() - began,
        errors=errors,
        group_seconds=seconds,
        **values,
    )
