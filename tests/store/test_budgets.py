"""Saved budgets and their windows on every dialect: upserts, periods, states, races."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from sqlalchemy import func, select

from agora_cli.store._budgets import (
    evaluate_budgets,
    list_budgets,
    remove_budgets,
    scope_quota,
    set_budget,
)
from agora_cli.store._clock import ManualClock, parse_instant
from agora_cli.store._errors import Conflict, InvalidInput
from agora_cli.store._schema import budget, thread, token_usage
from agora_cli.store._windows import last_window, parse_bound, period_window

SUNDAY_LAST = parse_instant("2026-11-29T23:59:59.999Z")  # a Sunday
MONDAY_FIRST = parse_instant("2026-11-30T00:00:00.000Z")


def usage(engine: Any, *rows: dict[str, Any]) -> None:
    with engine.begin() as conn:
        if not conn.execute(select(thread.c.id).where(thread.c.id == "t1")).first():
            conn.execute(
                thread.insert().values(
                    id="t1", actor_ref="alice", title="", created_at=0, updated_at=0
                )
            )
        conn.execute(
            token_usage.insert(),
            [
                {
                    "id": f"u{i}-{r['at']}-{r.get('actor', 'alice')}-{r.get('tenant')}",
                    "thread_id": "t1",
                    "actor_ref": r.get("actor", "alice"),
                    "tenant_ref": r.get("tenant", "acme"),
                    "model_id": "m",
                    "purpose": "chat",
                    "input_tokens": r.get("inp", 100),
                    "output_tokens": r.get("out", 0),
                    "cache_read_tokens": None,
                    "cache_write_tokens": None,
                    "cost_usd": r.get("cost", 1.0),
                    "cost_source": None if r.get("cost", 1.0) is None else "estimate",
                    "created_at": r["at"],
                }
                for i, r in enumerate(rows)
            ],
        )


def save(engine: Any, **kwargs: Any) -> Any:
    kwargs.setdefault("created_by", "ops")
    with engine.begin() as conn:
        return set_budget(conn, **kwargs)


def test_set_inserts_then_updates_then_is_unchanged(engine: Any) -> None:
    clock = ManualClock(1_000)
    first = save(
        engine, scope_kind="tenant", scope_ref="acme", period="month", limit_usd=500.0, clock=clock
    )
    assert first.action == "inserted" and first.budget.warn_at == 0.8
    clock.advance(5)
    again = save(
        engine, scope_kind="tenant", scope_ref="acme", period="month", limit_usd=500.0, clock=clock
    )
    assert again.action == "unchanged" and again.budget.updated_at == 1_000
    moved = save(
        engine,
        scope_kind="tenant",
        scope_ref="acme",
        period="month",
        limit_usd=600.0,
        limit_tokens=10,
        warn_at=0.5,
        note="Q4",
        clock=clock,
    )
    assert moved.action == "updated" and moved.budget.id == first.budget.id
    assert (moved.budget.created_at, moved.budget.updated_at) == (1_000, 1_005)
    with engine.connect() as conn:
        (only,) = list_budgets(conn)
    assert (only.limit_usd, only.limit_tokens, only.warn_at, only.note) == (600.0, 10, 0.5, "Q4")


@pytest.mark.parametrize(
    "bad",
    [
        {"limit_usd": None, "limit_tokens": None},
        {"limit_usd": -1.0},
        {"limit_usd": float("nan")},
        {"limit_usd": float("inf")},
        {"limit_tokens": -1},
        {"limit_tokens": 2**63},
        {"limit_usd": 1.0, "warn_at": 0.0},
        {"limit_usd": 1.0, "warn_at": 1.5},
        {"limit_usd": 1.0, "period": "year"},
        {"limit_usd": 1.0, "scope_kind": "team"},
        {"limit_usd": 1.0, "scope_ref": "  "},
        {"limit_usd": 1.0, "scope_kind": "global", "scope_ref": "x"},
    ],
)
def test_bad_budgets_are_refused_before_any_write(engine: Any, bad: dict[str, Any]) -> None:
    args = {"scope_kind": "actor", "scope_ref": "alice", "period": "day", **bad}
    with pytest.raises(InvalidInput):
        save(engine, **args)
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(budget)).scalar() == 0


def test_scopes_are_exact_and_removal_by_period(engine: Any, dialect: str) -> None:
    save(engine, scope_kind="actor", scope_ref="alice", period="day", limit_usd=1.0)
    if dialect == "mysql":
        # utf8mb4_bin is PAD SPACE: the unique index holds 'alice' and 'alice ' as one key.
        with pytest.raises(Conflict, match="trailing spaces"):
            save(engine, scope_kind="actor", scope_ref="alice ", period="day", limit_usd=2.0)
        save(engine, scope_kind="actor", scope_ref="alice ", period="month", limit_usd=2.0)
    else:
        save(engine, scope_kind="actor", scope_ref="alice ", period="day", limit_usd=2.0)
    save(engine, scope_kind="actor", scope_ref="alice", period="week", limit_usd=3.0)
    save(engine, scope_kind="global", scope_ref=None, period="month", limit_tokens=9)
    with engine.connect() as conn:
        mine = list_budgets(conn, scope_kind="actor", scope_ref="alice")
        assert [(b.scope_ref, b.period) for b in mine] == [("alice", "day"), ("alice", "week")]
        assert [b.scope_kind for b in list_budgets(conn)] == ["actor"] * 3 + ["global"]
    with engine.begin() as conn:
        assert remove_budgets(conn, scope_kind="actor", scope_ref="alice", period="day") == 1
        assert remove_budgets(conn, scope_kind="actor", scope_ref="alice") == 1
        assert remove_budgets(conn, scope_kind="actor", scope_ref="alice") == 0
    with engine.connect() as conn:
        assert [b.scope_ref for b in list_budgets(conn)] == ["alice ", ""]
        assert list_budgets(conn)[0].limit_usd == 2.0


def test_weeks_start_on_monday_at_midnight_utc() -> None:
    sunday = period_window("week", SUNDAY_LAST)
    monday = period_window("week", MONDAY_FIRST)
    assert sunday[1] == SUNDAY_LAST and monday[0] == MONDAY_FIRST
    assert sunday[0] == parse_instant("2026-11-23T00:00:00Z")
    assert monday[1] == parse_instant("2026-12-06T23:59:59.999Z")


def test_budget_windows_count_the_period_up_to_the_instant(engine: Any) -> None:
    usage(
        engine,
        {"at": SUNDAY_LAST, "inp": 7},
        {"at": MONDAY_FIRST, "inp": 11},
        {"at": MONDAY_FIRST + 1_000, "inp": 13},
    )
    save(engine, scope_kind="actor", scope_ref="alice", period="week", limit_tokens=100)
    with engine.connect() as conn:
        budgets = list_budgets(conn)
        (sunday,) = evaluate_budgets(conn, budgets, at_ms=SUNDAY_LAST)
        (monday,) = evaluate_budgets(conn, budgets, at_ms=MONDAY_FIRST)
        (later,) = evaluate_budgets(conn, budgets, at_ms=MONDAY_FIRST + 5_000)
    assert (sunday.tokens, monday.tokens, later.tokens) == (7, 11, 24)
    assert later.remaining_tokens == 76 and later.state == "ok"


@pytest.mark.parametrize("grouped", [False, True])
def test_states_and_both_evaluation_strategies_agree(engine: Any, grouped: bool) -> None:
    at = parse_instant("2026-11-15T12:00:00Z")
    usage(
        engine,
        {"at": at - 10, "actor": "alice", "tenant": "acme", "inp": 80, "cost": 0.8},
        {"at": at - 10, "actor": "bob", "tenant": "acme", "inp": 100, "cost": None},
        {"at": at - 10, "actor": "carol", "tenant": "zeta", "inp": 10, "cost": 5.0},
        {"at": at + 10, "actor": "alice", "tenant": "acme", "inp": 1_000},  # after the instant
    )
    save(engine, scope_kind="actor", scope_ref="alice", period="day", limit_tokens=100)  # 80 %
    save(engine, scope_kind="actor", scope_ref="bob", period="month", limit_tokens=100)  # 100 %
    save(engine, scope_kind="tenant", scope_ref="zeta", period="week", limit_usd=10.0)  # 50 %
    save(engine, scope_kind="tenant", scope_ref="acme", period="month", limit_usd=0.0)
    save(
        engine,
        scope_kind="global",
        scope_ref=None,
        period="month",
        limit_usd=100.0,
        limit_tokens=1_000,
        warn_at=0.19,
    )
    with engine.connect() as conn:
        statuses = evaluate_budgets(conn, list_budgets(conn), at_ms=at, grouped=grouped)
    got = {(s.budget.scope_kind, s.budget.scope_ref): s for s in statuses}
    assert got[("actor", "alice")].state == "warning"
    assert got[("actor", "alice")].percent_used == pytest.approx(80.0)
    assert got[("actor", "bob")].state == "exhausted" and got[("actor", "bob")].usd == 0.0
    assert got[("actor", "bob")].unpriced_turns == 1
    assert got[("tenant", "zeta")].state == "ok"
    assert got[("tenant", "zeta")].remaining_usd == pytest.approx(5.0)
    assert got[("tenant", "acme")].state == "exhausted"  # a limit of 0: nothing allowed
    glob = got[("global", "")]
    assert (glob.tokens, glob.usd) == (190, pytest.approx(5.8))
    assert glob.state == "warning" and glob.percent_used == pytest.approx(19.0)


def test_scope_quota_always_has_day_and_month_and_given_limits_override(engine: Any) -> None:
    at = parse_instant("2026-11-15T12:00:00Z")
    usage(engine, {"at": at, "actor": "alice", "inp": 50})
    save(engine, scope_kind="actor", scope_ref="alice", period="week", limit_tokens=40)
    save(engine, scope_kind="actor", scope_ref="alice", period="month", limit_tokens=1_000)
    with engine.connect() as conn:
        plain = scope_quota(conn, scope_kind="actor", scope_ref="alice", at_ms=at)
        given = scope_quota(
            conn,
            scope_kind="actor",
            scope_ref="alice",
            at_ms=at,
            limits={"month": (40, None), "day": (None, 100.0)},
        )
    assert [s.budget.period for s in plain] == ["day", "week", "month"]
    assert [s.state for s in plain] == ["ok", "exhausted", "ok"]
    assert plain[0].budget.limit_tokens is None and plain[0].percent_used == 0
    assert [s.state for s in given] == ["ok", "exhausted", "exhausted"]
    assert given[0].budget.limit_usd == 100.0 and given[2].budget.limit_tokens == 40


SETTER = r"""
import sys
from agora_cli.store._budgets import set_budget
from agora_cli.store._engine import open_engine, retry_transient

