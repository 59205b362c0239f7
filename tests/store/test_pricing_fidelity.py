"""Issue 12, on every dialect: each spelling priced as the provider bills it.

The six cases of the issue, each reproduced against the fixture snapshot served over HTTP by a
server on 127.0.0.1 (the real client code runs; nothing reaches the network):

1. a regional Bedrock profile keeps its premium (``eu.`` at $3.30, not the base $3);
2. a dated snapshot listed at its own price is priced as itself, even when the date rule already
   finds its successor's price;
3. LiteLLM / cloud SDK route spellings select their catalog provider;
4. a long-context tier without cache rates scales the base cache rates (the spec's $0.24 check,
   in the Python estimate and in the SQL of ``reprice``, row for row);
5. the choice order first-party → hyperscaler → agreement, the provider recorded in ``source``;
6. ``recompute_estimates`` corrects past estimates in bounded, resumable batches.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from agora_cli.store import _schema as schema
from agora_cli.store._catalog import ModelCatalog
from agora_cli.store._clock import ManualClock
from agora_cli.store._pricing import (
    CatalogMatch,
    ModelPrice,
    PriceTier,
    current_prices,
    estimate_cost,
    match_catalog_price,
    resolve_current_price,
    seed_missing_prices,
    seed_prices_from_models_dev,
    set_price,
)
from agora_cli.store._usage import record_usage, reprice

u = schema.token_usage
SONNET = "anthropic.claude-sonnet-4-5-20250929-v1:0"


@pytest.fixture(scope="module")
def catalog(served_catalog: ModelCatalog) -> ModelCatalog:
    """The snapshot as fetched over HTTP (conftest.py), not read from its file."""
    return served_catalog


def record(engine: Any, model_id: str, **kw: Any) -> Any:
    args: dict[str, Any] = {"input_tokens": 1_000_000, "output_tokens": 100_000}
    args.update(kw)
    with engine.begin() as conn:
        return record_usage(
            conn, thread_id="th-1", actor_ref="alice", purpose="chat", model_id=model_id, **args
        )


def seed_missing(engine: Any, catalog: ModelCatalog) -> Any:
    with engine.begin() as conn:
        return seed_missing_prices(conn, catalog=catalog)


def seed(engine: Any, catalog: ModelCatalog, *names: str) -> Any:
    with engine.begin() as conn:
        return seed_prices_from_models_dev(conn, list(names), catalog=catalog)


def prices(engine: Any) -> dict[str, ModelPrice]:
    with engine.connect() as conn:
        return current_prices(conn)


def rates(p: ModelPrice) -> tuple[float, float, float | None, float | None]:
    return (p.input_per_1m, p.output_per_1m, p.cache_read_per_1m, p.cache_write_per_1m)


# --- 1. regional premiums ---------------------------------------------------------------------


def test_1_a_ledger_with_eu_and_base_spellings_prices_each_at_its_own_catalog_price(
    engine: Any, catalog: ModelCatalog, thread: str
) -> None:
    record(engine, f"eu.{SONNET}")
    record(engine, SONNET)
    result = seed_missing(engine, catalog)
    assert sorted((c.model, c.catalog_id) for c in result.prices) == [
        (SONNET, f"amazon-bedrock/{SONNET}"),
        (f"eu.{SONNET}", f"amazon-bedrock/eu.{SONNET}"),
    ]
    stored = prices(engine)
    assert rates(stored[f"eu.{SONNET}"]) == pytest.approx((3.3, 16.5, 0.33, 4.125))
    assert rates(stored[SONNET]) == (3.0, 15.0, 0.3, 3.75)
    assert stored[f"eu.{SONNET}"].source == "models.dev:amazon-bedrock"
    eu = record(engine, f"eu.{SONNET}", output_tokens=0)
    assert (eu.priced_as, eu.price_rule, eu.cost_usd) == (f"eu.{SONNET}", "exact", 3.3)


def test_1_an_eu_profile_is_priced_even_when_its_base_already_has_a_price(
    engine: Any, catalog: ModelCatalog, thread: str
) -> None:
    seed(engine, catalog, f"amazon-bedrock/{SONNET}")
    for profile in ("eu.", "jp.", "au.", "global."):
        record(engine, f"{profile}{SONNET}")
    with engine.connect() as conn:
        assert resolve_current_price(conn, f"eu.{SONNET}").rule == "prefix"
    result = seed_missing(engine, catalog)
    # jp./au./global. are listed at the base's own price: they keep sharing it
    assert [c.model for c in result.prices] == [f"eu.{SONNET}"]
    with engine.connect() as conn:
        assert resolve_current_price(conn, f"eu.{SONNET}").matched == f"eu.{SONNET}"
        for profile in ("jp.", "au.", "global."):
            res = resolve_current_price(conn, f"{profile}{SONNET}")
            assert (res.matched, res.rule) == (SONNET, "prefix")
    assert seed_missing(engine, catalog).prices == ()


# --- 2. dated snapshots -----------------------------------------------------------------------


def test_2_a_dated_snapshot_listed_at_its_own_price_is_priced_as_itself(
    engine: Any, catalog: ModelCatalog, thread: str
) -> None:
    seed(engine, catalog, "openai/gpt-4o")
    before = record(engine, "gpt-4o-2024-05-13", output_tokens=0)
    assert (before.priced_as, before.price_rule, before.cost_usd) == ("gpt-4o", "date", 2.5)
    result = seed_missing(engine, catalog)
    assert [(c.model, c.catalog_id, c.action) for c in result.prices] == [
        ("gpt-4o-2024-05-13", "openai/gpt-4o-2024-05-13", "inserted")
    ]
    assert rates(prices(engine)["gpt-4o-2024-05-13"]) == (5.0, 15.0, None, None)
    after = record(engine, "gpt-4o-2024-05-13", output_tokens=0)
    assert (after.priced_as, after.price_rule, after.cost_usd) == ("gpt-4o-2024-05-13", "exact", 5)
    # a dated id the catalog lists at its base's price keeps sharing the base's row
    record(engine, "gpt-4o-2024-08-06")
    assert seed_missing(engine, catalog).prices == ()


# --- 3. provider route aliases ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("ledger_id", "catalog_id"),
    [
        (
            "together_ai/meta-llama/Llama-3.3-70B-Instruct-Turbo",
            "togetherai/meta-llama/Llama-3.3-70B-Instruct-Turbo",
        ),
        (f"bedrock/eu.{SONNET}", f"amazon-bedrock/eu.{SONNET}"),
        (f"bedrock_converse/{SONNET}", f"amazon-bedrock/{SONNET}"),
        ("vertex_ai/gemini-2.5-pro", "google-vertex/gemini-2.5-pro"),
        ("gemini/gemini-2.5-flash", "google/gemini-2.5-flash"),
        (
            "fireworks_ai/accounts/fireworks/models/gpt-oss-120b",
            "fireworks-ai/accounts/fireworks/models/gpt-oss-120b",
        ),
        ("x-ai/grok-4.3", "xai/grok-4.3"),
    ],
)
def test_3_route_aliases_select_their_catalog_provider(
    engine: Any, catalog: ModelCatalog, thread: str, ledger_id: str, catalog_id: str
) -> None:
    record(engine, ledger_id)
    result = seed_missing(engine, catalog)
    assert [c.catalog_id for c in result.prices] == [catalog_id], result.skipped
    provider = catalog_id.split("/", 1)[0]
    assert result.prices[0].price.source == f"models.dev:{provider}"
    with engine.connect() as conn:
        assert resolve_current_price(conn, ledger_id).matched == catalog_id.split("/", 1)[1]


def test_3_an_alias_never_falls_back_to_another_providers_listing(
    engine: Any, catalog: ModelCatalog, thread: str
) -> None:
    # Vertex does not list gemini-2.0-flash-001; a reseller does. The route says who billed.
    record(engine, "vertex_ai/gemini-2.0-flash-001")
    result = seed_missing(engine, catalog)
    assert result.prices == ()
    ((skipped),) = result.skipped
    assert (skipped.model_id, skipped.reason) == (
        "vertex_ai/gemini-2.0-flash-001",
        "not_in_catalog",
    )
    assert all(c.startswith("google-vertex/") for c in skipped.candidates)


# --- 4. long-context cache rates --------------------------------------------------------------


def test_4_a_tier_without_cache_rates_scales_the_base_cache_rates(
    engine: Any, catalog: ModelCatalog, thread: str
) -> None:
    seed(engine, catalog, "302ai/gpt-5.4")  # base 2.50 / cache-read 0.25; tier 5.00, no cache
    long = record(
        engine, "gpt-5.4", input_tokens=300_000, cache_read_tokens=200_000, output_tokens=0
    )
    assert long.cost_usd == pytest.approx((100_000 * 5.0 + 200_000 * 0.5) / 1e6)  # not 200k × $5


def test_4_the_spec_tier_check_in_python_and_in_sql_row_for_row(engine: Any, thread: str) -> None:
    with engine.begin() as conn:
        set_price(
            conn,
            "tiered",
            input_per_1m=1.0,
            output_per_1m=4.0,
            cache_read_per_1m=0.10,
            tiers=[PriceTier(200_000, 2.0, 8.0)],
        )
    with engine.connect() as conn:
        price = current_prices(conn)["tiered"]
    usage = {"input_tokens": 300_000, "output_tokens": 0, "cache_read_tokens": 200_000}
    assert estimate_cost(price, **usage) == pytest.approx(0.24)
    assert record(engine, "tiered", **usage).cost_usd == pytest.approx(0.24)
    # the same rows written without a cost, then costed by the SQL of reprice
    mixes = [
        usage,
        {"input_tokens": 200_000, "output_tokens": 7, "cache_read_tokens": 150_000},
        {"input_tokens": 250_001, "output_tokens": 3, "cache_write_tokens": 1_000},
        {"input_tokens": 10, "output_tokens": 10},
        {"input_tokens": 1_000_000, "output_tokens": 9, "cache_read_tokens": 999_999},
    ]
    with engine.begin() as conn:
        conn.execute(
            u.insert(),
            [
                {
                    "id": f"raw-{i}",
                    "thread_id": "th-1",
                    "actor_ref": "alice",
                    "model_id": "tiered",
                    "purpose": "chat",
                    "created_at": 1,
                    "cache_read_tokens": None,
                    "cache_write_tokens": None,
                    **mix,
                }
                for i, mix in enumerate(mixes)
            ],
        )
    with engine.begin() as conn:
        assert reprice(conn).repriced == len(mixes)
    with engine.connect() as conn:
        sql = dict(conn.execute(select(u.c.id, u.c.cost_usd).where(u.c.id.like("raw-%"))).all())
    for i, mix in enumerate(mixes):
        assert sql[f"raw-{i}"] == pytest.approx(estimate_cost(price, **mix), rel=1e-12), mix
    assert sql["raw-0"] == pytest.approx(0.24)


# --- 5. choice order and provenance -----------------------------------------------------------


def test_5_the_provider_is_recorded_in_source(
    engine: Any, catalog: ModelCatalog, thread: str
) -> None:
    seed(engine, catalog, "openai/gpt-4o-mini")
    assert prices(engine)["gpt-4o-mini"].source == "models.dev:openai"
    record(engine, "gemini-2.0-flash-001")  # listed by one reseller only: used, and labelled
    record(engine, "deepseek-r1-0528")  # resellers disagree; the one hyperscaler listing wins
    record(engine, "claude-3-5-haiku-20241022")  # two resellers agree: the first alphabetically
    seed_missing(engine, catalog)
    stored = prices(engine)
    assert stored["gemini-2.0-flash-001"].source == "models.dev:nano-gpt"
    assert stored["deepseek-r1-0528"].source == "models.dev:azure"
    assert stored["claude-3-5-haiku-20241022"].source == "models.dev:302ai"


def test_5_a_resellers_dated_listing_never_displaces_the_first_partys_price(
    engine: Any, catalog: ModelCatalog, thread: str
) -> None:
    # 302ai lists gpt-5.4-mini-2026-03-17 without a cache rate; OpenAI lists gpt-5.4-mini with
    # one. Priced from the reseller, every cache read would bill at the input rate (10×).
    record(engine, "gpt-5.4-mini-2026-03-17")
    result = seed_missing(engine, catalog)
    assert [(c.model, c.catalog_id) for c in result.prices] == [
        ("gpt-5.4-mini", "openai/gpt-5.4-mini")
    ]
    rec = record(engine, "gpt-5.4-mini-2026-03-17", cache_read_tokens=1_000_000, output_tokens=0)
    assert rec.cost_usd == pytest.approx(0.075)


def test_5_matches_say_how_the_listing_was_chosen(catalog: ModelCatalog) -> None:
    def how(model_id: str) -> tuple[str, str, tuple[str, ...]]:
        m = match_catalog_price(model_id, catalog)
        assert isinstance(m, CatalogMatch), m
        return m.provider, m.choice, m.agreeing

    assert how("gpt-4o") == ("openai", "first-party", ("openai",))
    assert how("deepseek-r1-0528") == ("azure", "hyperscaler", ("azure",))
    assert how("claude-3-5-haiku-20241022") == ("302ai", "agreement", ("302ai", "nano-gpt"))
    assert how("gemini-2.0-flash-001") == ("nano-gpt", "only", ("nano-gpt",))
    assert how("claude-sonnet-4-5@20250929") == (
        "google-vertex",
        "hyperscaler",
        ("google-vertex", "google-vertex-anthropic"),
    )


# --- 6. recomputing past estimates ------------------------------------------------------------


def run_batches(engine: Any, **kw: Any) -> list[Any]:
    from agora_cli.store._usage import recompute_estimates  # new in issue 12

    batches: list[Any] = []
    after = None
    while True:
        with engine.begin() as conn:
            batch = recompute_estimates(conn, after=after, **kw)
        batches.append(batch)
        if batch.done:
            return batches
        after = batch.next_after


def test_6_recompute_estimates_corrects_past_rows_in_bounded_batches(
    engine: Any, catalog: ModelCatalog, thread: str
) -> None:
    seed(engine, catalog, "openai/gpt-4o")
    clock = ManualClock(1_000)
    dated = [record(engine, "gpt-4o-2024-05-13", output_tokens=0, clock=clock) for _ in range(5)]
    same = record(engine, "gpt-4o", output_tokens=0, clock=clock)
    provided = record(engine, "gpt-4o-2024-05-13", provider_cost_usd=1.0, clock=clock)
    unknown = record(engine, "gpt-4-0613", clock=clock)
    assert all(r.cost_usd == 2.5 for r in dated)
    seed_missing(engine, catalog)  # gpt-4o-2024-05-13 now has its own $5 price

    dry = run_batches(engine, limit=2, dry_run=True)
    assert sum(b.recomputed for b in dry) == 5
    with engine.connect() as conn:
        assert {
            r.cost_usd
            for r in conn.execute(select(u.c.cost_usd).where(u.c.id.in_([d.id for d in dated])))
        } == {2.5}

    batches = run_batches(engine, limit=2)
    assert len(batches) == 3  # 6 estimated rows, 2 a batch
    assert all(b.examined <= 2 for b in batches)
    assert sum(b.examined for b in batches) == 6
    assert sum(b.recomputed for b in batches) == 5
    assert sum(b.before_usd for b in batches) == pytest.approx(6 * 2.5)
    assert sum(b.after_usd for b in batches) == pytest.approx(5 * 5.0 + 2.5)
    with engine.connect() as conn:
        rows = {r.id: r for r in conn.execute(select(u)).all()}
    assert all(rows[d.id].cost_usd == 5.0 for d in dated)
    assert all(rows[d.id].cost_source == "estimate" for d in dated)
    assert rows[same.id].cost_usd == 2.5
    assert (rows[provided.id].cost_usd, rows[provided.id].cost_source) == (1.0, "provider")
    assert rows[unknown.id].cost_usd is None
    # resumable: a second run finds every row already at its current price
    again = run_batches(engine, limit=2)
    assert sum(b.recomputed for b in again) == 0
    assert sum(b.before_usd for b in again) == pytest.approx(sum(b.after_usd for b in again))


def test_6_recompute_agrees_with_the_python_estimate_row_for_row(engine: Any, thread: str) -> None:
    with engine.begin() as conn:
        set_price(conn, "tiered", input_per_1m=1.0, output_per_1m=4.0, cache_read_per_1m=0.1)
    mixes = [
        {"input_tokens": 300_000, "output_tokens": 0, "cache_read_tokens": 200_000},
        {"input_tokens": 123_457, "output_tokens": 89, "cache_write_tokens": 1_234},
        {"input_tokens": 7, "output_tokens": 7},
    ]
    ids = [record(engine, "tiered", **mix).id for mix in mixes]
    with engine.begin() as conn:
        set_price(
            conn,
            "tiered",
            input_per_1m=1.0,
            output_per_1m=4.0,
            cache_read_per_1m=0.1,
            tiers=[PriceTier(200_000, 2.0, 8.0)],
        )
        price = current_prices(conn)["tiered"]
    (batch,) = run_batches(engine, limit=100)
    assert (batch.examined, batch.recomputed) == (3, 1)
    with engine.connect() as conn:
        costs = dict(conn.execute(select(u.c.id, u.c.cost_usd)).all())
    for row_id, mix in zip(ids, mixes, strict=True):
        assert costs[row_id] == pytest.approx(estimate_cost(price, **mix), rel=1e-12)
    assert costs[ids[0]] == pytest.approx(0.24)


def test_6_recompute_respects_the_window(engine: Any, thread: str) -> None:
    with engine.begin() as conn:
        set_price(conn, "m", input_per_1m=1.0, output_per_1m=1.0)
    early = record(engine, "m", clock=ManualClock(1_000))
    late = record(engine, "m", clock=ManualClock(5_000))
    with engine.begin() as conn:
        set_price(conn, "m", input_per_1m=2.0, output_per_1m=1.0)
    (batch,) = run_batches(engine, from_ms=2_000, to_ms=9_000)
    assert (batch.examined, batch.recomputed) == (1, 1)
    with engine.connect() as conn:
        costs = dict(conn.execute(select(u.c.id, u.c.cost_usd)).all())
    assert costs[early.id] == pytest.approx(1.1)
    assert costs[late.id] == pytest.approx(2.1)


def test_5_a_spelling_priced_for_one_id_never_reprices_another(
    engine: Any, catalog: ModelCatalog, thread: str
) -> None:
    # Prices are keyed by spelling. OpenRouter lists deepseek/deepseek-chat (no cache rate);
    # stored for openrouter/deepseek/deepseek-chat, it would be what the ledger's own
    # deepseek/deepseek-chat (DeepSeek direct) resolves to. An id priced as written claims its
    # spelling first (gpt-4o from OpenAI, not from the Azure route sorted before it).
    for ledger_id in (
        "azure/gpt-4o",
        "gpt-4o",
        "deepseek/deepseek-chat",
        "openrouter/deepseek/deepseek-chat",
    ):
        record(engine, ledger_id)
    result = seed_missing(engine, catalog)
    assert sorted((c.model, c.catalog_id) for c in result.prices) == [
        ("deepseek-chat", "deepseek/deepseek-chat"),
        ("gpt-4o", "openai/gpt-4o"),
    ]
    assert [(s.model_id, s.reason, s.candidates) for s in result.skipped] == [
        (
            "openrouter/deepseek/deepseek-chat",
            "spelling_conflict",
            ("openrouter/deepseek/deepseek-chat", "deepseek/deepseek-chat"),
        )
    ]
    with engine.connect() as conn:
        direct = resolve_current_price(conn, "deepseek/deepseek-chat")
    assert (direct.matched, direct.provider) == ("deepseek-chat", "deepseek")
    assert seed_missing(engine, catalog).prices == ()


def test_5_a_resellers_own_spelling_is_not_passed_over(catalog: ModelCatalog) -> None:
    # Fireworks' own id: dropping its "accounts/…/" route would reach DeepSeek's listing, but the
    # id as written is what Fireworks bills. Only a dated spelling gives way to its undated one.
    m = match_catalog_price("accounts/fireworks/models/deepseek-v4-flash", catalog)
    assert isinstance(m, CatalogMatch)
    assert (m.catalog_id, m.choice, m.passed_over) == (
        "fireworks-ai/accounts/fireworks/models/deepseek-v4-flash",
        "only",
        (),
    )
    m = match_catalog_price("gpt-5.4-mini-2026-03-17", catalog)
    assert isinstance(m, CatalogMatch)
    assert (m.catalog_id, m.rule, m.passed_over) == (
        "openai/gpt-5.4-mini",
        "date",
        ("302ai/gpt-5.4-mini-2026-03-17",),
    )
