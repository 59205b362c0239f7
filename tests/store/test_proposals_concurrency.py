"""Proposals under real concurrency: worker processes, racing deciders, a killed backfill.

Every worker here is a separate Python process (``python -c``) using the library as a runtime
would; they wait for one "go" so that they really overlap.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from helpers import snapshot
from sqlalchemy import func, select

from agora_cli.store._proposals import ActionProposalStore, NewProposal, Scope
from agora_cli.store._schema import action_proposal, thread

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ALICE = Scope(None, "alice", "t1")

PRELUDE = r"""
import json, sys, time
from sqlalchemy import event
from agora_cli.store._engine import open_engine
from agora_cli.store._proposals import ActionProposalStore, Scope, backfill_discovery_index

url = sys.argv[1]
engine = open_engine(url, check=False)
if engine.dialect.name == "sqlite":
    # Durability is not under test here; without fsync per commit the run stays short.
    @event.listens_for(engine, "connect")
    def _no_fsync(dbapi_conn, _record):
        dbapi_conn.execute("PRAGMA synchronous=OFF")
store = ActionProposalStore(engine)
print("ready", flush=True)
sys.stdin.readline()
"""

CLAIM_WORKER = (
    PRELUDE
    + r"""
claimed = []
while True:
    got = store.claim_next(sys.argv[2], 600_000)
    if got.work is None:
        break
    claimed.append(got.work.id)
print(json.dumps(claimed), flush=True)
"""
)

DECIDE_WORKER = (
    PRELUDE
    + r"""
scope = Scope(None, "alice", "t1")
outcomes = [store.decide(pid, scope, sys.argv[2], sys.argv[3]).outcome for pid in sys.argv[4:]]
print(json.dumps(outcomes), flush=True)
"""
)

CREATE_WORKER = (
    PRELUDE
    + r"""
from agora_cli.store._proposals import NewProposal
scope = Scope(None, "alice", "t1")
outcomes = []
for i in range(int(sys.argv[2])):
    new = NewProposal(scope, "refund", {"order": i}, run_id="r", tool_call_id=f"c{i}")
    outcomes.append(store.create(new).outcome)
print(json.dumps(outcomes), flush=True)
"""
)

BACKFILL_WORKER = (
    PRELUDE
    + r"""
limit, pause = int(sys.argv[2]), float(sys.argv[3])
while True:
    with engine.begin() as conn:
        result = backfill_discovery_index(conn, limit=limit)
        print(result.backfilled, result.remaining, flush=True)
        time.sleep(pause)  # inside the transaction: a kill lands mid-batch
    if result.remaining == 0 or result.backfilled == 0:
        break
