"""Benchmark `fold`: reports over the daily ledger fold vs the raw ledger (issue 16).

For each dialect (PostgreSQL and MariaDB, local servers) it creates two scratch databases, loads a
ledger server-side into each — ``--rows`` (default 20,000,000) and a tenth of it — spread evenly
over the 365 days of 2025, folds both with the library's ``fold`` (the code behind ``agora spend
fold``), and then measures side by side, the runs of each figure interleaved after a warm-up:

1. ``spend(by="model")`` for the whole year: folded (the per-model rollup, the optional
   ``rollup`` branch) vs ``raw=True`` (goal: at least 100x faster), and vs the same report read from
   ``agent_usage_daily`` alone, as before the rollup;
2. the same for one month, June (goal: at least 20x);
3. ``quota`` for one tenant at 2025-06-30 12:00 (``budgets.scope_quota``, what ``agora quota
   --tenant`` runs: its day and month windows) vs the same windows read raw
   (``sum_scope_usage(raw=True)``), and the month window alone folded vs raw (goal: at least 20x);
4. folding one day (~55k rows at full size: ``fold(refold=(day, day))``, what ``agora spend
   fold --refold D..D`` runs: it marks the day dirty, then in one transaction claims it, deletes
   its fold rows and writes them again with one ``INSERT … SELECT … GROUP BY``) vs the same
   ``GROUP BY`` run bare, its rows fetched (goal: at most 1.5x);
5. the folded year report on the small ledger vs the large one (it should not grow with rows);
6. one end-to-end ``agora spend --by model --json`` subprocess over the year, folded and
   ``--raw``, for honesty (process start included).

Every folded report is checked against the raw one (every group: turns and tokens equal, costs
within 1e-9 relative). The plans of the statements each report issues are printed (EXPLAIN).

Data: a platform of ``--actors`` actors (default 500) in 40 tenants (1 actor in 10 has none),
activity power-law distributed (actor = floor(A * u^3): the top 1 % of actors make ~21 % of the
turns), each actor on one main model (85 % of its turns), a second (14 %) and now and then any of
the 12 (1 %); one model unpriced (NULL cost), 1 in 10 costs provider-reported, cache reads on 1 row
in 3. All columns are deterministic functions of the row number. Each actor has one thread, which
holds the actor's tenant; ``--inherit P`` loads P rows in 100 as the runtime (adonis-agent)
writes them, with no ``tenant_ref`` of their own, so their tenant is the thread's (issue 23).
The fold's size is what the reports read: the script prints it (ledger rows per fold row).

Run: ``python tests/bench/bench_fold.py`` (full size; MariaDB's load takes many minutes), or
``python tests/bench/bench_fold.py --rows 2000000 --dialect postgresql`` for a quick one.
``--keep`` leaves the databases in place (their URLs are printed) for EXPLAIN by hand;
``--reuse SMALL,BIG`` measures two kept (or only loaded) databases: it brings them to the
current schema and folds what is not folded first.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from typing import Any

from _common import ADMIN, create_database, drop_database
from sqlalchemy import event, text
from sqlalchemy.engine import make_url

from agora_cli.store import _ledger as ledger
from agora_cli.store._budgets import scope_quota, sum_scope_usage
from agora_cli.store._clock import DAY_MS, day_window, month_window, parse_instant
from agora_cli.store._engine import normalize_url, open_engine
from agora_cli.store._fold import create_rollup, day_number, fold, fold_day, verify
from agora_cli.store._ledger import SpendReport, spend
from agora_cli.store._provision import ensure_agent_tables
from agora_cli.store._schema import token_usage

YEAR = (date(2025, 1, 1), date(2025, 12, 31))
JUNE = (date(2025, 6, 1), date(2025, 6, 30))
START = parse_instant("2025-01-01T00:00:00Z")
SPAN = 365 * DAY_MS
QUOTA_AT = parse_instant("2025-06-30T12:00:00Z")
FOLD_DAY = date(2025, 7, 15)
TENANTS = 40
TENANT = "tenant-3"
INHERIT_PCT = 0  # --inherit: rows in 100 with no tenant_ref of their own (the runtime's)
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
FIGURES = ("spend", "quota", "fold", "verify", "growth", "cli")
P = 65521  # a prime below 2**16: cubes of residues times the actor count stay within BIGINT


def row_expressions(n: str, dialect: str, *, base: int, count: int, actors: int) -> dict[str, str]:
    """SQL for each ledger column as a function of the row number ``n`` (base < n <= base+count).

    The rows ``base + 1 .. base + count`` are spread evenly over the year.
    """

    def concat(*parts: str) -> str:
        return " || ".join(parts) if dialect == "postgresql" else f"CONCAT({', '.join(parts)})"

    def mod(a: str, b: int) -> str:
        return f"MOD({a}, {b})"  # not %: the drivers read it as a placeholder

    div = "DIV" if dialect == "mysql" else "/"
    r1 = mod(f"{n} * 40503", P)  # the actor draw
    r2 = mod(f"{n} * 69069 + 7", 1000)  # the model draw
    r3 = mod(f"{n} * 2654435761", 1000003)  # token and cost sizes
    # actor = floor(A * (r1 / P) ** 3), in integers
    actor = f"(({r1}) * ({r1}) * ({r1}) * {actors}) {div} {P * P * P}"
    main = mod(f"({actor}) * 5", len(MODELS))
    second = mod(f"({actor}) * 7 + 3", len(MODELS))
    pick = (
        f"CASE WHEN {r2} < 850 THEN {main} WHEN {r2} < 990 THEN {second} "
        f"ELSE {mod(r3, len(MODELS))} END"
    )
    quoted = ", ".join(f"'{m}'" for m in MODELS)
    model = (
        f"(ARRAY[{quoted}])[1 + {pick}]"
        if dialect == "postgresql"
        else f"ELT(1 + {pick}, {quoted})"
    )
    unpriced = f"({pick}) = {len(MODELS) - 1}"
    created = (
        f"{START} + (({n} - {base + 1}) * {SPAN}) DIV {count}"
        if dialect == "mysql"
        else f"{START} + (({n}::bigint - {base + 1}) * {SPAN}) / {count}"
    )
    # --inherit P: P rows in 100 written as the runtime writes them, with no tenant_ref (the
    # tenant is the thread's: one thread per actor, holding the actor's tenant).
    own = f"{mod(n, 100)} >= {INHERIT_PCT} AND {mod(actor, 10)} <> 9"
    return {
        "id": concat("'u'", n),
        "thread_id": concat("'t-'", actor),
        "actor_ref": concat("'actor-'", actor),
        "tenant_ref": f"CASE WHEN {own} THEN " + concat("'tenant-'", mod(actor, TENANTS)) + " END",
        "model_id": model,
        "purpose": "'chat'",
        "input_tokens": f"100 + {mod(r3, 5000)}",
        "output_tokens": f"10 + {mod(f'{r3} * 23', 1000)}",
        "cache_read_tokens": f"CASE WHEN {mod(n, 3)} = 0 THEN {mod(f'{r3} * 29', 100)} END",
        "cache_write_tokens": f"CASE WHEN {mod(n, 11)} = 0 THEN 50 END",
        "cost_usd": f"CASE WHEN {unpriced} THEN NULL ELSE {mod(f'{r3} * 37', 1000)} / 100000.0 END",
        "cost_source": f"CASE WHEN {unpriced} THEN NULL WHEN {mod(n, 10)} = 1 THEN 'provider' "
        "ELSE 'estimate' END",
        "created_at": created,
    }


def load(engine: Any, dialect: str, rows: int, actors: int) -> None:
    """Load ``rows`` ledger rows server-side; secondary indexes dropped first, rebuilt after."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO agent_thread (id, actor_ref, tenant_ref, title, created_at, "
                "updated_at) VALUES (:id, :actor, :tenant, 'bench', 0, 0)"
            ),
            [
                {
                    "id": f"t-{a}",
                    "actor": f"actor-{a}",
                    "tenant": None if a % 10 == 9 else f"tenant-{a % TENANTS}",
                }
                for a in range(actors + 1)
            ],
        )
    # MySQL keeps the foreign key's index (it refuses to drop it).
    indexes = [i for i in token_usage.indexes if dialect != "mysql" or "thread_id" not in i.columns]
    with engine.begin() as conn:
        for index in indexes:
            index.drop(conn)
    exprs = row_expressions("n", dialect, base=0, count=rows, actors=actors)
    insert = (
        f"INSERT INTO agent_token_usage ({', '.join(exprs)}) SELECT {', '.join(exprs.values())} "
    )
    chunk = 1_000_000 if dialect == "postgresql" else 500_000
    for lo in range(0, rows, chunk):
        hi = min(rows, lo + chunk)
        with engine.begin() as conn:
            if dialect == "postgresql":
                conn.exec_driver_sql(
                    insert + f"FROM generate_series({lo + 1}::bigint, {hi}) AS g(n)"
                )
            else:
                conn.exec_driver_sql("SET SESSION foreign_key_checks = 0, unique_checks = 0")
                # numbers from a recursive CTE of 0..999 (MariaDB's max_recursive_iterations
                # may be 1000), squared: lo + a * 1000 + b + 1 covers a chunk of <= 1M rows
                source = (
                    "FROM (WITH RECURSIVE d(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM d "
                    f"WHERE k < 999) SELECT {lo} + a.k * 1000 + b.k + 1 AS n "
                    f"FROM d a CROSS JOIN d b WHERE a.k < {(hi - lo + 999) // 1000} "
                    f"AND {lo} + a.k * 1000 + b.k + 1 <= {hi}) nums"
                )
                conn.exec_driver_sql(insert + source)
        print(f"  loaded {hi:,} / {rows:,}", flush=True)
    with engine.begin() as conn:
        for index in indexes:
            index.create(conn)
        loaded = conn.exec_driver_sql("SELECT COUNT(*) FROM agent_token_usage").scalar()
        assert loaded == rows, f"loaded {loaded} rows, not {rows}"
    analyze(engine, dialect, "agent_token_usage")


