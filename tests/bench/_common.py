"""Shared pieces of the benchmarks: scratch databases on the local servers, timing."""

from __future__ import annotations

import os
import secrets
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

PG_ADMIN = os.environ.get(
    "AGORA_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
MYSQL_ADMIN = os.environ.get("AGORA_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/")


@contextmanager
def scratch_database(dialect: str) -> Iterator[str]:
    """A new, empty database on the local server (or a temp SQLite file), dropped afterwards."""
    import tempfile

    from sqlalchemy.engine import make_url

    from agora_cli.store.engine import normalize_url, open_engine

    name = f"agora_bench_{os.getpid()}_{secrets.token_hex(3)}"
    if dialect == "sqlite":
        folder = tempfile.mkdtemp(prefix="agora-bench-")
        yield f"sqlite:///{folder}/bench.db"
        return
    admin_url = PG_ADMIN if dialect == "postgresql" else MYSQL_ADMIN
    admin = open_engine(admin_url, isolation_level="AUTOCOMMIT")
    quote = "`" if dialect == "mysql" else '"'
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {quote}{name}{quote}")
    url = make_url(normalize_url(admin_url).set(database=name))
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            force = " WITH (FORCE)" if dialect == "postgresql" else ""
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {quote}{name}{quote}{force}")
        admin.dispose()


def median_seconds(fn: Callable[[], object], repeat: int) -> float:
    """The median wall time of ``repeat`` calls (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def dialects() -> list[str]:
    wanted = os.environ.get("AGORA_BENCH_DIALECTS", "postgresql,mysql,sqlite")
    return [d.strip() for d in wanted.split(",") if d.strip()]
