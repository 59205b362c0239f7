"""Are the prices current (``_pricing.status``): each stored price against its catalog listing,
what the catalog added since the cached copy, and the ledger's turns with no cost."""

from __future__ import annotations

from datetime import date
from typing import Any

from agora_cli.store import _schema as schema
from agora_cli.store._catalog import ModelCatalog
from agora_cli.store._clock import ms_to_date
from agora_cli.store._pricing import (
    FieldChange,
    ModelPrice,
    PriceTier,
    check_prices,
    list_unpriced_turns,
    new_catalog_models,
    set_price,
)

TIERED = {
    "input": 1.25,
    "output": 10.0,
    "cache_read": 0.125,
    "tiers": [{"input": 2.5, "output": 15.0, "tier": {"size": 200_000}}],
}


def catalog(providers: dict[str, dict[str, Any]]) -> ModelCatalog:
    return ModelCatalog(
        source="test",
        providers={
            p: {m: {"cost": c} for m, c in models.items()} for p, models in providers.items()
        },
        downloaded_at=0,
    )


def price(model: str, source: str | None, inp: float = 1.0, out: float = 2.0, **kw: Any) -> Any:
    return ModelPrice(model, inp, out, source=source, effective_from=1, **kw)


def test_each_price_is_compared_with_the_listing_it_came_from() -> None:
    cat = catalog(
        {
            "openai": {"gpt-4o": {"input": 2.5, "output": 10.0}, "o9": None},
            "google": {"gemini-2.5-pro": TIERED},
            "nano-gpt": {"gpt-4o": {"input": 9.0, "output": 9.0}},
        }
    )
    tiers = (PriceTier(200_000, 2.5, 15.0),)
    checks = check_prices(
        [
            price("gpt-4o", "models.dev:openai", 2.5, 10.0),
            price("gemini-2.5-pro", "models.dev:google", 1.25, 10.0, cache_read_per_1m=0.125),
            price(
                "gemini-2.5-pro",
                "models.dev:google",
                1.25,
                10.0,
                cache_read_per_1m=0.125,
                tiers=tiers,
            ),
            price("o9", "models.dev:openai"),
            price("gpt-5", "models.dev:openai"),
            price("gpt-4o", "models.dev:azure"),
            price("mine", "manual"),
            price("demo-model", "demo"),
        ],
        cat,
    )
    got = [(c.price.model_id, c.state, c.catalog_id) for c in checks]
    assert got == [
        ("gpt-4o", "unchanged", "openai/gpt-4o"),
        ("gemini-2.5-pro", "changed", "google/gemini-2.5-pro"),  # the tier is new
        ("gemini-2.5-pro", "unchanged", "google/gemini-2.5-pro"),
        ("o9", "no_price", "openai/o9"),
        ("gpt-5", "missing", "openai/gpt-5"),
        ("gpt-4o", "missing", "azure/gpt-4o"),  # whose listing it was, not another's
        ("mine", "not_from_catalog", None),
        ("demo-model", "not_from_catalog", None),
    ]
    assert checks[1].changes == (
        FieldChange(
            "tiers",
            None,
            [{"input": 2.5, "output": 15.0, "tier": {"type": "context", "size": 200000}}],
        ),
    )


def test_a_changed_price_names_each_field_that_differs() -> None:
    cat = catalog({"anthropic": {"claude": {"input": 3.0, "output": 15.0, "cache_read": 0.3}}})
    stored = price(
        "claude", "models.dev:anthropic", 3.0 * (1 + 1e-12), 12.0, cache_write_per_1m=3.75
    )
    (check,) = check_prices([stored], cat)
    assert check.state == "changed"
    assert check.changes == (  # 1e-12 relative is no change (as same_rates)
        FieldChange("output_per_1m", 12.0, 15.0),
        FieldChange("cache_read_per_1m", None, 0.3),
        FieldChange("cache_write_per_1m", 3.75, None),
    )


def test_a_price_seeded_before_the_provider_was_recorded_takes_any_agreeing_listing() -> None:
    cat = catalog(
        {
            "openai": {"gpt-4o": {"input": 2.5, "output": 10.0}},
            "nano-gpt": {"gpt-4o": {"input": 9.0, "output": 9.0}},
        }
    )
    agreeing, differing, gone = check_prices(
        [
            price("gpt-4o", "models.dev", 9.0, 9.0),
            price("gpt-4o", "models.dev", 3.0, 10.0),
            price("gpt-9", "models.dev"),
        ],
        cat,
    )
    assert (agreeing.state, agreeing.catalog_id) == ("unchanged", "nano-gpt/gpt-4o")
    # none agrees: compared with the listing seed --missing chooses (the first party's)
    assert (differing.state, differing.catalog_id) == ("changed", "openai/gpt-4o")
    assert differing.changes == (FieldChange("input_per_1m", 3.0, 2.5),)
    assert (gone.state, gone.catalog_id) == ("missing", None)


def test_new_listings_are_those_of_priced_providers_and_of_what_the_ledger_needs() -> None:
    before = catalog({"openai": {"gpt-4o": {"input": 1, "output": 2}}})
    after = catalog(
        {
            "openai": {"gpt-4o": {"input": 1, "output": 2}, "gpt-9": {"input": 9, "output": 9}},
            "acme": {"acme-1": {"input": 1, "output": 1}, "acme-2": None},
            "other": {"x": {"input": 1, "output": 1}},
        }
    )
    found = new_catalog_models(
        after, before, providers=["openai"], unpriced_ids=["acme/acme-1-2026-01-02", "acme-2"]
    )
    assert [(m.catalog_id, m.ledger_ids, m.price is None) for m in found] == [
        ("acme/acme-1", ("acme/acme-1-2026-01-02",), False),  # a spelling it resolves to
        ("acme/acme-2", ("acme-2",), True),  # listed without a price: shown, priced None
        ("openai/gpt-9", (), False),  # a provider priced here; other/x concerns nobody
    ]
    assert new_catalog_models(after, after, providers=["openai", "acme"]) == []


def test_unpriced_turns_are_counted_by_model_with_the_price_they_resolve_to(engine: Any) -> None:
    with engine.begin() as conn:
        set_price(conn, "gpt-4o", input_per_1m=2.5, output_per_1m=10.0)
        conn.execute(
            schema.thread.insert().values(
                id="t", actor_ref="a", title="", created_at=0, updated_at=0
            )
        )
        day = 86_400_000
        rows = [
            ("gpt-4o-2024-11-20", None, 5 * day),
            ("gpt-4o-2024-11-20", None, 5 * day + 1),
            ("mystery", None, 5 * day),
            ("mystery ", None, 5 * day),  # another id on every dialect (MySQL pads spaces)
            ("gpt-4o", 0.5, 5 * day),  # has a cost
            ("mystery", None, 9 * day),  # outside the window
        ]
        conn.execute(
            schema.token_usage.insert(),
            [
                {
                    "id": f"u{i}",
                    "thread_id": "t",
                    "actor_ref": "a",
                    "model_id": m,
                    "purpose": "chat",
                    "input_tokens": 1,
                    "output_tokens": 1,
                    "cost_usd": cost,
                    "created_at": at,
                }
                for i, (m, cost, at) in enumerate(rows)
            ],
        )
    with engine.connect() as conn:
        found = list_unpriced_turns(conn, from_day=ms_to_date(0), to_day=date(1970, 1, 8))
    assert [(u.model_id, u.turns, u.priced_as) for u in found] == [
        ("gpt-4o-2024-11-20", 2, "gpt-4o"),
        ("mystery", 1, None),
        ("mystery ", 1, None),
    ]