def analyze(engine: Any, dialect: str, table: str) -> None:
    if dialect == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql(f"VACUUM ANALYZE {table}")
    else:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"ANALYZE TABLE {table}")


# --- timing -----------------------------------------------------------------------------------


def _timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


def interleaved(fns: dict[str, Callable[[], Any]], repeat: int) -> dict[str, float]:
    """Median ms of each function, runs interleaved so that noise hits all of them alike."""
    for fn in fns.values():
        fn()  # warm caches and connections
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            samples[name].append(_timed(fn))
    return {name: statistics.median(values) for name, values in samples.items()}


# --- plans ------------------------------------------------------------------------------------


@contextmanager
def captured(conn: Any) -> Iterator[list[tuple[str, Any]]]:
    """The SELECT statements and the fold's INSERT … SELECT (and their parameters) run on
    ``conn`` inside the block."""
    seen: list[tuple[str, Any]] = []

    def listen(_c: Any, _cur: Any, statement: str, params: Any, _ctx: Any, _many: bool) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "INSERT INTO AGENT_USAGE_")):
            seen.append((statement, params))

    event.listen(conn, "before_cursor_execute", listen)
    try:
        yield seen
    finally:
        event.remove(conn, "before_cursor_execute", listen)


def plan(conn: Any, dialect: str, statement: str, params: Any) -> str:
    if dialect == "postgresql":
        doc = conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + statement, params).scalar()
        doc = doc if isinstance(doc, list) else json.loads(doc)
        found: list[str] = []

        def walk(node: dict[str, Any]) -> None:
            label = node["Node Type"]
            if "Relation Name" in node:
                label += f" {node['Relation Name']}"
            if "Index Name" in node:
                label += f" on {node['Index Name']}"
            label += f" (~{int(node.get('Plan Rows', 0)):,})"
            found.append(label)
            for child in node.get("Plans", []):
                walk(child)

        walk(doc[0]["Plan"])
        return " > ".join(found)
    rows = conn.exec_driver_sql("EXPLAIN " + statement, params).mappings().all()
    return "; ".join(
        f"{r['table']} {r['type']} key={r['key']} rows~{r['rows']}"
        + (f" ({r['Extra']})" if r.get("Extra") else "")
        for r in rows
    )