"""
)


def start(code: str, *args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line == "ready\n", line + (proc.stderr.read() if proc.stderr else "")
    return proc


def go(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()


def finish(proc: subprocess.Popen[str]) -> Any:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(out.splitlines()[-1])


def add_thread(engine: Any) -> None:
    with engine.begin() as conn:
        conn.execute(
            thread.insert().values(
                id="t1", actor_ref="alice", tenant_ref=None, title="t", created_at=0, updated_at=0
            )
        )


# Legacy rows (discovery columns NULL, as an older writer leaves them), one per state.
LEGACY_STATES: list[dict[str, Any]] = [
    {"decision": "pending", "expires_at": 10},
    {"decision": "pending", "expires_at": None},
    {"decision": "approved", "decided_at": 5, "execution_state": "queued"},
    {"decision": "approved", "decided_at": 5, "execution_state": None},
    {"decision": "approved", "decided_at": 5, "execution_state": "running", "lease_expires_at": 9},
    {"decision": "approved", "decided_at": 5, "execution_state": "succeeded", "settled_at": 7},
    {"decision": "rejected", "decided_at": 5},
    {"decision": "expired"},
]


def legacy_rows(n: int) -> list[dict[str, Any]]:
    rows = []
    for i in range(n):
        for j, state in enumerate(LEGACY_STATES):
            row = {c.name: None for c in action_proposal.columns if c.name != "tenant_key"}
            row.update(
                id=f"legacy-{i:04d}-{j}",
                idempotency_key=f"key-{i:04d}-{j}",
                actor_ref="alice",
                thread_id="t1",
                tool_name="refund",
                input=f'{{ "order" : {i} }}',
                card='{"title": "☃"}',
                decided_by="bob" if state.get("decided_at") else None,
                generation=0,
                attempts=0,
                version=3,
                created_at=i,
                updated_at=i + 1,
                **state,
            )
            rows.append(row)
    return rows


def insert_legacy(engine: Any, rows: list[dict[str, Any]]) -> None:
    with engine.begin() as conn:
        conn.execute(action_proposal.insert(), rows)


def queued_rows(n: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"p{i:05d}",
            "idempotency_key": f"k{i:05d}",
            "tenant_ref": None,
            "actor_ref": "alice",
            "thread_id": "t1",
            "tool_name": "refund",
            "input": "{}",
            "decision": "approved",
            "decided_by": "bob",
            "decided_at": i,
            "execution_state": "queued",
            "generation": 0,
            "attempts": 0,
            "version": 1,
            "created_at": i,
            "updated_at": i,
            "discovery_state": "queued",
            "discovery_at": i,
        }
        for i in range(n)
    ]


def test_eight_worker_processes_claim_each_proposal_exactly_once(engine: Any, db_url: str) -> None:
    add_thread(engine)
    with engine.begin() as conn:
        conn.execute(action_proposal.insert(), queued_rows(2000))
    workers = [start(CLAIM_WORKER, db_url, f"w{i}") for i in range(8)]
    go(workers)
    claimed = [finish(w) for w in workers]
    counts = Counter(pid for ids in claimed for pid in ids)
    assert sum(counts.values()) == 2000
    assert len(counts) == 2000
    assert max(counts.values()) == 1
    assert sum(1 for ids in claimed if ids) >= 2  # they really ran side by side
    with engine.connect() as conn:
        states = conn.execute(
            select(
                action_proposal.c.execution_state,
                action_proposal.c.generation,
                action_proposal.c.attempts,
                func.count(),
            ).group_by(
                action_proposal.c.execution_state,
                action_proposal.c.generation,
                action_proposal.c.attempts,
            )
        ).all()
    assert [tuple(s) for s in states] == [("running", 1, 1, 2000)]


def test_two_processes_racing_opposite_decisions_apply_exactly_one(
    engine: Any, db_url: str
) -> None:
    add_thread(engine)
    store = ActionProposalStore(engine)
    ids = [
        store.create(
            NewProposal(ALICE, "refund", {"order": i}, run_id="r", tool_call_id=f"c{i}")
        ).proposal.id
        for i in range(40)
    ]
    approver = start(DECIDE_WORKER, db_url, "approved", "bob", *ids)
    rejecter = start(DECIDE_WORKER, db_url, "rejected", "carol", *ids)
    go([approver, rejecter])
    approvals, rejections = finish(approver), finish(rejecter)
    for pid, a, r in zip(ids, approvals, rejections, strict=True):
        assert sorted([a, r]) == ["applied", "conflict"], (pid, a, r)
        row = store.get(pid, ALICE)
        winner = ("approved", "bob") if a == "applied" else ("rejected", "carol")
        assert (row.decision, row.decided_by, row.version) == (*winner, 1)
        assert row.discovery_state == ("queued" if a == "applied" else "done")


def test_processes_creating_the_same_proposals_create_each_once(engine: Any, db_url: str) -> None:
    add_thread(engine)
    creators = [start(CREATE_WORKER, db_url, "40") for _ in range(3)]
    go(creators)
    outcomes = [finish(c) for c in creators]
    for i in range(40):
        assert sorted(o[i] for o in outcomes) == ["created", "existing", "existing"], i
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(action_proposal)).scalar() == 40


def test_a_backfill_killed_mid_run_finishes_when_run_again(engine: Any, db_url: str) -> None:
    add_thread(engine)
    insert_legacy(engine, legacy_rows(300))  # 2,400 rows, every state
    total = 300 * len(LEGACY_STATES)
    before = snapshot(engine)
    worker = start(BACKFILL_WORKER, db_url, "50", "0.05")
    go([worker])
    assert worker.stdout is not None
    for _ in range(3):
        assert worker.stdout.readline()
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait(timeout=30)
    assert worker.returncode == -signal.SIGKILL

    store = ActionProposalStore(engine)
    mid = snapshot(engine)
    filled = [pid for pid, row in mid.items() if row["discovery_state"] is not None]
    assert 0 < len(filled) < total
    assert len(filled) % 50 == 0  # whole batches only: the one in flight rolled back
    while store.backfill(limit=500).remaining:
        pass
    after = snapshot(engine)
    discovery = ("discovery_state", "discovery_at", "version")
    for pid, old in before.items():
        new = after[pid]
        assert new["version"] == old["version"] + 1, pid  # backfilled exactly once
        assert new["discovery_state"] is not None
        assert {k: v for k, v in new.items() if k not in discovery} == {
            k: v for k, v in old.items() if k not in discovery
        }


def test_a_backfill_racing_decisions_never_overwrites_them(engine: Any, db_url: str) -> None:
    add_thread(engine)
    rows = [row for row in legacy_rows(400) if row["id"].endswith("-1")]  # pending, no expiry
    insert_legacy(engine, rows)
    ids = [row["id"] for row in rows]
    decided, left = ids[::2], ids[1::2]
    backfiller = start(BACKFILL_WORKER, db_url, "20", "0")
    decider = start(DECIDE_WORKER, db_url, "approved", "bob", *decided)
    go([backfiller, decider])
    backfiller.communicate(timeout=120)
    assert backfiller.returncode == 0
    assert finish(decider) == ["applied"] * len(decided)
    store = ActionProposalStore(engine)
    assert store.backfill().remaining == 0
    after = snapshot(engine)
    for pid in decided:
        row = after[pid]
        assert (row["decision"], row["decided_by"], row["execution_state"]) == (
            "approved",
            "bob",
            "queued",
        )
        assert (row["discovery_state"], row["discovery_at"]) == ("queued", row["decided_at"])
        assert row["version"] in (4, 5)  # decided then skipped, or backfilled then decided
    for pid in left:
        row = after[pid]
        assert (row["decision"], row["discovery_state"], row["version"]) == (
            "pending",
            "pending",
            4,
        )


BATCH_WORKER = (
    PRELUDE
    + r"""
