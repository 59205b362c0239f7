"""Benchmark ``purge_scaling``: purging 1,000 expired runs costs the same from 20k or 2M rows.

Run by hand (never collected by pytest)::

    python tests/bench/bench_purge_scaling.py

On PostgreSQL and MariaDB (the local servers; ``AGORA_TEST_POSTGRES_URL`` /
``AGORA_TEST_MYSQL_URL`` override the admin URLs) it creates two uniquely named databases per
dialect: a *small* one holding only the expired runs (1,000 runs x 20 rows = 20,000 rows) and a
*large* one holding the same expired runs plus ~1,980,000 live rows. Each repetition reloads the
expired runs into both (server-side, then VACUUM/ANALYZE) and times ``purge_expired`` on each,
alternating the order; it prints the medians and their ratio (goal: <= 1.5), the ratio of the best
times, and, for contrast, the ratio of the naive ``GROUP BY run_id HAVING MAX(created_at) <
cutoff`` scan. The databases are dropped at the end.

Environment: ``BENCH_PURGE_LIVE_ROWS`` (default 1980000), ``BENCH_PURGE_RUNS`` (1000),
``BENCH_PURGE_REPEAT`` (7), ``BENCH_DIALECTS`` (``postgresql,mysql``).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from _common import create_database, drop_database
from sqlalchemy import text
from sqlalchemy.engine import Engine

from agora_cli.store._engine import open_engine
from agora_cli.store._frames import purge_expired
from agora_cli.store._provision import ensure_agent_tables

LIVE_ROWS = int(os.environ.get("BENCH_PURGE_LIVE_ROWS", "1980000"))
RUNS = int(os.environ.get("BENCH_PURGE_RUNS", "1000"))
ROWS_PER_RUN = 20
REPEAT = int(os.environ.get("BENCH_PURGE_REPEAT", "7"))
DIALECTS = os.environ.get("BENCH_DIALECTS", "postgresql,mysql").split(",")
TTL_S = 3600
FRAME = '{"type":"text-delta","delta":"a few streamed words "}'


def out(dialect: str, figure: str) -> None:
    print(f"purge_scaling {dialect:<10} {figure}", flush=True)


def generated(dialect: str, n: int, prefix: str, at_expr: str) -> str:
    """INSERT … SELECT of n generated rows, server-side (generate_series / MariaDB's seq_ table).

    Row g belongs to run ``prefix + g // 20`` with seq ``MOD(g, 20) + 1``; ``at_expr`` uses ``{g}``.
    """
    if dialect == "postgresql":
        g, source = "g", f"generate_series(0, {n - 1}) AS s(g)"
        run_id = f"'{prefix}' || ({g} / {ROWS_PER_RUN})"
    else:
        g, source = "s.seq", f"seq_0_to_{n - 1} AS s"
        run_id = f"CONCAT('{prefix}', {g} DIV {ROWS_PER_RUN})"
    return (
        "INSERT INTO agent_stream_frame (run_id, seq, frame, created_at) "
        f"SELECT {run_id}, MOD({g}, {ROWS_PER_RUN}) + 1, '{FRAME}', {at_expr.format(g=g)} "
        f"FROM {source}"
    )


def analyze(engine: Engine, dialect: str) -> None:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        if dialect == "postgresql":
            conn.exec_driver_sql("VACUUM ANALYZE agent_stream_frame")
        else:
            conn.exec_driver_sql("ANALYZE TABLE agent_stream_frame").fetchall()


def load_live(engine: Engine, dialect: str, now: int) -> None:
    # Live runs of 20 rows, written over the last 30 minutes: newer than any cutoff.
    at = f"{now} - MOD({{g}}, 1800000)"
    with engine.begin() as conn:
        conn.exec_driver_sql(generated(dialect, LIVE_ROWS, "live-", at))


def load_expired(engine: Engine, dialect: str, now: int) -> None:
    # The same expired runs every time: idle for 2-3 hours, rows spread over that hour.
    at = f"{now - 3 * 3_600_000} + {{g}} * 90"
    with engine.begin() as conn:
        conn.exec_driver_sql(generated(dialect, RUNS * ROWS_PER_RUN, "exp-", at))
    analyze(engine, dialect)


def row_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT COUNT(*) FROM agent_stream_frame")).scalar_one())


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return (time.perf_counter() - start) * 1000, result


def naive_ms(engine: Engine, cutoff: int) -> float:
    sql = text(
        "SELECT COUNT(*) FROM (SELECT run_id FROM agent_stream_frame GROUP BY run_id "
        "HAVING MAX(created_at) < :cutoff) AS x"
    )
    with engine.connect() as conn:
        ms, _ = timed(lambda: conn.execute(sql, {"cutoff": cutoff}).scalar_one())
    return ms


def bench(dialect: str) -> None:
    names: dict[str, str] = {}
    engines: dict[str, Engine] = {}
    try:
        for size in ("small", "large"):
            names[size], url = create_database(dialect, f"agora_bench_purge_{size}")
            engines[size] = open_engine(url)
            ensure_agent_tables(engines[size])
        now = int(time.time() * 1000)
        load_ms, _ = timed(lambda: load_live(engines["large"], dialect, now))
        out(dialect, f"loaded {LIVE_ROWS:,} live rows in {load_ms / 1000:.1f} s")
        times: dict[str, list[float]] = {"small": [], "large": []}
        naive: dict[str, list[float]] = {"small": [], "large": []}
        sizes: dict[str, int] = {}
        for rep in range(REPEAT):
            order = ("small", "large") if rep % 2 == 0 else ("large", "small")
            for size in order:
                engine = engines[size]
                load_expired(engine, dialect, now)
                sizes[size] = row_count(engine)
                naive[size].append(naive_ms(engine, now - TTL_S * 1000))
                ms, report = timed(lambda engine=engine: purge_expired(engine, TTL_S, 100))
                if (report.runs_purged, report.rows_deleted) != (RUNS, RUNS * ROWS_PER_RUN):
                    raise SystemExit(f"{dialect} {size}: unexpected purge {report}")
                times[size].append(ms)
        small, large = statistics.median(times["small"]), statistics.median(times["large"])
        out(dialect, f"small table {sizes['small']:>9,} rows: purge {RUNS:,} runs {small:8.1f} ms")
        out(dialect, f"large table {sizes['large']:>9,} rows: purge {RUNS:,} runs {large:8.1f} ms")
        out(dialect, f"ratio large/small = {large / small:.2f} (medians; goal <= 1.5)")
        best = min(times["large"]) / min(times["small"])
        out(dialect, f"ratio large/small = {best:.2f} (best of {REPEAT} each)")
        n_small, n_large = statistics.median(naive["small"]), statistics.median(naive["large"])
        out(
            dialect,
            f"naive GROUP BY scan for the same runs: {n_small:.1f} ms vs {n_large:.1f} ms, "
            f"ratio {n_large / n_small:.1f}",
        )
    finally:
        for engine in engines.values():
            engine.dispose()
        for name in names.values():
            drop_database(dialect, name)


def main() -> None:
    print(
        f"# purge_scaling: {RUNS:,} expired runs x {ROWS_PER_RUN} rows, {LIVE_ROWS:,} live rows, "
        f"median of {REPEAT}; python {sys.version.split()[0]}",
        flush=True,
    )
    for dialect in DIALECTS:
        bench(dialect.strip())


if __name__ == "__main__":
    main()
