"""Waking a worker on a decision (issue 30): NOTIFY on PostgreSQL, adaptive polling elsewhere.

On PostgreSQL an approval and a requeue notify ``agora_work`` in their own transaction (a
rolled-back one wakes nobody), a ``WorkWaiter`` listening on its own connection wakes on it,
reconnects when that connection drops, and a worker that missed a notification still claims by
polling. On every dialect the real example worker, idle, claims a decision taken with the real
CLI well before its poll interval ends on PostgreSQL (30 s), and within its polling bounds
elsewhere. On main there is no ``WorkWaiter``: every test here fails there.
"""

from __future__ import annotations

import logging
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import ROOT, run_cli
from sqlalchemy import text, update

from agora_cli.store import WorkWaiter, open_engine
from agora_cli.store._errors import InvalidInput
from agora_cli.store._proposals import (
    WORK_CHANNEL,
    ActionProposalStore,
    NewProposal,
    Scope,
    decide_proposal,
    requeue_proposal,
)
from agora_cli.store._schema import action_proposal, thread

ALICE = Scope(None, "alice", "t1")
LEASE = 30_000
WORKER = str(ROOT / "examples" / "worker.py")


@pytest.fixture
def store(engine: Any) -> ActionProposalStore:
    with engine.begin() as conn:
        conn.execute(
            thread.insert().values(
                id="t1", actor_ref="alice", title="t", created_at=0, updated_at=0
            )
        )
    return ActionProposalStore(engine)


def pending(store: ActionProposalStore, call: str) -> str:
    new = NewProposal(
        scope=ALICE, tool_name="refund", run_id="r1", tool_call_id=call, input={"order_id": call}
    )
    return store.create(new).proposal.id


def only_postgresql(dialect: str) -> None:
    if dialect != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's; the other dialects poll (tested below)")


@pytest.fixture
def waiter(engine: Any, dialect: str) -> Iterator[WorkWaiter]:
    only_postgresql(dialect)
    with WorkWaiter(engine, poll_interval=30) as listening:
        assert listening.mode == "listening" and listening.notice is None
        yield listening


# --- adaptive polling -------------------------------------------------------------------------


def test_polling_backs_off_from_min_to_the_poll_interval_and_starts_again_after_work(
    engine: Any,
) -> None:
    with WorkWaiter(engine, poll_interval=0.008, min_interval=0.001, listen=False) as polling:
        assert polling.mode == "polling"
        delays = []
        for _ in range(6):
            delays.append(polling.delay)
            assert polling.wait_for_work() is False  # the wait ran out: claim now (the poll)
        assert delays == [0.001, 0.002, 0.004, 0.008, 0.008, 0.008]
        polling.work_found()
        assert polling.delay == 0.001
    with pytest.raises(InvalidInput):
        WorkWaiter(engine, poll_interval=0.001, min_interval=0.01)
    for hostile in (float("nan"), float("inf"), 1e300, -1.0, 0.0):
        with pytest.raises(InvalidInput):
            WorkWaiter(engine, poll_interval=hostile, listen=False)
    with pytest.raises(InvalidInput, match="PostgreSQL"):  # LISTEN is PostgreSQL's
        WorkWaiter(engine, listen_url="sqlite://")


def test_mysql_and_sqlite_poll_whatever_they_are_asked(engine: Any, dialect: str) -> None:
    if dialect == "postgresql":
        pytest.skip("PostgreSQL listens (the tests below)")
    with WorkWaiter(engine, poll_interval=1) as waiting:
        assert waiting.mode == "polling" and waiting.notice is None  # by design: nothing to say


# --- NOTIFY on PostgreSQL ---------------------------------------------------------------------


@pytest.mark.slow  # waits out two short timeouts to show that nothing woke the waiter
def test_an_approval_wakes_a_listener_on_commit_only(
    store: ActionProposalStore, waiter: WorkWaiter, engine: Any
) -> None:
    rolled_back, rejected, approved = (pending(store, c) for c in ("c1", "c2", "c3"))
    with engine.connect() as conn:
        trans = conn.begin()
        result = decide_proposal(
            conn, rolled_back, scope=ALICE, decision="approved", decided_by="bob"
        )
        assert result.outcome == "applied"
        trans.rollback()
    assert store.decide(rejected, ALICE, "rejected", "bob").outcome == "applied"
    assert waiter.wait_for_work(timeout=0.3) is False  # neither the rollback nor the rejection
    with engine.begin() as conn:  # two approvals in one transaction: one notification
        assert decide_proposal(conn, rolled_back, scope=ALICE, decision="approved", decided_by="b")
        assert decide_proposal(conn, approved, scope=ALICE, decision="approved", decided_by="b")
    assert waiter.wait_for_work(timeout=30) is True
    assert waiter.wait_for_work(timeout=0.2) is False  # the burst was taken in one wake-up


