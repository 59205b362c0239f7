"""Issue 27's cluster workload: 6 workers claiming and settling 5,000 approved proposals through
libpq's multi-host URL while the test runs ``patronictl switchover`` and then kills the primary's
postmaster (``kill -9``; its Patroni restarts it in place).

What must hold: every proposal ends ``succeeded`` and was settled exactly once (one ``settled``
answer over all workers); no exception other than agora's reaches a worker; nothing stays
``running`` when the test ends. ``AGORA_TEST_FAILOVER_N`` (default 5,000) sets the count.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import patroni_cluster as cluster  # tests/patroni/cluster.py, loaded by this folder's conftest
import pytest

if TYPE_CHECKING:
    from conftest import PatroniDb

pytestmark = [pytest.mark.patroni, pytest.mark.slow]

N = int(os.environ.get("AGORA_TEST_FAILOVER_N", "5000"))
WORKERS = 6
# Longer than a switchover or a restart in place takes: a claim whose answer was lost with its
# connection is claimed again once its lease expires (the only way work runs twice).
LEASE_MS = 15_000
DEADLINE_S = 600


def queue_approved(url: str, n: int) -> None:
    from agora_cli.store import (
        ActionProposalStore,
        NewProposal,
        Scope,
        ensure_agent_tables,
        metadata,
        open_engine,
    )

    engine = open_engine(url)
    try:
        ensure_agent_tables(engine)
        with engine.begin() as conn:
            conn.execute(
                metadata.tables["agent_thread"]
                .insert()
                .values(id="t1", actor_ref="alice", title="t", created_at=0, updated_at=0)
            )
        store = ActionProposalStore(engine)
        scope = Scope(None, "alice", "t1")

        def one(i: int) -> None:
            new = NewProposal(scope, "refund", {"i": i}, run_id="r", tool_call_id=f"c{i}")
            pid = store.create(new).proposal.id
            assert store.decide(pid, scope, "approved", "bob").outcome == "applied"

        with ThreadPoolExecutor(WORKERS) as pool:
            list(pool.map(one, range(n)))
    finally:
        engine.dispose()


def states(url: str) -> Counter[str]:
    from sqlalchemy import select

    from agora_cli.store import metadata, open_engine

    table = metadata.tables["agent_action_proposal"]
    engine = open_engine(url)
    try:
        with engine.connect() as conn:
            return Counter(str(s) for s in conn.execute(select(table.c.execution_state)).scalars())
    finally:
        engine.dispose()


class Workload:
    """The workers' shared record: settles per proposal, errors by kind, progress."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.settled: Counter[str] = Counter()
        self.claims = 0
        self.agora_errors: Counter[str] = Counter()
        self.foreign: list[str] = []  # any other exception: the test fails on one
        self.stop = threading.Event()

    def done(self) -> int:
        with self.lock:
            return len(self.settled)


def worker(url: str, name: str, w: Workload) -> None:
    from agora_cli.store import ActionProposalStore, AgoraError, open_engine

    engine = open_engine(url, check=False)
    store = ActionProposalStore(engine)
    try:
        while not w.stop.is_set():
            try:
                claim = store.claim_next(name, LEASE_MS)
                if claim.outcome == "none":
                    time.sleep(0.05)
                    continue
                assert claim.work is not None and claim.lease is not None
                with w.lock:
                    w.claims += 1
                lease = claim.lease
                result = store.settle(
                    claim.work.id, lease.token, lease.generation, "succeeded", {"by": name}
                )
                if result.outcome == "settled":
                    with w.lock:
                        w.settled[claim.work.id] += 1
            except AgoraError as exc:
                with w.lock:
                    w.agora_errors[type(exc).__name__] += 1
                time.sleep(0.2)
            except Exception:
                with w.lock:
                    w.foreign.append(traceback.format_exc(limit=3))
                time.sleep(0.2)
    finally:
        engine.dispose()


def wait_for(w: Workload, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while w.done() < count:
        assert time.monotonic() < deadline, f"only {w.done()} of {count} settled in time"
        assert not w.foreign, w.foreign[0]
        time.sleep(0.1)


def test_six_workers_through_a_switchover_and_a_primary_kill(patroni_db: PatroniDb) -> None:
    url = patroni_db.libpq_url  # libpq's multi-host form, target_session_attrs=read-write
    queue_approved(url, N)
    w = Workload()
    threads = [
        threading.Thread(target=worker, args=(url, f"w{i}", w), daemon=True) for i in range(WORKERS)
    ]
    for t in threads:
        t.start()
    events: dict[str, Any] = {}
    try:
        wait_for(w, N // 4, DEADLINE_S)
        events["switchover"] = cluster.switchover()
        wait_for(w, min(N, w.done() + N // 4), DEADLINE_S)
        events["kill"] = cluster.kill_primary()
        wait_for(w, N, DEADLINE_S)
    finally:
        w.stop.set()
        for t in threads:
            t.join(60)
    assert w.foreign == [], "\n".join(w.foreign[:3])
    twice = {pid: n for pid, n in w.settled.items() if n != 1}
    assert twice == {}, f"settled more than once: {list(twice.items())[:5]}"
    assert len(w.settled) == N
    assert states(url) == Counter({"succeeded": N})  # none left running
    assert events["switchover"][1] != events["switchover"][2]
    cluster.wait_healthy(120)
