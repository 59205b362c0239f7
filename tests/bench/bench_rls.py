"""Benchmark `rls`: what the tenant policies cost, RLS on vs off, side by side in one run.

On the local PostgreSQL it creates a database, provisions it, loads a ledger of
``BENCH_RLS_ROWS`` rows (default 2,000,000) over six months (January to June 2026) for 50
tenants over ``BENCH_RLS_THREADS`` threads (default 100,000: 20 ledger rows a thread), and one
thread of 500 messages (100 tool calls, 500 ledger rows). ``BENCH_RLS_THREADS=1000`` (2,000
ledger rows a thread) is the shape where the planner misjudges the thread's ledger read under
the policy (see RESULTS.md). ``BENCH_RLS_UPSTREAM=1`` writes every other ledger row, and the
500-message thread's, as the upstream runtime does: ``tenant_ref`` NULL, the tenant being the
thread's (the policy's branch that looks the thread up). It
creates a NOBYPASSRLS app role (`agora db rls enable --app-role`) and connects *as that role*
(`options=-c role=…` in the URL) with ``AGORA_TENANT`` = the tenant (``open_engine(tenant=…)``).
Then, for ``BENCH_RLS_ROUNDS`` rounds (default 20), it switches RLS off and on (in ABBA order)
on the same engine — the role's grants stay, only the policies come and go — and after one
untimed warm-up call times ``BENCH_RLS_REPEAT`` calls (default 5) of each of:

1. ``spend --tenant T`` for one month (March): ``ledger.spend(by="model", tenant=T, raw=True)``,
   the statement the command runs (goal: ratio on/off <= 1.2);
2. ``threads show`` of the 500-message thread: ``threads.get_transcript`` (goal <= 1.2);
3. writes: a transaction appending 10 messages and their 10 ledger rows (``append_message``,
   ``record_usage``; rolled back, so every sample writes into the same thread); and the server
   time of one INSERT of 100 ledger rows, and of 100 frames of a run (issue 24: ``WITH CHECK``
   looks each row's parent up under the parent's policy);
4. what the policies cost the server: ``EXPLAIN (ANALYZE, TIMING OFF)`` execution times of the
   month's SUM, the thread's messages and its tool calls; and the spend once more with the plan
   pinned (no plain index scans, no parallel workers), because without the policy the planner
   may choose another index for the month (the created_at one, filtered by tenant), which makes
   the plain ratio a comparison of two plans rather than of the policy's work; and the month's SUM
   by the thread's tenant (joined to ``agent_thread``: how a tenant's rows with no
   ``tenant_ref`` are found).

``db rls enable`` builds ``agent_token_usage_thread_tenant_idx (thread_id, tenant_ref)`` and
``disable`` drops it, so the main figures compare RLS off (no such index) with RLS on (with it).
Then ``threads show`` and the thread's ledger read once more, off and on, with that index dropped
by hand after each enable: what the policies cost without it. Both results are checked equal with
and without the policies. The medians of all samples are compared (the machine is shared:
fine-grained alternation is what keeps load drift out of the ratio).
Run: ``python tests/bench/bench_rls.py`` (``BENCH_RLS_ROWS=200000`` for a quick run).
The database and the role are dropped at the end.
"""

from __future__ import annotations

import math
import os
import secrets
import statistics
import time
from collections.abc import Callable
from datetime import date
from typing import Any

from _common import create_database, drop_database
from sqlalchemy import text

from agora_cli.store._clock import parse_instant
from agora_cli.store._engine import open_engine
from agora_cli.store._ledger import spend
from agora_cli.store._provision import ensure_agent_tables
from agora_cli.store._rls import THREAD_TENANT_INDEX, disable_rls, enable_rls
from agora_cli.store._threads import append_message, get_transcript
from agora_cli.store._usage import record_usage

