"""Pure pricing rules: resolution, the estimate, catalog prices and ``seed --missing`` matching.

No database here; these are functions of their arguments (the catalog is the fixture snapshot).
"""

from __future__ import annotations

import math

import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from agora_cli.store._catalog import ModelCatalog
from agora_cli.store._errors import InvalidInput
from agora_cli.store._pricing import (
    HYPERSCALERS,
    MAX_PRICE_PER_1M,
    ROUTE_ALIASES,
    CatalogMatch,
    ModelPrice,
    PriceTier,
    SkippedModel,
    applicable_rates,
    estimate_cost,
    is_bedrock_id,
    is_govcloud,
    match_catalog_price,
    price_from_catalog,
    resolve_model_price,
    route_forms,
    source_provider,
    split_model_name,
    strip_date_suffix,
    tier_rates,
)


def price(model_id: str, inp: float = 1.0, out: float = 2.0, **kw: object) -> ModelPrice:
    return ModelPrice(model_id=model_id, input_per_1m=inp, output_per_1m=out, **kw)  # type: ignore[arg-type]


PRICES = {
    m: price(m)
    for m in (
        "gpt-4o-mini",
        "claude-3-5-sonnet",
        "anthropic.claude-haiku-4-5-20251001-v1:0",
        "us-gov.anthropic.claude-3-5-sonnet-20240620-v1:0",
        "gemini-1.5-pro",
        "gpt-4",
        "o1",
    )
}


@pytest.mark.parametrize(
    ("model_id", "matched", "rule"),
    [
        ("gpt-4o-mini", "gpt-4o-mini", "exact"),
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini", "date"),
        ("openai/gpt-4o-mini", "gpt-4o-mini", "prefix"),
        ("openrouter/openai/gpt-4o-mini", "gpt-4o-mini", "prefix"),
        ("openrouter/openai/gpt-4o-mini-2024-07-18", "gpt-4o-mini", "prefix+date"),
        ("claude-3-5-sonnet-20241022", "claude-3-5-sonnet", "date"),
        ("anthropic/claude-3-5-sonnet-20241022", "claude-3-5-sonnet", "prefix+date"),
        (
            "us.anthropic.claude-haiku-4-5-20251001-v1:0",
            "anthropic.claude-haiku-4-5-20251001-v1:0",
            "prefix",
        ),
        (
            "global.anthropic.claude-haiku-4-5-20251001-v1:0",
            "anthropic.claude-haiku-4-5-20251001-v1:0",
            "prefix",
        ),
        (
            "arn:aws:bedrock:us-east-1:123456789012:inference-profile/"
            "eu.anthropic.claude-haiku-4-5-20251001-v1:0",
            "anthropic.claude-haiku-4-5-20251001-v1:0",
            "prefix",
        ),
        (
            "us-gov.anthropic.claude-3-5-sonnet-20240620-v1:0",
            "us-gov.anthropic.claude-3-5-sonnet-20240620-v1:0",
            "exact",
        ),
        # unpriced: nothing but a route and one real date is ever stripped
        ("gemini-1.5-pro-002", None, None),
        ("gpt-4-0613", None, None),
        ("gpt-4o-mini-latest", None, None),
        ("claude-3-5-sonnet@20241022", None, None),
        ("claude-3-5-sonnet-20241322", None, None),  # month 13: not a date
        ("gpt-4o-mini-2024-02-30", None, None),  # 30 February: not a date
        ("o1-2024-12-17-2024-12-17", None, None),  # only one date is dropped
        # GovCloud is never priced from the commercial price
        ("us-gov.anthropic.claude-haiku-4-5-20251001-v1:0", None, None),
        (
            "arn:aws-us-gov:bedrock:us-gov-west-1:123456789012:foundation-model/"
            "anthropic.claude-haiku-4-5-20251001-v1:0",
            None,
            None,
        ),
        ("", None, None),
    ],
)
def test_resolution_rules(model_id: str, matched: str | None, rule: str | None) -> None:
    res = resolve_model_price(model_id, PRICES)
    assert (res.matched, res.rule) == (matched, rule)
    assert res.price is (None if matched is None else PRICES[matched])
    assert res.model_id == model_id


