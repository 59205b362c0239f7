"""How far a read database (a hot standby, a replica) is behind its primary.

Reports may read from a standby (``agora spend --read-db URL``); what they show is as old as
the standby's replay, and this says by how much. Each dialect asks its own way
(``Dialect.replay_lag_s``): PostgreSQL its recovery functions, MySQL/MariaDB ``SHOW REPLICA
STATUS``; SQLite has no replicas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agora_cli.store._dialects import dialect_of

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

__all__ = ["replay_lag"]


def replay_lag(engine: Engine) -> float | None:
    """Seconds ``engine``'s server is behind its primary in replaying its changes.

    ``None`` on a primary, on SQLite, or where the server cannot tell (MySQL: replication
    stopped, or a login without the privilege to ask); ``0.0`` on a standby that has replayed
    everything it received, however long ago the primary last committed (or replays, within a
    moment, what it had received: ``PostgresDialect.replay_lag_s``). One short read on a pooled
    connection, which the report then reuses.
    """
    with engine.connect().execution_options(sqlite_deferred=True) as conn:
        lag = dialect_of(conn).replay_lag_s(conn)
        conn.rollback()
    return lag
