"""The console on rows the upstream runtime wrote (``tests/upstream.py``), on every dialect: tool
health in the runtime's statuses with latencies from its timestamps, message order with mixed
writers, camelCase per-turn usage, tool-results messages, a run's cost from its ledger rows, and
agora's own writers in the runtime's words."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from upstream import Upstream, write_upstream

from agora_cli.store._clock import ManualClock, SystemClock


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


# --- threads show -----------------------------------------------------------------------------


def test_threads_show_interleaves_writers_by_time(
    up: Upstream, engine: Any, db_url: str, cli: Any
) -> None:
    from agora_cli.store._threads import append_message

    acme = up.threads["acme"]
    t0 = up.now - 600_000
    # agora writes a numbered message (seq 1) between the runtime's unnumbered ones (seq 0):
    # after the assistant's turn at +2,000 ms, before the tool results at +2,040 ms
    with engine.begin() as conn:
        mine = append_message(
            conn,
            thread_id=acme,
            role="assistant",
            content="(agora) checking the order",
            usage={"input_tokens": 5, "output_tokens": 3, "cost_usd": None},
            clock=ManualClock(t0 + 2_035),
        )
    assert mine.seq == 1
    doc = cli("threads", "show", acme, "--db", db_url, "--json").json()
    ids = [m["id"] for m in doc["messages"]]
    ups = up.messages["acme"]
    assert ids == [ups[0], ups[1], mine.id, *ups[2:]]
    assert [m["seq"] for m in doc["messages"]] == [0, 0, 1, 0, 0, 0]
    table = cli("threads", "show", acme, "--db", db_url).stdout
    assert "#3 assistant" in table
    assert table.index("#3 assistant") < table.index("(agora) checking") < table.index("#4 user")


def test_threads_show_camel_case_usage_and_tool_results(
    up: Upstream, engine: Any, db_url: str, cli: Any
) -> None:
    acme = up.threads["acme"]
    doc = cli("threads", "show", acme, "--db", db_url, "--json").json()
    first, results, second, third = doc["messages"][1:]
    [turn] = [t for t in up.turns if t.at == up.now - 600_000 + 2_000]
    # the runtime's camelCase, in agora's field names (as agora's own snake_case usage is)
    assert first["payload"]["usage"] == {
        "input_tokens": 1_200_000,
        "output_tokens": 150_000,
        "cost_usd": up.estimate(turn),
    }
    assert second["payload"]["usage"]["cache_read_tokens"] == 400_000
    assert second["payload"]["usage"]["cost_usd"] == 0.0125
    assert third["payload"]["usage"]["cost_usd"] is None
    assert results["content"] == ""
    assert results["payload"]["tool_results"][0]["name"] == "lookup_order"
    table = cli("threads", "show", acme, "--db", db_url).stdout
    assert "turn usage: 1,200,000 in / 150,000 out, $0.2700" in table
    assert "turn usage: 900,000 in / 80,000 out, cache read 400,000, $0.0125" in table
    assert "turn usage: 10,000 in / 2,000 out, unknown" in table
    # the empty tool-results message shows its result, not a blank body
    block = table[table.index("#3 user") :].split("\n\n")[0].splitlines()
    assert block[1] == '  ← lookup_order: {"status": "shipped"}'
    # a read tool's latency comes from its timestamps (the runtime writes no execution_ms)
    assert "↳ tool lookup_order [executed, 20 ms]" in table
    assert "↳ tool lookup_order [failed, 18 ms]" in table


def test_tool_results_are_escaped_for_people(engine: Any, db_url: str, cli: Any) -> None:
    from agora_cli.store._threads import append_message, create_thread

    with engine.begin() as conn:
        t = create_thread(conn, actor_ref="alice", thread_id="t-esc")
        append_message(
            conn,
            thread_id=t.id,
            role="user",
            content="",
            tool_results=[
                {"id": "c1", "name": "[red]evil[/red]", "output": "\x1b[2Jwiped"},
                {"id": "c2", "name": "send", "output": None, "error": "smtp\x07: 421\nretry"},
            ],
        )
    r = cli("threads", "show", "t-esc", "--db", db_url)
    assert r.exit_code == 0, r.stderr
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout
    assert '  ← [red]evil[/red]: "\\u001b[2Jwiped"' in r.stdout
    assert "  ← send failed: smtp\\x07: 421 …" in r.stdout


# --- runs: the cost is the ledger's -----------------------------------------------------------


def test_a_runs_cost_is_its_ledger_rows_and_agrees_after_reprice(
    up: Upstream, db_url: str, cli: Any
) -> None:
    rid, acme = up.runs["acme"], up.threads["acme"]
    [priced, provider, unpriced] = [t for t in up.turns if t.run_id == rid]
    before = cli("runs", "show", rid, "--db", db_url, "--json").json()["run"]
    # the runtime leaves the priced turn's cost NULL (it prices on read): only the provider's
    assert (before["cost_usd"], before["unpriced_turns"]) == (0.0125, 2)
    # the run row's own rollup is kept, as recorded, not as the run's cost
    assert before["recorded_cost_usd"] == pytest.approx(up.estimate(priced) + 0.0125)
    assert cli("prices", "reprice", "--db", db_url).exit_code == 0
    shown = cli("runs", "show", rid, "--db", db_url, "--json").json()
    run = shown["run"]
    assert run["cost_usd"] == pytest.approx(up.run_usd("acme"))
    assert run["unpriced_turns"] == 1  # mystery-model-1: no price anywhere
    assert run["cost_usd"] == pytest.approx(
        sum(u["cost_usd"] for u in shown["usage"] if u["cost_usd"] is not None)
    )
    # threads show agrees (every ledger row of the acme thread is the run's)
    thread = cli("threads", "show", acme, "--db", db_url, "--json").json()["thread"]
    assert thread["usage"]["cost_usd"] == pytest.approx(run["cost_usd"])
    # runs list too: one grouped query for the page
    listed = {r["id"]: r for r in cli("runs", "list", "--db", db_url, "--json").json()["runs"]}
    assert listed[rid]["cost_usd"] == pytest.approx(run["cost_usd"])
    assert listed[up.runs["globex"]]["cost_usd"] == pytest.approx(up.run_usd("globex"))
    table = cli("runs", "show", rid, "--db", db_url, env={"COLUMNS": "200"}).stdout
    assert f"${up.run_usd('acme'):,.4f} +1 unpriced" in table
    # the run's messages, in the thread's order (upstream's runDetail: created_at)
    assert [m["id"] for m in shown["messages"]] == up.messages["acme"]
    assert shown["messages_total"] == 5
    assert "tool results: lookup_order" in table
    assert [c["latency_ms"] for c in shown["tool_calls"]] == [20, 24, 18]
    assert provider.cost_usd == 0.0125 and unpriced.cost_usd is None


# --- agora writes the runtime's words ---------------------------------------------------------


def test_agora_writers_use_the_runtime_vocabulary(engine: Any) -> None:
    from sqlalchemy import select

    from agora_cli.store._schema import message, tool_call
    from agora_cli.store._steps import complete_tool_call, record_tool_call
    from agora_cli.store._threads import append_message, create_thread

    with engine.begin() as conn:
        t = create_thread(conn, actor_ref="alice", thread_id="t-words")
        m = append_message(
            conn,
            thread_id=t.id,
            role="assistant",
            content="on it",
            usage={"input_tokens": 10, "output_tokens": 4, "cache_read_tokens": 2},
            tool_calls=[{"id": "c-read", "name": "lookup", "input": {"order_id": 7}}],
        )
        record_tool_call(conn, message_id=m.id, tool_call_id="c-read", tool_name="lookup")
        complete_tool_call(conn, "c-read", output={"ok": True})
        record_tool_call(
            conn,
            message_id=m.id,
            tool_call_id="c-act",
            tool_name="refund",
            tool_type="action",
            status="pending_approval",
        )
        stored = conn.execute(select(message.c.usage).where(message.c.id == m.id)).scalar()
        calls = conn.execute(
            select(tool_call.c.id, tool_call.c.tool_type, tool_call.c.status).order_by(
                tool_call.c.id
            )
        ).all()
    assert json.loads(stored) == {"inputTokens": 10, "outputTokens": 4, "cacheReadTokens": 2}
    assert [tuple(c) for c in calls] == [
        ("c-act", "action", "pending_approval"),
        ("c-read", "read", "executed"),
    ]


def test_the_demo_writes_the_runtime_vocabulary(db_url: str, engine: Any, cli: Any) -> None:
    from contextlib import nullcontext

    from sqlalchemy import select
    from sqlalchemy.engine import make_url

    from agora_cli.store._schema import message, tool_call
    from agora_cli.store._sealing import current_kek, using_kek
    from agora_cli.store._threads import list_messages
    from agora_cli.store._vocabulary import TOOL_STATUSES

    assert cli("demo", "--db", db_url, "--json").exit_code == 0
    with engine.connect() as conn:
        calls = conn.execute(
            select(
                tool_call.c.id, tool_call.c.message_id, tool_call.c.tool_type, tool_call.c.status
            )
        ).all()
        # tenant globex's messages are sealed (a SQLite demo keeps its KEK next to the database)
        threads = conn.execute(
            select(message.c.thread_id).where(message.c.role == "assistant").distinct()
        ).scalars()
        kek_file = f"{make_url(db_url).database}.kek" if db_url.startswith("sqlite") else ""
        kek = current_kek({"AGORA_KEK_FILE": kek_file})
        with using_kek(kek) if kek else nullcontext():
            named = {
                m.id: m.tool_calls
                for thread_id in list(threads)
                for m in list_messages(conn, thread_id)
                if m.role == "assistant"
            }
        usages = conn.execute(select(message.c.usage).where(message.c.usage.is_not(None))).all()
    assert {c.status for c in calls} <= set(TOOL_STATUSES)
    assert {c.status for c in calls} >= {"executed", "failed", "pending_approval", "rejected"}
    assert {c.tool_type for c in calls} == {"read", "action"}
    for c in calls:
        if c.message_id in named:  # an assistant's message names every call it made
            requested = json.loads(named[c.message_id])
            assert c.id in {r["id"] for r in requested}
            assert all(set(r) == {"id", "name", "input"} for r in requested)
    assert usages and all("inputTokens" in json.loads(u) for (u,) in usages)