from agora_cli.store._proposals import Settlement
claimed, recovered, lost = [], [], 0
k = int(sys.argv[3])
step = len(sys.argv) > 4 and sys.argv[4] == "step"
if step:  # a worker's store: its connection held, the settle and the next claim one step
    store = ActionProposalStore(engine, hold_connection=True)
batch = store.claim_next(sys.argv[2], 600_000, limit=k)
while batch:
    claimed += [c.work.id for c in batch]
    recovered += [c.work.id for c in batch if c.outcome == "recovered"]
    done = [Settlement(c.work.id, c.lease.token, c.lease.generation, "succeeded", {"ok": True})
            for c in batch]
    if step:
        settled, batch = store.settle_many_and_claim_next(done, sys.argv[2], 600_000, k)
    else:
        settled = store.settle_many(done)
        batch = store.claim_next(sys.argv[2], 600_000, limit=k)
    lost += sum(r.outcome == "lost" for r in settled)
print(json.dumps({"claimed": claimed, "recovered": recovered, "lost": lost}), flush=True)
"""
)


@pytest.mark.parametrize("loop", ["claim-settle", "step"])
def test_eight_workers_claiming_batches_of_seven_run_each_proposal_once(
    engine: Any, db_url: str, loop: str
) -> None:
    """``claim-settle``: ``claim_next(limit=7)`` then ``settle_many``, a store per step;
    ``step``: held connections, each batch settled with the next claim
    (``settle_many_and_claim_next``)."""
    add_thread(engine)
    with engine.begin() as conn:
        conn.execute(action_proposal.insert(), queued_rows(2000))
    workers = [start(BATCH_WORKER, db_url, f"w{i}", "7", loop) for i in range(8)]
    go(workers)
    results = [finish(w) for w in workers]
    counts = Counter(pid for r in results for pid in r["claimed"])
    assert sum(counts.values()) == 2000 and len(counts) == 2000
    assert max(counts.values()) == 1
    assert sum(r["lost"] for r in results) == 0
    assert sum(1 for r in results if r["claimed"]) >= 2
    with engine.connect() as conn:
        states = conn.execute(
            select(
                action_proposal.c.execution_state, action_proposal.c.generation, func.count()
            ).group_by(action_proposal.c.execution_state, action_proposal.c.generation)
        ).all()
    assert [tuple(s) for s in states] == [("succeeded", 1, 2000)]


HOLDER_WORKER = (
    PRELUDE
    + r"""
