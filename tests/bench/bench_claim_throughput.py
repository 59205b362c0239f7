"""Benchmark: 4 worker processes claiming and settling queued proposals, library vs bare loop.

For PostgreSQL and MariaDB: the library's ``ActionProposalStore.claim_next`` + ``settle`` against a
bare hand-written ``FOR UPDATE SKIP LOCKED`` loop on the raw driver, over the same freshly loaded
table, in the same run. Prints claims/s, double claims (must be 0) and the ratio (target ≥ 0.7).

    python tests/bench/bench_claim_throughput.py          # 20,000 proposals, 4 workers
    BENCH_CLAIM_N=2000 python tests/bench/bench_claim_throughput.py   # a quick run
"""

from __future__ import annotations

import multiprocessing as mp
import os
import secrets
import sys
import time
from collections import Counter
from typing import Any

from _common import create_database, drop_database

N = int(os.environ.get("BENCH_CLAIM_N", "20000"))
WORKERS = int(os.environ.get("BENCH_CLAIM_WORKERS", "4"))
ROUNDS = int(os.environ.get("BENCH_CLAIM_ROUNDS", "2"))
LEASE_MS = 600_000


def load(url: str, n: int) -> None:
    """Empty the proposals and load ``n`` approved proposals whose work is queued."""
    from agora_cli.store._engine import dialect_name, open_engine
    from agora_cli.store._schema import action_proposal, thread

    engine = open_engine(url)
    with engine.begin() as conn:
        conn.execute(action_proposal.delete())
        conn.execute(thread.delete())
        conn.execute(
            thread.insert().values(
                id="t", actor_ref="a", tenant_ref=None, title="bench", created_at=0, updated_at=0
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
        for start in range(0, n, 5000):
            conn.execute(action_proposal.insert(), rows[start : start + 5000])
    if dialect_name(engine) == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE agent_action_proposal")
    else:
        with engine.connect() as conn:
            conn.exec_driver_sql("ANALYZE TABLE agent_action_proposal")
    engine.dispose()


def library_worker(url: str, worker: str, start: Any, out: Any) -> None:
    from agora_cli.store._engine import open_engine
    from agora_cli.store._proposals import ActionProposalStore

    store = ActionProposalStore(open_engine(url, pool_size=1))
    claimed: list[str] = []
    start.wait()
    while True:
        got = store.claim_next(worker, LEASE_MS)
        if got.lease is None or got.work is None:
            break
        claimed.append(got.work.id)
        settled = store.settle(
            got.work.id, got.lease.token, got.lease.generation, "succeeded", {"ok": True}
        )
        assert settled.outcome == "settled"
    out.put(claimed)


_QUEUED_ONLY = (
    "SELECT id, version FROM agent_action_proposal WHERE discovery_state = 'queued' "
    "AND discovery_at <= %s ORDER BY discovery_at LIMIT 1 FOR UPDATE SKIP LOCKED"
)
_WORK_COLUMNS = "id, version, idempotency_key, tool_name, input, discovery_at"


def _same_work_read(dialect: str) -> str:
    """What ``claim_next`` must do: both due states (queued; running with an expired lease),
    one single-state locking read each, oldest first, with the columns a worker needs."""
    reads = [
        f"SELECT {_WORK_COLUMNS} FROM agent_action_proposal WHERE discovery_state = '{state}' "
        "AND discovery_at <= %s ORDER BY discovery_at LIMIT 1 FOR UPDATE SKIP LOCKED"
        for state in ("queued", "running")
    ]
    if dialect == "postgresql":  # PostgreSQL refuses FOR UPDATE on a UNION member itself
        union = " UNION ALL ".join(f"SELECT * FROM ({r}) AS s{i}" for i, r in enumerate(reads))
    else:
        union = " UNION ALL ".join(f"({r})" for r in reads)
    return f"SELECT * FROM ({union}) AS due ORDER BY discovery_at LIMIT 1"


def bare_worker(url: str, worker: str, start: Any, out: Any) -> None:
    """The hand-written loop: SKIP LOCKED read, claim update, commit; settle update, commit."""
    _bare_loop(url, worker, start, out, same_work=False)


def bare_same_work_worker(url: str, worker: str, start: Any, out: Any) -> None:
    """The hand-written loop doing what the library does: both due states, the work's input."""
    _bare_loop(url, worker, start, out, same_work=True)


def _bare_loop(url: str, worker: str, start: Any, out: Any, *, same_work: bool) -> None:
    from agora_cli.store._engine import normalize_url

    parsed = normalize_url(url)
    if parsed.get_backend_name() == "postgresql":
        import psycopg

        conn: Any = psycopg.connect(
            host=parsed.host, port=parsed.port, user=parsed.username, dbname=parsed.database
        )
    else:
        import pymysql

        conn = pymysql.connect(
            host=parsed.host,
            port=parsed.port or 3306,
            user=parsed.username,
            database=parsed.database,
            charset="utf8mb4",
            autocommit=False,
        )
        with conn.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    read_sql = _same_work_read(parsed.get_backend_name())
    claimed: list[str] = []
    start.wait()
    while True:
        now = int(time.time() * 1000)
        token_hash = secrets.token_hex(32)
        with conn.cursor() as cur:
            if same_work:
                cur.execute(read_sql, (now, now))
            else:
                cur.execute(_QUEUED_ONLY, (now,))
            row = cur.fetchone()
            if row is None:
                conn.commit()
                break
            pid, version = row[0], row[1]
            cur.execute(
                "UPDATE agent_action_proposal SET execution_state = 'running', lease_owner = %s, "
                "lease_token_hash = %s, lease_expires_at = %s, generation = generation + 1, "
                "attempts = attempts + 1, discovery_state = 'running', discovery_at = %s, "
                "updated_at = %s, version = version + 1 WHERE id = %s AND version = %s",
                (worker, token_hash, now + LEASE_MS, now + LEASE_MS, now, pid, version),
            )
        conn.commit()
        claimed.append(pid)
        with conn.cursor() as cur:
            cur.execute(
                "UPDATE agent_action_proposal SET execution_state = 'succeeded', result = %s, "
                "settled_at = %s, lease_token_hash = NULL, lease_expires_at = NULL, "
                "discovery_state = 'done', discovery_at = NULL, updated_at = %s, "
                "version = version + 1 WHERE id = %s AND lease_token_hash = %s "
                "AND generation = 1 AND execution_state = 'running' AND lease_expires_at > %s",
                ('{"ok":true}', now, now, pid, token_hash, now),
            )
        conn.commit()
    conn.close()
    out.put(claimed)


_CLAIM_SQL = (
    "SELECT id, version FROM agent_action_proposal WHERE discovery_state = 'queued' "
    "AND discovery_at <= :now ORDER BY discovery_at LIMIT 1 FOR UPDATE SKIP LOCKED"
)
_TAKE_SQL = (
    "UPDATE agent_action_proposal SET execution_state = 'running', lease_owner = :owner, "
    "lease_token_hash = :hash, lease_expires_at = :exp, generation = generation + 1, "
    "attempts = attempts + 1, discovery_state = 'running', discovery_at = :exp, "
    "updated_at = :now, version = version + 1 WHERE id = :id AND version = :version"
)
_SETTLE_SQL = (
    "UPDATE agent_action_proposal SET execution_state = 'succeeded', result = :result, "
    "settled_at = :now, lease_token_hash = NULL, lease_expires_at = NULL, "
    "discovery_state = 'done', discovery_at = NULL, updated_at = :now, "
    "version = version + 1 WHERE id = :id AND lease_token_hash = :hash "
    "AND generation = 1 AND execution_state = 'running' AND lease_expires_at > :now"
)


def sqlalchemy_worker(url: str, worker: str, start: Any, out: Any) -> None:
    """The same hand-written loop as ``bare_worker``, through ``text()`` on agora's engine."""
    from sqlalchemy import text

    from agora_cli.store._engine import open_engine

    engine = open_engine(url, pool_size=1)
    claim, take, settle = text(_CLAIM_SQL), text(_TAKE_SQL), text(_SETTLE_SQL)
    claimed: list[str] = []
    start.wait()
    while True:
        now = int(time.time() * 1000)
        token_hash = secrets.token_hex(32)
        with engine.begin() as conn:
            row = conn.execute(claim, {"now": now}).first()
            if row is None:
                break
            pid, version = row
            conn.execute(
                take,
                {
                    "owner": worker,
                    "hash": token_hash,
                    "exp": now + LEASE_MS,
                    "now": now,
                    "id": pid,
                    "version": version,
                },
            )
        claimed.append(pid)
        with engine.begin() as conn:
            conn.execute(
                settle, {"result": '{"ok":true}', "now": now, "id": pid, "hash": token_hash}
            )
    out.put(claimed)


def run_workers(target: Any, url: str) -> tuple[float, list[str]]:
    ctx = mp.get_context("spawn")
    start = ctx.Event()
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=(url, f"w{i}", start, out)) for i in range(WORKERS)]
    for proc in procs:
        proc.start()
    time.sleep(2.0)  # let every worker import and connect before the clock starts
    t0 = time.perf_counter()
    start.set()
    claimed: list[str] = []
    for _ in procs:
        claimed.extend(out.get())
    elapsed = time.perf_counter() - t0
    for proc in procs:
        proc.join()
    return elapsed, claimed


