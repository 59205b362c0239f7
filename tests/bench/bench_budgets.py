"""Benchmark `budgets`: `quota --all` over 1,000 saved budgets, and two-level spend slices.

On PostgreSQL and MariaDB, over the same 2,000,000-row ledger as ``bench_ledger.py`` (90 days,
1,000 actors, 50 tenants; loaded server-side), with 1,000 saved budgets (850 actor budgets over
day/week/month, 150 tenant budgets: every tenant × every period), interleaved medians of
``BENCH_LEDGER_REPEAT`` runs (default 5):

1. ``evaluate_budgets`` one indexed SUM per (scope, period) — the default — vs one grouped
   statement per (scope kind, period) (``grouped=True``): both must agree exactly;
2. the faster of the two vs the same sums computed by full-table scans (target: >= 20x faster);
3. ``spend(by="day,model")`` for February vs the hand-written ``SUM … GROUP BY`` of day bucket
   and model (target: ratio <= 1.2).

Run: ``python tests/bench/bench_budgets.py`` (``BENCH_LEDGER_ROWS=200000`` for a quick run).
"""

from __future__ import annotations

import os
import sys
from datetime import date
from typing import Any

from _common import create_database, drop_database
from bench_ledger import FEB, FEB_HI, FEB_LO, QUOTA_AT, ROWS, interleaved, load
from sqlalchemy import text

from agora_cli.store._budgets import evaluate_budgets, list_budgets, set_budget
from agora_cli.store._engine import open_engine
from agora_cli.store._ledger import spend
from agora_cli.store._provision import ensure_agent_tables
from agora_cli.store._windows import PERIODS, period_window

ACTOR_BUDGETS = 850
HAND_DAY_MODEL = (
    "SELECT created_at {div} 86400000, model_id, COUNT(*), SUM(input_tokens), "
    "SUM(output_tokens), COALESCE(SUM(cache_read_tokens), 0), "
    "COALESCE(SUM(cache_write_tokens), 0), SUM(cost_usd), "
    "SUM(CASE WHEN cost_source = 'estimate' THEN cost_usd ELSE 0 END), COUNT(cost_usd) "
    "FROM agent_token_usage WHERE created_at BETWEEN {lo} AND {hi} "
    "GROUP BY created_at {div} 86400000, model_id"
)


def save_budgets(engine: Any) -> None:
    with engine.begin() as conn:
        for n in range(ACTOR_BUDGETS):
            set_budget(
                conn,
                scope_kind="actor",
                scope_ref=f"actor-{n}",
                period=PERIODS[n % 3],
                limit_usd=1.0 + n % 7,
                limit_tokens=200_000,
                created_by="bench",
            )
        for n in range(50):
            for period in PERIODS:
                set_budget(
                    conn,
                    scope_kind="tenant",
                    scope_ref=f"tenant-{n}",
                    period=period,
                    limit_usd=100.0,
                    created_by="bench",
                )


def sample(budgets: list[Any]) -> list[Any]:
    """Two budgets of each (scope kind, period): the per-budget full-scan baseline's sample."""
    picked: dict[tuple[str, str], list[Any]] = {}
    for budget in budgets:
        group = picked.setdefault((budget.scope_kind, budget.period), [])
        if len(group) < 2:
            group.append(budget)
    return [b for group in picked.values() for b in group]


def full_scan_sums(engine: Any, dialect: str, budgets: list[Any]) -> list[tuple[Any, ...]]:
    """Each budget's SUM as a full-table scan would compute it (indexes switched off)."""
    hint = (
        "IGNORE INDEX (agent_token_usage_created_idx, agent_token_usage_actor_created_idx, "
        "agent_token_usage_tenant_created_idx)"
        if dialect == "mysql"
        else ""
    )
    out = []
    with engine.connect() as conn:
        if dialect == "postgresql":
            for setting in ("enable_indexscan", "enable_bitmapscan", "enable_indexonlyscan"):
                conn.exec_driver_sql(f"SET {setting} = off")
        for budget in budgets:
            lo, hi = period_window(budget.period, QUOTA_AT)
            sql = (
                "SELECT COALESCE(SUM(input_tokens + output_tokens), 0), "
                "COALESCE(SUM(cost_usd), 0), COUNT(*) - COUNT(cost_usd) "
                f"FROM agent_token_usage {hint} WHERE {budget.scope_kind}_ref = "
                f"'{budget.scope_ref}' AND created_at BETWEEN {lo} AND {min(hi, QUOTA_AT)}"
            )
            out.append(tuple(conn.exec_driver_sql(sql).one()))
        conn.rollback()
    return out


