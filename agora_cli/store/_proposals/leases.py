"""Execution leases: the scoped claim, the privileged claim of the next due work, renew, settle.

A claim is one short transaction proved by the rows it changed: a read of the row (scoped, or
from the discovery index with ``FOR UPDATE SKIP LOCKED`` where the server has it) and an update
fenced by its ``version``. A lease is a random token, returned once and stored as its SHA-256,
and a ``generation`` that every claim advances; renew and settle hold only with both, before the
lease expires, so a stale holder is always ``lost``. An expired lease is claimed again
(``recovered``) with the same idempotency key.

Every statement here is one of ``queries.worker_sql``'s, run on the driver's cursor.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from agora_cli.store._clock import Clock
from agora_cli.store._dialects import dialect_of
from agora_cli.store._engine import (
    dialect_name,
    driver_quote,
    galera_slot,
    is_galera,
    prepares_statements,
    quote_all,
    run_committing_if,
    run_on_driver,
    run_pipelined,
    run_write_then_reads,
    runs_compound_statements,
    supports_skip_locked,
    takes_statements_together,
    values_quote,
)
from agora_cli.store._errors import InvalidInput
from agora_cli.store._proposals.decisions import find_proposal
from agora_cli.store._proposals.model import (
    FENCE_ROUNDS,
    SETTLED_STATES,
    ClaimOutcome,
    ClaimResult,
    Lease,
    Proposal,
    RenewResult,
    Scope,
    Settlement,
    SettleResult,
    Work,
    check_lease,
    check_limit,
    check_settle,
    claim_maker,
    clock_or_system,
    fast_maker,
    new_tokens,
    raced_too_often,
    token_hash,
)
from agora_cli.store._proposals.queries import (
    SETTLE_MANY_PG,
    SETTLE_MANY_PG_SEALED,
    TAKE_CHUNK,
    Due,
    claim_many_pg,
    due_rows,
    fence_mysql,
    holders_mysql,
    lock_by_id_mysql,
    next_due_many,
    next_due_probed,
    probe_wants_running,
    settle_fenced_mysql,
    settle_many_mysql,
    settled_generations,
    take_chunks,
    take_leases_chunked_mysql,
    take_leases_mysql,
    worker_sql,
)

if TYPE_CHECKING:
    from agora_cli.store._proposals.queries import WorkerSql
from agora_cli.store._proposals.sealed import open_claim, open_claims, seal_results
from agora_cli.store._values import (
    BIGINT_MAX,
    MAX_CLAIM_BATCH,
    MAX_IDENTITY_UNITS,
    check_identity,
    check_lease_ms,
    dump_json,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

__all__ = [
    "BatchLost",
    "claim_next_proposal",
    "claim_next_proposals",
    "claim_proposal",
    "renew_lease",
    "settle_and_claim_next",
    "settle_proposal",
    "settle_proposals",
    "settle_proposals_and_claim_next",
]


class BatchLost(Exception):
    """``settle_proposals(optimistic=True)`` on MySQL/MariaDB: the batch's one fenced UPDATE
    changed fewer rows than the batch; the caller rolls back and settles it again exactly."""


def _claim_kind(row: Proposal, now: int) -> ClaimOutcome | None:
    if row.decision != "approved":
        return None
    if row.execution_state in (None, "queued"):
        return "claimed"
    if row.execution_state == "running" and (
        row.lease_expires_at is None or row.lease_expires_at <= now
    ):
        return "recovered"
    return None


def _take_lease(
    conn: Connection,
    row: Proposal | Due,
    kind: ClaimOutcome,
    worker_id: str,
    lease_ms: int,
    now: int,
) -> ClaimResult | None:
    """Take the lease of ``row`` (a proposal or a discovery row) if its version still holds."""
    token = secrets.token_urlsafe(32)
    expires = now + lease_ms
    sql = _context(conn).statements.take_lease
    params = (worker_id, token_hash(token), expires, expires, now, row.id, row.version)
    if run_on_driver(conn, sql, params, commit=True).rowcount != 1:
        return None
    work = _work(row, row.attempts + 1)
    return open_claim(conn, ClaimResult(kind, Lease(token, row.generation + 1, expires), work))


def claim_proposal(
    conn: Connection,
    proposal_id: str,
    *,
    scope: Scope,
    worker_id: str,
    lease_ms: int,
    clock: Clock | None = None,
) -> ClaimResult:
    """Take the lease of an approved proposal whose work is queued or whose lease expired."""
    check_identity("worker_id", worker_id)
    check_lease_ms(lease_ms)
    check_identity("id", proposal_id)
    clock = clock_or_system(clock)
    for _ in range(FENCE_ROUNDS):
        row = find_proposal(conn, proposal_id, scope=scope)
        if row is None:
            return ClaimResult("not_found", None, None)
        now = clock.now_ms()
        kind = _claim_kind(row, now)
        if kind is None:
            return ClaimResult("not_claimable", None, None)
        claimed = _take_lease(conn, row, kind, worker_id, lease_ms, now)
        if claimed is not None:
            return claimed
    raise raced_too_often(proposal_id)


def renew_lease(
    conn: Connection,
    proposal_id: str,
    *,
    token: str,
    generation: int,
    lease_ms: int,
    clock: Clock | None = None,
) -> RenewResult:
    """Extend a live lease held with this token and generation; otherwise ``lost``."""
    check_identity("id", proposal_id)
    check_lease(token, generation)
    check_lease_ms(lease_ms)
    now = clock_or_system(clock).now_ms()
    expires = now + lease_ms
    sql = _context(conn).statements.renew
    params = (expires, expires, now, proposal_id, token_hash(token), generation, now)
    if run_on_driver(conn, sql, params, commit=True).rowcount != 1:
        return RenewResult("lost", None)
    return RenewResult("renewed", expires)


def settle_proposal(
    conn: Connection,
    proposal_id: str,
    *,
    token: str,
    generation: int,
    outcome: str,
    result: Any = None,
    error: str | None = None,
    clock: Clock | None = None,
) -> SettleResult:
    """Record ``succeeded`` or ``failed`` under a live lease and end the lease; else ``lost``."""
    check_identity("id", proposal_id)
    check_lease(token, generation)
    check_settle(outcome, error)
    result_text = None if result is None else dump_json("result", result)
    now = clock_or_system(clock).now_ms()
    statements = _context(conn).statements
    hashed = token_hash(token)
    params = (outcome, result_text, error, now, now, proposal_id, hashed, generation, now)
    if result_text is None:
        return _settled(run_on_driver(conn, statements.settle, params, commit=True).rowcount == 1)
    # A result is written as it is when the proposal's tenant never had a key — tested in the
    # UPDATE itself; when it changed nothing (a keyed tenant, or a lost lease), seal and settle.
    if run_on_driver(conn, statements.settle_unkeyed, params, commit=True).rowcount == 1:
        return SettleResult("settled")
    lease = (proposal_id, hashed, generation, now)
    return _settle_sealed(conn, statements.settle, outcome, result_text, error, now, lease, True)


def _settle_sealed(
    conn: Connection,
    settle: str,
    outcome: str,
    result_text: str,
    error: str | None,
    now: int,
    lease: tuple[str, str, int, int],
    commit: bool,
) -> SettleResult:
    """After the unkeyed settle changed nothing (a keyed tenant, or a lost lease): the result
    sealed and ``settle`` (``WorkerSql.settle``) run with it; ``lease`` is its fence's
    parameters (id, token hash, generation, now)."""
    sealed = seal_results(conn, [(lease[0], result_text)])[0]
    params = (outcome, sealed, error, now, now, *lease)
    return _settled(run_on_driver(conn, settle, params, commit=commit).rowcount == 1)


_SETTLED = SettleResult("settled")
_LOST = SettleResult("lost")


def _settled(held: bool) -> SettleResult:
    return _SETTLED if held else _LOST


def find_own_settles(conn: Connection, settlements: Sequence[Settlement]) -> set[str]:
    """The ids among ``settlements`` that their own settle already recorded: the proposal is in
    the settlement's outcome at the settlement's generation.

    Asked only when a settle is retried after its connection was lost, so that a settle that
    committed before the loss reports ``settled``, not ``lost``. A generation is advanced by
    every claim and its lease token is held by one worker only; a proposal settled at that
    generation was settled by that lease.
    """
    if not settlements:
        return set()
    ids = [item.proposal_id for item in settlements]
    sql = dialect_of(conn).driver_sql(settled_generations(len(ids)))
    found = {str(row[0]): (str(row[1]), int(row[2])) for row in run_on_driver(conn, sql, ids).rows}
    return {
        item.proposal_id
        for item in settlements
        if found.get(item.proposal_id) == (item.outcome, item.generation)
    }


# --- the privileged claim of the next due work ------------------------------------------------


class _Context(NamedTuple):
    """What a worker's statements depend on, for one connection (asked once per pooled
    connection: a worker's step reads it with one lookup)."""

    dialect: str
    statements: WorkerSql
    locked: bool  # the server has SKIP LOCKED
    galera: bool  # a Galera cluster node (``is_galera``), with SKIP LOCKED
    reads_json: bool  # discovery rows come as one JSON column (``due_rows``)