def print_plans(conn: Any, dialect: str, what: str, fn: Callable[[], Any]) -> None:
    with captured(conn) as seen:
        fn()
    conn.rollback()
    seen = [(s, p) for s, p in seen if "agent_usage_fold." not in s.split("FROM")[0]]
    for statement, params in seen:
        head = " ".join(statement.split())[:70]
        print(f"{dialect} plan {what}: [{head}…] {plan(conn, dialect, statement, params)}")
    conn.rollback()


@contextmanager
def without_rollup() -> Iterator[None]:
    """Reports read ``agent_usage_daily``, as without the ``rollup`` branch."""
    saved = ledger.rollup_covers
    ledger.rollup_covers = lambda conn, parts: False  # type: ignore[assignment]
    try:
        yield
    finally:
        ledger.rollup_covers = saved


# --- exactness --------------------------------------------------------------------------------


def same_report(a: SpendReport, b: SpendReport) -> None:
    assert len(a.rows) == len(b.rows), (len(a.rows), len(b.rows))
    left = {r.key: r for r in a.rows}
    for r in b.rows:
        o = left[r.key]
        ints = ("turns", "input_tokens", "output_tokens", "cache_read_tokens")
        ints += ("cache_write_tokens", "unpriced_turns")
        for name in ints:
            assert getattr(o, name) == getattr(r, name), (r.key, name)
        for name in ("cost_usd", "estimated_usd"):
            x, y = getattr(o, name), getattr(r, name)
            assert (x is None) == (y is None), (r.key, name)
            if x is not None:
                assert abs(x - y) <= 1e-9 * max(1.0, abs(x)), (r.key, name, x, y)