@pytest.mark.parametrize(
    ("model_id", "route", "date"),
    [
        ("gpt-4o-mini", None, None),
        ("gpt-4o-mini-2024-07-18", None, "-2024-07-18"),
        ("openrouter/openai/gpt-4o-mini", "openrouter/openai/", None),
        ("openrouter/openai/gpt-4o-mini-2024-07-18", "openrouter/openai/", "-2024-07-18"),
        ("jp.anthropic.claude-haiku-4-5-20251001-v1:0", "jp.", None),
        ("au.anthropic.claude-haiku-4-5-20251001-v1:0", "au.", None),
        (
            "arn:aws:bedrock:eu-west-1:1:inference-profile/eu.anthropic.claude-haiku-4-5-20251001-v1:0",
            "arn:aws:bedrock:eu-west-1:1:inference-profile/eu.",
            None,
        ),
    ],
)
def test_a_resolution_says_what_it_dropped(
    model_id: str, route: str | None, date: str | None
) -> None:
    res = resolve_model_price(model_id, PRICES)
    assert (res.route, res.date) == (route, date)
    assert res.matched is not None
    assert model_id == (route or "") + res.matched + (date or "")


def test_the_provider_of_a_source() -> None:
    assert source_provider("models.dev:amazon-bedrock") == "amazon-bedrock"
    for legacy in ("models.dev", "manual", "demo", None, "models.dev:"):
        assert source_provider(legacy) is None
    res = resolve_model_price(
        "gpt-4o-mini", {"gpt-4o-mini": price("gpt-4o-mini", source="models.dev:openai")}
    )
    assert res.provider == "openai"


def test_tier_rates_scale_the_base_cache_rates() -> None:
    base = price("m", 2.5, 15.0, cache_read_per_1m=0.25, cache_write_per_1m=3.0)
    tier = PriceTier(272_000, 5.0, 22.5)
    assert tier_rates(base, tier) == PriceTier(272_000, 5.0, 22.5, 0.5, 6.0)
    own = PriceTier(272_000, 5.0, 22.5, cache_read_per_1m=0.4)
    assert tier_rates(base, own) == PriceTier(272_000, 5.0, 22.5, 0.4, 6.0)
    assert tier_rates(price("m", 2.5, 15.0), tier) == tier  # no base cache rate: none
    free = price("m", 0.0, 0.0, cache_read_per_1m=0.0)
    assert tier_rates(free, tier).cache_read_per_1m is None  # no ratio from a zero input rate
    tiny = price("m", 1e-300, 0.0, cache_read_per_1m=1.0)
    assert tier_rates(tiny, tier).cache_read_per_1m == MAX_PRICE_PER_1M  # bounded like any rate
    # a subnormal base input rate: the ratio overflows to inf; a free cache rate stays free
    # (0 × inf was NaN, and every row of the model went unpriced), a paid one is bounded
    subnormal = price("m", 2.2250738585e-313, 0.0, cache_read_per_1m=0.0, cache_write_per_1m=2.0)
    scaled = tier_rates(subnormal, PriceTier(0, 1.0, 0.0))
    assert (scaled.cache_read_per_1m, scaled.cache_write_per_1m) == (0.0, MAX_PRICE_PER_1M)
    tiered = price("m", 2.5, 15.0, cache_read_per_1m=0.25, tiers=(tier,))
    assert applicable_rates(tiered, 272_000) == PriceTier(0, 2.5, 15.0, 0.25, None)
    assert applicable_rates(tiered, 272_001) == PriceTier(272_000, 5.0, 22.5, 0.5, None)


