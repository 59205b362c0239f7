"""A child row carries its parent's tenant: the store's check, on every dialect.

PostgreSQL's row-level security keeps a session to its tenant's rows, but foreign keys ignore
it, and MySQL/MariaDB and SQLite have none: a ledger row, run or proposal for tenant ``acme``
on a ``globex`` thread would be accepted by the database alone. Where agora's library writes
such a row it first reads the thread's tenant by primary key in the same transaction (one
indexed lookup, before the insert) and refuses a thread of another tenant as it refuses a
missing one (``NotFound``: the answer never tells whether another tenant's thread exists). An
untenanted thread takes any tenant's rows (the operator's shared threads: the demo's nightly
summaries hold every tenant's ledger rows); under row-level security a tenant's session does
not see it, so there it is refused as missing. A row without ``tenant_ref`` belongs to its
thread's tenant (``ledger_tenant``) and needs no check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import select

from agora_cli.store.errors import NotFound
from agora_cli.store.schema import thread
from agora_cli.store.sqlexpr import exact_eq

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

__all__ = ["check_thread_tenant"]


def check_thread_tenant(conn: Connection, thread_id: str, tenant_ref: str | None) -> None:
    """Refuse (``NotFound``) a child row for ``tenant_ref`` on another tenant's thread (or one
    this session cannot see); nothing to check when ``tenant_ref`` is ``None``. Call it in the
    transaction that writes the row."""
    if tenant_ref is None:
        return
    owner = conn.execute(
        select(thread.c.tenant_ref).where(exact_eq(thread.c.id, thread_id))
    ).first()
    # exact: MySQL's PAD SPACE would take 'acme ' for 'acme'
    if owner is None or (owner[0] is not None and owner[0] != tenant_ref):
        raise NotFound(f"no thread {thread_id!r} of tenant {tenant_ref!r}")
