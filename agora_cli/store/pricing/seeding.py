"""Seeding prices from the models.dev catalog: named models, or every model the ledger has seen.

``seed_prices_from_models_dev`` prices ``provider/model`` names all or nothing;
``seed_missing_prices`` prices every ledger model id that resolves to no price, never
overwriting one, by the choice rules of pricing-and-ledger.md ("Pricing what the ledger has
seen"), and reports what it could not price and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from difflib import get_close_matches
from typing import TYPE_CHECKING, Any

from agora_cli.store.clock import Clock
from agora_cli.store.errors import InvalidInput, ModelNotInCatalog
from agora_cli.store.pricing.rules import (
    ARN_RE,
    BEDROCK_FIRST_PARTY,
    FIRST_PARTY_PROVIDERS,
    ModelPrice,
    is_govcloud,
    price_from_catalog,
    resolve_model_price,
    route_forms,
    split_model_name,
    strip_date_suffix,
)
from agora_cli.store.pricing.table import PriceChange, current_prices, write_prices

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from agora_cli.store.catalog import ModelCatalog


__all__ = [
    "CatalogMatch",
    "SeedResult",
    "SkippedModel",
    "match_catalog_price",
    "seed_missing_prices",
    "seed_prices_from_models_dev",
]


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


def seed_prices_from_models_dev(
    conn: Connection,
    names: Sequence[str],
    *,
    catalog: ModelCatalog,
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
    changes = write_prices(
        conn, list(wanted.values()), overwrite=True, dry_run=dry_run, clock=clock
    )
    return SeedResult(catalog=catalog.source, prices=tuple(changes), dry_run=dry_run)


def _not_found_message(catalog: ModelCatalog, provider: str, model: str) -> str:
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


def match_catalog_price(model_id: str, catalog: ModelCatalog) -> CatalogMatch | SkippedModel:
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
        if "/" in form and not ARN_RE.match(form):
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
        or (p == "amazon-bedrock" and form.startswith(BEDROCK_FIRST_PARTY))
    ]
    if all(price.same_rates(listed[0][1]) for _, price in listed):
        provider, price = (first_party or listed)[0]
        return CatalogMatch(ledger_id, form, f"{provider}/{form}", price)
    if first_party and all(price.same_rates(first_party[0][1]) for _, price in first_party):
        provider, price = first_party[0]
        return CatalogMatch(ledger_id, form, f"{provider}/{form}", price)
    return SkippedModel(ledger_id, "ambiguous", tuple(f"{p}/{form}" for p, _ in listed))


def _close_names(
    catalog: ModelCatalog, forms: Sequence[str], provider: str | None
) -> tuple[str, ...]:
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
    catalog: ModelCatalog,
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
    changes = write_prices(conn, ordered, overwrite=False, dry_run=dry_run, clock=clock)
    written = []
    for change in changes:
        if change.action == "unchanged":  # priced meanwhile by someone else: never overwrite
            skipped.append(SkippedModel(change.model, "already_priced", (change.model,)))
        else:
            written.append(change)
    return SeedResult(
        catalog=catalog.source, prices=tuple(written), skipped=tuple(skipped), dry_run=dry_run
    )