_CONTEXT = "agora_worker_context"


def _context(conn: Connection) -> _Context:
    info = conn.info
    found: _Context | None = info.get(_CONTEXT)
    if found is None:
        dialect = dialect_name(conn)
        d = dialect_of(dialect)
        locked = d.locks_rows and supports_skip_locked(conn)
        galera = locked and is_galera(conn)
        found = info[_CONTEXT] = _Context(
            dialect, worker_sql(dialect), locked, galera, d.reads_due_as_json
        )
    return found


def _skip_locked(conn: Connection) -> bool:
    """Whether this connection's server has SKIP LOCKED (asked once per pooled connection)."""
    return _context(conn).locked


def claim_next_proposal(
    conn: Connection, *, worker_id: str, lease_ms: int, clock: Clock | None = None
) -> ClaimResult:
    """Claim the most overdue work across all scopes, or return outcome ``none``.

    Due work is queued, or running under an expired lease (then ``recovered``), taken in
    ``discovery_at`` order from the discovery index only: with ``FOR UPDATE SKIP LOCKED`` where
    the server has it, else (SQLite, older MySQL/MariaDB) by the version fence alone. On a
    Galera cluster node, one of the oldest due rows of this node's share, read without locking
    and taken by the version fence (``next_due_share``: node-local SKIP LOCKED cannot keep
    workers on two nodes off one row, and a replicated write aborts a lock holder).
    Privileged: worker infrastructure only.
    """
    check_identity("worker_id", worker_id)
    check_lease_ms(lease_ms)
    now = clock_or_system(clock).now_ms()
    context = _context(conn)
    dialect, statements, locked = context.dialect, context.statements, context.locked
    if locked and statements.claim_next is not None:
        claimed = _claim_next_in_one_statement(
            conn, statements.claim_next, worker_id, lease_ms, now
        )
        if claimed is not None:
            return claimed
        # Nothing was due, or (rarely) the fence lost a race: the loop below tells them apart.
    read = statements.next_due_locked if locked else statements.next_due_fenced
    args: tuple[Any, ...] = (now, now)
    galera = context.galera
    if galera:
        index, size = galera_slot(conn)
        read = statements.next_due_share if size > 1 else statements.next_due_fenced
        args = (now, size, index, now, size, index) if size > 1 else args
    for _ in range(FENCE_ROUNDS):
        found = run_on_driver(conn, read, args).rows
        rows = sorted(due_rows(dialect, found, context.reads_json), key=_DISCOVERED)
        if not rows and read is statements.next_due_share:
            # Nothing due in this node's share: take from the others' (a node may be gone).
            read, args = statements.next_due_fenced, (now, now)
            continue
        if not rows:
            break
        if galera:
            # Unlocked candidates: this node's other workers read the same few; in random
            # order they rarely wait on each other's row lock (then lose the fence) — Galera.
            random.shuffle(rows)
        for row in rows:
            kind: ClaimOutcome = "recovered" if row.discovery_state == "running" else "claimed"
            claimed = _take_lease(conn, row, kind, worker_id, lease_ms, now)
            if claimed is not None:
                return claimed
    return ClaimResult("none", None, None)


