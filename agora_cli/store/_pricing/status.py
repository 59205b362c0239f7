"""Are the prices current? Stored prices compared with the catalog, what the catalog added, and
the ledger's model ids whose turns have no cost.

``check_prices`` compares each current price seeded from models.dev with the listing it came
from (``source='models.dev:<provider>'``, under the spelling it is stored as): ``unchanged``,
``changed`` (each field that differs, stored and catalog value), ``missing`` (the provider no
longer lists the spelling) or ``no_price`` (listed without a usable price). A price whose source
does not name a provider (``models.dev`` alone, from before agora recorded it) is compared with
every listing of its spelling: unchanged if one agrees, else changed against the listing
``seed --missing`` would choose now (the first, alphabetically, when none is chosen). A price
set by hand or by another tool (any other source) is ``not_from_catalog`` and not compared.

``new_catalog_models`` lists the listings the live catalog has and the cached copy had not, for
the providers whose prices are stored and for the spellings an unpriced ledger id would resolve
to (the catalog may now price it). ``list_unpriced_turns`` counts a window's ledger rows of
unknown cost by model id, with the price each resolves to now (``prices reprice`` fills those)
or none (they need a price). No function here writes anything.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING, Any

from agora_cli.store._ledger import list_unpriced_models
from agora_cli.store._pricing.rules import (
    ModelPrice,
    price_from_catalog,
    resolution_candidates,
    resolve_model_price,
    source_provider,
    tiers_to_json,
)
from agora_cli.store._pricing.seeding import CatalogMatch, match_catalog_price
from agora_cli.store._pricing.table import current_prices

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from agora_cli.store._catalog import ModelCatalog

__all__ = [
    "CHECK_STATES",
    "RATE_FIELDS",
    "STALE_STATES",
    "FieldChange",
    "NewModel",
    "PriceCheck",
    "UnpricedTurns",
    "check_prices",
    "list_unpriced_turns",
    "new_catalog_models",
]

# A price's state against the catalog; the STALE ones make `prices status` answer "not current".
STALE_STATES = ("changed", "missing", "no_price")
CHECK_STATES = (*STALE_STATES, "unchanged", "not_from_catalog")
RATE_FIELDS = ("input_per_1m", "output_per_1m", "cache_read_per_1m", "cache_write_per_1m")
_REL_TOL = 1e-9  # as ModelPrice.same_rates


@dataclass(frozen=True)
class FieldChange:
    """One field of a price that the catalog now gives differently (a rate, or the tiers in
    models.dev's JSON shape)."""

    field: str
    stored: Any
    catalog: Any


@dataclass(frozen=True)
class PriceCheck:
    """A current price against the catalog: its state, the listing compared with, what differs."""

    price: ModelPrice
    state: str
    catalog_id: str | None = None
    catalog_price: ModelPrice | None = None
    changes: tuple[FieldChange, ...] = ()


@dataclass(frozen=True)
class NewModel:
    """A listing the live catalog has and the cached copy had not.

    ``ledger_ids``: the unpriced ledger ids that would resolve to its spelling."""

    provider: str
    model_id: str
    price: ModelPrice | None
    ledger_ids: tuple[str, ...] = ()

    @property
    def catalog_id(self) -> str:
        return f"{self.provider}/{self.model_id}"


@dataclass(frozen=True)
class UnpricedTurns:
    """A ledger model id with turns of unknown cost in a window, and the price it resolves to
    now (``priced_as``: ``prices reprice`` fills them) or None (it needs a price)."""

    model_id: str
    turns: int
    priced_as: str | None = None


def check_prices(prices: Iterable[ModelPrice], catalog: ModelCatalog) -> list[PriceCheck]:
    """Compare each price with its catalog listing (see the module docs), in the given order."""
    return [_check(price, catalog) for price in prices]


def _check(price: ModelPrice, catalog: ModelCatalog) -> PriceCheck:
    source = price.source or ""
    if source != "models.dev" and not source.startswith("models.dev:"):
        return PriceCheck(price, "not_from_catalog")
    provider = source_provider(source)
    spelling = price.model_id
    if provider is None:
        return _check_unrecorded(price, catalog)
    entry = catalog.entry(provider, spelling)
    catalog_id = f"{provider}/{spelling}"
    if entry is None:
        return PriceCheck(price, "missing", catalog_id)
    listed = price_from_catalog(entry, spelling, provider)
    if listed is None:
        return PriceCheck(price, "no_price", catalog_id)
    return _compared(price, catalog_id, listed)


def _check_unrecorded(price: ModelPrice, catalog: ModelCatalog) -> PriceCheck:
    """A price seeded before agora recorded the provider: any listing that agrees will do."""
    spelling = price.model_id
    providers = catalog.providers_listing(spelling)
    if not providers:
        return PriceCheck(price, "missing")
    listed: list[tuple[str, ModelPrice]] = []
    for provider in providers:
        entry = catalog.entry(provider, spelling)
        found = None if entry is None else price_from_catalog(entry, spelling, provider)
        if found is not None:
            listed.append((provider, found))
    if not listed:
        return PriceCheck(price, "no_price", f"{providers[0]}/{spelling}")
    for provider, found in listed:
        if found.same_rates(price):
            return PriceCheck(price, "unchanged", f"{provider}/{spelling}", found)
    choice = match_catalog_price(spelling, catalog)
    if isinstance(choice, CatalogMatch) and choice.model_id == spelling:
        return _compared(price, choice.catalog_id, choice.price)
    provider, found = listed[0]
    return _compared(price, f"{provider}/{spelling}", found)


def _compared(price: ModelPrice, catalog_id: str, listed: ModelPrice) -> PriceCheck:
    changes = [
        FieldChange(name, getattr(price, name), getattr(listed, name))
        for name in RATE_FIELDS
        if not _same(getattr(price, name), getattr(listed, name))
    ]
    if not _same_tiers(price, listed):
        stored, listed_tiers = tiers_to_json(price.tiers), tiers_to_json(listed.tiers)
        changes.append(FieldChange("tiers", stored, listed_tiers))
    state = "changed" if changes else "unchanged"
    return PriceCheck(price, state, catalog_id, listed, tuple(changes))


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=_REL_TOL, abs_tol=0.0)