engine = open_engine(sys.argv[1])
usd = float(sys.argv[2])
print("ready", flush=True)
sys.stdin.readline()
for n in range(25):
    def run(n=n):
        with engine.begin() as conn:
            set_budget(conn, scope_kind="tenant", scope_ref="acme", period="month",
                       limit_usd=usd + n, created_by="p")
    retry_transient(run)
print("done", flush=True)
"""


@pytest.mark.slow
def test_two_processes_setting_one_budget_leave_one_row(db_url: str, engine: Any) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SETTER, db_url, usd],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for usd in ("10", "20")
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    for proc in procs:  # both start writing at once
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and out == "done\n", err
    with engine.connect() as conn:
        rows = conn.execute(select(budget.c.scope_ref, budget.c.limit_usd)).all()
    assert len(rows) == 1 and rows[0][1] in (34.0, 44.0)


def test_report_windows() -> None:
    from datetime import date

    today = date(2026, 11, 30)  # a Monday
    assert last_window("7d", today) == (date(2026, 11, 24), today)
    assert last_window("1w", today) == (date(2026, 11, 30), today)
    assert last_window("4w", today) == (date(2026, 11, 9), today)
    assert last_window("3m", today) == (date(2026, 9, 1), today)
    assert last_window("13m", today) == (date(2025, 11, 1), today)
    assert parse_bound("2026-02", what="--to", end=True) == date(2026, 2, 28)
    assert parse_bound("2024-02", what="--to", end=True) == date(2024, 2, 29)
    assert parse_bound("2026-02", what="--from", end=False) == date(2026, 2, 1)
    for bad in ("7", "0d", "3661d", "7y", "-1d", "d"):
        with pytest.raises(InvalidInput):
            last_window(bad, today)


@pytest.mark.parametrize("grouped", [False, True])
def test_budgets_sum_exactly_their_own_scope(engine: Any, grouped: bool) -> None:
    at = parse_instant("2026-11-15T12:00:00Z")
    usage(engine, {"at": at, "actor": "alice", "inp": 5}, {"at": at, "actor": "alice ", "inp": 7})
    save(engine, scope_kind="actor", scope_ref="alice ", period="day", limit_tokens=100)
    with engine.connect() as conn:
        (status,) = evaluate_budgets(conn, list_budgets(conn), at_ms=at, grouped=grouped)
    assert status.tokens == 7  # never 'alice' (MySQL's PAD SPACE compares them equal)
