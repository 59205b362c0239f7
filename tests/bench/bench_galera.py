"""Benchmark: claims/s on one Galera node vs spread over three, and certification retries.

Six worker processes run the library's ``claim_next`` + ``settle`` loop over the same freshly
loaded queue, in the same run: (a) on the standalone MariaDB server (port 3306, for reference),
(b) all six on node 1 of the cluster, (c) two on each of the three nodes. Prints claims/s, the
ratios, double claims (must be 0), the retries of transient errors per 1,000 claims (counted by
``agora_cli.store._engine.retry_stats()`` in each worker) and calls that gave up (must be 0).

    python tests/bench/bench_galera.py                   # 4,000 proposals, 6 workers, 2 rounds
    BENCH_GALERA_N=1000 python tests/bench/bench_galera.py   # a quick run

The cluster: ``AGORA_TEST_GALERA`` (comma-separated node URLs), else the one
``tests/galera/cluster.py`` boots (and this script then stops).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import secrets
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "galera"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

N = int(os.environ.get("BENCH_GALERA_N", "4000"))
WORKERS = int(os.environ.get("BENCH_GALERA_WORKERS", "6"))
ROUNDS = int(os.environ.get("BENCH_GALERA_ROUNDS", "2"))
LEASE_MS = 600_000
STANDALONE = os.environ.get("AGORA_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/")


def with_db(admin_url: str, name: str) -> str:
    from sqlalchemy.engine import make_url

    from agora_cli.store._engine import normalize_url

    return make_url(normalize_url(admin_url).set(database=name)).render_as_string(
        hide_password=False
    )


def fresh(admin_url: str, n: int) -> str:
    """A new database on ``admin_url``'s server, provisioned, holding ``n`` queued proposals."""
    from bench_claim_throughput import load

    from agora_cli.store._engine import open_engine
    from agora_cli.store._provision import ensure_agent_tables

    name = f"agora_bench_g_{os.getpid()}_{secrets.token_hex(3)}"
    admin = open_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    admin.dispose()
    url = with_db(admin_url, name)
    engine = open_engine(url)
    ensure_agent_tables(engine)
    engine.dispose()
    load(url, n)
    return name


def drop(admin_url: str, name: str) -> None:
    from agora_cli.store._engine import open_engine

    admin = open_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")
    admin.dispose()


def worker(url: str, name: str, start: Any, out: Any) -> None:
    from agora_cli.store._engine import open_engine, retry_stats
    from agora_cli.store._proposals import ActionProposalStore

    store = ActionProposalStore(open_engine(url, pool_size=1))
    claimed: list[str] = []
    errors = 0
    start.wait()
    while True:
        try:
            got = store.claim_next(name, LEASE_MS)
            if got.lease is None or got.work is None:
                break
            claimed.append(got.work.id)
            store.settle(got.work.id, got.lease.token, got.lease.generation, "succeeded", None)
        except Exception:
            errors += 1
    stats = retry_stats()
    out.put((claimed, errors, stats.retried, stats.gave_up))


def run(urls: list[str]) -> dict[str, float]:
    ctx = mp.get_context("fork")
    start, out = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=worker, args=(urls[i % len(urls)], f"w{i}", start, out))
        for i in range(WORKERS)
    ]
    for p in procs:
        p.start()
    time.sleep(1.0)  # every worker connected and waiting
    began = time.perf_counter()
    start.set()
    results = [out.get(timeout=900) for _ in procs]
    elapsed = time.perf_counter() - began
    for p in procs:
        p.join()
    ids = Counter(pid for claimed, *_ in results for pid in claimed)
    claims = sum(ids.values())
    return {
        "claims_s": claims / elapsed,
        "claimed": claims,
        "unique": len(ids),
        "double": sum(1 for v in ids.values() if v > 1),
        "errors": sum(r[1] for r in results),
        "retries_per_1000": 1000 * sum(r[2] for r in results) / max(claims, 1),
        "gave_up": sum(r[3] for r in results),
    }


