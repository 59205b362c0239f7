"""Benchmark: MariaDB's batch claim read as one row a job, or as one row for the batch (issue 29).

The claim's locking read (``next_due_probed(...).queued``: one JSON array a due row, with the
probe of due leases) makes the client parse one packet a row. Aggregated, ``SELECT
JSON_ARRAYAGG(due), MIN(running_due) FROM (<that read>) x``, it sends one row for the batch and
locks and skips the same rows. Is the client's saving worth what the server pays to build it?

One connection, over a queue of 20,000 rows: each read followed by its ``ROLLBACK`` (the rows
stay queued, so every iteration reads the same k), 2,000 iterations a shape, in rounds that
alternate the shapes' order. Prints, per k, the median (range) over the rounds of the client's
CPU, the database server's CPU (``/proc``: run with no other database busy) and the wall time
of one read, and each as agg / rows.

    python tests/bench/bench_claim_read_shape.py --rounds 4
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_worker_queues as queues  # noqa: E402
from _common import create_database, drop_database  # noqa: E402

ITERATIONS = 2000


def _shapes(k: int) -> dict[str, str]:
    from agora_cli.store._proposals.queries import next_due_probed

    rows = next_due_probed("mysql", k).queued
    return {"rows": rows, "agg": f"SELECT JSON_ARRAYAGG(due), MIN(running_due) FROM ({rows}) x"}


def _reader(conn: Any, shape: str, sql: str, now: int) -> Callable[[], int]:
    """One read of ``shape`` and its ROLLBACK, its JSON parsed with one ``json.loads`` (as the
    claim's ``due_rows`` parses a batch's rows)."""
    cur = conn.cursor()

    def rows() -> int:
        cur.execute(sql, (now, now))
        found = cur.fetchall()
        parsed = json.loads(f"[{','.join([row[0] for row in found])}]")
        conn.rollback()
        return len(parsed)

    def agg() -> int:
        cur.execute(sql, (now, now))
        parsed = json.loads(cur.fetchone()[0])
        conn.rollback()
        return len(parsed)

    return rows if shape == "rows" else agg


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--k", type=int, nargs="+", default=[10, 100])
    args = parser.parse_args()
    if not 1 <= args.rounds <= 50 or not all(1 <= k <= 1000 for k in args.k):
        parser.error("--rounds 1-50, --k 1-1000")
    import pymysql
    from sqlalchemy.engine import make_url

    name, url = create_database("mysql", "agora_shape")
    try:
        queues.load_agora(url, 20_000)
        u = make_url(url)
        conn = pymysql.connect(
            host=u.host or "127.0.0.1",
            port=u.port or 3306,
            user=u.username,
            password=u.password or "",
            database=u.database,
            autocommit=False,
        )
        now = int(time.time() * 1000) + 10**9  # every row is due
        print(f"mysql, one connection, {ITERATIONS} reads a shape a round, {args.rounds} rounds")
        for k in args.k:
            readers = {shape: _reader(conn, shape, sql, now) for shape, sql in _shapes(k).items()}
            if any(read() != k for read in readers.values()):
                raise SystemExit(f"a shape did not read {k} rows")
            seen: dict[str, list[tuple[float, float, float]]] = {s: [] for s in readers}
            for r in range(args.rounds):
                order = list(readers) if r % 2 == 0 else list(readers)[::-1]
                for shape in order:
                    read = readers[shape]
                    cpu, server, wall = (
                        time.process_time(),
                        queues.server_cpu(),
                        time.perf_counter(),
                    )
                    for _ in range(ITERATIONS):
                        read()
                    server_after = queues.server_cpu()
                    seen[shape].append(
                        (
                            (time.process_time() - cpu) / ITERATIONS * 1e6,
                            (server_after - server) / ITERATIONS * 1e6
                            if server is not None and server_after is not None
                            else float("nan"),
                            (time.perf_counter() - wall) / ITERATIONS * 1e6,
                        )
                    )
            print(f"k={k}: µs a read, median (range) over the rounds")
            for shape, runs in seen.items():
                client, server_us, wall_us = (list(x) for x in zip(*runs, strict=True))
                print(
                    f"  {shape:4}: client {queues.spread(client, '.0f')}; "
                    f"server {queues.spread(server_us, '.0f')}; "
                    f"wall {queues.spread(wall_us, '.0f')}"
                )
            for n, what in enumerate(("client", "server", "wall")):
                ratios = [a[n] / b[n] for a, b in zip(seen["agg"], seen["rows"], strict=True)]
                print(f"  agg / rows, {what}: {queues.spread(ratios, '.2f')}")
        conn.close()
    finally:
        drop_database("mysql", name)


if __name__ == "__main__":
    main()
