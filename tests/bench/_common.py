"""Shared pieces of the benchmarks: scratch databases on the local servers, timing."""

from __future__ import annotations

import os
import secrets
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

PG_ADMIN = os.environ.get(
    "AGORA_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
MYSQL_ADMIN = os.environ.get("AGORA_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/")


ADMIN = {"postgresql": PG_ADMIN, "mysql": MYSQL_ADMIN}


def create_database(
    dialect: str, prefix: str = "agora_bench", admin_url: str | None = None
) -> tuple[str, str]:
    """Create an empty database (SQLite: a file in a temp folder); return (name, url).

    ``name`` is what ``drop_database`` takes: the database name, or the SQLite file's path.
    ``admin_url``: another server's admin login than the local one (``ADMIN``).
    """
    from sqlalchemy.engine import make_url

    from agora_cli.store._engine import normalize_url, open_engine

    if dialect == "sqlite":
        path = os.path.join(tempfile.mkdtemp(prefix=f"{prefix}_"), "agora.db")
        return path, f"sqlite:///{path}"
    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(3)}"
    admin_url = admin_url or ADMIN[dialect]
    admin = open_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        if dialect == "mysql":
            conn.exec_driver_sql(
                f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
            )
        else:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    admin.dispose()
    url = make_url(normalize_url(admin_url).set(database=name))
    return name, url.render_as_string(hide_password=False)


def drop_database(dialect: str, name: str, admin_url: str | None = None) -> None:
    """Drop what ``create_database`` made (on ``admin_url``'s server, if it was given one)."""
    from agora_cli.store._engine import open_engine

    if dialect == "sqlite":
        if os.path.exists(name):
            os.remove(name)
        return
    admin = open_engine(admin_url or ADMIN[dialect], isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        if dialect == "mysql":
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")
        else:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.dispose()


@contextmanager
def scratch_database(dialect: str, prefix: str = "agora_bench") -> Iterator[str]:
    """A new, empty database on the local server (or a temp SQLite file), dropped afterwards."""
    name, url = create_database(dialect, prefix)
    try:
        yield url
    finally:
        drop_database(dialect, name)


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
