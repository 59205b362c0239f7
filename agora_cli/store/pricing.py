"""Model prices: the price table, seeding from models.dev, resolving ledger ids, the estimate.

``agent_model_pricing`` keeps one current row per model (``is_current = 1``) and the retired rows
as history. A write happens in the caller's transaction: a model's first price inserts its current
row; a new price copies the current row into history (a new row, ``is_current = 0``) and updates
the current row in place. No reader ever sees two current rows or none, and a current row, once
it exists, is never deleted or moved in the ``(model_id, is_current)`` index, which is what lets
writers queue on it.

Concurrent writers of one model are serialised before they read, so they never deadlock each
other: on PostgreSQL by a transaction-scoped advisory lock per model; on SQLite by the write lock
every transaction takes (``BEGIN IMMEDIATE``); on MySQL/MariaDB by a locking read of the model's
current row (forced onto that index, so that it touches no other model's rows), on which every
writer of the model waits in turn; a model with no current row yet has nothing to wait on, so
its first writers also take a named lock (``GET_LOCK``) for that model just while they insert it,
and release it before the commit — any later writer then waits on the inserted row itself. (The
earlier design inserted first and took the locking read afterwards: two writers of a new model
then each waited on the other's inserted row, a deadlock InnoDB broke by rolling one back.) As
with any row locks, two transactions that each write *several* models in opposite orders can
still deadlock; ``engine.retry_transient`` retries such a transaction whole.

Numbers: every rate is a finite number from 0 to ``MAX_PRICE_PER_1M`` (USD 1,000,000 per 1M
tokens: $1 a token, over 1,000 times the dearest model published today). With token counts
bounded by ``BIGINT``, no estimate can then overflow a double (at most ~3.7e19 USD per row). A
catalog entry whose rates fall outside that range has no usable price: it is never stored.

Resolution (``resolve_model_price``) maps the id a provider reported to a price by the rules of
pricing-and-ledger.md — exact, then route prefixes dropped, then one trailing calendar date — and
says which rule matched. ``estimate_cost`` applies cache fall-backs and context tiers. Rates are
USD per 1M tokens.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import re
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date
from difflib import get_close_matches
from typing import TYPE_CHECKING, Any

from agora_cli.store.clock import Clock, SystemClock
from agora_cli.store.errors import DatabaseError, InvalidInput, ModelNotInCatalog
from agora_cli.store.values import (
    BIGINT_MAX,
    check_count,
    check_finite,
    check_identity,
    dump_json,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, RowMapping

    from agora_cli.store.catalog import Catalog

__all__ = [
    "FIRST_PARTY_PROVIDERS",
    "MAX_PRICE_PER_1M",
    "RULES",
    "CatalogMatch",
    "ModelPrice",
    "PriceChange",
    "PriceTier",
    "Resolution",
    "SeedResult",
    "SkippedModel",
    "check_price",
    "current_prices",
    "estimate_cost",
    "is_govcloud",
    "list_prices",
    "match_catalog_price",
    "price_from_catalog",
    "resolution_candidates",
    "resolve_current_price",
    "resolve_model_price",
    "route_forms",
    "seed_missing_prices",
    "seed_prices_from_models_dev",
    "set_price",
    "split_model_name",
    "strip_date_suffix",
    "tiers_to_json",
]

RULES = ("exact", "prefix", "date", "prefix+date")
MAX_PRICE_PER_1M = 1_000_000.0
FIRST_PARTY_PROVIDERS = (
    "openai",
    "anthropic",
    "google",
    "mistral",
    "deepseek",
    "xai",
    "cohere",
    "meta",
)
_BEDROCK_FIRST_PARTY = ("amazon.", "anthropic.")
_PROFILE_PREFIXES = ("us.", "eu.", "apac.", "global.")
_GOV_PREFIX = "us-gov."
_ARN_RE = re.compile(r"^arn:(?P<partition>aws[a-z-]*):bedrock:(?P<region>[a-z0-9-]*):")
_DATE_RE = re.compile(r"-(?:(\d{4})-(\d{2})-(\d{2})|(\d{4})(\d{2})(\d{2}))$")
_REL_TOL = 1e-9
_CACHE_READ_KEYS = ("cache_read", "cached_input", "cache_input")
_CACHE_WRITE_KEYS = ("cache_write", "cached_write")
_CHUNK = 500
_MODEL_INDEX = "agent_model_pricing_model_current_idx"


@dataclass(frozen=True)
class PriceTier:
    """Rates that replace the base rates once a row's input tokens exceed ``size``."""

    size: int
    input_per_1m: float
    output_per_1m: float
    cache_read_per_1m: float | None = None
    cache_write_per_1m: float | None = None


