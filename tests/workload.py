"""A queue workload over the public store API, for the cluster and pooler tests: approved
proposals queued in parallel, and workers that claim and settle until every one is done,
recording each settle and every exception by kind (agora's, or anything else)."""

from __future__ import annotations

import threading
import time
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

# Longer than a switchover or a restart in place takes: a claim whose answer was lost with its
# connection is claimed again once its lease expires (the only way work runs twice).
DEFAULT_LEASE_MS = 15_000


def queue_approved(url: str, n: int) -> list[str]:
    """Provision ``url``, add alice's thread ``t1`` and ``n`` approved proposals in it (created
    and decided by 6 threads): their ids."""
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

        def one(i: int) -> str:
            new = NewProposal(scope, "refund", {"order": i}, run_id="r", tool_call_id=f"c{i}")
            pid = str(store.create(new).proposal.id)
            assert store.decide(pid, scope, "approved", "bob").outcome == "applied"
            return pid

        with ThreadPoolExecutor(6) as pool:
            return list(pool.map(one, range(n)))
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


def worker(url: str, name: str, w: Workload, lease_ms: int = DEFAULT_LEASE_MS) -> None:
    from agora_cli.store import ActionProposalStore, AgoraError, open_engine

    engine = open_engine(url, check=False)
    store = ActionProposalStore(engine)
    try:
        while not w.stop.is_set():
            try:
                claim = store.claim_next(name, lease_ms)
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
    """Until ``count`` proposals are settled; fails at once on an exception not agora's."""
    deadline = time.monotonic() + timeout
    while w.done() < count:
        assert time.monotonic() < deadline, f"only {w.done()} of {count} settled in time"
        assert not w.foreign, w.foreign[0]
        time.sleep(0.1)


def start_workers(url: str, w: Workload, n: int) -> list[threading.Thread]:
    threads = [
        threading.Thread(target=worker, args=(url, f"w{i}", w), daemon=True) for i in range(n)
    ]
    for t in threads:
        t.start()
    return threads


def stop_workers(w: Workload, threads: list[threading.Thread]) -> None:
    w.stop.set()
    for t in threads:
        t.join(60)
