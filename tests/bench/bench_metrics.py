"""Benchmark `metrics`: what one collection of `agora metrics` costs on a large database (issue 30).

For PostgreSQL and MariaDB (local servers) it creates a scratch database and loads, server-side:

- the ledger of ``bench_fold.py`` (``BENCH_METRICS_ROWS`` rows, default 2,000,000: 500 actors in
  40 tenants, power-law activity, 12 models, one unpriced), spread from 2025-01-01 to the
  benchmark's clock, 2025-06-15T12:00Z (~12,000 rows a day);
- as many runs over the same span (85 % completed, 8 % failed, 5 % cancelled, 2 % running);
- 200,000 action proposals over the same span: 0.2 % pending, 0.1 % queued, a few running, 3 %
  failed, the rest settled or rejected;
- 20,000 stream frames (400 runs; half idle past the TTL) and 141 saved budgets (40 tenants'
  months, 100 actors' days, the platform's month);

then folds the ledger through 2025-06-14 (``fold``: what the nightly `agora spend fold` does)
and measures, in rounds that rotate the order of the variants (the median of
``BENCH_METRICS_ROUNDS`` rounds, default 9, with the range):

1. ``collect_metrics`` — every group, one scrape's snapshot as `agora metrics serve` computes
   it — with the fold as it is ("folded") vs with every folded day marked dirty, so that spend
   and budgets read those days from the raw ledger ("not folded": the database before its first
   `agora spend fold`), and "serve's": folded, with the ``MetricsCache`` that `metrics serve`
   keeps between collections (the month's folded days' sums reused while they stand); each
   with the time spent in statements (driver execute to last row: the server's work plus round
   trips and decoding); goal: under 100 ms;
2. each group's time, folded and not;
3. one `agora metrics` subprocess (start-up, imports and the exposition included), for honesty;
4. the plan of every statement a collection runs (EXPLAIN), to show the named indexes in use.

Run: ``python tests/bench/bench_metrics.py`` (``BENCH_METRICS_ROWS=200000`` for a quick run;
``AGORA_BENCH_DIALECTS=postgresql`` for one dialect). The database is dropped at the end.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import bench_fold
from _common import create_database, dialects, drop_database
from bench_fold import analyze, plan
from sqlalchemy import text

from agora_cli.store._budgets import set_budget
from agora_cli.store._clock import ManualClock, parse_instant
from agora_cli.store._engine import open_engine
from agora_cli.store._fold import fold
from agora_cli.store._metrics import GROUPS, MetricsCache, collect_metrics
from agora_cli.store._provision import ensure_agent_tables
from agora_cli.store._schema import action_proposal, run

ROWS = int(os.environ.get("BENCH_METRICS_ROWS", "2000000"))
ROUNDS = int(os.environ.get("BENCH_METRICS_ROUNDS", "9"))
PROPOSALS = 200_000
ACTORS = 500
START = bench_fold.START  # 2025-01-01T00:00:00Z
NOW = parse_instant("2025-06-15T12:00:00Z")
FOLD_THROUGH = date(2025, 6, 14)
TOOLS = ["refund", "cancel", "email", "export", "wire", "lookup", "escalate", "close"]
AGORA = Path(sys.executable).with_name("agora")


def _concat(dialect: str, *parts: str) -> str:
    return " || ".join(parts) if dialect == "postgresql" else f"CONCAT({', '.join(parts)})"


def _numbers(dialect: str, lo: int, hi: int) -> str:
    """A derived table ``nums(n)`` of lo+1 .. hi (at most 1,000,000 numbers)."""
    if dialect == "postgresql":
        return f"generate_series({lo + 1}::bigint, {hi}) AS nums(n)"
    return (
        "(WITH RECURSIVE d(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM d WHERE k < 999) "
        f"SELECT {lo} + a.k * 1000 + b.k + 1 AS n FROM d a CROSS JOIN d b "
        f"WHERE a.k < {(hi - lo + 999) // 1000} AND {lo} + a.k * 1000 + b.k + 1 <= {hi}) nums"
    )


def _at(dialect: str, count: int) -> str:
    """Row n's instant: spread evenly from START to NOW."""
    span = NOW - START
    if dialect == "mysql":
        return f"{START} + ((n - 1) * {span}) DIV {count}"
    return f"{START} + ((n::bigint - 1) * {span}) / {count}"