@dataclass(frozen=True)
class ModelPrice:
    """One price row (USD per 1M tokens); ``id``/``effective_from`` are None before it is stored."""

    model_id: str
    input_per_1m: float
    output_per_1m: float
    cache_read_per_1m: float | None = None
    cache_write_per_1m: float | None = None
    tiers: tuple[PriceTier, ...] = ()
    source: str | None = None
    effective_from: int | None = None
    is_current: bool = True
    id: str | None = None

    def same_rates(self, other: ModelPrice) -> bool:
        """Whether both charge the same for every row (rates and tiers, to 1e-9 relative)."""
        return (
            _same_rates(self, other)
            and len(self.tiers) == len(other.tiers)
            and all(
                a.size == b.size and _same_rates(a, b)
                for a, b in zip(self.tiers, other.tiers, strict=True)
            )
        )

    def in_range(self) -> bool:
        """Whether every rate, tiers included, is a finite number from 0 to ``MAX_PRICE_PER_1M``.

        Prices agora writes always are; a row written some other way may not be, and is then
        treated as no price at all (never estimated from).
        """
        return all(_price_ok(rate) for rate in _rates(self)) and all(
            0 <= t.size <= BIGINT_MAX and all(_price_ok(rate) for rate in _rates(t))
            for t in self.tiers
        )

    def tier_for(self, input_tokens: int) -> PriceTier | None:
        """The highest tier whose size ``input_tokens`` exceeds, if any."""
        chosen = None
        for tier in self.tiers:
            if input_tokens > tier.size and (chosen is None or tier.size > chosen.size):
                chosen = tier
        return chosen


@dataclass(frozen=True)
class Resolution:
    """Which price a ledger model id resolves to, and by which rule (all None when unpriced)."""

    model_id: str
    matched: str | None = None
    rule: str | None = None
    price: ModelPrice | None = None


@dataclass(frozen=True)
class PriceChange:
    """What a write did to one model's price: ``inserted``, ``updated`` or ``unchanged``."""

    model: str
    catalog_id: str | None
    price: ModelPrice
    previous: ModelPrice | None
    action: str


@dataclass(frozen=True)
class SkippedModel:
    """A ledger model id that ``seed --missing`` could not price, why, and names to choose from."""

    model_id: str
    reason: str
    candidates: tuple[str, ...] = ()


@dataclass(frozen=True)
class CatalogMatch:
    """The catalog price chosen for a ledger id, and the id it is stored under."""

    ledger_id: str
    model_id: str
    catalog_id: str
    price: ModelPrice


@dataclass(frozen=True)
class SeedResult:
    """The outcome of a seed: the catalog read, each price written (or not), and skipped ids."""

    catalog: str
    prices: tuple[PriceChange, ...]
    skipped: tuple[SkippedModel, ...] = ()
    dry_run: bool = False


def check_price(name: str, value: object) -> float:
    """A rate in USD per 1M tokens: a finite number from 0 to ``MAX_PRICE_PER_1M``."""
    return check_finite(name, value, low=0.0, high=MAX_PRICE_PER_1M)


def _price_ok(rate: float | None) -> bool:
    return rate is None or (math.isfinite(rate) and 0 <= rate <= MAX_PRICE_PER_1M)


def _rates(p: ModelPrice | PriceTier) -> tuple[float | None, ...]:
    return (p.input_per_1m, p.output_per_1m, p.cache_read_per_1m, p.cache_write_per_1m)


# --- names and resolution (pure) --------------------------------------------------------------


def split_model_name(name: str) -> tuple[str, str]:
    """Split ``provider/model`` on the first ``/`` (the model id may hold more).

    The model id is the id the price is stored under, so it must be a storable identity (at
    most 255 UTF-16 code units, no NUL): a longer one is refused here, the same on every dialect.
    """
    provider, sep, model = name.strip().partition("/")
    if not sep or not provider or not model:
        raise InvalidInput(
            f"{name!r} is not PROVIDER/MODEL (e.g. openai/gpt-4o-mini or "
            "openrouter/anthropic/claude-sonnet-4): the provider is the text before the first '/'"
        )
    check_identity(f"the model id of {_short(name)}", model)
    return provider, model


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def is_govcloud(model_id: str) -> bool:
    """Whether the id names AWS GovCloud (a ``us-gov.`` profile or an ARN in a us-gov region)."""
    for form in _route_chain(model_id, stop_at_gov=False):
        if form.startswith(_GOV_PREFIX) or _is_gov_arn(form):
            return True
    return False


def _is_gov_arn(model_id: str) -> bool:
    m = _ARN_RE.match(model_id)
    if m is None:
        return False
    return m.group("region").startswith("us-gov-") or m.group("partition") == "aws-us-gov"


def _strip_route(model_id: str, *, stop_at_gov: bool = True) -> str | None:
    if stop_at_gov and (model_id.startswith(_GOV_PREFIX) or _is_gov_arn(model_id)):
        return None
    if _ARN_RE.match(model_id):
        tail = model_id.rsplit("/", 1)[-1] if "/" in model_id else ""
        return tail or None
    if "/" in model_id:
        return model_id.split("/", 1)[1] or None
    for prefix in _PROFILE_PREFIXES:
        if model_id.startswith(prefix) and len(model_id) > len(prefix):
            return model_id[len(prefix) :]
    return None