def _claim_next_in_one_statement(
    conn: Connection, sql: str, worker_id: str, lease_ms: int, now: int
) -> ClaimResult | None:
    """PostgreSQL: the locking discovery read and the fenced take-lease as one UPDATE.

    ``None`` when it changed no row: nothing is due, or the version fence lost a race.
    """
    token = secrets.token_urlsafe(32)
    expires = now + lease_ms
    args = (worker_id, token_hash(token), expires, expires, now, now, now)
    rows = run_on_driver(conn, sql, args).rows
    if not rows:
        return None
    *work, generation, prior_state = rows[0]
    kind: ClaimOutcome = "recovered" if prior_state == "running" else "claimed"
    return open_claim(conn, ClaimResult(kind, Lease(token, generation, expires), Work(*work)))


# --- batches: k leases in one claim, n outcomes in one settle -----------------------------------


def _claim_many_args(worker_id: str, tokens: list[str], now: int, expires: int) -> tuple[Any, ...]:
    """The parameters of ``claim_many_pg``: the n-th due row takes the n-th token's hash."""
    return (now, now, worker_id, [token_hash(t) for t in tokens], expires, expires, now)


def _claims_from_rows(
    conn: Connection, rows: list[tuple[Any, ...]], tokens: list[str], expires: int
) -> list[ClaimResult]:
    """``claim_many_pg``'s rows as claims, oldest first (row ``n`` holds ``tokens[n - 1]``)."""
    claimed = []
    for *work, generation, prior_state, n in sorted(rows, key=lambda row: row[-1]):
        kind: ClaimOutcome = "recovered" if prior_state == "running" else "claimed"
        claimed.append(_claim(kind, _lease(tokens[n - 1], generation, expires), _make_work(*work)))
    return open_claims(conn, claimed)


_OLDEST_FIRST = attrgetter("discovery_at", "id")
_claim, _lease, _make_work = fast_maker(ClaimResult), fast_maker(Lease), fast_maker(Work)
_claim_of_due = claim_maker(Due._fields)
_DISCOVERED = attrgetter("discovery_at")


def _work(row: Proposal | Due, attempts: int) -> Work:
    return Work(
        id=row.id,
        idempotency_key=row.idempotency_key,
        tenant_ref=row.tenant_ref,
        actor_ref=row.actor_ref,
        thread_id=row.thread_id,
        run_id=row.run_id,
        tool_call_id=row.tool_call_id,
        tool_name=row.tool_name,
        input=row.input,
        attempts=attempts,
    )


def claim_next_proposals(
    conn: Connection, *, worker_id: str, lease_ms: int, limit: int, clock: Clock | None = None
) -> list[ClaimResult]:
    """Claim up to ``limit`` (1–1000) of the most overdue work across all scopes.

    Each lease has its own token and generation, exactly as ``claim_next_proposal`` issues them;
    an empty list means nothing is due. PostgreSQL: one statement (the two locking reads take up
    to ``limit`` rows of each state, and one fenced UPDATE takes the oldest ``limit``).
    MySQL/MariaDB with SKIP LOCKED: one read (locking its ``queued`` rows, and probing for a due
    lease) and one UPDATE of the rows locked; when the probe finds a due lease that may be among
    the oldest, the running rows are read too and locked by primary key (``next_due_probed``).
    Elsewhere (SQLite, older servers): a fenced loop over candidates, in the caller's
    transaction. Privileged: worker infrastructure only.
    """
    check_identity("worker_id", worker_id)
    check_lease_ms(lease_ms)
    check_limit(limit, MAX_CLAIM_BATCH)
    now = clock_or_system(clock).now_ms()
    expires = now + lease_ms
    dialect = dialect_name(conn)
    locked = _skip_locked(conn)
    tokens = new_tokens(limit)
    if locked and dialect_of(dialect).binds_arrays:
        pg_args = _claim_many_args(worker_id, tokens, now, expires)
        return _claims_from_rows(
            conn, run_on_driver(conn, claim_many_pg(limit), pg_args).rows, tokens, expires
        )
    if locked:
        # The leases' hashes before the read: the rows it locks wait for less Python
        hashes = [token_hash(token) for token in tokens]
        read = next_due_probed(dialect, limit, not prepares_statements(conn)).queued
        found = run_on_driver(conn, read, (now, now)).rows
        return _take_found_mysql(conn, found, worker_id, tokens, hashes, expires, now, limit)
    results: list[ClaimResult] = []
    read = next_due_many(dialect, limit)
    for _ in range(FENCE_ROUNDS):
        candidates = sorted(
            due_rows(dialect, run_on_driver(conn, read, (now, now)).rows),
            key=_OLDEST_FIRST,
        )
        taken_before = len(results)
        for row in candidates:
            if len(results) == limit:
                return results
            kind: ClaimOutcome = "recovered" if row.discovery_state == "running" else "claimed"
            result = _take_lease(conn, row, kind, worker_id, lease_ms, now)
            if result is not None:
                results.append(result)
        if len(results) == limit or len(results) == taken_before or len(candidates) < limit:
            break
    return results