def test_a_requeue_wakes_a_listener(
    store: ActionProposalStore, waiter: WorkWaiter, engine: Any
) -> None:
    pid = pending(store, "c1")
    store.decide(pid, ALICE, "approved", "bob")
    assert waiter.wait_for_work(timeout=30) is True
    claim = store.claim_next("w1", LEASE)
    assert claim.work is not None and claim.lease is not None
    store.settle(pid, claim.lease.token, claim.lease.generation, "failed", error="boom")
    with engine.begin() as conn:
        assert requeue_proposal(conn, pid, requeued_by="ops", reason="retry").outcome == "requeued"
    assert waiter.wait_for_work(timeout=30) is True
    assert store.claim_next("w1", LEASE).work is not None


def test_the_listener_reconnects_after_its_connection_drops(
    store: ActionProposalStore, waiter: WorkWaiter, engine: Any, caplog: Any
) -> None:
    with engine.begin() as conn:
        killed = conn.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND query = :q"
            ),
            {"q": f"LISTEN {WORK_CHANNEL}"},
        ).scalar_one()
    assert killed is True
    with caplog.at_level(logging.WARNING, logger="agora.wakeups"):
        # Back at once, and wakes the worker: a notification may have been lost meanwhile.
        assert waiter.wait_for_work(timeout=30) is True
    assert "connection lost" in caplog.text and "reconnected" in caplog.text
    store.decide(pending(store, "c1"), ALICE, "approved", "bob")
    assert waiter.wait_for_work(timeout=30) is True  # listening again


# --- the example worker, woken ----------------------------------------------------------------


class Worker:
    """``examples/worker.py`` in its own process, its output lines read as they come."""

    def __init__(self, db_url: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, WORKER, "--db", db_url, "--max-idle", "60", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.lines: queue.Queue[str] = queue.Queue()
        for stream in (self.proc.stdout, self.proc.stderr):
            threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            self.lines.put(line.strip())

    def line(self, containing: str, within: float = 30) -> str:
        while True:
            line = self.lines.get(timeout=within)
            if containing in line:
                return line

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def worker_on(db_url: str) -> Iterator[Any]:
    started: list[Worker] = []

    def start(*args: str) -> Worker:
        started.append(Worker(db_url, *args))
        return started[-1]

    yield start
    for each in started:
        each.stop()
    # The worker's domain table outlives the agent tables' clearing: leave none to other tests.
    engine = open_engine(db_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE IF EXISTS example_refund")
    engine.dispose()


@pytest.mark.slow  # runs the example worker as a process
def test_the_idle_example_worker_claims_a_decision_at_once(
    store: ActionProposalStore, worker_on: Any, db_url: str, dialect: str
) -> None:
    pid = pending(store, "c1")
    # PostgreSQL: a 30 s poll, so only the notification can explain a claim within seconds.
    # The others poll: 10 ms after work, doubling up to the 1 s asked for.
    poll = "30" if dialect == "postgresql" else "1"
    worker = worker_on("--poll", poll)
    mode = "listening" if dialect == "postgresql" else "polling"
    assert mode in worker.line("waiting for work")
    time.sleep(1.5)  # the worker claims, finds nothing and waits (at its longest, elsewhere)
    scope = ["--actor", "alice", "--thread", "t1", "--no-tenant", "--db", db_url]
    decided = run_cli("proposals", "decide", pid, "--approve", "--by", "bob", *scope)
    assert decided.exit_code == 0, decided.stderr
    approved_at = time.monotonic()
    claimed = worker.line(pid)
    waited = time.monotonic() - approved_at
    assert "-> settled" in claimed and waited < 5, (claimed, waited)


@pytest.mark.slow  # runs the example worker as a process
def test_work_queued_without_a_notification_is_claimed_by_polling(
    store: ActionProposalStore, worker_on: Any, engine: Any, dialect: str
) -> None:
    only_postgresql(dialect)
    pid = pending(store, "c1")
    worker = worker_on("--poll", "0.5")
    assert "listening" in worker.line("waiting for work")
    time.sleep(0.5)
    with engine.begin() as conn:  # queued by a writer that sends no notification
        conn.execute(
            update(action_proposal)
            .where(action_proposal.c.id == pid)
            .values(
                decision="approved",
                decided_by="bob",
                execution_state="queued",
                discovery_state="queued",
                discovery_at=0,
                version=action_proposal.c.version + 1,
            )
        )
    assert "-> settled" in worker.line(pid)