def test_the_spec_tier_check() -> None:
    # base 1 / 0.10, tier above 200k at 2 with no cache rate; 300k in, 200k of it cache-read
    p = price("m", 1.0, 4.0, cache_read_per_1m=0.10, tiers=(PriceTier(200_000, 2.0, 8.0),))
    cost = estimate_cost(p, input_tokens=300_000, output_tokens=0, cache_read_tokens=200_000)
    assert cost == pytest.approx(0.24)


def test_bedrock_ids() -> None:
    for spelling in (
        "anthropic.claude-haiku-4-5-20251001-v1:0",
        "eu.anthropic.claude-haiku-4-5-20251001-v1:0",
        "jp.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "us-gov.anthropic.claude-3-5-sonnet-20240620-v1:0",
        "amazon.nova-pro-v1:0",
        "meta.llama3-3-70b-instruct-v1:0",
        "deepseek.r1-v1:0",
    ):
        assert is_bedrock_id(spelling), spelling
    for spelling in ("gpt-4o", "claude-3-5-sonnet", "openai/gpt-4o", "anthropic/claude-x", "x.y"):
        assert not is_bedrock_id(spelling), spelling


def test_route_aliases_name_catalog_providers(catalog: ModelCatalog) -> None:
    assert set(ROUTE_ALIASES.values()) <= set(catalog.providers)
    assert not set(ROUTE_ALIASES) & set(catalog.providers)  # an alias is never a provider id
    assert set(HYPERSCALERS) <= set(catalog.providers)


def test_an_exact_price_beats_a_prefix_and_a_prefix_beats_a_date() -> None:
    prices = {m: price(m) for m in ("openai/gpt-4o-mini-2024-07-18", "gpt-4o-mini-2024-07-18")}
    prices["gpt-4o-mini"] = price("gpt-4o-mini")
    res = resolve_model_price("openai/gpt-4o-mini-2024-07-18", prices)
    assert (res.matched, res.rule) == ("openai/gpt-4o-mini-2024-07-18", "exact")
    res = resolve_model_price("x/openai/gpt-4o-mini-2024-07-18", prices)
    assert (res.matched, res.rule) == ("openai/gpt-4o-mini-2024-07-18", "prefix")


def test_route_forms_and_dates() -> None:
    assert route_forms("openrouter/openai/gpt-4o-mini") == [
        "openrouter/openai/gpt-4o-mini",
        "openai/gpt-4o-mini",
        "gpt-4o-mini",
    ]
    assert route_forms("us-gov.anthropic.x") == ["us-gov.anthropic.x"]
    assert route_forms("bedrock/us.amazon.nova-pro-v1:0") == [
        "bedrock/us.amazon.nova-pro-v1:0",
        "us.amazon.nova-pro-v1:0",
        "amazon.nova-pro-v1:0",
    ]
    assert strip_date_suffix("claude-3-5-sonnet-20241022") == "claude-3-5-sonnet"
    assert strip_date_suffix("gpt-4o-2024-08-06") == "gpt-4o"
    assert strip_date_suffix("gpt-4-0613") is None
    assert strip_date_suffix("-20241022") is None
    assert is_govcloud("us-gov.anthropic.x")
    assert is_govcloud("bedrock/us-gov.anthropic.x")
    assert is_govcloud("arn:aws-us-gov:bedrock:us-gov-east-1:1:inference-profile/us.x")
    assert not is_govcloud("us.anthropic.x")


def test_split_model_name_splits_on_the_first_slash_only() -> None:
    assert split_model_name("openai/gpt-4o-mini") == ("openai", "gpt-4o-mini")
    assert split_model_name("openrouter/anthropic/claude-sonnet-4") == (
        "openrouter",
        "anthropic/claude-sonnet-4",
    )
    for bad in ("gpt-4o-mini", "/gpt-4o", "openai/", ""):
        with pytest.raises(InvalidInput, match="PROVIDER/MODEL"):
            split_model_name(bad)