def _take_found_mysql(
    conn: Connection,
    found: list[tuple[Any, ...]],
    worker_id: str,
    tokens: list[str],
    hashes: list[str],
    expires: int,
    now: int,
    limit: int,
) -> list[ClaimResult]:
    """MySQL/MariaDB with SKIP LOCKED: take the leases of the oldest ``limit`` due rows, from
    what the locking read of the queued rows (``next_due_probed``) ``found`` and, when its probe
    asks, the read of the running ones (``_due_to_take``), in one UPDATE sent with the step's
    COMMIT; row ``n`` takes ``tokens[n]`` (whose hash is ``hashes[n]``)."""
    rows = _due_to_take(conn, found, limit, now)
    if not rows:
        return []
    # These rows are locked by this transaction: the update cannot lose a fence.
    sql, args = _take_leases_mysql(conn, worker_id, rows, hashes, expires, now)
    run_on_driver(conn, sql, args, commit=True, rendered=args is None)
    return _claims_of_due(conn, rows, tokens, expires)


def _due_to_take(conn: Connection, found: list[tuple[Any, ...]], limit: int, now: int) -> list[Due]:
    """The oldest ``limit`` due rows, each locked by this transaction: the queued rows that
    ``next_due_probed``'s locking read ``found`` and, when its probe says a due lease may be
    among the oldest (``probe_wants_running``), the running rows read now (one more round trip)
    and locked by primary key (``_lock_recoveries_mysql``)."""
    dialect = dialect_name(conn)
    as_json = not prepares_statements(conn)  # as the read was chosen (``next_due_probed``)
    rows = due_rows(dialect, found, as_json)
    if probe_wants_running(found, rows, limit):
        running = next_due_probed(dialect, limit, as_json).running
        rows += due_rows(dialect, run_on_driver(conn, running, (now,)).rows, as_json)
    rows = sorted(rows, key=_OLDEST_FIRST)[:limit]
    return _lock_recoveries_mysql(conn, rows) if rows else rows


def _claims_of_due(
    conn: Connection, rows: list[Due], tokens: list[str], expires: int
) -> list[ClaimResult]:
    """The claims of ``rows`` whose leases were taken: row ``n`` holds ``tokens[n]``."""
    make = _claim_of_due  # there are ``limit`` tokens, and rows up to as many
    return open_claims(
        conn, [make(token, expires, row) for row, token in zip(rows, tokens, strict=False)]
    )


def _take_leases_mysql(
    conn: Connection, worker_id: str, rows: list[Due], hashes: list[str], expires: int, now: int
) -> tuple[str, tuple[Any, ...] | None]:
    """``take_leases_mysql``'s statement and parameters for ``rows`` (row ``n`` takes the token
    whose hash is ``hashes[n]``): rendered with its values where the driver quotes them
    (``values_quote``: each id quoted once, though named twice), else bound (as a connection
    that prepares its statements sends them, inside the compound statement of its commit: a
    batch of more than ``TAKE_CHUNK`` as ``take_leases_chunked_mysql``)."""
    quote = values_quote(conn)
    m = len(rows)
    taken = hashes[:m]
    ids: list[Any] = [row.id for row in rows]
    if quote is None:
        # chunked only where it goes inside its commit's compound statement, which this
        # connection runs (a statement prepared alone holds one UPDATE)
        if m <= TAKE_CHUNK or not runs_compound_statements(conn):
            pairs = [value for pair in zip(ids, taken, strict=True) for value in pair]
            return take_leases_mysql(m), (worker_id, *pairs, expires, expires, now, *ids)
        args: list[Any] = []
        at = 0
        for size in take_chunks(m):
            part, end = ids[at : at + size], at + size
            args.append(worker_id)
            args += [value for pair in zip(part, taken[at:end], strict=True) for value in pair]
            args += (expires, expires, now)
            args += part
            at = end
        return take_leases_chunked_mysql(m), tuple(args)
    quoted = quote_all(quote, ids)
    literals = [f"'{hashed}'" for hashed in taken]  # 64 hex digits: nothing to escape
    pairs = [value for pair in zip(quoted, literals, strict=True) for value in pair]
    # every value is a literal now: the ints as their digits
    return take_leases_mysql(m) % (quote(worker_id), *pairs, expires, expires, now, *quoted), None


def _as_is(value: Any) -> Any:
    return value


def _lock_recoveries_mysql(conn: Connection, rows: list[Due]) -> list[Due]:
    """InnoDB: the ``running`` rows of a batch were read without locks (see ``queries``); lock
    them by primary key and keep those still as read (same version: still due). The ``queued``
    rows are locked by the read itself."""
    unlocked = [row for row in rows if row.discovery_state == "running"]
    if not unlocked:
        return rows
    ids = [row.id for row in unlocked]
    held = dict(run_on_driver(conn, lock_by_id_mysql(len(ids)), ids).rows)
    kept = {row.id for row in unlocked if held.get(row.id) == row.version}
    return [row for row in rows if row.discovery_state != "running" or row.id in kept]


