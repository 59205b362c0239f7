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

The read side lives here too: a command scoped to a session tenant (``AGORA_TENANT``, a profile's
``tenant``) and given one id checks first that the thread or run is that tenant's
(``check_thread_in_scope``, ``check_run_in_scope``), so that another tenant's row is exactly a
missing one and none of its sealed values is ever opened. Unlike the write check, an untenanted
thread is not the tenant's. A run's tenant is its own ``tenant_ref``, else its thread's
(``run_tenant``, as a ledger row's: issue 23).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import func, select

from agora_cli.store._errors import NotFound
from agora_cli.store._schema import run, thread
from agora_cli.store._sqlexpr import exact_eq

if TYPE_CHECKING:
    from typing import Any

    from sqlalchemy.engine import Connection
    from sqlalchemy.sql import ColumnElement, FromClause

__all__ = [
    "check_run_in_scope",
    "check_thread_in_scope",
    "check_thread_tenant",
    "run_tenant",
    "runs_with_threads",
]


def runs_with_threads() -> FromClause:
    """``agent_run`` outer-joined to its thread, for ``run_tenant``."""
    return run.outerjoin(thread, thread.c.id == run.c.thread_id)


def run_tenant() -> ColumnElement[Any]:
    """A run's tenant: its own ``tenant_ref``, else its thread's (over ``runs_with_threads``)."""
    return func.coalesce(run.c.tenant_ref, thread.c.tenant_ref)


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


def check_thread_in_scope(conn: Connection, thread_id: str, tenant: str | None) -> None:
    """Raise ``NotFound`` unless thread ``thread_id`` belongs to ``tenant`` (``None``: any)."""
    if tenant is None:
        return
    found = conn.execute(
        select(thread.c.id).where(
            exact_eq(thread.c.id, thread_id), exact_eq(thread.c.tenant_ref, tenant)
        )
    ).first()
    if found is None:
        raise NotFound(f"no thread {thread_id!r}")


def check_run_in_scope(conn: Connection, run_id: str, tenant: str | None) -> None:
    """Raise ``NotFound`` unless run ``run_id`` is ``tenant``'s (its own, else its thread's)."""
    if tenant is None:
        return
    found = conn.execute(
        select(run.c.id)
        .select_from(runs_with_threads())
        .where(exact_eq(run.c.id, run_id), exact_eq(run_tenant(), tenant))
    ).first()
    if found is None:
        raise NotFound(f"no run {run_id!r}")