def same_sums(a: tuple[int, float, int], b: tuple[int, float, int]) -> None:
    assert a[0] == b[0] and a[2] == b[2], (a, b)
    assert abs(a[1] - b[1]) <= 1e-9 * max(1.0, abs(a[1])), (a, b)


# --- the run ----------------------------------------------------------------------------------


def prepare(dialect: str, rows: int, actors: int) -> tuple[str, str, Any]:
    name, url = create_database(dialect, "agora_bench_fold")
    engine = open_engine(url)
    schema_and_fold(
        engine, dialect, f"ledger rows={rows:,}", load=lambda: load(engine, dialect, rows, actors)
    )
    return name, url, engine


def reuse(dialect: str, name: str) -> tuple[str, str, Any]:
    """A database a ``--keep`` run left, loaded: brought to the current schema and folded
    (days the per-model rollup does not cover are refolded with it)."""
    url = make_url(normalize_url(ADMIN[dialect])).set(database=name)
    text_url = url.render_as_string(hide_password=False)
    engine = open_engine(text_url)
    schema_and_fold(engine, dialect, name)
    return name, text_url, engine


def schema_and_fold(
    engine: Any, dialect: str, label: str, load: Callable[[], None] | None = None
) -> None:
    """The agent tables and the rollup branch's (``agora db upgrade rollup@head``), the ledger
    loaded (``load``), then everything not folded folded, and the sizes printed."""
    ensure_agent_tables(engine)
    with engine.begin() as conn:
        create_rollup(conn)
    loaded = ""
    if load is not None:
        t = time.perf_counter()
        load()
        loaded = f"load {time.perf_counter() - t:.0f} s; "
    t = time.perf_counter()
    result = fold(engine, through=YEAR[1])
    if result.folded:
        analyze(engine, dialect, "agent_usage_daily")
        analyze(engine, dialect, "agent_usage_model_daily")
        print(
            f"{dialect} {label}: {loaded}fold of {result.folded} days ({result.rows:,} rows) "
            f"{time.perf_counter() - t:.0f} s -> {fold_sizes(engine)}",
            flush=True,
        )


def fold_sizes(engine: Any) -> str:
    with engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT COUNT(*) FROM agent_token_usage").scalar() or 0
        daily = conn.exec_driver_sql("SELECT COUNT(*) FROM agent_usage_daily").scalar() or 0
        rollup = conn.exec_driver_sql("SELECT COUNT(*) FROM agent_usage_model_daily").scalar()
        conn.rollback()
    return (
        f"{daily:,} fold rows ({rows / max(1, daily):.1f} ledger rows per fold row), "
        f"{rollup or 0:,} per-model rollup rows ({rows / max(1, rollup or 0):,.0f} per row)"
    )


