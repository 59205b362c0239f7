"""Keep one command to one tenant: is this thread or run the scoped tenant's?

A session tenant (``AGORA_TENANT``, a profile's ``tenant``) scopes every read and write of a
command on every dialect. Lists filter by it in their own query; a command given one id checks
here, first, that the row is the tenant's, so that another tenant's row is exactly a missing one
(``NotFound``, with the message ``get_*`` gives) and none of its sealed values is ever opened.
A run's tenant is its own ``tenant_ref``, else its thread's (as a ledger row's: issue 23).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import func, select

from agora_cli.store.errors import NotFound
from agora_cli.store.schema import run, thread
from agora_cli.store.sqlexpr import exact_eq

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

__all__ = ["check_run_tenant", "check_thread_tenant"]


def check_thread_tenant(conn: Connection, thread_id: str, tenant: str | None) -> None:
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


def check_run_tenant(conn: Connection, run_id: str, tenant: str | None) -> None:
    """Raise ``NotFound`` unless run ``run_id`` is ``tenant``'s (its own, else its thread's)."""
    if tenant is None:
        return
    own = func.coalesce(run.c.tenant_ref, thread.c.tenant_ref)
    found = conn.execute(
        select(run.c.id)
        .select_from(run.outerjoin(thread, thread.c.id == run.c.thread_id))
        .where(exact_eq(run.c.id, run_id), exact_eq(own, tenant))
    ).first()
    if found is None:
        raise NotFound(f"no run {run_id!r}")