def _route_chain(model_id: str, *, stop_at_gov: bool = True) -> list[str]:
    forms = [model_id]
    while (nxt := _strip_route(forms[-1], stop_at_gov=stop_at_gov)) is not None:
        if nxt in forms:
            break
        forms.append(nxt)
    return forms


def route_forms(model_id: str) -> list[str]:
    """The id, then each form with one more route segment dropped (``a/b/c`` → ``b/c`` → ``c``).

    A Bedrock ARN counts as a route to the id after its last ``/``; a ``us.``/``eu.``/``apac.``/
    ``global.`` inference-profile prefix as a route segment. ``us-gov.`` is never dropped.
    """
    return _route_chain(model_id)


def strip_date_suffix(model_id: str) -> str | None:
    """The id without one trailing ``-YYYY-MM-DD``/``-YYYYMMDD`` real calendar date, or None."""
    m = _DATE_RE.search(model_id)
    if not m or m.start() == 0:
        return None
    y, mo, d = (g for g in m.groups() if g is not None)
    try:
        date(int(y), int(mo), int(d))
    except ValueError:
        return None
    return model_id[: m.start()]


def resolution_candidates(model_id: str) -> list[tuple[str, str]]:
    """The ids to look up for ``model_id``, in order, each with the rule it would match by."""
    forms = route_forms(model_id)
    out: list[tuple[str, str]] = [(forms[0], "exact")]
    out += [(form, "prefix") for form in forms[1:]]
    if not is_govcloud(model_id):
        for i, form in enumerate(forms):
            undated = strip_date_suffix(form)
            if undated is not None:
                out.append((undated, "date" if i == 0 else "prefix+date"))
    seen: set[str] = set()
    unique = []
    for form, rule in out:
        if form not in seen:
            seen.add(form)
            unique.append((form, rule))
    return unique


def resolve_model_price(model_id: str, prices: Mapping[str, ModelPrice]) -> Resolution:
    """Resolve a ledger id against ``prices`` (model id → price): exact, then prefix, then date."""
    for form, rule in resolution_candidates(model_id):
        price = prices.get(form)
        if price is not None:
            return Resolution(model_id, form, rule, price)
    return Resolution(model_id)


def estimate_cost(
    price: ModelPrice,
    *,
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int | None = None,
    cache_write_tokens: int | None = None,
) -> float:
    """Estimate one usage row's cost in USD: uncached, cache-write, cache-read and output tokens.

    Cache rates fall back to the input rate; when ``input_tokens`` exceeds a tier's size, that
    tier's rates (the highest such tier) replace the base rates for the whole row.
    """
    tier = price.tier_for(input_tokens)
    rates: PriceTier | ModelPrice = tier if tier is not None else price
    written = cache_write_tokens or 0
    read = cache_read_tokens or 0
    uncached = max(input_tokens - written - read, 0)
    write_rate = rates.cache_write_per_1m
    read_rate = rates.cache_read_per_1m
    total = (
        uncached * rates.input_per_1m
        + written * (rates.input_per_1m if write_rate is None else write_rate)
        + read * (rates.input_per_1m if read_rate is None else read_rate)
        + output_tokens * rates.output_per_1m
    )
    return total / 1_000_000


def _same_rates(a: PriceTier | ModelPrice, b: PriceTier | ModelPrice) -> bool:
    pairs = (
        (a.input_per_1m, b.input_per_1m),
        (a.output_per_1m, b.output_per_1m),
        (a.cache_read_per_1m, b.cache_read_per_1m),
        (a.cache_write_per_1m, b.cache_write_per_1m),
    )
    for x, y in pairs:
        if x is None or y is None:
            if x is not y:
                return False
        elif not math.isclose(x, y, rel_tol=_REL_TOL, abs_tol=0.0):
            return False
    return True


# --- tiers as JSON ----------------------------------------------------------------------------


def tiers_to_json(tiers: Sequence[PriceTier]) -> list[dict[str, Any]] | None:
    """Tiers in models.dev's shape (``{input, output, cache_read?, cache_write?, tier}``)."""
    if not tiers:
        return None
    out = []
    for t in tiers:
        doc: dict[str, Any] = {"input": t.input_per_1m, "output": t.output_per_1m}
        if t.cache_read_per_1m is not None:
            doc["cache_read"] = t.cache_read_per_1m
        if t.cache_write_per_1m is not None:
            doc["cache_write"] = t.cache_write_per_1m
        doc["tier"] = {"type": "context", "size": t.size}
        out.append(doc)
    return out


