"""Saved budgets: spending limits per actor, tenant or the whole platform, and their state now.

A budget (``agent_budget``) limits what a scope may spend in a UTC period — ``day``, ``week``
(Monday 00:00 UTC onward) or ``month`` — in USD, in tokens, or both, and warns at a fraction of
its limit (``warn_at``, default 0.8). There is at most one budget per (scope, period): setting an
existing one updates it, from any number of processes at once.

Evaluating a budget sums the scope's usage in the period up to an instant (``at_ms``: usage after
it does not count), with the rules of the spend reports: tokens are input + output (cache
tokens are part of input), USD sums the known costs (estimates too unless provider-only), and
unpriced rows are counted, never summed as free. A budget is ``exhausted`` when a limit is
reached (used ≥ limit), ``warning`` when the used share of a limit reaches ``warn_at``, else
``ok``. Each (scope, period) is one indexed ``SUM``: the actor's ``(actor_ref, created_at)``
index, the tenant's ``(tenant_ref, created_at)`` index (revision 0004), or for the global scope
the ``created_at`` index. A ledger row's tenant is its own ``tenant_ref``, else its thread's
(``ledger_tenant.py``): the runtime writes its rows with none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, get_args

from sqlalchemy import delete, func, insert, literal_column, select, update
from sqlalchemy.exc import IntegrityError

from agora_cli.store._clock import Clock, SystemClock
from agora_cli.store._dialects import dialect_of
from agora_cli.store._errors import Conflict, InvalidInput
from agora_cli.store._fold import fold_filter, raw_filter, rollup_covers, window_parts
from agora_cli.store._ids import new_hex_id
from agora_cli.store._ledger_tenant import (
    effective_tenant,
    inherits_tenant,
    ledger_with_threads,
    tenant_in,
    window_first,
)
from agora_cli.store._schema import budget as b
from agora_cli.store._schema import token_usage as u
from agora_cli.store._schema import usage_daily as d
from agora_cli.store._schema import usage_model_daily as m
from agora_cli.store._sqlexpr import exact_eq, finite_cost, provider_cost
from agora_cli.store._values import (
    check_finite,
    check_identity,
    check_instant,
    check_limits,
    check_text,
)
from agora_cli.store._windows import PERIODS, Period, period_window, zone_of

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection
    from sqlalchemy.sql import ColumnElement

__all__ = [
    "DEFAULT_WARN_AT",
    "SCOPE_KINDS",
    "Budget",
    "BudgetChange",
    "BudgetState",
    "BudgetStatus",
    "ScopeKind",
    "add_sums",
    "evaluate_budget",
    "evaluate_budgets",
    "list_budgets",
    "remove_budgets",
    "scope_has_usage",
    "scope_quota",
    "set_budget",
    "status_from_sums",
    "sum_scope_usage",
]

ScopeKind = Literal["actor", "tenant", "global"]
BudgetState = Literal["ok", "warning", "exhausted"]
SCOPE_KINDS: tuple[ScopeKind, ...] = get_args(ScopeKind)
DEFAULT_WARN_AT = 0.8


@dataclass(frozen=True)
class Budget:
    """A saved budget. ``scope_ref`` is ``""`` for the global scope."""

    id: str
    scope_kind: ScopeKind
    scope_ref: str
    period: Period
    limit_usd: float | None
    limit_tokens: int | None
    warn_at: float
    note: str | None
    created_by: str
    created_at: int
    updated_at: int


@dataclass(frozen=True)
class BudgetChange:
    """What ``set_budget`` did: ``inserted``, ``updated`` or ``unchanged``, and the budget now."""

    action: Literal["inserted", "updated", "unchanged"]
    budget: Budget


@dataclass(frozen=True)
class BudgetStatus:
    """A budget's period at an instant: what was used, what is left, and its state.

    ``percent_used`` is the larger share of the given limits, in percent (a limit of 0 is 100 %
    used as soon as it exists); ``remaining_*`` is ``None`` for a limit not set and never below 0.
    """

    budget: Budget
    from_ms: int
    to_ms: int
    tokens: int
    usd: float
    unpriced_turns: int
    percent_used: float
    remaining_tokens: int | None
    remaining_usd: float | None
    state: BudgetState


# --- the table ------------------------------------------------------------------------------


def _scope(scope_kind: str, scope_ref: str | None) -> tuple[ScopeKind, str]:
    if scope_kind not in SCOPE_KINDS:
        raise InvalidInput(
            f"scope_kind must be one of {', '.join(SCOPE_KINDS)}, not {scope_kind!r}",
            param="scope_kind",
        )
    if scope_kind == "global":
        if scope_ref not in (None, ""):
            raise InvalidInput("the global scope has no scope_ref", param="scope_ref")
        return "global", ""
    kind: ScopeKind = "actor" if scope_kind == "actor" else "tenant"
    return kind, check_identity(scope_kind, scope_ref)


def _period(period: str) -> Period:
    if period not in PERIODS:
        raise InvalidInput(
            f"period must be one of {', '.join(PERIODS)}, not {period!r}", param="period"
        )
    return period


def _budget(r: Mapping[Any, Any]) -> Budget:
    return Budget(
        id=r["id"],
        scope_kind=r["scope_kind"],
        scope_ref=r["scope_ref"],
        period=r["period"],
        limit_usd=None if r["limit_usd"] is None else float(r["limit_usd"]),
        limit_tokens=None if r["limit_tokens"] is None else int(r["limit_tokens"]),
        warn_at=float(r["warn_at"]),
        note=r["note"],
        created_by=r["created_by"],
        created_at=int(r["created_at"]),
        updated_at=int(r["updated_at"]),
    )


def _key(scope_kind: str, scope_ref: str, period: str) -> ColumnElement[bool]:
    return (
        (b.c.scope_kind == scope_kind) & exact_eq(b.c.scope_ref, scope_ref) & (b.c.period == period)
    )


def set_budget(
    conn: Connection,
    *,
    scope_kind: str,
    scope_ref: str | None,
    period: str,
    created_by: str,
    limit_usd: float | None = None,
    limit_tokens: int | None = None,
    warn_at: float = DEFAULT_WARN_AT,
    note: str | None = None,
    clock: Clock | None = None,
) -> BudgetChange:
    """Save the budget of a (scope, period), or update the one that exists.

    At least one of ``limit_usd`` and ``limit_tokens``; limits finite and not negative;
    ``warn_at`` a fraction in (0, 1]. Two processes setting the same (scope, period) at once
    leave one row: the loser of the insert race updates the winner's row.
    """
    kind, ref = _scope(scope_kind, scope_ref)
    period = _period(period)
    check_identity("created_by", created_by)
    if limit_usd is None and limit_tokens is None:
        raise InvalidInput("give a limit: in USD, in tokens, or both", param="limit_usd")
    tokens, usd = check_limits("limit_", limit_tokens, limit_usd)
    warn = check_finite("warn_at", warn_at, high=1.0)
    if warn <= 0:
        raise InvalidInput(
            f"warn_at must be a fraction in (0, 1], not {warn_at!r}", param="warn_at"
        )
    if note is not None:
        check_text("note", note)
    now = (clock or SystemClock()).now_ms()
    values = {
        "limit_usd": usd,
        "limit_tokens": tokens,
        "warn_at": warn,
        "note": note,
    }
    for _ in range(2):
        found = conn.execute(select(b).where(_key(kind, ref, period)).with_for_update()).first()
        if found is not None:
            old = _budget(found._mapping)
            if all(getattr(old, name) == value for name, value in values.items()):
                return BudgetChange("unchanged", old)
            conn.execute(
                update(b)
                .where(b.c.id == old.id)
                .values(**values, updated_at=now)  # created_by stays: who created it
            )
            new = Budget(
                id=old.id,
                scope_kind=kind,
                scope_ref=ref,
                period=period,
                limit_usd=usd,
                limit_tokens=tokens,
                warn_at=warn,
                note=note,
                created_by=old.created_by,
                created_at=old.created_at,
                updated_at=now,
            )
            return BudgetChange("updated", new)
        row = {
            "id": new_hex_id(now),
            "scope_kind": kind,
            "scope_ref": ref,
            "period": period,
            **values,
            "created_by": created_by,
            "created_at": now,
            "updated_at": now,
        }
        try:
            # A savepoint: losing the insert race to another process leaves this transaction
            # usable, and the next round updates the row that won.
            with conn.begin_nested():
                conn.execute(insert(b).values(**row))
        except IntegrityError:
            continue
        return BudgetChange("inserted", _budget(row))
    # The insert lost to a row that the exact lookup does not see: MySQL's PAD SPACE collation
    # holds 'alice' and 'alice ' as one key of the unique index.
    raise Conflict(
        f"the {period} budget of {kind} {ref!r} cannot be saved beside an existing one whose "
        f"{kind} differs only by trailing spaces (this database compares them as equal)"
    )


def list_budgets(
    conn: Connection,
    *,
    scope_kind: str | None = None,
    scope_ref: str | None = None,
    period: str | None = None,
) -> list[Budget]:
    """Saved budgets, optionally of one scope (and period), by scope then period."""
    q = select(b)
    if scope_kind is not None:
        kind, ref = _scope(scope_kind, scope_ref)
        q = q.where(b.c.scope_kind == kind, exact_eq(b.c.scope_ref, ref))
    if period is not None:
        q = q.where(b.c.period == _period(period))
    order = {name: i for i, name in enumerate(PERIODS)}
    found = [_budget(r._mapping) for r in conn.execute(q)]
    return sorted(
        found,
        key=lambda x: (SCOPE_KINDS.index(x.scope_kind), x.scope_ref, order[x.period]),
    )


def remove_budgets(
    conn: Connection, *, scope_kind: str, scope_ref: str | None, period: str | None = None
) -> int:
    """Remove a scope's budget of one period (or all its periods); how many were removed."""
    kind, ref = _scope(scope_kind, scope_ref)
    stmt = delete(b).where(b.c.scope_kind == kind, exact_eq(b.c.scope_ref, ref))
    if period is not None:
        stmt = stmt.where(b.c.period == _period(period))
    return int(conn.execute(stmt).rowcount)