def _load_table(engine: Any, dialect: str, table: Any, exprs: dict[str, str], count: int) -> None:
    """Insert ``count`` rows of ``exprs`` (SQL of n) server-side, the table's secondary
    indexes dropped first and built again after."""
    indexes = [i for i in table.indexes if dialect != "mysql" or "thread_id" not in i.columns]
    with engine.begin() as conn:
        for index in indexes:
            index.drop(conn)
    chunk = 1_000_000 if dialect == "postgresql" else 500_000
    for lo in range(0, count, chunk):
        hi = min(count, lo + chunk)
        with engine.begin() as conn:
            if dialect == "mysql":
                conn.exec_driver_sql("SET SESSION foreign_key_checks = 0, unique_checks = 0")
            conn.exec_driver_sql(
                f"INSERT INTO {table.name} ({', '.join(exprs)}) "
                f"SELECT {', '.join(exprs.values())} FROM {_numbers(dialect, lo, hi)}"
            )
    with engine.begin() as conn:
        for index in table.indexes:
            if index in indexes:
                index.create(conn)
    analyze(engine, dialect, table.name)


def _actor(dialect: str, n: str) -> str:
    return f"MOD({n} * 7919, {ACTORS + 1})"


def _tenant(dialect: str, actor: str) -> str:
    return (
        f"CASE WHEN MOD({actor}, 10) = 9 THEN NULL ELSE "
        + _concat(dialect, "'tenant-'", f"MOD({actor}, {bench_fold.TENANTS})")
        + " END"
    )


def load_runs(engine: Any, dialect: str, count: int) -> None:
    actor = _actor(dialect, "n")
    status = (
        "CASE WHEN MOD(n, 100) < 85 THEN 'completed' WHEN MOD(n, 100) < 93 THEN 'failed' "
        "WHEN MOD(n, 100) < 98 THEN 'cancelled' ELSE 'running' END"
    )
    exprs = {
        "id": _concat(dialect, "'r'", "n"),
        "thread_id": _concat(dialect, "'t-'", actor),
        "actor_ref": _concat(dialect, "'actor-'", actor),
        "tenant_ref": _tenant(dialect, actor),
        "agent_name": "'support'",
        "status": status,
        "started_at": _at(dialect, count),
    }
    _load_table(engine, dialect, run, exprs, count)


def load_proposals(engine: Any, dialect: str, count: int) -> None:
    actor = _actor(dialect, "n")
    at = _at(dialect, count)
    k = "MOD(n, 1000)"
    quoted = ", ".join(f"'{t}'" for t in TOOLS)
    pick = f"1 + MOD(n * 31, {len(TOOLS)})"
    tool = f"(ARRAY[{quoted}])[{pick}]" if dialect == "postgresql" else f"ELT({pick}, {quoted})"
    # 0-1: pending (half never expire), 2: queued, 3 (1 in 5,000): running, 4-33: failed,
    # 34-63: rejected, the rest: succeeded
    running = f"{k} = 3 AND MOD(n, 5000) = 3"
    state = (
        f"CASE WHEN {k} < 2 THEN 'pending' WHEN {k} = 2 THEN 'queued' "
        f"WHEN {running} THEN 'running' ELSE 'done' END"
    )
    exprs = {
        "id": _concat(dialect, "'ap_'", "n"),
        "idempotency_key": _concat(dialect, "'k'", "n"),
        "tenant_ref": _tenant(dialect, actor),
        "tenant_key": f"COALESCE({_tenant(dialect, actor)}, '')",
        "actor_ref": _concat(dialect, "'actor-'", actor),
        "thread_id": _concat(dialect, "'t-'", actor),
        "tool_name": tool,
        "input": "'{}'",
        "decision": (
            f"CASE WHEN {k} < 2 THEN 'pending' WHEN {k} BETWEEN 34 AND 63 THEN 'rejected' "
            "ELSE 'approved' END"
        ),
        "execution_state": (
            f"CASE WHEN {k} < 2 OR {k} BETWEEN 34 AND 63 THEN NULL WHEN {k} = 2 THEN 'queued' "
            f"WHEN {running} THEN 'running' WHEN {k} BETWEEN 4 AND 33 THEN 'failed' "
            "ELSE 'succeeded' END"
        ),
        "discovery_state": state,
        "discovery_at": (
            f"CASE WHEN {k} = 0 THEN {at} + 604800000 WHEN {k} = 1 THEN NULL "
            f"WHEN {k} = 2 THEN {at} WHEN {running} THEN {at} + 30000 ELSE NULL END"
        ),
        "settled_at": f"CASE WHEN {k} BETWEEN 4 AND 33 OR {k} >= 64 THEN {at} + 5000 END",
        "created_at": at,
        "updated_at": at,
    }
    _load_table(engine, dialect, action_proposal, exprs, count)


