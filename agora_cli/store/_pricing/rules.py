"""Price rules, pure (no SQL): a ledger id's price, the estimate, tiers, a catalog entry's rates.

Resolution (``resolve_model_price``) maps the id a provider reported to a price by the rules of
pricing-and-ledger.md — exact, then route prefixes dropped, then one trailing calendar date — and
says which rule matched and what it dropped. ``estimate_cost`` applies cache fall-backs and
context tiers (``applicable_rates``: a tier without cache rates scales the base's). Rates are
USD per 1M tokens.

The data the catalog rules of ``seeding`` use live here too, as plain tables: ``ROUTE_ALIASES``
(route spellings of LiteLLM and the cloud SDKs → catalog provider ids), ``FIRST_PARTY_PROVIDERS``,
``HYPERSCALERS`` and the Bedrock id shapes.

Numbers: every rate is a finite number from 0 to ``MAX_PRICE_PER_1M`` (USD 1,000,000 per 1M
tokens: $1 a token, over 1,000 times the dearest model published today). With token counts
bounded by ``BIGINT``, no estimate can then overflow a double (at most ~3.7e19 USD per row). A
catalog entry whose rates fall outside that range has no usable price: it is never stored.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from types import MappingProxyType
from typing import Any

from agora_cli.store._errors import InvalidInput
from agora_cli.store._values import (
    BIGINT_MAX,
    check_finite,
    check_identity,
)

__all__ = [
    "FIRST_PARTY_PROVIDERS",
    "HYPERSCALERS",
    "MAX_PRICE_PER_1M",
    "PROFILE_PREFIXES",
    "ROUTE_ALIASES",
    "RULES",
    "ModelPrice",
    "PriceTier",
    "Resolution",
    "applicable_rates",
    "check_price",
    "estimate_cost",
    "is_bedrock_id",
    "is_govcloud",
    "price_from_catalog",
    "resolution_candidates",
    "resolve_model_price",
    "route_forms",
    "source_provider",
    "split_model_name",
    "strip_date_suffix",
    "tier_rates",
    "tiers_to_json",
]

RULES = ("exact", "prefix", "date", "prefix+date")
MAX_PRICE_PER_1M = 1_000_000.0
# The catalog providers that make the models they list: their listing of a spelling wins.
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
# The clouds that bill for models others make: second in the choice order.
HYPERSCALERS = ("amazon-bedrock", "google-vertex", "google-vertex-anthropic", "azure")
# Route spellings used by LiteLLM and the cloud SDKs, and the catalog provider each one names
# (a route that is itself a catalog provider id needs no entry). Documented in the README.
ROUTE_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "together_ai": "togetherai",
        "bedrock": "amazon-bedrock",
        "bedrock_converse": "amazon-bedrock",
        "vertex_ai": "google-vertex",
        "gemini": "google",
        "azure_ai": "azure",
        "fireworks_ai": "fireworks-ai",
        "mistralai": "mistral",
        "x-ai": "xai",
    }
)
# Bedrock's cross-region inference profiles: a route segment (``us.anthropic.…`` is billed as
# ``anthropic.…`` unless the catalog lists the profile itself). ``us-gov.`` is not one of them.
PROFILE_PREFIXES = ("us.", "eu.", "apac.", "jp.", "au.", "global.")
_GOV_PREFIX = "us-gov."
# Bedrock model ids are ``<vendor>.<model>``; for them amazon-bedrock is the first party.
_BEDROCK_VENDORS = (
    "ai21",
    "amazon",
    "anthropic",
    "cohere",
    "deepseek",
    "google",
    "luma",
    "meta",
    "minimax",
    "mistral",
    "moonshot",
    "moonshotai",
    "nvidia",
    "openai",
    "qwen",
    "stability",
    "twelvelabs",
    "writer",
    "xai",
    "zai",
)
_BEDROCK_ID_RE = re.compile(
    r"^(?:(?:us|eu|apac|jp|au|global|us-gov)\.)?(?:" + "|".join(_BEDROCK_VENDORS) + r")\.[^/]+$"
)
ARN_RE = re.compile(r"^arn:(?P<partition>aws[a-z-]*):bedrock:(?P<region>[a-z0-9-]*):")
_DATE_RE = re.compile(r"-(?:(\d{4})-(\d{2})-(\d{2})|(\d{4})(\d{2})(\d{2}))$")
_REL_TOL = 1e-9
_CACHE_READ_KEYS = ("cache_read", "cached_input", "cache_input")
_CACHE_WRITE_KEYS = ("cache_write", "cached_write")


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
        """The highest tier whose size ``input_tokens`` exceeds, if any (of tiers of one size,
        the last: the SQL of ``reprice`` tests them in that order too)."""
        chosen = None
        for tier in self.tiers:
            if input_tokens > tier.size and (chosen is None or tier.size >= chosen.size):
                chosen = tier
        return chosen


@dataclass(frozen=True)
class Resolution:
    """Which price a ledger model id resolves to, and by which rule (all None when unpriced).

    ``route`` is the text the prefix rule dropped from the left (``openrouter/openai/``, a Bedrock
    ARN up to its last ``/``, ``eu.``), ``date`` the suffix the date rule dropped
    (``-2024-05-13``): with both None the id was priced as written.
    """

    model_id: str
    matched: str | None = None
    rule: str | None = None
    price: ModelPrice | None = None
    route: str | None = None
    date: str | None = None

    @property
    def provider(self) -> str | None:
        """The catalog provider whose price this is, when its source records one."""
        return None if self.price is None else source_provider(self.price.source)


def check_price(name: str, value: object) -> float:
    """A rate in USD per 1M tokens: a finite number from 0 to ``MAX_PRICE_PER_1M``."""
    return check_finite(name, value, low=0.0, high=MAX_PRICE_PER_1M)


def _price_ok(rate: float | None) -> bool:
    return rate is None or (math.isfinite(rate) and 0 <= rate <= MAX_PRICE_PER_1M)


def _rates(p: ModelPrice | PriceTier) -> tuple[float | None, ...]:
    return (p.input_per_1m, p.output_per_1m, p.cache_read_per_1m, p.cache_write_per_1m)


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
    m = ARN_RE.match(model_id)
    if m is None:
        return False
    return m.group("region").startswith("us-gov-") or m.group("partition") == "aws-us-gov"


def _strip_route(model_id: str, *, stop_at_gov: bool = True) -> str | None:
    if stop_at_gov and (model_id.startswith(_GOV_PREFIX) or _is_gov_arn(model_id)):
        return None
    if ARN_RE.match(model_id):
        tail = model_id.rsplit("/", 1)[-1] if "/" in model_id else ""
        return tail or None
    if "/" in model_id:
        return model_id.split("/", 1)[1] or None
    for prefix in PROFILE_PREFIXES:
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
    ``jp.``/``au.``/``global.`` inference-profile prefix as a route segment. ``us-gov.`` is never
    dropped.
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
    return [(spelling, rule) for spelling, rule, _form in _candidates(model_id)]


def _candidates(model_id: str) -> list[tuple[str, str, str]]:
    """``(spelling, rule, route-stripped form it comes from)``, most specific first."""
    forms = route_forms(model_id)
    out: list[tuple[str, str, str]] = [(forms[0], "exact", forms[0])]
    out += [(form, "prefix", form) for form in forms[1:]]
    if not is_govcloud(model_id):
        for i, form in enumerate(forms):
            undated = strip_date_suffix(form)
            if undated is not None:
                out.append((undated, "date" if i == 0 else "prefix+date", form))
    seen: set[str] = set()
    unique = []
    for spelling, rule, form in out:
        if spelling not in seen:
            seen.add(spelling)
            unique.append((spelling, rule, form))
    return unique


def resolve_model_price(model_id: str, prices: Mapping[str, ModelPrice]) -> Resolution:
    """Resolve a ledger id against ``prices`` (model id → price): exact, then prefix, then date."""
    for spelling, rule, form in _candidates(model_id):
        price = prices.get(spelling)
        if price is not None:
            route = model_id[: len(model_id) - len(form)] or None
            dropped = form[len(spelling) :] or None
            return Resolution(model_id, spelling, rule, price, route=route, date=dropped)
    return Resolution(model_id)


def is_bedrock_id(spelling: str) -> bool:
    """Whether a spelling is a Bedrock model id (``anthropic.…``, ``amazon.…``, their profiles)."""
    return _BEDROCK_ID_RE.match(spelling) is not None


def source_provider(source: str | None) -> str | None:
    """The catalog provider a price's ``source`` records (``models.dev:openai`` → ``openai``).

    Prices seeded before the provider was recorded say just ``models.dev``: None.
    """
    if source is None or not source.startswith("models.dev:"):
        return None
    return source.removeprefix("models.dev:") or None


def applicable_rates(price: ModelPrice, input_tokens: int) -> PriceTier:
    """The rates that apply to a row with ``input_tokens``: the base, or the highest tier exceeded
    with its cache rates completed by ``tier_rates``. The base's rates come back as a tier of
    size 0. ``estimate_cost`` and the SQL of ``reprice`` both use these, so they agree row for
    row."""
    tier = price.tier_for(input_tokens)
    if tier is None:
        return PriceTier(
            0,
            price.input_per_1m,
            price.output_per_1m,
            price.cache_read_per_1m,
            price.cache_write_per_1m,
        )
    return tier_rates(price, tier)


def tier_rates(price: ModelPrice, tier: PriceTier) -> PriceTier:
    """``tier`` with the cache rates it lacks taken from the base, scaled by the input ratio.

    Base $2.50 input / $0.25 cache-read, tier $5 input without a cache rate → $0.50, as the
    providers charge. Only when the base has no such rate either (or its input rate is 0, where
    there is no ratio) does the rate stay None, which the estimate reads as the tier's input rate.
    A scaled rate is at most ``MAX_PRICE_PER_1M``, like every stored rate.
    """

    def scaled(own: float | None, base: float | None) -> float | None:
        if own is not None:
            return own
        if base is None or price.input_per_1m == 0:
            return None
        if base == 0:  # free stays free: 0 × an overflowed ratio (inf) would be NaN
            return 0.0
        # Bounded like any stored rate, so no estimate can overflow (a tiny base input rate
        # would otherwise make the ratio, and the rate, astronomical or infinite).
        rate = base * (tier.input_per_1m / price.input_per_1m)
        return rate if rate <= MAX_PRICE_PER_1M else MAX_PRICE_PER_1M

    return PriceTier(
        tier.size,
        tier.input_per_1m,
        tier.output_per_1m,
        scaled(tier.cache_read_per_1m, price.cache_read_per_1m),
        scaled(tier.cache_write_per_1m, price.cache_write_per_1m),
    )


def estimate_cost(
    price: ModelPrice,
    *,
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int | None = None,
    cache_write_tokens: int | None = None,
) -> float:
    """Estimate one usage row's cost in USD: uncached, cache-write, cache-read and output tokens.

    When ``input_tokens`` exceeds a tier's size, that tier's rates (the highest such tier)
    replace the base rates for the whole row (``applicable_rates``); a cache rate still missing
    falls back to the input rate.
    """
    rates = applicable_rates(price, input_tokens)
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


def tiers_from_json(text: str | None) -> tuple[PriceTier, ...]:
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


def price_from_catalog(
    entry: Mapping[str, Any], model_id: str, provider: str | None = None
) -> ModelPrice | None:
    """The price of a catalog entry, stored under ``model_id``; None when it has no usable cost.

    Its ``source`` is ``models.dev:<provider>`` (just ``models.dev`` when no provider is given).

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
        source=f"models.dev:{provider}" if provider else "models.dev",
    )
    return price if price.in_range() else None