# --- periods and usage --------------------------------------------------------------------------


Sums = tuple[int, float, int]  # tokens (input + output), known USD, unpriced rows


def add_sums(into: dict[str, Sums], ref: str, sums: Sums) -> None:
    """Add ``sums`` to ``into[ref]`` (tokens, USD, unpriced rows)."""
    t, usd, n = into.get(ref, (0, 0.0, 0))
    into[ref] = (t + sums[0], usd + sums[1], n + sums[2])


def _sums(
    conn: Connection,
    *,
    source: str,
    kind: str,
    refs: list[str],
    where: ColumnElement[bool],
    provider_cost_only: bool,
) -> dict[str, Sums]:
    """Sums per scope ref over the ledger (``source="raw"``), the daily fold (``"fold"``) or,
    for the global scope, its per-model rollup (``"rollup"``).

    One ref: a SUM over the scope's index. Several: one statement per 500 refs grouped by the
    ref, and by its byte length too on MySQL, whose PAD SPACE collation puts 'a' and 'a ' in one
    group (and may return either spelling for it).
    """
    if source == "raw":
        # A non-finite cost (another writer's NaN) is unpriced, never a sum's NaN that no limit
        # is ever reached by (sqlexpr.finite_cost).
        known = finite_cost(u.c.cost_usd)
        cost: ColumnElement[Any] = known
        if provider_cost_only:
            cost = provider_cost(known, u.c.cost_source)
        measures = (
            func.coalesce(func.sum(u.c.input_tokens + u.c.output_tokens), 0),
            func.coalesce(func.sum(cost), 0),
            func.count() - func.count(known),
        )
        # The tenant is the row's own, else its thread's (ledger_tenant.py).
        columns = {"actor": u.c.actor_ref, "tenant": effective_tenant()}
    else:
        t = m if source == "rollup" else d  # the rollup has the same measures, no actor/tenant
        measures = (
            func.coalesce(func.sum(t.c.input_tokens + t.c.output_tokens), 0),
            func.coalesce(func.sum(finite_cost(t.c.cost_usd)), 0),
            func.coalesce(func.sum(t.c.unpriced_turns), 0),
        )
        columns = {"actor": d.c.actor_ref, "tenant": d.c.tenant_key}
    if kind == "global":
        tokens, usd, unpriced = conn.execute(select(*measures).where(where)).one()
        return {"": (int(tokens), float(usd), int(unpriced))}
    column = columns[kind]
    raw_tenant = source == "raw" and kind == "tenant"
    if len(refs) == 1:
        # A tenant's raw rows in two statements, the rows carrying it and those inheriting it
        # from a thread: each is a range of its own index, where one statement OR-ing them is
        # read by MariaDB as every NULL-tenant entry of the index (ref_or_null; RESULTS.md).
        matches = (
            [exact_eq(u.c.tenant_ref, refs[0]), inherits_tenant(refs[0])]
            if raw_tenant
            else [exact_eq(column, refs[0])]
        )
        total: Sums = (0, 0.0, 0)
        for n, match in enumerate(matches):
            q = select(*measures).where(where, match)
            tokens, usd, unpriced = conn.execute(window_first(q) if n else q).one()
            total = (total[0] + int(tokens), total[1] + float(usd), total[2] + int(unpriced))
        return {refs[0]: total}
    out: dict[str, Sums] = {}
    padded = dialect_of(conn).pads_spaces
    for chunk in (refs[i : i + 500] for i in range(0, len(refs), 500)):
        exact = {(ref.rstrip(" "), len(ref.encode())): ref for ref in chunk}
        size = func.length(column) if padded else literal_column("0")  # MySQL: bytes
        q = (
            select(column, size, *measures)
            .where(where, tenant_in(chunk) if raw_tenant else column.in_(chunk))
            .group_by(column, *([size] if padded else []))
        )
        if raw_tenant:
            q = q.select_from(ledger_with_threads())
        for value, nbytes, tokens, usd, unpriced in conn.execute(q):
            key = str(value)
            length = int(nbytes) if padded else len(key.encode())
            ref = exact.get((key.rstrip(" "), length))
            if ref is not None:
                out[ref] = (int(tokens), float(usd), int(unpriced))
    return out