from agora_cli.store._proposals import Settlement
worker, k, short_ms, long_ms = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
short = store.claim_next(worker, short_ms, limit=k)
long = store.claim_next(worker, long_ms, limit=k)
print(json.dumps({"short": [c.work.id for c in short], "long": [c.work.id for c in long]}),
      flush=True)
sys.stdin.readline()  # settle now: the short leases have expired by then
mixed = [c for pair in zip(short, long) for c in pair]
done = [Settlement(c.work.id, c.lease.token, c.lease.generation, "succeeded", {"by": worker})
        for c in mixed]
print(json.dumps({c.work.id: r.outcome for c, r in zip(mixed, store.settle_many(done))}),
      flush=True)
"""
)


def read_json_line(proc: subprocess.Popen[str]) -> Any:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, proc.stderr.read() if proc.stderr else ""
    return json.loads(line)


def states_by_id(engine: Any) -> dict[str, tuple[Any, ...]]:
    cols = action_proposal.c
    with engine.connect() as conn:
        rows = conn.execute(
            select(
                cols.id,
                cols.execution_state,
                cols.generation,
                cols.attempts,
                cols.idempotency_key,
                cols.lease_owner,
                cols.result,
            )
        ).all()
    return {row[0]: tuple(row[1:]) for row in rows}


def test_stale_leases_inside_batch_settles_are_lost_while_the_rest_settle(
    engine: Any, db_url: str
) -> None:
    """Four holders each settle one batch mixing expired leases (recovered meanwhile by four
    other processes) with live ones: exactly the expired items are lost, the others settle."""
    add_thread(engine)
    with engine.begin() as conn:
        conn.execute(action_proposal.insert(), queued_rows(400))
    workers = [start(BATCH_WORKER, db_url, f"w{i}", "7") for i in range(4)]
    holders = [start(HOLDER_WORKER, db_url, f"h{i}", "7", "1500", "600000") for i in range(4)]
    go(holders)
    claims = [read_json_line(h) for h in holders]
    time.sleep(1.7)  # every short lease has expired
    short = [pid for c in claims for pid in c["short"]]
    long = [pid for c in claims for pid in c["long"]]
    assert len(short) == len(long) == 28 and len(set(short + long)) == 56
    go(workers + holders)  # the holders settle while the workers recover and settle
    results = [finish(w) for w in workers]
    outcomes = [finish(h) for h in holders]
    for claim, outcome in zip(claims, outcomes, strict=True):
        assert {pid: outcome[pid] for pid in claim["short"]} == dict.fromkeys(
            claim["short"], "lost"
        )
        assert {pid: outcome[pid] for pid in claim["long"]} == dict.fromkeys(
            claim["long"], "settled"
        )
    counts = Counter(pid for r in results for pid in r["claimed"])
    assert len(counts) == 400 - 28 and max(counts.values()) == 1
    assert set(counts).isdisjoint(long)
    assert sorted(pid for r in results for pid in r["recovered"]) == sorted(short)
    assert sum(r["lost"] for r in results) == 0
    rows = states_by_id(engine)
    assert {rows[pid][:3] for pid in short} == {("succeeded", 2, 2)}
    assert {rows[pid][:3] for pid in long} == {("succeeded", 1, 1)}
    assert all(json.loads(rows[pid][5]) == {"ok": True} for pid in short)  # the recoverer's
    assert all(json.loads(rows[pid][5])["by"] == rows[pid][4] for pid in long)  # the holder's
    assert {row[0] for row in rows.values()} == {"succeeded"}


HALF_RENEWING_WORKER = (
    PRELUDE
    + r"""
