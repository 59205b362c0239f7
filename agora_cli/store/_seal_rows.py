"""Sealing rows already written (`db seal`), destroying a tenant's keys (crypto-shredding)
and compacting the tables that held plaintext."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, bindparam, func, not_, or_, select, text, tuple_, update

from agora_cli.store._clock import SystemClock
from agora_cli.store._dialects import dialect_of
from agora_cli.store._errors import (
    NotFound,
    SealBroken,
)
from agora_cli.store._redaction_form import is_redacted_sql
from agora_cli.store._schema import (
    action_proposal,
    message,
    queued_message,
    run,
    stream_frame,
    thread,
    tool_call,
)
from agora_cli.store._schema import tenant_key as k  # the keys table, in every key query here
from agora_cli.store._sqlexpr import exact_eq
from agora_cli.store._tenant_setting import OUTSIDE_TRANSACTION
from agora_cli.store._values import check_identity, check_int

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqlalchemy import Table
    from sqlalchemy.engine import Connection, Engine
    from sqlalchemy.sql import ColumnElement

    from agora_cli.store._clock import Clock
from agora_cli.store._sealing import (
    _SHREDDED_KEY,
    MAX_SEAL_BATCH,
    SEALED_COLUMNS,
    SEALED_PREFIX,
    Kek,
    _active_row,
    _claimed_key,
    _DataKey,
    _key_rows,
    _open,
    _require_kek,
    _seal,
    _unwrap,
    frame_row_id,
)

__all__ = [
    "SealResult",
    "count_to_seal",
    "destroy_tenant_keys",
    "seal_tenant",
    "vacuum_sealed_tables",
]


# --- sealing existing rows -------------------------------------------------------------------


@dataclass(frozen=True)
class SealResult:
    """What ``seal_tenant`` did (or, dry run, would do), per table (its sealed columns' values
    summed): values counted
    at the start (``to_seal``), values it sealed, values left (counted at the end), and values
    it left because they name a key but do not open (``broken``: copied, altered or shredded;
    readers show them as markers)."""

    tenant: str
    key_id: str
    rotate: bool
    dry_run: bool
    to_seal: dict[str, int]
    sealed: dict[str, int]
    remaining: dict[str, int]
    batches: int
    broken: dict[str, int] = field(default_factory=dict)


def _sealed_tables() -> list[tuple[Table, Callable[[str], ColumnElement[bool]]]]:
    """The sealed columns' tables, each with its "belongs to the tenant" condition.

    A message, a tool call (through its message) and a frame (through its run) belong to their
    thread's tenant; a thread, a queued message and a proposal to their own ``tenant_ref``.
    """
    # A batch reads the primary key in order from where the last one ended, so that a whole run
    # reads each row once. Given the thread index, SQLite (always), MariaDB and PostgreSQL (by
    # their statistics) drive a batch from the tenant's threads instead and sort every remaining
    # row of the tenant by id, each batch: at 200k rows, 0.8 s a batch on SQLite and 0.57 s on
    # MariaDB, against 18 ms on both without. ``thread_id || ''`` is not indexed, so the
    # primary key drives (the plans are in tests/bench/RESULTS.md).
    thread_id = message.c.thread_id + ""

    def threads_of(tenant: str) -> Any:
        return select(thread.c.id).where(exact_eq(thread.c.tenant_ref, tenant))

    def thread_of(tenant: str) -> ColumnElement[bool]:
        return exact_eq(thread.c.tenant_ref, tenant)

    def message_of(tenant: str) -> ColumnElement[bool]:
        return thread_id.in_(threads_of(tenant))

    def queued_of(tenant: str) -> ColumnElement[bool]:
        return exact_eq(queued_message.c.tenant_ref, tenant)

    def call_of(tenant: str) -> ColumnElement[bool]:
        messages = select(message.c.id).where(message.c.thread_id.in_(threads_of(tenant)))
        return (tool_call.c.message_id + "").in_(messages)

    def proposal_of(tenant: str) -> ColumnElement[bool]:
        return exact_eq(action_proposal.c.tenant_ref, tenant)

    def frame_of(tenant: str) -> ColumnElement[bool]:
        runs = select(run.c.id).where(run.c.thread_id.in_(threads_of(tenant)))
        return (stream_frame.c.run_id + "").in_(runs)

    return [
        (message, message_of),
        (queued_message, queued_of),
        (thread, thread_of),
        (tool_call, call_of),
        (action_proposal, proposal_of),
        (stream_frame, frame_of),
    ]


def _row_key(table: Table) -> list[Any]:
    """The columns naming a row (the primary key), in order."""
    return list(table.primary_key.columns)


def _row_id(table: Table, key: Sequence[Any]) -> str:
    """The row id a value of the row is sealed for (a frame's: ``frame_row_id``)."""
    if table.name == "agent_stream_frame":
        return frame_row_id(key[0], key[1])
    return str(key[0])


def _seal_targets() -> list[tuple[Table, str, Callable[[str], ColumnElement[bool]]]]:
    return [
        (table, column, of)
        for table, of in _sealed_tables()
        for column in SEALED_COLUMNS[table.name]
    ]


def _sealing_key_ids(conn: Connection, tenant: str, active_id: str, rotate: bool) -> list[str]:
    """The key ids a value may already be sealed under: the tenant's (``rotate``: the active
    one). Read once per count or batch, not once per column."""
    if rotate:
        return [active_id]
    return list(conn.execute(select(k.c.id).where(exact_eq(k.c.tenant_key, tenant))).scalars())


def _needs_sealing(
    conn: Connection,
    table: Table,
    column: str,
    tenant: str,
    active_id: str,
    rotate: bool,
    *,
    ids: list[str] | None = None,
) -> ColumnElement[bool]:
    """Not NULL, not in the sealed form under a key of the tenant (``rotate``: under its
    active key) and not a redaction marker (``db redact``'s keyed hash: nothing left to seal,
    and sealing it would have the next ``db redact`` hash it again). Text in the sealed form
    naming no key of the tenant is plaintext: sealed."""
    col = table.c[column]
    redacted = is_redacted_sql(col, frame=table.name == "agent_stream_frame")
    if ids is None:
        ids = _sealing_key_ids(conn, tenant, active_id, rotate)
    under = [
        func.substr(col, 1, len(f"{SEALED_PREFIX}{i}:")) == f"{SEALED_PREFIX}{i}:" for i in ids
    ]
    if under:
        return and_(col.is_not(None), not_(redacted), not_(or_(*under)))
    return and_(col.is_not(None), not_(redacted))


def count_to_seal(conn: Connection, *, tenant: str, rotate: bool = False) -> dict[str, int]:
    """Values of the tenant not yet sealed under one of its keys (with ``rotate``: not under the
    active key), per table (every sealed column of the table counted)."""
    return _by_table(_count_columns(conn, check_identity("tenant", tenant), rotate))


def _by_table(counts: Mapping[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, n in counts.items():
        table = name.partition(".")[0]
        out[table] = out.get(table, 0) + n
    return out


def _count_columns(conn: Connection, tenant: str, rotate: bool) -> dict[str, int]:
    row = _active_row(conn, tenant)
    active_id = "" if row is None else row["id"]
    ids = _sealing_key_ids(conn, tenant, active_id, rotate)
    return {
        f"{table.name}.{column}": int(
            conn.execute(
                select(func.count()).where(
                    of(tenant),
                    _needs_sealing(conn, table, column, tenant, active_id, rotate, ids=ids),
                )
            ).scalar_one()
        )
        for table, column, of in _seal_targets()
    }


def _tenant_keys(conn: Connection, tenant: str, kek: Kek) -> tuple[_DataKey, dict[str, _DataKey]]:
    """Every live key of the tenant unwrapped (so a wrong KEK fails before any write), the
    active one first; destroyed keys are left out (their values stay shredded)."""
    active = _active_row(conn, tenant)
    if active is None:
        raise NotFound(f"tenant {tenant!r} has no active key: `agora keys create` first")
    rows = conn.execute(select(k).where(exact_eq(k.c.tenant_key, tenant))).mappings().all()
    keys = {r["id"]: _unwrap(kek, r) for r in rows if r["wrapped_key"] != _SHREDDED_KEY}
    return keys[active["id"]], keys


def seal_tenant(
    engine: Engine,
    *,
    tenant: str,
    rotate: bool = False,
    batch: int = 1000,
    dry_run: bool = False,
    max_batches: int | None = None,
    kek: Kek | None = None,
    progress: Callable[[int], None] | None = None,
) -> SealResult:
    """Seal the tenant's plaintext values (every column of ``SEALED_COLUMNS``) under its active
    key, in bounded batches.

    With ``rotate``, values sealed under retired keys are opened and sealed again under the
    active one. Every key of the tenant is unwrapped before anything is written (a wrong KEK is
    ``WrongKek``, nothing written). Each batch — at most ``batch`` rows of one column, read by
    id — is its own transaction (the exception to "the caller owns the transaction"), and each
    row's update is fenced by the value it read, so a batch killed half-way is rolled back
    whole, a rerun resumes where the last committed batch ended, and no value is ever sealed
    twice. A value that names a key of the tenant but does not open is left as it is and
    counted in ``broken``. ``progress(n)`` is called with the values of each batch.
    """
    tenant = check_identity("tenant", tenant)
    check_int("batch", batch, low=1, high=MAX_SEAL_BATCH)
    if max_batches is not None:
        check_int("max_batches", max_batches, low=1, high=10**9)
    found = _require_kek(kek, f"sealing tenant {tenant!r}'s rows")
    with engine.connect() as conn:
        active, keys = _tenant_keys(conn, tenant, found)
        before = _count_columns(conn, tenant, rotate)
        conn.rollback()
    sealed = {name: 0 for name in before}
    broken = {name: 0 for name in before}
    batches = 0
    if not dry_run:
        for table, column, of in _seal_targets():
            name = f"{table.name}.{column}"
            col = table.c[column]
            pk = _row_key(table)
            width = len(pk)
            after: tuple[Any, ...] | None = None
            while before[name] and (max_batches is None or batches < max_batches):
                with engine.begin() as conn:
                    q = (
                        select(*pk, col)
                        .where(
                            of(tenant),
                            _needs_sealing(conn, table, column, tenant, active.id, rotate),
                        )
                        .order_by(*pk)
                        .limit(batch)
                    )
                    if after is not None:
                        q = q.where(
                            pk[0] > after[0] if width == 1 else tuple_(*pk) > tuple_(*after)
                        )
                    fence = (
                        update(table)
                        .where(
                            and_(*(c == bindparam(f"b_k{n}") for n, c in enumerate(pk))),
                            col == bindparam("b_old"),
                        )
                        .values({column: bindparam("b_new")})
                    )
                    rows = conn.execute(q).all()
                    if not rows:
                        break
                    changes = []
                    # keys named here that are not the tenant's live ones: one read a batch
                    claimed = {_claimed_key(r[width]) for r in rows} - set(keys) - {None}
                    foreign = _key_rows(conn, [str(c) for c in claimed])
                    for r in rows:
                        key, value = tuple(r[:width]), r[width]
                        row_id = _row_id(table, key)
                        plain = value
                        key_id = _claimed_key(value)
                        if key_id in foreign:  # another tenant's key, or a destroyed one
                            broken[name] += 1
                            continue
                        if key_id is not None and key_id in keys:
                            try:
                                plain = _open(
                                    keys[key_id], table.name, column, tenant, row_id, value
                                )
                            except SealBroken:
                                broken[name] += 1
                                continue
                        new = _seal(active, table.name, column, row_id, plain)
                        ident = {f"b_k{n}": k for n, k in enumerate(key)}
                        changes.append({**ident, "b_old": value, "b_new": new})
                    done = conn.execute(fence, changes).rowcount if changes else 0
                batches += 1
                # A row whose fence lost was sealed by a concurrent run: not counted twice.
                exact = conn.dialect.supports_sane_multi_rowcount and done >= 0
                sealed[name] += done if exact else len(changes)
                after = tuple(rows[-1][:width])
                if progress is not None:
                    progress(len(rows))
                if len(rows) < batch:
                    break
    with engine.connect() as conn:
        remaining = _count_columns(conn, tenant, rotate) if not dry_run else before
        conn.rollback()
    return SealResult(
        tenant=tenant,
        key_id=active.id,
        rotate=rotate,
        dry_run=dry_run,
        to_seal=_by_table(before),
        sealed=_by_table(sealed),
        remaining=_by_table(remaining),
        batches=batches,
        broken=_by_table(broken),
    )


def destroy_tenant_keys(conn: Connection, *, tenant: str, clock: Clock | None = None) -> list[str]:
    """Crypto-shred a tenant: overwrite every one of its data keys (the rows stay, retired, so
    its sealed values read as ``shredded``). Needs no KEK; cannot be undone.

    Returns the ids destroyed (none when already destroyed); ``NotFound`` for a tenant that
    never had a key. Until ``create_tenant_key`` gives it a new key, writes of the tenant's
    content are refused (``KeyUnavailable``) rather than stored in plaintext.
    """
    tenant = check_identity("tenant", tenant)
    mine = exact_eq(k.c.tenant_key, tenant)
    ids = sorted(conn.execute(select(k.c.id).where(mine).with_for_update()).scalars())
    if not ids:
        raise NotFound(f"tenant {tenant!r} has no key to destroy")
    live = sorted(
        conn.execute(select(k.c.id).where(mine, k.c.wrapped_key != _SHREDDED_KEY)).scalars()
    )
    now = (clock or SystemClock()).now_ms()
    conn.execute(
        update(k)
        .where(mine, k.c.wrapped_key != _SHREDDED_KEY)
        .values(wrapped_key=_SHREDDED_KEY, retired_at=func.coalesce(k.c.retired_at, now))
    )
    return live


def vacuum_sealed_tables(engine: Engine) -> list[str]:
    """Rewrite the sealed tables so that old row versions (the plaintext ``db seal`` replaced)
    leave the table files: PostgreSQL ``VACUUM FULL`` (an ACCESS EXCLUSIVE lock on each table
    in turn: reads and writes of that table wait), MySQL/MariaDB ``OPTIMIZE TABLE`` (InnoDB
    rebuilds the table online: brief exclusive locks at its start and end), SQLite ``VACUUM``
    then a WAL checkpoint (the whole file rebuilt under an exclusive lock). Returns the
    statements run. WAL already archived, replicas' own files and backups keep what they hold.
    """
    d = dialect_of(engine)
    stmts = d.compaction_statements(list(SEALED_COLUMNS))
    if d.compacts_on_driver:
        # outside any transaction: the engine's own BEGIN (IMMEDIATE) would refuse VACUUM
        raw = engine.raw_connection()
        try:
            driver: Any = raw.driver_connection
            driver.commit()
            before, driver.isolation_level = driver.isolation_level, None
            try:
                for stmt in stmts:
                    driver.execute(stmt).fetchall()
            finally:
                driver.isolation_level = before
        finally:
            raw.close()
        return stmts
    outside = {"isolation_level": "AUTOCOMMIT", OUTSIDE_TRANSACTION: True}
    with engine.connect().execution_options(**outside) as conn:
        for stmt in stmts:
            result = conn.execute(text(stmt))
            if result.returns_rows:  # OPTIMIZE TABLE answers with a status row per table
                result.fetchall()
    return stmts
