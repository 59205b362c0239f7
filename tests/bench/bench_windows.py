"""Benchmark `windows` (issue 28): local-day buckets and two-key spend, side by side.

For PostgreSQL and MariaDB (local servers), it loads ``bench_ledger``'s ledger
(``BENCH_WINDOWS_ROWS`` rows, default 500,000, over 90 days; 1,000 actors, 8 models) and
measures February, in rounds that rotate the order of the systems (``BENCH_WINDOWS_ROUNDS``,
default 7), the median and range of:

1. ``spend(by="day")`` in UTC vs in Europe/Berlin (local days: the zone's offset as a ``CASE``
   added before the day division), both from the ledger (``raw``);
2. ``spend(by="model,actor")`` from the ledger vs the same ``SUM … GROUP BY model_id,
   actor_ref`` written by hand (the store adds each identity's length on MariaDB, for exact
   groups), and vs ``spend(by="model")``;
3. ``spend(by="model,actor")`` from the daily fold vs from the ledger. (This ledger's fold hardly
   compresses it: 1,000 actors × 50 tenants × 8 models leave nearly every row its own group a
   day; ``bench_fold.py`` measures a realistic platform's.)

Run: ``python tests/bench/bench_windows.py``. One line per figure on stdout; the databases are
dropped at the end.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from datetime import date
from typing import Any

os.environ.setdefault("BENCH_LEDGER_ROWS", os.environ.get("BENCH_WINDOWS_ROWS", "500000"))

import bench_ledger
from _common import create_database, drop_database

from agora_cli.store._clock import ManualClock, parse_instant
from agora_cli.store._engine import open_engine
from agora_cli.store._fold import fold
from agora_cli.store._ledger import spend
from agora_cli.store._provision import ensure_agent_tables

ROUNDS = int(os.environ.get("BENCH_WINDOWS_ROUNDS", "7"))
FEB = {"from_day": date(2026, 2, 1), "to_day": date(2026, 2, 28)}
FEB_LO, FEB_HI = parse_instant("2026-02-01T00:00:00Z"), parse_instant("2026-02-28T23:59:59.999Z")
HAND = (
    "SELECT model_id, actor_ref, COUNT(*), SUM(input_tokens), SUM(output_tokens), "
    "COALESCE(SUM(cache_read_tokens), 0), COALESCE(SUM(cache_write_tokens), 0), SUM(cost_usd), "
    "SUM(CASE WHEN cost_source = 'estimate' THEN cost_usd ELSE 0 END), COUNT(cost_usd) "
    "FROM agent_token_usage WHERE created_at BETWEEN {lo} AND {hi} GROUP BY model_id, actor_ref"
)


def rotated(fns: dict[str, Callable[[], Any]]) -> dict[str, list[float]]:
    """Milliseconds of each function per round; each round starts with the next system."""
    for fn in fns.values():
        fn()  # warm caches and connections
    names = list(fns)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(ROUNDS):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            start = time.perf_counter()
            fns[name]()
            samples[name].append((time.perf_counter() - start) * 1000)
    return samples


def ratio_line(label: str, a: str, b: str, samples: dict[str, list[float]]) -> str:
    ratios = [x / y for x, y in zip(samples[a], samples[b], strict=True)]
    return (
        f"{label}: {a} {statistics.median(samples[a]):.1f} ms / {b} "
        f"{statistics.median(samples[b]):.1f} ms = {statistics.median(ratios):.2f} "
        f"(range {min(ratios):.2f}–{max(ratios):.2f}, {ROUNDS} rounds)"
    )


def main() -> int:
    for dialect in [d for d in ("postgresql", "mysql") if d in sys.argv[1:] or len(sys.argv) == 1]:
        name, url = create_database(dialect, "agora_bench_windows")
        engine = open_engine(url)
        try:
            ensure_agent_tables(engine)
            bench_ledger.load(engine, dialect)
            with engine.connect() as conn:

                def run(**kw: Any) -> Callable[[], None]:
                    def call() -> None:
                        spend(conn, **FEB, **kw)
                        conn.rollback()

                    return call

                zones = rotated(
                    {
                        "utc_days": run(by="day", raw=True),
                        "berlin_days": run(by="day", raw=True, tz="Europe/Berlin"),
                    }
                )
                print(
                    f"{dialect} "
                    + ratio_line("spend --by day, Feb", "berlin_days", "utc_days", zones)
                )

                def hand() -> None:
                    conn.exec_driver_sql(HAND.format(lo=FEB_LO, hi=FEB_HI)).all()
                    conn.rollback()

                keys = rotated(
                    {
                        "model_actor": run(by="model,actor", raw=True),
                        "hand": hand,
                        "model": run(by="model", raw=True),
                    }
                )
                print(f"{dialect} " + ratio_line("spend raw, Feb", "model_actor", "hand", keys))
                print(f"{dialect} " + ratio_line("spend raw, Feb", "model_actor", "model", keys))
            fold(engine, clock=ManualClock(parse_instant("2026-04-15T00:00:00Z")))
            with engine.connect() as conn:

                def run2(**kw: Any) -> Callable[[], None]:
                    def call() -> None:
                        spend(conn, **FEB, **kw)
                        conn.rollback()

                    return call

                folded = rotated(
                    {
                        "folded": run2(by="model,actor"),
                        "raw": run2(by="model,actor", raw=True),
                    }
                )
                print(
                    f"{dialect} "
                    + ratio_line("spend --by model,actor, Feb", "folded", "raw", folded)
                )
        finally:
            engine.dispose()
            drop_database(dialect, name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
