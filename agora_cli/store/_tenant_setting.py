"""The tenant a PostgreSQL session works for: the ``agora.tenant`` setting, set per transaction.

Row-level security (``rls.py``) reads ``current_setting('agora.tenant')`` in its policies;
``open_engine(tenant=…)`` makes every transaction of an engine set it (``install_tenant_hook``).
Both sides take the setting's name from here, so the engine never imports ``rls``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agora_cli.store._dialects import dialect_of
from agora_cli.store._values import check_identity

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine

__all__ = ["TENANT_SETTING", "install_tenant_hook"]

TENANT_SETTING = "agora.tenant"

_TENANT_SQL = f"SELECT set_config('{TENANT_SETTING}', %s, %s)"  # on the driver's cursor
_SESSION_SET = "agora_tenant_session"  # connection-record key: the tenant set for the session


def install_tenant_hook(engine: Engine, tenant: str) -> None:
    """Make every connection of a PostgreSQL ``engine`` carry ``agora.tenant = tenant``.

    A transaction begins with ``set_config(…, true)`` (``SET LOCAL``: it ends with the
    transaction). An autocommit connection — the proposal worker's renew, settle and claim,
    which run without BEGIN — has no transaction to scope it: its driver connection gets the
    setting for the session, once (the connection record remembers it). That is no leak through
    the pool: the pool is this engine's, and every connection of it is ``tenant``'s. Statements
    run on the driver's cursor (``run_on_driver``) use the same connection, so they carry it too.
    """
    # lazy: start-up — the engine module stays importable without SQLAlchemy (agora config)
    from sqlalchemy import event

    check_identity("tenant", tenant)
    if not dialect_of(engine).has_row_level_security:
        return

    def _on_begin(conn: Connection) -> None:
        fairy = conn.connection
        autocommit = conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT"
        if autocommit and fairy.info.get(_SESSION_SET) == tenant:
            return
        cursor = fairy.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            # In a transaction (psycopg is not in autocommit) this opens it: the setting is
            # local to it. In autocommit it holds for the session.
            cursor.execute(_TENANT_SQL, (tenant, not autocommit))
        finally:
            cursor.close()
        if autocommit:
            fairy.info[_SESSION_SET] = tenant

    event.listen(engine, "begin", _on_begin)
