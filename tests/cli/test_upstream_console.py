"""The console on rows the upstream runtime wrote (``tests/upstream.py``), on every dialect: tool
health in the runtime's statuses with latencies from its timestamps, message order with mixed
writers, camelCase per-turn usage, tool-results messages, a run's cost from its ledger rows, and
agora's own writers in the runtime's words."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from upstream import Upstream, write_upstream

from agora_cli.store.clock import SystemClock


@pytest.fixture
def up(engine: Any) -> Upstream:
    return write_upstream(engine, now=SystemClock().now_ms())


def _since(up: Upstream) -> str:
    """The ``--from`` day that holds every row ``write_upstream`` wrote."""
    return (datetime.fromtimestamp(up.now / 1000, UTC) - timedelta(days=1)).date().isoformat()


# --- tools stats ------------------------------------------------------------------------------


def test_tools_stats_counts_the_runtime_statuses(up: Upstream, db_url: str, cli: Any) -> None:
    r = cli("tools", "stats", "--from", _since(up), "--db", db_url, "--json")
    assert r.exit_code == 0, r.stderr
    tools = {t["tool_name"]: t for t in r.json()["tools"]}
    assert set(tools) == {"lookup_order", "refund_order", "update_invoice", "cancel_invoice"}
    outcome = ("calls", "succeeded", "failed", "rejected", "pending_approval", "running", "other")
    got = {name: tuple(t[k] for k in outcome) for name, t in tools.items()}
    assert got == {
        "lookup_order": (2, 1, 1, 0, 0, 0, 0),
        "refund_order": (1, 1, 0, 0, 0, 0, 0),
        "update_invoice": (1, 0, 0, 1, 0, 0, 0),
        "cancel_invoice": (1, 0, 0, 0, 1, 0, 0),
    }
    assert {n: t["tool_type"] for n, t in tools.items()} == {
        "lookup_order": "read",
        "refund_order": "action",
        "update_invoice": "action",
        "cancel_invoice": "action",
    }
    # upstream writes no execution_ms: 20 and 18 ms (lookup), 24 ms (refund) from the timestamps
    lookup, refund = tools["lookup_order"], tools["refund_order"]
    assert (lookup["timed"], lookup["derived"], lookup["p50_ms"]) == (2, 2, 19.0)
    assert lookup["p95_ms"] == pytest.approx(19.9)
    assert (refund["timed"], refund["derived"], refund["p50_ms"], refund["p95_ms"]) == (
        1,
        1,
        24.0,
        24.0,
    )
    assert tools["cancel_invoice"]["timed"] == tools["update_invoice"]["timed"] == 0
    assert lookup["last_failure"]["error"] == "timeout talking to orders"
    assert lookup["last_failure"]["tool_call_id"] == up.tool_calls["flaky"]


def test_tools_stats_table_columns_add_up(up: Upstream, db_url: str, cli: Any) -> None:
    r = cli("tools", "stats", "--from", _since(up), "--db", db_url, env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.stderr
    header = next(line for line in r.stdout.splitlines() if "calls" in line)
    for name in ("ok", "failed", "rejected", "awaiting approval", "running", "other", "type"):
        assert name in header
    rows = {
        cells[0]: cells
        for line in r.stdout.splitlines()
        if (cells := [c.strip() for c in line.strip("│┃ ").split("│")])
        and cells[0] in ("lookup_order", "refund_order", "update_invoice", "cancel_invoice")
    }

    def n(cell: str) -> int:
        return 0 if cell == "—" else int(cell)

    for cells in rows.values():
        # tool, type, calls, ok, failed, fail %, rejected, awaiting, running, other
        assert n(cells[2]) == sum(n(c) for c in (cells[3], cells[4], *cells[6:10])), cells
    assert rows["lookup_order"][1] == "read" and rows["lookup_order"][3] == "1"
    assert rows["refund_order"][10] == "24 ms*"
    assert "* latency from executed_at − created_at" in r.stdout