def measure(dialect: str) -> None:
    name, url = create_database(dialect, "agora_bench_claim")
    try:
        from agora_cli.store._engine import open_engine
        from agora_cli.store._provision import ensure_agent_tables

        engine = open_engine(url)
        ensure_agent_tables(engine)
        engine.dispose()
        kinds = (
            ("bare driver", bare_worker),
            ("bare driver, same work", bare_same_work_worker),
            ("bare sqlalchemy", sqlalchemy_worker),
            ("library", library_worker),
        )
        rates: dict[str, list[float]] = {kind: [] for kind, _ in kinds}
        for _ in range(ROUNDS):
            for kind, target in kinds:
                load(url, N)
                elapsed, claimed = run_workers(target, url)
                doubles = sum(c - 1 for c in Counter(claimed).values() if c > 1)
                missed = N - len(set(claimed))
                rate = len(claimed) / elapsed
                rates[kind].append(rate)
                print(
                    f"{dialect} {kind}: {len(claimed)} claims+settles by {WORKERS} processes in "
                    f"{elapsed:.2f} s = {rate:,.0f} claims/s; double claims {doubles}; "
                    f"unclaimed {missed}"
                )
                if doubles or missed:
                    raise SystemExit(f"{dialect} {kind}: {doubles} double, {missed} unclaimed")
        library = sum(rates["library"])
        print(
            f"{dialect} ratio library / bare driver loop: "
            f"{library / sum(rates['bare driver']):.2f} (target >= 0.7)"
        )
        print(
            f"{dialect} ratio library / bare driver loop doing the same work (both due states, "
            f"the work's columns): {library / sum(rates['bare driver, same work']):.2f}"
        )
        print(
            f"{dialect} ratio library / bare loop on agora's engine (SQLAlchemy text()): "
            f"{library / sum(rates['bare sqlalchemy']):.2f}"
        )
    finally:
        drop_database(dialect, name)


def main() -> None:
    print(f"claim_throughput: N={N}, workers={WORKERS}, rounds={ROUNDS}, cpus={os.cpu_count()}")
    for dialect in sys.argv[1:] or ["postgresql", "mysql"]:
        measure(dialect)


if __name__ == "__main__":
    main()
