"""Model prices: the price table, seeding from models.dev, resolving ledger ids, the estimate.

``agent_model_pricing`` keeps one current row per model (``is_current = 1``) and the retired rows
as history. Every write retires and inserts in the caller's transaction, so no reader sees two
current rows or none. Two concurrent writers of one model are serialised: on PostgreSQL by a
transaction-scoped advisory lock per model; on MySQL/MariaDB the new row is inserted first and a
locking read of the model's current rows then waits on (or deadlocks with) any other writer's
uncommitted row, so at least one of two racing writers sees and retires the other's row (a
deadlock victim is retried whole by ``engine.retry_transient``); on SQLite every transaction
already holds the write lock (``BEGIN IMMEDIATE``).

Resolution (``resolve_model_price``) maps the id a provider reported to a price by the rules of
pricing-and-ledger.md — exact, then route prefixes dropped, then one trailing calendar date — and
says which rule matched. ``estimate_cost`` applies cache fall-backs and context tiers. Rates are
USD per 1M tokens.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date
from difflib import get_close_matches
from typing import TYPE_CHECKING, Any

from agora_cli.store.clock import Clock, SystemClock
from agora_cli.store.errors import InvalidInput, ModelNotInCatalog

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, RowMapping

    from agora_cli.store.catalog import Catalog

__all__ = [
    "FIRST_PARTY_PROVIDERS",
    "RULES",
    "CatalogMatch",
    "ModelPrice",
    "PriceChange",
    "PriceTier",
    "Resolution",
    "SeedResult",
    "SkippedModel",
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


# --- names and resolution (pure) --------------------------------------------------------------


def split_model_name(name: str) -> tuple[str, str]:
    """Split ``provider/model`` on the first ``/`` (the model id may hold more)."""
    provider, sep, model = name.strip().partition("/")
    if not sep or not provider or not model:
        raise InvalidInput(
            f"{name!r} is not PROVIDER/MODEL (e.g. openai/gpt-4o-mini or "
            "openrouter/anthropic/claude-sonnet-4): the provider is the text before the first '/'"
        )
    return provider, model


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
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) and value >= 0 else None


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
        if isinstance(size, bool) or not isinstance(size, int | float) or size < 0:
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
    """The price of a catalog entry, stored under ``model_id``; None when it has no usable cost."""
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
    return ModelPrice(
        model_id=model_id,
        input_per_1m=rate_in,
        output_per_1m=rate_out,
        cache_read_per_1m=_first_rate(cost, _CACHE_READ_KEYS),
        cache_write_per_1m=_first_rate(cost, _CACHE_WRITE_KEYS),
        tiers=tiers,
        source="models.dev",
    )


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
    from sqlalchemy import select

    from agora_cli.store.schema import model_pricing as mp

    base = select(mp).where(mp.c.is_current == 1).order_by(mp.c.effective_from, mp.c.id)
    out: dict[str, ModelPrice] = {}
    if model_ids is None:
        for row in conn.execute(base).mappings():
            out[row["model_id"]] = _price(row)
        return out
    ids = sorted(set(model_ids))
    for chunk in _chunks(ids):
        for row in conn.execute(base.where(mp.c.model_id.in_(chunk))).mappings():
            out[row["model_id"]] = _price(row)
    return out


def list_prices(
    conn: Connection, *, model_id: str | None = None, history: bool = False
) -> list[ModelPrice]:
    """Current prices (with ``history``, every row), by model, newest first within a model."""
    from sqlalchemy import select

    from agora_cli.store.schema import model_pricing as mp

    q = select(mp).order_by(mp.c.model_id, mp.c.effective_from.desc(), mp.c.is_current.desc())
    if not history:
        q = q.where(mp.c.is_current == 1)
    if model_id is not None:
        q = q.where(mp.c.model_id == model_id)
    return [_price(row) for row in conn.execute(q).mappings()]


def resolve_current_price(conn: Connection, model_id: str) -> Resolution:
    """Resolve a ledger model id against the current prices (one indexed query)."""
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
    """Make this the model's current price (retire + insert); ``unchanged`` when it already is."""
    model_id = (model_id or "").strip()
    if not model_id or len(model_id) > 255:
        raise InvalidInput("the model id must be 1 to 255 characters")
    rates = {
        "--input": input_per_1m,
        "--output": output_per_1m,
        "--cache-read": cache_read_per_1m,
        "--cache-write": cache_write_per_1m,
    }
    for flag, value in rates.items():
        if value is not None and (not math.isfinite(value) or value < 0):
            raise InvalidInput(f"{flag} must be a price in USD per 1M tokens (>= 0), not {value}")
    price = ModelPrice(
        model_id=model_id,
        input_per_1m=float(input_per_1m),
        output_per_1m=float(output_per_1m),
        cache_read_per_1m=_opt_float(cache_read_per_1m),
        cache_write_per_1m=_opt_float(cache_write_per_1m),
        tiers=tuple(sorted(tiers, key=lambda t: t.size)),
        source=source,
    )
    return _write_prices(conn, [(None, price)], overwrite=True, dry_run=False, clock=clock)[0]