ROWS = int(os.environ.get("BENCH_RLS_ROWS", "2000000"))
ROUNDS = int(os.environ.get("BENCH_RLS_ROUNDS", "20"))
REPEAT = int(os.environ.get("BENCH_RLS_REPEAT", "5"))
START = parse_instant("2026-01-01T00:00:00Z")
SPAN = 181 * 86_400_000  # January to June
MARCH = (date(2026, 3, 1), date(2026, 3, 31))
TENANTS = 50
THREADS = int(os.environ.get("BENCH_RLS_THREADS", "100000"))
UPSTREAM = os.environ.get("BENCH_RLS_UPSTREAM", "") == "1"
TENANT = "tenant-7"
BIG_THREAD = "bench-thread-500"
WRITE_THREAD = "bench-thread-writes"
WRITES = 10  # messages and ledger rows per write sample, in one transaction, rolled back
# Pinning the plan: without the policy the planner may prefer a (parallel) scan of the
# created_at index filtered by tenant; these make both states use the tenant index's bitmap scan,
# so the difference is the policy's own work.
PINNED = {"enable_indexscan": "off", "max_parallel_workers_per_gather": "0"}
MONTH_SQL = (
    "SELECT model_id, count(*), sum(input_tokens), sum(output_tokens), sum(cost_usd) "
    f"FROM agent_token_usage WHERE tenant_ref = '{TENANT}' AND created_at BETWEEN "
    f"{parse_instant('2026-03-01T00:00:00Z')} AND {parse_instant('2026-03-31T23:59:59.999Z')} "
    "GROUP BY model_id"
)
MONTH_THREAD_SQL = (
    "SELECT u.model_id, count(*), sum(u.input_tokens), sum(u.output_tokens) "
    "FROM agent_token_usage u JOIN agent_thread t ON t.id = u.thread_id "
    f"WHERE t.tenant_ref = '{TENANT}' AND u.created_at BETWEEN "
    f"{parse_instant('2026-03-01T00:00:00Z')} AND {parse_instant('2026-03-31T23:59:59.999Z')} "
    "GROUP BY u.model_id"
)
MESSAGES_SQL = f"SELECT * FROM agent_message WHERE thread_id = '{BIG_THREAD}' ORDER BY seq"
USAGE_SQL = (
    f"SELECT * FROM agent_token_usage WHERE thread_id = '{BIG_THREAD}' ORDER BY created_at, id"
)
# The write path's server time: 100 ledger rows and 100 frames in one INSERT each, on the
# tenant's own thread and run (issue 24: WITH CHECK looks the parent up per row); rolled back.
INSERT_USAGE_SQL = (
    "INSERT INTO agent_token_usage (id, thread_id, actor_ref, tenant_ref, model_id, purpose, "
    f"input_tokens, output_tokens, created_at) SELECT 'bench-w-' || g, '{WRITE_THREAD}', "
    f"'actor-7', '{TENANT}', 'gpt-4o', 'chat', 1, 1, 0 FROM generate_series(1, 100) g"
)
INSERT_FRAMES_SQL = (
    "INSERT INTO agent_stream_frame (run_id, seq, frame, created_at, tenant_ref) "
    f"SELECT 'bench-run-writes', g, '{{}}', 0, '{TENANT}' FROM generate_series(1, 100) g"
)
CALLS_SQL = (
    "SELECT c.* FROM agent_tool_call c JOIN agent_message m ON c.message_id = m.id "
    f"WHERE m.thread_id = '{BIG_THREAD}' ORDER BY c.created_at, c.id"
)
MODELS = ["gpt-4o-mini", "gpt-4o", "claude-sonnet-4", "claude-haiku-4-5", "gemini-2.5-pro"]


