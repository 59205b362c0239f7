"""stamp: what `db stamp` and `db upgrade --sql` add to a `db check`, side by side.

`db stamp` reads the catalog once and compares it, in Python, with the schema the upgrade map
derives for the revision (head's is the library's own; an earlier one is a copy); a refusal
also looks for the revision the schema is (the worst case, measured here: none is, found
after two comparisons). `db upgrade --sql` reads the catalog once and plans each revision
against the catalog the script has reached. Each is measured against `db check` (one catalog
read, one comparison with head's schema) on a database at head, in rounds that rotate the
order: the median ratio and its range.

Run: python tests/bench/bench_stamp.py   (AGORA_BENCH_DIALECTS=postgresql,mysql,sqlite)
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(__file__))

from _common import dialects, scratch_database

from agora_cli.store._engine import dialect_name, open_engine
from agora_cli.store._live_schema import read_catalog
from agora_cli.store._migrate import (
    MAIN_BRANCH,
    _main_differences,
    _matching_revision,
    head_revision,
    script_directory,
    upgrade,
)
from agora_cli.store._provision import check_agent_tables

ROUNDS = int(os.environ.get("AGORA_BENCH_REPEAT", "15"))


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(dialect: str, url: str) -> None:
    engine = open_engine(url)
    upgrade(engine)
    script = script_directory()
    head = head_revision()
    name = dialect_name(engine)

    def check() -> object:
        return check_agent_tables(engine)

    def catalog() -> object:
        with engine.connect() as conn:
            cat = read_catalog(conn, full=True)
            conn.rollback()
        return cat

    def stamp_verdict() -> object:  # what `db stamp agent@head` computes before it records
        assert not _main_differences(catalog(), name, script, head)  # type: ignore[arg-type]
        return None

    def stamp_refusal() -> object:  # a refusal names the revision the schema is: the worst
        cat = catalog()  # case, a column dropped by hand, walks every revision down to 0001
        cat.columns["agent_thread"].discard("summary")  # type: ignore[attr-defined]
        assert _matching_revision(cat, name, script) is None  # type: ignore[arg-type]
        return None

    def offline() -> object:  # `db upgrade agent@base:head --sql`, as from a provisioned db
        return upgrade(engine, f"{MAIN_BRANCH}@head", sql=True)

    systems = {
        "check": check,
        "stamp": stamp_verdict,
        "stamp's walk": stamp_refusal,
        "upgrade --sql": offline,
    }
    for fn in systems.values():
        fn()  # warm-up
    times: dict[str, list[float]] = {k: [] for k in systems}
    names = list(systems)
    for n in range(ROUNDS):
        order = names[n % len(names) :] + names[: n % len(names)]
        for key in order:
            times[key].append(_timed(systems[key]))
    base = times["check"]
    for key in ("stamp", "stamp's walk", "upgrade --sql"):
        ratios = [t / b for t, b in zip(times[key], base, strict=True)]
        print(
            f"{dialect}: {key} {statistics.median(times[key]) * 1000:.1f} ms vs db check "
            f"{statistics.median(base) * 1000:.1f} ms -> ratio {statistics.median(ratios):.2f} "
            f"(range {min(ratios):.2f}-{max(ratios):.2f}, {ROUNDS} rounds)"
        )
    engine.dispose()


def main() -> None:
    for dialect in dialects():
        with scratch_database(dialect) as url:
            measure(dialect, url)


if __name__ == "__main__":
    main()