def _tiers_from_json(text: str | None) -> tuple[PriceTier, ...]:
    if not text:
        return ()
    try:
        doc = json.loads(text)
    except ValueError:
        return ()
    tiers = _parse_tiers(doc) if isinstance(doc, list) else None
    return tiers or ()


def _rate(value: Any) -> float | None:
    # Any number is taken as written (NaN, negative and absurd ones too): ``in_range`` then
    # refuses the whole price, so a bad rate is never silently replaced by a fall-back.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return float(value)
    except OverflowError:  # an integer too large for a double
        return math.inf


def _first_rate(cost: Mapping[str, Any], keys: Iterable[str]) -> float | None:
    for key in keys:
        rate = _rate(cost.get(key))
        if rate is not None:
            return rate
    return None


def _parse_tiers(items: list[Any]) -> tuple[PriceTier, ...] | None:
    """Context tiers sorted by size; None when one is malformed (never silently under-price)."""
    tiers = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("tier"), dict):
            return None
        kind = item["tier"].get("type")
        if kind not in (None, "context"):
            continue  # not a context-size tier: nothing agora could apply
        size = item["tier"].get("size")
        rate_in, rate_out = _rate(item.get("input")), _rate(item.get("output"))
        if isinstance(size, bool) or not isinstance(size, int | float):
            return None
        if not (math.isfinite(size) and 0 <= size <= BIGINT_MAX):
            return None
        if rate_in is None or rate_out is None:
            return None
        tiers.append(
            PriceTier(
                size=int(size),
                input_per_1m=rate_in,
                output_per_1m=rate_out,
                cache_read_per_1m=_first_rate(item, _CACHE_READ_KEYS),
                cache_write_per_1m=_first_rate(item, _CACHE_WRITE_KEYS),
            )
        )
    return tuple(sorted(tiers, key=lambda t: t.size))


def price_from_catalog(entry: Mapping[str, Any], model_id: str) -> ModelPrice | None:
    """The price of a catalog entry, stored under ``model_id``; None when it has no usable cost.

    Unusable: no ``cost``, no input or output rate, a malformed tier, or any rate that is not a
    finite number from 0 to ``MAX_PRICE_PER_1M`` (negative, NaN, absurd): never stored.
    """
    cost = entry.get("cost")
    if not isinstance(cost, dict):
        return None
    rate_in, rate_out = _rate(cost.get("input")), _rate(cost.get("output"))
    if rate_in is None or rate_out is None:
        return None
    raw_tiers = cost.get("tiers")
    tiers: tuple[PriceTier, ...] | None = ()
    if raw_tiers is not None:
        tiers = _parse_tiers(raw_tiers) if isinstance(raw_tiers, list) else None
    if tiers is None:
        return None
    price = ModelPrice(
        model_id=model_id,
        input_per_1m=rate_in,
        output_per_1m=rate_out,
        cache_read_per_1m=_first_rate(cost, _CACHE_READ_KEYS),
        cache_write_per_1m=_first_rate(cost, _CACHE_WRITE_KEYS),
        tiers=tiers,
        source="models.dev",
    )
    return price if price.in_range() else None


# --- reading prices ---------------------------------------------------------------------------


