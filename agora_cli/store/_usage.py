"""The ledger writer: record token usage with the cost fold, and reprice unknown costs later.

The cost fold, on every write: a provider-reported cost wins (``cost_source='provider'``);
otherwise the estimate from the resolved current price (``'estimate'``); otherwise ``cost_usd``
and ``cost_source`` stay NULL — unknown, never $0.00. ``reprice`` later fills NULL costs in a
window from the prices now current, one set-based UPDATE per distinct model id, never touching a
provider-reported row, and reports which model ids are still unpriced and how many rows each.
``recompute_estimates`` recomputes rows already estimated (after a price correction), one
bounded batch per call, with the same SQL; provider-reported rows are never touched.

Every cost agora stores is a finite number from 0 to ``MAX_COST_USD`` (10^15 USD for one row):
a provider-reported cost outside that range is refused (``InvalidInput``), and an estimate
outside it — possible only from a price or token counts written around the library — leaves
the row unpriced instead (the SQL of ``reprice`` tests the same bound, so SQLite, which would
store an overflow as +Inf, never does). Token counts are whole numbers within ``BIGINT``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Double, and_, case, func, insert, literal, select, update
from sqlalchemy.exc import IntegrityError

from agora_cli.store._clock import Clock, SystemClock
from agora_cli.store._dialects import dialect_of
from agora_cli.store._errors import InvalidInput, NotFound
from agora_cli.store._fold import mark_days_dirty
from agora_cli.store._ids import new_hex_id
from agora_cli.store._pricing import (
    ModelPrice,
    PriceTier,
    applicable_rates,
    current_prices,
    estimate_cost,
    resolve_current_price,
    resolve_model_price,
    tier_rates,
)
from agora_cli.store._schema import token_usage as u  # the ledger table, in every query here
from agora_cli.store._sqlexpr import exact_eq, known_usd
from agora_cli.store._tenant_guard import check_thread_tenant
from agora_cli.store._values import (
    MAX_COST_USD,
    check_count,
    check_finite,
    check_identity,
    check_instant,
    check_int,
    check_optional_identity,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sqlalchemy.engine import Connection
    from sqlalchemy.sql.elements import ColumnElement

__all__ = [
    "MAX_ESTIMATE_BATCH",
    "EstimateBatch",
    "RepriceResult",
    "UnpricedRows",
    "UsageRecord",
    "models_priced_now",
    "recompute_estimates",
    "record_usage",
    "reprice",
]


@dataclass(frozen=True)
class UsageRecord:
    """One ledger row as written, with the price it was estimated from (if any)."""

    id: str
    thread_id: str
    actor_ref: str
    tenant_ref: str | None
    message_id: str | None
    model_id: str
    purpose: str
    input_tokens: int
    output_tokens: int
    cache_write_tokens: int | None
    cache_read_tokens: int | None
    cost_usd: float | None
    cost_source: str | None
    run_id: str | None
    created_at: int
    priced_as: str | None = None
    price_rule: str | None = None


@dataclass(frozen=True)
class UnpricedRows:
    """A model id whose ledger rows still have no cost, and how many rows."""

    model_id: str
    rows: int


@dataclass(frozen=True)
class RepriceResult:
    """Rows given an estimate (or that would be, on a dry run) and the rows still unpriced."""

    repriced: int
    still_unpriced: int
    unpriced_models: tuple[UnpricedRows, ...]
    dry_run: bool = False


@dataclass(frozen=True)
class EstimateBatch:
    """One batch of ``recompute_estimates``: rows read, rows whose cost changed (or would, on a
    dry run), their total cost before and after, and where the next batch starts."""

    examined: int
    recomputed: int
    before_usd: float
    after_usd: float
    next_after: str | None
    done: bool
    dry_run: bool = False


MAX_ESTIMATE_BATCH = 10_000
_CHUNK = 500
# An estimate recomputed from an unchanged price is the same number; this only absorbs the last
# bit of a double (a row is "changed" when its cost moves by more than one part in 10^12).
_SAME_COST_REL = 1e-12


def _usable_cost(cost: float) -> float | None:
    return cost if math.isfinite(cost) and 0 <= cost <= MAX_COST_USD else None


def record_usage(
    conn: Connection,
    *,
    thread_id: str,
    actor_ref: str,
    model_id: str,
    purpose: str,
    input_tokens: int,
    output_tokens: int,
    tenant_ref: str | None = None,
    cache_read_tokens: int | None = None,
    cache_write_tokens: int | None = None,
    provider_cost_usd: float | None = None,
    message_id: str | None = None,
    run_id: str | None = None,
    clock: Clock | None = None,
) -> UsageRecord:
    """Write one ledger row, costed by the fold: provider cost → estimate → NULL (unknown).

    Cache token counts are subsets of ``input_tokens``. The store chooses the id and
    ``created_at``. A thread that does not exist is ``NotFound`` (the caller's transaction is
    then unusable on PostgreSQL and must be rolled back, as ``engine.begin()`` does).
    """
    for name, value in (
        ("thread_id", thread_id),
        ("actor_ref", actor_ref),
        ("model_id", model_id),
        ("purpose", purpose),
    ):
        check_identity(name, value)
    for name, opt in (("tenant_ref", tenant_ref), ("message_id", message_id), ("run_id", run_id)):
        check_optional_identity(name, opt)
    check_count("input_tokens", input_tokens)
    check_count("output_tokens", output_tokens)
    for name, count in (
        ("cache_read_tokens", cache_read_tokens),
        ("cache_write_tokens", cache_write_tokens),
    ):
        if count is not None:
            check_count(name, count)
    if (cache_read_tokens or 0) + (cache_write_tokens or 0) > input_tokens:
        raise InvalidInput(
            "cache_read_tokens + cache_write_tokens cannot exceed input_tokens "
            "(cache tokens are part of the input)"
        )
    if provider_cost_usd is not None:
        check_finite("provider_cost_usd", provider_cost_usd, low=0.0, high=MAX_COST_USD)

    priced_as: str | None = None
    rule: str | None = None
    cost: float | None
    source: str | None
    if provider_cost_usd is not None:
        cost, source = float(provider_cost_usd), "provider"
    else:
        resolution = resolve_current_price(conn, model_id)
        estimate = None
        if resolution.price is not None and resolution.price.in_range():
            estimate = _usable_cost(
                estimate_cost(
                    resolution.price,
                    input_tokens=input_tokens,
                    output_tokens=output_tokens,
                    cache_read_tokens=cache_read_tokens,
                    cache_write_tokens=cache_write_tokens,
                )
            )
        if estimate is None:
            cost, source = None, None
        else:
            priced_as, rule = resolution.matched, resolution.rule
            cost, source = estimate, "estimate"
    now = (clock or SystemClock()).now_ms()
    record = UsageRecord(
        id=new_hex_id(now),
        thread_id=thread_id,
        actor_ref=actor_ref,
        tenant_ref=tenant_ref,
        message_id=message_id,
        model_id=model_id,
        purpose=purpose,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_write_tokens=cache_write_tokens,
        cache_read_tokens=cache_read_tokens,
        cost_usd=cost,
        cost_source=source,
        run_id=run_id,
        created_at=now,
        priced_as=priced_as,
        price_rule=rule,
    )
    row = {k: v for k, v in asdict(record).items() if k not in ("priced_as", "price_rule")}
    check_thread_tenant(conn, thread_id, tenant_ref)  # never on another tenant's thread
    try:
        conn.execute(insert(u).values(**row))
    except IntegrityError as exc:
        if "foreign key" in str(exc.orig).lower():
            raise NotFound(f"thread {thread_id!r} not found: usage needs its thread") from exc
        raise
    return record


def reprice(
    conn: Connection,
    *,
    from_ms: int | None = None,
    to_ms: int | None = None,
    dry_run: bool = False,
) -> RepriceResult:
    """Fill NULL ledger costs in ``[from_ms, to_ms]`` (inclusive) from the current prices.

    Provider-reported rows are never touched. Each resolvable model id is one UPDATE computing
    the estimate (tiers and cache fall-backs included) in the database; a row whose estimate
    would not be a finite amount up to ``MAX_COST_USD`` is left unpriced, and a price whose
    rates are out of range (written around the library) counts as no price. Both are reported
    with the still-unpriced rows.
    """
    for name, bound in (("from_ms", from_ms), ("to_ms", to_ms)):
        if bound is not None:
            check_instant(name, bound)
    if from_ms is not None and to_ms is not None and from_ms > to_ms:
        raise InvalidInput("the window's start is after its end")
    where: list[ColumnElement[bool]] = [
        u.c.cost_usd.is_(None),
        u.c.cost_source.is_(None) | (u.c.cost_source != "provider"),
    ]
    if from_ms is not None:
        where.append(u.c.created_at >= from_ms)
    if to_ms is not None:
        where.append(u.c.created_at <= to_ms)
    # MySQL's PAD SPACE collation groups 'a' and 'a ' together; their lengths keep them apart.
    keys: list[ColumnElement[Any]] = [u.c.model_id]
    if dialect_of(conn).pads_spaces:
        keys.append(func.length(u.c.model_id))
    counts: dict[str, int] = {}
    for row in conn.execute(select(u.c.model_id, func.count()).where(*where).group_by(*keys)):
        counts[str(row[0])] = int(row[1])
    prices = current_prices(conn)
    repriced = 0
    unpriced: list[UnpricedRows] = []
    for model_id in sorted(counts):
        price = resolve_model_price(model_id, prices).price
        done = 0
        if price is not None and price.in_range():
            estimate = _estimate_sql(price)
            rows = [exact_eq(u.c.model_id, model_id), *where, estimate.between(0, MAX_COST_USD)]
            if dry_run:
                done = int(
                    conn.execute(select(func.count()).select_from(u).where(*rows)).scalar_one()
                )
            else:
                # Folded days these rows fall on no longer match the ledger: refold them.
                mark_days_dirty(conn, and_(*rows))
                stmt = update(u).where(*rows).values(cost_usd=estimate, cost_source="estimate")
                done = int(conn.execute(stmt).rowcount)
        repriced += done
        if counts[model_id] > done:
            unpriced.append(UnpricedRows(model_id, counts[model_id] - done))
    unpriced.sort(key=lambda m: (-m.rows, m.model_id))
    return RepriceResult(
        repriced=repriced,
        still_unpriced=sum(m.rows for m in unpriced),
        unpriced_models=tuple(unpriced),
        dry_run=dry_run,
    )


def models_priced_now(conn: Connection, model_ids: Iterable[str]) -> frozenset[str]:
    """The ledger model ids among ``model_ids`` that ``reprice`` would price now.

    A NULL cost on such a model's rows is not "no price": the runtime that wrote it prices on
    read. ``reprice`` stores that estimate; a report names it as the fix (not ``prices seed``).
    """
    wanted = sorted(set(model_ids))
    if not wanted:
        return frozenset()
    prices = current_prices(conn)
    found = set()
    for model_id in wanted:
        price = resolve_model_price(model_id, prices).price
        if price is not None and price.in_range():
            found.add(model_id)
    return frozenset(found)


def recompute_estimates(
    conn: Connection,
    *,
    from_ms: int | None = None,
    to_ms: int | None = None,
    after: str | None = None,
    limit: int = 1_000,
    dry_run: bool = False,
) -> EstimateBatch:
    """Recompute one batch of estimated ledger costs from the prices now current.

    Reads at most ``limit`` rows whose ``cost_source`` is ``estimate`` in ``[from_ms, to_ms]``
    with an id after ``after`` (in id order), and gives each the estimate of the price its model
    id resolves to now — the same SQL expression ``reprice`` writes, so the Python estimate and
    the stored cost agree row for row. A row whose model now resolves to no price, or whose
    estimate would not be a finite amount up to ``MAX_COST_USD``, keeps its cost. Provider-
    reported and unknown (NULL) costs are never touched.

    One batch runs in the caller's transaction and locks the rows it rewrites; to go through a
    whole window, call again with ``after=batch.next_after`` (each call its own transaction)
    until ``batch.done``. Repeating an interrupted run is safe: rows already recomputed are at
    the current price and count as unchanged.
    """
    for name, bound in (("from_ms", from_ms), ("to_ms", to_ms)):
        if bound is not None:
            check_instant(name, bound)
    if from_ms is not None and to_ms is not None and from_ms > to_ms:
        raise InvalidInput("the window's start is after its end")
    check_optional_identity("after", after)
    check_int("limit", limit, low=1, high=MAX_ESTIMATE_BATCH)
    estimated = u.c.cost_source == "estimate"
    where: list[ColumnElement[bool]] = [estimated]
    if from_ms is not None:
        where.append(u.c.created_at >= from_ms)
    if to_ms is not None:
        where.append(u.c.created_at <= to_ms)
    if after is not None:
        where.append(u.c.id > after)  # the primary key: unique even under PAD SPACE
    # One id more than the batch: whether this batch is the last is known without another.
    page = select(u.c.id).where(*where).order_by(u.c.id).limit(limit + 1)
    ids = [str(i) for i in conn.execute(page).scalars()]
    done = len(ids) <= limit
    ids = ids[:limit]
    if not ids:
        return EstimateBatch(0, 0, 0.0, 0.0, after, done=True, dry_run=dry_run)
    # Lock exactly these rows (by primary key: no gap locks on MySQL), then read them.
    old: dict[str, tuple[str, float | None]] = {}
    for chunk in _chunks(ids):
        q = select(u.c.id, u.c.model_id, u.c.cost_usd).where(u.c.id.in_(chunk), estimated)
        if not dry_run:
            q = q.with_for_update()
        for row_id, model_id, cost in conn.execute(q):
            # another writer's non-finite estimate is no estimate: repricing replaces it
            old[str(row_id)] = (str(model_id), known_usd(cost))
    by_model: dict[str, list[str]] = {}
    for row_id, (model_id, _cost) in old.items():
        by_model.setdefault(model_id, []).append(row_id)
    before = sum(cost or 0.0 for _model, cost in old.values())
    after_usd = before
    changed = 0
    for model_id in sorted(by_model):
        price = resolve_current_price(conn, model_id).price
        if price is None or not price.in_range():
            continue
        estimate = _estimate_sql(price)
        moved: list[str] = []
        for chunk in _chunks(by_model[model_id]):
            for row_id, new in conn.execute(select(u.c.id, estimate).where(u.c.id.in_(chunk))):
                was = old[str(row_id)][1]
                usable = None if new is None else _usable_cost(float(new))
                if usable is None or (
                    was is not None and math.isclose(was, usable, rel_tol=_SAME_COST_REL)
                ):
                    continue
                moved.append(str(row_id))
                after_usd += usable - (was or 0.0)
        changed += len(moved)
        if dry_run:
            continue
        for chunk in _chunks(moved):
            mark_days_dirty(conn, u.c.id.in_(chunk))
            conn.execute(update(u).where(u.c.id.in_(chunk), estimated).values(cost_usd=estimate))
    return EstimateBatch(
        examined=len(ids),
        recomputed=changed,
        before_usd=before,
        after_usd=after_usd,
        next_after=ids[-1],
        done=done,
        dry_run=dry_run,
    )


def _chunks(items: list[str], size: int = _CHUNK) -> list[list[str]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _estimate_sql(price: ModelPrice) -> ColumnElement[Any]:
    """``estimate_cost`` as a SQL expression over the ledger row's columns.

    The rates are ``applicable_rates``/``tier_rates``, computed once in Python and sent as
    literals, so a row costs the same here as in ``estimate_cost``.
    """
    expr = _rates_sql(applicable_rates(price, 0))
    for tier in sorted(price.tiers, key=lambda t: t.size):
        # Built lowest tier first so the highest exceeded tier is the outermost test.
        expr = case((u.c.input_tokens > tier.size, _rates_sql(tier_rates(price, tier))), else_=expr)
    return expr


def _rates_sql(rates: ModelPrice | PriceTier) -> ColumnElement[Any]:
    def rate(value: float | None) -> ColumnElement[Any]:
        return literal(rates.input_per_1m if value is None else value, Double())

    written = func.coalesce(u.c.cache_write_tokens, 0)
    read = func.coalesce(u.c.cache_read_tokens, 0)
    raw = u.c.input_tokens - written - read
    uncached = case((raw < 0, 0), else_=raw)
    total = (
        uncached * rate(rates.input_per_1m)
        + written * rate(rates.cache_write_per_1m)
        + read * rate(rates.cache_read_per_1m)
        + u.c.output_tokens * rate(rates.output_per_1m)
    )
    return total / literal(1_000_000.0, Double())
