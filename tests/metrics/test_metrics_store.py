"""The figures `agora metrics` exports, read by the store (``store/_metrics.py``), on every
dialect: each group against what the rows say, and a failing group standing alone."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import T0, exec_sql

from agora_cli.store._budgets import evaluate_budgets, list_budgets, set_budget
from agora_cli.store._clock import DAY_MS, ManualClock
from agora_cli.store._errors import InvalidInput, SchemaDrift
from agora_cli.store._fold import fold, mark_days_dirty
from agora_cli.store._metrics import (
    GROUPS,
    MetricsCache,
    collect_metrics,
    count_runs_started_since,
    read_execution_figures,
    read_fold_figures,
    read_frame_figures,
    read_inbox_figures,
    read_schema_figures,
    read_spend_figures,
)
from agora_cli.store._proposals import ActionProposalStore, NewProposal, Scope
from agora_cli.store._schema import run, stream_frame, token_usage
from agora_cli.store._steps import record_tool_call
from agora_cli.store._threads import append_message, create_thread
from agora_cli.store._usage import record_usage

MIN = 60_000
HOUR = 60 * MIN
NOW = T0 + 14 * DAY_MS + 12 * HOUR  # 2026-01-15T12:00:00Z
ALICE = Scope("acme", "alice", "t-acme")
BOB = Scope(None, "bob", "t-none")


@pytest.fixture
def at_now(engine: Any, clock: ManualClock) -> ManualClock:
    """Threads t-acme (tenant acme, alice's) and t-none (no tenant, bob's); the clock at NOW."""
    clock.set(T0 - DAY_MS)
    with engine.begin() as conn:
        create_thread(conn, actor_ref="alice", tenant_ref="acme", thread_id="t-acme", clock=clock)
        create_thread(conn, actor_ref="bob", thread_id="t-none", clock=clock)
    clock.set(NOW)
    return clock


def _read(engine: Any, fn: Any, **kwargs: Any) -> Any:
    with engine.connect() as conn:
        try:
            return fn(conn, **kwargs)
        finally:
            conn.rollback()


# --- the inbox and approved work ----------------------------------------------------------------


def _propose(store: ActionProposalStore, pid: str, scope: Scope, tool: str, expires: int | None):
    now = store.clock.now_ms()
    new = NewProposal(
        scope=scope,
        tool_name=tool,
        input={"id": pid},
        id=pid,
        expires_at=None if expires is None else now + expires,
    )
    store.create(new)


def test_the_inbox_counts_what_waits_by_kind_tool_and_tenant(
    engine: Any, at_now: ManualClock
) -> None:
    clock = at_now
    store = ActionProposalStore(engine, clock=clock)
    clock.set(NOW - 3 * HOUR)  # the oldest that still waits
    _propose(store, "p-old", BOB, "refund", None)
    clock.set(NOW - 2 * HOUR)
    _propose(store, "p-gone", ALICE, "refund", HOUR)  # past its expiry at NOW
    clock.set(NOW - 10 * MIN)
    _propose(store, "p-soon", ALICE, "refund", 30 * MIN)  # expires within the hour
    _propose(store, "p-later", ALICE, "cancel", 3 * HOUR)
    _propose(store, "p-decided", ALICE, "cancel", None)
    store.decide("p-decided", ALICE, "approved", "ops")
    with engine.begin() as conn:  # the runtime's own approval, waiting since 4 h ago
        clock.set(NOW - 4 * HOUR)
        msg = append_message(conn, thread_id="t-acme", role="assistant", content="?", clock=clock)
        record_tool_call(
            conn,
            message_id=msg.id,
            tool_call_id="tc-1",
            tool_name="wire_money",
            tool_type="action",
            status="pending_approval",
            clock=clock,
        )
    clock.set(NOW)
    got = _read(engine, read_inbox_figures, now_ms=NOW)
    pending = sorted((c.kind, c.tool_name, c.tenant_ref or "", c.count) for c in got.pending)
    assert pending == [
        ("proposal", "cancel", "acme", 1),
        ("proposal", "refund", "", 1),
        ("proposal", "refund", "acme", 1),  # p-gone is past expiry: not waiting any more
        ("tool_call", "wire_money", "acme", 1),
    ]
    assert got.oldest_pending_at == NOW - 4 * HOUR  # the tool call
    assert (got.expiring_within_hour, got.past_expiry) == (1, 1)


def test_approved_work_by_state_and_tool(engine: Any, at_now: ManualClock) -> None:
    clock = at_now
    store = ActionProposalStore(engine, clock=clock)
    clock.set(NOW - HOUR)
    for pid, tool in (
        ("w-queued", "refund"),
        ("w-live", "refund"),
        ("w-dead", "email"),
        ("w-failed", "refund"),
        ("w-ok", "refund"),
    ):
        _propose(store, pid, ALICE, tool, None)
        store.decide(pid, ALICE, "approved", "ops")
    dead = store.claim("w-dead", ALICE, "gone", 30_000)
    failed = store.claim("w-failed", ALICE, "w", 30_000)
    done = store.claim("w-ok", ALICE, "w", 30_000)
    assert dead.lease and failed.lease and done.lease
    store.settle("w-failed", failed.lease.token, failed.lease.generation, "failed", error="409")
    store.settle("w-ok", done.lease.token, done.lease.generation, "succeeded")
    clock.set(NOW - MIN)
    assert store.claim("w-live", ALICE, "w", 10 * MIN).lease
    got = _read(engine, read_execution_figures, now_ms=NOW)
    assert sorted((c.state, c.tool_name, c.count) for c in got.counts) == [
        ("failed", "refund", 1),
        ("queued", "refund", 1),
        ("running", "refund", 1),
        ("stuck", "email", 1),  # its lease ran out at NOW - 1 h + 30 s
    ]
    assert got.oldest_queued_at == NOW - HOUR


# --- runs, frames, the fold -----------------------------------------------------------------------


def test_runs_of_the_last_hour_by_status(engine: Any, at_now: ManualClock) -> None:
    rows = [
        ("r1", "completed", NOW - 10 * MIN),
        ("r2", "completed", NOW - HOUR),  # exactly an hour ago: in
        ("r3", "failed", NOW - 59 * MIN),
        ("r4", "running", NOW - MIN),
        ("r5", "failed", NOW - HOUR - 1),  # just before: out
    ]
    with engine.begin() as conn:
        conn.execute(
            run.insert(),
            [
                {"id": i, "thread_id": "t-none", "actor_ref": "bob", "status": s, "started_at": at}
                for i, s, at in rows
            ],
        )
    got = _read(engine, count_runs_started_since, since_ms=NOW - HOUR)
    assert [(c.status, c.count) for c in got] == [("completed", 2), ("failed", 1), ("running", 1)]


def test_frames_awaiting_purge_are_runs_idle_past_the_ttl(engine: Any, at_now: ManualClock) -> None:
    ttl_ms = 3_600_000
    frames = [
        ("old", 1, NOW - 3 * HOUR),
        ("old", 2, NOW - 2 * HOUR),
        ("active", 1, NOW - 3 * HOUR),  # old rows, but written a minute ago: still active
        ("active", 2, NOW - MIN),
        ("fresh", 1, NOW - MIN),
        ("edge", 1, NOW - ttl_ms - 1),
    ]
    with engine.begin() as conn:
        conn.execute(
            stream_frame.insert(),
            [{"run_id": r, "seq": s, "frame": "{}", "created_at": at} for r, s, at in frames],
        )
    got = _read(engine, read_frame_figures, now_ms=NOW, ttl_s=3600)
    assert (got.runs, got.rows) == (2, 3)
    with pytest.raises(InvalidInput):
        _read(engine, read_frame_figures, now_ms=NOW, ttl_s=0)


def _usage(engine: Any, clock: ManualClock, at: int, thread: str, actor: str, **kw: Any) -> None:
    clock.set(at)
    with engine.begin() as conn:
        record_usage(
            conn,
            thread_id=thread,
            actor_ref=actor,
            purpose="chat",
            input_tokens=kw.pop("input_tokens", 100),
            output_tokens=kw.pop("output_tokens", 10),
            clock=clock,
            **kw,
        )


def test_the_fold_lag_counts_unfolded_and_dirty_closed_days(
    engine: Any, at_now: ManualClock
) -> None:
    clock = at_now
    assert _read(engine, read_fold_figures, now_ms=NOW) == _fold_figures(0, 0, None)
    _usage(engine, clock, T0 + 3 * DAY_MS, "t-none", "bob", model_id="m")  # the first: Jan 4
    clock.set(NOW)
    # closed: Jan 4 .. Jan 14 (Jan 15 is today) — 11 days, none folded
    assert _read(engine, read_fold_figures, now_ms=NOW) == _fold_figures(11, 0, None)
    clock.set(T0 + 10 * DAY_MS + 3 * HOUR)  # Jan 11, 03:00: folds Jan 4 .. Jan 10
    fold(engine, clock=clock)
    folded_at = clock.now_ms()
    clock.set(NOW)
    assert _read(engine, read_fold_figures, now_ms=NOW) == _fold_figures(4, 0, folded_at)
    with engine.begin() as conn:
        mark_days_dirty(conn, token_usage.c.model_id == "m")
    assert _read(engine, read_fold_figures, now_ms=NOW) == _fold_figures(4, 1, folded_at)
    # within the grace period (two hours), yesterday is not closed yet
    early = T0 + 14 * DAY_MS + HOUR
    assert _read(engine, read_fold_figures, now_ms=early).unfolded_days == 3


def _fold_figures(unfolded: int, dirty: int, last: int | None) -> Any:
    from agora_cli.store._metrics import FoldFigures

    return FoldFigures(unfolded_days=unfolded, dirty_days=dirty, last_folded_at=last)


# --- spend --------------------------------------------------------------------------------------


def _spend_rows(engine: Any, clock: ManualClock) -> None:
    day = DAY_MS
    _usage(engine, clock, T0 - HOUR, "t-acme", "alice", model_id="gpt", provider_cost_usd=9.0)
    _usage(engine, clock, T0 + 2 * day, "t-acme", "alice", model_id="gpt", provider_cost_usd=0.5,
           tenant_ref="acme")  # fmt: skip
    _usage(engine, clock, T0 + 2 * day + HOUR, "t-none", "bob", model_id="gpt",
           provider_cost_usd=0.25)  # fmt: skip
    # the runtime's row: no tenant of its own, its thread's (acme)
    _usage(engine, clock, T0 + 9 * day, "t-acme", "alice", model_id="claude", provider_cost_usd=1.0)
    _usage(engine, clock, T0 + 9 * day + 5, "t-none", "bob", model_id="llama")  # unpriced
    _usage(engine, clock, NOW - 2 * HOUR, "t-acme", "alice", model_id="gpt",
           provider_cost_usd=0.125, input_tokens=7, output_tokens=3)  # fmt: skip
    _usage(engine, clock, NOW - HOUR, "t-acme", "alice", model_id="llama", tenant_ref="acme")
    clock.set(NOW)


def _cells(cells: Any) -> list[tuple[Any, ...]]:
    return sorted(
        (
            c.model_id,
            c.tenant_ref or "",
            c.turns,
            None if c.cost_usd is None else round(c.cost_usd, 9),
            c.unpriced_turns,
        )
        for c in cells
    )


DAY_CELLS = [("gpt", "acme", 1, 0.125, 0), ("llama", "acme", 1, None, 1)]
MONTH_CELLS = [
    ("claude", "acme", 1, 1.0, 0),
    ("gpt", "", 1, 0.25, 0),
    ("gpt", "acme", 2, 0.625, 0),
    ("llama", "", 1, None, 1),  # unpriced: no cost at all, never $0
    ("llama", "acme", 1, None, 1),
]


def test_spend_today_and_this_month_by_model_and_tenant(engine: Any, at_now: ManualClock) -> None:
    _spend_rows(engine, at_now)
    raw = _read(engine, read_spend_figures, now_ms=NOW)
    assert _cells(raw.day) == DAY_CELLS
    assert _cells(raw.month) == MONTH_CELLS
    assert (raw.folded_days, raw.earlier_days) == (0, 14)
    gpt = next(c for c in raw.day if c.model_id == "gpt")
    assert (gpt.input_tokens, gpt.output_tokens) == (7, 3)


def test_spend_reads_folded_days_from_the_fold_with_the_same_figures(
    engine: Any, at_now: ManualClock
) -> None:
    _spend_rows(engine, at_now)
    raw = _read(engine, read_spend_figures, now_ms=NOW)
    fold(engine, clock=at_now)  # folds Dec 31 .. Jan 14
    folded = _read(engine, read_spend_figures, now_ms=NOW)
    assert folded.folded_days == 14
    assert _cells(folded.day) == _cells(raw.day) == DAY_CELLS
    assert _cells(folded.month) == _cells(raw.month) == MONTH_CELLS
    # a folded day changed by another writer and marked dirty is read raw again
    with engine.begin() as conn:
        conn.execute(
            token_usage.update().where(token_usage.c.model_id == "claude").values(cost_usd=2.0)
        )
        mark_days_dirty(conn, token_usage.c.model_id == "claude")
    again = _read(engine, read_spend_figures, now_ms=NOW)
    assert again.folded_days == 13
    assert ("claude", "acme", 1, 2.0, 0) in _cells(again.month)


# --- the schema, and a group that fails ---------------------------------------------------------


def test_the_schema_figures_are_what_db_status_says(empty_url: str) -> None:
    from agora_cli.store._engine import open_engine
    from agora_cli.store._migrate import head_revision, upgrade
    from agora_cli.store._provision import ensure_agent_tables

    engine = open_engine(empty_url)
    try:
        ensure_agent_tables(engine)
        provisioned = _read(engine, read_schema_figures)
        assert (provisioned.revision, provisioned.head, provisioned.current) == (
            None,
            head_revision(),
            True,
        )
        upgrade(engine, "agent@head")
        upgraded = _read(engine, read_schema_figures)
        assert upgraded.revision == upgraded.head == head_revision() and upgraded.current
        exec_sql(engine, "DROP INDEX agent_run_status_started_idx" + _on_table(engine, "agent_run"))
        drifted = _read(engine, read_schema_figures)
        assert not drifted.current and drifted.problems == 1
    finally:
        engine.dispose()


def _on_table(engine: Any, table: str) -> str:
    return f" ON {table}" if engine.dialect.name == "mysql" else ""


def test_a_failing_group_leaves_the_others_and_says_why(empty_url: str) -> None:
    from agora_cli.store._engine import open_engine
    from agora_cli.store._provision import ensure_agent_tables

    engine = open_engine(empty_url)
    try:
        ensure_agent_tables(engine)
        exec_sql(engine, "DROP TABLE agent_budget")
        snap = collect_metrics(engine, clock=ManualClock(NOW))
        assert snap.at_ms == NOW and not snap.ok
        assert set(snap.errors) == {"budgets"}
        assert isinstance(snap.errors["budgets"], SchemaDrift)
        assert "agent_budget" in snap.errors["budgets"].message
        assert snap.budgets is None
        assert snap.schema is not None and not snap.schema.current  # the drift is seen there too
        assert snap.inbox is not None and snap.spend is not None and snap.fold is not None
        assert set(snap.group_seconds) == set(GROUPS)
        with pytest.raises(InvalidInput):
            collect_metrics(engine, groups=["inbox", "nope"])  # type: ignore[list-item]
        with pytest.raises(InvalidInput):
            collect_metrics(engine, frames_ttl_s=0)
    finally:
        engine.dispose()


# --- budgets: taken from what spend read, the same as evaluating them --------------------------


def test_budgets_from_the_spend_read_are_what_evaluate_budgets_says(
    engine: Any, at_now: ManualClock
) -> None:
    """`agora metrics` takes tenants' and the platform's day and month budgets and actors' day
    budgets from the spend group's read; every other budget is evaluated. Each must equal
    ``evaluate_budgets`` at the same instant, raw and folded, with the row whose tenant is its
    thread's, the unpriced rows, and refs that differ only by a trailing space (MySQL's PAD
    SPACE must not merge them)."""
    _spend_rows(engine, at_now)
    _usage(engine, at_now, NOW - 3 * HOUR, "t-none", "bob ", model_id="gpt", provider_cost_usd=4.0,
           tenant_ref="acme ")  # fmt: skip
    at_now.set(NOW)
    with engine.begin() as conn:
        # (MySQL's unique index holds "acme" and "acme " as one key: the spaced refs are the
        # ledger's only, and must not be counted as acme's or bob's)
        for kind, ref in (("tenant", "acme"), ("tenant", "nobody"), ("actor", "alice"),
                          ("actor", "bob"), ("global", None)):  # fmt: skip
            for period in ("day", "week", "month"):
                set_budget(conn, scope_kind=kind, scope_ref=ref, period=period, created_by="ops",
                           limit_usd=1.0, limit_tokens=100, clock=at_now)  # fmt: skip

    def both() -> tuple[list[Any], list[Any]]:
        snap = collect_metrics(engine, clock=at_now, groups=["spend", "budgets"])
        assert snap.ok, snap.errors
        with engine.connect() as conn:
            expected = evaluate_budgets(conn, list_budgets(conn), at_ms=NOW)
            conn.rollback()
        return list(snap.budgets), expected

    def view(statuses: list[Any]) -> list[tuple[Any, ...]]:
        # fmt: off
        return [
            (s.budget.scope_kind, s.budget.scope_ref, s.budget.period, s.from_ms, s.to_ms,
             s.tokens, round(s.usd, 9), s.unpriced_turns, s.state)
            for s in statuses
        ]
        # fmt: on

    derived, expected = both()
    assert view(derived) == view(expected)
    used = {(s.budget.scope_kind, s.budget.scope_ref, s.budget.period): s for s in derived}
    assert used[("tenant", "acme", "day")].usd == 0.125  # never "acme "'s $4
    assert used[("tenant", "acme", "month")].unpriced_turns == 1
    assert used[("actor", "bob", "day")].tokens == 0  # "bob "'s row is not bob's
    assert used[("global", "", "day")].usd == 4.125
    fold(engine, clock=at_now)  # the month's earlier days now come from the fold
    derived, expected = both()
    assert view(derived) == view(expected)
    assert used[("global", "", "month")].usd == next(
        s.usd for s in derived if s.budget.scope_kind == "global" and s.budget.period == "month"
    )


def test_the_serve_cache_keeps_folded_days_only_while_they_stand(
    engine: Any, at_now: ManualClock
) -> None:
    """`metrics serve`'s cache: the month's folded days' sums are read once and reused while
    their versions stand; a dirty mark or a new fold of a day is seen at the next collection."""
    _spend_rows(engine, at_now)
    fold(engine, clock=at_now)
    cache = MetricsCache()

    def month() -> list[tuple[Any, ...]]:
        snap = collect_metrics(engine, clock=at_now, groups=["spend"], cache=cache)
        assert snap.ok, snap.errors
        return _cells(snap.spend.month)

    assert month() == MONTH_CELLS and cache.hits == 0
    assert month() == MONTH_CELLS and cache.hits == 1  # the fold rows were not read again
    with engine.begin() as conn:  # another writer changes a folded day: it is marked dirty
        conn.execute(
            token_usage.update().where(token_usage.c.model_id == "claude").values(cost_usd=2.0)
        )
        mark_days_dirty(conn, token_usage.c.model_id == "claude")
    assert ("claude", "acme", 1, 2.0, 0) in month() and cache.hits == 1
    at_now.set(NOW + 1)
    fold(engine, clock=at_now)  # folded again, with the new cost: a new version
    assert ("claude", "acme", 1, 2.0, 0) in month() and cache.hits == 1
    assert ("claude", "acme", 1, 2.0, 0) in month() and cache.hits == 2
    # a folded day's rows changed behind the fold's back (a new fold, same days) are read anew
    with engine.begin() as conn:
        conn.execute(
            token_usage.update().where(token_usage.c.model_id == "claude").values(cost_usd=3.0)
        )
        mark_days_dirty(conn, token_usage.c.model_id == "claude")
    at_now.set(NOW + 2)
    fold(engine, clock=at_now)
    assert ("claude", "acme", 1, 3.0, 0) in month() and cache.hits == 2
