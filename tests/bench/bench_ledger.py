"""Benchmark `ledger`: spend and quota over a large ledger, side by side with hand-written SQL.

For PostgreSQL and MariaDB (local servers, admin URLs below), it creates a uniquely named
database, provisions it, loads a ledger of ``BENCH_LEDGER_ROWS`` rows (default 2,000,000) spread
over 90 days (January to March 2026) server-side, and then measures, interleaved, the median of
``BENCH_LEDGER_REPEAT`` runs (default 5) of:

1. ``spend(by="model")`` for February through the store function vs the same ``SUM … GROUP BY``
   written by hand and run on the same engine (target: ratio <= 1.2);
2. ``agora spend --by model --json`` as a real subprocess vs the native client (``psql`` /
   ``mariadb``) running the hand-written statement as a subprocess, and vs the in-process one;
3. ``scope_quota`` for one actor (two indexed window SUMs) vs the same two SUMs forced to scan
   the whole table (target: at least 20x faster).

Run: ``python tests/bench/bench_ledger.py`` (``BENCH_LEDGER_ROWS=200000`` for a quick run).
One line per figure on stdout. The databases are dropped at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

from _common import create_database, drop_database
from sqlalchemy import text
from sqlalchemy.engine import make_url

from agora_cli.store._budgets import scope_quota
from agora_cli.store._clock import parse_instant
from agora_cli.store._engine import open_engine
from agora_cli.store._ledger import spend
from agora_cli.store._provision import ensure_agent_tables
from agora_cli.store._schema import token_usage

ROWS = int(os.environ.get("BENCH_LEDGER_ROWS", "2000000"))
REPEAT = int(os.environ.get("BENCH_LEDGER_REPEAT", "5"))
START = parse_instant("2026-01-01T00:00:00Z")
SPAN = 90 * 86_400_000
FEB = (date(2026, 2, 1), date(2026, 2, 28))
FEB_LO, FEB_HI = parse_instant("2026-02-01T00:00:00Z"), parse_instant("2026-02-28T23:59:59.999Z")
QUOTA_AT = parse_instant("2026-02-15T12:00:00Z")
DAY_LO, DAY_HI = parse_instant("2026-02-15T00:00:00Z"), parse_instant("2026-02-15T23:59:59.999Z")
ACTOR = "actor-7"
MODELS = [
    "gpt-4o-mini",
    "gpt-4o",
    "claude-sonnet-4",
    "claude-haiku-4-5",
    "gemini-2.5-pro",
    "gemini-2.5-flash",
    "mistral-large",
    "deepseek-chat",
    "grok-4",
    "llama-3.3-70b",
    "o3",
    "custom-ft-0613",  # unpriced
]
AGORA = Path(sys.executable).with_name("agora")

HAND_SPEND = (
    "SELECT model_id, COUNT(*), SUM(input_tokens), SUM(output_tokens), "
    "COALESCE(SUM(cache_read_tokens), 0), COALESCE(SUM(cache_write_tokens), 0), SUM(cost_usd), "
    "SUM(CASE WHEN cost_source = 'estimate' THEN cost_usd ELSE 0 END), COUNT(cost_usd) "
    "FROM agent_token_usage WHERE created_at BETWEEN {lo} AND {hi} GROUP BY model_id"
)
WINDOW_SUM = (
    "SELECT COALESCE(SUM(input_tokens + output_tokens), 0), COALESCE(SUM(cost_usd), 0), "
    "COUNT(*) - COUNT(cost_usd) FROM agent_token_usage {hint} "
    "WHERE actor_ref = '{actor}' AND created_at BETWEEN {lo} AND {hi}"
)


def row_expressions(n: str, dialect: str) -> dict[str, str]:
    """SQL for each ledger column as a function of the row number ``n`` (deterministic)."""

    def concat(*parts: str) -> str:
        return " || ".join(parts) if dialect == "postgresql" else f"CONCAT({', '.join(parts)})"

    def mod(a: str, b: int) -> str:
        return f"MOD({a}, {b})"  # not %: the drivers read it as a placeholder

    quoted = ", ".join(f"'{m}'" for m in MODELS)
    pick = f"1 + {mod(f'{n} * 31', len(MODELS))}"
    model = f"(ARRAY[{quoted}])[{pick}]" if dialect == "postgresql" else f"ELT({pick}, {quoted})"
    unpriced = f"{mod(f'{n} * 31', len(MODELS))} = {len(MODELS) - 1}"
    return {
        "id": concat("'u'", n),
        "thread_id": "'t'",
        "actor_ref": concat("'actor-'", mod(f"{n} * 7919", 1000)),
        "tenant_ref": f"CASE WHEN {mod(n, 7)} = 0 THEN NULL ELSE "
        + concat("'tenant-'", mod(f"{n} * 13", 50))
        + " END",
        "model_id": model,
        "purpose": "'chat'",
        "input_tokens": f"100 + {mod(f'{n} * 17', 5000)}",
        "output_tokens": f"10 + {mod(f'{n} * 23', 1000)}",
        "cache_read_tokens": f"CASE WHEN {mod(n, 3)} = 0 THEN {mod(f'{n} * 29', 100)} END",
        "cache_write_tokens": f"CASE WHEN {mod(n, 11)} = 0 THEN 50 END",
        "cost_usd": f"CASE WHEN {unpriced} THEN NULL ELSE {mod(f'{n} * 37', 1000)} / 100000.0 END",
        "cost_source": f"CASE WHEN {unpriced} THEN NULL WHEN {mod(n, 10)} = 1 THEN 'provider' "
        "ELSE 'estimate' END",
        "created_at": f"{START} + ({n} * {SPAN}) DIV {ROWS}"
        if dialect == "mysql"
        else f"{START} + ({n}::bigint * {SPAN}) / {ROWS}",
    }


def insert_sql(dialect: str, source: str, n: str) -> str:
    exprs = row_expressions(n, dialect)
    return (
        f"INSERT INTO agent_token_usage ({', '.join(exprs)}) "
        f"SELECT {', '.join(exprs.values())} FROM {source}"
    )


def load(engine: Any, dialect: str) -> None:
    """Load the ledger server-side; secondary indexes are dropped first and rebuilt after."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO agent_thread (id, actor_ref, title, created_at, updated_at) "
                "VALUES ('t', 'actor-0', 'bench', 0, 0)"
            )
        )
    # MySQL keeps the foreign key's index (it refuses to drop it).
    indexes = [i for i in token_usage.indexes if dialect != "mysql" or "thread_id" not in i.columns]
    with engine.begin() as conn:
        for index in indexes:
            index.drop(conn)
    chunk = 250_000
    for lo in range(0, ROWS, chunk):
        hi = min(ROWS, lo + chunk)
        with engine.begin() as conn:
            if dialect == "postgresql":
                conn.exec_driver_sql(
                    insert_sql(dialect, f"generate_series({lo + 1}::bigint, {hi}) g", "g")
                )
            else:
                conn.exec_driver_sql("SET SESSION foreign_key_checks = 0, unique_checks = 0")
                # numbers from a recursive CTE of 0..999 (MariaDB's max_recursive_iterations
                # may be 1000), squared: lo + a * 1000 + b + 1 covers a chunk of <= 1M rows
                source = (
                    "(WITH RECURSIVE d(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM d "
                    f"WHERE k < 999) SELECT {lo} + a.k * 1000 + b.k + 1 AS n "
                    f"FROM d a CROSS JOIN d b WHERE a.k < {(hi - lo + 999) // 1000} "
                    f"AND {lo} + a.k * 1000 + b.k + 1 <= {hi}) nums"
                )
                conn.exec_driver_sql(insert_sql(dialect, source, "nums.n"))
    with engine.begin() as conn:
        for index in indexes:
            index.create(conn)
        loaded = conn.exec_driver_sql("SELECT COUNT(*) FROM agent_token_usage").scalar()
        assert loaded == ROWS, f"loaded {loaded} rows, not {ROWS}"
    if dialect == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE agent_token_usage")
    else:
        with engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE TABLE agent_token_usage")