def test_a_model_id_that_cannot_be_stored_is_refused_when_named() -> None:
    assert split_model_name("p/" + "x" * 255) == ("p", "x" * 255)
    for model, units in (("x" * 256, 256), ("😀" * 128, 256)):
        with pytest.raises(
            InvalidInput, match=f"is {units} UTF-16 code units long; the limit is 255"
        ):
            split_model_name(f"p/{model}")
    with pytest.raises(InvalidInput, match="NUL"):
        split_model_name("p/a\x00b")


# --- the estimate -----------------------------------------------------------------------------


def test_estimate_worked_examples() -> None:
    plain = price("m", 3.0, 15.0)
    assert estimate_cost(plain, input_tokens=1_000_000, output_tokens=500_000) == pytest.approx(
        10.5
    )
    cached = price("m", 3.0, 15.0, cache_write_per_1m=3.75, cache_read_per_1m=0.30)
    usage = {
        "input_tokens": 1_000_000,
        "output_tokens": 0,
        "cache_write_tokens": 400_000,
        "cache_read_tokens": 100_000,
    }
    assert estimate_cost(cached, **usage) == pytest.approx(3.03)
    assert estimate_cost(plain, **usage) == pytest.approx(3.00)


def test_estimate_applies_the_highest_exceeded_tier_to_the_whole_row() -> None:
    tiered = price(
        "m",
        3.0,
        15.0,
        cache_read_per_1m=0.3,
        tiers=(
            PriceTier(200_000, 6.0, 22.5, cache_read_per_1m=0.6),
            PriceTier(1_000_000, 10.0, 30.0),
        ),
    )
    # at the size exactly: base rates
    assert estimate_cost(tiered, input_tokens=200_000, output_tokens=0) == pytest.approx(0.6)
    # above it: the tier's rates for every token, output included
    assert estimate_cost(
        tiered, input_tokens=300_000, output_tokens=100_000, cache_read_tokens=100_000
    ) == pytest.approx((200_000 * 6.0 + 100_000 * 0.6 + 100_000 * 22.5) / 1e6)
    # the highest exceeded tier wins; a cache rate it lacks is the base's scaled by the input
    # ratio (0.3 × 10/3 = 1.0), as the providers charge
    assert estimate_cost(
        tiered, input_tokens=2_000_000, output_tokens=0, cache_read_tokens=1_000_000
    ) == pytest.approx(11.0)
    # with no base cache rate either, it falls back to the tier's input rate
    bare = price("m", 3.0, 15.0, tiers=(PriceTier(1_000_000, 10.0, 30.0),))
    assert estimate_cost(
        bare, input_tokens=2_000_000, output_tokens=0, cache_read_tokens=1_000_000
    ) == pytest.approx(20.0)


_tokens = st.integers(min_value=0, max_value=10**9)
_rate = st.floats(min_value=0, max_value=1000, allow_nan=False, allow_infinity=False)


@st.composite
def _usage(draw: st.DrawFn) -> dict[str, int]:
    inp = draw(_tokens)
    read = draw(st.integers(min_value=0, max_value=inp))
    write = draw(st.integers(min_value=0, max_value=inp - read))
    return {
        "input_tokens": inp,
        "output_tokens": draw(_tokens),
        "cache_read_tokens": read,
        "cache_write_tokens": write,
    }


