"""Costs as the upstream runtime means them, on rows it wrote (``tests/upstream.py``).

The runtime stores ``cost_usd`` only when the provider reported one (with no ``cost_source``)
and prices every other turn when it reads. agora counts a sourceless cost as provider-reported,
names ``prices reprice`` (not ``prices seed``) for turns whose model has a price, and after a
reprice its figures equal the runtime's own governance queries.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from upstream import MODEL_PRICED, MODEL_UNPRICED, Upstream, write_upstream

from agora_cli.store._clock import DAY_MS, ms_to_date
from agora_cli.store._clock import SystemClock as _Clock


def _yesterday_noon() -> int:
    today = _Clock().now_ms() // DAY_MS * DAY_MS
    return today - DAY_MS // 2


@pytest.fixture
def up(engine: Any) -> Upstream:
    return write_upstream(engine, now=_yesterday_noon())


def _window(up: Upstream) -> list[str]:
    day = ms_to_date(up.now).isoformat()
    return ["--from", day, "--to", day]


def _total(cli: Any, db_url: str, up: Upstream, *extra: str) -> dict[str, Any]:
    r = cli("spend", "--by", "model", *_window(up), *extra, "--json", "--db", db_url)
    assert r.exit_code == 0, r.stderr
    return dict(r.json()["total"])


def test_a_cost_without_a_source_is_the_providers(cli: Any, db_url: str, up: Upstream) -> None:
    provider = sum(t.cost_usd for t in up.turns if t.cost_usd is not None)
    assert provider > 0
    total = _total(cli, db_url, up, "--provider-cost-only")
    assert math.isclose(total["cost_usd"], provider)
    # ... and it is not counted as agora's estimate.
    assert _total(cli, db_url, up)["estimated_usd"] == 0


def test_spend_names_reprice_for_models_that_have_a_price(
    cli: Any, db_url: str, up: Upstream
) -> None:
    r = cli("spend", "--by", "actor", *_window(up), "--db", db_url, "--no-color")
    assert r.exit_code == 0, r.stderr
    lines = [" ".join(line.split()) for line in r.stdout.splitlines()]
    priced = [line for line in lines if MODEL_PRICED in line and "turn(s)" in line]
    unpriced = [line for line in lines if MODEL_UNPRICED in line and "turn(s)" in line]
    null_priced = sum(1 for t in up.turns if t.model == MODEL_PRICED and t.cost_usd is None)
    assert priced == [
        f"not yet priced: {MODEL_PRICED}, {null_priced} turn(s) with no stored cost"
        " → agora prices reprice (a current price exists)"
    ]
    assert len(unpriced) == 1 and "agora prices seed --missing" in unpriced[0]
    assert "reprice" not in unpriced[0]


def test_after_reprice_spend_and_quota_equal_the_runtimes_figures(
    cli: Any, db_url: str, up: Upstream
) -> None:
    r = cli("prices", "reprice", "--json", "--db", db_url)
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    null_priced = sum(1 for t in up.turns if t.model == MODEL_PRICED and t.cost_usd is None)
    assert doc["repriced"] == null_priced
    assert doc["unpriced_models"] == [{"model_id": MODEL_UNPRICED, "rows": 1}]
    total = _total(cli, db_url, up)
    assert math.isclose(total["cost_usd"], sum(up.estimate(t) or 0.0 for t in up.turns))
    assert total["unpriced_turns"] == 1
    # The provider's costs were left alone.
    provider = sum(t.cost_usd for t in up.turns if t.cost_usd is not None)
    assert math.isclose(_total(cli, db_url, up, "--provider-cost-only")["cost_usd"], provider)
    # An actor's day: agora's quota reads what the runtime's spendByActor reads.
    day = ms_to_date(up.now).isoformat()
    r = cli("quota", "--actor", "alice", "--at", f"{day}T23:00:00Z", "--json", "--db", db_url)
    assert r.exit_code in (0, 1), r.stderr
    alice = sum(up.estimate(t) or 0.0 for t in up.turns if t.actor == "alice")
    assert math.isclose(r.json()["day"]["usd"], alice)


def test_the_fold_keeps_provider_costs_without_a_source(
    cli: Any, db_url: str, up: Upstream
) -> None:
    raw = _total(cli, db_url, up, "--provider-cost-only", "--raw")
    r = cli("spend", "fold", "--json", "--db", db_url)
    assert r.exit_code == 0, r.stderr
    folded = _total(cli, db_url, up, "--provider-cost-only")
    assert folded["cost_usd"] == pytest.approx(raw["cost_usd"])
    r = cli("spend", "fold", "--verify", "--json", "--db", db_url)
    assert r.exit_code == 0, r.stdout + r.stderr


def test_reprice_last_is_a_bounded_window(cli: Any, db_url: str, up: Upstream) -> None:
    r = cli("prices", "reprice", "--last", "1d", "--json", "--db", db_url)
    assert r.exit_code == 0, r.stderr
    assert r.json()["repriced"] == 0  # the rows are yesterday's: outside today
    r = cli("prices", "reprice", "--last", "2d", "--json", "--db", db_url)
    assert r.exit_code == 0, r.stderr
    assert r.json()["repriced"] > 0
    r = cli("prices", "reprice", "--last", "2d", "--from", "2026-01-01", "--db", db_url)
    assert r.exit_code == 2 and r.stderr.startswith("error: ")
    r = cli("prices", "reprice", "--last", "-3d", "--db", db_url)
    assert r.exit_code == 2 and r.stderr.startswith("error: ")