def median_ms(fn: Callable[[], Any]) -> float:
    return statistics.median(_timed(fn) for _ in range(REPEAT))


def _timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


def interleaved(fns: dict[str, Callable[[], Any]]) -> dict[str, float]:
    """Median ms of each function, runs interleaved so that noise hits all of them alike."""
    for fn in fns.values():
        fn()  # warm caches and connections
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(REPEAT):
        for name, fn in fns.items():
            samples[name].append(_timed(fn))
    return {name: statistics.median(values) for name, values in samples.items()}


def native_client(dialect: str, url: str, sql: str) -> list[str]:
    u = make_url(url)
    if dialect == "postgresql":
        cmd = ["psql", "-h", u.host or "", "-p", str(u.port or 5432), "-U", u.username or ""]
        return [*cmd, "-d", u.database or "", "-At", "-c", sql]
    cmd = ["mariadb", "-h", u.host or "", "-P", str(u.port or 3306), "-u", u.username or ""]
    return [*cmd, u.database or "", "-e", sql]


def plan(conn: Any, dialect: str, sql: str) -> str:
    if dialect == "postgresql":
        doc = conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + sql).scalar()
        doc = doc if isinstance(doc, list) else json.loads(doc)
        found: list[str] = []

        def walk(node: dict[str, Any]) -> None:
            label = node["Node Type"]
            if "Index Name" in node:
                label += f" on {node['Index Name']}"
            found.append(label)
            for child in node.get("Plans", []):
                walk(child)

        walk(doc[0]["Plan"])
        return " > ".join(found)
    rows = conn.exec_driver_sql("EXPLAIN " + sql).mappings().all()
    return "; ".join(f"{r['type']} key={r['key']} rows~{r['rows']}" for r in rows)


