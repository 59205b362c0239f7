"""Benchmark `ordered_ids`: `spend` for one day of a big ledger vs a small one, on MariaDB, with
random ids (the old way) and with time-ordered ids (UUIDv7, issue 19 part 3), side by side.

InnoDB stores a table in its primary key's order. With random ids a day's ledger rows are spread
over the whole table, so `spend` for that day reads them through ``agent_token_usage_created_idx``
with one primary-key lookup per row, each on a different page; once the table is larger than
the buffer pool most of those pages come from disk. With time-ordered ids written in time order
the day is a run of adjacent pages.

Four scratch databases on the local MariaDB: a big ledger of ``BENCH_IDS_ROWS`` rows (default
1,000,000) and a small one of ``BENCH_IDS_SMALL`` rows (default 10,000), each once with
``uuid4().hex`` ids (what ``record_usage`` wrote before) and once with ``new_hex_id`` ids (what it
writes now), both written in time order, ``BENCH_IDS_PER_DAY`` rows a day (default 5,000: 200
days in the big ledger, 2 in the small one). Every day holds the same rows (model, tokens,
costs depend on the row's place in its day only), so one day's report is the same in all four.

The server's settings are not touched. The script prints ``innodb_buffer_pool_size`` and each
table's size and refuses to call the run meaningful unless the big tables exceed the pool. To
keep the cache cold-ish without restarting anything, every round asks the big ledgers for a day
no earlier round asked for (days spread over the whole span, in a shuffled order), so the pages
a day needs are not in the pool because of an earlier measurement; the small ledgers fit in the
pool and are warm — the comparison is a table larger than memory against one that is not.

Figures, medians of ``BENCH_IDS_REPEAT`` interleaved rounds (default 31) after a warm-up, as the
ratio and difference of the medians and as the medians of each round's own ratio and difference:

1. ``spend(by="model")`` for one day through the store function (in process, one connection
   per database): big / small, for random and for ordered ids;
2. the same call again at once, for the same day (its pages now in the pool): what is left
   when no page comes from disk — an index range and 5,000 primary-key lookups against a scan
   of the small table;
3. ``agora spend --by model --from D --to D --json`` as a real subprocess (a new process and
   connection each time, as an operator runs it): big / small, random and ordered.

Goal (issue 19): with ordered ids, big / small <= 1.2 and big - small <= 50 ms.

Run: ``python tests/bench/bench_ordered_ids.py`` (about 15 minutes, most of it loading).
The databases are dropped at the end.
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from _common import create_database, drop_database

from agora_cli.store._clock import DAY_MS, day_start_ms
from agora_cli.store._engine import open_engine
from agora_cli.store._ids import id_time_ms, new_hex_id
from agora_cli.store._ledger import spend
from agora_cli.store._provision import ensure_agent_tables
from agora_cli.store._schema import token_usage

BIG = int(os.environ.get("BENCH_IDS_ROWS", "1000000"))
SMALL = int(os.environ.get("BENCH_IDS_SMALL", "10000"))
PER_DAY = int(os.environ.get("BENCH_IDS_PER_DAY", "5000"))
REPEAT = int(os.environ.get("BENCH_IDS_REPEAT", "31"))
FIRST_DAY = date(2026, 1, 1)
AGORA = Path(sys.executable).with_name("agora")
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
    "custom-ft-0613",
]
COLUMNS = [c.name for c in token_usage.columns]
INSERT = (
    f"INSERT INTO agent_token_usage ({', '.join(COLUMNS)}) "
    f"VALUES ({', '.join(['%s'] * len(COLUMNS))})"
)


ORDER = [("big", "random"), ("small", "random"), ("big", "ordered"), ("small", "ordered")]


def make_id(kind: str, at_ms: int) -> str:
    """The id the ledger writer gives a row stamped ``at_ms``: before (v4) or now (v7)."""
    return uuid.uuid4().hex if kind == "random" else new_hex_id(at_ms)


def make_ref(kind: str, at_ms: int) -> str:
    """A run or message id in the canonical form, of the same kind."""
    return str(uuid.uuid4()) if kind == "random" else str(uuid.UUID(new_hex_id(at_ms)))


def day_rows(kind: str, day_index: int) -> list[tuple[Any, ...]]:
    """One day's ledger rows, in time order; only the times and ids differ from day to day."""
    start = day_start_ms(FIRST_DAY + timedelta(days=day_index))
    step = DAY_MS // PER_DAY
    rows = []
    for i in range(PER_DAY):
        at = start + i * step
        model = i * 31 % len(MODELS)
        unpriced = model == len(MODELS) - 1
        values = {
            "id": make_id(kind, at),
            "thread_id": "t",
            "actor_ref": f"actor-{i * 7919 % 1000}",
            "tenant_ref": None if i % 7 == 0 else f"tenant-{i * 13 % 50}",
            "message_id": make_ref(kind, at),
            "model_id": MODELS[model],
            "purpose": "chat",
            "input_tokens": 100 + i * 17 % 5000,
            "output_tokens": 10 + i * 23 % 1000,
            "cache_write_tokens": 50 if i % 11 == 0 else None,
            "cache_read_tokens": i * 29 % 100 if i % 3 == 0 else None,
            "cost_usd": None if unpriced else (i * 37 % 1000) / 100_000,
            "cost_source": None if unpriced else ("provider" if i % 10 == 1 else "estimate"),
            "run_id": make_ref(kind, at),
            "created_at": at,
        }
        rows.append(tuple(values[c] for c in COLUMNS))
    return rows


