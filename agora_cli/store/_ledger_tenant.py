"""The effective tenant of a ledger row: its own ``tenant_ref`` when set, else its thread's.

The runtime agora administers (adonis-agent) writes ``agent_token_usage`` rows with no
``tenant_ref``: the tenant is the thread's (``agent_thread.tenant_ref``). Every read of the ledger
by tenant — ``spend --tenant`` and ``--by tenant``, ``quota --tenant``, tenant budgets, the fold's
``tenant_key`` — goes through this module, so a row counts for the same tenant everywhere. A row
whose own ``tenant_ref`` is set keeps it, whatever its thread says.

**Why at read time.** The tenant is resolved by a join to ``agent_thread`` when the raw ledger is
read, not filled in when a row is written: a fill in agora's ``record_usage`` would fix only the
rows agora writes (the runtime keeps writing NULL), would cost a read per write, and under
PostgreSQL row-level security a session with no tenant set could not write the filled-in,
tenanted row. The fold stores the effective tenant (``agent_usage_daily.tenant_key``), so folded
reads stay join-free; only the raw part of a window (unfolded days, today) pays for the join.

**Index-friendly.** A tenant's raw rows are read in two statements, summed or merged by the
caller: the rows carrying it (``tenant_is``'s first arm: ``(tenant_ref, created_at)``, as
before) and the rows inheriting it (``inherits_tenant``: ``tenant_ref IS NULL AND thread_id IN
(SELECT id FROM agent_thread WHERE tenant_ref = T)``). One statement OR-ing the two is read by
MariaDB as every NULL-tenant entry of the index (``ref_or_null``); alone, the second is driven
from the tenant's threads through ``agent_token_usage_thread_idx`` — all their history — so on
MySQL/MariaDB ``window_first`` forces the window's ``(NULL, window)`` range instead. A grouping
by tenant outer-joins ``agent_thread`` only for the rows whose own ``tenant_ref`` is NULL (the
condition is in the join's ``ON``). Plans and costs: ``tests/bench/RESULTS.md``, "The
effective tenant".

A thread's tenant is taken as fixed (neither runtime changes it). If one is changed, rows of
days already folded keep the tenant they were folded with until the days are refolded (``agora
spend fold --refold``); ``verify`` compares each folded day per tenant and marks it dirty.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, func, or_, select

from agora_cli.store._dialects import index_hint
from agora_cli.store._schema import thread as t
from agora_cli.store._schema import token_usage as u
from agora_cli.store._sqlexpr import exact_eq

if TYPE_CHECKING:
    from sqlalchemy.sql import ColumnElement, FromClause, Select

__all__ = [
    "effective_tenant",
    "inherits_tenant",
    "ledger_with_threads",
    "tenant_in",
    "tenant_is",
    "window_first",
]

# MySQL/MariaDB's optimizer reads the inheriting rows through the tenant's threads and
# agent_token_usage_thread_idx: every row those threads ever had, not the window's (measured
# 1,305 ms where the window's range takes 100 ms: tests/bench/RESULTS.md).
_WINDOW_FIRST = "FORCE INDEX (agent_token_usage_tenant_created_idx)"


def ledger_with_threads() -> FromClause:
    """``agent_token_usage`` outer-joined to the thread of each row that has no tenant of its
    own (``effective_tenant`` reads it)."""
    return u.outerjoin(t, and_(u.c.tenant_ref.is_(None), t.c.id == u.c.thread_id))


def effective_tenant() -> ColumnElement[Any]:
    """The row's tenant: its own ``tenant_ref``, else its thread's; NULL for neither. Select it
    from ``ledger_with_threads()``."""
    return func.coalesce(u.c.tenant_ref, t.c.tenant_ref)


def tenant_is(tenant: str) -> ColumnElement[bool]:
    """The ledger rows whose effective tenant is ``tenant`` (exact, also on MySQL)."""
    return or_(exact_eq(u.c.tenant_ref, tenant), inherits_tenant(tenant))


def inherits_tenant(tenant: str) -> ColumnElement[bool]:
    """The ledger rows with no tenant of their own on a thread of ``tenant``."""
    threads = select(t.c.id).where(exact_eq(t.c.tenant_ref, tenant))
    return and_(u.c.tenant_ref.is_(None), u.c.thread_id.in_(threads))


def tenant_in(tenants: Sequence[str]) -> ColumnElement[bool]:
    """The ledger rows whose effective tenant is one of ``tenants``. On MySQL ``IN`` compares
    with PAD SPACE: group by ``effective_tenant()`` and its length, and match exactly after."""
    threads = select(t.c.id).where(t.c.tenant_ref.in_(list(tenants)))
    return or_(
        u.c.tenant_ref.in_(list(tenants)),
        and_(u.c.tenant_ref.is_(None), u.c.thread_id.in_(threads)),
    )


def window_first(q: Select[Any]) -> Select[Any]:
    """``q`` (over rows matching ``inherits_tenant``) read on MySQL/MariaDB through the
    window's range of ``(tenant_ref, created_at)`` — rows with no tenant in the window — so that
    its cost is bounded by the window, never by the threads' whole history."""
    return index_hint(q, u, _WINDOW_FIRST)