def load_rest(engine: Any) -> None:
    """Frames (Python-side: 20,000 rows) and the saved budgets."""
    rows = [
        {
            "run_id": f"fr-{r}",
            "seq": s,
            "frame": "{}",
            "created_at": NOW - (7_200_000 if r % 2 else 60_000) + s,
        }
        for r in range(400)
        for s in range(50)
    ]
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO agent_stream_frame (run_id, seq, frame, created_at) "
                "VALUES (:run_id, :seq, :frame, :created_at)"
            ),
            rows,
        )
        for t in range(bench_fold.TENANTS):
            set_budget(conn, scope_kind="tenant", scope_ref=f"tenant-{t}", period="month",
                       limit_usd=50.0, created_by="bench")  # fmt: skip
        for a in range(100):
            set_budget(conn, scope_kind="actor", scope_ref=f"actor-{a}", period="day",
                       limit_usd=0.5, limit_tokens=100_000, created_by="bench")  # fmt: skip
        set_budget(conn, scope_kind="global", scope_ref=None, period="month", limit_usd=5000.0,
                   created_by="bench")  # fmt: skip


def load_all(engine: Any, dialect: str) -> None:
    t = time.perf_counter()
    bench_fold.SPAN = NOW - START  # the ledger ends at the clock (read when its SQL is built)
    bench_fold.load(engine, dialect, ROWS, ACTORS)
    load_runs(engine, dialect, ROWS)
    load_proposals(engine, dialect, PROPOSALS)
    load_rest(engine)
    loaded = time.perf_counter() - t
    t = time.perf_counter()
    result = fold(engine, through=FOLD_THROUGH, clock=ManualClock(NOW))
    analyze(engine, dialect, "agent_usage_daily")
    with engine.connect() as conn:
        fold_rows = conn.exec_driver_sql("SELECT COUNT(*) FROM agent_usage_daily").scalar()
        conn.rollback()
    print(
        f"{dialect}: loaded {ROWS:,} ledger rows, {ROWS:,} runs, {PROPOSALS:,} proposals in "
        f"{loaded:.0f} s; folded {result.folded} days ({result.rows:,} rows -> {fold_rows:,} "
        f"fold rows) in {time.perf_counter() - t:.0f} s",
        flush=True,
    )


# --- measuring ----------------------------------------------------------------------------------


def _dirty(engine: Any, dirty: int) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE agent_usage_fold SET dirty = {dirty}")


def rotated(variants: dict[str, Callable[[], Any]], rounds: int) -> dict[str, list[Any]]:
    """Each variant's results over ``rounds`` rounds, the order rotating every round (one
    warm-up round first)."""
    names = list(variants)
    for name in names:
        variants[name]()
    found: dict[str, list[Any]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            found[name].append(variants[name]())
    return found


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values):7.1f} ms (range {min(values):.1f}-{max(values):.1f})"