def _window_sums(
    conn: Connection,
    *,
    kind: str,
    refs: list[str],
    from_ms: int,
    to_ms: int,
    provider_cost_only: bool,
    raw: bool,
) -> dict[str, Sums]:
    """Sums per ref over ``[from_ms, to_ms]``: folded clean days from the fold, the rest raw.

    The fold's state is read before and after (see ``ledger._groups``); the global scope reads
    the per-model rollup where it covers the folded days; a provider-only sum, or ``raw``, reads
    the ledger alone.
    """
    if not raw and not provider_cost_only:
        for _ in range(3):
            parts = window_parts(conn, from_ms, to_ms)
            if not parts.fold_days:
                break
            total: dict[str, Sums] = {}
            rollup = kind == "global" and rollup_covers(conn, parts)
            found = [
                _sums(
                    conn,
                    source="rollup" if rollup else "fold",
                    kind=kind,
                    refs=refs,
                    where=fold_filter(parts, rollup=rollup),
                    provider_cost_only=False,
                ),
            ]
            if parts.raw:
                found.append(
                    _sums(
                        conn,
                        source="raw",
                        kind=kind,
                        refs=refs,
                        where=raw_filter(parts),
                        provider_cost_only=False,
                    )
                )
            for sums in found:
                for ref, value in sums.items():
                    add_sums(total, ref, value)
            if window_parts(conn, from_ms, to_ms) == parts:
                return total
    window = u.c.created_at.between(from_ms, to_ms)
    return _sums(
        conn,
        source="raw",
        kind=kind,
        refs=refs,
        where=window,
        provider_cost_only=provider_cost_only,
    )