def bench(dialect: str) -> None:
    name, url = create_database(dialect)
    try:
        engine = open_engine(url)
        ensure_agent_tables(engine)
        load(engine, dialect)
        save_budgets(engine)
        with engine.connect() as conn:
            budgets = list_budgets(conn)
            conn.rollback()
        assert len(budgets) == 1_000

        def per_budget() -> Any:
            with engine.connect() as conn:
                return evaluate_budgets(conn, budgets, at_ms=QUOTA_AT)

        def grouped() -> Any:
            with engine.connect() as conn:
                return evaluate_budgets(conn, budgets, at_ms=QUOTA_AT, grouped=True)

        a, b = per_budget(), grouped()
        assert [(s.tokens, round(s.usd, 9), s.unpriced_turns) for s in a] == [
            (s.tokens, round(s.usd, 9), s.unpriced_turns) for s in b
        ], "the two strategies disagree"
        times = interleaved({"per_budget": per_budget, "grouped": grouped})
        print(
            f"{dialect} quota --all, 1,000 budgets on {ROWS:,} rows: one SUM per budget "
            f"{times['per_budget']:.1f} ms vs one grouped statement per (kind, period) "
            f"{times['grouped']:.1f} ms (same results; the default is grouped)"
        )
        few = sample(budgets)

        def indexed_few() -> Any:
            with engine.connect() as conn:
                return evaluate_budgets(conn, few, at_ms=QUOTA_AT)

        got = [(s.tokens, round(s.usd, 9), s.unpriced_turns) for s in indexed_few()]
        want = [
            (int(t), round(float(u), 9), int(n)) for t, u, n in full_scan_sums(engine, dialect, few)
        ]
        assert got == want, "indexed sums and full scans disagree"
        scan = interleaved(
            {"indexed": indexed_few, "scan": lambda: full_scan_sums(engine, dialect, few)}
        )
        per_scan = scan["scan"] / len(few)
        print(
            f"{dialect} one budget's SUM (mean of {len(few)}: every kind and period): indexed "
            f"{scan['indexed'] / len(few):.2f} ms vs full-table scan {per_scan:.1f} ms: "
            f"{scan['scan'] / scan['indexed']:.0f}x faster (target >= 20x)"
        )
        best = min(times["per_budget"], times["grouped"])
        print(
            f"{dialect} quota --all, 1,000 budgets: {best:.1f} ms vs a full scan per budget "
            f"(1,000 x {per_scan:.1f} ms = {1000 * per_scan / 1000:.1f} s): "
            f"{1000 * per_scan / best:.0f}x faster"
        )
        div = "DIV" if dialect == "mysql" else "/"
        hand = HAND_DAY_MODEL.format(div=div, lo=FEB_LO, hi=FEB_HI)

        def store_spend() -> Any:
            with engine.connect() as conn:
                return spend(conn, by="day,model", from_day=FEB[0], to_day=FEB[1])

        def hand_spend() -> Any:
            with engine.connect() as conn:
                return conn.execute(text(hand)).all()

        cells = sum(len(p.rows) for p in store_spend().periods)
        assert cells == len(hand_spend()), "the store and the hand-written statement disagree"
        times = interleaved({"store": store_spend, "hand": hand_spend})
        print(
            f"{dialect} spend --by day,model, February ({cells} cells): store "
            f"{times['store']:.1f} ms vs hand-written SQL {times['hand']:.1f} ms: ratio "
            f"{times['store'] / times['hand']:.2f} (target <= 1.2)"
        )
        engine.dispose()
    finally:
        drop_database(dialect, name)


def main() -> None:
    print(f"bench budgets: rows={ROWS:,} cpus={os.cpu_count()} date={date.today()}")
    for dialect in sys.argv[1:] or ("postgresql", "mysql"):
        bench(dialect)


if __name__ == "__main__":
    main()