def settle_proposals(
    conn: Connection,
    settlements: Sequence[Settlement],
    *,
    clock: Clock | None = None,
    optimistic: bool = False,
) -> list[SettleResult]:
    """Record many outcomes, each fenced exactly as ``settle_proposal`` is; one result each.

    A lost lease (wrong token or generation, expired, settled already) is ``lost`` and never
    blocks the others. PostgreSQL: one UPDATE over the arrays of the batch. MySQL/MariaDB: one
    locking read of the live leases and one UPDATE of those that hold; with ``optimistic`` (the
    store's), one fenced UPDATE of the whole batch, and ``BatchLost`` when it changed fewer rows
    than the batch (the caller rolls back and calls again without). SQLite: one fenced UPDATE
    each, in the caller's transaction. At most 1,000 settlements, distinct proposals.
    """
    ids, results_text = _checked_settlements(settlements)
    now = clock_or_system(clock).now_ms()
    hashes = [token_hash(item.token) for item in settlements]
    dialect = dialect_name(conn)
    d = dialect_of(dialect)
    if d.binds_arrays:
        settled = _settle_many_pg(conn, settlements, ids, hashes, results_text, now)
    elif d.updates_through_joins and optimistic:
        fenced, fenced_args = _settle_fenced_mysql(conn, settlements, hashes, results_text, now)
        # all or nothing: committed with the step only if every lease held (on MariaDB, the
        # COMMIT sent with the UPDATE under the server's own test of its count: one round trip)
        m = len(settlements)
        if run_committing_if(conn, fenced, fenced_args, m, rendered=fenced_args is None) != m:
            raise BatchLost
        return [_SETTLED] * m
    elif d.updates_through_joins:
        settled = _settle_exactly_mysql(conn, settlements, ids, hashes, results_text, now)
    else:
        results_text = seal_results(conn, list(zip(ids, results_text, strict=True)))
        sql = worker_sql(dialect).settle
        settled = set()
        for n, item in enumerate(settlements):
            args = (
                item.outcome,
                results_text[n],
                item.error,
                now,
                now,
                ids[n],
                hashes[n],
                item.generation,
                now,
            )
            if run_on_driver(conn, sql, args).rowcount == 1:
                settled.add(ids[n])
    return [_SETTLED if pid in settled else _LOST for pid in ids]


def _checked_settlements(
    settlements: Sequence[Settlement],
) -> tuple[list[str], list[str | None]]:
    """A batch of settlements checked (1–1,000, distinct proposals, each as ``settle``
    checks it): their ids, and their results as JSON text."""
    if not 1 <= len(settlements) <= MAX_CLAIM_BATCH:
        raise InvalidInput(
            f"settle between 1 and {MAX_CLAIM_BATCH} outcomes at once, not {len(settlements)}",
            param="settlements",
        )
    results_text: list[str | None] = []
    dumped: dict[int, str] = {}  # a batch often settles one result object many times
    last: Any = None  # ... and then one after another: the last one's text, without a lookup
    last_text: str | None = None
    ids: list[str] = []
    for item in settlements:
        if not isinstance(item, Settlement):
            raise InvalidInput("each settlement must be a Settlement", param="settlements")
        # Each check's own fast test first, inline (a batch worker's settle makes three calls a
        # settlement fewer); whatever that test does not pass goes to the check itself, which
        # accepts it or raises its own error.
        pid, token, generation = item.proposal_id, item.token, item.generation
        if not (
            type(pid) is str
            and pid.isascii()
            and 0 < len(pid) <= MAX_IDENTITY_UNITS
            and not pid.isspace()
            and "\x00" not in pid
        ):
            check_identity("id", pid)
        if not (
            type(token) is str
            and token
            and token.isascii()
            and "\x00" not in token
            and type(generation) is int
            and 1 <= generation <= BIGINT_MAX
        ):
            check_lease(token, generation)
        if item.error is not None or item.outcome not in SETTLED_STATES:
            check_settle(item.outcome, item.error)
        ids.append(pid)
        result = item.result
        if result is None:
            results_text.append(None)
            continue
        if result is not last:
            text = dumped.get(id(result))
            if text is None:
                text = dumped[id(result)] = dump_json("result", result)
            last, last_text = result, text
        results_text.append(last_text)
    if len(set(ids)) != len(ids):
        raise InvalidInput("a proposal appears twice in one batch of settlements")
    return ids, results_text


def _settle_exactly_mysql(
    conn: Connection,
    settlements: Sequence[Settlement],
    ids: list[str],
    hashes: list[str],
    results_text: list[str | None],
    now: int,
) -> set[str]:
    """MySQL/MariaDB: one locking read of the batch's live leases, one UPDATE of those that
    hold (results sealed for keyed tenants); the ids settled."""
    results_text = seal_results(conn, list(zip(ids, results_text, strict=True)))
    live = run_on_driver(conn, holders_mysql(len(ids)), (*ids, now)).rows
    held = {(pid, hashed, int(gen)) for pid, hashed, gen in live}
    holding = [
        n
        for n, item in enumerate(settlements)
        if (item.proposal_id, hashes[n], item.generation) in held
    ]
    if holding:
        values = [
            value
            for n in holding
            for value in (ids[n], settlements[n].outcome, results_text[n], settlements[n].error)
        ]
        run_on_driver(conn, settle_many_mysql(len(holding)), (*values, now, now), commit=True)
    return {ids[n] for n in holding}


def _settle_many_pg(
    conn: Connection,
    settlements: Sequence[Settlement],
    ids: list[str],
    hashes: list[str],
    results_text: list[str | None],
    now: int,
) -> set[str]:
    """PostgreSQL: one UPDATE over the batch's arrays, results written as they are for tenants
    that never had a key; the rest (keyed tenants, or lost leases) sealed and tried once more."""

    args = _settle_many_pg_args(settlements, ids, hashes, range(len(ids)), results_text, now)
    settled = {row[0] for row in run_on_driver(conn, SETTLE_MANY_PG, args).rows}
    return _settle_sealed_pg(conn, settlements, ids, hashes, results_text, now, settled)