def _same_tiers(a: ModelPrice, b: ModelPrice) -> bool:
    bare = (0.0, 0.0)  # compare the tiers alone: equal base rates, the same tiers
    left = ModelPrice("", *bare, tiers=a.tiers)
    return left.same_rates(ModelPrice("", *bare, tiers=b.tiers))


def new_catalog_models(
    live: ModelCatalog,
    cached: ModelCatalog,
    *,
    providers: Iterable[str],
    unpriced_ids: Sequence[str] = (),
) -> list[NewModel]:
    """The listings ``live`` has and ``cached`` had not, of ``providers`` or of a spelling one of
    ``unpriced_ids`` would resolve to; sorted by provider, then model id."""
    wanted = set(providers)
    spellings: dict[str, list[str]] = {}
    for ledger_id in unpriced_ids:
        for spelling, _rule in resolution_candidates(ledger_id):
            spellings.setdefault(spelling, []).append(ledger_id)
    found = []
    for provider in sorted(live.providers):
        before = cached.providers.get(provider, {})
        for model_id in sorted(live.providers[provider]):
            if model_id in before:
                continue
            if provider not in wanted and model_id not in spellings:
                continue
            entry = live.providers[provider][model_id]
            price = price_from_catalog(entry, model_id, provider)
            ids = tuple(sorted(spellings.get(model_id, ())))
            found.append(NewModel(provider, model_id, price, ids))
    return found


def list_unpriced_turns(conn: Connection, *, from_day: date, to_day: date) -> list[UnpricedTurns]:
    """The window's model ids with turns of unknown cost, most turns first, each with the
    spelling it resolves to now (None: no price)."""
    unpriced = list_unpriced_models(conn, from_day=from_day, to_day=to_day)
    if not unpriced:
        return []
    prices = current_prices(conn)
    out = []
    for row in unpriced:
        res = resolve_model_price(row.model_id, prices)
        usable = res.price is not None and res.price.in_range()
        out.append(UnpricedTurns(row.model_id, row.turns, res.matched if usable else None))
    return out
