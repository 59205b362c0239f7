"""Benchmark `console`: the operator's console on a large agent database, side by side.

For PostgreSQL and MariaDB (local servers), it creates two databases — a large one of
``BENCH_CONSOLE_RUNS`` runs (default 2,000,000) and ``BENCH_CONSOLE_CALLS`` tool calls (default
10,000,000), and a small one of 20,000 runs (100,000 calls) — loads both server-side
(``generate_series`` on PostgreSQL, a recursive CTE of 0..999 squared on MariaDB; secondary
indexes dropped first and rebuilt after), and then measures, interleaved, the median of
``BENCH_CONSOLE_REPEAT`` runs (default 15) of:

1. ``list_runs`` — the first page (50 runs, newest first) and a deep cursor page (95 % of the
   way down, near the oldest runs) — on the large table vs the same page on the small one
   (target: each ratio <= 1.5); also with a status filter and an actor filter;
2. ``stats_by_tool`` for one UTC day vs a bare hand-written ``GROUP BY`` over the same day
   (target <= 1.2), and vs the same ``GROUP BY`` given the per-status index ranges;
   ``run_reliability`` for the day too;
3. the inbox: the query plan of every statement it runs (``EXPLAIN``), which must read only
   ``agent_action_proposal_discovery_idx``, and its time on the large vs the small database;
4. for the record: a run's short-id prefix resolved on the large table, and its plan.

Run: ``python tests/bench/bench_console.py`` (``BENCH_CONSOLE_RUNS=200000
BENCH_CONSOLE_CALLS=1000000`` for a quick run; ``AGORA_BENCH_DIALECTS=postgresql`` for one
server). One line per figure on stdout. The databases are dropped at the end.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from _common import create_database, dialects, drop_database
from sqlalchemy import event

from agora_cli.store._clock import DAY_MS, parse_instant
from agora_cli.store._engine import open_engine
from agora_cli.store._proposals import list_inbox
from agora_cli.store._provision import ensure_agent_tables
from agora_cli.store._runs import encode_run_cursor, list_runs
from agora_cli.store._schema import action_proposal, message, run, thread, tool_call
from agora_cli.store._short_ids import resolve_run_id
from agora_cli.store._tool_stats import run_reliability, stats_by_tool, tool_call_statuses

RUNS = int(os.environ.get("BENCH_CONSOLE_RUNS", "2000000"))
CALLS = int(os.environ.get("BENCH_CONSOLE_CALLS", "10000000"))
SMALL_RUNS = 20_000
PROPOSALS_PER_RUN = 0.1  # 200k proposals on the large database, 2k on the small one
REPEAT = int(os.environ.get("BENCH_CONSOLE_REPEAT", "15"))
START = parse_instant("2026-01-01T00:00:00Z")
SPAN = 365 * DAY_MS
DAY_LO = parse_instant("2026-07-20T00:00:00Z")
DAY_HI = DAY_LO + DAY_MS - 1
NOW = START + SPAN  # the inbox's clock: the end of the loaded year
TOOLS = [
    "lookup_order",
    "search_kb",
    "fetch_invoice",
    "send_email",
    "refund_order",
    "cancel_subscription",
    "export_report",
    "update_address",
    "create_ticket",
    "translate",
    "summarise",
    "web_search",
]
THREADS = 1000
MESSAGES = 10_000

HAND_BARE = (
    "SELECT tool_name, COUNT(*), "
    "SUM(CASE WHEN status IN ('completed', 'succeeded', 'success') THEN 1 ELSE 0 END), "
    "SUM(CASE WHEN status IN ('failed', 'error') THEN 1 ELSE 0 END), "
    "SUM(CASE WHEN status IN ('rejected', 'denied') THEN 1 ELSE 0 END), "
    "SUM(CASE WHEN status IN ('awaiting_approval', 'pending_approval') THEN 1 ELSE 0 END), "
    "COUNT(execution_ms), "
    "MAX(CASE WHEN status IN ('failed', 'error') THEN created_at END) "
    "FROM agent_tool_call WHERE {ranges}created_at BETWEEN {lo} AND {hi} GROUP BY tool_name"
)


class Sql:
    """Per-dialect SQL fragments for the generators."""

    def __init__(self, dialect: str) -> None:
        self.pg = dialect == "postgresql"

    def cat(self, *parts: str) -> str:
        return " || ".join(parts) if self.pg else f"CONCAT({', '.join(parts)})"

    def pad(self, n: str, width: int) -> str:
        return f"lpad(({n})::text, {width}, '0')" if self.pg else f"LPAD({n}, {width}, '0')"

    def div(self, a: str, b: str) -> str:
        return f"({a}) / ({b})" if self.pg else f"({a}) DIV ({b})"

    def pick(self, index: str, values: list[str]) -> str:
        quoted = ", ".join(f"'{v}'" for v in values)
        if self.pg:
            return f"(ARRAY[{quoted}])[1 + {index}]"
        return f"ELT(1 + {index}, {quoted})"

    def big(self, n: str) -> str:
        return f"({n})::bigint" if self.pg else n


def _runs(sql: Sql, n: str, total: int) -> dict[str, str]:
    n = sql.big(n)
    status = (
        f"CASE WHEN MOD({n}, 17) = 0 THEN 'failed' WHEN MOD({n}, 101) = 0 THEN 'cancelled' "
        f"WHEN {n} > {total} - 20 THEN 'running' ELSE 'completed' END"
    )
    started = f"{START} + {sql.div(f'{n} * {SPAN}', str(total))}"
    return {
        "id": sql.cat("'r'", sql.pad(n, 10)),
        "thread_id": sql.cat("'t'", sql.pad(f"MOD({n}, {THREADS})", 6)),
        "agent_name": sql.pick(f"MOD({n}, 5)", ["support", "billing", "triage", "sales", "ops"]),
        "actor_ref": sql.cat("'actor-'", f"MOD({n} * 7, 1000)"),
        "tenant_ref": f"CASE WHEN MOD({n}, 9) = 0 THEN NULL ELSE "
        + sql.cat("'tenant-'", f"MOD({n}, 20)")
        + " END",
        "status": status,
        "started_at": started,
        "finished_at": f"CASE WHEN {n} > {total} - 20 THEN NULL ELSE {started} + "
        f"MOD({n} * 7919, 90000) END",
        "step_count": f"1 + MOD({n}, 4)",
        "input_tokens": f"100 + MOD({n} * 17, 5000)",
        "output_tokens": f"10 + MOD({n} * 23, 900)",
        "cost_usd": f"MOD({n} * 37, 1000) / 100000.0",
        "error": f"CASE WHEN MOD({n}, 17) = 0 THEN 'step 2: fetch_invoice: 503' END",
        "durable": "0",
    }


def _calls(sql: Sql, n: str, total: int, runs: int) -> dict[str, str]:
    n = sql.big(n)
    status = (
        f"CASE WHEN MOD({n}, 13) = 0 THEN 'failed' WHEN MOD({n}, 97) = 0 THEN 'rejected' "
        f"WHEN MOD({n}, 89) = 0 THEN 'awaiting_approval' WHEN MOD({n}, 211) = 0 THEN 'error' "
        "ELSE 'completed' END"
    )
    return {
        "id": sql.cat("'c'", sql.pad(n, 11)),
        "message_id": sql.cat("'m'", sql.pad(f"MOD({n}, {MESSAGES})", 6)),
        "tool_name": sql.pick(f"MOD({n} * 7, {len(TOOLS)})", TOOLS),
        "tool_type": "'function'",
        "status": status,
        "execution_ms": f"CASE WHEN MOD({n}, 89) = 0 THEN NULL ELSE "
        f"MOD({n} * 7919, 3000) + MOD({n}, 7) * 11 END",
        "error": f"CASE WHEN MOD({n}, 13) = 0 THEN 'billing-api: 503' END",
        "run_id": sql.cat("'r'", sql.pad(f"1 + {sql.div(f'({n} - 1) * {runs}', str(total))}", 10)),
        "created_at": f"{START} + {sql.div(f'{n} * {SPAN}', str(total))}",
    }


def _proposals(sql: Sql, n: str, total: int) -> dict[str, str]:
    n = sql.big(n)
    # 0.25 % pending (expiring over the next week), 0.25 % queued, 0.1 % running (half of them
    # with a lease that ran out), the rest done (2 % of those failed)
    state = (
        f"CASE WHEN MOD({n}, 400) = 0 THEN 'pending' WHEN MOD({n}, 400) = 1 THEN 'queued' "
        f"WHEN MOD({n}, 1000) = 2 THEN 'running' ELSE 'done' END"
    )
    at = (
        f"CASE WHEN MOD({n}, 400) = 0 THEN {NOW} + MOD({n} * 7919, {7 * DAY_MS}) "
        f"WHEN MOD({n}, 400) = 1 THEN {START} + {sql.div(f'{n} * {SPAN}', str(total))} "
        f"WHEN MOD({n}, 1000) = 2 THEN {NOW} + MOD({n}, 3) * 60000 - 60000 END"
    )
    decision = (
        f"CASE WHEN MOD({n}, 400) = 0 THEN 'pending' WHEN MOD({n}, 50) = 7 THEN 'rejected' "
        "ELSE 'approved' END"
    )
    execution = (
        f"CASE WHEN MOD({n}, 400) = 0 OR MOD({n}, 50) = 7 THEN NULL "
        f"WHEN MOD({n}, 400) = 1 THEN 'queued' WHEN MOD({n}, 1000) = 2 THEN 'running' "
        f"WHEN MOD({n}, 50) = 3 THEN 'failed' ELSE 'succeeded' END"
    )
    created = f"{START} + {sql.div(f'{n} * {SPAN}', str(total))}"
    return {
        "id": sql.cat("'ap_'", sql.pad(n, 12)),
        "idempotency_key": sql.cat("'k'", sql.pad(n, 12)),
        "tenant_ref": sql.cat("'tenant-'", f"MOD({n}, 20)"),
        "actor_ref": sql.cat("'actor-'", f"MOD({n} * 7, 1000)"),
        "thread_id": sql.cat("'t'", sql.pad(f"MOD({n}, {THREADS})", 6)),
        "tool_name": sql.pick(f"MOD({n}, {len(TOOLS)})", TOOLS),
        "input": "'{}'",
        "decision": decision,
        "expires_at": f"CASE WHEN MOD({n}, 400) = 0 THEN {at} END",
        "execution_state": execution,
        "lease_owner": f"CASE WHEN MOD({n}, 1000) = 2 THEN 'worker-1' END",
        "lease_expires_at": f"CASE WHEN MOD({n}, 1000) = 2 THEN {at} END",
        "error": f"CASE WHEN MOD({n}, 50) = 3 THEN 'refunds-api: 409' END",
        "settled_at": f"CASE WHEN {state} = 'done' THEN {created} + 60000 END",
        "generation": "1",
        "attempts": "1",
        "version": "1",
        "created_at": created,
        "updated_at": created,
        "discovery_state": state,
        "discovery_at": at,
    }


def _numbers(sql: Sql, lo: int, hi: int) -> tuple[str, str]:
    """A row source of the numbers lo+1..hi, and the expression naming each."""
    if sql.pg:
        return f"generate_series({lo + 1}::bigint, {hi}) g", "g"
    source = (
        "(WITH RECURSIVE d(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM d WHERE k < 999) "
        f"SELECT {lo} + a.k * 1000 + b.k + 1 AS n FROM d a CROSS JOIN d b "
        f"WHERE a.k < {(hi - lo + 999) // 1000} AND {lo} + a.k * 1000 + b.k + 1 <= {hi}) nums"
    )
    return source, "nums.n"


def _fill(engine: Any, dialect: str, table: Any, total: int, columns: Callable[..., Any]) -> None:
    sql = Sql(dialect)
    chunk = 1_000_000
    for lo in range(0, total, chunk):
        hi = min(total, lo + chunk)
        source, n = _numbers(sql, lo, hi)
        exprs = columns(sql, n)
        with engine.begin() as conn:
            if dialect == "mysql":
                conn.exec_driver_sql("SET SESSION foreign_key_checks = 0, unique_checks = 0")
            else:  # the generated rows reference rows that exist: skip the per-row FK checks
                conn.exec_driver_sql("SET LOCAL session_replication_role = replica")
            conn.exec_driver_sql(
                f"INSERT INTO {table.name} ({', '.join(exprs)}) "
                f"SELECT {', '.join(exprs.values())} FROM {source}"
            )


def load(engine: Any, dialect: str, runs: int, calls: int) -> None:
    """Threads, messages, runs, tool calls and proposals, server-side."""
    proposals = int(runs * PROPOSALS_PER_RUN)
    tables = (run, tool_call, action_proposal)
    # MySQL keeps the indexes that its foreign keys need (it refuses to drop them).
    fk_columns = {"thread_id", "message_id"}
    dropped = [
        i
        for t in tables
        for i in t.indexes
        if not i.unique and (dialect != "mysql" or not set(i.columns.keys()) & fk_columns)
    ]
    with engine.begin() as conn:
        for index in dropped:
            index.drop(conn)

    def threads(sql: Sql, n: str) -> dict[str, str]:
        return {
            "id": sql.cat("'t'", sql.pad(f"{n} - 1", 6)),
            "actor_ref": "'actor-1'",
            "title": "'bench'",
            "created_at": str(START),
            "updated_at": str(START),
        }

    def messages(sql: Sql, n: str) -> dict[str, str]:
        return {
            "id": sql.cat("'m'", sql.pad(f"{n} - 1", 6)),
            "thread_id": sql.cat("'t'", sql.pad(f"MOD({n} - 1, {THREADS})", 6)),
            "role": "'assistant'",
            "content": "''",
            "created_at": str(START),
        }

    _fill(engine, dialect, thread, THREADS, threads)
    _fill(engine, dialect, message, MESSAGES, messages)
    _fill(engine, dialect, run, runs, lambda sql, n: _runs(sql, n, runs))
    _fill(engine, dialect, tool_call, calls, lambda sql, n: _calls(sql, n, calls, runs))
    _fill(engine, dialect, action_proposal, proposals, lambda sql, n: _proposals(sql, n, proposals))
    with engine.begin() as conn:
        for index in dropped:
            index.create(conn)
    names = ", ".join(t.name for t in (*tables, thread, message))
    if dialect == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql(f"VACUUM ANALYZE {names}")
    else:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"ANALYZE TABLE {names}")


# --- measuring --------------------------------------------------------------------------------


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


@contextmanager
def captured(engine: Any) -> Iterator[list[tuple[str, Any]]]:
    """The statements ``engine`` runs inside the block, with their parameters."""
    seen: list[tuple[str, Any]] = []

    def remember(conn: Any, cursor: Any, statement: str, params: Any, *args: Any) -> None:
        seen.append((statement, params))

    event.listen(engine, "before_cursor_execute", remember)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", remember)


def plan(conn: Any, dialect: str, statement: str, params: Any) -> tuple[str, set[str]]:
    """A one-line plan and the set of indexes (or ``SCAN``) it reads."""
    if dialect == "postgresql":
        doc = conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + statement, params).scalar()
        doc = doc if isinstance(doc, list) else json.loads(doc)
        found: list[str] = []
        reads: set[str] = set()

        def walk(node: dict[str, Any]) -> None:
            label = node["Node Type"]
            if "Index Name" in node:
                label += f" on {node['Index Name']}"
                reads.add(node["Index Name"])
            elif node["Node Type"] == "Seq Scan":
                reads.add(f"SCAN {node.get('Relation Name')}")
            found.append(label)
            for child in node.get("Plans", []):
                walk(child)

        walk(doc[0]["Plan"])
        return " > ".join(found), reads
    rows = conn.exec_driver_sql("EXPLAIN " + statement, params).mappings().all()
    reads = {str(r["key"]) if r["key"] else f"SCAN {r['table']}" for r in rows}
    text = "; ".join(
        f"{r['type']} key={r['key']} rows~{r['rows']} {r['Extra'] or ''}" for r in rows
    )
    return text, reads


# --- the figures ------------------------------------------------------------------------------


def _deep_cursor(conn: Any, depth: float) -> str:
    """The cursor after the run ``depth`` of the way down the newest-first listing."""
    total = conn.exec_driver_sql("SELECT COUNT(*) FROM agent_run").scalar()
    offset = int(total * (1 - depth))
    started, rid = conn.exec_driver_sql(
        f"SELECT started_at, id FROM agent_run ORDER BY started_at, id LIMIT 1 OFFSET {offset}"
    ).one()
    return encode_run_cursor(int(started), str(rid))


def figures(dialect: str, big: Any, small: Any) -> None:
    with big.connect() as b, small.connect() as s:
        deep = {"big": _deep_cursor(b, 0.95), "small": _deep_cursor(s, 0.95)}
        b.rollback()
        s.rollback()
        for name, conn in (("big", b), ("small", s)):
            page = list_runs(conn, after=deep[name], limit=50)
            assert len(page.runs) == 50 and page.next_cursor, name
            conn.rollback()

        def page(conn: Any, **kw: Any) -> Callable[[], None]:
            def run_it() -> None:
                assert list_runs(conn, limit=50, **kw).runs
                conn.rollback()

            return run_it

        ms = interleaved(
            {
                "first_big": page(b),
                "first_small": page(s),
                "deep_big": page(b, after=deep["big"]),
                "deep_small": page(s, after=deep["small"]),
                "failed_big": page(b, status="failed"),
                "failed_small": page(s, status="failed"),
                "actor_big": page(b, actor_ref="actor-7", after=deep["big"]),
                "actor_small": page(s, actor_ref="actor-7"),
            }
        )
        for what, label in (
            ("first", "first page"),
            ("deep", "deep cursor page (95 % down)"),
            ("failed", "--status failed, first page"),
        ):
            print(
                f"{dialect} runs list {label}: {RUNS:,} runs {ms[what + '_big']:.2f} ms vs "
                f"{SMALL_RUNS:,} runs {ms[what + '_small']:.2f} ms: ratio "
                f"{ms[what + '_big'] / ms[what + '_small']:.2f} (target <= 1.5)"
            )
        print(
            f"{dialect} runs list --actor, deep page / small first page: "
            f"{ms['actor_big']:.2f} / {ms['actor_small']:.2f} ms"
        )
        with captured(big) as seen:
            list_runs(b, after=deep["big"], limit=50)
            b.rollback()
        print(f"{dialect} plan runs list --after: {plan(b, dialect, *seen[-1])[0]}")
        with captured(big) as seen:
            list_runs(b, status="failed", limit=50)
            b.rollback()
        print(f"{dialect} plan runs list --status: {plan(b, dialect, *seen[-1])[0]}")
        b.rollback()

        # tools stats for one day
        statuses = tool_call_statuses(b)
        b.rollback()
        ranges = "status IN ({}) AND ".format(", ".join(f"'{x}'" for x in statuses))
        bare = HAND_BARE.format(ranges="", lo=DAY_LO, hi=DAY_HI)
        ranged = HAND_BARE.format(ranges=ranges, lo=DAY_LO, hi=DAY_HI)
        stats = stats_by_tool(b, from_ms=DAY_LO, to_ms=DAY_HI)
        hand = b.exec_driver_sql(ranged).all()
        b.rollback()
        day_calls = sum(x.calls for x in stats)
        assert day_calls == sum(r[1] for r in hand), "store and hand SQL disagree"
        assert sorted((x.tool_name, x.failed) for x in stats) == sorted((r[0], r[3]) for r in hand)

        def store_stats() -> None:
            stats_by_tool(b, from_ms=DAY_LO, to_ms=DAY_HI)
            b.rollback()

        def hand_sql(sql: str) -> Callable[[], None]:
            def run_it() -> None:
                b.exec_driver_sql(sql).all()
                b.rollback()

            return run_it

        def reliability() -> None:
            run_reliability(b, from_ms=DAY_LO, to_ms=DAY_HI)
            b.rollback()

        ms = interleaved(
            {
                "store": store_stats,
                "bare": hand_sql(bare),
                "ranged": hand_sql(ranged),
                "runs": reliability,
            }
        )
        print(
            f"{dialect} tools stats, one day ({day_calls:,} of {CALLS:,} calls): store "
            f"{ms['store']:.1f} ms vs bare hand-written GROUP BY {ms['bare']:.1f} ms: ratio "
            f"{ms['store'] / ms['bare']:.2f} (target <= 1.2)"
        )
        print(
            f"{dialect} tools stats vs the same GROUP BY given the per-status ranges "
            f"{ms['ranged']:.1f} ms: ratio {ms['store'] / ms['ranged']:.2f} "
            "(the store also computes p50/p95 and reads the last failures)"
        )
        print(f"{dialect} run reliability, one day: {ms['runs']:.1f} ms")
        print(f"{dialect} plan bare GROUP BY: {plan(b, dialect, bare, {})[0]}")
        print(f"{dialect} plan per-status ranges: {plan(b, dialect, ranged, {})[0]}")
        b.rollback()

        # the inbox
        from agora_cli.store._clock import ManualClock

        clock = ManualClock(NOW)
        for state in ("pending", "queued", "running", "failed"):
            with captured(big) as seen:
                page_ = list_inbox(b, state=state, limit=50, clock=clock)  # type: ignore[arg-type]
                b.rollback()
            reads: set[str] = set()
            for statement, params in seen:
                line, found = plan(b, dialect, statement, params)
                reads |= found
                print(f"{dialect} plan inbox {state}: {line}")
            b.rollback()
            only = reads == {"agent_action_proposal_discovery_idx"}
            print(
                f"{dialect} inbox {state}: {len(page_.entries)} shown, stuck "
                f"{sum(e.stuck for e in page_.entries)}; reads {sorted(reads)}: "
                f"{'only the discovery index' if only else 'NOT only the discovery index'}"
            )

        def inbox_of(conn: Any, state: str) -> Callable[[], None]:
            def run_it() -> None:
                list_inbox(conn, state=state, limit=50, clock=clock)  # type: ignore[arg-type]
                conn.rollback()

            return run_it

        ms = interleaved(
            {
                "pending_big": inbox_of(b, "pending"),
                "pending_small": inbox_of(s, "pending"),
                "running_big": inbox_of(b, "running"),
                "running_small": inbox_of(s, "running"),
                "failed_big": inbox_of(b, "failed"),
                "failed_small": inbox_of(s, "failed"),
            }
        )
        proposals = int(RUNS * PROPOSALS_PER_RUN)
        small_proposals = int(SMALL_RUNS * PROPOSALS_PER_RUN)
        for state in ("pending", "running", "failed"):
            print(
                f"{dialect} inbox {state}: {proposals:,} proposals {ms[state + '_big']:.2f} ms "
                f"vs {small_proposals:,} {ms[state + '_small']:.2f} ms: ratio "
                f"{ms[state + '_big'] / ms[state + '_small']:.2f}"
            )

        # a short id on the large table
        prefix = ("r" + str(RUNS).zfill(10))[:-1]  # names the last run only
        with captured(big) as seen:
            full = resolve_run_id(b, prefix)
            b.rollback()
        ms = interleaved({"prefix": lambda: (resolve_run_id(b, prefix), b.rollback())})
        print(
            f"{dialect} runs show by prefix ({prefix} -> {full}) on {RUNS:,} runs: "
            f"{ms['prefix']:.2f} ms; plan: {plan(b, dialect, *seen[-1])[0]}"
        )
        b.rollback()


def bench(dialect: str) -> None:
    databases = []
    try:
        engines = {}
        for size, (runs, calls) in {
            "big": (RUNS, CALLS),
            "small": (SMALL_RUNS, SMALL_RUNS * CALLS // RUNS),
        }.items():
            name, url = create_database(dialect, f"agora_bench_console_{size}")
            databases.append(name)
            engine = open_engine(url)
            engines[size] = engine
            ensure_agent_tables(engine)
            t = time.perf_counter()
            load(engine, dialect, runs, calls)
            print(
                f"{dialect} {size}: runs={runs:,} tool_calls={calls:,} "
                f"proposals={int(runs * PROPOSALS_PER_RUN):,} load_s={time.perf_counter() - t:.1f}"
            )
        figures(dialect, engines["big"], engines["small"])
        for engine in engines.values():
            engine.dispose()
    finally:
        for name in databases:
            drop_database(dialect, name)


def main() -> None:
    print(
        f"bench console: runs={RUNS:,} tool_calls={CALLS:,} repeat={REPEAT} "
        f"cpus={os.cpu_count()} date={time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    for dialect in dialects():
        if dialect != "sqlite":
            bench(dialect)


if __name__ == "__main__":
    main()