@settings(max_examples=examples(200), deadline=None)
@given(
    a=_usage(),
    b=_usage(),
    k=st.integers(min_value=0, max_value=1000),
    rates=st.tuples(_rate, _rate, st.none() | _rate, st.none() | _rate),
)
def test_estimate_is_linear_in_token_counts(
    a: dict[str, int],
    b: dict[str, int],
    k: int,
    rates: tuple[float, float, float | None, float | None],
) -> None:
    p = price("m", rates[0], rates[1], cache_read_per_1m=rates[2], cache_write_per_1m=rates[3])
    both = {key: a[key] + b[key] for key in a}
    assert estimate_cost(p, **both) == pytest.approx(
        estimate_cost(p, **a) + estimate_cost(p, **b), rel=1e-9, abs=1e-9
    )
    scaled = {key: a[key] * k for key in a}
    assert estimate_cost(p, **scaled) == pytest.approx(
        k * estimate_cost(p, **a), rel=1e-9, abs=1e-9
    )
    assert estimate_cost(p, **a) >= 0


# --- resolution properties --------------------------------------------------------------------

_segment = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789.", min_size=1, max_size=12)
_base = st.builds(lambda parts: "-".join(parts), st.lists(_segment, min_size=1, max_size=4))
_non_date_suffix = st.one_of(
    st.sampled_from(["-002", "-0613", "-latest", "-preview", "@001", "-v1:0", "-2024", "-202410"]),
    st.builds(lambda n: f"-{n:04d}", st.integers(min_value=0, max_value=9999)),
    st.builds(lambda n: f"-{n}", st.integers(min_value=0, max_value=10**6)),
)
_date = st.dates(min_value=__import__("datetime").date(1990, 1, 1))
_date_suffix = st.one_of(
    _date.map(lambda d: f"-{d.isoformat()}"), _date.map(lambda d: f"-{d:%Y%m%d}")
)


@settings(max_examples=examples(300), deadline=None)
@given(base=_base, suffix=_non_date_suffix)
def test_resolution_never_strips_a_non_date_suffix(base: str, suffix: str) -> None:
    model_id = base + suffix
    if strip_date_suffix(model_id) is not None:  # e.g. base ending in a date itself
        return
    res = resolve_model_price(model_id, {base: price(base)})
    assert res.price is None


@settings(max_examples=examples(300), deadline=None)
@given(base=_base, suffix=_date_suffix)
def test_resolution_strips_one_real_date(base: str, suffix: str) -> None:
    res = resolve_model_price(base + suffix, {base: price(base)})
    assert (res.matched, res.rule) == (base, "date")


@settings(max_examples=examples(300), deadline=None)
@given(
    route=st.sampled_from(
        ["openrouter/", "openai/", "a/b/", "us.", "eu.", "global.", "apac.", "jp.", "au."]
    ),
    base=_base,
    suffix=st.one_of(_date_suffix, _non_date_suffix, st.just("")),
    priced=st.sets(st.sampled_from(["exact", "undated"]), max_size=2),
)
def test_stripping_a_route_prefix_never_changes_the_date_rules_outcome(
    route: str, base: str, suffix: str, priced: set[str]
) -> None:
    model_id = base + suffix
    prices = {}
    if "exact" in priced:
        prices[model_id] = price(model_id, 1.0)
    if "undated" in priced:
        prices[base] = price(base, 2.0)
    bare = resolve_model_price(model_id, prices)
    routed = resolve_model_price(route + model_id, prices)
    assert routed.matched == bare.matched
    assert routed.price == bare.price
    expected_rule = {"exact": "prefix", "date": "prefix+date", None: None}[bare.rule]
    assert routed.rule == expected_rule


# --- catalog prices ---------------------------------------------------------------------------