def _settle_many_pg_args(
    settlements: Sequence[Settlement],
    ids: list[str],
    hashes: list[str],
    rows: Sequence[int],
    texts: Sequence[str | None],
    now: int,
) -> tuple[Any, ...]:
    """``SETTLE_MANY_PG``'s parameters for the settlements at ``rows``, results ``texts``."""
    return (
        now,
        now,
        [ids[n] for n in rows],
        [hashes[n] for n in rows],
        [settlements[n].generation for n in rows],
        [settlements[n].outcome for n in rows],
        list(texts),
        [settlements[n].error for n in rows],
        now,
    )


def _settle_sealed_pg(
    conn: Connection,
    settlements: Sequence[Settlement],
    ids: list[str],
    hashes: list[str],
    results_text: list[str | None],
    now: int,
    settled: set[str],
) -> set[str]:
    """After ``SETTLE_MANY_PG`` settled ``settled``: the rest that carry a result (a keyed
    tenant's, or a lost lease) sealed and tried once more; every id settled."""
    rest = [n for n in range(len(ids)) if ids[n] not in settled and results_text[n] is not None]
    if rest:
        sealed = seal_results(conn, [(ids[n], results_text[n]) for n in rest])
        args = _settle_many_pg_args(settlements, ids, hashes, rest, sealed, now)
        settled |= {row[0] for row in run_on_driver(conn, SETTLE_MANY_PG_SEALED, args).rows}
    return settled


def _settle_fenced_mysql(
    conn: Connection,
    settlements: Sequence[Settlement],
    hashes: list[str],
    results_text: list[str | None],
    now: int,
) -> tuple[str, tuple[Any, ...] | None]:
    """MySQL/MariaDB: the whole batch's one fenced UPDATE (``settle_fenced_mysql``) and its
    parameters (``None``: rendered with its values, where the driver quotes them and the
    connection does not prepare: ``values_quote``); the batch holds when it changes as many
    rows as the batch has."""
    columns: tuple[list[Any], list[Any], list[Any]] = (
        [item.outcome for item in settlements],
        list(results_text),
        [item.error for item in settlements],
    )
    # a column varies unless every value is its first (``count`` compares in C, no generator)
    state, result, error = (values.count(values[0]) != len(values) for values in columns)
    varies = (state, result, error)  # each: a CASE by id, or one value for the whole batch
    quote = values_quote(conn)
    ids: list[Any]
    if quote is None:
        ids = [item.proposal_id for item in settlements]
        fences = [
            fence_mysql(item.proposal_id, hashed, item.generation)
            for item, hashed in zip(settlements, hashes, strict=True)
        ]
    else:
        # Each id quoted once; its fence is the same literal with ``:hash:generation`` before
        # the closing quote (hex digits, digits and colons: nothing a quoting changes).
        ids = quote_all(quote, [item.proposal_id for item in settlements])
        fences = [
            f"{quoted[:-1]}:{hashed}:{int(item.generation)}'"
            for quoted, item, hashed in zip(ids, settlements, hashes, strict=True)
        ]
    value = _as_is if quote is None else quote
    args: list[Any] = []
    for values, vary in zip(columns, varies, strict=True):
        if vary:
            for proposal_id, one in zip(ids, values, strict=True):
                args += (proposal_id, value(one))
        else:
            args.append(value(values[0]))
    args += (now, now, now)
    args += ids
    args += fences
    unkeyed = any(text is not None for text in results_text)
    sql = settle_fenced_mysql(len(settlements), varies, unkeyed)
    if quote is not None:
        return sql % tuple(args), None
    return sql, tuple(args)


def settle_and_claim_next(
    conn: Connection,
    settlement: Settlement,
    *,
    worker_id: str,
    lease_ms: int,
    limit: int = 1,
    clock: Clock | None = None,
    optimistic: bool = False,
) -> tuple[SettleResult, list[ClaimResult]]:
    """Settle one job and claim the next ``limit`` in the caller's transaction (a worker's step).

    PostgreSQL (with SKIP LOCKED): the settle and the claim are sent together in one round trip
    (psycopg's pipeline mode), which PostgreSQL runs as one transaction even in autocommit; a
    result is written as it is only where the proposal's tenant never had a key (tested in the
    UPDATE), else sealed and settled after the claim, as ``settle_many_and_claim_next`` does —
    without the KEK that raises ``KeyUnavailable`` with the claim taken (its leases expire and
    are recovered). MySQL/MariaDB with ``optimistic`` (the store's), on a held connection: as
    ``settle_proposals_and_claim_next`` does a batch of one (two round trips, one commit);
    ``BatchLost`` (nothing committed) when the lease was lost or the result must be sealed (a
    keyed tenant): the caller rolls back and calls again without ``optimistic``.
    """
    if dialect_of(conn).pipelines and _skip_locked(conn):
        return _settle_and_claim_pg(conn, settlement, worker_id, lease_ms, limit, clock)
    if not isinstance(settlement, Settlement):
        raise InvalidInput("the settlement must be a Settlement", param="settlement")
    check_identity("worker_id", worker_id)
    check_lease_ms(lease_ms)
    check_limit(limit, MAX_CLAIM_BATCH)
    if optimistic and _settles_in_the_claim(conn):
        outcomes, taken = _settle_many_in_the_claim(
            conn, [settlement], worker_id, lease_ms, limit, clock
        )
        return outcomes[0], taken
    if optimistic and _settles_with_the_reads(conn, 1):
        outcomes, taken = _settle_many_and_claim_mysql(
            conn, [settlement], worker_id, lease_ms, limit, clock
        )
        return outcomes[0], taken
    settled = settle_proposal(
        conn,
        settlement.proposal_id,
        token=settlement.token,
        generation=settlement.generation,
        outcome=settlement.outcome,
        result=settlement.result,
        error=settlement.error,
        clock=clock,
    )
    claimed = claim_next_proposals(
        conn, worker_id=worker_id, lease_ms=lease_ms, limit=limit, clock=clock
    )
    return settled, claimed


