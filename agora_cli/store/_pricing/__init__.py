"""Model prices: the pure rules, the price table, and seeding from models.dev.

One concern a module: ``rules`` (resolving a ledger id to a price, the estimate, tiers, a
catalog entry's rates — no SQL), ``table`` (reading and writing ``agent_model_pricing`` safely
under concurrency) and ``seeding`` (pricing named models, or every model the ledger has seen,
from the catalog). Every name keeps its old import path, ``agora_cli.store._pricing``.
"""

from __future__ import annotations

from agora_cli.store._pricing.rules import (
    FIRST_PARTY_PROVIDERS,
    HYPERSCALERS,
    MAX_PRICE_PER_1M,
    PROFILE_PREFIXES,
    ROUTE_ALIASES,
    RULES,
    ModelPrice,
    PriceTier,
    Resolution,
    applicable_rates,
    check_price,
    estimate_cost,
    is_bedrock_id,
    is_govcloud,
    price_from_catalog,
    resolution_candidates,
    resolve_model_price,
    route_forms,
    source_provider,
    split_model_name,
    strip_date_suffix,
    tier_rates,
    tiers_to_json,
)
from agora_cli.store._pricing.seeding import (
    CatalogMatch,
    SeedResult,
    SkippedModel,
    match_catalog_price,
    needs_catalog_price,
    seed_missing_prices,
    seed_prices_from_models_dev,
)
from agora_cli.store._pricing.table import (
    PriceChange,
    current_prices,
    list_prices,
    resolve_current_price,
    set_price,
)

__all__ = [
    "FIRST_PARTY_PROVIDERS",
    "HYPERSCALERS",
    "MAX_PRICE_PER_1M",
    "PROFILE_PREFIXES",
    "ROUTE_ALIASES",
    "RULES",
    "CatalogMatch",
    "ModelPrice",
    "PriceChange",
    "PriceTier",
    "Resolution",
    "SeedResult",
    "SkippedModel",
    "applicable_rates",
    "check_price",
    "current_prices",
    "estimate_cost",
    "is_bedrock_id",
    "is_govcloud",
    "list_prices",
    "match_catalog_price",
    "needs_catalog_price",
    "price_from_catalog",
    "resolution_candidates",
    "resolve_current_price",
    "resolve_model_price",
    "route_forms",
    "seed_missing_prices",
    "seed_prices_from_models_dev",
    "set_price",
    "source_provider",
    "split_model_name",
    "strip_date_suffix",
    "tier_rates",
    "tiers_to_json",
]
