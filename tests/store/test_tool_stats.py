"""Tool health and run reliability equal a brute-force computation in Python, on every dialect."""

from __future__ import annotations

import math
import random
from collections import defaultdict
from typing import Any

import pytest

from agora_cli.store._errors import InvalidInput
from agora_cli.store._schema import message, run, thread, tool_call
from agora_cli.store._tool_stats import (
    RUN_STATUS_GROUPS,
    TOOL_STATUS_GROUPS,
    run_reliability,
    stats_by_tool,
    tool_call_statuses,
)

T0 = 1_767_225_600_000
HOUR = 3_600_000
TOOLS = ["lookup", "refund", "search", "flaky", "fetch_invoice"]
STATUSES = [
    # the runtime's words
    "executed",
    "executed",
    "auto_executed",
    "pending_approval",
    "rejected",
    "failed",
    # older words that mean the same, and one that means nothing known
    "completed",
    "succeeded",
    "error",
    "awaiting_approval",
    "running",
    "cancelled",
]
UNSETTLED = ("awaiting_approval", "pending_approval", "running", "auto_executed", "rejected")
TENANTS = ["acme", "globex", None]


def percentile_cont(values: list[float], p: float) -> float | None:
    """PostgreSQL's percentile_cont, by the book."""
    if not values:
        return None
    ordered = sorted(values)
    position = p * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@pytest.fixture
def data(engine: Any) -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(13)
    threads, messages, calls, runs = [], [], [], []
    for n, tenant in enumerate(TENANTS):
        threads.append(
            {
                "id": f"t{n}",
                "actor_ref": "alice",
                "tenant_ref": tenant,
                "title": "",
                "created_at": T0,
                "updated_at": T0,
            }
        )
        messages.append(
            {
                "id": f"m{n}",
                "thread_id": f"t{n}",
                "role": "assistant",
                "content": "",
                "created_at": T0,
            }
        )
    for i in range(600):
        status = rng.choice(STATUSES)
        settled = status not in UNSETTLED
        # the runtime writes no execution_ms (its latency is executed_at - created_at); an older
        # writer did; the clocks of a few disagree (a negative difference counts as 0)
        timed = settled and rng.random() < 0.5
        created = T0 + rng.randrange(0, 72 * HOUR)
        # many ties, so the ranks inside a tie must not matter
        took = rng.choice([rng.randrange(-5, 50), rng.randrange(1, 20_000)])
        calls.append(
            {
                "id": f"c{i:04d}",
                "message_id": f"m{rng.randrange(len(TENANTS))}",
                "tool_name": (tool := rng.choice(TOOLS)),
                "tool_type": "action" if tool == "refund" else rng.choice(["read", "read", "x"]),
                "status": status,
                "execution_ms": max(0, took) if timed else None,
                "error": f"boom {i}\nline 2" if status in ("failed", "error") else None,
                "created_at": created,
                "executed_at": created + took if settled and rng.random() < 0.9 else None,
            }
        )
    for i in range(300):
        status = rng.choice(["completed", "completed", "failed", "cancelled", "running", "paused"])
        started = T0 + rng.randrange(0, 72 * HOUR)
        finished = None if status in ("running", "paused") else started + rng.randrange(0, 90_000)
        n = rng.randrange(len(TENANTS))
        runs.append(
            {
                "id": f"r{i:04d}",
                "thread_id": f"t{n}",
                "agent_name": rng.choice(["support", "billing", None]),
                "actor_ref": "alice",
                "tenant_ref": TENANTS[n],
                "status": status,
                "started_at": started,
                "finished_at": finished,
            }
        )
    with engine.begin() as conn:
        conn.execute(thread.insert(), threads)
        conn.execute(message.insert(), messages)
        conn.execute(tool_call.insert(), calls)
        conn.execute(run.insert(), runs)
    return {"threads": threads, "messages": messages, "calls": calls, "runs": runs}


def _tenant_of_message(data: dict[str, list[dict[str, Any]]]) -> dict[str, str | None]:
    tenants = {t["id"]: t["tenant_ref"] for t in data["threads"]}
    return {m["id"]: tenants[m["thread_id"]] for m in data["messages"]}


def _expected_tools(
    data: dict[str, list[dict[str, Any]]], lo: int, hi: int, tenant: str | None
) -> dict[str, dict[str, Any]]:
    tenant_of = _tenant_of_message(data)
    by_tool: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in data["calls"]:
        if lo <= c["created_at"] <= hi and (tenant is None or tenant_of[c["message_id"]] == tenant):
            by_tool[c["tool_name"]].append(c)
    expected = {}
    for name, calls in by_tool.items():
        counts = {
            group: sum(c["status"] in statuses for c in calls)
            for group, statuses in TOOL_STATUS_GROUPS.items()
        }
        latencies = [
            c["execution_ms"]
            if c["execution_ms"] is not None
            else None
            if c["executed_at"] is None
            else max(0, c["executed_at"] - c["created_at"])
            for c in calls
        ]
        timed = [float(v) for v in latencies if v is not None]
        types = {c["tool_type"] for c in calls}
        failures = [c for c in calls if c["status"] in TOOL_STATUS_GROUPS["failed"]]
        last = max(failures, key=lambda c: (c["created_at"], c["id"])) if failures else None
        expected[name] = {
            "calls": len(calls),
            **counts,
            "other": len(calls) - sum(counts.values()),
            "timed": len(timed),
            "derived": sum(
                c["execution_ms"] is None and c["executed_at"] is not None for c in calls
            ),
            "tool_type": types.pop() if len(types) == 1 else "mixed",
            "p50": percentile_cont(timed, 0.5),
            "p95": percentile_cont(timed, 0.95),
            "last": None if last is None else (last["id"], last["created_at"], last["error"]),
        }
    return expected


