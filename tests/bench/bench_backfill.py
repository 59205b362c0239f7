"""Benchmark: the bounded discovery backfill against one bare UPDATE of every legacy row.

For PostgreSQL, MariaDB and SQLite: 200,000 legacy proposals (discovery columns NULL, as an older
writer leaves them) are backfilled by ``backfill_discovery_index`` in batches of 500, each its own
transaction (as ``agora db backfill`` does), and — on an identical fresh load — by one bare
``UPDATE … WHERE discovery_state IS NULL`` (the physical limit). Prints rows/s and the ratio
(target ≥ 0.3).

    python tests/bench/bench_backfill.py                     # 200,000 rows
    BENCH_BACKFILL_N=20000 python tests/bench/bench_backfill.py   # a quick run
"""

from __future__ import annotations

import os
import sys
import time

from _common import create_database, drop_database

N = int(os.environ.get("BENCH_BACKFILL_N", "200000"))
BATCH = int(os.environ.get("BENCH_BACKFILL_BATCH", "500"))

BARE_UPDATE = """
UPDATE agent_action_proposal SET
  discovery_state = CASE
    WHEN decision = 'pending' THEN 'pending'
    WHEN execution_state = 'running' THEN 'running'
    WHEN decision = 'approved' AND (execution_state IS NULL OR execution_state = 'queued')
      THEN 'queued'
    ELSE 'done' END,
  discovery_at = CASE
    WHEN decision = 'pending' THEN expires_at
    WHEN execution_state = 'running' THEN COALESCE(lease_expires_at, updated_at)
    WHEN decision = 'approved' AND (execution_state IS NULL OR execution_state = 'queued')
      THEN COALESCE(decided_at, updated_at)
    ELSE NULL END,
  version = version + 1
WHERE discovery_state IS NULL
"""


def legacy_row(i: int) -> dict[str, object]:
    """A row as an older writer leaves it: a mix of every state, discovery columns NULL."""
    kind = i % 5
    row: dict[str, object] = {
        "id": f"p{i:08d}",
        "idempotency_key": f"k{i:08d}",
        "tenant_ref": None if i % 2 else "acme",
        "actor_ref": "alice",
        "thread_id": "t",
        "tool_name": "refund",
        "input": f'{{"order":{i},"note":"legacy row"}}',
        "card": f'{{"title":"Refund order {i}"}}',
        "decision": "pending",
        "expires_at": 2_000_000_000_000 + i,
        "generation": 0,
        "attempts": 0,
        "version": 0,
        "created_at": 1_700_000_000_000 + i,
        "updated_at": 1_700_000_000_000 + i,
    }
    if kind in (1, 2, 3):
        row.update(decision="approved", decided_by="bob", decided_at=1_700_000_001_000 + i)
        row["execution_state"] = {1: "queued", 2: "running", 3: "succeeded"}[kind]
        if kind == 2:
            row.update(lease_owner="w", lease_token_hash="h", lease_expires_at=1_800_000_000_000)
    elif kind == 4:
        row.update(decision="rejected", decided_by="bob", decided_at=1_700_000_001_000 + i)
    return row


def load(url: str, n: int) -> None:
    from agora_cli.store._engine import dialect_name, open_engine
    from agora_cli.store._schema import action_proposal, thread

    engine = open_engine(url)
    with engine.begin() as conn:
        conn.execute(action_proposal.delete())
        conn.execute(thread.delete())
        conn.execute(
            thread.insert().values(
                id="t", actor_ref="alice", tenant_ref=None, title="b", created_at=0, updated_at=0
            )
        )
    for start in range(0, n, 10_000):
        with engine.begin() as conn:
            conn.execute(
                action_proposal.insert(),
                [legacy_row(i) for i in range(start, min(n, start + 10_000))],
            )
    name = dialect_name(engine)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        if name == "postgresql":
            conn.exec_driver_sql("VACUUM ANALYZE agent_action_proposal")
        elif name == "mysql":
            conn.exec_driver_sql("ANALYZE TABLE agent_action_proposal")
        else:
            conn.exec_driver_sql("ANALYZE")
    engine.dispose()


def run_library(url: str, *, count_each_batch: bool = False) -> tuple[float, int, int]:
    """Batches until one comes back short, then one exact count, as `agora db backfill` does
    (``count_each_batch``: the exact ``remaining`` after every batch instead)."""
    from agora_cli.store._engine import open_engine
    from agora_cli.store._proposals import backfill_discovery_index, count_legacy_proposals

    engine = open_engine(url)
    batches = filled = 0
    t0 = time.perf_counter()
    while True:
        with engine.begin() as conn:
            result = backfill_discovery_index(conn, limit=BATCH, count_remaining=count_each_batch)
        batches += 1
        filled += result.backfilled
        if result.remaining == 0 or result.backfilled == 0:
            break
    with engine.connect() as conn:
        assert count_legacy_proposals(conn) == 0
    elapsed = time.perf_counter() - t0
    engine.dispose()
    return elapsed, filled, batches


def run_bare(url: str) -> tuple[float, int]:
    from agora_cli.store._engine import open_engine

    engine = open_engine(url)
    t0 = time.perf_counter()
    with engine.begin() as conn:
        filled = conn.exec_driver_sql(BARE_UPDATE).rowcount
    elapsed = time.perf_counter() - t0
    engine.dispose()
    return elapsed, filled


def check_done(url: str) -> int:
    from agora_cli.store._engine import open_engine
    from agora_cli.store._proposals import count_legacy_proposals

    engine = open_engine(url)
    with engine.connect() as conn:
        left = count_legacy_proposals(conn)
    engine.dispose()
    return left


def measure(dialect: str) -> None:
    name, url = create_database(dialect, "agora_bench_backfill")
    try:
        from agora_cli.store._engine import open_engine
        from agora_cli.store._provision import ensure_agent_tables

        engine = open_engine(url)
        ensure_agent_tables(engine)
        engine.dispose()
        load(url, N)
        bare_s, bare_rows = run_bare(url)
        assert bare_rows == N and check_done(url) == 0, (bare_rows, N)
        print(
            f"{dialect} bare UPDATE: {bare_rows:,} rows in {bare_s:.2f} s = "
            f"{N / bare_s:,.0f} rows/s"
        )
        load(url, N)
        lib_s, lib_rows, batches = run_library(url)
        assert lib_rows == N and check_done(url) == 0, (lib_rows, N)
        print(
            f"{dialect} backfill as `agora db backfill` runs it: {lib_rows:,} rows in {batches} "
            f"batches of "
            f"{BATCH} in {lib_s:.2f} s = {N / lib_s:,.0f} rows/s"
        )
        print(
            f"{dialect} ratio backfill / bare UPDATE (rows/s): {bare_s / lib_s:.2f} (target >= 0.3)"
        )
        load(url, N)
        each_s, each_rows, _ = run_library(url, count_each_batch=True)
        assert each_rows == N and check_done(url) == 0, (each_rows, N)
        print(
            f"{dialect} for comparison, with the exact remaining count after every batch: "
            f"{N / each_s:,.0f} rows/s, ratio {bare_s / each_s:.2f}"
        )
    finally:
        drop_database(dialect, name)


def main() -> None:
    print(f"backfill: N={N}, batch={BATCH}, cpus={os.cpu_count()}")
    for dialect in sys.argv[1:] or ["postgresql", "mysql", "sqlite"]:
        measure(dialect)


if __name__ == "__main__":
    main()