def sum_scope_usage(
    conn: Connection,
    *,
    scope_kind: str,
    scope_ref: str | None,
    from_ms: int,
    to_ms: int,
    provider_cost_only: bool = False,
    raw: bool = False,
) -> Sums:
    """(tokens, known USD, unpriced rows) of a scope in ``[from_ms, to_ms]``: an indexed SUM
    of the ledger, and of the daily fold for whole folded days."""
    kind, ref = _scope(scope_kind, scope_ref)
    sums = _window_sums(
        conn,
        kind=kind,
        refs=[ref],
        from_ms=from_ms,
        to_ms=to_ms,
        provider_cost_only=provider_cost_only,
        raw=raw,
    )
    return sums.get(ref, (0, 0.0, 0))


def _state(budget: Budget, tokens: int, usd: float) -> tuple[float, BudgetState]:
    shares: list[float] = []
    exhausted = False
    for used, limit in ((usd, budget.limit_usd), (float(tokens), budget.limit_tokens)):
        if limit is None:
            continue
        exhausted = exhausted or used >= limit
        shares.append(1.0 if limit == 0 else used / limit)
    share = max(shares, default=0.0)
    if exhausted:
        return share * 100, "exhausted"
    return share * 100, "warning" if share >= budget.warn_at else "ok"