def test_price_from_catalog_reads_cache_spellings_and_tiers(catalog: ModelCatalog) -> None:
    mini = price_from_catalog(catalog.entry("openai", "gpt-4o-mini"), "gpt-4o-mini")
    assert mini is not None
    assert (mini.input_per_1m, mini.output_per_1m, mini.cache_read_per_1m) == (0.15, 0.6, 0.075)
    assert mini.cache_write_per_1m is None and mini.tiers == () and mini.source == "models.dev"
    assert price_from_catalog(catalog.entry("openai", "gpt-4o"), "x", "openai").source == (  # type: ignore[union-attr]
        "models.dev:openai"
    )
    minimax = price_from_catalog(catalog.entry("minimax", "MiniMax-M2.1"), "MiniMax-M2.1")
    assert minimax is not None
    assert (minimax.cache_read_per_1m, minimax.cache_write_per_1m) == (0.03, 0.375)
    silicon = catalog.entry("siliconflow", "MiniMaxAI/MiniMax-M2.5")
    assert price_from_catalog(silicon, "x").cache_read_per_1m == 0.03  # type: ignore[union-attr]
    gemini = price_from_catalog(catalog.entry("google", "gemini-2.5-pro"), "gemini-2.5-pro")
    assert gemini is not None
    assert gemini.tiers == (PriceTier(200_000, 2.5, 15.0, cache_read_per_1m=0.25),)
    assert price_from_catalog(catalog.entry("openai", "gpt-image-1"), "gpt-image-1") is None


@pytest.mark.parametrize(
    "cost",
    [
        {"input": 1},
        {"input": "1", "output": 2},
        {"input": -1, "output": 2},
        {"input": True, "output": 2},
        {"input": 1, "output": 2, "tiers": [{"input": 2}]},
        {"input": 1, "output": 2, "tiers": "many"},
        # out of range: never stored, and never replaced by a fall-back rate
        {"input": 1e300, "output": 2},
        {"input": 1, "output": 1_000_001},
        {"input": 1, "output": 10**400},
        {"input": float("nan"), "output": 2},
        {"input": 1, "output": float("inf")},
        {"input": 1, "output": 2, "cache_read": -0.1},
        {"input": 1, "output": 2, "cached_input": float("nan")},
        {"input": 1, "output": 2, "cache_write": 1e9},
        {"input": 1, "output": 2, "tiers": [{"input": -2, "output": 4, "tier": {"size": 9}}]},
        {"input": 1, "output": 2, "tiers": [{"input": 2, "output": 1e12, "tier": {"size": 9}}]},
        {"input": 1, "output": 2, "tiers": [{"input": 2, "output": 4, "tier": {"size": 1e300}}]},
        {"input": 1, "output": 2, "tiers": [{"input": 2, "output": 4, "tier": {"size": -1}}]},
    ],
)
def test_an_unusable_cost_is_no_price_never_zero(cost: dict[str, object]) -> None:
    assert price_from_catalog({"cost": cost}, "m") is None


@pytest.mark.parametrize("size", [float("inf"), float("nan")])
def test_a_tier_size_that_is_not_finite_is_no_price_not_a_crash(size: float) -> None:
    # int(inf) raised OverflowError (and int(nan) ValueError): an "unexpected" exit 1.
    cost = {"input": 1, "output": 2, "tiers": [{"input": 2, "output": 4, "tier": {"size": size}}]}
    assert price_from_catalog({"cost": cost}, "m") is None


def test_the_largest_price_is_usable_and_its_estimates_finite() -> None:
    top = price_from_catalog({"cost": {"input": 1_000_000, "output": 1_000_000}}, "m")
    assert top is not None and top.in_range()
    big = 2**63 - 1
    cost = estimate_cost(top, input_tokens=big, output_tokens=big, cache_read_tokens=big)
    assert math.isfinite(cost) and cost < 3e19


def test_non_context_tiers_are_ignored() -> None:
    p = price_from_catalog(
        {
            "cost": {
                "input": 1,
                "output": 2,
                "tiers": [
                    {"input": 5, "output": 6, "tier": {"type": "time-of-day", "size": 1}},
                    {"input": 3, "output": 4, "tier": {"type": "context", "size": 10}},
                ],
            }
        },
        "m",
    )
    assert p is not None and p.tiers == (PriceTier(10, 3.0, 4.0),)


# --- seed --missing matching ------------------------------------------------------------------