@pytest.mark.parametrize(
    ("lo", "hi", "tenant"),
    [
        (T0, T0 + 72 * HOUR, None),
        (T0 + 24 * HOUR, T0 + 48 * HOUR - 1, None),  # one UTC day
        (T0, T0 + 72 * HOUR, "acme"),
        (T0 + 10 * HOUR, T0 + 11 * HOUR, "globex"),
        (T0 + 100 * HOUR, T0 + 200 * HOUR, None),  # nothing there
    ],
)
def test_tool_stats_equal_brute_force(
    engine: Any, data: dict[str, list[dict[str, Any]]], lo: int, hi: int, tenant: str | None
) -> None:
    with engine.connect() as conn:
        found = stats_by_tool(conn, from_ms=lo, to_ms=hi, tenant_ref=tenant)
    expected = _expected_tools(data, lo, hi, tenant)
    assert {s.tool_name for s in found} == set(expected)
    assert [s.calls for s in found] == sorted((s.calls for s in found), reverse=True)
    for s in found:
        want = expected[s.tool_name]
        got = {
            "calls": s.calls,
            "succeeded": s.succeeded,
            "failed": s.failed,
            "rejected": s.rejected,
            "pending_approval": s.pending_approval,
            "running": s.running,
            "other": s.other,
            "timed": s.timed,
            "derived": s.derived,
            "tool_type": s.tool_type,
        }
        assert got == {k: want[k] for k in got}, s.tool_name
        for mine, theirs in ((s.p50_ms, want["p50"]), (s.p95_ms, want["p95"])):
            assert (mine is None) == (theirs is None)
            if mine is not None:
                assert mine == pytest.approx(theirs, rel=1e-9, abs=1e-6), s.tool_name
        failure = s.last_failure
        got_last = None if failure is None else (failure.tool_call_id, failure.at, failure.error)
        assert got_last == want["last"], s.tool_name


def _expected_runs(
    data: dict[str, list[dict[str, Any]]], lo: int, hi: int, tenant: str | None
) -> dict[str | None, dict[str, Any]]:
    by_agent: dict[str | None, list[dict[str, Any]]] = defaultdict(list)
    for r in data["runs"]:
        if lo <= r["started_at"] <= hi and (tenant is None or r["tenant_ref"] == tenant):
            by_agent[r["agent_name"]].append(r)
    expected = {}
    for agent, runs in by_agent.items():
        counts = {
            group: sum(r["status"] in statuses for r in runs)
            for group, statuses in RUN_STATUS_GROUPS.items()
        }
        durations = [
            float(r["finished_at"] - r["started_at"]) for r in runs if r["finished_at"] is not None
        ]
        expected[agent] = {
            "runs": len(runs),
            **counts,
            "other": len(runs) - sum(counts.values()),
            "finished": len(durations),
            "median": percentile_cont(durations, 0.5),
        }
    return expected


@pytest.mark.parametrize(
    ("lo", "hi", "tenant"),
    [
        (T0, T0 + 72 * HOUR, None),
        (T0 + 24 * HOUR, T0 + 48 * HOUR - 1, None),
        (T0, T0 + 72 * HOUR, "globex"),
        (T0 + 100 * HOUR, T0 + 200 * HOUR, None),
    ],
)
def test_run_reliability_equals_brute_force(
    engine: Any, data: dict[str, list[dict[str, Any]]], lo: int, hi: int, tenant: str | None
) -> None:
    with engine.connect() as conn:
        found = run_reliability(conn, from_ms=lo, to_ms=hi, tenant_ref=tenant)
    expected = _expected_runs(data, lo, hi, tenant)
    assert {a.agent_name for a in found} == set(expected)
    for a in found:
        want = expected[a.agent_name]
        got = {
            "runs": a.runs,
            "completed": a.completed,
            "failed": a.failed,
            "cancelled": a.cancelled,
            "running": a.running,
            "other": a.other,
            "finished": a.finished,
        }
        assert got == {k: want[k] for k in got}, a.agent_name
        if want["median"] is None:
            assert a.median_ms is None
        else:
            assert a.median_ms == pytest.approx(want["median"], rel=1e-9, abs=1e-6)


def test_statuses_come_from_a_loose_scan(
    engine: Any, data: dict[str, list[dict[str, Any]]]
) -> None:
    with engine.connect() as conn:
        assert tool_call_statuses(conn) == sorted(set(STATUSES))


def test_an_empty_table_and_bad_windows(engine: Any) -> None:
    with engine.connect() as conn:
        assert stats_by_tool(conn, from_ms=T0, to_ms=T0 + HOUR) == []
        assert run_reliability(conn, from_ms=T0, to_ms=T0 + HOUR) == []
        with pytest.raises(InvalidInput):
            stats_by_tool(conn, from_ms=T0 + 1, to_ms=T0)
        with pytest.raises(InvalidInput):
            run_reliability(conn, from_ms=T0, to_ms=2**70)