def _settle_and_claim_pg(
    conn: Connection,
    item: Settlement,
    worker_id: str,
    lease_ms: int,
    limit: int,
    clock: Clock | None,
) -> tuple[SettleResult, list[ClaimResult]]:
    check_identity("worker_id", worker_id)
    check_lease_ms(lease_ms)
    check_limit(limit, MAX_CLAIM_BATCH)
    if not isinstance(item, Settlement):
        raise InvalidInput("the settlement must be a Settlement", param="settlement")
    check_identity("id", item.proposal_id)
    check_lease(item.token, item.generation)
    check_settle(item.outcome, item.error)
    result_text = None if item.result is None else dump_json("result", item.result)
    now = clock_or_system(clock).now_ms()
    expires = now + lease_ms
    tokens = new_tokens(limit)
    hashed = token_hash(item.token)
    lease = (item.proposal_id, hashed, item.generation, now)
    settle_args = (item.outcome, result_text, item.error, now, now, *lease)
    statements = _context(conn).statements
    # A result is written as it is when the proposal's tenant never had a key — tested in the
    # UPDATE itself, as ``settle_proposal`` does; when it changed nothing (a keyed tenant, or a
    # lost lease), the result is sealed and settled after the claim.
    settle = statements.settle if result_text is None else statements.settle_unkeyed
    settled, claimed = run_pipelined(
        conn,
        [
            (settle, settle_args),
            (claim_many_pg(limit), _claim_many_args(worker_id, tokens, now, expires)),
        ],
    )
    taken = _claims_from_rows(conn, claimed.rows, tokens, expires)
    if settled.rowcount == 1:
        return _SETTLED, taken
    if result_text is None:
        return _LOST, taken
    sealed = _settle_sealed(
        conn, statements.settle, item.outcome, result_text, item.error, now, lease, False
    )
    return sealed, taken


STEP_IN_ONE_TRANSACTION_MAX = 32
"""MySQL: the largest batch whose settle ``settle_proposals_and_claim_next`` keeps open until
the claim's COMMIT. A larger one is settled before the claim: with 100 settled rows held through
the reads, the parse and the claim, four workers' steps ran 0.8x as many jobs a second as a
settle and a claim apart (server CPU 0.080 against 0.070 ms a job), where at 10 the one
transaction ran 1.2x as many. (MariaDB settles inside the claim's last statement, holding the
settled rows for no round trip: any batch; ``_settle_many_in_the_claim``.)"""


def settle_proposals_and_claim_next(
    conn: Connection,
    settlements: Sequence[Settlement],
    *,
    worker_id: str,
    lease_ms: int,
    limit: int,
    clock: Clock | None = None,
    optimistic: bool = False,
) -> tuple[list[SettleResult], list[ClaimResult]]:
    """Settle a batch (``settle_proposals``) and claim the next ``limit``
    (``claim_next_proposals``) in one step: a batch worker's loop, one result per settlement and
    the new claims.

    PostgreSQL (with SKIP LOCKED): the batch's UPDATE and the claim sent together in one round trip
    (psycopg's pipeline mode: one implicit transaction). MariaDB with ``optimistic`` (the store's),
    on a held connection that runs compound statements: the discovery read (``next_due_probed``) in
    one round trip, then one compound statement — the batch's fenced UPDATE and, only if it changed
    every row of the batch, the claim's UPDATE and the COMMIT of both
    (``_settle_many_in_the_claim``). MySQL with ``optimistic``, on a held connection that takes
    statements together (``merge_commits``), a batch of up to ``STEP_IN_ONE_TRANSACTION_MAX``: the
    batch's one fenced UPDATE and the discovery read in one round trip, then the claim's UPDATE with
    the COMMIT of both. Either way two round trips (three when a due lease may be among the oldest
    rows: ``next_due_probed``) and one commit for the step, where a settle and a claim take three
    and two; ``BatchLost`` (nothing committed: the caller rolls back and calls again without
    ``optimistic``) when the UPDATE changed fewer rows than the batch. Elsewhere the settle, then
    the claim, in the caller's transaction (on a connection that commits with its statements, the
    settle's commit comes first).
    """
    check_identity("worker_id", worker_id)
    check_lease_ms(lease_ms)
    check_limit(limit, MAX_CLAIM_BATCH)
    context = _context(conn)
    d = dialect_of(context.dialect)
    if d.pipelines and context.locked:
        return _settle_many_and_claim_pg(conn, settlements, worker_id, lease_ms, limit, clock)
    if optimistic and _settles_in_the_claim(conn):
        return _settle_many_in_the_claim(conn, settlements, worker_id, lease_ms, limit, clock)
    if optimistic and _settles_with_the_reads(conn, len(settlements)):
        return _settle_many_and_claim_mysql(conn, settlements, worker_id, lease_ms, limit, clock)
    settled = settle_proposals(conn, settlements, clock=clock, optimistic=optimistic)
    claimed = claim_next_proposals(
        conn, worker_id=worker_id, lease_ms=lease_ms, limit=limit, clock=clock
    )
    return settled, claimed


def _settles_in_the_claim(conn: Connection) -> bool:
    """Whether a step's settle goes inside the claim's last statement
    (``_settle_many_in_the_claim``): MariaDB with SKIP LOCKED, on a held connection that runs
    compound statements and whose driver quotes (the statements are rendered with their
    values)."""
    return (
        _context(conn).locked and runs_compound_statements(conn) and driver_quote(conn) is not None
    )