def _match(model_id: str, catalog: ModelCatalog) -> tuple[str, str, float, float]:
    m = match_catalog_price(model_id, catalog)
    assert isinstance(m, CatalogMatch), m
    return m.model_id, m.catalog_id, m.price.input_per_1m, m.price.output_per_1m


def test_missing_matching_rules(catalog: ModelCatalog) -> None:
    # providers disagree (abacus has no cache rate): the first party wins
    assert _match("gpt-4o-mini-2024-07-18", catalog) == (
        "gpt-4o-mini",
        "openai/gpt-4o-mini",
        0.15,
        0.6,
    )
    # a route naming a provider selects it; stored under the most route-stripped listed id
    assert _match("openrouter/openai/gpt-4o-mini-2024-07-18", catalog)[:2] == (
        "openai/gpt-4o-mini-2024-07-18",
        "openrouter/openai/gpt-4o-mini-2024-07-18",
    )
    assert _match("openai/gpt-4o-mini", catalog)[:2] == ("gpt-4o-mini", "openai/gpt-4o-mini")
    # Bedrock profile and ARN: the catalog lists the us. profile itself, from amazon-bedrock
    haiku = "anthropic.claude-haiku-4-5-20251001-v1:0"
    for ledger_id in (
        f"us.{haiku}",
        f"arn:aws:bedrock:us-west-2:123456789012:inference-profile/us.{haiku}",
    ):
        assert _match(ledger_id, catalog) == (
            f"us.{haiku}",
            f"amazon-bedrock/us.{haiku}",
            1.0,
            5.0,
        )
    # a profile the catalog does not list is priced as its base id
    assert _match(f"apac.{haiku}", catalog)[:2] == (haiku, f"amazon-bedrock/{haiku}")
    # an unknown route segment is dropped; every provider agreeing is enough
    assert _match("vertex/claude-3-5-sonnet-20241022", catalog)[:2] == (
        "claude-3-5-sonnet-20241022",
        "anthropic/claude-3-5-sonnet-20241022",
    )


def test_missing_matching_skips(catalog: ModelCatalog) -> None:
    gov = match_catalog_price("us-gov.anthropic.claude-3-5-sonnet-20240620-v1:0", catalog)
    assert gov == SkippedModel("us-gov.anthropic.claude-3-5-sonnet-20240620-v1:0", "govcloud")
    amb = match_catalog_price("MiniMax-M1", catalog)
    assert isinstance(amb, SkippedModel) and amb.reason == "ambiguous"
    assert amb.candidates == ("302ai/MiniMax-M1", "nano-gpt/MiniMax-M1")
    latest = match_catalog_price("gpt-4o-mini-latest", catalog)
    assert isinstance(latest, SkippedModel) and latest.reason == "not_in_catalog"
    assert "openai/gpt-4o-mini" in latest.candidates
    nocost = match_catalog_price("openai/gpt-image-1", catalog)
    assert nocost == SkippedModel("openai/gpt-image-1", "no_price", ("openai/gpt-image-1",))
    nothing = match_catalog_price("zz-unknown-model-q", catalog)
    assert nothing == SkippedModel("zz-unknown-model-q", "not_in_catalog")


def test_agreement_is_to_one_part_in_a_billion() -> None:
    def cat(*rates: float) -> ModelCatalog:
        providers = {
            f"p{i}": {"m": {"cost": {"input": r, "output": 1.0}}} for i, r in enumerate(rates)
        }
        return ModelCatalog(source="t", providers=providers, downloaded_at=0)

    agreed = match_catalog_price("m", cat(3.0, 3.0 * (1 + 1e-12)))
    assert isinstance(agreed, CatalogMatch) and agreed.catalog_id == "p0/m"
    split = match_catalog_price("m", cat(3.0, 3.0 * (1 + 1e-6)))
    assert isinstance(split, SkippedModel) and split.reason == "ambiguous"
    assert split.candidates == ("p0/m", "p1/m")
