"""Ledger reports: spend rollups, computed by the database (quota windows: ``budgets``).

They read ``agent_token_usage`` only (the writer is ``usage.record_usage``). Windows are UTC and
inclusive: a day runs from 00:00:00.000 to 23:59:59.999. ``spend`` is one ``SUM … GROUP BY``
statement over ``agent_token_usage_created_idx`` (``_actor_created_idx`` with an actor filter);
day buckets are ``created_at DIV 86400000`` with the literal inlined (PostgreSQL refuses a GROUP BY
that differs from the SELECT only by a bound parameter), and months are folded from days here.

A row's tenant — ``--by tenant``, a tenant filter — is its own ``tenant_ref``, else its thread's
(``ledger_tenant.py``): the runtime writes its rows with none.

Unknown cost is never free: ``cost_usd`` sums known costs only and is ``None`` for a group whose
rows are all unpriced, and ``unpriced_turns`` counts the rows without a cost. Cache tokens are
subsets of ``input_tokens`` and are never added to it again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, date, timedelta
from itertools import pairwise
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import BigInteger, case, func, literal_column, select

from agora_cli.store._clock import day_start_ms, day_window
from agora_cli.store._dialects import dialect_of
from agora_cli.store._errors import InvalidInput
from agora_cli.store._fold import fold_filter, raw_filter, rollup_covers, window_parts
from agora_cli.store._ledger_tenant import (
    effective_tenant,
    inherits_tenant,
    ledger_with_threads,
    tenant_is,
    window_first,
)
from agora_cli.store._schema import token_usage, usage_daily, usage_model_daily
from agora_cli.store._sqlexpr import exact_eq, finite_cost, provider_cost
from agora_cli.store._values import (
    check_identity,
    check_instant,
    check_optional_identity,
)
from agora_cli.store._windows import (
    DIMENSION_KEYS,
    SPEND_GROUPINGS,
    SPEND_ORDERS,
    TIME_KEYS,
    check_zone,
    local_date,
    local_day_start_ms,
    local_day_window,
    offset_segments,
    parse_grouping,
    zone_of,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection
    from sqlalchemy.sql import ColumnElement, Select

__all__ = [
    "DIMENSION_KEYS",
    "SPEND_GROUPINGS",
    "SPEND_ORDERS",
    "TIME_KEYS",
    "SpendPeriod",
    "SpendReport",
    "SpendRow",
    "UnpricedSpend",
    "list_unpriced_models",
    "spend",
]

_EPOCH = date(1970, 1, 1)
_KEY_COLUMNS = {"model": "model_id", "actor": "actor_ref", "thread": "thread_id"}


@dataclass(frozen=True)
class SpendRow:
    """One group of a spend report (``key`` is ``None`` for rows with no tenant)."""

    key: str | None
    turns: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_usd: float | None
    estimated_usd: float
    unpriced_turns: int


@dataclass(frozen=True)
class SpendPeriod:
    """One group of a two-level report's outer level (``--by day,model``: a day;
    ``model,actor``: a model): its rows of the inner level and their total."""

    key: str | None
    rows: list[SpendRow]
    total: SpendRow


@dataclass(frozen=True)
class SpendReport:
    """A spend rollup: the groups in order and their total (whose key is ``None``).

    For a two-level report (``by="day,model"``, ``"model,actor"``) ``periods`` holds each
    outer group's rows and ``rows`` each outer group's total; for a one-level report
    ``periods`` is empty. ``keys`` names the levels; ``from_day``/``to_day`` are the window's
    first and last local day in ``tz``.
    """

    by: str
    from_day: date
    to_day: date
    from_ms: int
    to_ms: int
    provider_cost_only: bool
    rows: list[SpendRow]
    total: SpendRow
    periods: list[SpendPeriod] = field(default_factory=list)
    folded_days: int = 0
    keys: tuple[str, ...] = ()
    tz: str = "UTC"


@dataclass(frozen=True)
class UnpricedSpend:
    """A model id with ledger rows of unknown cost in a window."""

    model_id: str
    turns: int


# --- spend ---------------------------------------------------------------------------------


def _window(from_day: date, to_day: date) -> tuple[int, int]:
    if from_day > to_day:
        raise InvalidInput(
            f"the window starts ({from_day.isoformat()}) after it ends ({to_day.isoformat()})"
        )
    return day_start_ms(from_day), day_window(to_day)[1]


def _filtered(
    q: Select[Any],
    *,
    from_ms: int,
    to_ms: int,
    actor: str | None,
    tenant: str | None,
    model: str | None,
) -> Select[Any]:
    q = q.where(token_usage.c.created_at.between(from_ms, to_ms))
    if check_optional_identity("actor", actor) is not None:
        q = q.where(exact_eq(token_usage.c.actor_ref, actor))
    if tenant is not None:
        q = q.where(tenant_is(check_identity("tenant", tenant)))
    if check_optional_identity("model", model) is not None:
        q = q.where(exact_eq(token_usage.c.model_id, model))
    return q


def _spend_measures(provider_cost_only: bool) -> list[ColumnElement[Any]]:
    u = token_usage.c
    known = finite_cost(u.cost_usd)  # a non-finite cost (another writer's) is unpriced
    if provider_cost_only:
        cost = func.sum(provider_cost(known, u.cost_source))
        estimated: ColumnElement[Any] = literal_column("0")
    else:
        cost = func.sum(known)
        estimated = func.sum(case((u.cost_source == "estimate", known), else_=0))
    return [
        func.count().label("turns"),
        func.sum(u.input_tokens).label("input_tokens"),
        func.sum(u.output_tokens).label("output_tokens"),
        func.coalesce(func.sum(u.cache_read_tokens), 0).label("cache_read_tokens"),
        func.coalesce(func.sum(u.cache_write_tokens), 0).label("cache_write_tokens"),
        cost.label("cost_usd"),
        estimated.label("estimated_usd"),
        func.count(known).label("priced_turns"),
    ]


def _row(key: str | None, r: Any) -> SpendRow:
    turns = int(r.turns)
    return SpendRow(
        key=key,
        turns=turns,
        input_tokens=int(r.input_tokens or 0),
        output_tokens=int(r.output_tokens or 0),
        cache_read_tokens=int(r.cache_read_tokens or 0),
        cache_write_tokens=int(r.cache_write_tokens or 0),
        cost_usd=None if r.cost_usd is None else float(r.cost_usd),
        estimated_usd=float(r.estimated_usd or 0),
        unpriced_turns=turns - int(r.priced_turns),
    )


def _fold(key: str | None, rows: list[SpendRow]) -> SpendRow:
    """Sum groups into one (``cost_usd`` stays ``None`` only if every group's is)."""
    if len(rows) == 1:  # most cells of a two-key report: nothing to add up
        return rows[0] if rows[0].key == key else replace(rows[0], key=key)
    costs = [r.cost_usd for r in rows if r.cost_usd is not None]
    return SpendRow(
        key=key,
        turns=sum(r.turns for r in rows),
        input_tokens=sum(r.input_tokens for r in rows),
        output_tokens=sum(r.output_tokens for r in rows),
        cache_read_tokens=sum(r.cache_read_tokens for r in rows),
        cache_write_tokens=sum(r.cache_write_tokens for r in rows),
        cost_usd=sum(costs) if costs else None,
        estimated_usd=sum(r.estimated_usd for r in rows),
        unpriced_turns=sum(r.unpriced_turns for r in rows),
    )


def _by_cost(row: SpendRow) -> tuple[Any, ...]:
    # cost descending (unknown after every known cost), then tokens descending, then key: a
    # total order. The cost is compared as shown (10 decimals): the fold and the ledger sum the
    # same rows in another order (0.1 + 0.2 vs 0.3), and equal costs must sort the same.
    return (
        row.cost_usd is None,
        -round(row.cost_usd or 0.0, 10),
        -(row.input_tokens + row.output_tokens),
        row.key is None,
        row.key or "",
    )


def _by_tokens(row: SpendRow) -> tuple[Any, ...]:
    return (-(row.input_tokens + row.output_tokens), *_by_cost(row))


def _by_key(row: SpendRow) -> tuple[Any, ...]:
    return (row.key is None, row.key or "")


_ORDER = {"cost": _by_cost, "tokens": _by_tokens, "key": _by_key}


def _time_key(time: str, day_number: int) -> str:
    """A day bucket's key at ``time``: the day, its week's Monday, or its month."""
    day = _EPOCH + timedelta(days=day_number)
    if time == "week":
        day -= timedelta(days=day.weekday())
    return day.isoformat()[:7] if time == "month" else day.isoformat()


class _Group(NamedTuple):
    """A group's sums, from the ledger, the fold, or both merged: its day number (with a
    period) and its value of each dimension (``keys``, in the grouping's order)."""

    day: int | None
    keys: tuple[str | None, ...]
    turns: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_usd: float | None
    estimated_usd: float
    priced_turns: int


def _merge(groups: Iterable[_Group]) -> list[_Group]:
    merged: dict[tuple[int | None, tuple[str | None, ...]], _Group] = {}
    for g in groups:
        old = merged.get((g.day, g.keys))
        if old is None:
            merged[(g.day, g.keys)] = g
            continue
        costs = [c for c in (old.cost_usd, g.cost_usd) if c is not None]
        merged[(g.day, g.keys)] = _Group(
            g.day,
            g.keys,
            old.turns + g.turns,
            old.input_tokens + g.input_tokens,
            old.output_tokens + g.output_tokens,
            old.cache_read_tokens + g.cache_read_tokens,
            old.cache_write_tokens + g.cache_write_tokens,
            sum(costs) if costs else None,
            old.estimated_usd + g.estimated_usd,
            old.priced_turns + g.priced_turns,
        )
    return list(merged.values())


def _as_group(r: Any, *, time: bool, dims: tuple[str, ...]) -> _Group:
    return _Group(
        int(r.day) if time else None,
        tuple(getattr(r, f"k{i}") for i in range(len(dims))),
        int(r.turns),
        int(r.input_tokens or 0),
        int(r.output_tokens or 0),
        int(r.cache_read_tokens or 0),
        int(r.cache_write_tokens or 0),
        None if r.cost_usd is None else float(r.cost_usd),
        float(r.estimated_usd or 0),
        int(r.priced_turns),
    )


def _exact_keys(
    conn: Connection, keys: list[ColumnElement[Any]], *, time: bool
) -> list[ColumnElement[Any]]:
    """GROUP BY ``keys`` (a day, then identities), on MySQL/MariaDB with each identity's length:
    their PAD SPACE collation would merge ``'alice'`` and ``'alice '`` into one group (and name
    it either way). Elsewhere text compares exactly already."""
    identities = keys[1:] if time else keys
    if not dialect_of(conn).pads_spaces or not identities:
        return keys
    return [*keys, *(func.char_length(k) for k in identities)]


def _local_day(conn: Connection, column: Any, segments: list[tuple[int, int]]) -> Any:
    """``column`` (epoch ms) as a local day number: ``(column + offset) DIV 86400000`` with the
    zone's offset at that instant, a ``CASE`` over the window's offset changes (``segments``,
    ``windows.offset_segments``), every literal inlined (PostgreSQL refuses a GROUP BY that
    differs from the SELECT by a bound parameter)."""
    if len(segments) == 1 and segments[0][1] == 0:
        return dialect_of(conn).day_bucket(column)
    offset: Any
    if len(segments) == 1:
        offset = literal_column(str(segments[0][1]), BigInteger())
    else:
        offset = case(
            *(
                (column < literal_column(str(start), BigInteger()), literal_column(str(before)))
                for (_, before), (start, _) in pairwise(segments)
            ),
            else_=literal_column(str(segments[-1][1])),
        )
    return dialect_of(conn).day_bucket((column + offset).self_group())


def _raw_groups(
    conn: Connection,
    *,
    time: bool,
    dims: tuple[str, ...],
    where: ColumnElement[bool],
    filters: dict[str, str | None],
    provider_cost_only: bool,
    segments: list[tuple[int, int]],
) -> list[_Group]:
    u = token_usage.c
    keys: list[ColumnElement[Any]] = []
    if time:
        keys.append(_local_day(conn, token_usage.c.created_at, segments).label("day"))
    for i, dim in enumerate(dims):
        if dim == "tenant":  # the row's own tenant, else its thread's (ledger_tenant.py)
            keys.append(effective_tenant().label(f"k{i}"))
        else:
            keys.append(u[_KEY_COLUMNS[dim]].label(f"k{i}"))
    q = select(*keys, *_spend_measures(provider_cost_only))
    q = q.group_by(*_exact_keys(conn, [k.element for k in keys], time=time))
    if "tenant" in dims:
        q = q.select_from(ledger_with_threads())
    q = q.where(where)
    for name, column in (("actor", u.actor_ref), ("model", u.model_id)):
        if filters[name] is not None:
            q = q.where(exact_eq(column, filters[name]))
    tenant = filters["tenant"]
    if tenant is None:
        return [_as_group(r, time=time, dims=dims) for r in conn.execute(q)]
    # The rows carrying the tenant and those inheriting it from their thread, one statement
    # each: each reads a range of its own index (see budgets._sums); merged by key.
    own, inherited = q.where(exact_eq(u.tenant_ref, tenant)), q.where(inherits_tenant(tenant))
    return _merge(
        _as_group(r, time=time, dims=dims)
        for stmt in (own, window_first(inherited))
        for r in conn.execute(stmt)
    )


def _fold_groups(
    conn: Connection,
    *,
    time: bool,
    dims: tuple[str, ...],
    where: ColumnElement[bool],
    filters: dict[str, str | None],
    rollup: bool = False,
) -> list[_Group]:
    """Groups of the daily fold, or (``rollup``) of its per-model rollup, whose columns are the
    same but actor and tenant."""
    d = usage_model_daily.c if rollup else usage_daily.c
    columns: dict[str, ColumnElement[Any]] = {"model": d.model_id}
    if not rollup:
        columns["actor"] = d.actor_ref
        columns["tenant"] = case((d.tenant_key == "", None), else_=d.tenant_key)
    keys: list[ColumnElement[Any]] = []
    if time:
        keys.append(d.day.label("day"))
    keys += [columns[dim].label(f"k{i}") for i, dim in enumerate(dims)]
    measures = [
        func.sum(d.turns).label("turns"),
        func.sum(d.input_tokens).label("input_tokens"),
        func.sum(d.output_tokens).label("output_tokens"),
        func.sum(d.cache_read_tokens).label("cache_read_tokens"),
        func.sum(d.cache_write_tokens).label("cache_write_tokens"),
        func.sum(finite_cost(d.cost_usd)).label("cost_usd"),
        func.sum(d.estimated_usd).label("estimated_usd"),
        (func.sum(d.turns) - func.sum(d.unpriced_turns)).label("priced_turns"),
    ]
    q = select(*keys, *measures).where(where)
    if keys:
        q = q.group_by(*_exact_keys(conn, [k.element for k in keys], time=time))
    if filters["actor"] is not None:
        q = q.where(exact_eq(usage_daily.c.actor_ref, filters["actor"]))
    if filters["tenant"] is not None:
        q = q.where(exact_eq(usage_daily.c.tenant_key, filters["tenant"]))
    if filters["model"] is not None:
        q = q.where(exact_eq(d.model_id, filters["model"]))
    return [_as_group(r, time=time, dims=dims) for r in conn.execute(q) if r.turns is not None]


def _groups(
    conn: Connection,
    *,
    time: bool,
    dims: tuple[str, ...],
    from_ms: int,
    to_ms: int,
    filters: dict[str, str | None],
    provider_cost_only: bool,
    use_fold: bool,
    segments: list[tuple[int, int]],
) -> tuple[list[_Group], int]:
    """The window's groups: folded clean days from the fold, the rest from the ledger.

    A grouping by model and/or time with no actor or tenant filter reads the per-model rollup
    where it covers the folded days (``fold.rollup_covers``), else ``agent_usage_daily``. The
    fold's state is read before and after the queries; if a fold, a refold or a change that
    marks a day dirty landed in between, the reads are repeated (then, at worst, the whole
    window is read raw), so the merge never counts a day twice or misses one.
    """
    window = token_usage.c.created_at.between(from_ms, to_ms)
    by_model = set(dims) <= {"model"} and filters["actor"] is None and filters["tenant"] is None
    if use_fold:
        for _ in range(3):
            parts = window_parts(conn, from_ms, to_ms)
            if not parts.fold_days:
                break
            rollup = by_model and rollup_covers(conn, parts)
            groups = []
            if parts.raw:
                groups += _raw_groups(
                    conn,
                    time=time,
                    dims=dims,
                    where=raw_filter(parts),
                    filters=filters,
                    provider_cost_only=provider_cost_only,
                    segments=segments,
                )
            groups += _fold_groups(
                conn,
                time=time,
                dims=dims,
                where=fold_filter(parts, rollup=rollup),
                filters=filters,
                rollup=rollup,
            )
            if window_parts(conn, from_ms, to_ms) == parts:
                return _merge(groups), parts.folded_days
    groups = _raw_groups(
        conn,
        time=time,
        dims=dims,
        where=window,
        filters=filters,
        provider_cost_only=provider_cost_only,
        segments=segments,
    )
    return groups, 0


def _level_value(level: str, g: _Group, dims: tuple[str, ...]) -> str | None:
    if level in TIME_KEYS:
        return _time_key(level, g.day or 0)
    return g.keys[dims.index(level)]


def _spend_segments(conn: Connection, zone: Any, from_ms: int, to_ms: int) -> list[tuple[int, int]]:
    """The zone's offsets over the ledger rows of the window (``windows.offset_segments``),
    probed only between the window's first and last row (two index lookups): a window to the
    year 9999 costs no more than its data."""
    if zone is None or zone is UTC:
        return [(from_ms, 0)]
    c = token_usage.c.created_at
    lo, hi = conn.execute(select(func.min(c), func.max(c)).where(c.between(from_ms, to_ms))).one()
    if lo is None:
        return [(from_ms, 0)]
    return offset_segments(zone, int(lo), int(hi))


def spend(
    conn: Connection,
    *,
    by: str,
    from_day: date | None = None,
    to_day: date | None = None,
    actor: str | None = None,
    tenant: str | None = None,
    model: str | None = None,
    provider_cost_only: bool = False,
    order: str | None = None,
    raw: bool = False,
    from_ms: int | None = None,
    to_ms: int | None = None,
    tz: str | None = None,
) -> SpendReport:
    """Roll the ledger up over an inclusive window, one ``SUM … GROUP BY`` statement.

    The window is ``from_day``–``to_day`` (whole days in ``tz``, UTC by default) or the
    instants ``from_ms``–``to_ms``. ``by`` is one key — a dimension (``model``, ``actor``,
    ``tenant``, ``thread``) or a period (``day``, ``week`` — ISO weeks, keyed by their Monday —
    ``month``) — or two different keys joined by a comma, at most one a period: ``day,model``
    breaks each day down by model, ``model,actor`` each model by actor (``periods`` holds the
    outer level's groups, each with its rows and total). Days are local days of ``tz``, grouped
    in the database (the zone's offset is a ``CASE`` over its changes in the window) and folded
    into weeks and months here. Dimension groups come by ``order``: cost (the default: cost
    descending, unknown after every known cost, then tokens, then key), tokens, or key; periods
    always in time order (and one-level time reports too unless an order is given). With
    ``provider_cost_only``, ``cost_usd`` sums provider-reported costs and ``estimated_usd`` is 0;
    ``unpriced_turns`` still counts the rows with no cost.

    Whole UTC days that are folded and clean are read from the daily fold (``fold.py``; by
    model or time alone with no actor or tenant filter, from its per-model rollup) and the rest
    from the ledger, merged: the figures equal the ledger's (``folded_days`` says how many days
    came from the fold). ``raw=True``, a thread dimension, a provider-only report, and periods
    in a zone whose offset is not 0 (a fold day is a UTC day) read the ledger alone.
    """
    keys = parse_grouping(by)
    if order is not None and order not in SPEND_ORDERS:
        raise InvalidInput(
            f"order must be one of {', '.join(SPEND_ORDERS)}, not {order!r}", param="order"
        )
    zone_name = check_zone(tz)
    zone = zone_of(zone_name)
    if from_ms is not None or to_ms is not None:
        if from_ms is None or to_ms is None or from_day is not None or to_day is not None:
            raise InvalidInput("give the window as from_day/to_day or as from_ms/to_ms")
        check_instant("from_ms", from_ms)
        check_instant("to_ms", to_ms)
        if from_ms > to_ms:
            raise InvalidInput("the window starts after it ends (from_ms > to_ms)")
        from_day, to_day = local_date(from_ms, zone), local_date(to_ms, zone)
    else:
        if from_day is None or to_day is None:
            raise InvalidInput("give the window: from_day and to_day (or from_ms and to_ms)")
        _window(from_day, to_day)
        from_ms, to_ms = local_day_start_ms(from_day, zone), local_day_window(to_day, zone)[1]
    filters = {"actor": actor, "tenant": tenant, "model": model}
    for name, value in filters.items():
        check_optional_identity(name, value)
    time = next((k for k in keys if k in TIME_KEYS), "")
    dims = tuple(k for k in keys if k not in TIME_KEYS)
    segments = _spend_segments(conn, zone, from_ms, to_ms) if time else [(from_ms, 0)]
    # The fold keeps no thread, cannot tell "no provider-reported row" from $0 of them, and
    # its days are UTC days: local days of a zone ahead of or behind UTC come from the ledger.
    use_fold = (
        not raw
        and "thread" not in dims
        and not provider_cost_only
        and all(offset == 0 for _, offset in segments)
    )
    fetched, folded_days = _groups(
        conn,
        time=bool(time),
        dims=dims,
        from_ms=from_ms,
        to_ms=to_ms,
        filters=filters,
        provider_cost_only=provider_cost_only,
        use_fold=use_fold,
        segments=segments,
    )
    sort = _ORDER[order or "cost"]
    fetched.sort(key=lambda g: g.day or 0)  # periods come in time order
    outer = keys[0]
    periods: list[SpendPeriod] = []
    if len(keys) == 1:
        buckets: dict[str | None, list[SpendRow]] = {}
        for g in fetched:
            key = _level_value(outer, g, dims)
            buckets.setdefault(key, []).append(_row(key, g))
        rows = [_fold(key, group) for key, group in buckets.items()]
        if outer not in TIME_KEYS or order is not None:
            rows.sort(key=sort)
    else:
        inner = keys[1]
        cells: dict[str | None, dict[str | None, list[SpendRow]]] = {}
        for g in fetched:
            a, b = _level_value(outer, g, dims), _level_value(inner, g, dims)
            cells.setdefault(a, {}).setdefault(b, []).append(_row(b, g))
        for key, groups in cells.items():
            members = [_fold(k, g) for k, g in groups.items()]
            if inner not in TIME_KEYS:
                members.sort(key=sort)
            periods.append(SpendPeriod(key, members, _fold(key, members)))
        if outer not in TIME_KEYS:
            periods.sort(key=lambda p: sort(p.total))
        rows = [p.total for p in periods]
    return SpendReport(
        by=",".join(keys),
        from_day=from_day,
        to_day=to_day,
        from_ms=from_ms,
        to_ms=to_ms,
        provider_cost_only=provider_cost_only,
        rows=rows,
        total=_fold(None, rows),
        periods=periods,
        folded_days=folded_days,
        keys=keys,
        tz=zone_name,
    )


def list_unpriced_models(
    conn: Connection,
    *,
    from_day: date | None = None,
    to_day: date | None = None,
    actor: str | None = None,
    tenant: str | None = None,
    model: str | None = None,
    from_ms: int | None = None,
    to_ms: int | None = None,
) -> list[UnpricedSpend]:
    """List the model ids with rows of unknown cost in the window (UTC days ``from_day``–
    ``to_day``, or the instants ``from_ms``–``to_ms``), most rows first."""
    if from_ms is None or to_ms is None:
        if from_day is None or to_day is None:
            raise InvalidInput("give the window: from_day and to_day (or from_ms and to_ms)")
        from_ms, to_ms = _window(from_day, to_day)
    u = token_usage.c
    turns = func.count().label("turns")
    q = select(u.model_id, turns).where(finite_cost(u.cost_usd).is_(None))
    q = q.group_by(*_exact_keys(conn, [u.model_id], time=False))
    q = _filtered(q, from_ms=from_ms, to_ms=to_ms, actor=actor, tenant=tenant, model=model)
    found = [UnpricedSpend(r.model_id, int(r.turns)) for r in conn.execute(q)]
    return sorted(found, key=lambda m: (-m.turns, m.model_id))