def evaluate_budget(
    conn: Connection,
    budget: Budget,
    *,
    at_ms: int,
    provider_cost_only: bool = False,
    tz: str | None = None,
) -> BudgetStatus:
    """The budget's period holding ``at_ms`` (in zone ``tz``, UTC by default), with usage up
    to ``at_ms`` only."""
    start, end = period_window(budget.period, at_ms, tz=zone_of(tz))
    tokens, usd, unpriced = sum_scope_usage(
        conn,
        scope_kind=budget.scope_kind,
        scope_ref=budget.scope_ref,
        from_ms=start,
        to_ms=min(end, at_ms),
        provider_cost_only=provider_cost_only,
    )
    return _status(budget, start, end, tokens, usd, unpriced)


def _status(
    budget: Budget, start: int, end: int, tokens: int, usd: float, unpriced: int
) -> BudgetStatus:
    percent, state = _state(budget, tokens, usd)
    return BudgetStatus(
        budget=budget,
        from_ms=start,
        to_ms=end,
        tokens=tokens,
        usd=usd,
        unpriced_turns=unpriced,
        percent_used=percent,
        remaining_tokens=(
            None if budget.limit_tokens is None else max(0, budget.limit_tokens - tokens)
        ),
        remaining_usd=None if budget.limit_usd is None else max(0.0, budget.limit_usd - usd),
        state=state,
    )


def status_from_sums(budget: Budget, *, at_ms: int, sums: Sums) -> BudgetStatus:
    """A budget's status at ``at_ms`` (UTC periods) from its period's sums, read elsewhere (``agora
    metrics`` derives them from the spend it has just read, see ``metrics.read_budget_figures``)."""
    start, end = period_window(budget.period, at_ms)
    tokens, usd, unpriced = sums
    return _status(budget, start, end, tokens, usd, unpriced)


