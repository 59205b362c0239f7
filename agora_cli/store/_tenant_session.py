"""One transaction scoped to a tenant: ``tenant_session`` sets ``agora.tenant`` for it (``SET
LOCAL``), ``transaction_tenant`` reads it back, ``install_tenant_setting`` makes an engine do it
for every transaction. PostgreSQL only; the other dialects have no row-level security."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from sqlalchemy import text
from sqlalchemy.engine import Engine

from agora_cli.store._dialects import dialect_of
from agora_cli.store._tenant_setting import TENANT_SETTING, install_tenant_hook
from agora_cli.store._values import check_identity

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

SETTING_SQL = f"current_setting('{TENANT_SETTING}', true)"  # NULL when never set
TENANT_SQL = f"nullif({SETTING_SQL}, '')"  # NULL when unset or ''

__all__ = [
    "install_tenant_setting",
    "tenant_session",
    "transaction_tenant",
]


# --- sessions ---------------------------------------------------------------------------------


@contextmanager
def tenant_session(conn: Connection, tenant: str | None) -> Iterator[Connection]:
    """Scope the current transaction of ``conn`` to ``tenant`` (``None`` or ``''``: untenanted).

    Runs ``set_config('agora.tenant', tenant, true)`` — ``SET LOCAL``: it ends with the
    transaction, so a pooled connection never carries it over — beginning the transaction if the
    caller has not, and restores the previous value on leaving the block while the transaction
    is still open. Does nothing on MySQL/MariaDB and SQLite, which have no row-level security.
    """
    if tenant:
        check_identity("tenant", tenant)
    if not dialect_of(conn).has_row_level_security:
        yield conn
        return
    setter = text(f"SELECT set_config('{TENANT_SETTING}', :t, true)")
    previous = conn.execute(text(f"SELECT coalesce({SETTING_SQL}, '')")).scalar()
    conn.execute(setter, {"t": tenant or ""})
    try:
        yield conn
    finally:
        if conn.in_transaction() and not conn.invalidated:
            conn.execute(setter, {"t": previous or ""})


def transaction_tenant(conn: Connection) -> str | None:
    """The tenant this transaction is scoped to (``agora.tenant``; PostgreSQL), else None."""
    if not dialect_of(conn).has_row_level_security:
        return None
    value = conn.execute(text(f"SELECT {TENANT_SQL}")).scalar()
    return None if value is None else str(value)


def install_tenant_setting(engine: Engine, tenant: str) -> None:
    """Make every transaction on ``engine`` begin with ``agora.tenant = tenant`` (SET LOCAL), and
    every autocommit statement carry it for itself only (``install_tenant_hook``; PostgreSQL)."""
    install_tenant_hook(engine, tenant)
