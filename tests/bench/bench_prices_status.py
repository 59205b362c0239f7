"""Benchmark: "are my prices current?" (issue 28, item 7) — what its answers cost, side by side.

1. **Offline fetch.** A catalog URL whose port refuses (as a laptop offline): the fetch as it is
   now (a connection that cannot be made is not retried) against the policy before issue 28
   (every failure retried: 3 attempts, backoff 0.5 s then 1 s), emulated by marking every
   failure transient. The ratio is what offline ``prices seed --missing --dry-run`` waited.
2. **resolve --catalog's decision.** For one ledger id of a ledger of ``BENCH_STATUS_IDS``
   distinct model ids (the cross-check's 128 real-world ids and synthetic ones): the whole
   ledger's plan (``plan_missing_prices``, now: the answer agrees with ``seed --missing``)
   against the id-alone decision before (resolve + catalog match + ``needs_catalog_price``),
   and against the catalog parse every ``resolve --catalog`` pays anyway (the floor).
3. **status's ledger read.** ``list_unpriced_turns`` over the last 30 days of a ledger of
   ``BENCH_STATUS_ROWS`` rows (a third of them without a cost) against a hand-written
   ``SELECT model_id, count(*) … GROUP BY model_id`` over the same window.
4. **status's comparison.** ``check_prices`` of ``BENCH_STATUS_PRICES`` seeded prices against the
   catalog, against the parse of the catalog.

Each figure is the median of ``BENCH_REPEAT`` rounds after a warm-up; within a round the systems
run in an order that rotates every round, and the range over rounds is printed beside.

    .venv/bin/python tests/bench/bench_prices_status.py
    AGORA_BENCH_DIALECTS=sqlite BENCH_STATUS_ROWS=20000 \
        .venv/bin/python tests/bench/bench_prices_status.py
"""

from __future__ import annotations

import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import create_database, dialects, drop_database

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
SNAPSHOT = ROOT / "tests" / "fixtures" / "models-dev-api.json"
REPEAT = int(os.environ.get("BENCH_REPEAT", "7"))
N_IDS = int(os.environ.get("BENCH_STATUS_IDS", "1000"))
N_ROWS = int(os.environ.get("BENCH_STATUS_ROWS", "200000"))
N_PRICES = int(os.environ.get("BENCH_STATUS_PRICES", "500"))
DAY_MS = 86_400_000


def rounds(systems: dict[str, Callable[[], Any]], repeat: int = REPEAT) -> dict[str, list[float]]:
    """Wall ms of each system over ``repeat`` rounds (after one warm-up), the order rotating."""
    names = list(systems)
    for name in names:
        systems[name]()
    out: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeat):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            started = time.perf_counter()
            systems[name]()
            out[name].append((time.perf_counter() - started) * 1000)
    return out


def show(label: str, samples: dict[str, list[float]], base: str) -> None:
    med = {k: statistics.median(v) for k, v in samples.items()}
    for name, values in samples.items():
        ratio = "" if name == base else f"  {name}/{base} = {med[name] / med[base]:.2f}"
        print(
            f"  {label} {name}: {med[name]:.2f} ms (range {min(values):.2f}–{max(values):.2f})"
            f"{ratio}"
        )


def offline_fetch() -> None:
    from agora_cli.store import _catalog
    from agora_cli.store._errors import CatalogError

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/api.json"
    cache = Path(tempfile.mkdtemp(prefix="agora_bench_status_cache_"))
    now_retry = _catalog._Retry

    class RetryEverything(now_retry):  # type: ignore[misc, valid-type]
        """The policy before issue 28: every failed attempt was worth another."""

        def __init__(self, problem: str, cause: Any = None, *, transient: bool = True) -> None:
            super().__init__(problem, cause, transient=True)

    def fetch() -> None:
        try:
            _catalog.fetch_catalog(url, cache_dir=cache)
        except CatalogError:
            pass

    def before() -> None:
        _catalog._Retry = RetryEverything  # type: ignore[misc]
        try:
            fetch()
        finally:
            _catalog._Retry = now_retry  # type: ignore[misc]

    print("1. a refused catalog URL, no cached copy (exit 3 either way)")
    show("fetch", rounds({"now": fetch, "retry_all": before}, repeat=3), "now")


