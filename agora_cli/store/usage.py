"""The ledger writer: record token usage with the cost fold, and reprice unknown costs later.

The cost fold, on every write: a provider-reported cost wins (``cost_source='provider'``);
otherwise the estimate from the resolved current price (``'estimate'``); otherwise ``cost_usd``
and ``cost_source`` stay NULL — unknown, never $0.00. ``reprice`` later fills NULL costs in a
window from the prices now current, one set-based UPDATE per distinct model id, never touching a
provider-reported row, and reports which model ids are still unpriced and how many rows each.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from agora_cli.store.clock import Clock, SystemClock
from agora_cli.store.errors import InvalidInput, NotFound
from agora_cli.store.pricing import (
    ModelPrice,
    PriceTier,
    current_prices,
    estimate_cost,
    resolve_current_price,
    resolve_model_price,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection
    from sqlalchemy.sql.elements import ColumnElement

__all__ = [
    "RepriceResult",
    "UnpricedModel",
    "UsageRecord",
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
class UnpricedModel:
    """A model id whose ledger rows still have no cost, and how many rows."""

    model_id: str
    rows: int


@dataclass(frozen=True)
class RepriceResult:
    """Rows given an estimate (or that would be, on a dry run) and the rows still unpriced."""

    repriced: int
    still_unpriced: int
    unpriced_models: tuple[UnpricedModel, ...]
    dry_run: bool = False


def _text(name: str, value: str | None, *, required: bool = True) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > 255:
        raise InvalidInput(f"{name} must be a string of 1 to 255 characters")
    return value


def _count(name: str, value: int | None, *, required: bool = True) -> int | None:
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"{name} must be a whole number >= 0, not {value!r}")
    return value


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
    from sqlalchemy import insert
    from sqlalchemy.exc import IntegrityError

    from agora_cli.store.schema import token_usage

    for name, value in (("thread_id", thread_id), ("actor_ref", actor_ref)):
        _text(name, value)
    _text("model_id", model_id)
    _text("purpose", purpose)
    for name, opt in (("tenant_ref", tenant_ref), ("message_id", message_id), ("run_id", run_id)):
        _text(name, opt, required=False)
    _count("input_tokens", input_tokens)
    _count("output_tokens", output_tokens)
    _count("cache_read_tokens", cache_read_tokens, required=False)
    _count("cache_write_tokens", cache_write_tokens, required=False)
    if (cache_read_tokens or 0) + (cache_write_tokens or 0) > input_tokens:
        raise InvalidInput(
            "cache_read_tokens + cache_write_tokens cannot exceed input_tokens "
            "(cache tokens are part of the input)"
        )
    if provider_cost_usd is not None and (
        isinstance(provider_cost_usd, bool)
        or not isinstance(provider_cost_usd, int | float)
        or not math.isfinite(provider_cost_usd)
        or provider_cost_usd < 0
    ):
        raise InvalidInput(
            f"provider_cost_usd must be a finite amount >= 0, not {provider_cost_usd}"
        )

    priced_as: str | None = None
    rule: str | None = None
    cost: float | None
    source: str | None
    if provider_cost_usd is not None:
        cost, source = float(provider_cost_usd), "provider"
    else:
        resolution = resolve_current_price(conn, model_id)
        if resolution.price is None:
            cost, source = None, None
        else:
            priced_as, rule = resolution.matched, resolution.rule
            cost = estimate_cost(
                resolution.price,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                cache_read_tokens=cache_read_tokens,
                cache_write_tokens=cache_write_tokens,
            )
            source = "estimate"
    record = UsageRecord(
        id=uuid.uuid4().hex,
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
        created_at=(clock or SystemClock()).now_ms(),
        priced_as=priced_as,
        price_rule=rule,
    )
    row = {k: v for k, v in asdict(record).items() if k not in ("priced_as", "price_rule")}
    try:
        conn.execute(insert(token_usage).values(**row))
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
    the estimate (tiers and cache fall-backs included) in the database.
    """
    from sqlalchemy import func, select, update

    from agora_cli.store.schema import token_usage as u

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
    counts = {
        str(model_id): int(n)
        for model_id, n in conn.execute(
            select(u.c.model_id, func.count()).where(*where).group_by(u.c.model_id)
        )
    }
    prices = current_prices(conn)
    repriced = 0
    unpriced: list[UnpricedModel] = []
    for model_id in sorted(counts):
        price = resolve_model_price(model_id, prices).price
        if price is None:
            unpriced.append(UnpricedModel(model_id, counts[model_id]))
        elif dry_run:
            repriced += counts[model_id]
        else:
            stmt = (
                update(u)
                .where(u.c.model_id == model_id, *where)
                .values(cost_usd=_estimate_sql(price), cost_source="estimate")
            )
            repriced += int(conn.execute(stmt).rowcount)
    unpriced.sort(key=lambda m: (-m.rows, m.model_id))
    return RepriceResult(
        repriced=repriced,
        still_unpriced=sum(m.rows for m in unpriced),
        unpriced_models=tuple(unpriced),
        dry_run=dry_run,
    )


def _estimate_sql(price: ModelPrice) -> ColumnElement[Any]:
    """``estimate_cost`` as a SQL expression over the ledger row's columns."""
    from sqlalchemy import case

    from agora_cli.store.schema import token_usage as u

    expr = _rates_sql(price)
    for tier in sorted(price.tiers, key=lambda t: t.size):
        # Built lowest tier first so the highest exceeded tier is the outermost test.
        expr = case((u.c.input_tokens > tier.size, _rates_sql(tier)), else_=expr)
    return expr


def _rates_sql(rates: ModelPrice | PriceTier) -> ColumnElement[Any]:
    from sqlalchemy import Double, case, func, literal

    from agora_cli.store.schema import token_usage as u

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