def _lock_models(conn: Connection, model_ids: Sequence[str]) -> None:
    """Serialise writers of the same models (PostgreSQL: advisory locks, in sorted order)."""
    from sqlalchemy import text

    from agora_cli.store.engine import dialect_name

    if dialect_name(conn) != "postgresql" or not model_ids:
        return
    conn.execute(
        text(
            "SELECT count(pg_advisory_xact_lock(hashtextextended(k, 0))) "
            "FROM (SELECT unnest(CAST(:keys AS text[])) AS k ORDER BY 1) AS s"
        ),
        {"keys": [f"agora.model_price:{m}" for m in sorted(model_ids)]},
    )


def _write_prices(
    conn: Connection,
    wanted: Sequence[tuple[str | None, ModelPrice]],
    *,
    overwrite: bool,
    dry_run: bool,
    clock: Clock | None,
) -> list[PriceChange]:
    """Write many prices in a few statements; without ``overwrite`` existing prices are kept."""
    from sqlalchemy import delete, insert, select, update

    from agora_cli.store.schema import model_pricing as mp

    ids = sorted({price.model_id for _, price in wanted})
    current: dict[str, ModelPrice] = {}
    if not dry_run:
        _lock_models(conn, ids)
    for chunk in _chunks(ids):
        q = (
            select(mp)
            .where(mp.c.model_id.in_(chunk), mp.c.is_current == 1)
            .order_by(mp.c.effective_from, mp.c.id)
        )
        if not dry_run:
            q = q.with_for_update()
        for row in conn.execute(q).mappings():
            current[row["model_id"]] = _price(row)

    now = (clock or SystemClock()).now_ms()
    changes: list[PriceChange] = []
    new_rows: list[ModelPrice] = []
    for catalog_id, price in wanted:
        old = current.get(price.model_id)
        if old is not None and (not overwrite or old.same_rates(price)):
            changes.append(PriceChange(price.model_id, catalog_id, old, old, "unchanged"))
            continue
        new = replace(price, id=uuid.uuid4().hex, effective_from=now, is_current=True)
        new_rows.append(new)
        action = "inserted" if old is None else "updated"
        changes.append(PriceChange(price.model_id, catalog_id, new, old, action))
    if dry_run or not new_rows:
        return changes

    conn.execute(insert(mp), [_row(p) for p in new_rows])
    # Retire every other current row of these models. Read them with a locking read *after* the
    # insert: on MySQL that read waits on a concurrent writer's uncommitted row (see module docs).
    # A row committed since the first read makes this write an update of it (or a no-op).
    keep = {p.id for p in new_rows}
    others: dict[str, list[ModelPrice]] = {}
    for chunk in _chunks(sorted({p.model_id for p in new_rows})):
        q = (
            select(mp)
            .where(mp.c.model_id.in_(chunk), mp.c.is_current == 1)
            .order_by(mp.c.effective_from, mp.c.id)
            .with_for_update()
        )
        for row in conn.execute(q).mappings():
            if row["id"] not in keep:
                others.setdefault(row["model_id"], []).append(_price(row))
    stale: list[str] = []
    withdrawn: list[str] = []
    for i, change in enumerate(changes):
        rivals = others.get(change.model) if change.action != "unchanged" else None
        if not rivals:
            continue
        latest = rivals[-1]
        if (change.previous is None or latest.id != change.previous.id) and (
            not overwrite or latest.same_rates(change.price)
        ):
            withdrawn.append(str(change.price.id))
            stale += [p.id for p in rivals[:-1] if p.id]
            changes[i] = PriceChange(change.model, change.catalog_id, latest, latest, "unchanged")
            continue
        stale += [p.id for p in rivals if p.id]
        if change.previous is None or latest.id != change.previous.id:
            changes[i] = replace(change, previous=latest, action="updated")
    for chunk in _chunks(withdrawn):
        conn.execute(delete(mp).where(mp.c.id.in_(chunk)))
    for chunk in _chunks(stale):
        conn.execute(update(mp).where(mp.c.id.in_(chunk)).values(is_current=0))
    return changes


def _row(p: ModelPrice) -> dict[str, Any]:
    tiers = tiers_to_json(p.tiers)
    return {
        "id": p.id,
        "model_id": p.model_id,
        "input_price_per_1m": p.input_per_1m,
        "output_price_per_1m": p.output_per_1m,
        "cache_read_price_per_1m": p.cache_read_per_1m,
        "cache_write_price_per_1m": p.cache_write_per_1m,
        "tiers": None if tiers is None else json.dumps(tiers, separators=(",", ":")),
        "source": p.source,
        "effective_from": p.effective_from,
        "is_current": 1,
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

    A missing provider or model, or a model without a cost, raises ``ModelNotInCatalog`` naming
    every such name with close-name suggestions, before anything is written.
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
            problems.append(
                f"{name} has no price in the catalog (set one by hand: "
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
    from sqlalchemy import select

    from agora_cli.store.schema import token_usage as u

    ledger_ids = sorted(conn.execute(select(u.c.model_id).distinct()).scalars())
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