def fill(url: str, catalog: Any) -> tuple[list[str], int]:
    """Ledger ids (crosscheck's and synthetic), N_ROWS rows over 60 days, N_PRICES prices."""
    from bench.pricing_crosscheck import LEDGER_IDS

    from agora_cli.store import _schema as schema
    from agora_cli.store._engine import open_engine
    from agora_cli.store._pricing import price_from_catalog
    from agora_cli.store._pricing.table import write_prices

    ids = [i for _g, i in LEDGER_IDS]
    ids += [f"synthetic-model-{n:05d}" for n in range(max(0, N_IDS - len(ids)))]
    now = int(time.time() * 1000)
    engine = open_engine(url)
    with engine.begin() as conn:
        conn.execute(
            schema.thread.insert().values(
                id="bench", actor_ref="a", title="", created_at=0, updated_at=0
            )
        )
    batch = []
    for n in range(N_ROWS):
        batch.append(
            {
                "id": f"u{n:08d}",
                "thread_id": "bench",
                "actor_ref": "a",
                "model_id": ids[n % len(ids)],
                "purpose": "chat",
                "input_tokens": 1000,
                "output_tokens": 100,
                "cost_usd": None if n % 3 == 0 else 0.001,
                "created_at": now - (n % 60) * DAY_MS - n % 1000,
            }
        )
        if len(batch) == 5000 or n == N_ROWS - 1:
            with engine.begin() as conn:
                conn.execute(schema.token_usage.insert(), batch)
            batch = []
    wanted = []
    for provider in sorted(catalog.providers):
        for model_id, entry in sorted(catalog.providers[provider].items()):
            price = price_from_catalog(entry, model_id, provider)
            if price is not None and all(model_id != w[1].model_id for w in wanted):
                wanted.append((f"{provider}/{model_id}", price))
            if len(wanted) == N_PRICES:
                break
        if len(wanted) == N_PRICES:
            break
    with engine.begin() as conn:
        write_prices(conn, wanted, overwrite=True, dry_run=False, clock=None)
    engine.dispose()
    return ids, now


def per_dialect(dialect: str, catalog: Any, snapshot: bytes) -> None:
    from sqlalchemy import func, select

    from agora_cli.store._catalog import parse_catalog
    from agora_cli.store._clock import ms_to_date
    from agora_cli.store._engine import open_engine
    from agora_cli.store._pricing import (
        check_prices,
        list_prices,
        list_unpriced_turns,
        match_catalog_price,
        needs_catalog_price,
        plan_missing_prices,
        resolve_current_price,
    )
    from agora_cli.store._provision import ensure_agent_tables
    from agora_cli.store._schema import token_usage as u

    name, url = create_database(dialect, "agora_bench_status")
    try:
        engine = open_engine(url)
        ensure_agent_tables(engine)
        started = time.perf_counter()
        ids, now = fill(url, catalog)
        print(
            f"{dialect}: {N_ROWS:,} ledger rows of {len(ids):,} model ids, {N_PRICES} prices "
            f"(loaded in {time.perf_counter() - started:.1f} s)"
        )
        asked = "openrouter/google/gemini-2.5-pro"

        def alone() -> None:
            with engine.connect() as conn:
                res = resolve_current_price(conn, asked)
            needs_catalog_price(res, match_catalog_price(asked, catalog))

        def plan() -> None:
            with engine.connect() as conn:
                plan = plan_missing_prices(conn, catalog=catalog, also=[asked], hints=False)
                plan.decision(asked)

        samples = rounds(
            {"parse": lambda: parse_catalog(snapshot), "id_alone": alone, "plan": plan}
        )
        print("2. resolve --catalog: would seed --missing price this id?")
        show("decision", samples, "parse")
        p, a = statistics.median(samples["plan"]), statistics.median(samples["id_alone"])
        print(f"  plan/id_alone = {p / a:.1f}")

        first, last = ms_to_date(now - 29 * DAY_MS), ms_to_date(now)

        def store() -> None:
            with engine.connect() as conn:
                list_unpriced_turns(conn, from_day=first, to_day=last)

        def bare() -> None:
            lo = now - 30 * DAY_MS
            q = (
                select(u.c.model_id, func.count())
                .where(u.c.cost_usd.is_(None), u.c.created_at >= lo, u.c.created_at <= now)
                .group_by(u.c.model_id)
            )
            with engine.connect() as conn:
                conn.execute(q).all()

        print("3. status: the window's turns with no cost, by model id")
        show("unpriced", rounds({"bare": bare, "store": store}), "bare")

        with engine.connect() as conn:
            prices = list_prices(conn)
        print(f"4. status: {len(prices)} prices against the catalog")
        show(
            "compare",
            rounds(
                {
                    "parse": lambda: parse_catalog(snapshot),
                    "check": lambda: check_prices(prices, catalog),
                }
            ),
            "parse",
        )
        engine.dispose()
    finally:
        drop_database(dialect, name)


def main() -> None:
    from agora_cli.store._catalog import fetch_catalog

    snapshot = SNAPSHOT.read_bytes()
    catalog = fetch_catalog(str(SNAPSHOT))
    print(f"repeat: {REPEAT} rounds (median, range), order rotating; cpus: {os.cpu_count()}")
    offline_fetch()
    for dialect in dialects():
        try:
            per_dialect(dialect, catalog, snapshot)
        except Exception as exc:  # a server that is not there: say so, go on
            print(f"{dialect}: skipped ({str(exc).splitlines()[0]})")


if __name__ == "__main__":
    main()