def evaluate_budgets(
    conn: Connection,
    budgets: list[Budget],
    *,
    at_ms: int,
    provider_cost_only: bool = False,
    grouped: bool = True,
    tz: str | None = None,
) -> list[BudgetStatus]:
    """Evaluate many budgets at ``at_ms``, in the budgets' order.

    By default each (scope kind, period) is one ``GROUP BY`` statement over the period's rows
    (at most six statements, whatever the number of budgets); ``grouped=False`` runs one
    indexed SUM per budget instead, each reading only that scope's rows. Measured side by side
    in ``tests/bench/bench_budgets.py`` (1,000 budgets, 2M-row ledger, tests/bench/RESULTS.md):
    the round trip and statement overhead of a thousand SUMs costs more than the grouped reads.
    """
    check_instant("at_ms", at_ms)
    zone = zone_of(tz)
    if not grouped:
        return [
            evaluate_budget(conn, budget, at_ms=at_ms, provider_cost_only=provider_cost_only, tz=tz)
            for budget in budgets
        ]
    used: dict[tuple[str, str, str], Sums] = {}
    groups: dict[tuple[str, str], list[Budget]] = {}
    for budget in budgets:
        groups.setdefault((budget.scope_kind, budget.period), []).append(budget)
    for (kind, period), members in groups.items():
        start, end = period_window(period, at_ms, tz=zone)
        refs = sorted({m.scope_ref for m in members})
        sums = _window_sums(
            conn,
            kind=kind,
            refs=refs,
            from_ms=start,
            to_ms=min(end, at_ms),
            provider_cost_only=provider_cost_only,
            raw=False,
        )
        for ref, value in sums.items():
            used[(kind, ref, period)] = value
    out = []
    for budget in budgets:
        start, end = period_window(budget.period, at_ms, tz=zone)
        tokens, usd, unpriced = used.get(
            (budget.scope_kind, budget.scope_ref, budget.period), (0, 0.0, 0)
        )
        out.append(_status(budget, start, end, tokens, usd, unpriced))
    return out


def scope_quota(
    conn: Connection,
    *,
    scope_kind: str,
    scope_ref: str | None,
    at_ms: int,
    limits: Mapping[str, tuple[int | None, float | None]] | None = None,
    provider_cost_only: bool = False,
    tz: str | None = None,
) -> list[BudgetStatus]:
    """A scope's quota at ``at_ms``: its day and month (always), and every period it has a
    saved budget or a given limit for, in day, week, month order; periods in zone ``tz``.

    ``limits`` maps a period to ``(tokens, usd)`` given now (``None``: not given); a given limit
    overrides the saved one of that period. A period with no limit at all is reported ``ok``.
    Each period is one indexed SUM of usage up to ``at_ms``.
    """
    kind, ref = _scope(scope_kind, scope_ref)
    check_instant("at_ms", at_ms)
    given = dict(limits or {})
    for period, (tokens, usd) in given.items():
        check_limits(f"{_period(period)}_", tokens, usd)
    saved = {budget.period: budget for budget in list_budgets(conn, scope_kind=kind, scope_ref=ref)}
    wanted = {"day", "month", *saved, *(p for p, v in given.items() if v != (None, None))}
    out = []
    for period in (p for p in PERIODS if p in wanted):
        budget = saved.get(period) or Budget(
            id="",
            scope_kind=kind,
            scope_ref=ref,
            period=period,
            limit_usd=None,
            limit_tokens=None,
            warn_at=DEFAULT_WARN_AT,
            note=None,
            created_by="",
            created_at=0,
            updated_at=0,
        )
        tokens, usd = given.get(period, (None, None))
        if tokens is not None or usd is not None:
            budget = replace(
                budget,
                limit_tokens=budget.limit_tokens if tokens is None else tokens,
                limit_usd=budget.limit_usd if usd is None else usd,
            )
        out.append(
            evaluate_budget(conn, budget, at_ms=at_ms, provider_cost_only=provider_cost_only, tz=tz)
        )
    return out


def scope_has_usage(conn: Connection, *, scope_kind: str, scope_ref: str | None) -> bool:
    """Whether the ledger holds any row of the scope at all (one indexed probe)."""
    kind, ref = _scope(scope_kind, scope_ref)
    q = select(u.c.id).limit(1)
    if kind == "actor":
        q = q.where(exact_eq(u.c.actor_ref, ref))
    elif kind == "tenant":
        # Two indexed probes: the rows that carry the tenant, then those of its threads.
        if conn.execute(q.where(exact_eq(u.c.tenant_ref, ref))).first() is not None:
            return True
        q = q.where(inherits_tenant(ref))
    return conn.execute(q).first() is not None
