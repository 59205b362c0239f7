"""The ledger writer on every dialect: the cost fold on write, and ``reprice`` afterwards."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from agora_cli.store import schema
from agora_cli.store.clock import ManualClock, day_window, parse_day
from agora_cli.store.errors import InvalidInput, NotFound
from agora_cli.store.pricing import PriceTier, current_prices, estimate_cost, set_price
from agora_cli.store.usage import RepriceResult, UnpricedModel, record_usage, reprice

u = schema.token_usage
NOV_30 = day_window(parse_day("2026-11-30"))
DEC_1 = day_window(parse_day("2026-12-01"))


@pytest.fixture
def thread(engine: Any) -> str:
    with engine.begin() as conn:
        conn.execute(
            schema.thread.insert().values(
                id="th-1", actor_ref="alice", title="t", created_at=0, updated_at=0
            )
        )
    return "th-1"


def record(engine: Any, model_id: str, **kw: Any) -> Any:
    args: dict[str, Any] = {
        "thread_id": "th-1",
        "actor_ref": "alice",
        "purpose": "chat",
        "input_tokens": 1_000_000,
        "output_tokens": 500_000,
    }
    args.update(kw)
    with engine.begin() as conn:
        return record_usage(conn, model_id=model_id, **args)


def put_price(engine: Any, model_id: str, inp: float, out: float, **kw: Any) -> None:
    with engine.begin() as conn:
        set_price(conn, model_id, input_per_1m=inp, output_per_1m=out, **kw)


def ledger(engine: Any) -> dict[str, dict[str, Any]]:
    with engine.connect() as conn:
        return {r["id"]: dict(r) for r in conn.execute(select(u)).mappings()}


def test_provider_cost_wins(engine: Any, thread: str) -> None:
    put_price(engine, "gpt-4o-mini", 0.15, 0.60)
    rec = record(engine, "gpt-4o-mini", provider_cost_usd=0.42)
    assert (rec.cost_usd, rec.cost_source) == (0.42, "provider")
    row = ledger(engine)[rec.id]
    assert (row["cost_usd"], row["cost_source"]) == (0.42, "provider")


def test_estimate_from_the_resolved_current_price(engine: Any, thread: str) -> None:
    put_price(
        engine, "claude-3-5-sonnet", 3.0, 15.0, cache_write_per_1m=3.75, cache_read_per_1m=0.3
    )
    clock = ManualClock(NOV_30[1])
    rec = record(
        engine,
        "anthropic/claude-3-5-sonnet-20241022",
        input_tokens=1_000_000,
        output_tokens=0,
        cache_write_tokens=400_000,
        cache_read_tokens=100_000,
        tenant_ref="acme",
        message_id="m-1",
        run_id="r-1",
        clock=clock,
    )
    assert rec.cost_source == "estimate"
    assert rec.cost_usd == pytest.approx(3.03)
    assert (rec.priced_as, rec.price_rule) == ("claude-3-5-sonnet", "prefix+date")
    row = ledger(engine)[rec.id]
    assert row["cost_usd"] == pytest.approx(3.03)
    assert row["created_at"] == NOV_30[1]
    assert (row["tenant_ref"], row["message_id"], row["run_id"]) == ("acme", "m-1", "r-1")
    assert (row["cache_write_tokens"], row["cache_read_tokens"]) == (400_000, 100_000)
    assert len(rec.id) >= 32


def test_unknown_price_is_null_never_zero(engine: Any, thread: str) -> None:
    put_price(engine, "gemini-1.5-pro", 1.25, 5.0)
    rec = record(engine, "gemini-1.5-pro-002")
    assert (rec.cost_usd, rec.cost_source, rec.priced_as) == (None, None, None)
    row = ledger(engine)[rec.id]
    assert row["cost_usd"] is None and row["cost_source"] is None


def test_estimate_applies_tiers(engine: Any, thread: str) -> None:
    put_price(engine, "gemini-2.5-pro", 1.25, 10.0, tiers=[PriceTier(200_000, 2.5, 15.0)])
    short = record(engine, "gemini-2.5-pro", input_tokens=200_000, output_tokens=0)
    long = record(engine, "gemini-2.5-pro", input_tokens=200_001, output_tokens=0)
    assert short.cost_usd == pytest.approx(0.25)
    assert long.cost_usd == pytest.approx(200_001 * 2.5 / 1e6)


@pytest.mark.parametrize(
    "bad",
    [
        {"input_tokens": -1},
        {"output_tokens": 1.5},
        {"input_tokens": True},
        {"cache_read_tokens": 600_000, "cache_write_tokens": 600_000},
        {"provider_cost_usd": -0.01},
        {"provider_cost_usd": float("nan")},
        {"purpose": ""},
        {"actor_ref": "x" * 256},
    ],
)
def test_bad_usage_is_invalid_input_and_writes_nothing(
    engine: Any, thread: str, bad: dict[str, Any]
) -> None:
    with pytest.raises(InvalidInput):
        record(engine, "gpt-4o-mini", **bad)
    assert ledger(engine) == {}


def test_usage_on_a_missing_thread_is_not_found(engine: Any) -> None:
    with pytest.raises(NotFound, match="thread 'nope' not found"):
        record(engine, "gpt-4o-mini", thread_id="nope")
    assert ledger(engine) == {}


# --- reprice ----------------------------------------------------------------------------------


def test_reprice_fills_null_costs_in_the_window_and_reports_the_unpriced(
    engine: Any, thread: str
) -> None:
    at = ManualClock(NOV_30[1])  # 2026-11-30T23:59:59.999Z
    provider = record(engine, "gpt-4o-mini-2024-07-18", provider_cost_usd=0.5, clock=at)
    early = record(
        engine, "gpt-4o-mini-2024-07-18", cache_read_tokens=200_000, output_tokens=10, clock=at
    )
    tiered = record(engine, "gemini-2.5-pro", input_tokens=300_000, output_tokens=7, clock=at)
    unpriced = [record(engine, "gpt-4-0613", clock=at) for _ in range(2)]
    latest = record(engine, "o1-latest", clock=at)
    at.set(DEC_1[0])  # 2026-12-01T00:00:00.000Z, outside a November window
    later = record(engine, "gpt-4o-mini", clock=at)
    assert all(r.cost_usd is None for r in (early, tiered, later, latest, *unpriced))

    put_price(engine, "gpt-4o-mini", 0.15, 0.60, cache_read_per_1m=0.075)
    put_price(engine, "gemini-2.5-pro", 1.25, 10.0, tiers=[PriceTier(200_000, 2.5, 15.0)])
    put_price(engine, "gpt-4", 30.0, 60.0)  # gpt-4-0613 must not borrow it

    window = {"from_ms": day_window(parse_day("2026-11-01"))[0]}
    with engine.begin() as conn:
        dry = reprice(conn, to_ms=NOV_30[1], dry_run=True, **window)
    assert dry == RepriceResult(
        repriced=2,
        still_unpriced=3,
        unpriced_models=(UnpricedModel("gpt-4-0613", 2), UnpricedModel("o1-latest", 1)),
        dry_run=True,
    )
    assert all(r["cost_usd"] is None or r["id"] == provider.id for r in ledger(engine).values())

    with engine.begin() as conn:
        done = reprice(conn, to_ms=NOV_30[1], **window)
    assert (done.repriced, done.still_unpriced) == (2, 3)
    assert done.unpriced_models == dry.unpriced_models
    rows = ledger(engine)
    with engine.connect() as conn:
        prices = current_prices(conn)
    assert rows[provider.id]["cost_usd"] == 0.5
    assert rows[provider.id]["cost_source"] == "provider"
    assert rows[early.id]["cost_source"] == "estimate"
    assert rows[early.id]["cost_usd"] == pytest.approx(
        estimate_cost(
            prices["gpt-4o-mini"],
            input_tokens=1_000_000,
            output_tokens=10,
            cache_read_tokens=200_000,
        ),
        rel=1e-12,
    )
    assert rows[early.id]["cost_usd"] == pytest.approx(
        (800_000 * 0.15 + 200_000 * 0.075 + 10 * 0.6) / 1e6
    )
    assert rows[tiered.id]["cost_usd"] == pytest.approx((300_000 * 2.5 + 7 * 15.0) / 1e6)
    assert rows[later.id]["cost_usd"] is None  # outside the window
    assert all(rows[r.id]["cost_usd"] is None for r in (*unpriced, latest))

    # Everything without a window: the December row now; nothing else changes.
    with engine.begin() as conn:
        rest = reprice(conn)
    assert (rest.repriced, rest.still_unpriced) == (1, 3)
    assert ledger(engine)[later.id]["cost_usd"] == pytest.approx(0.45)
    assert ledger(engine)[early.id] == rows[early.id]


def test_reprice_never_touches_an_existing_estimate_or_provider_cost(
    engine: Any, thread: str
) -> None:
    put_price(engine, "m", 1.0, 1.0)
    estimated = record(engine, "m")
    provided = record(engine, "m", provider_cost_usd=0.0)
    put_price(engine, "m", 100.0, 100.0)
    with engine.begin() as conn:
        result = reprice(conn)
    assert result == RepriceResult(0, 0, ())
    rows = ledger(engine)
    assert rows[estimated.id]["cost_usd"] == pytest.approx(1.5)
    assert (rows[provided.id]["cost_usd"], rows[provided.id]["cost_source"]) == (0.0, "provider")


def test_reprice_rejects_an_inverted_window(engine: Any) -> None:
    with pytest.raises(InvalidInput), engine.begin() as conn:
        reprice(conn, from_ms=10, to_ms=9)