def load(engine: Any) -> None:
    models = "ARRAY[" + ", ".join(f"'{m}'" for m in MODELS) + "]"
    tenant = f"'tenant-' || mod(mod(g, {THREADS}), {TENANTS})"
    if UPSTREAM:  # every other row as the upstream runtime writes it: the thread's tenant
        tenant = f"CASE WHEN mod(g, 2) = 0 THEN NULL ELSE {tenant} END"
    big_tenant = "NULL" if UPSTREAM else f"'{TENANT}'"
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO agent_thread (id, actor_ref, tenant_ref, title, created_at, updated_at) "
            f"SELECT 'thread-' || g, 'actor-' || mod(g, 40), 'tenant-' || mod(g, {TENANTS}), "
            f"'t', {START}, {START} FROM generate_series(0, {THREADS - 1}) g"
        )
        conn.exec_driver_sql(
            "INSERT INTO agent_token_usage (id, thread_id, actor_ref, tenant_ref, model_id, "
            "purpose, input_tokens, output_tokens, cache_read_tokens, cost_usd, cost_source, "
            "created_at) "
            f"SELECT 'u-' || g, 'thread-' || mod(g, {THREADS}), 'actor-' || mod(g, 40), "
            f"{tenant}, "
            f"({models})[1 + mod(g, {len(MODELS)})], 'chat', 1000 + mod(g, 500), "
            "100 + mod(g, 50), mod(g, 300), 0.001 * mod(g, 7), 'estimate', "
            f"{START} + (g * {SPAN // ROWS}) FROM generate_series(1::bigint, {ROWS}) g"
        )
        conn.exec_driver_sql(
            "INSERT INTO agent_thread (id, actor_ref, tenant_ref, title, created_at, updated_at) "
            f"VALUES ('{BIG_THREAD}', 'actor-7', '{TENANT}', 'long', {START}, {START}), "
            f"('{WRITE_THREAD}', 'actor-7', '{TENANT}', 'writes', {START}, {START})"
        )
        conn.exec_driver_sql(
            "INSERT INTO agent_run (id, thread_id, actor_ref, tenant_ref, status, started_at) "
            f"VALUES ('bench-run-writes', '{WRITE_THREAD}', 'actor-7', '{TENANT}', 'running', "
            f"{START})"
        )
        conn.exec_driver_sql(
            "INSERT INTO agent_message (id, thread_id, seq, role, content, created_at) "
            f"SELECT 'msg-' || g, '{BIG_THREAD}', g, "
            "CASE WHEN mod(g, 2) = 0 THEN 'assistant' ELSE 'user' END, "
            f"repeat('word ', 80), {START} + g FROM generate_series(1, 500) g"
        )
        conn.exec_driver_sql(
            "INSERT INTO agent_tool_call (id, message_id, tool_name, tool_type, input, output, "
            "status, created_at) "
            "SELECT 'call-' || g, 'msg-' || (g * 5), 'search', 'function', '{\"q\": 1}', "
            f"'{{\"rows\": []}}', 'completed', {START} + g FROM generate_series(1, 100) g"
        )
        conn.exec_driver_sql(
            "INSERT INTO agent_token_usage (id, thread_id, actor_ref, tenant_ref, model_id, "
            "purpose, input_tokens, output_tokens, created_at, message_id) "
            f"SELECT 'bu-' || g, '{BIG_THREAD}', 'actor-7', {big_tenant}, 'gpt-4o', 'chat', 10, "
            f"5, {START} + g, 'msg-' || g FROM generate_series(1, 500) g"
        )
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE")


