"""Bounded lock waits for DDL: set a session's lock timeout, restore it, and say who blocked.

Every lock wait of provisioning's DDL is bounded (``table_lock_timeout_s``, default 10 s):
PostgreSQL ``lock_timeout``, MySQL ``lock_wait_timeout`` and ``innodb_lock_wait_timeout``,
SQLite's busy timeout. Past it, ``LockTimeout`` names the table and, where the server can tell,
the session holding it (PostgreSQL ``pg_locks``/``pg_stat_activity``; MariaDB/MySQL metadata
lock tables, else the open InnoDB transactions).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.engine import Connection

from agora_cli.store._ddl import Step
from agora_cli.store._dialects import dialect_of
from agora_cli.store._errors import (
    AgoraError,
    InvalidInput,
    LockTimeout,
)
from agora_cli.store._schema import metadata

__all__ = [
    "DEFAULT_TABLE_LOCK_TIMEOUT_S",
    "MAX_TABLE_LOCK_TIMEOUT_S",
    "bounded_lock_waits",
    "table_lock_timeout",
]

DEFAULT_TABLE_LOCK_TIMEOUT_S = 10.0


MAX_TABLE_LOCK_TIMEOUT_S = 3600.0


_BOUND_KEY = "agora_table_lock_timeout_s"  # in Connection.info while bounded_lock_waits holds


def table_lock_timeout(seconds: float) -> float:
    """Return ``seconds`` if it can bound lock waits (finite, > 0, <= 3600), else raise."""
    ok = isinstance(seconds, int | float) and math.isfinite(seconds)
    if not (ok and 0 < seconds <= MAX_TABLE_LOCK_TIMEOUT_S):
        shown = f"{seconds:g}" if isinstance(seconds, int | float) else repr(seconds)
        raise InvalidInput(
            f"table_lock_timeout_s must be a number of seconds more than 0 and at most "
            f"{MAX_TABLE_LOCK_TIMEOUT_S:g}, not {shown}",
            param="table_lock_timeout_s",
        )
    return float(seconds)


@contextmanager
def bounded_lock_waits(conn: Connection, seconds: float, *, doing: str = "") -> Iterator[None]:
    """Bound every lock wait on ``conn`` to ``seconds`` inside the block; restore it on the way out.

    On PostgreSQL and MySQL ``conn`` is a connection of agora's own with no transaction open
    (the setting is committed at once; the connection goes back to a pool afterwards); SQLite's
    is set on the driver and may be the caller's. PostgreSQL: ``lock_timeout``. MySQL:
    ``lock_wait_timeout`` (metadata locks, which DDL waits on) and ``innodb_lock_wait_timeout``
    (row locks, which a migration's backfill waits on), whole seconds rounded up. SQLite: the busy
    timeout (its one write lock covers the whole file). A lock wait that trips inside and is not
    an agora error yet becomes ``LockTimeout``.
    """
    seconds = table_lock_timeout(seconds)
    ours = not conn.in_transaction()
    restore = _set_lock_bound(conn, seconds)
    conn.info[_BOUND_KEY] = seconds
    try:
        yield
    except Exception as exc:
        if isinstance(exc, AgoraError) or not is_lock_wait(exc):
            raise
        if ours and conn.in_transaction():
            conn.rollback()
        raise lock_wait_error(conn, None, kept=0, doing=doing) from exc
    finally:
        conn.info.pop(_BOUND_KEY, None)
        if not conn.invalidated and not conn.closed:
            restore()


def _set_lock_bound(conn: Connection, seconds: float) -> Callable[[], None]:
    """Set the session's lock-wait bound; return what puts the old one back."""
    return dialect_of(conn).set_lock_bound(conn, seconds)


def is_lock_wait(exc: BaseException) -> bool:
    """A lock wait that gave up: PostgreSQL 55P03, MySQL 1205, SQLite busy/locked."""
    orig = getattr(exc, "orig", None)
    if orig is None:
        return False
    if getattr(orig, "sqlstate", None) == "55P03":  # lock_not_available (lock_timeout)
        return True
    args = getattr(orig, "args", ())
    if args and args[0] == 1205:  # ER_LOCK_WAIT_TIMEOUT: metadata and row locks alike
        return True
    message = str(orig).lower()
    return "database is locked" in message or "database table is locked" in message


def _describe(step: Step) -> str:
    if step.doing:
        return step.doing
    if step.kind == "table":
        return f"to create table {step.table}"
    if step.kind == "column":
        return f"to add column {step.table}.{step.name}"
    return f"to create index {step.name} on {step.table}"


def _locked_tables(step: Step) -> list[str]:
    """The tables whose locks ``step`` waits on: a new table waits on its foreign keys' targets."""
    if step.fk is not None and step.kind == "foreign_key":
        return [step.table, step.fk.target]  # adding a key locks its target too
    if step.kind != "table":
        return [step.table]
    targets = [
        fk.elements[0].column.table.name
        for fk in metadata.tables[step.table].foreign_key_constraints
    ]
    return list(dict.fromkeys(t for t in targets if t != step.table)) or [step.table]


def lock_wait_error(
    conn: Connection, step: Step | None, *, kept: int, doing: str = ""
) -> LockTimeout:
    """``LockTimeout`` naming the table, and who holds it where the server can tell."""
    seconds = conn.info.get(_BOUND_KEY)
    after = f" after {seconds:g} s" if seconds else ""
    doing = _describe(step) if step is not None else doing
    if dialect_of(conn).single_writer:
        head = (
            f"gave up{after} waiting for SQLite's write lock {doing}: another connection holds "
            "a transaction open on this database file (SQLite cannot tell which)"
        ).replace("  ", " ")
    else:
        tables = _locked_tables(step) if step is not None else []
        where = f" on {' or '.join(tables)}" if tables else ""
        holders = _lock_holders(conn, tables) if tables else ""
        head = f"gave up{after} waiting for a lock{where} {doing}".rstrip()
        head += f": {holders}" if holders else ""
    done = (
        "nothing was changed"
        if kept == 0
        else f"{kept} earlier statement(s) were applied and stay (running it again does the rest)"
    )
    return LockTimeout(
        f"{head}; {done}. When that transaction has ended, run it again (or allow a longer "
        "lock timeout)"
    )


def _lock_holders(conn: Connection, tables: list[str]) -> str:
    """Who holds a lock on ``tables``, as far as the server tells; best effort, never raises."""
    if dialect_of(conn).has_pg_catalog:
        rows = _diagnose(conn, _PG_HOLDERS, tables)
        if not rows:
            return "the session holding it could not be identified (it may have just ended)"
        who = "; ".join(
            f"pid {pid} ({state}"
            + (f", transaction open {age:.1f} s" if age is not None else "")
            + f", user {user}"
            + (f", application {app!r}" if app else "")
            + ")"
            for pid, user, app, state, age in rows
        )
        pids = ", ".join(str(r[0]) for r in rows)
        return (
            f"held by {who}; commit or roll back that transaction (if it is abandoned: "
            f"SELECT pg_terminate_backend({pids}))"
        )
    for sql in (_MARIADB_MDL_HOLDERS, _MYSQL_MDL_HOLDERS):
        rows = _diagnose(conn, sql, tables)
        if rows:
            return f"held by {_mysql_threads(rows)}; commit or roll back that transaction"
    rows = _diagnose(conn, _MYSQL_OPEN_TRANSACTIONS, tables)
    if rows:
        return (
            "the server does not say which session holds it (no metadata_lock_info plugin or "
            f"performance_schema); sessions with a transaction open: {_mysql_threads(rows)}; "
            "commit or roll back the one that used it"
        )
    return "the session holding it could not be identified"


def _mysql_threads(rows: list[Any]) -> str:
    return "; ".join(
        f"thread {tid} (user {user}, {command}"
        + (f", transaction open {age} s" if age is not None else "")
        + ")"
        for tid, user, command, age in rows
    )


def _diagnose(conn: Connection, sql: str, tables: list[str]) -> list[Any] | None:
    """Run one diagnostic query; ``None`` if the server refuses it (missing view, privilege)."""
    stmt = text(sql)
    params: dict[str, Any] = {}
    if ":tables" in sql:
        stmt = stmt.bindparams(bindparam("tables", expanding=True))
        params["tables"] = tables
    began = not conn.in_transaction()
    rows: list[Any] | None
    try:
        if began or not dialect_of(conn).aborts_on_error:
            rows = list(conn.execute(stmt, params).all())
        else:  # inside a migration's transaction: a failure must not abort it
            with conn.begin_nested():
                rows = list(conn.execute(stmt, params).all())
    except Exception:
        # Diagnostics only: a server without the view, or a user without the privilege, gets a
        # shorter message, never a different error than the lock timeout being reported.
        rows = None
    if began and conn.in_transaction():
        conn.rollback()
    return rows


_PG_HOLDERS = (
    "SELECT DISTINCT a.pid, a.usename, a.application_name, a.state, "
    "EXTRACT(EPOCH FROM clock_timestamp() - a.xact_start)::float8 AS age "
    "FROM pg_catalog.pg_locks l "
    "JOIN pg_catalog.pg_class c ON c.oid = l.relation "
    "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
    "JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid "
    "WHERE l.granted AND l.pid <> pg_backend_pid() AND n.nspname = current_schema() "
    "AND c.relname IN :tables ORDER BY age DESC NULLS LAST LIMIT 3"
)


# MariaDB's metadata_lock_info plugin, when installed.
_MARIADB_MDL_HOLDERS = (
    "SELECT DISTINCT m.thread_id, p.user, p.command, "
    "TIMESTAMPDIFF(SECOND, x.trx_started, NOW()) "
    "FROM information_schema.metadata_lock_info m "
    "LEFT JOIN information_schema.processlist p ON p.id = m.thread_id "
    "LEFT JOIN information_schema.innodb_trx x ON x.trx_mysql_thread_id = m.thread_id "
    "WHERE m.table_schema = DATABASE() AND m.table_name IN :tables "
    "AND m.thread_id <> CONNECTION_ID() LIMIT 3"
)


# MySQL 8 (performance_schema is on by default there), or MariaDB with performance_schema on.
_MYSQL_MDL_HOLDERS = (
    "SELECT DISTINCT t.processlist_id, t.processlist_user, t.processlist_command, "
    "TIMESTAMPDIFF(SECOND, x.trx_started, NOW()) "
    "FROM performance_schema.metadata_locks ml "
    "JOIN performance_schema.threads t ON t.thread_id = ml.owner_thread_id "
    "LEFT JOIN information_schema.innodb_trx x ON x.trx_mysql_thread_id = t.processlist_id "
    "WHERE ml.object_type = 'TABLE' AND ml.object_schema = DATABASE() "
    "AND ml.object_name IN :tables AND ml.lock_status = 'GRANTED' "
    "AND t.processlist_id <> CONNECTION_ID() LIMIT 3"
)


# Otherwise the server can only list the transactions open right now, oldest first.
_MYSQL_OPEN_TRANSACTIONS = (
    "SELECT x.trx_mysql_thread_id, p.user, p.command, "
    "TIMESTAMPDIFF(SECOND, x.trx_started, NOW()) "
    "FROM information_schema.innodb_trx x "
    "LEFT JOIN information_schema.processlist p ON p.id = x.trx_mysql_thread_id "
    "WHERE x.trx_mysql_thread_id <> CONNECTION_ID() "
    "ORDER BY x.trx_started LIMIT 3"
)
