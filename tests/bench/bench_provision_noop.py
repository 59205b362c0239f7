"""provision_noop: a no-op `ensure_agent_tables` vs `alembic upgrade` at head, and its query count.

Run: python tests/bench/bench_provision_noop.py   (AGORA_BENCH_DIALECTS=postgresql,mysql,sqlite)
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from _common import dialects, median_seconds, scratch_database  # noqa: E402
from sqlalchemy import event  # noqa: E402

from agora_cli.store.engine import open_engine  # noqa: E402
from agora_cli.store.migrate import upgrade  # noqa: E402
from agora_cli.store.provision import ensure_agent_tables  # noqa: E402

REPEAT = int(os.environ.get("AGORA_BENCH_REPEAT", "30"))


def main() -> None:
    for dialect in dialects():
        with scratch_database(dialect) as url:
            engine = open_engine(url)
            upgrade(engine)  # migrations at head; the schema is current
            statements: list[str] = []
            event.listen(engine, "before_cursor_execute", lambda c, cur, s, *a: statements.append(s))
            report = ensure_agent_tables(engine)
            assert report.already_current
            catalog = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
            ddl = [s for s in statements if s.lstrip().upper().startswith(("CREATE", "ALTER"))]
            print(f"{dialect}: no-op provision catalog queries = {len(catalog)}, DDL = {len(ddl)}")
            provision_s = median_seconds(lambda: ensure_agent_tables(engine), REPEAT)
            alembic_s = median_seconds(lambda: upgrade(engine), REPEAT)
            print(
                f"{dialect}: no-op provision {provision_s * 1000:.2f} ms vs alembic upgrade at head "
                f"{alembic_s * 1000:.2f} ms -> ratio {provision_s / alembic_s:.3f} "
                f"(alembic/provision = {alembic_s / provision_s:.1f}x)"
            )
            engine.dispose()


if __name__ == "__main__":
    main()