def bench(dialect: str) -> None:
    name, url = create_database(dialect, "agora_bench_metrics")
    engine = open_engine(url)
    try:
        ensure_agent_tables(engine)
        load_all(engine, dialect)
        clock = ManualClock(NOW)

        statements = _StatementClock(engine)
        serve_cache = MetricsCache()

        def collection(dirty: int, cache: MetricsCache | None = None) -> Callable[[], Any]:
            def go() -> Any:
                _dirty(engine, dirty)
                statements.reset()
                snap = collect_metrics(engine, clock=clock, cache=cache)
                assert snap.ok, snap.errors
                return snap, statements.ms

            return go

        variants = {
            "folded": collection(0),
            "not folded": collection(1),
            "serve": collection(0, serve_cache),
        }
        found = rotated(variants, ROUNDS)
        folded, raw = [s for s, _ in found["folded"]], [s for s, _ in found["not folded"]]
        assert folded[0].spend.folded_days == 14 and raw[0].spend.folded_days == 0
        assert len(folded[0].spend.month) == len(raw[0].spend.month) > 0
        assert found["serve"][-1][0].spend == folded[-1].spend and serve_cache.hits >= ROUNDS
        whole = {k: [s.seconds * 1000 for s, _ in v] for k, v in found.items()}
        sql = {k: [ms for _, ms in v] for k, v in found.items()}
        for name, label in (("folded", "folded:    "), ("not folded", "not folded:"),
                            ("serve", "serve's:   ")):  # fmt: skip
            print(f"{dialect} collection, {label} {_ms(whole[name])}   "
                  f"in statements {_ms(sql[name])}")  # fmt: skip
        ratio = statistics.median(whole["not folded"]) / statistics.median(whole["folded"])
        print(f"{dialect} not folded / folded: {ratio:.1f}x")
        for group in GROUPS:
            f_ms = [s.group_seconds[group] * 1000 for s in folded]
            r_ms = [s.group_seconds[group] * 1000 for s in raw]
            c_ms = [s.group_seconds[group] * 1000 for s, _ in found["serve"]]
            print(f"{dialect}   {group:<10} folded {_ms(f_ms)}   not folded {_ms(r_ms)}   "
                  f"serve's {_ms(c_ms)}")  # fmt: skip
        statements.close()
        _dirty(engine, 0)
        cli = rotated({"cli": lambda: _cli(url)}, max(3, ROUNDS // 3))["cli"]
        print(f"{dialect} `agora metrics` subprocess (the system clock's today), {_ms(cli)}")
        for group in GROUPS:
            _plans(engine, dialect, group, clock)
    finally:
        engine.dispose()
        drop_database(dialect, name)


class _StatementClock:
    """The time a collection spends in its statements: from the driver's execute to its last
    row fetched (the server's work, the round trips and the driver's decoding: an upper bound
    of the server time), summed per collection."""

    def __init__(self, engine: Any) -> None:
        from sqlalchemy import event

        self.engine, self.ms, self._start = engine, 0.0, 0.0
        self._event = event
        event.listen(engine, "before_cursor_execute", self._before)
        event.listen(engine, "after_cursor_execute", self._after)

    def _before(self, *_: Any) -> None:
        self._start = time.perf_counter()

    def _after(self, *_: Any) -> None:
        self.ms += (time.perf_counter() - self._start) * 1000

    def reset(self) -> None:
        self.ms = 0.0

    def close(self) -> None:
        self._event.remove(self.engine, "before_cursor_execute", self._before)
        self._event.remove(self.engine, "after_cursor_execute", self._after)


def _cli(url: str) -> float:
    t = time.perf_counter()
    done = subprocess.run([str(AGORA), "metrics", "--db", url], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return (time.perf_counter() - t) * 1000


def _plans(engine: Any, dialect: str, group: str, clock: ManualClock) -> None:
    """EXPLAIN every statement the group runs (catalog reads of the schema group aside)."""
    from sqlalchemy import event

    seen: list[tuple[str, Any]] = []

    def listen(_c: Any, _cur: Any, statement: str, params: Any, _ctx: Any, _many: bool) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "agent_" in statement:
            seen.append((statement, params))

    event.listen(engine, "before_cursor_execute", listen)
    try:
        collect_metrics(engine, clock=clock, groups=[group])  # type: ignore[list-item]
    finally:
        event.remove(engine, "before_cursor_execute", listen)
    if group == "schema":
        print(f"{dialect} plan schema: {len(seen)} catalog statements (db check's)")
        return
    with engine.connect() as conn:
        for statement, params in seen:
            head = " ".join(statement.split())[:60]
            print(f"{dialect} plan {group}: [{head}…] {plan(conn, dialect, statement, params)}")
        conn.rollback()


def main() -> None:
    for dialect in dialects():
        if dialect == "sqlite":
            continue  # the loaders are PostgreSQL's and MariaDB's (as bench_fold's)
        bench(dialect)


if __name__ == "__main__":
    main()
