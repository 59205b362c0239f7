"""Whether an engine reaches PostgreSQL through a connection pooler (``db status``, wake-ups)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine

__all__ = ["PoolerStatus", "backend_pids", "pooler_status", "through_pooler"]


@dataclass(frozen=True)
class PoolerStatus:
    """A connection pooler between agora and PostgreSQL (PgBouncer, pgcat, Odyssey, RDS Proxy)."""

    transaction_pooling: bool  # seen: two open clients ran on one server connection in turn

    def describe(self) -> str:
        if self.transaction_pooling:
            return (
                "a connection pooler, transaction pooling (server connections shared between "
                "clients): agora's statements are pooler-safe"
            )
        return "a connection pooler (no transaction pooling seen: session pooling, or idle)"


def backend_pids(conn: Connection) -> tuple[int | None, int]:
    """The backend pid ``conn``'s startup reported (psycopg's ``info.backend_pid``, from its
    cancel key; ``None`` when the driver does not say) and the server process's
    (``pg_backend_pid()``); ``conn``'s transaction rolled back. A pooler answers the startup
    itself, so the two differ behind one."""
    info = getattr(conn.connection.driver_connection, "info", None)
    startup = getattr(info, "backend_pid", None)
    server = int(conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())
    conn.rollback()
    return startup, server


def through_pooler(engine: Engine) -> bool:
    """Whether ``engine`` reaches PostgreSQL through a pooler (one connection, one query)."""
    with engine.connect() as conn:
        startup, server = backend_pids(conn)
    return startup is not None and startup != server


def pooler_status(engine: Engine) -> PoolerStatus | None:
    """Whether ``engine`` reaches PostgreSQL through a pooler, and whether it pools transactions.

    A pooler answers the client's startup itself: the backend pid it gives (psycopg's
    ``info.backend_pid``, from its cancel key) is not the server process's
    (``pg_backend_pid()``). Transaction pooling shows when a second client, opened while the
    first is still connected, runs on the server process the first one just released.
    """
    with engine.connect() as first, engine.connect() as second:
        startup, server = backend_pids(first)
        if startup is None or startup == server:
            return None
        shared = backend_pids(second)[1] == server
    return PoolerStatus(transaction_pooling=shared)
