"""provision_noop: a no-op `ensure_agent_tables` vs `alembic upgrade` at head, and its query count.

Run: python tests/bench/bench_provision_noop.py   (AGORA_BENCH_DIALECTS=postgresql,mysql,sqlite)
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from _common import dialects, median_seconds, scratch_database
from sqlalchemy import event

from agora_cli.store._engine import open_engine
from agora_cli.store._migrate import upgrade
from agora_cli.store._provision import ensure_agent_tables

REPEAT = int(os.environ.get("AGORA_BENCH_REPEAT", "30"))


def measure(dialect: str, url: str) -> None:
    engine = open_engine(url)
    upgrade(engine)  # migrations at head; the schema is current
    statements: list[str] = []

    def record(_conn: object, _cur: object, statement: str, *_: object) -> None:
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    assert ensure_agent_tables(engine).already_current
    event.remove(engine, "before_cursor_execute", record)
    catalog = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    ddl = [s for s in statements if s.lstrip().upper().startswith(("CREATE", "ALTER"))]
    print(f"{dialect}: no-op provision catalog queries = {len(catalog)}, DDL = {len(ddl)}")
    provision_s = median_seconds(lambda: ensure_agent_tables(engine), REPEAT)
    alembic_s = median_seconds(lambda: upgrade(engine), REPEAT)
    print(
        f"{dialect}: no-op provision {provision_s * 1000:.2f} ms vs alembic upgrade at head "
        f"{alembic_s * 1000:.2f} ms -> ratio {provision_s / alembic_s:.3f}"
    )
    engine.dispose()


def main() -> None:
    for dialect in dialects():
        with scratch_database(dialect) as url:
            measure(dialect, url)


if __name__ == "__main__":
    main()
