"""Whether an engine reaches PostgreSQL through a connection pooler (``db status``, wake-ups)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

__all__ = ["PoolerStatus", "pooler_status"]


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


def pooler_status(engine: Engine) -> PoolerStatus | None:
    """Whether ``engine`` reaches PostgreSQL through a pooler, and whether it pools transactions.

    A pooler answers the client's startup itself: the backend pid it gives (psycopg's
    ``info.backend_pid``, from its cancel key) is not the server process's
    (``pg_backend_pid()``). Transaction pooling shows when a second client, opened while the
    first is still connected, runs on the server process the first one just released.
    """
    sql = "SELECT pg_backend_pid()"
    with engine.connect() as first, engine.connect() as second:
        startup = getattr(first.connection.driver_connection, "info", None)
        server = first.exec_driver_sql(sql).scalar()
        first.rollback()
        if startup is None or getattr(startup, "backend_pid", server) == server:
            return None
        shared = second.exec_driver_sql(sql).scalar() == server
        second.rollback()
    return PoolerStatus(transaction_pooling=shared)