worker, k = sys.argv[2], int(sys.argv[3])
batch = store.claim_next(worker, 1_500, limit=k)
kept = batch[: k // 2]
renewed = [store.renew(c.work.id, c.lease.token, c.lease.generation, 10_000).outcome for c in kept]
assert renewed == ["renewed"] * len(kept), renewed
print(json.dumps({"renewed": [c.work.id for c in kept],
                  "expiring": [c.work.id for c in batch[k // 2:]]}), flush=True)
time.sleep(600)  # stuck in its work until killed
"""
)


def test_a_batch_that_half_expires_is_recovered_half_now_half_later(
    engine: Any, db_url: str
) -> None:
    """A worker claims 8, renews 4 for longer and dies: the other 4 are recovered once, by one
    of four processes, with the next generation and the same key; the 4 renewed stay with the
    dead holder until their own lease runs out, then are recovered too."""
    add_thread(engine)
    with engine.begin() as conn:
        conn.execute(action_proposal.insert(), queued_rows(100))
    keys = {pid: row[3] for pid, row in states_by_id(engine).items()}
    # Every process is started (imported, connected) before the clock matters.
    workers = [start(BATCH_WORKER, db_url, f"w{i}", "7") for i in range(4)]
    late = [start(BATCH_WORKER, db_url, f"late{i}", "7") for i in range(2)]
    holder = start(HALF_RENEWING_WORKER, db_url, "dead", "8")
    go([holder])
    held = read_json_line(holder)
    renewed_at = time.monotonic()
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=30)
    renewed, expiring = held["renewed"], held["expiring"]
    assert len(renewed) == len(expiring) == 4
    time.sleep(1.7)
    go(workers)
    results = [finish(w) for w in workers]
    counts = Counter(pid for r in results for pid in r["claimed"])
    assert len(counts) == 96 and max(counts.values()) == 1
    assert set(counts).isdisjoint(renewed)
    assert sorted(pid for r in results for pid in r["recovered"]) == sorted(expiring)
    rows = states_by_id(engine)
    assert {rows[pid][:3] for pid in expiring} == {("succeeded", 2, 2)}
    assert {(*rows[pid][:3], rows[pid][4]) for pid in renewed} == {("running", 1, 1, "dead")}
    time.sleep(max(0.0, renewed_at + 10.3 - time.monotonic()))
    go(late)
    late_results = [finish(w) for w in late]
    assert sorted(pid for r in late_results for pid in r["claimed"]) == sorted(renewed)
    assert sorted(pid for r in late_results for pid in r["recovered"]) == sorted(renewed)
    rows = states_by_id(engine)
    assert {rows[pid][:3] for pid in renewed} == {("succeeded", 2, 2)}
    assert {row[0] for row in rows.values()} == {"succeeded"}
    assert {pid: row[3] for pid, row in rows.items()} == keys  # the same key across attempts
