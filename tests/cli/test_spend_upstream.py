"""Issue 23: a ledger row's tenant is its thread's when the row has none (upstream's rows).

The runtime (adonis-agent) writes ``agent_token_usage`` with ``tenant_ref`` NULL. Through the
real CLI on every dialect: ``spend --tenant`` / ``--by tenant``, ``quota --tenant`` and ``quota
--all`` count those rows for their thread's tenant, raw and folded, and a row that carries its own
tenant keeps it.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
from helpers import run_cli
from sqlalchemy import text
from upstream import Upstream, write_upstream

from agora_cli.store._clock import DAY_MS, parse_instant
from agora_cli.store._schema import token_usage

NOW = parse_instant("2026-03-10T12:00:00Z")
DAY = "2026-03-10"
NEXT_NOON = "2026-03-11T12:00:00Z"


def _json(*args: str) -> Any:
    result = run_cli(*args, "--json")
    assert result.exit_code in (0, 1), result.stderr
    return json.loads(result.stdout)


def _priced(engine: Any, db_url: str) -> Upstream:
    """Upstream's rows, their NULL costs priced the way upstream prices them on read."""
    up = write_upstream(engine, now=NOW)
    assert run_cli("prices", "reprice", "--db", db_url).exit_code == 0
    return up


def _by_tenant(db_url: str, *extra: str) -> dict[str | None, dict[str, Any]]:
    doc = _json("spend", "--by", "tenant", "--from", DAY, "--to", DAY, "--db", db_url, *extra)
    return {row["key"]: row for row in doc["rows"]}


def _tokens(row: dict[str, Any]) -> int:
    return int(row["input_tokens"] + row["output_tokens"])


def _agora_row(
    engine: Any, row_id: str, thread_id: str, tenant: str, inp: int, cost: float
) -> None:
    """A row as agora's ``record_usage`` writes it: with its own tenant and a cost source."""
    with engine.begin() as conn:
        conn.execute(
            token_usage.insert().values(
                id=row_id,
                thread_id=thread_id,
                actor_ref="agora",
                tenant_ref=tenant,
                model_id="gpt-4o-mini",
                purpose="chat",
                input_tokens=inp,
                output_tokens=0,
                cost_usd=cost,
                cost_source="estimate",
                created_at=NOW - 1_000,
            )
        )


def test_spend_counts_upstream_rows_for_their_threads_tenant(engine: Any, db_url: str) -> None:
    up = _priced(engine, db_url)
    rows = _by_tenant(db_url)
    assert set(rows) == {"acme", "globex", None}
    for tenant in ("acme", "globex", None):
        assert _tokens(rows[tenant]) == up.tenant_tokens(tenant)  # type: ignore[arg-type]
        assert rows[tenant]["cost_usd"] == pytest.approx(up.tenant_usd(tenant))  # type: ignore[arg-type]
    assert rows["acme"]["turns"] == 3 and rows["acme"]["unpriced_turns"] == 1  # mystery-model-1

    doc = _json("spend", "--tenant", "acme", "--from", DAY, "--to", DAY, "--db", db_url)
    assert doc["total"]["cost_usd"] == pytest.approx(up.tenant_usd("acme"))
    assert _tokens(doc["total"]) == up.tenant_tokens("acme")
    assert {r["key"] for r in doc["rows"]} == {"gpt-4o-mini", "mystery-model-1"}

    # two-level and filtered groupings agree with the one-level report
    doc = _json("spend", "--by", "day,tenant", "--from", DAY, "--to", DAY, "--db", db_url)
    (period,) = doc["rows"]
    assert {r["key"]: _tokens(r) for r in period["rows"]} == {
        k: _tokens(v) for k, v in rows.items()
    }
    doc = _json(
        "spend", "--by", "actor", "--tenant", "globex", "--from", DAY, "--to", DAY, "--db", db_url
    )
    assert [(r["key"], _tokens(r)) for r in doc["rows"]] == [("bob", up.tenant_tokens("globex"))]

    # CSV: the same groups, untenanted as an empty key
    for by in ("tenant", "week,tenant"):
        args = ("spend", "--by", by, "--from", DAY, "--to", DAY, "--db", db_url, "--csv")
        result = run_cli(*args)
        assert result.exit_code == 0, result.stderr
        lines = list(csv.DictReader(io.StringIO(result.stdout)))
        key = "key" if by == "tenant" else "tenant"  # two levels: a column per key
        assert {line[key]: int(line["input_tokens"]) for line in lines} == {
            "acme": rows["acme"]["input_tokens"],
            "globex": rows["globex"]["input_tokens"],
            "": rows[None]["input_tokens"],
            "TOTAL": sum(r["input_tokens"] for r in rows.values()),
        }


