"""agora through PgBouncer (tests/pgbouncer/pooler.py): transaction and session pooling.

The smoke tests run the real ``agora`` (a subprocess) through each pooler. The workload tests
were issue 27's reproduction (psycopg's server-side prepares broke them at once): workers
claiming and settling approved proposals through a transaction-mode pooler, where the next
transaction of a client connection may run on another server connection.
``AGORA_TEST_PGBOUNCER_CYCLES`` (default 40) is each worker's number of claim + settle cycles;
the 6-worker drain takes ``AGORA_TEST_FAILOVER_N`` (default 5,000) proposals.
"""

from __future__ import annotations

import os
import re
import threading
import traceback
from collections import Counter

import pytest
from helpers import run_agora
from workload import Workload, queue_approved, start_workers, states, stop_workers, wait_for

pytestmark = [pytest.mark.pgbouncer, pytest.mark.slow]  # subprocesses, threads, PostgreSQL

WORKERS = 3
CYCLES = int(os.environ.get("AGORA_TEST_PGBOUNCER_CYCLES", "40"))
LEASE_MS = 600_000


@pytest.mark.parametrize("mode", ["transaction", "session"])
def test_provision_and_demo_through_the_pooler(pooled_db: dict[str, str], mode: str) -> None:
    url = pooled_db[mode]
    provisioned = run_agora("db", "provision", "--db", url)
    assert provisioned.exit_code == 0, provisioned.stdout + provisioned.stderr
    checked = run_agora("db", "check", "--db", url, "--json")
    assert checked.exit_code == 0, checked.stdout + checked.stderr
    assert checked.json()["ok"] is True
    demo = run_agora("demo", "--db", url, "--json", timeout=300)
    assert demo.exit_code == 0, demo.stdout + demo.stderr
    spent = run_agora("spend", "--by", "model", "--db", url, "--json")
    assert spent.exit_code == 0, spent.stderr
    assert spent.json()["rows"]  # the demo's ledger, read back through the pooler


def run_workers(url: str, workers: int, cycles: int) -> tuple[list[str], list[str]]:
    """``workers`` threads, each with its own engine, each ``cycles`` claim + settle cycles: the
    ids settled (one entry per settle that reported ``settled``) and every error raised."""
    from agora_cli.store import ActionProposalStore, open_engine

    settled: list[str] = []
    errors: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(workers)

    def work(n: int) -> None:
        engine = open_engine(url)
        store = ActionProposalStore(engine)
        try:
            start.wait()
            for _ in range(cycles):
                try:
                    got = store.claim_next(f"w{n}", LEASE_MS)
                    if got.work is None or got.lease is None:
                        return
                    done = store.settle(
                        got.work.id, got.lease.token, got.lease.generation, "succeeded", {"ok": 1}
                    )
                except Exception as exc:
                    with lock:
                        errors.append(f"{type(exc).__module__}.{type(exc).__name__}: {exc}")
                    continue
                if done.outcome == "settled":
                    with lock:
                        settled.append(got.work.id)
        except Exception:
            with lock:
                errors.append(traceback.format_exc())
        finally:
            engine.dispose()

    threads = [threading.Thread(target=work, args=(n,)) for n in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return settled, errors


def error_summary(errors: list[str]) -> str:
    """How many errors of each kind (the driver's class where SQLAlchemy wrapped one), and the
    first in full."""
    kinds: Counter[str] = Counter()
    for e in errors:
        driver = re.search(r"\((psycopg[\w.]*)\)", e)
        kinds[driver.group(1) if driver else e.split(":", 1)[0]] += 1
    listed = ", ".join(f"{n} × {k}" for k, n in kinds.most_common())
    return f"{len(errors)} errors ({listed}); the first: {errors[0] if errors else ''}"


def test_workers_claim_and_settle_through_the_session_pooler(pooled_db: dict[str, str]) -> None:
    """Session pooling keeps a server connection per client: the workload runs clean."""
    ids = queue_approved(pooled_db["direct"], WORKERS * CYCLES)
    settled, errors = run_workers(pooled_db["session"], WORKERS, CYCLES)
    assert errors == [], error_summary(errors)
    assert sorted(settled) == sorted(ids)
    assert states(pooled_db["direct"]) == Counter({"succeeded": len(ids)})


def test_workers_claim_and_settle_through_the_transaction_pooler(
    pooled_db: dict[str, str],
) -> None:
    """Issue 27's reproduction: 3 workers, each CYCLES claim + settle cycles through PgBouncer in
    transaction mode (3 server connections shared by all): no error reaches a worker, every
    proposal is settled exactly once and ends ``succeeded``."""
    ids = queue_approved(pooled_db["direct"], WORKERS * CYCLES)
    settled, errors = run_workers(pooled_db["transaction"], WORKERS, CYCLES)
    assert errors == [], error_summary(errors)
    assert sorted(settled) == sorted(ids)
    assert states(pooled_db["direct"]) == Counter({"succeeded": len(ids)})


def test_six_workers_drain_5000_proposals_through_the_transaction_pooler(
    pooled_db: dict[str, str],
) -> None:
    """Issue 27's workload through PgBouncer in transaction mode (3 server connections for 6
    workers): every proposal settled exactly once, zero errors of any kind."""
    n = int(os.environ.get("AGORA_TEST_FAILOVER_N", "5000"))
    queue_approved(pooled_db["transaction"], n)
    w = Workload()
    threads = start_workers(pooled_db["transaction"], w, 6)
    try:
        wait_for(w, n, 600)
    finally:
        stop_workers(w, threads)
    assert w.foreign == [] and not w.agora_errors, (w.foreign[:1], w.agora_errors)
    assert sorted(w.settled.values()) == [1] * n
    assert states(pooled_db["direct"]) == Counter({"succeeded": n})
