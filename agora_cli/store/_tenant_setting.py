"""The tenant a PostgreSQL session works for: the ``agora.tenant`` setting, set per transaction.

Row-level security (``rls.py``) reads ``current_setting('agora.tenant')`` in its policies;
``open_engine(tenant=…)`` makes every transaction of an engine set it (``install_tenant_hook``).
Both sides take the setting's name from here, so the engine never imports ``rls``.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from agora_cli.store._dialects import dialect_of
from agora_cli.store._values import check_identity

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine

__all__ = [
    "OUTSIDE_TRANSACTION",
    "TENANT_SETTING",
    "autocommit_tenant_statement",
    "install_tenant_hook",
]

TENANT_SETTING = "agora.tenant"

_TENANT_SQL = f"SELECT set_config('{TENANT_SETTING}', %s, true)"  # on the driver's cursor
AUTOCOMMIT_TENANT = "agora_autocommit_tenant"  # connection key: this autocommit block's tenant
_WRAPPED = "agora_tenant_wrapped"  # connection key: a statement sent inside BEGIN … COMMIT
# Execution option: this autocommit connection's statements cannot run inside a transaction
# block (VACUUM, CREATE INDEX CONCURRENTLY) and read no tenant's rows: sent as they are.
OUTSIDE_TRANSACTION = "agora_outside_transaction"


def install_tenant_hook(engine: Engine, tenant: str) -> None:
    """Make every transaction on a PostgreSQL ``engine`` carry ``agora.tenant = tenant``, and
    only that transaction: the setting is ``SET LOCAL`` (``set_config(…, true)``) everywhere, so
    a server connection that a pooler hands to another client next never carries it over.

    A transaction begins with ``set_config(…, true)``. An autocommit connection — the proposal
    worker's renew, settle and claim, which run without BEGIN — has no transaction to scope it:
    statements sent on the driver's cursor (``run_on_driver``) go in one pipeline behind the
    setting, which PostgreSQL runs as one implicit transaction (no extra round trip); any other
    statement on it is sent as ``BEGIN; set_config(…)``, the statement, ``COMMIT`` — except on
    a connection with the execution option ``OUTSIDE_TRANSACTION`` (maintenance statements).
    """
    # lazy: start-up — the engine module stays importable without SQLAlchemy (agora config)
    from sqlalchemy import event

    check_identity("tenant", tenant)
    if not dialect_of(engine).has_row_level_security:
        return

    def _on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT":
            conn.info[AUTOCOMMIT_TENANT] = tenant
            return
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            # psycopg is not in autocommit: this opens the transaction, the setting local to it.
            cursor.execute(_TENANT_SQL, (tenant,))
        finally:
            cursor.close()

    def _before(conn: Connection, cursor: Any, *_args: Any) -> None:
        scoped = conn.info.get(AUTOCOMMIT_TENANT)
        if scoped is None or conn.get_execution_options().get(OUTSIDE_TRANSACTION):
            return
        # lazy: PostgreSQL only
        from psycopg import sql

        dbapi_conn: Any = conn.connection.dbapi_connection
        literal = sql.Literal(scoped).as_string(dbapi_conn)
        cursor.execute(f"BEGIN; SELECT set_config('{TENANT_SETTING}', {literal}, true)")
        conn.info[_WRAPPED] = True

    def _after(conn: Connection, *_args: Any) -> None:
        if conn.info.pop(_WRAPPED, False):
            conn.connection.dbapi_connection.commit()  # type: ignore[union-attr]

    def _on_error(context: Any) -> None:
        conn = context.connection
        if conn is not None and conn.info.pop(_WRAPPED, False):
            with contextlib.suppress(Exception):
                conn.connection.dbapi_connection.rollback()

    def _on_end(conn: Connection) -> None:
        conn.info.pop(AUTOCOMMIT_TENANT, None)
        conn.info.pop(_WRAPPED, None)

    def _on_checkin(_dbapi_conn: Any, record: Any) -> None:
        record.info.pop(AUTOCOMMIT_TENANT, None)
        record.info.pop(_WRAPPED, None)

    event.listen(engine, "begin", _on_begin)
    event.listen(engine, "before_cursor_execute", _before)
    event.listen(engine, "after_cursor_execute", _after)
    event.listen(engine, "handle_error", _on_error)
    event.listen(engine, "commit", _on_end)
    event.listen(engine, "rollback", _on_end)
    event.listen(engine.pool, "checkin", _on_checkin)


def autocommit_tenant_statement(conn: Connection) -> tuple[str, tuple[str]] | None:
    """The statement that scopes what follows it in one pipeline to the tenant of ``conn``'s
    autocommit block (``install_tenant_hook``), or ``None`` when there is none to scope."""
    scoped = conn.info.get(AUTOCOMMIT_TENANT)
    return None if scoped is None else (_TENANT_SQL, (str(scoped),))