def once_ms(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def main() -> None:
    name, url = create_database("postgresql", "agora_bench_rls")
    role = f"agora_bench_app_{secrets.token_hex(4)}"
    owner = open_engine(url)
    try:
        ensure_agent_tables(owner)
        began = time.perf_counter()
        load(owner)
        print(f"loaded {ROWS:,} ledger rows in {time.perf_counter() - began:.0f} s")
        enable_rls(owner, app_role=role)
        app = open_engine(f"{url}?options=-crole%3D{role}", tenant=TENANT)

        def run_spend(pinned: bool = False) -> Any:
            with app.connect() as conn:
                if pinned:  # the same plan with and without the policy (see the docstring)
                    for name, value in PINNED.items():
                        conn.execute(
                            text("SELECT set_config(:n, :v, true)"), {"n": name, "v": value}
                        )
                report = spend(
                    conn, by="model", from_day=MARCH[0], to_day=MARCH[1], tenant=TENANT, raw=True
                )
                conn.rollback()
            return report

        def run_show() -> Any:
            with app.connect() as conn:
                transcript = get_transcript(conn, BIG_THREAD)
                conn.rollback()
            return transcript

        def run_writes() -> None:
            """What a turn writes: a message and its ledger row, WRITES times, rolled back."""
            with app.connect() as conn:
                for _ in range(WRITES):
                    m = append_message(conn, thread_id=WRITE_THREAD, role="assistant", content="ok")
                    record_usage(
                        conn,
                        thread_id=WRITE_THREAD,
                        actor_ref="actor-7",
                        tenant_ref=TENANT,
                        message_id=m.id,
                        model_id="gpt-4o",
                        purpose="chat",
                        input_tokens=10,
                        output_tokens=5,
                    )
                conn.rollback()

        def server_ms(sql: str, pinned: bool = False) -> float:
            """The server's own execution time of one statement (EXPLAIN ANALYZE, no timing)."""
            with app.connect() as conn:
                if pinned:
                    for name, value in PINNED.items():
                        conn.execute(
                            text("SELECT set_config(:n, :v, true)"), {"n": name, "v": value}
                        )
                lines = [r[0] for r in conn.exec_driver_sql(f"EXPLAIN (ANALYZE, TIMING OFF) {sql}")]
                conn.rollback()
            return float(next(x for x in lines if x.startswith("Execution Time")).split()[2])

        def top_scans(sql: str) -> list[str]:
            with app.connect() as conn:
                lines = [r[0].strip() for r in conn.exec_driver_sql(f"EXPLAIN {sql}")]
                conn.rollback()
            return [x.removeprefix("-> ").split("  (")[0].strip() for x in lines if "Scan" in x]

        with app.connect() as conn:
            assert conn.execute(text("SELECT current_user")).scalar() == role
            conn.rollback()
        figures = {
            "spend": lambda: once_ms(run_spend),
            "spend_pinned": lambda: once_ms(lambda: run_spend(pinned=True)),
            "show": lambda: once_ms(run_show),
            "writes": lambda: once_ms(run_writes),
            "srv_month": lambda: server_ms(MONTH_SQL),
            "srv_month_pinned": lambda: server_ms(MONTH_SQL, pinned=True),
            "srv_month_thread": lambda: server_ms(MONTH_THREAD_SQL),
            "srv_messages": lambda: server_ms(MESSAGES_SQL),
            "srv_calls": lambda: server_ms(CALLS_SQL),
            "srv_usage": lambda: server_ms(USAGE_SQL),
            "srv_insert_usage": lambda: server_ms(INSERT_USAGE_SQL),
            "srv_insert_frames": lambda: server_ms(INSERT_FRAMES_SQL),
        }
        samples: dict[str, dict[str, list[float]]] = {k: {"off": [], "on": []} for k in figures}
        reference: dict[str, tuple[Any, Any]] = {}
        plans: dict[str, list[str]] = {}
        for round_no in range(ROUNDS):
            # ABBA order: a drift of the shared machine's load weighs on both states alike
            for state in ("off", "on") if round_no % 2 == 0 else ("on", "off"):
                if state == "off":
                    disable_rls(owner)
                else:
                    enable_rls(owner)
                reference.setdefault(state, (run_spend(), run_show()))  # also the warm-up
                plans.setdefault(state, top_scans(MONTH_SQL))
                plans.setdefault(f"usage {state}", top_scans(USAGE_SQL))
                plans.setdefault(f"thread month {state}", top_scans(MONTH_THREAD_SQL))
                run_spend()
                run_show()
                for _ in range(REPEAT):
                    for key, measure in figures.items():
                        samples[key][state].append(measure())
        spend_on, show_on = reference["on"]
        spend_off, show_off = reference["off"]
        for field in ("turns", "input_tokens", "output_tokens", "cache_read_tokens"):
            assert getattr(spend_on.total, field) == getattr(spend_off.total, field), field
        # sums of doubles in another row order may differ in the last bits
        assert math.isclose(spend_on.total.cost_usd or 0, spend_off.total.cost_usd or 0)
        assert spend_on.total.turns > 0
        assert len(show_on.messages) == len(show_off.messages) == 500
        shape = "every other row with no tenant_ref (upstream)" if UPSTREAM else "agora's rows"
        print(f"tenant {TENANT}: {spend_on.total.turns:,} ledger rows in March with its tenant_ref")
        print(f"ledger: {ROWS:,} rows, {THREADS:,} threads, {shape}")
        for key, label in (
            ("spend", f"spend --tenant T, one month of a {ROWS:,}-row ledger"),
            ("spend_pinned", "  same, plan pinned (no plain index scans, no parallel workers)"),
            ("show", "threads show, 500 messages"),
            ("writes", f"writes: {WRITES} messages + {WRITES} ledger rows in one transaction"),
            ("srv_month", "server time: the month's SUM"),
            ("srv_month_pinned", "server time: the month's SUM, plan pinned"),
            ("srv_month_thread", "server time: the month's SUM by the thread's tenant (joined)"),
            ("srv_messages", "server time: the thread's 500 messages"),
            ("srv_calls", "server time: the thread's 100 tool calls (joined to messages)"),
            ("srv_usage", "server time: the thread's 500 ledger rows"),
            ("srv_insert_usage", "server time: INSERT of 100 ledger rows (child-tenant check)"),
            ("srv_insert_frames", "server time: INSERT of 100 frames of a run (its check)"),
        ):
            off = statistics.median(samples[key]["off"])
            on = statistics.median(samples[key]["on"])
            spread = ", ".join(
                f"{state} {min(samples[key][state]):.2f}–{max(samples[key][state]):.2f}"
                for state in ("off", "on")
            )
            print(
                f"{label}: RLS off {off:.2f} ms, on {on:.2f} ms: ratio {on / off:.2f} "
                f"(range {spread})"
            )
        for state in ("off", "on"):
            print(f"plan of the month's SUM, RLS {state}: {' / '.join(plans[state])}")
        for state in ("off", "on"):
            scans = " / ".join(plans[f"usage {state}"])
            print(f"plan of the thread's ledger rows, RLS {state}: {scans}")
        for state in ("off", "on"):
            scans = " / ".join(plans[f"thread month {state}"])
            print(f"plan of the month's SUM by the thread's tenant, RLS {state}: {scans}")
        # Why `enable` builds agent_token_usage_thread_tenant_idx: the same two figures with the
        # policies on but that index dropped by hand (what 0.x of agora did) vs RLS off.
        extra = {"show": lambda: once_ms(run_show), "srv_usage": lambda: server_ms(USAGE_SQL)}
        without: dict[str, dict[str, list[float]]] = {k: {"off": [], "on": []} for k in extra}
        for round_no in range(max(2, ROUNDS // 2)):
            for state in ("off", "on") if round_no % 2 == 0 else ("on", "off"):
                if state == "off":
                    disable_rls(owner)
                else:
                    enable_rls(owner)
                    with owner.begin() as conn:
                        conn.exec_driver_sql(f"DROP INDEX {THREAD_TENANT_INDEX}")
                plans.setdefault(f"usage {state} without", top_scans(USAGE_SQL))
                run_show()
                for _ in range(REPEAT):
                    for key, measure in extra.items():
                        without[key][state].append(measure())
        for key, label in (
            ("show", "without the (thread_id, tenant_ref) index: threads show"),
            ("srv_usage", "without that index: server time, the thread's ledger rows"),
        ):
            off = statistics.median(without[key]["off"])
            on = statistics.median(without[key]["on"])
            print(f"{label}: RLS off {off:.2f} ms, on {on:.2f} ms: ratio {on / off:.2f}")
        scans = " / ".join(plans["usage on without"])
        print(f"plan of the thread's ledger rows, RLS on, without that index: {scans}")
        app.dispose()
    finally:
        owner.dispose()
        admin = open_engine(url.rsplit("/", 1)[0] + "/postgres", isolation_level="AUTOCOMMIT")
        drop_database("postgresql", name)
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP ROLE IF EXISTS "{role}"')
        admin.dispose()


if __name__ == "__main__":
    main()