def _settles_with_the_reads(conn: Connection, n: int) -> bool:
    """Whether a step's settle of ``n`` leases goes with the next claim's reads in one packet
    (``_settle_many_and_claim_mysql``): MySQL/MariaDB with SKIP LOCKED, on a held connection
    that takes statements together, ``n`` up to ``STEP_IN_ONE_TRANSACTION_MAX``."""
    context = _context(conn)
    return (
        context.locked
        and dialect_of(context.dialect).updates_through_joins
        and n <= STEP_IN_ONE_TRANSACTION_MAX
        and takes_statements_together(conn)
        and driver_quote(conn) is not None
    )


def _step_inputs(
    settlements: Sequence[Settlement], limit: int, clock: Clock | None
) -> tuple[list[str], list[str | None], int, list[str], list[str]]:
    """A step's start on every dialect: the batch checked (``_checked_settlements``: its ids
    and results as JSON text), the time, the batch's token hashes and the claim's ``limit`` new
    tokens; (ids, results, now, hashes, tokens)."""
    ids, results_text = _checked_settlements(settlements)
    now = clock_or_system(clock).now_ms()
    hashes = [token_hash(item.token) for item in settlements]
    return ids, results_text, now, hashes, new_tokens(limit)


def _settle_many_and_claim_pg(
    conn: Connection,
    settlements: Sequence[Settlement],
    worker_id: str,
    lease_ms: int,
    limit: int,
    clock: Clock | None,
) -> tuple[list[SettleResult], list[ClaimResult]]:
    ids, results_text, now, hashes, tokens = _step_inputs(settlements, limit, clock)
    expires = now + lease_ms
    settle_args = _settle_many_pg_args(settlements, ids, hashes, range(len(ids)), results_text, now)
    settled_rows, claimed = run_pipelined(
        conn,
        [
            (SETTLE_MANY_PG, settle_args),
            (claim_many_pg(limit), _claim_many_args(worker_id, tokens, now, expires)),
        ],
    )
    settled = {row[0] for row in settled_rows.rows}
    settled = _settle_sealed_pg(conn, settlements, ids, hashes, results_text, now, settled)
    return [_settled(pid in settled) for pid in ids], _claims_from_rows(
        conn, claimed.rows, tokens, expires
    )


def _step_begun(
    conn: Connection,
    settlements: Sequence[Settlement],
    lease_ms: int,
    limit: int,
    clock: Clock | None,
) -> tuple[int, int, list[str], list[str], str, tuple[Any, ...] | None]:
    """A MySQL/MariaDB step's start (``_step_inputs``) and its fenced UPDATE, rendered with its
    values or bound (``_settle_fenced_mysql``), the claim's tokens hashed; (now, the lease
    expiry, the tokens, their hashes, the settle's text, its parameters)."""
    _ids, results_text, now, hashes, tokens = _step_inputs(settlements, limit, clock)
    settle, args = _settle_fenced_mysql(conn, settlements, hashes, results_text, now)
    hashed = [token_hash(token) for token in tokens]
    return now, now + lease_ms, tokens, hashed, settle, args


def _settle_many_in_the_claim(
    conn: Connection,
    settlements: Sequence[Settlement],
    worker_id: str,
    lease_ms: int,
    limit: int,
    clock: Clock | None,
) -> tuple[list[SettleResult], list[ClaimResult]]:
    """MariaDB: the claim's discovery read (one round trip), then one compound statement — the
    batch's fenced UPDATE and, only if it changed every row of the batch, the claim's UPDATE and
    the COMMIT of both (``run_committing_if`` with ``then``): two round trips, each answered
    once, and one commit a step; the settled rows are held for no round trip. ``BatchLost``
    (nothing committed, the reads' locks held until the caller's rollback) when a lease of the
    batch was lost or a result must be sealed. The statements go rendered with their values, or
    bound where the connection prepares them (``values_quote``)."""
    now, expires, tokens, claim_hashes, settle, settle_args = _step_begun(
        conn, settlements, lease_ms, limit, clock
    )
    read = next_due_probed(dialect_name(conn), limit, not prepares_statements(conn)).queued
    rows = _due_to_take(conn, run_on_driver(conn, read, (now, now)).rows, limit, now)
    take = take_args = None
    if rows:  # locked by this transaction: the claim's UPDATE cannot lose a fence
        take, take_args = _take_leases_mysql(conn, worker_id, rows, claim_hashes, expires, now)
    if take is not None and settle_args is not None and take_args is None:
        raise AssertionError("the settle and the claim were not both bound")
    m = len(settlements)
    rendered = settle_args is None
    changed = run_committing_if(
        conn, settle, settle_args, m, rendered=rendered, then=take, then_params=take_args
    )
    if changed != m:
        raise BatchLost
    return [_SETTLED] * m, _claims_of_due(conn, rows, tokens, expires)


def _settle_many_and_claim_mysql(
    conn: Connection,
    settlements: Sequence[Settlement],
    worker_id: str,
    lease_ms: int,
    limit: int,
    clock: Clock | None,
) -> tuple[list[SettleResult], list[ClaimResult]]:
    """The batch's fenced UPDATE and the locking discovery read in one text (one round trip),
    their rows' leases taken with the COMMIT of both (``_take_found_mysql``)."""
    now, expires, tokens, claim_hashes, settle, settle_args = _step_begun(
        conn, settlements, lease_ms, limit, clock
    )
    if settle_args is not None:  # MySQL: this connection renders (it never prepares)
        raise AssertionError("the settle was not rendered with its values")
    # the read rendered too (its parameters two integers): the text goes with no parameters
    read = next_due_probed(dialect_name(conn), limit).queued % (now, now)
    changed, found = run_write_then_reads(conn, f"{settle}; {read}")
    if changed != len(settlements):
        raise BatchLost  # the reads' locks go with the caller's rollback
    taken = _take_found_mysql(conn, found, worker_id, tokens, claim_hashes, expires, now, limit)
    return [_SETTLED] * len(settlements), taken