def bench(
    dialect: str,
    rows: int,
    actors: int,
    repeat: int,
    keep: bool,
    reused: list[str],
    figures: set[str],
) -> None:
    small_rows = rows // 10
    made: list[tuple[str, str, Any]] = []
    try:
        if reused:
            made += [reuse(dialect, name) for name in reused]
            keep = True
        else:
            made.append(prepare(dialect, small_rows, actors))
            made.append(prepare(dialect, rows, actors))
        run_figures(dialect, rows, small_rows, made[1], made[0], repeat, figures)
    finally:
        for name, url, engine in made:
            engine.dispose()
            if keep:
                print(f"{dialect} kept: {url}")
            else:
                drop_database(dialect, name)


def run_figures(
    dialect: str,
    rows: int,
    small_rows: int,
    big: tuple[str, str, Any],
    small: tuple[str, str, Any],
    repeat: int,
    figures: set[str],
) -> None:
    _, url, engine = big
    _, _, small_engine = small
    conn = engine.connect()
    small_conn = small_engine.connect()

    def report(c: Any, window: tuple[date, date], raw: bool) -> SpendReport:
        r = spend(c, by="model", from_day=window[0], to_day=window[1], raw=raw)
        c.rollback()
        return r

    def daily(c: Any, window: tuple[date, date]) -> SpendReport:
        """The folded report as it was before the per-model rollup: ``agent_usage_daily``."""
        with without_rollup():
            return report(c, window, False)

    # 1, 2: spend over the year and a month, folded vs raw (exactness first)
    if "spend" in figures:
        for label, window in (("year", YEAR), ("month", JUNE)):
            folded, raw = report(conn, window, False), report(conn, window, True)
            same_report(folded, raw)
            same_report(daily(conn, window), raw)
            print_plans(
                conn, dialect, f"spend {label} folded", lambda w=window: report(conn, w, False)
            )
            print_plans(conn, dialect, f"spend {label} daily fold", lambda w=window: daily(conn, w))
            print_plans(conn, dialect, f"spend {label} raw", lambda w=window: report(conn, w, True))
            n = repeat if label == "month" else max(3, repeat // 2)
            ms = interleaved(
                {
                    "folded": lambda w=window: report(conn, w, False),
                    "daily": lambda w=window: daily(conn, w),
                    "raw": lambda w=window: report(conn, w, True),
                },
                n,
            )
            goal = 100 if label == "year" else 20
            print(
                f"{dialect} spend --by model, {label} ({raw.total.turns:,} ledger rows, "
                f"{folded.folded_days} folded days, equal to raw): folded {ms['folded']:.1f} ms vs "
                f"raw {ms['raw']:.1f} ms: {ms['raw'] / ms['folded']:.0f}x faster "
                f"(goal >= {goal}x); "
                f"from agent_usage_daily alone (before the model rollup) {ms['daily']:.1f} ms: "
                f"{ms['raw'] / ms['daily']:.0f}x",
                flush=True,
            )

    # 3: quota of one tenant (day and month windows), folded vs raw
    if "quota" in figures:

        def sums(c: Any, bounds: tuple[int, int], raw: bool) -> tuple[int, float, int]:
            s = sum_scope_usage(
                c,
                scope_kind="tenant",
                scope_ref=TENANT,
                from_ms=bounds[0],
                to_ms=min(bounds[1], QUOTA_AT),
                raw=raw,
            )
            c.rollback()
            return s

        at_day = date(2025, 6, 30)
        windows = (day_window(at_day), month_window(at_day))

        def quota_store() -> list[Any]:
            statuses = scope_quota(conn, scope_kind="tenant", scope_ref=TENANT, at_ms=QUOTA_AT)
            conn.rollback()
            return statuses

        def quota_raw() -> list[tuple[int, float, int]]:
            return [sums(conn, w, True) for w in windows]

        statuses = quota_store()
        for status, (tokens, usd, unpriced) in zip(statuses, quota_raw(), strict=True):
            same_sums((status.tokens, status.usd, status.unpriced_turns), (tokens, usd, unpriced))
        for raw in (False, True):
            print_plans(
                conn,
                dialect,
                f"quota month {'raw' if raw else 'folded'}",
                lambda raw=raw: sums(conn, windows[1], raw),
            )
        ms = interleaved(
            {
                "quota": quota_store,
                "quota_raw": quota_raw,
                "month": lambda: sums(conn, windows[1], False),
                "month_raw": lambda: sums(conn, windows[1], True),
            },
            repeat,
        )
        month = statuses[-1]
        print(
            f"{dialect} quota --tenant {TENANT} at 2025-06-30 12:00 (month {month.tokens:,} "
            f"tokens, equal to raw): scope_quota (day + month) {ms['quota']:.2f} ms vs the same "
            f"windows raw {ms['quota_raw']:.1f} ms: {ms['quota_raw'] / ms['quota']:.0f}x faster; "
            f"month window alone {ms['month']:.2f} vs {ms['month_raw']:.1f} ms: "
            f"{ms['month_raw'] / ms['month']:.0f}x faster (goal >= 20x)",
            flush=True,
        )

    # 4: folding one day vs the same GROUP BY bare
    if "fold" in figures:
        n = day_number(FOLD_DAY)
        with engine.connect() as c:
            day_rows = c.exec_driver_sql(
                "SELECT COUNT(*) FROM agent_token_usage WHERE created_at BETWEEN "
                f"{n * DAY_MS} AND {(n + 1) * DAY_MS - 1}"
            ).scalar()
            c.rollback()
        tenant_key = "COALESCE(tenant_ref, '')"
        bare_sql = (
            f"SELECT model_id, actor_ref, {tenant_key}, COUNT(*), COALESCE(SUM(input_tokens), 0), "
            "COALESCE(SUM(output_tokens), 0), COALESCE(SUM(cache_read_tokens), 0), "
            "COALESCE(SUM(cache_write_tokens), 0), SUM(cost_usd), "
            "COALESCE(SUM(CASE WHEN cost_source = 'estimate' THEN cost_usd ELSE 0 END), 0), "
            "COALESCE(SUM(CASE WHEN cost_source = 'provider' THEN cost_usd ELSE 0 END), 0), "
            "COUNT(*) - COUNT(cost_usd) FROM agent_token_usage "
            f"WHERE created_at BETWEEN {n * DAY_MS} AND {(n + 1) * DAY_MS - 1} "
            f"GROUP BY model_id, actor_ref, {tenant_key}"
        )

        def fold_one() -> None:
            result = fold(engine, through=FOLD_DAY, refold=(FOLD_DAY, FOLD_DAY))
            assert result.folded == 1 and result.rows == day_rows, result

        def bare() -> None:
            conn.exec_driver_sql(bare_sql).all()
            conn.rollback()

        with engine.connect() as c:  # the fold's own statements, for the plan (rolled back)
            c.exec_driver_sql(f"UPDATE agent_usage_fold SET dirty = 1 WHERE day = {n}")
            print_plans(c, dialect, "fold one day", lambda c=c: fold_day(c, n, 0, rollup=True))
        ms = interleaved({"fold": fold_one, "bare": bare}, repeat)
        print(
            f"{dialect} fold one day ({day_rows:,} rows): fold {ms['fold']:.1f} ms vs the same "
            f"GROUP BY bare {ms['bare']:.1f} ms: ratio {ms['fold'] / ms['bare']:.2f} (goal <= 1.5)",
            flush=True,
        )

    # 4b: verifying a month (issue 25: per group and per measure) vs the ledger's GROUP BY alone
    if "verify" in figures:
        june = (date(2025, 6, 1), date(2025, 6, 30))
        lo, hi = day_number(june[0]) * DAY_MS, (day_number(june[1]) + 1) * DAY_MS - 1
        divide = "DIV" if dialect == "mysql" else "/"
        groups_sql = (
            f"SELECT created_at {divide} {DAY_MS}, model_id, actor_ref, COALESCE(tenant_ref, ''), "
            "COUNT(*), SUM(input_tokens), SUM(output_tokens), SUM(cache_read_tokens), "
            "SUM(cache_write_tokens), SUM(cost_usd), COUNT(cost_usd) FROM agent_token_usage "
            f"WHERE created_at BETWEEN {lo} AND {hi} "
            f"GROUP BY created_at {divide} {DAY_MS}, model_id, actor_ref, COALESCE(tenant_ref, '')"
        )

        def verify_month() -> None:
            result = verify(engine, from_day=june[0], to_day=june[1])
            assert result.mismatched == [] and result.days_checked == 30, result

        def groups() -> None:
            conn.exec_driver_sql(groups_sql).all()
            conn.rollback()

        ms = interleaved({"verify": verify_month, "groups": groups}, repeat)
        print(
            f"{dialect} verify June (30 days): {ms['verify']:.1f} ms vs the ledger's GROUP BY "
            f"(day, model, actor, tenant) fetched {ms['groups']:.1f} ms: ratio "
            f"{ms['verify'] / ms['groups']:.2f}",
            flush=True,
        )

    # 5: the folded year report, small ledger vs large
    if "growth" in figures:
        same_report(report(small_conn, YEAR, False), report(small_conn, YEAR, True))
        ms = interleaved(
            {
                "small": lambda: report(small_conn, YEAR, False),
                "big": lambda: report(conn, YEAR, False),
                "small_daily": lambda: daily(small_conn, YEAR),
                "big_daily": lambda: daily(conn, YEAR),
            },
            repeat,
        )
        print(
            f"{dialect} folded year report: {small_rows:,} rows {ms['small']:.1f} ms vs "
            f"{rows:,} rows {ms['big']:.1f} ms: ratio {ms['big'] / ms['small']:.2f} "
            f"for {rows / small_rows:.0f}x the rows; from agent_usage_daily alone (before the "
            f"model rollup) {ms['small_daily']:.1f} vs {ms['big_daily']:.1f} ms: ratio "
            f"{ms['big_daily'] / ms['small_daily']:.2f}",
            flush=True,
        )

    # 6: one end-to-end CLI run each way
    if "cli" in figures:
        cli = [str(AGORA), "spend", "--by", "model", "--from", YEAR[0].isoformat()]
        cli += ["--to", YEAR[1].isoformat(), "--db", url, "--json"]
        took: dict[str, float] = {}
        docs: dict[str, Any] = {}
        for label, extra in (("folded", []), ("raw", ["--raw"])):
            t = time.perf_counter()
            out = subprocess.run([*cli, *extra], capture_output=True, text=True, check=True).stdout
            took[label] = (time.perf_counter() - t) * 1000
            docs[label] = json.loads(out)
        assert docs["folded"]["total"]["turns"] == docs["raw"]["total"]["turns"] == rows
        print(
            f"{dialect} agora spend --by model --json, the year, one run each: folded "
            f"({docs['folded'].get('folded_days')} folded days) {took['folded']:.0f} ms vs --raw "
            f"{took['raw']:.0f} ms: {took['raw'] / took['folded']:.1f}x (process start included)",
            flush=True,
        )
    conn.close()
    small_conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000_000, help="ledger rows (large db)")
    parser.add_argument("--dialect", default="postgresql,mysql", help="postgresql,mysql")
    parser.add_argument("--actors", type=int, default=500, help="actors in the population")
    parser.add_argument("--repeat", type=int, default=5, help="interleaved runs per figure")
    parser.add_argument(
        "--inherit",
        type=int,
        default=0,
        help="rows in 100 loaded with no tenant_ref, as the runtime writes them (issue 23)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the databases")
    parser.add_argument("--figures", default=",".join(FIGURES), help="which figures to measure")
    parser.add_argument(
        "--reuse",
        default="",
        help="SMALL_DB,BIG_DB: measure databases a --keep run left (one dialect, same --rows)",
    )
    args = parser.parse_args()
    global INHERIT_PCT
    INHERIT_PCT = args.inherit
    reused = [name for name in args.reuse.split(",") if name]
    figures = {name.strip() for name in args.figures.split(",") if name.strip()}
    if figures - set(FIGURES):
        parser.error(f"--figures: choose from {','.join(FIGURES)}")
    if reused and (len(reused) != 2 or "," in args.dialect):
        parser.error("--reuse takes two database names (small,big) and one --dialect")
    print(
        f"bench fold: rows={args.rows:,} (and {args.rows // 10:,}) actors={args.actors} "
        f"inherit={args.inherit}% "
        f"repeat={args.repeat} cpus={os.cpu_count()} "
        f"date={time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        flush=True,
    )
    for dialect in (d.strip() for d in args.dialect.split(",") if d.strip()):
        if dialect not in ("postgresql", "mysql"):
            parser.error(f"unknown dialect {dialect!r}")
        bench(dialect, args.rows, args.actors, args.repeat, args.keep, reused, figures)


if __name__ == "__main__":
    main()
