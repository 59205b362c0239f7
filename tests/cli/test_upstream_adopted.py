"""Issue 23's "done when", end to end: a database the upstream runtime made and filled, adopted
by the documented path, then read by every report and console command.

Each figure is compared with what the runtime's own governance queries give for the same rows
(``tests/upstream.py``: a provider's cost wins, else the current price; the tenant is the
thread's; approvals are tool calls left ``pending_approval``; time order).
"""

from __future__ import annotations

import math
from typing import Any

from upstream import Upstream, create_upstream_schema, write_upstream

from agora_cli.store._clock import DAY_MS, SystemClock, ms_to_date
from agora_cli.store._engine import open_engine


def _adopted(url: str, cli: Any) -> Upstream:
    engine = open_engine(url)
    create_upstream_schema(engine)
    # Yesterday, so that the fold has a closed day to fold.
    now = SystemClock().now_ms() // DAY_MS * DAY_MS - DAY_MS // 2
    up = write_upstream(engine, now=now)
    engine.dispose()
    r = cli("db", "provision", "--convert-collation", "--json", "--db", url)
    assert r.exit_code == 0, r.stdout + r.stderr
    r = cli("db", "check", "--json", "--db", url)
    assert r.exit_code == 0 and r.json()["ok"] is True, r.stdout
    r = cli("prices", "reprice", "--json", "--db", url)  # the runtime prices on read
    assert r.exit_code == 0, r.stderr
    return up


def test_an_adopted_runtime_database_reads_as_the_runtime_reads_it(
    empty_url: str, cli: Any
) -> None:
    up = _adopted(empty_url, cli)
    db = ("--db", empty_url)
    day = ms_to_date(up.now).isoformat()
    window = ("--from", day, "--to", day)

    # spend --tenant / --by tenant: the thread's tenant, the runtime's costs.
    for tenant in ("acme", "globex"):
        r = cli("spend", "--tenant", tenant, *window, "--json", *db)
        assert r.exit_code == 0, r.stderr
        total = r.json()["total"]
        assert math.isclose(total["cost_usd"], up.tenant_usd(tenant))
        assert total["input_tokens"] + total["output_tokens"] == up.tenant_tokens(tenant)
    r = cli("spend", "--by", "tenant", *window, "--json", *db)
    keys = {row["key"] for row in r.json()["rows"]}
    assert keys == {"acme", "globex", None}

    # quota --all: a saved acme day budget below acme's spend fires (exit 1), raw and folded.
    r = cli(
        "budgets", "set", "--tenant", "acme", "--period", "day", "--usd", "0.01", "--by", "ops", *db
    )
    assert r.exit_code == 0, r.stderr
    at = ("--at", f"{day}T23:00:00Z")
    r = cli("quota", "--all", *at, "--json", *db)
    assert r.exit_code == 1, r.stdout + r.stderr
    acme = [b for b in r.json()["budgets"] if b["scope_ref"] == "acme"]
    assert math.isclose(acme[0]["usd"], up.tenant_usd("acme"))
    assert cli("spend", "fold", "--json", *db).exit_code == 0
    assert cli("quota", "--all", *at, "--json", *db).exit_code == 1
    r = cli("spend", "fold", "--verify", "--json", *db)
    assert r.exit_code == 0, r.stdout

    # proposals inbox: the runtime's pending approval, by kind.
    r = cli("proposals", "inbox", "--json", *db)
    assert r.exit_code == 0, r.stderr
    items = r.json()["proposals"]
    assert [(i["kind"], i["id"], i["actor_ref"], i["tenant_ref"]) for i in items] == [
        ("tool_call", up.tool_calls["pending"], "bob", "globex")
    ]

    # tools stats: the runtime's statuses, latency from its timestamps.
    r = cli("tools", "stats", *window, "--json", *db)
    assert r.exit_code == 0, r.stderr
    tools = {t["tool_name"]: t for t in r.json()["tools"]}
    assert (tools["lookup_order"]["succeeded"], tools["lookup_order"]["failed"]) == (1, 1)
    assert tools["lookup_order"]["p50_ms"] == 19.0  # 20 and 18 ms, executed_at - created_at
    assert tools["refund_order"]["succeeded"] == 1
    assert tools["update_invoice"]["rejected"] == 1
    assert tools["cancel_invoice"]["pending_approval"] == 1

    # threads show: time order, the runtime's usage per turn, tool results as results.
    r = cli("threads", "show", up.threads["acme"], "--json", *db)
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert [m["id"] for m in doc["messages"]] == up.messages["acme"]

    # runs show: the run's cost is its ledger rows'.
    r = cli("runs", "show", up.runs["acme"], "--json", *db)
    assert r.exit_code == 0, r.stderr
    run = r.json()["run"]
    assert math.isclose(run["cost_usd"], up.run_usd("acme"))
    assert run["unpriced_turns"] == 1  # the model without a price anywhere
    assert [m["id"] for m in r.json()["messages"]] == up.messages["acme"]