def load(url: str, kind: str, rows: int) -> None:
    """Provision, then write ``rows`` ledger rows in time order, one day per statement.

    Secondary indexes are dropped for the load and rebuilt after it (they are sorted builds
    either way); the primary key — the table's physical order — is built by the inserts, in
    the order a live ledger receives them.
    """
    engine = open_engine(url)
    try:
        ensure_agent_tables(engine)
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "INSERT INTO agent_thread (id, actor_ref, title, created_at, updated_at) "
                "VALUES ('t', 'actor-0', 'bench', 0, 0)"
            )
        indexes = [i for i in token_usage.indexes if "thread_id" not in i.columns]
        with engine.begin() as conn:
            for index in indexes:
                index.drop(conn)
        for day in range(rows // PER_DAY):
            with engine.begin() as conn:
                conn.exec_driver_sql("SET SESSION foreign_key_checks = 0")
                conn.exec_driver_sql(INSERT, day_rows(kind, day))
        with engine.begin() as conn:
            for index in indexes:
                index.create(conn)
            conn.exec_driver_sql("ANALYZE TABLE agent_token_usage")
    finally:
        engine.dispose()


def table_mb(url: str) -> tuple[float, float]:
    engine = open_engine(url)
    try:
        with engine.connect() as conn:
            data, index = conn.exec_driver_sql(
                "SELECT data_length, index_length FROM information_schema.tables "
                "WHERE table_schema = DATABASE() AND table_name = 'agent_token_usage'"
            ).one()
    finally:
        engine.dispose()
    return data / 2**20, index / 2**20


def _timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


def main() -> None:
    assert BIG % PER_DAY == 0 and SMALL % PER_DAY == 0, "rows must be whole days"
    big_days, small_days = BIG // PER_DAY, SMALL // PER_DAY
    assert big_days >= 2 * REPEAT + 2, "the big ledger needs a fresh day for every measurement"
    made: list[str] = []
    urls: dict[tuple[str, str], str] = {}
    try:
        for size, rows in (("big", BIG), ("small", SMALL)):
            for kind in ("random", "ordered"):
                name, url = create_database("mysql", f"agora_bench_ids_{size}_{kind}")
                made.append(name)
                urls[(size, kind)] = url
                t = time.perf_counter()
                load(url, kind, rows)
                data, index = table_mb(url)
                print(
                    f"loaded {size} {kind}: {rows:,} rows in {time.perf_counter() - t:.0f} s; "
                    f"table {data:,.0f} MB + secondary indexes {index:,.0f} MB",
                    flush=True,
                )
        run(urls, big_days, small_days)
    finally:
        for name in made:
            drop_database("mysql", name)


def run(urls: dict[tuple[str, str], str], big_days: int, small_days: int) -> None:
    engines = {key: open_engine(url) for key, url in urls.items()}
    conns = {key: engine.connect() for key, engine in engines.items()}
    try:
        pool = conns[("big", "random")].exec_driver_sql("SELECT @@innodb_buffer_pool_size")
        pool_mb = pool.scalar() / 2**20
        for key in (("big", "random"), ("big", "ordered")):
            data, _ = table_mb(urls[key])
            verdict = "exceeds" if data > pool_mb else "does NOT exceed (raise BENCH_IDS_ROWS)"
            print(f"{key[0]} {key[1]}: table {data:,.0f} MB {verdict} the buffer pool")
        print(f"innodb_buffer_pool_size {pool_mb:,.0f} MB (server settings untouched)")
        # the day's rows are one block of ids in the ordered ledger, all over the random one
        for kind in ("random", "ordered"):
            conn = conns[("big", kind)]
            ids = conn.exec_driver_sql(
                "SELECT id FROM agent_token_usage ORDER BY id LIMIT 3"
            ).scalars()
            print(f"big {kind}: first ids {[id_time_ms(i) for i in ids]} (ms in the id)")
            conn.rollback()

        # every measurement of a big ledger gets a day none before it asked for
        days = list(range(1, big_days - 1))
        random.Random(19).shuffle(days)
        fresh = iter(days)

        def store(key: tuple[str, str], day_index: int) -> Callable[[], Any]:
            day = FIRST_DAY + timedelta(days=day_index)

            def call() -> Any:
                conn = conns[key]
                report = spend(conn, by="model", from_day=day, to_day=day)
                conn.rollback()
                assert report.total.turns == PER_DAY and report.folded_days == 0
                return report

            return call

        def cli(key: tuple[str, str], day_index: int) -> Callable[[], Any]:
            day = (FIRST_DAY + timedelta(days=day_index)).isoformat()
            cmd = [str(AGORA), "spend", "--by", "model", "--from", day, "--to", day]
            cmd += ["--db", urls[key], "--json"]
            env = {k: v for k, v in os.environ.items() if not k.startswith("AGORA_")}

            def call() -> None:
                subprocess.run(cmd, capture_output=True, check=True, env=env)

            return call

        def pick(size: str) -> int:
            return next(fresh) if size == "big" else small_days - 1

        # one warm-up of each (connections, plans, the small ledgers into the pool), and the
        # same report from all four
        totals = {key: store(key, pick(key[0]))().total for key in conns}
        assert (
            len({(t.turns, t.input_tokens, round(t.cost_usd or 0, 6)) for t in totals.values()})
            == 1
        )
        for key in conns:
            cli(key, pick(key[0]))()

        samples: dict[str, dict[tuple[str, str], list[float]]] = {"store": {}, "cli": {}}
        samples["again"] = {}
        for _ in range(REPEAT):
            for how, make in (("store", store), ("cli", cli)):
                for key in ORDER:  # each big ledger right before its small one
                    fn = make(key, pick(key[0]))
                    samples[how].setdefault(key, []).append(_timed(fn))
                    if how == "store":  # the same day at once: its pages are in the pool now
                        samples["again"].setdefault(key, []).append(_timed(fn))
        for how, label in (
            ("store", "spend() store function, one day"),
            ("again", "spend() store function, the same day again (cached)"),
            ("cli", "agora spend --json subprocess, one day"),
        ):
            ms = {key: statistics.median(v) for key, v in samples[how].items()}
            for kind in ("random", "ordered"):
                big, small = ms[("big", kind)], ms[("small", kind)]
                wanted = kind == "ordered" and how != "again"
                goal = " (goal <= 1.2 and <= 50 ms extra)" if wanted else ""
                # the same figures from each round's own pair (measured back to back), which a
                # load that drifts during the run moves less than the medians' ratio
                big_s, small_s = samples[how][("big", kind)], samples[how][("small", kind)]
                pairs = list(zip(big_s, small_s, strict=True))
                paired_ratio = statistics.median(b / s for b, s in pairs)
                paired_extra = statistics.median(b - s for b, s in pairs)
                print(
                    f"{label}, {kind} ids: {BIG:,}-row ledger {big:.1f} ms vs {SMALL:,}-row "
                    f"{small:.1f} ms: ratio {big / small:.2f}, extra {big - small:+.1f} ms; "
                    f"per round: ratio {paired_ratio:.2f}, extra {paired_extra:+.1f} ms{goal}"
                )
        print(f"days per big measurement: fresh each time ({2 * REPEAT + 4} of {big_days})")
    finally:
        for conn in conns.values():
            conn.close()
        for engine in engines.values():
            engine.dispose()


if __name__ == "__main__":
    main()