def bench(dialect: str) -> None:
    name, url = create_database(dialect, "agora_bench_ledger")
    engine = open_engine(url)
    try:
        ensure_agent_tables(engine)
        t = time.perf_counter()
        load(engine, dialect)
        print(f"{dialect} ledger rows={ROWS:,} load_s={time.perf_counter() - t:.1f}")
        run_figures(dialect, url, engine)
    finally:
        engine.dispose()
        drop_database(dialect, name)


def run_figures(dialect: str, url: str, engine: Any) -> None:
    hand = HAND_SPEND.format(lo=FEB_LO, hi=FEB_HI)
    with engine.connect() as conn:
        rep = spend(conn, by="model", from_day=FEB[0], to_day=FEB[1])
        hand_rows = conn.exec_driver_sql(hand).all()
        month_rows = rep.total.turns
        assert month_rows == sum(r[1] for r in hand_rows), "store and hand SQL disagree"
        print(f"{dialect} plan spend(month): {plan(conn, dialect, hand)}")
        print(
            f"{dialect} plan quota(window): "
            f"{plan(conn, dialect, WINDOW_SUM.format(hint='', actor=ACTOR, lo=FEB_LO, hi=FEB_HI))}"
        )
        conn.rollback()

        def store_spend() -> None:
            spend(conn, by="model", from_day=FEB[0], to_day=FEB[1])
            conn.rollback()

        def hand_spend() -> None:
            conn.exec_driver_sql(hand).all()
            conn.rollback()

        cli = [str(AGORA), "spend", "--by", "model", "--from", FEB[0].isoformat()]
        cli += ["--to", FEB[1].isoformat(), "--db", url, "--json"]
        native = native_client(dialect, url, hand)

        def cli_spend() -> None:
            out = subprocess.run(cli, capture_output=True, text=True, check=True).stdout
            assert json.loads(out)["total"]["turns"] == month_rows

        empty = [*cli[:5], "2030-01-01", "--to", "2030-01-01", *cli[8:]]

        def cli_empty() -> None:
            subprocess.run(empty, capture_output=True, check=True)

        def native_spend() -> None:
            subprocess.run(native, capture_output=True, check=True)

        def startup() -> None:
            subprocess.run([str(AGORA), "--version"], capture_output=True, check=True)

        ms = interleaved(
            {
                "store": store_spend,
                "hand": hand_spend,
                "cli": cli_spend,
                "cli_empty": cli_empty,
                "native": native_spend,
                "startup": startup,
            }
        )
        print(
            f"{dialect} spend --by model, one month ({month_rows:,} rows): store "
            f"{ms['store']:.1f} ms vs hand-written SQL {ms['hand']:.1f} ms: "
            f"ratio {ms['store'] / ms['hand']:.2f} (target <= 1.2)"
        )
        print(
            f"{dialect} spend CLI subprocess --json {ms['cli']:.0f} ms vs "
            f"{'psql' if dialect == 'postgresql' else 'mariadb'} client subprocess "
            f"{ms['native']:.0f} ms: ratio {ms['cli'] / ms['native']:.2f}; "
            f"vs in-process hand SQL: ratio {ms['cli'] / ms['hand']:.2f} "
            f"(agora --version alone: {ms['startup']:.0f} ms)"
        )
        query_part = ms["cli"] - ms["cli_empty"]
        print(
            f"{dialect} spend CLI, month minus an empty window (the process's fixed cost "
            f"{ms['cli_empty']:.0f} ms): {query_part:.0f} ms vs hand-written SQL "
            f"{ms['hand']:.0f} ms: ratio {query_part / ms['hand']:.2f}"
        )

        if dialect == "postgresql":
            scan_hint = ""

            def full_scan() -> None:
                conn.exec_driver_sql("SET LOCAL enable_indexscan = off")
                conn.exec_driver_sql("SET LOCAL enable_bitmapscan = off")
                conn.exec_driver_sql("SET LOCAL enable_indexonlyscan = off")
                for lo, hi in ((DAY_LO, DAY_HI), (FEB_LO, FEB_HI)):
                    sql = WINDOW_SUM.format(hint=scan_hint, actor=ACTOR, lo=lo, hi=hi)
                    conn.exec_driver_sql(sql).one()
                conn.rollback()

        else:
            scan_hint = "IGNORE INDEX (agent_token_usage_actor_created_idx, " + (
                "agent_token_usage_created_idx)"
            )

            def full_scan() -> None:
                for lo, hi in ((DAY_LO, DAY_HI), (FEB_LO, FEB_HI)):
                    sql = WINDOW_SUM.format(hint=scan_hint, actor=ACTOR, lo=lo, hi=hi)
                    conn.exec_driver_sql(sql).one()
                conn.rollback()

        def store_quota() -> None:
            scope_quota(conn, scope_kind="actor", scope_ref=ACTOR, at_ms=QUOTA_AT)
            conn.rollback()

        day, month = scope_quota(conn, scope_kind="actor", scope_ref=ACTOR, at_ms=QUOTA_AT)
        conn.rollback()
        ms = interleaved({"quota": store_quota, "scan": full_scan})
        print(
            f"{dialect} quota one actor (day {day.tokens:,} tokens, month {month.tokens:,}): "
            f"store {ms['quota']:.2f} ms vs full-table scan {ms['scan']:.1f} ms: "
            f"{ms['scan'] / ms['quota']:.0f}x faster (target >= 20x)"
        )


def main() -> None:
    print(
        f"bench ledger: rows={ROWS:,} repeat={REPEAT} cpus={os.cpu_count()} "
        f"date={time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    if not shutil.which("psql") or not shutil.which("mariadb"):
        print("note: psql/mariadb clients missing: the native-client figure will fail")
    for dialect in ("postgresql", "mysql"):
        bench(dialect)


if __name__ == "__main__":
    main()
