"""Every statement the proposal store runs, each defined once.

Two kinds live here. Rows are read and fenced with SQLAlchemy Core (``select_rows``,
``scope_filter``, ``fenced_update``, and one named statement or builder for each read and write
of ``decisions``, ``delivery``, ``backfill`` and ``inbox``): those paths are rare and clarity
wins. The statements a
worker runs in a loop — discover due work, take a lease, renew it, settle it — are named SQL
text, like procrastinate's ``sql/queries.sql``: one definition each, rendered once per dialect
(placeholder style, derived-table syntax) by ``worker_sql`` and run on the driver's cursor
(``engine.run_on_driver``) on every dialect, SQLite included.

Each discovery read is one index range (``discovery_state = s`` ordered by ``discovery_at``) of
the discovery index. The state is a constant in the SQL text so PostgreSQL keeps one generic
plan for the prepared statement instead of planning every claim anew. On InnoDB a locking read
locks only the rows it returns, so other workers skip them; the row of the other state that a
claim did not take stays locked only until the short transaction ends. PostgreSQL refuses
``FOR UPDATE`` on a ``UNION`` member itself and SQLite refuses parenthesised members, hence
derived tables there; MariaDB materialises each derived table (three times slower), so it gets
the parenthesised branches.

On InnoDB only the ``queued`` read locks. A locking range read also locks the first index record
past its range to see that the range ended — when no lease has expired (the usual case) that is
the oldest live lease's row, so every claim would hold a lock on another worker's running job and
its settle would wait for the claim to commit (4 workers on MariaDB then ran at the speed of
one). The ``running`` read is therefore a plain consistent read, and the expired leases it finds
are taken under the version fence (one claim) or locked by primary key first (a batch).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import and_, bindparam, case, func, or_, select, update
from sqlalchemy.sql.elements import ColumnElement

from agora_cli.store._dialects import dialect_of
from agora_cli.store._proposals.model import (
    EVENT_FIELDS,
    PROPOSAL_FIELDS,
    WORK_FIELDS,
    Proposal,
    ProposalEvent,
    Scope,
)
from agora_cli.store._schema import action_proposal as p
from agora_cli.store._schema import action_proposal_event as ev
from agora_cli.store._schema import message as m
from agora_cli.store._schema import tenant_key as tenant_key_table
from agora_cli.store._schema import thread as t
from agora_cli.store._sqlexpr import exact_eq

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, RowMapping
    from sqlalchemy.sql import Insert, Select, Update

__all__ = [
    "COLUMNS",
    "DUE_STATES",
    "Due",
    "WorkerSql",
    "due_rows",
    "fenced_update",
    "in_scope",
    "proposal_row",
    "rows_by_id_or_key",
    "scope_filter",
    "select_rows",
    "settle_fenced_mysql",
    "settled_generations",
    "tenant_key_of",
    "worker_sql",
]

COLUMNS = tuple(p.c[name] for name in PROPOSAL_FIELDS)
DUE_STATES = ("queued", "running")
# Without SKIP LOCKED (SQLite, MySQL < 8.0.1, MariaDB < 10.6) a claim reads a few candidates of
# each state and lets the version fence decide who gets each.
FALLBACK_CANDIDATES = 8


# --- rows, scopes and fences (Core) -----------------------------------------------------------


def select_rows() -> Select[Any]:
    """``SELECT`` of every column a ``Proposal`` holds."""
    return select(*COLUMNS)


def proposal_row(row: RowMapping) -> Proposal:
    return Proposal(*(row[name] for name in PROPOSAL_FIELDS))


def in_scope(proposal: Proposal, pid: str, scope: Scope) -> bool:
    """Exact comparison in Python too, whatever the collation did."""
    return (
        proposal.id == pid
        and proposal.tenant_ref == scope.tenant_ref
        and proposal.actor_ref == scope.actor_ref
        and proposal.thread_id == scope.thread_id
    )


def tenant_key_of(tenant_ref: str | None) -> str:
    """The tenant an idempotency key is unique in (revision 0008): the tenant, or '' for none
    (a NULL would let two untenanted proposals share a key)."""
    return "" if tenant_ref is None else tenant_ref


def rows_by_id_or_key(
    conn: Connection, pid: str, key: str, tenant_ref: str | None
) -> list[Proposal]:
    """The tenant's proposals with this id or idempotency key: another tenant's never, so that
    neither an ``existing`` nor a ``conflict`` tells of its keys (issue 24, finding 10)."""
    stmt = select_rows().where(
        exact_eq(p.c.tenant_key, tenant_key_of(tenant_ref)),
        or_(exact_eq(p.c.id, pid), exact_eq(p.c.idempotency_key, key)),
    )
    rows = [proposal_row(r) for r in conn.execute(stmt).mappings()]
    return [r for r in rows if r.tenant_ref == tenant_ref]


def scope_filter(scope: Scope) -> ColumnElement[bool]:
    tenant = (
        p.c.tenant_ref.is_(None)
        if scope.tenant_ref is None
        else exact_eq(p.c.tenant_ref, scope.tenant_ref)
    )
    return and_(
        tenant, exact_eq(p.c.actor_ref, scope.actor_ref), exact_eq(p.c.thread_id, scope.thread_id)
    )


def fenced_update(
    conn: Connection,
    row: Proposal,
    changes: dict[str, Any],
    *,
    also: dict[str, Any] | None = None,
) -> Proposal | None:
    """Apply ``changes`` if the row still has ``row.version``; the new state, or ``None``.

    ``also``: columns a ``Proposal`` does not hold (the lease token's hash), written with them.
    """
    version = row.version + 1
    stmt = (
        update(p)
        .where(p.c.id == row.id, p.c.version == row.version)
        .values(**changes, **(also or {}), version=version)
    )
    if conn.execute(stmt).rowcount != 1:
        return None
    return replace(row, **changes, version=version)


# --- create, read, decide, expire (decisions.py) ---------------------------------------------


def insert_proposal(values: dict[str, Any]) -> Insert:
    """``INSERT`` of one proposal row (its columns already sealed where they are sealed)."""
    return p.insert().values(**values)


def select_thread_id(thread_id: str) -> Select[Any]:
    """The thread's id, exactly this one: whether the thread exists."""
    return select(t.c.id).where(exact_eq(t.c.id, thread_id))


def select_proposal(proposal_id: str, scope: Scope | None = None) -> Select[Any]:
    """The proposal with exactly this id, in ``scope`` (any scope: ``None``)."""
    where = [exact_eq(p.c.id, proposal_id)]
    if scope is not None:
        where.append(scope_filter(scope))
    return select_rows().where(*where)


def select_proposals(scope: Scope, decision: str | None, limit: int) -> Select[Any]:
    """A scope's proposals, newest first, optionally of one decision."""
    stmt = select_rows().where(scope_filter(scope))
    if decision is not None:
        stmt = stmt.where(p.c.decision == decision)
    return stmt.order_by(p.c.created_at.desc(), p.c.id.desc()).limit(limit)


EXPIRE_DUE = (
    select_rows()
    .with_only_columns(p.c.id, p.c.version)
    .where(p.c.discovery_state == "pending", p.c.discovery_at <= bindparam("now"))
    .order_by(p.c.discovery_at)
    .limit(bindparam("limit"))
)
"""The oldest pending proposals past their expiry (id, version). Parameters: now, limit."""
EXPIRE_ONE = (
    update(p)
    .where(
        p.c.id == bindparam("b_id"),
        p.c.version == bindparam("b_version"),
        p.c.decision == "pending",
    )
    .values(
        decision="expired",
        discovery_state="done",
        discovery_at=None,
        updated_at=bindparam("now"),
        version=p.c.version + 1,
    )
)
"""Expire one pending proposal, fenced by its version. Parameters: b_id, b_version, now."""


# --- the operator's acts and their audit trail (operator.py) ---------------------------------


def event_row(row: RowMapping) -> ProposalEvent:
    return ProposalEvent(*(row[name] for name in EVENT_FIELDS))


def insert_event(values: dict[str, Any]) -> Insert:
    """``INSERT`` of one operator act on a proposal."""
    return ev.insert().values(**values)


def select_events(proposal_id: str, limit: int) -> Select[Any]:
    """A proposal's newest ``limit`` operator acts (the caller puts them oldest first), on
    ``agent_action_proposal_event_proposal_idx``."""
    return (
        select(*(ev.c[name] for name in EVENT_FIELDS))
        .where(exact_eq(ev.c.proposal_id, proposal_id))
        .order_by(ev.c.created_at.desc(), ev.c.id.desc())
        .limit(limit)
    )


# --- outcomes into their threads (delivery.py) -----------------------------------------------


def select_undelivered(limit: int) -> Select[Any]:
    """Settled proposals whose outcome is not yet in their thread, oldest settled first."""
    return (
        select_rows()
        .where(p.c.settled_at.is_not(None), p.c.outcome_delivered_at.is_(None))
        .order_by(p.c.settled_at, p.c.id)
        .limit(limit)
    )


def select_message_thread(message_id: str) -> Select[Any]:
    """The thread of exactly this message, and the thread's tenant."""
    return (
        select(m.c.thread_id, t.c.tenant_ref)
        .join(t, t.c.id == m.c.thread_id)
        .where(exact_eq(m.c.id, message_id))
    )


def update_message_outcome(message_id: str, values: dict[str, Any]) -> Update:
    """Write a message's ``outcome`` (``values``: the column, sealed where it is sealed)."""
    return update(m).where(m.c.id == message_id).values(values)


# --- legacy rows and the discovery backfill (backfill.py) ------------------------------------

# Computed from the row's own state columns inside the UPDATE, so the values always match the
# version the fence admits. (MySQL applies SET left to right: neither reads discovery_state.)
_LEGACY_STATE = case(
    (p.c.decision == "pending", "pending"),
    (p.c.execution_state == "running", "running"),
    (
        and_(
            p.c.decision == "approved",
            or_(p.c.execution_state.is_(None), p.c.execution_state == "queued"),
        ),
        "queued",
    ),
    else_="done",
)
_LEGACY_AT = case(
    (p.c.decision == "pending", p.c.expires_at),
    (p.c.execution_state == "running", func.coalesce(p.c.lease_expires_at, p.c.updated_at)),
    (
        and_(
            p.c.decision == "approved",
            or_(p.c.execution_state.is_(None), p.c.execution_state == "queued"),
        ),
        func.coalesce(p.c.decided_at, p.c.updated_at),
    ),
    else_=None,
)

COUNT_LEGACY = select(func.count()).select_from(p).where(p.c.discovery_state.is_(None))
"""How many proposals older writers wrote (``discovery_state`` NULL)."""


def select_legacy(limit: int, *, whole_index_key: bool) -> Select[Any]:
    """Up to ``limit`` legacy rows (id, version), on the discovery index's NULL range.

    ``whole_index_key`` (``Dialect.orders_by_whole_index_key``): ORDER BY both index columns.
    Without them PostgreSQL picks a sequential scan that wades through every row earlier batches
    filled; MariaDB sorts unless given ``discovery_at`` alone.
    """
    order = (p.c.discovery_state, p.c.discovery_at) if whole_index_key else (p.c.discovery_at,)
    return (
        select(p.c.id, p.c.version)
        .where(p.c.discovery_state.is_(None))
        .order_by(*order)
        .limit(limit)
    )


def fill_legacy(by_version: dict[int, list[str]]) -> Update:
    """Fill the discovery columns of these legacy rows (ids by the version each was read at),
    each fenced by its version; nothing else changes."""
    fence = or_(
        *(
            and_(p.c.version == version, p.c.id.in_(ids))
            for version, ids in sorted(by_version.items())
        )
    )
    return (
        update(p)
        .where(fence)
        .values(discovery_state=_LEGACY_STATE, discovery_at=_LEGACY_AT, version=p.c.version + 1)
    )


# --- the operator's inbox (inbox.py) ----------------------------------------------------------

_PENDING = p.c.discovery_state == "pending"


def select_inbox(state: str, where: Sequence[ColumnElement[bool]]) -> Select[Any]:
    """The inbox in ``state`` (``queued``/``running``: oldest due first; ``failed``: newest
    settled first), narrowed by ``where``; the caller adds the limit."""
    if state == "failed":
        q = select_rows().where(
            p.c.discovery_state == "done", p.c.execution_state == "failed", *where
        )
        return q.order_by(p.c.settled_at.desc(), p.c.id.desc())
    q = select_rows().where(p.c.discovery_state == state, *where)
    return q.order_by(p.c.discovery_at, p.c.id)


def select_pending_expiring(
    now: int, within: int | None, where: Sequence[ColumnElement[bool]]
) -> Select[Any]:
    """Pending proposals not past their expiry (within ``within`` ms of ``now``), soonest
    first; the caller adds the limit."""
    expiring = select_rows().where(_PENDING, p.c.discovery_at > now, *where)
    if within is not None:
        expiring = expiring.where(p.c.discovery_at <= now + within)
    return expiring.order_by(p.c.discovery_at, p.c.id)


def select_pending_without_expiry(where: Sequence[ColumnElement[bool]]) -> Select[Any]:
    """Pending proposals that never expire; the caller adds the limit."""
    never = select_rows().where(_PENDING, p.c.discovery_at.is_(None), *where)
    # ordered as the index is (discovery_at is NULL throughout): PostgreSQL would otherwise
    # walk the primary key for ORDER BY id and filter the whole table
    return never.order_by(p.c.discovery_at, p.c.id)


def count_past_expiry(now: int, where: Sequence[ColumnElement[bool]]) -> Select[Any]:
    """How many pending proposals are past their expiry."""
    return select(func.count()).select_from(p).where(_PENDING, p.c.discovery_at <= now, *where)


# --- the worker's statements (named SQL, run on the driver's cursor) ---------------------------


class Due(NamedTuple):
    """A row of the discovery read: what ``Work`` needs, and what the fence and order need."""

    id: str
    idempotency_key: str
    tenant_ref: str | None
    actor_ref: str
    thread_id: str
    run_id: str | None
    tool_call_id: str | None
    tool_name: str
    input: str
    attempts: int
    version: int
    generation: int
    discovery_state: str
    discovery_at: int


WORK_COLUMNS = len(WORK_FIELDS) - 1
"""A ``Due`` row's first columns are ``Work``'s but ``attempts`` (a claim counts one more)."""
assert Due._fields[:WORK_COLUMNS] == WORK_FIELDS[:WORK_COLUMNS], "Due must begin with Work"

_T = p.name
_DUE_KEY = ("id", "version", "discovery_state", "discovery_at")


_DUE_INDEX = "agent_action_proposal_discovery_idx"


def _due_read(
    state: str,
    columns: str,
    *,
    per_state: int,
    locked: bool,
    share: bool = False,
    force_index: bool = False,
) -> str:
    lock = " FOR UPDATE SKIP LOCKED" if locked else ""
    # A Galera node's share of the rows (see ``next_due_share``): the hash modulo the cluster size.
    mine = " AND MOD(CRC32(id), %s) = %s" if share else ""
    hint = f" FORCE INDEX ({_DUE_INDEX})" if force_index else ""
    return (
        f"SELECT {columns} FROM {_T}{hint} WHERE discovery_state = '{state}' "
        f"AND discovery_at <= %s{mine} ORDER BY discovery_at LIMIT {per_state}{lock}"
    )


def _union_of_due_reads(
    columns: Sequence[str],
    *,
    derived: bool,
    per_state: int = 1,
    locked: bool = True,
    lock_running: bool = True,
    share: bool = False,
    as_json: bool = False,
    force_index: bool = False,
) -> str:
    """One read of the due rows of each state (``UNION ALL``)."""
    listed = ", ".join(columns)
    if as_json:  # ``due_rows`` reads it back
        listed = f"JSON_ARRAY({listed}) AS due"
    reads = [
        _due_read(
            s,
            listed,
            per_state=per_state,
            locked=locked and (lock_running or s != "running"),
            share=share,
            force_index=force_index,
        )
        for s in DUE_STATES
    ]
    if derived:
        branches = (
            f"SELECT * FROM ({read}) AS {s}" for read, s in zip(reads, DUE_STATES, strict=True)
        )
    else:
        branches = (f"({read})" for read in reads)
    return " UNION ALL ".join(branches)


def _take_lease_set(alias: str) -> str:
    """The take-lease assignments; what they read is qualified by ``alias`` where it must be."""
    return (
        "execution_state = 'running', lease_owner = %s, lease_token_hash = %s, "
        f"lease_expires_at = %s, generation = {alias}generation + 1, "
        f"attempts = {alias}attempts + 1, discovery_state = 'running', discovery_at = %s, "
        f"updated_at = %s, version = {alias}version + 1"
    )


_LEASE_HOLDER = (
    "id = %s AND lease_token_hash = %s AND generation = %s "
    "AND execution_state = 'running' AND lease_expires_at > %s"
)
_TENANT_KEYS = tenant_key_table.name


def _unkeyed(alias: str) -> str:
    """The proposal's tenant never had a key (the same test as ``sealed.seal_results``'s): its
    result is written as it is. In the fenced UPDATE itself, so settling a result needs no read."""
    return f"NOT EXISTS (SELECT 1 FROM {_TENANT_KEYS} k WHERE k.tenant_key = {alias}.tenant_ref)"


@dataclass(frozen=True)
class WorkerSql:
    """The worker's statements for one dialect (placeholders in the driver's style).

    Parameters, in order:

    - ``next_due_locked`` / ``next_due_fenced``: now, now
    - ``next_due_share`` (MySQL/MariaDB, for Galera): now, cluster size, node index, twice
    - ``take_lease``: owner, token hash, lease expiry, lease expiry, now, id, version
    - ``claim_next`` (PostgreSQL only): owner, token hash, expiry, expiry, now, now, now
    - ``renew``: lease expiry, lease expiry, now, id, token hash, generation, now
    - ``settle``: state, result, error, now, now, id, token hash, generation, now
    - ``settle_unkeyed``: as ``settle``; changes nothing when the proposal's tenant has a key
      (its result must be sealed: ``sealed.seal_results``)
    """

    next_due_locked: str
    next_due_share: str
    next_due_fenced: str
    take_lease: str
    claim_next: str | None
    renew: str
    settle: str
    settle_unkeyed: str


def due_rows(dialect: str, rows: Sequence[Sequence[Any]], as_json: bool | None = None) -> list[Due]:
    """A discovery read's rows as ``Due`` (from one JSON column where the dialect reads so;
    ``as_json``: that answer, known already). Plain rows may carry one more column after the
    ``Due`` columns (``ProbedReads.queued``'s probe), left out."""
    if dialect_of(dialect).reads_due_as_json if as_json is None else as_json:
        if not rows:
            return []
        # Each row is one JSON array from the server: parsed together as one array of arrays
        # (one call into the parser, not one a row: less than half the client CPU at k = 100).
        parsed = json.loads(f"[{','.join([row[0] for row in rows])}]")
        if len(parsed) != len(rows) or set(map(len, parsed)) != _DUE_LENGTH:
            raise ValueError("a discovery row was not one JSON array of a due row's columns")
        return list(map(_as_due, parsed))  # each row's values checked for their number above
    if rows and len(rows[0]) == _DUE_WIDTH + 1:  # the probe after the columns
        if set(map(len, rows)) != _PROBED_LENGTH:
            raise ValueError("a discovery row was not a due row's columns and the probe")
        return [_as_due(row[:_DUE_WIDTH]) for row in rows]
    return [_make_due(row) for row in rows]


_make_due = Due._make  # ``Due(*values)`` without the call's unpacking; refuses a wrong length
_as_due = functools.partial(tuple.__new__, Due)  # ``Due._make`` in C, without its length test
_DUE_WIDTH = len(Due._fields)
_DUE_LENGTH, _PROBED_LENGTH = {_DUE_WIDTH}, {_DUE_WIDTH + 1}


def _render(dialect: str, sql: str) -> str:
    return dialect_of(dialect).driver_sql(sql)


@functools.cache
def worker_sql(dialect: str) -> WorkerSql:
    """The worker's statements rendered for ``dialect`` (``postgresql``, ``mysql``, ``sqlite``)."""
    d = dialect_of(dialect)
    due_columns = Due._fields
    claim_next = None
    if d.claims_in_one_update:
        # The two locking reads and the fenced take-lease as one UPDATE: the oldest due row of
        # the two is taken under the same version fence, in one round trip. RETURNING gives the
        # new generation and attempts, and the state the row was discovered in (running: a
        # recovery).
        claim_next = (
            f"UPDATE {_T} AS a SET {_take_lease_set('a.')} "
            f"FROM ({_union_of_due_reads(_DUE_KEY, derived=True)} "
            "ORDER BY discovery_at LIMIT 1) AS due "
            "WHERE a.id = due.id AND a.version = due.version "
            f"RETURNING {', '.join('a.' + name for name in WORK_FIELDS)}, a.generation, "
            "due.discovery_state"
        )
    fenced = _union_of_due_reads(
        due_columns,
        derived=True,
        per_state=FALLBACK_CANDIDATES,
        locked=False,
        as_json=d.reads_due_as_json,
        force_index=d.forces_discovery_index,
    )
    renew = (
        f"UPDATE {_T} SET lease_expires_at = %s, discovery_at = %s, updated_at = %s, "
        f"version = version + 1 WHERE {_LEASE_HOLDER}"
    )
    settle = (
        f"UPDATE {_T} SET execution_state = %s, result = %s, error = %s, settled_at = %s, "
        "lease_token_hash = NULL, lease_expires_at = NULL, discovery_state = 'done', "
        f"discovery_at = NULL, updated_at = %s, version = version + 1 WHERE {_LEASE_HOLDER}"
    )
    return WorkerSql(
        next_due_locked=_render(
            dialect,
            _union_of_due_reads(
                due_columns,
                derived=d.unions_derived_tables,
                lock_running=not d.locks_next_key,
                as_json=d.reads_due_as_json,
                force_index=d.forces_discovery_index,
            ),
        ),
        # On a Galera cluster SKIP LOCKED skips only this node's locks, and a replicated write
        # aborts any local transaction that holds a lock on its row. A locking read keeps locks
        # on rows it scanned and did not return (InnoDB: the row past the range's end; with a
        # filesort, the rows scanned before the one returned), so a worker there reads without
        # locking a few due rows of this node's share (CRC32 of the id modulo the cluster size
        # is the node's index) and takes one by the version fence, which locks that row only:
        # workers on different nodes neither pick nor lock the same rows.
        next_due_share=_render(
            dialect,
            _union_of_due_reads(
                due_columns,
                derived=d.unions_derived_tables,
                share=True,
                locked=False,
                per_state=FALLBACK_CANDIDATES,
                as_json=d.reads_due_as_json,
                force_index=d.forces_discovery_index,
            ),
        ),
        next_due_fenced=_render(dialect, fenced),
        take_lease=_render(
            dialect, f"UPDATE {_T} SET {_take_lease_set('')} WHERE id = %s AND version = %s"
        ),
        claim_next=claim_next,
        renew=_render(dialect, renew),
        settle=_render(dialect, settle),
        settle_unkeyed=_render(dialect, f"{settle} AND {_unkeyed(_T)}"),
    )


# --- batches: k claims, n settlements -----------------------------------------------------------


@functools.cache
def claim_many_pg(k: int) -> str:
    """PostgreSQL: claim up to ``k`` due rows in one UPDATE, each with its own token.

    The two locking reads take up to ``k`` rows of each state; ``row_number`` numbers the
    ``k`` oldest of them, and row ``n`` takes the ``n``-th token hash of the array parameter, so
    every lease has its own token. Parameters: now, now, owner, token hashes (text[]), lease
    expiry, lease expiry, now.

    The arrays go in psycopg's binary format (``%b``): its text format quotes each element
    through two regular expressions in Python, 900 µs for a settle's five arrays of 100 where
    the binary format takes 95.
    """
    reads = _union_of_due_reads(_DUE_KEY, derived=True, per_state=k)
    return (
        "WITH due AS (SELECT id, version, discovery_state, "
        "row_number() OVER (ORDER BY discovery_at, id) AS n "
        f"FROM ({reads}) AS d ORDER BY discovery_at, id LIMIT {k}) "
        f"UPDATE {_T} AS a SET execution_state = 'running', lease_owner = %s, "
        "lease_token_hash = (%b::text[])[due.n], lease_expires_at = %s, "
        "generation = a.generation + 1, attempts = a.attempts + 1, "
        "discovery_state = 'running', discovery_at = %s, updated_at = %s, "
        "version = a.version + 1 "
        "FROM due WHERE a.id = due.id AND a.version = due.version "
        f"RETURNING {', '.join('a.' + name for name in WORK_FIELDS)}, a.generation, "
        "due.discovery_state, due.n"
    )


@functools.cache
def next_due_many(dialect: str, k: int) -> str:
    """Up to ``k`` due rows of each state (``Due`` columns), unlocked: candidates for a batch
    claim to take by the version fence, where the server has no SKIP LOCKED (a locking batch
    claim reads with ``claim_many_pg`` on PostgreSQL, ``next_due_probed`` on MySQL/MariaDB).

    Parameters: now, now.
    """
    d = dialect_of(dialect)
    reads = _union_of_due_reads(
        Due._fields,
        derived=True,
        per_state=k,
        locked=False,
        as_json=d.reads_due_as_json,
        force_index=d.forces_discovery_index,
    )
    return _render(dialect, reads)


class ProbedReads(NamedTuple):
    """MySQL/MariaDB with SKIP LOCKED: a batch claim's discovery in one statement, most often.

    ``queued``: the locking read of up to ``k`` queued rows (``Due``, as ``next_due_many``
    reads them), each row with a second column, the probe — the oldest ``discovery_at`` of the
    running rows whose lease is due (``NULL``: none). Parameters: now (the probe's), now.

    ``running``: the read of up to ``k`` running rows whose lease is due, without locks (see
    ``lock_by_id_mysql``), sent only when the probe says one may be among the oldest ``k``, or
    when no queued row came back to carry the probe. Parameters: now.

    The probe is a scalar subquery that the server answers from the discovery index while it
    plans the read (``MIN`` over the index's ``running`` range: "Select tables optimized
    away"), with no lock and without skipping a locked row: a due lease held by another
    transaction still counts, and a worker that then reads it finds it locked and skips it, as
    the read of both states did. Where every lease holds, the running read's statement is
    saved: the server's CPU for a claim's read of 10 rows went from 285-315 µs (the two reads
    in one packet) to 250-265 (the probed read; 225-230 without the probe), one connection.
    """

    queued: str
    running: str


@functools.cache
def next_due_probed(dialect: str, k: int, as_json: bool = True) -> ProbedReads:
    """``ProbedReads`` for claims of up to ``k`` on ``dialect`` (MySQL/MariaDB: a dialect that
    reads its discovery rows as one JSON column, ``due_rows`` reading the first column back and
    ignoring the probe after it). ``as_json=False``: the ``Due`` columns as they are, the probe
    after them — for a connection that prepares its statements (``_mysql_prepared``), whose
    rows come in the binary protocol: the server's ``JSON_ARRAY`` of a row cost it 40 % more
    than the bare loop's read of a batch of 100, and a row of plain columns costs that
    connection's client less than the JSON's parse."""
    d = dialect_of(dialect)
    if not d.reads_due_as_json:
        raise ValueError(f"next_due_probed: {dialect} does not read discovery rows as JSON")
    listed = ", ".join(Due._fields)
    if as_json:
        listed = f"JSON_ARRAY({listed}) AS due"
    hint = f" FORCE INDEX ({_DUE_INDEX})" if d.forces_discovery_index else ""
    probe = (
        f"(SELECT MIN(discovery_at) FROM {_T}{hint} WHERE discovery_state = 'running' "
        "AND discovery_at <= %s) AS running_due"
    )
    force = d.forces_discovery_index
    queued = _due_read("queued", f"{listed}, {probe}", per_state=k, locked=True, force_index=force)
    running = _due_read("running", listed, per_state=k, locked=False, force_index=force)
    return ProbedReads(_render(dialect, queued), _render(dialect, running))


def probe_wants_running(found: Sequence[Sequence[Any]], rows: Sequence[Due], k: int) -> bool:
    """Whether a claim of up to ``k`` must read the due running rows after ``ProbedReads.queued``
    came back with ``found`` (parsed as ``rows``): no row carried the probe, or a due lease is
    at least as old as the newest queued row read (ties go by id), or fewer than ``k`` queued
    rows came back while a lease is due."""
    if not found:
        return True
    oldest_running = found[0][-1]
    if oldest_running is None:
        return False
    return len(rows) < k or int(oldest_running) <= max(row.discovery_at for row in rows)


@functools.cache
def lock_by_id_mysql(m: int) -> str:
    """MySQL/MariaDB: lock ``m`` rows by primary key, skipping those locked; their versions.

    Parameters: id × m.
    """
    ids = ", ".join("%s" for _ in range(m))
    return f"SELECT id, version FROM {_T} WHERE id IN ({ids}) FOR UPDATE SKIP LOCKED"


@functools.cache
def take_leases_mysql(m: int) -> str:
    """MySQL/MariaDB: take the leases of ``m`` rows this transaction has locked, one UPDATE.

    Parameters: owner, (id, token hash) × m, lease expiry, lease expiry, now, id × m.
    """
    cases = " ".join("WHEN %s THEN %s" for _ in range(m))
    ids = ", ".join("%s" for _ in range(m))
    return (
        f"UPDATE {_T} SET execution_state = 'running', lease_owner = %s, "
        f"lease_token_hash = CASE id {cases} END, lease_expires_at = %s, "
        "generation = generation + 1, attempts = attempts + 1, discovery_state = 'running', "
        f"discovery_at = %s, updated_at = %s, version = version + 1 WHERE id IN ({ids})"
    )


TAKE_CHUNK = 25
"""The rows one ``UPDATE`` of ``take_leases_chunked_mysql`` takes at most."""


def take_chunks(m: int) -> list[int]:
    """The sizes of ``take_leases_chunked_mysql``'s statements for ``m`` rows: as even as
    they can be, none above ``TAKE_CHUNK``."""
    n = -(-m // TAKE_CHUNK)
    return [m // n + (1 if i < m % n else 0) for i in range(n)]


@functools.cache
def take_leases_chunked_mysql(m: int) -> str:
    """MariaDB, inside a compound statement (``BEGIN NOT ATOMIC … END``): ``take_leases_mysql``
    for ``m`` rows as one ``UPDATE`` a chunk of at most ``TAKE_CHUNK`` rows (``take_chunks``).
    A row's ``CASE id WHEN … END`` compares its id with each lease's in turn: half the batch a
    row, 5,000 comparisons for a batch of 100 (12k of the server's instructions a job); chunks of
    25 make them a quarter as many, and the ``CASE`` costs the server 5.4k a job.

    Parameters: for each chunk, ``take_leases_mysql``'s own.
    """
    return "; ".join(take_leases_mysql(size) for size in take_chunks(m))


_SETTLE_MANY_PG = (
    f"UPDATE {_T} AS a SET execution_state = v.state, result = v.result, error = v.error, "
    "settled_at = %s, lease_token_hash = NULL, lease_expires_at = NULL, "
    "discovery_state = 'done', discovery_at = NULL, updated_at = %s, version = a.version + 1 "
    "FROM unnest(%b::text[], %b::text[], %b::bigint[], %b::text[], %b::text[], %b::text[]) "
    "AS v(id, hash, gen, state, result, error) "
    "WHERE a.id = v.id AND a.lease_token_hash = v.hash AND a.generation = v.gen "
    "AND a.execution_state = 'running' AND a.lease_expires_at > %s "
)
SETTLE_MANY_PG = f"{_SETTLE_MANY_PG}AND (v.result IS NULL OR {_unkeyed('a')}) RETURNING a.id"
"""PostgreSQL: settle many leases in one UPDATE, each fenced as ``settle`` is; a result of a
keyed tenant's proposal is left to the caller (it must be sealed first: ``SETTLE_MANY_PG_SEALED``).

Parameters: now, now, ids, token hashes, generations, states, results, errors (arrays), now."""
SETTLE_MANY_PG_SEALED = f"{_SETTLE_MANY_PG}RETURNING a.id"
"""PostgreSQL: ``SETTLE_MANY_PG`` for results already sealed where they must be."""


@functools.cache
def holders_mysql(n: int) -> str:
    """MySQL/MariaDB: lock the live leases among ``n`` ids (their token hash and generation).

    Parameters: id × n, now.
    """
    ids = ", ".join("%s" for _ in range(n))
    return (
        f"SELECT id, lease_token_hash, generation FROM {_T} WHERE id IN ({ids}) "
        "AND execution_state = 'running' AND lease_expires_at > %s FOR UPDATE"
    )


@functools.cache
def settled_generations(n: int) -> str:
    """The state and generation of ``n`` proposals (``%s`` placeholders): after a connection was
    lost mid-settle, whether that settle committed (``leases.find_own_settles``).

    Parameters: id × n.
    """
    ids = ", ".join("%s" for _ in range(n))
    return f"SELECT id, execution_state, generation FROM {_T} WHERE id IN ({ids})"


@functools.cache
def settle_fenced_mysql(m: int, varies: tuple[bool, bool, bool], unkeyed: bool) -> str:
    """MySQL/MariaDB: settle ``m`` leases in one UPDATE, each fenced by its token and generation
    (and with ``unkeyed``, by a tenant that never had a key: a result written as it is); the
    caller compares the rows changed with ``m``.

    ``varies``: whether the state, the result, the error differ across the batch (a ``CASE`` by
    id) or are one value for all (one parameter: fewer for PyMySQL to escape).
    Each lease is fenced by one value, ``fence_mysql(id, token hash, generation)``, compared
    with the row's own: one list that the server searches as a sorted array, where ``m``
    conjunctions ``(id = … AND lease_token_hash = … AND generation = …) OR …`` cost the range
    optimizer a quarter more of the statement's time at m = 100 (and the driver three
    parameters a lease to escape). The ids' list keeps the read on the primary key.
    Parameters: for each of state, result, error: (id, value) × m if it varies else value;
    now, now, now, id × m, fence × m.
    """
    case = " ".join("WHEN %s THEN %s" for _ in range(m))
    sets = ", ".join(
        f"{name} = CASE id {case} END" if vary else f"{name} = %s"
        for name, vary in zip(("execution_state", "result", "error"), varies, strict=True)
    )
    marks = ", ".join("%s" for _ in range(m))
    return (
        f"UPDATE {_T} SET {sets}, settled_at = %s, lease_token_hash = NULL, "
        "lease_expires_at = NULL, discovery_state = 'done', discovery_at = NULL, "
        "updated_at = %s, version = version + 1 "
        f"WHERE execution_state = 'running' AND lease_expires_at > %s AND id IN ({marks}) "
        f"AND CONCAT(id, ':', lease_token_hash, ':', generation) IN ({marks})"
        + (f" AND {_unkeyed(_T)}" if unkeyed else "")
    )


def fence_mysql(proposal_id: str, hashed: str, generation: int) -> str:
    """A lease as ``settle_fenced_mysql`` compares it: ``id:token hash:generation``. It reads
    back one way only — the hash is 64 hex digits and the generation digits, so whatever the id
    holds, two different leases never make the same text."""
    return f"{proposal_id}:{hashed}:{int(generation)}"


@functools.cache
def settle_many_mysql(m: int) -> str:
    """MySQL/MariaDB: settle ``m`` leases this transaction holds locked, one UPDATE.

    Parameters: (id, state, result, error) × m, now, now.
    """
    first = "SELECT %s AS id, %s AS state, %s AS result, %s AS error"
    rows = " UNION ALL ".join([first, *("SELECT %s, %s, %s, %s" for _ in range(m - 1))])
    return (
        f"UPDATE {_T} AS a JOIN ({rows}) AS v ON a.id = v.id "
        "SET a.execution_state = v.state, a.result = v.result, a.error = v.error, "
        "a.settled_at = %s, a.lease_token_hash = NULL, a.lease_expires_at = NULL, "
        "a.discovery_state = 'done', a.discovery_at = NULL, a.updated_at = %s, "
        "a.version = a.version + 1"
    )