def latencies(url: str, n: int = 1000) -> dict[str, float]:
    """Median ms of what a claim is made of, on one connection: a read, a causal read (Galera;
    the same read elsewhere), and a one-row write with its commit (replication + certification
    on Galera)."""
    import statistics

    import pymysql

    from agora_cli.store._engine import normalize_url

    u = normalize_url(url)
    conn = pymysql.connect(host=u.host, port=u.port or 3306, user=u.username, database=u.database)
    out: dict[str, float] = {}
    with conn.cursor() as cur:
        cur.execute("SHOW VARIABLES LIKE 'wsrep_on'")
        row = cur.fetchone()
        galera = row is not None and row[1] == "ON"
        cur.execute("CREATE TABLE bench_ping (id INT PRIMARY KEY, n INT) ENGINE=InnoDB")
        cur.execute("INSERT INTO bench_ping VALUES (1, 0)")
        conn.commit()
        for label, setup, sql in (
            ("read", "SET SESSION wsrep_sync_wait = 0" if galera else None,
             "SELECT n FROM bench_ping"),
            ("causal read", "SET SESSION wsrep_sync_wait = 1" if galera else None,
             "SELECT n FROM bench_ping"),
            ("write+commit", None, "UPDATE bench_ping SET n = n + 1 WHERE id = 1"),
        ):  # fmt: skip
            if setup:
                cur.execute(setup)
            times = []
            for _ in range(n):
                t = time.perf_counter()
                cur.execute(sql)
                cur.fetchall()
                conn.commit()
                times.append(time.perf_counter() - t)
            out[label] = 1000 * statistics.median(times)
    conn.close()
    return out


def main() -> None:
    import cluster

    given = os.environ.get("AGORA_TEST_GALERA", "").strip()
    booted = False
    if given:
        nodes = [u.strip() for u in given.split(",") if u.strip()]
    else:
        booted = not all(cluster.synced(i) for i in range(cluster.NODES))
        nodes = cluster.up()
    setups = {
        "standalone MariaDB": (STANDALONE, lambda name: [with_db(STANDALONE, name)]),
        "Galera, 1 node": (nodes[0], lambda name: [with_db(nodes[0], name)]),
        "Galera, 3 nodes": (nodes[0], lambda name: [with_db(u, name) for u in nodes]),
    }
    print("median ms on one idle connection: read / causal read / one-row write+commit")
    for label, (admin, urls_of) in list(setups.items())[:2]:
        name = fresh(admin, 0)
        try:
            lat = latencies(urls_of(name)[0])
        finally:
            drop(admin, name)
        print(
            f"  {label:20s} {lat['read']:.2f} / {lat['causal read']:.2f} / "
            f"{lat['write+commit']:.2f}"
        )
    print(f"{N:,} queued proposals, {WORKERS} workers (claim_next + settle), {ROUNDS} rounds")
    best: dict[str, dict[str, float]] = {}
    try:
        for round_ in range(ROUNDS):
            for label, (admin, urls_of) in setups.items():
                name = fresh(admin, N)
                try:
                    time.sleep(1.0)  # the load has reached every node
                    got = run(urls_of(name))
                finally:
                    drop(admin, name)
                print(
                    f"round {round_ + 1} {label:20s} {got['claims_s']:7.0f} claims/s  "
                    f"claimed {got['claimed']:.0f} unique {got['unique']:.0f} "
                    f"double {got['double']:.0f} errors {got['errors']:.0f}  "
                    f"retries/1000 {got['retries_per_1000']:6.1f} gave up {got['gave_up']:.0f}"
                )
                if label not in best or got["claims_s"] > best[label]["claims_s"]:
                    best[label] = got
    finally:
        if booted:
            cluster.down()
    one, three, alone = (
        best["Galera, 1 node"],
        best["Galera, 3 nodes"],
        best["standalone MariaDB"],
    )
    print()
    print(f"3 nodes / 1 node:            {three['claims_s'] / one['claims_s']:.2f}")
    print(f"1 node / standalone MariaDB: {one['claims_s'] / alone['claims_s']:.2f}")
    print(f"3 nodes / standalone:        {three['claims_s'] / alone['claims_s']:.2f}")
    print(
        f"retries per 1,000 claims: 1 node {one['retries_per_1000']:.1f}, "
        f"3 nodes {three['retries_per_1000']:.1f}; gave up: "
        f"{one['gave_up'] + three['gave_up']:.0f}; double claims: "
        f"{one['double'] + three['double']:.0f}"
    )


if __name__ == "__main__":
    main()