def test_a_tenant_budget_fires_on_upstream_rows_raw_and_folded(engine: Any, db_url: str) -> None:
    up = _priced(engine, db_url)
    assert up.tenant_usd("acme") > 0.01
    for period in ("day", "month"):
        args = ("budgets", "set", "--tenant", "acme", "--period", period, "--usd", "0.01")
        assert run_cli(*args, "--by", "ops", "--db", db_url).exit_code == 0

    result = run_cli("quota", "--all", "--at", "2026-03-10T12:00:00Z", "--db", db_url, "--json")
    assert result.exit_code == 1, result.stdout
    budgets = json.loads(result.stdout)["budgets"]
    assert {b["period"]: b["state"] for b in budgets} == {"day": "exhausted", "month": "exhausted"}
    assert budgets[0]["usd"] == pytest.approx(up.tenant_usd("acme"))
    assert budgets[0]["tokens"] == up.tenant_tokens("acme")

    doc = _json("quota", "--tenant", "acme", "--at", "2026-03-10T12:00:00Z", "--db", db_url)
    assert doc["exhausted"] is True

    # Folded: the day is read from agent_usage_daily, whose tenant_key is the thread's.
    assert run_cli("spend", "fold", "--through", DAY, "--db", db_url).exit_code == 0
    verified = _json("spend", "fold", "--verify", "--db", db_url)
    assert verified["mismatched"] == [] and verified["days_checked"] >= 1
    with engine.connect() as conn:
        keys = conn.execute(
            text("SELECT DISTINCT tenant_key FROM agent_usage_daily ORDER BY tenant_key")
        ).scalars()
        assert list(keys) == ["", "acme", "globex"]
    folded = _by_tenant(db_url)
    assert {k: _tokens(v) for k, v in folded.items()} == {
        "acme": up.tenant_tokens("acme"),
        "globex": up.tenant_tokens("globex"),
        None: up.tenant_tokens(None),  # type: ignore[arg-type]
    }
    doc = _json("spend", "--tenant", "acme", "--from", DAY, "--to", DAY, "--db", db_url)
    assert doc["folded_days"] == 1
    assert doc["total"]["cost_usd"] == pytest.approx(up.tenant_usd("acme"))

    result = run_cli("quota", "--all", "--at", NEXT_NOON, "--db", db_url, "--json")
    assert result.exit_code == 1, result.stdout  # the month, from the folded day
    month = next(b for b in json.loads(result.stdout)["budgets"] if b["period"] == "month")
    assert month["state"] == "exhausted"
    assert month["usd"] == pytest.approx(up.tenant_usd("acme"))


def test_a_row_with_its_own_tenant_keeps_it_and_mixed_rows_sum_exactly(
    engine: Any, db_url: str
) -> None:
    up = _priced(engine, db_url)
    _agora_row(engine, "agora-acme", up.threads["acme"], "acme", 1_000, 0.5)
    # on globex's thread but written for another tenant: it stays that tenant's
    _agora_row(engine, "agora-initech", up.threads["globex"], "initech", 7_000, 0.25)

    def check() -> None:
        rows = _by_tenant(db_url)
        assert _tokens(rows["acme"]) == up.tenant_tokens("acme") + 1_000
        assert rows["acme"]["cost_usd"] == pytest.approx(up.tenant_usd("acme") + 0.5)
        assert _tokens(rows["globex"]) == up.tenant_tokens("globex")
        assert _tokens(rows["initech"]) == 7_000
        for tenant, usd in (("acme", up.tenant_usd("acme") + 0.5), ("initech", 0.25)):
            doc = _json("quota", "--tenant", tenant, "--at", NEXT_NOON, "--db", db_url)
            assert doc["month"]["usd"] == pytest.approx(usd)

    check()
    assert run_cli("spend", "fold", "--through", DAY, "--db", db_url).exit_code == 0
    check()
    assert _json("spend", "fold", "--verify", "--db", db_url)["mismatched"] == []


def test_verify_finds_a_day_folded_with_the_rows_own_tenant_only(engine: Any, db_url: str) -> None:
    """A day folded by an agora before issue 23 keyed upstream's rows as untenanted: ``--verify``
    marks it dirty and the next fold makes it right."""
    up = _priced(engine, db_url)
    assert run_cli("spend", "fold", "--through", DAY, "--db", db_url).exit_code == 0
    day = NOW // DAY_MS
    with engine.begin() as conn:  # what the old fold wrote: upstream rows under ''
        conn.execute(
            text("UPDATE agent_usage_daily SET tenant_key = '' WHERE day = :d AND tenant_key = :t"),
            {"d": day, "t": "globex"},
        )
    assert "globex" not in _by_tenant(db_url)  # read from the stale fold
    assert _json("spend", "fold", "--verify", "--db", db_url)["mismatched"] == [DAY]
    assert _tokens(_by_tenant(db_url)["globex"]) == up.tenant_tokens("globex")  # dirty: raw
    assert run_cli("spend", "fold", "--through", DAY, "--db", db_url).exit_code == 0
    rows = _by_tenant(db_url)
    assert _tokens(rows["globex"]) == up.tenant_tokens("globex")
    assert (
        _json("spend", "--by", "tenant", "--from", DAY, "--to", DAY, "--db", db_url)["folded_days"]
        == 1
    )