def _price(row: RowMapping) -> ModelPrice:
    return ModelPrice(
        id=row["id"],
        model_id=row["model_id"],
        input_per_1m=float(row["input_price_per_1m"]),
        output_per_1m=float(row["output_price_per_1m"]),
        cache_read_per_1m=_opt_float(row["cache_read_price_per_1m"]),
        cache_write_per_1m=_opt_float(row["cache_write_price_per_1m"]),
        tiers=_tiers_from_json(row["tiers"]),
        source=row["source"],
        effective_from=int(row["effective_from"]),
        is_current=bool(row["is_current"]),
    )


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _chunks(items: Sequence[str], size: int = _CHUNK) -> Iterable[Sequence[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def current_prices(
    conn: Connection, *, model_ids: Iterable[str] | None = None
) -> dict[str, ModelPrice]:
    """The current price of every model (or of ``model_ids``), keyed by model id."""
    if model_ids is None:
        from sqlalchemy import select

        from agora_cli.store.schema import model_pricing as mp

        q = select(mp).where(mp.c.is_current == 1).order_by(mp.c.effective_from, mp.c.id)
        return {row["model_id"]: _price(row) for row in conn.execute(q).mappings()}
    return {m: rows[-1] for m, rows in _current_rows(conn, model_ids, lock=False).items()}


def _current_rows(
    conn: Connection, model_ids: Iterable[str], *, lock: bool
) -> dict[str, list[ModelPrice]]:
    """The current rows of exactly these model ids, oldest first (normally one per model).

    ``IN`` on MySQL's PAD SPACE collation also matches trailing-space variants (``'a' IN ('a ')``);
    those rows are dropped here. ``lock`` reads ``FOR UPDATE`` (on MySQL forced onto the
    ``(model_id, is_current)`` index, so that the read locks no other model's rows).
    """
    from sqlalchemy import select

    from agora_cli.store.schema import model_pricing as mp

    ids = sorted(set(model_ids))
    wanted = set(ids)
    out: dict[str, list[ModelPrice]] = {}
    for chunk in _chunks(ids):
        q = (
            select(mp)
            .where(mp.c.model_id.in_(chunk), mp.c.is_current == 1)
            .order_by(mp.c.model_id, mp.c.effective_from, mp.c.id)
        )
        if lock:
            for name in ("mysql", "mariadb"):
                q = q.with_hint(mp, f"FORCE INDEX ({_MODEL_INDEX})", dialect_name=name)
            q = q.with_for_update()
        for row in conn.execute(q).mappings():
            if row["model_id"] in wanted:
                out.setdefault(row["model_id"], []).append(_price(row))
    for rows in out.values():
        rows.sort(key=lambda p: (p.effective_from or 0, p.id or ""))
    return out


def list_prices(
    conn: Connection, *, model_id: str | None = None, history: bool = False
) -> list[ModelPrice]:
    """Current prices (with ``history``, every row), by model, newest first within a model."""
    from sqlalchemy import select

    from agora_cli.store.schema import model_pricing as mp
    from agora_cli.store.sqlexpr import exact_eq

    q = select(mp).order_by(mp.c.model_id, mp.c.effective_from.desc(), mp.c.is_current.desc())
    if not history:
        q = q.where(mp.c.is_current == 1)
    if model_id is not None:
        q = q.where(exact_eq(mp.c.model_id, check_identity("model_id", model_id)))
    return [_price(row) for row in conn.execute(q).mappings()]


def resolve_current_price(conn: Connection, model_id: str) -> Resolution:
    """Resolve a ledger model id against the current prices (one indexed query)."""
    check_identity("model_id", model_id)
    forms = [form for form, _rule in resolution_candidates(model_id)]
    return resolve_model_price(model_id, current_prices(conn, model_ids=forms))


# --- writing prices ---------------------------------------------------------------------------


def set_price(
    conn: Connection,
    model_id: str,
    *,
    input_per_1m: float,
    output_per_1m: float,
    cache_read_per_1m: float | None = None,
    cache_write_per_1m: float | None = None,
    tiers: Sequence[PriceTier] = (),
    source: str = "manual",
    clock: Clock | None = None,
) -> PriceChange:
    """Make this the model's current price; ``unchanged`` when it already is (see module docs).

    The model id is stored exactly as given (it is the id the ledger records). Rates are USD per
    1M tokens, each a finite number from 0 to ``MAX_PRICE_PER_1M``; cache rates are optional.
    Concurrent callers never deadlock each other, whatever the dialect (see module docs).
    """
    check_identity("model_id", model_id)
    price = ModelPrice(
        model_id=model_id,
        input_per_1m=check_price("input_per_1m", input_per_1m),
        output_per_1m=check_price("output_per_1m", output_per_1m),
        cache_read_per_1m=_opt_price("cache_read_per_1m", cache_read_per_1m),
        cache_write_per_1m=_opt_price("cache_write_per_1m", cache_write_per_1m),
        tiers=_check_tiers(tiers),
        source=check_identity("source", source),
    )
    return _write_prices(conn, [(None, price)], overwrite=True, dry_run=False, clock=clock)[0]


def _opt_price(name: str, value: object) -> float | None:
    return None if value is None else check_price(name, value)


def _check_tiers(tiers: Sequence[PriceTier]) -> tuple[PriceTier, ...]:
    checked = []
    for i, tier in enumerate(tiers):
        if not isinstance(tier, PriceTier):
            raise InvalidInput(f"tiers[{i}] must be a PriceTier, not {type(tier).__name__}")
        checked.append(
            PriceTier(
                size=check_count(f"tiers[{i}].size", tier.size),
                input_per_1m=check_price(f"tiers[{i}].input_per_1m", tier.input_per_1m),
                output_per_1m=check_price(f"tiers[{i}].output_per_1m", tier.output_per_1m),
                cache_read_per_1m=_opt_price(
                    f"tiers[{i}].cache_read_per_1m", tier.cache_read_per_1m
                ),
                cache_write_per_1m=_opt_price(
                    f"tiers[{i}].cache_write_per_1m", tier.cache_write_per_1m
                ),
            )
        )
    return tuple(sorted(checked, key=lambda t: t.size))


def _write_prices(
    conn: Connection,
    wanted: Sequence[tuple[str | None, ModelPrice]],
    *,
    overwrite: bool,
    dry_run: bool,
    clock: Clock | None,
) -> list[PriceChange]:
    """Write prices of distinct models (see module docs); without ``overwrite`` keep existing ones.

    Every price is checked first (identity, rates), so a batch is refused whole before anything
    is written, with the same message on every dialect.
    """
    from agora_cli.store.engine import dialect_name

    for _catalog_id, price in wanted:
        _check_storable(price)
    now = (clock or SystemClock()).now_ms()
    if dry_run:
        return _apply(conn, wanted, overwrite=overwrite, now=now, lock=False, write=False)
    ids = sorted({price.model_id for _, price in wanted})
    name = dialect_name(conn)
    if name == "postgresql":
        _advisory_lock_models(conn, ids)
    if name != "mysql":
        return _apply(conn, wanted, overwrite=overwrite, now=now, lock=True)
    # MySQL/MariaDB: queue on the models' current rows (all of them, in index order); a model
    # without one has nothing to queue on, so its writers take turns on a named lock instead.
    changes = {
        c.model: c for c in _apply(conn, wanted, overwrite=overwrite, now=now, lock=True, new=False)
    }
    for catalog_id, price in sorted(
        (w for w in wanted if w[1].model_id not in changes), key=lambda w: w[1].model_id
    ):
        with _mysql_model_lock(conn, price.model_id):
            (change,) = _apply(conn, [(catalog_id, price)], overwrite=overwrite, now=now, lock=True)
        changes[change.model] = change
    return [changes[price.model_id] for _, price in wanted]


def _check_storable(price: ModelPrice) -> None:
    check_identity("model_id", price.model_id)
    check_identity("source", price.source)
    if not price.in_range():
        raise InvalidInput(
            f"the price of {price.model_id!r} is out of range: every rate must be a finite "
            f"number from 0 to {MAX_PRICE_PER_1M:,.0f} USD per 1M tokens"
        )


def _apply(
    conn: Connection,
    wanted: Sequence[tuple[str | None, ModelPrice]],
    *,
    overwrite: bool,
    now: int,
    lock: bool,
    write: bool = True,
    new: bool = True,
) -> list[PriceChange]:
    """Read the current rows, decide each model's change, write them.

    ``new=False`` leaves out models that have no current row (the caller handles them).
    """
    from sqlalchemy import bindparam, insert, update

    from agora_cli.store.schema import model_pricing as mp

    current = _current_rows(conn, [price.model_id for _, price in wanted], lock=lock)
    changes: list[PriceChange] = []
    inserts: list[dict[str, Any]] = []
    updates: list[dict[str, Any]] = []
    retire: list[str] = []
    for catalog_id, price in wanted:
        rows = current.get(price.model_id, [])
        if not rows:
            if new:
                fresh = replace(price, id=uuid.uuid4().hex, effective_from=now, is_current=True)
                inserts.append(_row(fresh))
                changes.append(PriceChange(price.model_id, catalog_id, fresh, None, "inserted"))
            continue
        *others, old = rows
        if not overwrite or old.same_rates(price):
            changes.append(PriceChange(price.model_id, catalog_id, old, old, "unchanged"))
            continue
        # The current row keeps its id (it is what the next writer queues on): its old content
        # goes into history as a new row, and the row itself takes the new price.
        history = replace(old, id=uuid.uuid4().hex, is_current=False)
        inserts.append(_row(history))
        retire += [str(p.id) for p in others]  # more than one current row: a legacy accident
        updated = replace(price, id=old.id, effective_from=now, is_current=True)
        updates.append({f"new_{k}": v for k, v in _row(updated).items()})
        changes.append(PriceChange(price.model_id, catalog_id, updated, history, "updated"))
    if not write:
        return changes
    if updates:
        stmt = (
            update(mp)
            .where(mp.c.id == bindparam("new_id"))
            .values({k.removeprefix("new_"): bindparam(k) for k in updates[0] if k != "new_id"})
        )
        conn.execute(stmt, updates)
    if inserts:
        conn.execute(insert(mp), inserts)
    for chunk in _chunks(retire):
        conn.execute(update(mp).where(mp.c.id.in_(chunk)).values(is_current=0))
    return changes


def _advisory_lock_models(conn: Connection, model_ids: Sequence[str]) -> None:
    """PostgreSQL: transaction-scoped advisory locks, one per model, taken in sorted order."""
    from sqlalchemy import text

    if not model_ids:
        return
    conn.execute(
        text(
            "SELECT count(pg_advisory_xact_lock(hashtextextended(k, 0))) "
            "FROM (SELECT unnest(CAST(:keys AS text[])) AS k ORDER BY 1) AS s"
        ),
        {"keys": [f"agora.model_price:{m}" for m in sorted(model_ids)]},
    )


@contextlib.contextmanager
def _mysql_model_lock(conn: Connection, model_id: str) -> Iterator[None]:
    """MySQL: a named lock on one model while its first current row is inserted.

    Named locks belong to the session, not the transaction, so this one is released as soon as
    the row exists (before the commit): from then on a later writer waits on the row itself.
    It waits as long as a row lock would (``innodb_lock_wait_timeout``).
    """
    from sqlalchemy import text

    digest = hashlib.sha256(model_id.encode()).hexdigest()[:48]
    key = f"agora.price:{digest}"  # GET_LOCK names are at most 64 characters
    got = conn.execute(
        text("SELECT GET_LOCK(:key, @@innodb_lock_wait_timeout)"), {"key": key}
    ).scalar()
    if got != 1:
        raise DatabaseError(
            f"timed out waiting for another writer of the price of {model_id!r}; try again"
        )
    release = text("SELECT RELEASE_LOCK(:key)")
    try:
        yield
    except BaseException:
        # The first error is the one to report; a lost connection releases the lock anyway.
        with contextlib.suppress(Exception):
            conn.execute(release, {"key": key})
        raise
    conn.execute(release, {"key": key})


def _row(p: ModelPrice) -> dict[str, Any]:
    tiers = tiers_to_json(p.tiers)
    return {
        "id": p.id,
        "model_id": p.model_id,
        "input_price_per_1m": p.input_per_1m,
        "output_price_per_1m": p.output_per_1m,
        "cache_read_price_per_1m": p.cache_read_per_1m,
        "cache_write_price_per_1m": p.cache_write_per_1m,
        "tiers": None if tiers is None else dump_json("tiers", tiers),
        "source": p.source,
        "effective_from": p.effective_from,
        "is_current": 1 if p.is_current else 0,
    }


# --- seeding from models.dev ------------------------------------------------------------------


def seed_prices_from_models_dev(
    conn: Connection,
    names: Sequence[str],
    *,
    catalog: Catalog,
    dry_run: bool = False,
    clock: Clock | None = None,
) -> SeedResult:
    """Price ``provider/model`` names from the catalog, all or nothing, in the caller's transaction.

    A missing provider or model, or a model without a usable cost, raises ``ModelNotInCatalog``
    naming every such name with close-name suggestions, before anything is written; a model id
    that cannot be stored (over 255 UTF-16 code units) is ``InvalidInput``, also before.
    """
    parsed = list(dict.fromkeys(split_model_name(n) for n in names))
    if not parsed:
        raise InvalidInput("name at least one PROVIDER/MODEL to seed (or use --missing)")
    problems: list[str] = []
    wanted: dict[str, tuple[str, ModelPrice]] = {}
    for provider, model in parsed:
        name = f"{provider}/{model}"
        entry = catalog.entry(provider, model)
        if entry is None:
            problems.append(_not_found_message(catalog, provider, model))
            continue
        price = price_from_catalog(entry, model)
        if price is None:
            what = "no price" if entry.get("cost") is None else "no usable price"
            problems.append(
                f"{name} has {what} in the catalog (set one by hand: "
                f"agora prices set {model} --input X --output Y)"
            )
            continue
        earlier = wanted.get(model)
        if earlier is not None and not earlier[1].same_rates(price):
            raise InvalidInput(
                f"{earlier[0]} and {name} would both price {model!r} but at different rates: "
                "seed one of them"
            )
        wanted.setdefault(model, (name, price))
    if problems:
        raise ModelNotInCatalog("; ".join(problems))
    changes = _write_prices(
        conn, list(wanted.values()), overwrite=True, dry_run=dry_run, clock=clock
    )
    return SeedResult(catalog=catalog.source, prices=tuple(changes), dry_run=dry_run)


def _not_found_message(catalog: Catalog, provider: str, model: str) -> str:
    name = f"{provider}/{model}"
    elsewhere = [f"{p}/{model}" for p in catalog.providers_listing(model)]
    if provider not in catalog.providers:
        close = get_close_matches(provider, list(catalog.providers), n=3, cutoff=0.6)
        hints = [f"{p}/{model}" for p in close if model in catalog.providers[p]] or close
        hints += [h for h in elsewhere if h not in hints]
        what = f"provider {provider!r} is not in the catalog ({name})"
    else:
        close = get_close_matches(model, list(catalog.providers[provider]), n=3, cutoff=0.6)
        hints = [f"{provider}/{m}" for m in close] + elsewhere
        what = f"{name} is not in the catalog"
    hints = list(dict.fromkeys(hints))[:5]
    return f"{what} (did you mean {', '.join(hints)}?)" if hints else what


def match_catalog_price(model_id: str, catalog: Catalog) -> CatalogMatch | SkippedModel:
    """Choose the catalog price for a ledger model id by the rules of ``seed --missing``.

    A route segment naming a catalog provider selects it; otherwise the providers listing the most
    route-stripped form (then a date-stripped form) must agree to 1e-9 relative, or a first-party
    provider decides; otherwise the id is ambiguous. GovCloud ids are never priced from here.
    """
    if is_govcloud(model_id):
        return SkippedModel(model_id, "govcloud")
    forms = route_forms(model_id)
    chosen: str | None = None
    for i, form in enumerate(forms[:-1]):
        if "/" in form and not _ARN_RE.match(form):
            head = form.split("/", 1)[0]
            if head in catalog.providers:
                chosen, forms = head, forms[i + 1 :]
                break
    order = list(reversed(forms))
    order += [u for f in reversed(forms) if (u := strip_date_suffix(f)) is not None]
    order = list(dict.fromkeys(order))
    unpriced: list[str] = []
    for form in order:
        providers = [chosen] if chosen else catalog.providers_listing(form)
        listed: list[tuple[str, ModelPrice]] = []
        for provider in providers:
            entry = catalog.entry(provider, form)
            if entry is None:
                continue
            price = price_from_catalog(entry, form)
            if price is None:
                unpriced.append(f"{provider}/{form}")
            else:
                listed.append((provider, price))
        if listed:
            return _decide(model_id, form, listed)
    if unpriced:
        return SkippedModel(model_id, "no_price", tuple(dict.fromkeys(unpriced)))
    return SkippedModel(model_id, "not_in_catalog", _close_names(catalog, forms, chosen))


def _decide(
    ledger_id: str, form: str, listed: list[tuple[str, ModelPrice]]
) -> CatalogMatch | SkippedModel:
    first_party = [
        (p, price)
        for p, price in listed
        if p in FIRST_PARTY_PROVIDERS
        or (p == "amazon-bedrock" and form.startswith(_BEDROCK_FIRST_PARTY))
    ]
    if all(price.same_rates(listed[0][1]) for _, price in listed):
        provider, price = (first_party or listed)[0]
        return CatalogMatch(ledger_id, form, f"{provider}/{form}", price)
    if first_party and all(price.same_rates(first_party[0][1]) for _, price in first_party):
        provider, price = first_party[0]
        return CatalogMatch(ledger_id, form, f"{provider}/{form}", price)
    return SkippedModel(ledger_id, "ambiguous", tuple(f"{p}/{form}" for p, _ in listed))


def _close_names(catalog: Catalog, forms: Sequence[str], provider: str | None) -> tuple[str, ...]:
    hints: list[str] = []
    for form in reversed(forms):
        if provider is not None:
            pool = list(catalog.providers.get(provider, {}))
            hints += [f"{provider}/{m}" for m in get_close_matches(form, pool, n=3, cutoff=0.6)]
        else:
            for m in get_close_matches(form, catalog.model_ids(), n=3, cutoff=0.75):
                listing = sorted(catalog.providers_listing(m), key=_first_party_first)
                hints += [f"{p}/{m}" for p in listing[:2]]
        if hints:
            break
    return tuple(dict.fromkeys(hints))[:5]


def _first_party_first(provider: str) -> tuple[int, str]:
    return (provider not in FIRST_PARTY_PROVIDERS, provider)


def seed_missing_prices(
    conn: Connection,
    *,
    catalog: Catalog,
    dry_run: bool = False,
    clock: Clock | None = None,
) -> SeedResult:
    """Price every ledger model id that resolves to no price, never overwriting a price.

    Ids the rules cannot price are returned in ``skipped`` with a reason (``govcloud``,
    ``not_in_catalog``, ``no_price``, ``ambiguous``, ``already_priced``) and candidates.
    """
    from sqlalchemy import func, select

    from agora_cli.store.engine import dialect_name
    from agora_cli.store.schema import token_usage as u

    # DISTINCT on MySQL's PAD SPACE collation would merge 'a' and 'a '; their lengths keep them
    # apart (usage.reprice groups the same way).
    keys: list[Any] = [u.c.model_id]
    if dialect_name(conn) == "mysql":
        keys.append(func.length(u.c.model_id))
    ledger_ids = sorted(conn.execute(select(u.c.model_id).group_by(*keys)).scalars())
    prices = current_prices(conn)
    skipped: list[SkippedModel] = []
    wanted: dict[str, tuple[str, ModelPrice]] = {}
    for ledger_id in ledger_ids:
        if resolve_model_price(ledger_id, prices).price is not None:
            continue
        outcome = match_catalog_price(ledger_id, catalog)
        if isinstance(outcome, SkippedModel):
            skipped.append(outcome)
        elif outcome.model_id in prices:
            skipped.append(SkippedModel(ledger_id, "already_priced", (outcome.model_id,)))
        else:
            wanted.setdefault(outcome.model_id, (outcome.catalog_id, outcome.price))
    ordered = [wanted[model_id] for model_id in sorted(wanted)]
    changes = _write_prices(conn, ordered, overwrite=False, dry_run=dry_run, clock=clock)
    written = []
    for change in changes:
        if change.action == "unchanged":  # priced meanwhile by someone else: never overwrite
            skipped.append(SkippedModel(change.model, "already_priced", (change.model,)))
        else:
            written.append(change)
    return SeedResult(
        catalog=catalog.source, prices=tuple(written), skipped=tuple(skipped), dry_run=dry_run
    )
