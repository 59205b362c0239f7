"""agora on a three-node MariaDB Galera cluster: every node takes writes (tests/galera/cluster.py).

Provisioning from every node at once, workers on every node claiming a shared queue, opposite
decisions through two nodes, frames written through one node and tailed through another, the
demo and spend on different nodes. No certification failure may reach a caller.

``AGORA_TEST_GALERA_CLAIMS`` (default 5000) and ``AGORA_TEST_GALERA_ROUNDS`` (default 10) size
the two largest tests.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
import textwrap
import threading
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from helpers import run_agora

pytestmark = pytest.mark.slow

AGORA = str(Path(sys.executable).with_name("agora"))
CLAIMS = int(os.environ.get("AGORA_TEST_GALERA_CLAIMS", "5000"))
ROUNDS = int(os.environ.get("AGORA_TEST_GALERA_ROUNDS", "10"))
LEASE_MS = 600_000


def node_urls(galera_nodes: list[str], name: str) -> list[str]:
    from helpers import with_database

    return [with_database(url, name) for url in galera_nodes]


def fresh_database(galera_nodes: list[str]) -> list[str]:
    from helpers import unique_name

    from agora_cli.store._engine import open_engine

    name = unique_name("agora_g")
    admin = open_engine(galera_nodes[0], isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    admin.dispose()
    return node_urls(galera_nodes, name)


def drop_database(galera_nodes: list[str], url: str) -> None:
    from sqlalchemy.engine import make_url

    from agora_cli.store._engine import open_engine

    admin = open_engine(galera_nodes[0], isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{make_url(url).database}`")
    admin.dispose()


# --- provisioning through every node at once ---------------------------------------------------


def test_provisioning_through_three_nodes_at_once_converges(galera_nodes: list[str]) -> None:
    """GET_LOCK is node-local: three `agora db provision` processes, one per node, run their DDL
    at once, ROUNDS times on a new database; every one succeeds, and every node checks clean."""
    from agora_cli.store._engine import open_engine
    from agora_cli.store._provision import check_agent_tables

    failures: list[str] = []
    for round_ in range(ROUNDS):
        urls = fresh_database(galera_nodes)
        try:
            procs = [
                subprocess.Popen(
                    [AGORA, "db", "provision", "--db", url, "--json"],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for url in urls
            ]
            for url, proc in zip(urls, procs, strict=True):
                _, err = proc.communicate(timeout=180)
                if proc.returncode != 0:
                    failures.append(f"round {round_} {url}: exit {proc.returncode}: {err.strip()}")
            for url in urls:
                engine = open_engine(url)
                problems = check_agent_tables(engine)
                engine.dispose()
                if problems:
                    failures.append(f"round {round_} {url}: {problems}")
            if round_ == ROUNDS - 1:  # the real `db check` too, on every node
                for url in urls:
                    checked = run_agora("db", "check", "--db", url, "--json")
                    assert checked.exit_code == 0, checked.stdout + checked.stderr
                    assert checked.json()["ok"] is True
        finally:
            drop_database(galera_nodes, urls[0])
    assert failures == []


# --- six workers over three nodes ------------------------------------------------------------


def load_queue(url: str, n: int) -> None:
    """``n`` approved proposals whose work is queued, in one thread."""
    from agora_cli.store._engine import open_engine
    from agora_cli.store._schema import action_proposal, thread

    engine = open_engine(url)
    with engine.begin() as conn:
        conn.execute(
            thread.insert().values(
                id="t", actor_ref="a", tenant_ref=None, title="queue", created_at=0, updated_at=0
            )
        )
    rows = [
        {
            "id": f"p{i:07d}",
            "idempotency_key": f"k{i:07d}",
            "tenant_ref": None,
            "actor_ref": "a",
            "thread_id": "t",
            "tool_name": "refund",
            "input": f'{{"order":{i}}}',
            "decision": "approved",
            "decided_by": "bob",
            "decided_at": 1000 + i,
            "execution_state": "queued",
            "generation": 0,
            "attempts": 0,
            "version": 1,
            "created_at": i,
            "updated_at": 1000 + i,
            "discovery_state": "queued",
            "discovery_at": 1000 + i,
        }
        for i in range(n)
    ]
    for start in range(0, n, 1000):  # Galera: keep each write set small
        with engine.begin() as conn:
            conn.execute(action_proposal.insert(), rows[start : start + 1000])
    engine.dispose()


def claim_worker(url: str, name: str, start: Any, out: Any) -> None:
    """Claim and settle until nothing is due; report what it claimed and any exception."""
    from agora_cli.store._engine import open_engine, retry_stats
    from agora_cli.store._proposals import ActionProposalStore

    claimed: list[str] = []
    lost: list[str] = []
    error = None
    try:
        store = ActionProposalStore(open_engine(url, pool_size=1))
        start.wait()
        while True:
            got = store.claim_next(name, LEASE_MS)
            if got.lease is None or got.work is None:
                break
            claimed.append(got.work.id)
            settled = store.settle(
                got.work.id, got.lease.token, got.lease.generation, "succeeded", {"by": name}
            )
            if settled.outcome != "settled":
                lost.append(got.work.id)
    except BaseException:
        error = traceback.format_exc()
    out.put((name, claimed, lost, error, retry_stats().retried))


def test_six_workers_over_three_nodes_claim_each_proposal_exactly_once(
    galera_db: list[str],
) -> None:
    from agora_cli.store._engine import open_engine
    from agora_cli.store._provision import ensure_agent_tables

    engine = open_engine(galera_db[0])
    ensure_agent_tables(engine)
    load_queue(galera_db[0], CLAIMS)
    ctx = mp.get_context("fork")
    start, out = ctx.Event(), ctx.Queue()
    workers = [
        ctx.Process(target=claim_worker, args=(galera_db[i % len(galera_db)], f"w{i}", start, out))
        for i in range(6)
    ]
    for w in workers:
        w.start()
    start.set()
    results = [out.get(timeout=600) for _ in workers]
    for w in workers:
        w.join(timeout=60)
    errors = [f"{name}: {error}" for name, _, _, error, _ in results if error]
    assert errors == []  # no certification failure (or anything else) reached a worker
    claimed = Counter(pid for _, ids, _, _, _ in results for pid in ids)
    assert len(claimed) == CLAIMS
    assert max(claimed.values()) == 1  # each exactly once
    # A claim that lost certification never surfaced a lease: every lease settled.
    assert [pid for _, _, lost, _, _ in results for pid in lost] == []
    assert all(ids for _, ids, _, _, _ in results), "every worker claimed something"
    for url in galera_db:  # every node agrees that everything was done, once
        node = open_engine(url)
        with node.connect() as conn:
            states = dict(
                conn.exec_driver_sql(
                    "SELECT execution_state, COUNT(*) FROM agent_action_proposal "
                    "GROUP BY execution_state"
                ).all()
            )
            generations = conn.exec_driver_sql(
                "SELECT MAX(generation) FROM agent_action_proposal"
            ).scalar()
        node.dispose()
        assert states == {"succeeded": CLAIMS}, (url, states)
        assert generations == 1, url
    engine.dispose()


# --- opposite decisions through two nodes -------------------------------------------------------


def decide(
    store: Any, pid: str, scope: Any, decision: str, barrier: Any, outcomes: dict[str, Any]
) -> None:
    barrier.wait()
    try:
        outcomes[decision] = store.decide(pid, scope, decision, f"{decision}-er").outcome
    except Exception as exc:  # recorded: the assertion names it
        outcomes[decision] = repr(exc)


def test_opposite_decisions_on_two_nodes_one_applied_one_conflict(galera_db: list[str]) -> None:
    """Approve through node 1 and reject through node 2 at the same moment, 20 times: one is
    applied, the other answers conflict (never an error), and every node shows the winner."""
    from agora_cli.store._engine import open_engine
    from agora_cli.store._proposals import ActionProposalStore, NewProposal, Scope
    from agora_cli.store._provision import ensure_agent_tables
    from agora_cli.store._schema import thread

    ensure_agent_tables(open_engine(galera_db[0]))
    engines = [open_engine(url) for url in galera_db]
    with engines[0].begin() as conn:
        conn.execute(
            thread.insert().values(
                id="t", actor_ref="a", tenant_ref=None, title="d", created_at=0, updated_at=0
            )
        )
    scope = Scope(None, "a", "t")
    stores = [ActionProposalStore(e) for e in engines]
    ids = [
        stores[0].create(NewProposal(scope, "refund", {"n": i}, id=f"prop-{i}")).proposal.id
        for i in range(20)
    ]
    for pid in ids:
        barrier = threading.Barrier(2)
        outcomes: dict[str, Any] = {}
        threads = [
            threading.Thread(
                target=decide, args=(stores[0], pid, scope, "approved", barrier, outcomes)
            ),
            threading.Thread(
                target=decide, args=(stores[1], pid, scope, "rejected", barrier, outcomes)
            ),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcomes.values()) == ["applied", "conflict"], outcomes
        winner = next(d for d, o in outcomes.items() if o == "applied")
        for store in stores:  # causal reads: every node shows the winner at once
            assert store.get(pid, scope).decision == winner
    for e in engines:
        e.dispose()


# --- frames written through node 1, tailed through node 3 ---------------------------------------

WRITER = textwrap.dedent(
    """
    import os, sys, time
    from agora_cli.store._engine import open_engine
    from agora_cli.store._frames import FrameWriter

    url, run_id, words, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    w = FrameWriter(open_engine(url), run_id, flush_ms=20, auto_purge=False)
    w.append({"type": "start"})
    w.flush()
    deadline = time.monotonic() + 60
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.01)
    for i in range(words):
        w.append({"type": "text-delta", "delta": f"w{i} "})
        if i % 10 == 0:
            w.flush()  # many small commits: each one must reach the other node's reader
        time.sleep(0.005)
    w.end()
    """
)


def test_frames_tail_on_node_3_sees_every_frame_of_a_writer_on_node_1(
    galera_db: list[str], tmp_path: Path
) -> None:
    from agora_cli.store._engine import open_engine
    from agora_cli.store._provision import ensure_agent_tables

    ensure_agent_tables(open_engine(galera_db[0]))
    go = tmp_path / "go"
    words = 300
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, galera_db[0], "run-g", str(words), str(go)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    reader_engine = open_engine(galera_db[-1])
    deadline = time.monotonic() + 60
    while True:  # the first frame is on node 3 (causal read) before the tail starts
        with reader_engine.connect() as conn:
            n = conn.exec_driver_sql(
                "SELECT COUNT(*) FROM agent_stream_frame WHERE run_id = 'run-g'"
            ).scalar()
        if n:
            break
        assert writer.poll() is None, writer.communicate()
        assert time.monotonic() < deadline, "the writer wrote nothing"
        time.sleep(0.02)
    reader_engine.dispose()
    tail = subprocess.Popen(
        [AGORA, "frames", "tail", "run-g", "--follow", "--poll-ms", "20", "--json",
         "--db", galera_db[-1]],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert tail.stdout is not None
    first = tail.stdout.readline()
    assert json.loads(first)["frame"] == {"type": "start"}
    go.touch()
    out, err = tail.communicate(timeout=120)
    assert writer.wait(timeout=60) == 0, writer.communicate()
    assert tail.returncode == 0, err
    lines = [json.loads(line) for line in (first + out).splitlines()]
    assert [doc["seq"] for doc in lines] == list(range(1, len(lines) + 1))  # no gap
    assert lines[-1]["frame"] is None  # the end marker
    text = "".join(d["frame"]["delta"] for d in lines[:-1] if d["frame"]["type"] == "text-delta")
    assert text == "".join(f"w{i} " for i in range(words))


# --- the demo through one node, spend through the others --------------------------------------


def test_demo_then_spend_on_different_nodes_agree(galera_db: list[str]) -> None:
    demo = run_agora("demo", "--db", galera_db[0], "--json", timeout=300)
    assert demo.exit_code == 0, demo.stderr
    docs = []
    for url in galera_db:
        spent = run_agora("spend", "--by", "model", "--db", url, "--json")
        assert spent.exit_code == 0, spent.stderr
        docs.append(spent.json())
    assert docs[0]["rows"] and docs[0]["total"]  # the demo's ledger, not an empty report
    assert all(doc == docs[0] for doc in docs[1:])


# --- the cluster as agora reports it ---------------------------------------------------------


def test_db_status_and_check_on_a_cluster_node(galera_db: list[str]) -> None:
    from agora_cli.store._engine import open_engine

    assert run_agora("db", "provision", "--db", galera_db[1]).exit_code == 0
    status = run_agora("db", "status", "--db", galera_db[1], "--json")
    assert status.exit_code == 0, status.stderr
    cluster = status.json()["cluster"]
    assert cluster["kind"] == "galera" and cluster["nodes"] == len(galera_db)
    assert cluster["synced"] is True and cluster["state"] == "Synced"
    assert cluster["summary"] == f"Galera cluster, {len(galera_db)} nodes, this node synced"
    text = run_agora("db", "status", "--db", galera_db[1])
    assert f"Galera cluster, {len(galera_db)} nodes, this node synced" in text.stdout
    # What Galera cannot replicate, in any table of the database: refused by `db check`.
    engine = open_engine(galera_db[0])
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE side_notes (note VARCHAR(20)) ENGINE=InnoDB")
        conn.exec_driver_sql("CREATE TABLE side_cache (k INT PRIMARY KEY) ENGINE=MEMORY")
    engine.dispose()
    checked = run_agora("db", "check", "--db", galera_db[2], "--json")
    assert checked.exit_code == 1
    found = {(p["kind"], p["table"]) for p in checked.json()["problems"]}
    assert found == {("no_primary_key", "side_notes"), ("wrong_engine", "side_cache")}
