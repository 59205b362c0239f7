"""The action-proposal store: decisions, execution leases, worker discovery and the backfill.

An action proposal is a tool call that waits for a person's decision. Its life::

    pending ─decide(approved)─▶ approved, queued ─claim─▶ running ─settle─▶ succeeded | failed
       │                                                    │   ▲
       ├─decide(rejected)─▶ rejected                        └───┘ lease expired: claimed again,
       └─past expires_at──▶ expired                               generation + 1, same key

Every read, decision and scoped claim names the whole scope ``(tenant_ref, actor_ref,
thread_id)``; a proposal outside it looks exactly like a missing one. Read-modify-write updates
are fenced by the row's ``version`` (``WHERE id=? AND version=?``, then ``version+1``), and a
fence that loses a race re-reads and decides again. Lease tokens are random and returned once;
only their SHA-256 is stored. Every write keeps the discovery columns (``discovery_state``,
``discovery_at``) in step, so that ``claim_next`` and ``expire`` read only the discovery index.
Every timestamp comes from the store's clock.

Module functions take the caller's ``Connection`` (the caller owns the transaction);
``ActionProposalStore`` wraps each in its own short transaction and retries deadlocks and
serialization failures, boundedly.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeVar, cast

from sqlalchemy import (
    Integer,
    String,
    and_,
    bindparam,
    case,
    func,
    literal_column,
    or_,
    select,
    union_all,
    update,
)
from sqlalchemy.exc import DBAPIError, IntegrityError

from agora_cli.store.clock import Clock, SystemClock, iso_ms
from agora_cli.store.engine import dialect_name, retry_transient, supports_skip_locked
from agora_cli.store.errors import Conflict, InvalidInput, NotFound
from agora_cli.store.schema import action_proposal as p
from agora_cli.store.schema import message as m
from agora_cli.store.sqlexpr import exact_eq
from agora_cli.store.values import (
    BIGINT_MAX,
    MAX_IDENTITY_UNITS,
    check_identity,
    check_instant,
    check_int,
    check_lease_ms,
    check_text,
    dump_json,
    load_json,
    utf16_units,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine, RowMapping

__all__ = [
    "DECISIONS",
    "ID_PREFIX",
    "MAX_IDENTITY_UNITS",
    "ActionProposalStore",
    "BackfillResult",
    "ClaimResult",
    "CreateResult",
    "DecideResult",
    "DeliveryResult",
    "Lease",
    "NewProposal",
    "Proposal",
    "RenewResult",
    "Scope",
    "SettleResult",
    "Work",
    "backfill_discovery_index",
    "check_identity",
    "claim_next_proposal",
    "claim_proposal",
    "count_legacy_proposals",
    "create_proposal",
    "decide_proposal",
    "default_idempotency_key",
    "deliver_outcome",
    "expire_proposals",
    "find_proposal",
    "get_proposal",
    "list_proposals",
    "list_undelivered_outcomes",
    "proposal_id",
    "renew_lease",
    "settle_proposal",
    "utf16_units",
]

ID_PREFIX = "ap_"
DECISIONS = ("pending", "approved", "rejected", "expired")
MAX_LIST = 1000
MAX_BACKFILL_BATCH = 10_000
# A fenced update loses only to a writer that changed the row; after a few rounds the row has
# left the state being raced for, so this bound is never reached in practice.
_FENCE_ROUNDS = 16
_FALLBACK_CANDIDATES = 8

CreateOutcome = Literal["created", "existing", "conflict"]
DecideOutcome = Literal["applied", "unchanged", "conflict", "expired", "not_found"]
ClaimOutcome = Literal["claimed", "recovered", "not_claimable", "not_found", "none"]
RenewOutcome = Literal["renewed", "lost"]
SettleOutcome = Literal["settled", "lost"]
DeliveryOutcome = Literal["delivered", "already_delivered", "not_settled", "not_found"]

T = TypeVar("T")


# --- identity and validation ------------------------------------------------------------------


def _check_optional(name: str, value: str | None) -> str | None:
    return None if value is None else check_identity(name, value)


def _check_limit(limit: object, high: int = MAX_LIST) -> int:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= high:
        raise InvalidInput(f"limit must be an integer from 1 to {high}, not {limit!r}")
    return limit


def _check_lease_ms(lease_ms: object) -> int:
    # A lease ends at most 7 days out: checked before any SQL, so that a claim can never be
    # committed with an expiry that its own result (or any later read) cannot represent.
    return check_lease_ms(lease_ms)


def _check_lease_args(token: object, generation: object) -> None:
    if not isinstance(token, str) or not token:
        raise InvalidInput("the lease token must be a non-empty string")
    check_text("the lease token", token)
    check_int("generation", generation, low=1, high=BIGINT_MAX)


def proposal_id(run_id: str, tool_call_id: str) -> str:
    """Return the deterministic id of the proposal for one tool call of one run."""
    check_identity("run_id", run_id)
    check_identity("tool_call_id", tool_call_id)
    # A JSON pair, so that ("a:b", "c") and ("a", "b:c") never share a digest.
    digest = hashlib.sha256(json.dumps([run_id, tool_call_id]).encode()).hexdigest()
    return ID_PREFIX + digest


def default_idempotency_key(run_id: str, tool_call_id: str) -> str:
    """Return the default idempotency key, ``run_id:tool_call_id``."""
    return check_identity("idempotency_key", f"{run_id}:{tool_call_id}")


_dump_json = dump_json
_load_json = load_json


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# --- results ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scope:
    """Whose proposal it is: ``tenant_ref`` is ``None`` only for a proposal without a tenant."""

    tenant_ref: str | None
    actor_ref: str
    thread_id: str

    def __post_init__(self) -> None:
        _check_optional("tenant_ref", self.tenant_ref)
        check_identity("actor_ref", self.actor_ref)
        check_identity("thread_id", self.thread_id)


@dataclass(frozen=True)
class NewProposal:
    """What a runtime proposes; ``id`` and ``idempotency_key`` derive from the run and call."""

    scope: Scope
    tool_name: str
    input: Any
    card: Any = None
    run_id: str | None = None
    tool_call_id: str | None = None
    id: str | None = None
    idempotency_key: str | None = None
    expires_at: int | None = None


@dataclass(frozen=True)
class Proposal:
    """One proposal as stored; ``input``, ``card`` and ``result`` are JSON text. No lease token."""

    id: str
    idempotency_key: str
    tenant_ref: str | None
    actor_ref: str
    thread_id: str
    run_id: str | None
    tool_call_id: str | None
    tool_name: str
    input: str
    card: str | None
    decision: str
    decided_by: str | None
    decided_at: int | None
    decision_note: str | None
    expires_at: int | None
    execution_state: str | None
    lease_owner: str | None
    lease_expires_at: int | None
    generation: int
    attempts: int
    result: str | None
    error: str | None
    settled_at: int | None
    version: int
    created_at: int
    updated_at: int
    discovery_state: str | None
    discovery_at: int | None
    outcome_delivered_at: int | None
    outcome_message_id: str | None

    @property
    def scope(self) -> Scope:
        return Scope(self.tenant_ref, self.actor_ref, self.thread_id)

    @property
    def input_value(self) -> Any:
        return _load_json(self.input)

    @property
    def card_value(self) -> Any:
        return _load_json(self.card)

    @property
    def result_value(self) -> Any:
        return _load_json(self.result)


_FIELDS = tuple(f.name for f in fields(Proposal))
_COLUMNS = tuple(p.c[name] for name in _FIELDS)


@dataclass(frozen=True)
class CreateResult:
    """``created``, ``existing`` (same key and content) or ``conflict`` (the one that exists)."""

    outcome: CreateOutcome
    proposal: Proposal


@dataclass(frozen=True)
class DecideResult:
    """The outcome of a decision and the proposal as it now stands (``None``: not found)."""

    outcome: DecideOutcome
    proposal: Proposal | None


@dataclass(frozen=True)
class Lease:
    """A lease as issued: the token is shown here once and stored only as its SHA-256."""

    token: str
    generation: int
    expires_at: int


@dataclass(frozen=True)
class Work:
    """What a worker needs to execute a claimed proposal: no audit, no lease token."""

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

    @property
    def input_value(self) -> Any:
        return _load_json(self.input)


_WORK_FIELDS = tuple(f.name for f in fields(Work))


@dataclass(frozen=True)
class ClaimResult:
    """The outcome of a claim; ``lease`` and ``work`` only when ``claimed`` or ``recovered``."""

    outcome: ClaimOutcome
    lease: Lease | None
    work: Work | None


@dataclass(frozen=True)
class RenewResult:
    """``renewed`` with the new lease expiry, or ``lost``."""

    outcome: RenewOutcome
    expires_at: int | None


@dataclass(frozen=True)
class SettleResult:
    """``settled`` or ``lost``."""

    outcome: SettleOutcome


@dataclass(frozen=True)
class DeliveryResult:
    """The outcome of admitting a settled proposal's outcome into its thread."""

    outcome: DeliveryOutcome
    message_id: str | None


@dataclass(frozen=True)
class BackfillResult:
    """How many legacy rows one backfill batch filled, and how many remain.

    ``remaining`` is ``None`` when the caller asked not to count (``count_remaining=False``) and
    the batch was full, so that more may remain.
    """

    backfilled: int
    remaining: int | None


def _proposal(row: RowMapping) -> Proposal:
    return Proposal(*(row[name] for name in _FIELDS))


def _in_scope(proposal: Proposal, pid: str, scope: Scope) -> bool:
    # Exact comparison in Python as well: MySQL's PAD SPACE collations compare 'a' = 'a '.
    return (
        proposal.id == pid
        and proposal.tenant_ref == scope.tenant_ref
        and proposal.actor_ref == scope.actor_ref
        and proposal.thread_id == scope.thread_id
    )


def _scope_filter(scope: Scope) -> Any:
    tenant = (
        p.c.tenant_ref.is_(None)
        if scope.tenant_ref is None
        else exact_eq(p.c.tenant_ref, scope.tenant_ref)
    )
    return and_(
        tenant, exact_eq(p.c.actor_ref, scope.actor_ref), exact_eq(p.c.thread_id, scope.thread_id)
    )


def _clock(clock: Clock | None) -> Clock:
    return clock if clock is not None else SystemClock()


def _fenced_update(conn: Connection, row: Proposal, changes: dict[str, Any]) -> Proposal | None:
    """Apply ``changes`` if the row still has ``row.version``; the new state, or ``None``."""
    version = row.version + 1
    stmt = (
        update(p)
        .where(p.c.id == row.id, p.c.version == row.version)
        .values(**changes, version=version)
    )
    if conn.execute(stmt).rowcount != 1:
        return None
    return replace(row, **changes, version=version)


def _raced_too_often(pid: str) -> Conflict:
    return Conflict(f"proposal {pid!r} kept changing under concurrent writers; try again")


# --- create and read --------------------------------------------------------------------------


def _resolve_identity(new: NewProposal) -> tuple[str, str]:
    if not isinstance(new.scope, Scope):
        raise InvalidInput("scope must be a Scope(tenant_ref, actor_ref, thread_id)")
    check_identity("tool_name", new.tool_name)
    run_id = _check_optional("run_id", new.run_id)
    call_id = _check_optional("tool_call_id", new.tool_call_id)
    pid = _check_optional("id", new.id)
    key = _check_optional("idempotency_key", new.idempotency_key)
    if pid is None:
        if run_id is None or call_id is None:
            raise InvalidInput("give an id, or run_id and tool_call_id to derive it from")
        pid = proposal_id(run_id, call_id)
    if key is None:
        key = default_idempotency_key(run_id, call_id) if run_id and call_id else pid
    if new.expires_at is not None:
        check_instant("expires_at", new.expires_at)
    return pid, key


def _same_content(row: Proposal, values: dict[str, Any]) -> bool:
    for name, value in values.items():
        if name in ("input", "card"):
            if _load_json(getattr(row, name)) != _load_json(value):
                return False
        elif getattr(row, name) != value:
            return False
    return True


def _existing_or_conflict(rows: Sequence[Proposal], values: dict[str, Any]) -> CreateResult:
    by_id = [r for r in rows if r.id == values["id"]]
    row = (by_id or list(rows))[0]
    if len(rows) == 1 and _same_content(row, values):
        return CreateResult("existing", row)
    return CreateResult("conflict", row)


def _rows_by_id_or_key(conn: Connection, pid: str, key: str) -> list[Proposal]:
    stmt = select(*_COLUMNS).where(or_(p.c.id == pid, p.c.idempotency_key == key))
    return [_proposal(r) for r in conn.execute(stmt).mappings()]


def _validate_new(new: NewProposal) -> dict[str, Any]:
    """The identity and content columns of a new proposal, validated before any SQL."""
    pid, key = _resolve_identity(new)
    return {
        "id": pid,
        "idempotency_key": key,
        "tenant_ref": new.scope.tenant_ref,
        "actor_ref": new.scope.actor_ref,
        "thread_id": new.scope.thread_id,
        "run_id": new.run_id,
        "tool_call_id": new.tool_call_id,
        "tool_name": new.tool_name,
        "input": _dump_json("input", new.input),
        "card": None if new.card is None else _dump_json("card", new.card),
        "expires_at": new.expires_at,
    }


def create_proposal(
    conn: Connection, new: NewProposal, *, clock: Clock | None = None
) -> CreateResult:
    """Create a pending proposal, or return the one with the same key and content.

    The same id or key with different content is ``conflict`` and writes nothing. A thread that
    does not exist raises ``NotFound``.
    """
    values = _validate_new(new)
    found = _rows_by_id_or_key(conn, values["id"], values["idempotency_key"])
    if found:
        return _existing_or_conflict(found, values)
    now = _clock(clock).now_ms()
    row = {
        **values,
        "decision": "pending",
        "decided_by": None,
        "decided_at": None,
        "decision_note": None,
        "execution_state": None,
        "lease_owner": None,
        "lease_expires_at": None,
        "generation": 0,
        "attempts": 0,
        "result": None,
        "error": None,
        "settled_at": None,
        "version": 0,
        "created_at": now,
        "updated_at": now,
        "discovery_state": "pending",
        "discovery_at": new.expires_at,
        "outcome_delivered_at": None,
        "outcome_message_id": None,
    }
    try:
        # A savepoint, so that losing an insert race leaves the caller's transaction usable.
        with conn.begin_nested():
            conn.execute(p.insert().values(**row))
    except IntegrityError:
        found = _rows_by_id_or_key(conn, values["id"], values["idempotency_key"])
        if not found:
            raise NotFound(f"thread {values['thread_id']!r} does not exist") from None
        return _existing_or_conflict(found, values)
    return CreateResult("created", Proposal(**row))


def find_proposal(conn: Connection, proposal_id: str, *, scope: Scope) -> Proposal | None:
    """Return the proposal with this id in this scope, or ``None``."""
    check_identity("id", proposal_id)
    stmt = select(*_COLUMNS).where(exact_eq(p.c.id, proposal_id), _scope_filter(scope))
    row = conn.execute(stmt).mappings().first()
    if row is None:
        return None
    found = _proposal(row)
    return found if _in_scope(found, proposal_id, scope) else None


def get_proposal(conn: Connection, proposal_id: str, *, scope: Scope) -> Proposal:
    """Return the proposal with this id in this scope, or raise ``NotFound``."""
    found = find_proposal(conn, proposal_id, scope=scope)
    if found is None:
        raise NotFound(f"no proposal {proposal_id!r} in that scope")
    return found


def _check_decision_filter(decision: str | None) -> None:
    if decision is not None and decision not in DECISIONS:
        raise InvalidInput(f"decision must be one of {', '.join(DECISIONS)}, not {decision!r}")


def list_proposals(
    conn: Connection, *, scope: Scope, decision: str | None = None, limit: int = 100
) -> list[Proposal]:
    """List a scope's proposals, newest first, optionally of one decision (limit 1–1000)."""
    _check_decision_filter(decision)
    _check_limit(limit)
    stmt = select(*_COLUMNS).where(_scope_filter(scope))
    if decision is not None:
        stmt = stmt.where(p.c.decision == decision)
    stmt = stmt.order_by(p.c.created_at.desc(), p.c.id.desc()).limit(limit)
    rows = [_proposal(r) for r in conn.execute(stmt).mappings()]
    return [r for r in rows if _in_scope(r, r.id, scope)]


# --- decisions --------------------------------------------------------------------------------


def _expiry(now: int) -> dict[str, Any]:
    return {
        "decision": "expired",
        "discovery_state": "done",
        "discovery_at": None,
        "updated_at": now,
    }


def _check_decide(decision: str, decided_by: str, note: str | None) -> None:
    if decision not in ("approved", "rejected"):
        raise InvalidInput(f"decision must be approved or rejected, not {decision!r}")
    check_identity("decided_by", decided_by)
    if note is not None:
        check_text("note", note)


def decide_proposal(
    conn: Connection,
    proposal_id: str,
    *,
    scope: Scope,
    decision: str,
    decided_by: str,
    note: str | None = None,
    clock: Clock | None = None,
) -> DecideResult:
    """Approve or reject a pending proposal; an approval queues its work in the same update."""
    _check_decide(decision, decided_by, note)
    check_identity("id", proposal_id)
    clock = _clock(clock)
    for _ in range(_FENCE_ROUNDS):
        row = find_proposal(conn, proposal_id, scope=scope)
        if row is None:
            return DecideResult("not_found", None)
        if row.decision == "expired":
            return DecideResult("expired", row)
        if row.decision == decision:
            return DecideResult("unchanged", row)
        if row.decision != "pending":
            return DecideResult("conflict", row)
        now = clock.now_ms()
        if row.expires_at is not None and row.expires_at <= now:
            expired = _fenced_update(conn, row, _expiry(now))
            if expired is not None:
                return DecideResult("expired", expired)
            continue
        changes: dict[str, Any] = {
            "decision": decision,
            "decided_by": decided_by,
            "decided_at": now,
            "decision_note": note,
            "updated_at": now,
        }
        if decision == "approved":
            changes.update(execution_state="queued", discovery_state="queued", discovery_at=now)
        else:
            changes.update(discovery_state="done", discovery_at=None)
        applied = _fenced_update(conn, row, changes)
        if applied is not None:
            return DecideResult("applied", applied)
    raise _raced_too_often(proposal_id)


# --- execution leases -------------------------------------------------------------------------


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
    row: Any,
    kind: ClaimOutcome,
    worker_id: str,
    lease_ms: int,
    now: int,
) -> ClaimResult | None:
    """Take the lease of ``row`` (a proposal or a discovery row) if its version still holds."""
    token = secrets.token_urlsafe(32)
    expires = now + lease_ms
    token_hash = _token_hash(token)
    if _on_driver(conn):
        params: Any = (worker_id, token_hash, expires, expires, now, row.id, row.version)
        taken = _driver_execute(conn, _TAKE_LEASE_SQL, params).rowcount
    else:
        params = {
            "b_id": row.id,
            "b_version": row.version,
            "b_owner": worker_id,
            "b_hash": token_hash,
            "b_expires": expires,
            "b_now": now,
        }
        taken = conn.execute(_TAKE_LEASE, params).rowcount
    if taken != 1:
        return None
    work = Work(
        id=row.id,
        idempotency_key=row.idempotency_key,
        tenant_ref=row.tenant_ref,
        actor_ref=row.actor_ref,
        thread_id=row.thread_id,
        run_id=row.run_id,
        tool_call_id=row.tool_call_id,
        tool_name=row.tool_name,
        input=row.input,
        attempts=row.attempts + 1,
    )
    return ClaimResult(kind, Lease(token, row.generation + 1, expires), work)


# Hot-path statements are built once (bound parameters only), so each call skips SQLAlchemy's
# statement construction and hits the compiled cache directly.
_TAKE_LEASE = (
    update(p)
    .where(p.c.id == bindparam("b_id"), p.c.version == bindparam("b_version"))
    .values(
        execution_state="running",
        lease_owner=bindparam("b_owner"),
        lease_token_hash=bindparam("b_hash"),
        lease_expires_at=bindparam("b_expires"),
        generation=p.c.generation + 1,
        attempts=p.c.attempts + 1,
        discovery_state="running",
        discovery_at=bindparam("b_expires"),
        updated_at=bindparam("b_now"),
        version=p.c.version + 1,
    )
)


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
    _check_lease_ms(lease_ms)
    check_identity("id", proposal_id)
    clock = _clock(clock)
    for _ in range(_FENCE_ROUNDS):
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
    raise _raced_too_often(proposal_id)


_LEASE_HOLDER = and_(
    p.c.id == bindparam("b_id"),
    p.c.lease_token_hash == bindparam("b_hash"),
    p.c.generation == bindparam("b_generation"),
    p.c.execution_state == "running",
    p.c.lease_expires_at > bindparam("b_now"),
)
_RENEW = (
    update(p)
    .where(_LEASE_HOLDER)
    .values(
        lease_expires_at=bindparam("b_expires"),
        discovery_at=bindparam("b_expires"),
        updated_at=bindparam("b_now"),
        version=p.c.version + 1,
    )
)
_SETTLE = (
    update(p)
    .where(_LEASE_HOLDER)
    .values(
        execution_state=bindparam("b_outcome"),
        result=bindparam("b_result"),
        error=bindparam("b_error"),
        settled_at=bindparam("b_now"),
        lease_token_hash=None,
        lease_expires_at=None,
        discovery_state="done",
        discovery_at=None,
        updated_at=bindparam("b_now"),
        version=p.c.version + 1,
    )
)


def _holder(proposal_id: str, token: str, generation: int, now: int) -> dict[str, Any]:
    return {
        "b_id": proposal_id,
        "b_hash": _token_hash(token),
        "b_generation": generation,
        "b_now": now,
    }


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
    _check_lease_args(token, generation)
    _check_lease_ms(lease_ms)
    now = _clock(clock).now_ms()
    expires = now + lease_ms
    params = {**_holder(proposal_id, token, generation, now), "b_expires": expires}
    if conn.execute(_RENEW, params).rowcount != 1:
        return RenewResult("lost", None)
    return RenewResult("renewed", expires)


def _check_settle(outcome: str, result: Any, error: str | None) -> str | None:
    """Validate a settlement; the result as JSON text."""
    if outcome not in ("succeeded", "failed"):
        raise InvalidInput(f"outcome must be succeeded or failed, not {outcome!r}")
    if error is not None:
        check_text("error", error)
    return None if result is None else _dump_json("result", result)


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
    _check_lease_args(token, generation)
    result_text = _check_settle(outcome, result, error)
    now = _clock(clock).now_ms()
    if _on_driver(conn):
        token_hash = _token_hash(token)
        args = (outcome, result_text, error, now, now, proposal_id, token_hash, generation, now)
        settled = _driver_execute(conn, _SETTLE_SQL, args).rowcount
    else:
        params = {
            **_holder(proposal_id, token, generation, now),
            "b_outcome": outcome,
            "b_result": result_text,
            "b_error": error,
        }
        settled = conn.execute(_SETTLE, params).rowcount
    if settled != 1:
        return SettleResult("lost")
    return SettleResult("settled")


# --- worker discovery (privileged, cross-scope) -----------------------------------------------

_DUE_STATES = ("queued", "running")


_DISCOVERY_COLUMNS = (
    *(p.c[name] for name in _WORK_FIELDS),
    p.c.version,
    p.c.generation,
    p.c.discovery_state,
    p.c.discovery_at,
)


def _next_due(*, locked: bool, per_state: int, derived: bool = True) -> Any:
    """The oldest due rows of each discovery state, in one round trip.

    Each branch is one locking read over one index range (``discovery_state = s``, ordered by
    ``discovery_at``): on InnoDB that locks only the rows returned, so other workers skip them.
    When both states have due work, the row not taken stays locked only until this short
    transaction ends. PostgreSQL refuses FOR UPDATE on a UNION itself and SQLite refuses
    parenthesised members, hence derived tables there; MariaDB materialises each derived table
    (three times slower), so it gets the parenthesised branches.
    """
    branches = []
    for state in _DUE_STATES:
        # The state and the limit are constants in the SQL text, so that PostgreSQL can keep one
        # generic plan for the prepared statement instead of planning every claim anew.
        branch = (
            select(*_DISCOVERY_COLUMNS)
            .where(
                p.c.discovery_state == literal_column(f"'{state}'", String),
                p.c.discovery_at <= bindparam("now"),
            )
            .order_by(p.c.discovery_at)
            .limit(literal_column(str(per_state), Integer))
        )
        if locked:
            branch = branch.with_for_update(skip_locked=True)
        branches.append(select(branch.subquery(state)) if derived else branch)
    return union_all(*branches)


_NEXT_DUE_LOCKED = _next_due(locked=True, per_state=1)
_NEXT_DUE_LOCKED_MYSQL = _next_due(locked=True, per_state=1, derived=False)
_NEXT_DUE_FENCED = _next_due(locked=False, per_state=_FALLBACK_CANDIDATES)


# --- the worker hot path on the driver's cursor ---------------------------------------------
#
# claim_next and settle are what every worker runs in a loop. On PostgreSQL and MySQL/MariaDB
# they run pre-written SQL on the DBAPI cursor of the caller's SQLAlchemy connection, inside its
# transaction: SQLAlchemy's per-statement work (execution context, bind processing, result
# wrapping) costs more client CPU than the round trip itself. Driver errors are wrapped as
# SQLAlchemy would wrap them, so that retry_transient and translate_error see the same thing.
# SQLite, the scoped reads and the rare paths stay on SQLAlchemy statements.


class _Due(NamedTuple):
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


_T = p.name
_WORK_LIST = ", ".join(_WORK_FIELDS)


def _locking_read(state: str, columns: str) -> str:
    # One index range per read (see _next_due); the state is a constant for the generic plan.
    return (
        f"SELECT {columns} FROM {_T} WHERE discovery_state = '{state}' AND discovery_at <= %s "
        "ORDER BY discovery_at LIMIT 1 FOR UPDATE SKIP LOCKED"
    )


def _union_of_locking_reads(columns: Sequence[str], *, derived: bool) -> str:
    listed = ", ".join(columns)
    if derived:  # PostgreSQL refuses FOR UPDATE on a UNION member itself
        branches = (f"SELECT * FROM ({_locking_read(s, listed)}) AS {s}" for s in _DUE_STATES)
    else:  # MySQL/MariaDB: parenthesised branches (MariaDB materialises derived tables)
        branches = (f"({_locking_read(s, listed)})" for s in _DUE_STATES)
    return " UNION ALL ".join(branches)


_NEXT_DUE_SQL = {
    "mysql": _union_of_locking_reads(_Due._fields, derived=False),
    "postgresql": _union_of_locking_reads(_Due._fields, derived=True),
}


_DUE_KEY = ("id", "version", "discovery_state", "discovery_at")


def _take_lease_set(alias: str) -> str:
    """The take-lease assignments; what they read is qualified by ``alias`` where it must be."""
    return (
        "execution_state = 'running', lease_owner = %s, lease_token_hash = %s, "
        f"lease_expires_at = %s, generation = {alias}generation + 1, "
        f"attempts = {alias}attempts + 1, discovery_state = 'running', discovery_at = %s, "
        f"updated_at = %s, version = {alias}version + 1"
    )


_TAKE_LEASE_SQL = f"UPDATE {_T} SET {_take_lease_set('')} WHERE id = %s AND version = %s"
# PostgreSQL: the same two locking reads, the oldest row of the two taken under the same version
# fence, in one round trip. The other row (if any) stays locked until this short transaction
# ends, as in the two-step form. RETURNING gives the new generation and attempts, and the state
# the row was discovered in (running: a recovery).
_CLAIM_NEXT_PG_SQL = (
    f"UPDATE {_T} AS a SET {_take_lease_set('a.')} "
    f"FROM ({_union_of_locking_reads(_DUE_KEY, derived=True)} "
    "ORDER BY discovery_at LIMIT 1) AS due "
    "WHERE a.id = due.id AND a.version = due.version "
    f"RETURNING {', '.join('a.' + name for name in _WORK_FIELDS)}, a.generation, "
    "due.discovery_state"
)
_SETTLE_SQL = (
    f"UPDATE {_T} SET execution_state = %s, result = %s, error = %s, settled_at = %s, "
    "lease_token_hash = NULL, lease_expires_at = NULL, discovery_state = 'done', "
    "discovery_at = NULL, updated_at = %s, version = version + 1 "
    "WHERE id = %s AND lease_token_hash = %s AND generation = %s "
    "AND execution_state = 'running' AND lease_expires_at > %s"
)


def _on_driver(conn: Connection) -> bool:
    """Whether the hot statements run on the driver's cursor here (PostgreSQL, MySQL/MariaDB)."""
    return dialect_name(conn) != "sqlite"


def _driver_execute(conn: Connection, sql: str, params: tuple[Any, ...]) -> Any:
    """Execute ``sql`` on the DBAPI cursor inside ``conn``'s transaction; the cursor.

    Begins the transaction first if the caller has not (as SQLAlchemy's autobegin would), and
    raises driver errors as the ``sqlalchemy.exc.DBAPIError`` SQLAlchemy itself would raise,
    invalidating the connection when the driver reports it lost.
    """
    if not conn.in_transaction():
        conn.begin()
    dbapi_conn: Any = conn.connection.driver_connection
    cursor = dbapi_conn.cursor()
    try:
        cursor.execute(sql, params)
    except conn.dialect.loaded_dbapi.Error as exc:
        lost = conn.dialect.is_disconnect(exc, dbapi_conn, cursor)
        cursor.close()
        wrapped = DBAPIError.instance(
            sql,
            params,
            exc,
            conn.dialect.loaded_dbapi.Error,
            hide_parameters=conn.engine.hide_parameters,
            connection_invalidated=lost,
            dialect=conn.dialect,
        )
        if lost:
            conn.invalidate(exc)
        raise cast(BaseException, wrapped) from exc
    except BaseException:
        # Interrupted mid-statement (KeyboardInterrupt, cancellation): the connection's state
        # is unknown, so it must not go back to the pool.
        conn.invalidate()
        raise
    return cursor


def _skip_locked(conn: Connection) -> bool:
    """Whether this connection's server has SKIP LOCKED (asked once per pooled connection)."""
    if dialect_name(conn) == "sqlite":
        return False
    info = conn.info
    if "agora_skip_locked" not in info:
        info["agora_skip_locked"] = supports_skip_locked(conn)
    return bool(info["agora_skip_locked"])


def claim_next_proposal(
    conn: Connection, *, worker_id: str, lease_ms: int, clock: Clock | None = None
) -> ClaimResult:
    """Claim the most overdue work across all scopes, or return outcome ``none``.

    Due work is queued, or running under an expired lease (then ``recovered``), taken in
    ``discovery_at`` order from the discovery index only: with ``FOR UPDATE SKIP LOCKED`` where
    the server has it, else (SQLite, older MySQL/MariaDB) by the version fence alone.
    Privileged: worker infrastructure only.
    """
    check_identity("worker_id", worker_id)
    _check_lease_ms(lease_ms)
    now = _clock(clock).now_ms()
    locked = _skip_locked(conn)
    if locked and dialect_name(conn) == "postgresql":
        claimed = _claim_next_in_one_statement(conn, worker_id, lease_ms, now)
        if claimed is not None:
            return claimed
        # Nothing was due, or (rarely) the fence lost a race: the loop below tells them apart.
    for _ in range(_FENCE_ROUNDS):
        rows = sorted(_due_rows(conn, locked, now), key=lambda r: r.discovery_at)
        if not rows:
            break
        for row in rows:
            kind: ClaimOutcome = "recovered" if row.discovery_state == "running" else "claimed"
            claimed = _take_lease(conn, row, kind, worker_id, lease_ms, now)
            if claimed is not None:
                return claimed
    return ClaimResult("none", None, None)


def _due_rows(conn: Connection, locked: bool, now: int) -> list[Any]:
    """The discovery read: the oldest due row of each state, locked, or candidates to fence."""
    if not locked:
        return list(conn.execute(_NEXT_DUE_FENCED, {"now": now}).all())
    cursor = _driver_execute(conn, _NEXT_DUE_SQL[dialect_name(conn)], (now, now))
    return [_Due(*row) for row in cursor.fetchall()]


def _claim_next_in_one_statement(
    conn: Connection, worker_id: str, lease_ms: int, now: int
) -> ClaimResult | None:
    """PostgreSQL: the locking discovery read and the fenced take-lease as one UPDATE.

    ``None`` when it changed no row: nothing is due, or the version fence lost a race.
    """
    token = secrets.token_urlsafe(32)
    expires = now + lease_ms
    args = (worker_id, _token_hash(token), expires, expires, now, now, now)
    row = _driver_execute(conn, _CLAIM_NEXT_PG_SQL, args).fetchone()
    if row is None:
        return None
    *work, generation, prior_state = row
    kind: ClaimOutcome = "recovered" if prior_state == "running" else "claimed"
    return ClaimResult(kind, Lease(token, generation, expires), Work(*work))


_EXPIRE_DUE = (
    select(p.c.id, p.c.version)
    .where(p.c.discovery_state == "pending", p.c.discovery_at <= bindparam("now"))
    .order_by(p.c.discovery_at)
    .limit(bindparam("limit"))
)
_EXPIRE_ONE = (
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


def expire_proposals(conn: Connection, *, limit: int = 100, clock: Clock | None = None) -> int:
    """Expire up to ``limit`` (1–1000) pending proposals past ``expires_at``, oldest first."""
    _check_limit(limit)
    now = _clock(clock).now_ms()
    due = conn.execute(_EXPIRE_DUE, {"now": now, "limit": limit}).all()
    if not due:
        return 0
    params = [{"b_id": pid, "b_version": version, "now": now} for pid, version in due]
    return int(conn.execute(_EXPIRE_ONE, params).rowcount)


# --- outcome delivery -------------------------------------------------------------------------


def list_undelivered_outcomes(conn: Connection, *, limit: int = 100) -> list[Proposal]:
    """List settled proposals whose outcome is not yet in their thread, oldest settled first."""
    _check_limit(limit)
    stmt = (
        select(*_COLUMNS)
        .where(p.c.settled_at.is_not(None), p.c.outcome_delivered_at.is_(None))
        .order_by(p.c.settled_at, p.c.id)
        .limit(limit)
    )
    return [_proposal(r) for r in conn.execute(stmt).mappings()]


def _outcome_document(row: Proposal) -> str:
    return _dump_json(
        "outcome",
        {
            "proposal_id": row.id,
            "idempotency_key": row.idempotency_key,
            "tool_name": row.tool_name,
            "tool_call_id": row.tool_call_id,
            "execution_state": row.execution_state,
            "result": row.result_value,
            "error": row.error,
            "settled_at": iso_ms(row.settled_at),
        },
    )


def deliver_outcome(
    conn: Connection, proposal_id: str, *, message_id: str, clock: Clock | None = None
) -> DeliveryResult:
    """Write a settled proposal's outcome to a message of its thread, exactly once.

    Sets the proposal's ``outcome_delivered_at`` and ``outcome_message_id`` and the message's
    ``outcome`` in the caller's transaction. A message outside the proposal's thread raises
    ``NotFound``.
    """
    check_identity("id", proposal_id)
    check_identity("message_id", message_id)
    clock = _clock(clock)
    for _ in range(_FENCE_ROUNDS):
        found = conn.execute(select(*_COLUMNS).where(p.c.id == proposal_id)).mappings().first()
        if found is None or found["id"] != proposal_id:
            return DeliveryResult("not_found", None)
        row = _proposal(found)
        if row.outcome_delivered_at is not None:
            return DeliveryResult("already_delivered", row.outcome_message_id)
        if row.settled_at is None:
            return DeliveryResult("not_settled", None)
        thread = conn.execute(select(m.c.thread_id).where(m.c.id == message_id)).scalar()
        if thread != row.thread_id:
            raise NotFound(f"no message {message_id!r} in thread {row.thread_id!r}")
        now = clock.now_ms()
        changes = {"outcome_delivered_at": now, "outcome_message_id": message_id, "updated_at": now}
        if _fenced_update(conn, row, changes) is None:
            continue
        conn.execute(update(m).where(m.c.id == message_id).values(outcome=_outcome_document(row)))
        return DeliveryResult("delivered", message_id)
    raise _raced_too_often(proposal_id)


# --- legacy rows and the bounded backfill -----------------------------------------------------

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


def _legacy_order(conn: Connection) -> tuple[Any, ...]:
    """An ORDER BY that keeps each planner on the discovery index's NULL range.

    Without it PostgreSQL picks a sequential scan that wades through every row earlier batches
    filled; it needs both index columns to see the order is free, while MariaDB sorts unless
    given ``discovery_at`` alone.
    """
    if dialect_name(conn) == "postgresql":
        return (p.c.discovery_state, p.c.discovery_at)
    return (p.c.discovery_at,)


def count_legacy_proposals(conn: Connection) -> int:
    """Count proposals written by older writers (``discovery_state`` NULL)."""
    q = select(func.count()).select_from(p).where(p.c.discovery_state.is_(None))
    return int(conn.execute(q).scalar_one())


def backfill_discovery_index(
    conn: Connection,
    *,
    limit: int = 500,
    clock: Clock | None = None,
    count_remaining: bool = True,
) -> BackfillResult:
    """Fill the discovery columns of at most ``limit`` legacy rows, in the caller's transaction.

    Changes nothing but the discovery columns and ``version``: input, card, timestamps
    (``updated_at`` too) and the decision audit stay byte-for-byte. Each row's update is fenced
    by its version, so a concurrent decision is never overwritten; repeating an interrupted run
    is safe. ``clock`` is accepted for symmetry and unused: the backfill writes no timestamp.

    The exact ``remaining`` count costs a scan of the legacy rows left; a loop that runs batches
    until one comes back short (``agora db backfill``, migration 0002) passes
    ``count_remaining=False`` and counts once at the end, which keeps the whole run linear.
    """
    _check_limit(limit, MAX_BACKFILL_BATCH)
    legacy = conn.execute(
        select(p.c.id, p.c.version)
        .where(p.c.discovery_state.is_(None))
        .order_by(*_legacy_order(conn))
        .limit(limit)
    ).all()
    filled = 0
    if legacy:
        by_version: dict[int, list[str]] = {}
        for pid, version in legacy:
            by_version.setdefault(version, []).append(pid)
        fence = or_(
            *(
                and_(p.c.version == version, p.c.id.in_(ids))
                for version, ids in sorted(by_version.items())
            )
        )
        stmt = (
            update(p)
            .where(fence)
            .values(
                discovery_state=_LEGACY_STATE,
                discovery_at=_LEGACY_AT,
                version=p.c.version + 1,
            )
        )
        filled = int(conn.execute(stmt).rowcount)
    if count_remaining:
        return BackfillResult(filled, count_legacy_proposals(conn))
    # A short batch that filled every row it read leaves nothing (older writers are stopped).
    exhausted = len(legacy) < limit and filled == len(legacy)
    return BackfillResult(filled, 0 if exhausted else None)


# --- the store --------------------------------------------------------------------------------


class ActionProposalStore:
    """The proposal store over an engine: each call is one short transaction, retried boundedly
    on deadlocks and serialization failures. Arguments are validated before any SQL runs."""

    def __init__(self, engine: Engine, clock: Clock | None = None) -> None:
        self.engine = engine
        self.clock: Clock = _clock(clock)

    def _write(self, fn: Callable[[Connection], T]) -> T:
        def attempt() -> T:
            with self.engine.begin() as conn:
                return fn(conn)

        return retry_transient(attempt)

    def _read(self, fn: Callable[[Connection], T]) -> T:
        def attempt() -> T:
            with self.engine.connect().execution_options(sqlite_deferred=True) as conn:
                with conn.begin():
                    return fn(conn)

        return retry_transient(attempt)

    def create(self, new: NewProposal) -> CreateResult:
        """Create a proposal: ``created``, ``existing`` or ``conflict``."""
        _validate_new(new)
        return self._write(lambda c: create_proposal(c, new, clock=self.clock))

    def get(self, proposal_id: str, scope: Scope) -> Proposal:
        """Return a proposal in its scope; ``NotFound`` otherwise (a wrong scope included)."""
        check_identity("id", proposal_id)
        return self._read(lambda c: get_proposal(c, proposal_id, scope=scope))

    def find(self, proposal_id: str, scope: Scope) -> Proposal | None:
        """Return a proposal in its scope, or ``None``."""
        check_identity("id", proposal_id)
        return self._read(lambda c: find_proposal(c, proposal_id, scope=scope))

    def list(
        self, scope: Scope, decision: str | None = None, limit: int = 100
    ) -> builtins.list[Proposal]:
        """List a scope's proposals, newest first."""
        _check_decision_filter(decision)
        _check_limit(limit)
        return self._read(lambda c: list_proposals(c, scope=scope, decision=decision, limit=limit))

    def decide(
        self,
        proposal_id: str,
        scope: Scope,
        decision: str,
        decided_by: str,
        note: str | None = None,
    ) -> DecideResult:
        """Approve or reject a proposal; the outcome says what happened (see the module)."""
        check_identity("id", proposal_id)
        _check_decide(decision, decided_by, note)
        return self._write(
            lambda c: decide_proposal(
                c,
                proposal_id,
                scope=scope,
                decision=decision,
                decided_by=decided_by,
                note=note,
                clock=self.clock,
            )
        )

    def claim(self, proposal_id: str, scope: Scope, worker_id: str, lease_ms: int) -> ClaimResult:
        """Take the execution lease of an approved proposal whose work is due."""
        check_identity("id", proposal_id)
        check_identity("worker_id", worker_id)
        _check_lease_ms(lease_ms)
        return self._write(
            lambda c: claim_proposal(
                c,
                proposal_id,
                scope=scope,
                worker_id=worker_id,
                lease_ms=lease_ms,
                clock=self.clock,
            )
        )

    def renew(self, proposal_id: str, token: str, generation: int, lease_ms: int) -> RenewResult:
        """Extend a live lease: ``renewed`` or ``lost``."""
        check_identity("id", proposal_id)
        _check_lease_args(token, generation)
        _check_lease_ms(lease_ms)
        return self._write(
            lambda c: renew_lease(
                c,
                proposal_id,
                token=token,
                generation=generation,
                lease_ms=lease_ms,
                clock=self.clock,
            )
        )

    def settle(
        self,
        proposal_id: str,
        token: str,
        generation: int,
        outcome: str,
        result: Any = None,
        error: str | None = None,
    ) -> SettleResult:
        """Record the outcome under a live lease: ``settled`` or ``lost``."""
        check_identity("id", proposal_id)
        _check_lease_args(token, generation)
        _check_settle(outcome, result, error)
        return self._write(
            lambda c: settle_proposal(
                c,
                proposal_id,
                token=token,
                generation=generation,
                outcome=outcome,
                result=result,
                error=error,
                clock=self.clock,
            )
        )

    def claim_next(self, worker_id: str, lease_ms: int) -> ClaimResult:
        """Claim the most overdue work across scopes (privileged), or outcome ``none``."""
        check_identity("worker_id", worker_id)
        _check_lease_ms(lease_ms)
        return self._write(
            lambda c: claim_next_proposal(
                c, worker_id=worker_id, lease_ms=lease_ms, clock=self.clock
            )
        )

    def expire(self, limit: int = 100) -> int:
        """Expire a bounded batch (1–1000) of pending proposals past ``expires_at``."""
        _check_limit(limit)
        return self._write(lambda c: expire_proposals(c, limit=limit, clock=self.clock))

    def list_undelivered_outcomes(self, limit: int = 100) -> builtins.list[Proposal]:
        """List settled proposals whose outcome has not been delivered to their thread."""
        _check_limit(limit)
        return self._read(lambda c: list_undelivered_outcomes(c, limit=limit))

    def deliver_outcome(self, proposal_id: str, message_id: str) -> DeliveryResult:
        """Write a settled outcome to a message of its thread, exactly once."""
        check_identity("id", proposal_id)
        check_identity("message_id", message_id)
        return self._write(
            lambda c: deliver_outcome(c, proposal_id, message_id=message_id, clock=self.clock)
        )

    def backfill(self, limit: int = 500) -> BackfillResult:
        """Backfill one bounded batch of legacy rows in its own transaction."""
        _check_limit(limit, MAX_BACKFILL_BATCH)
        return self._write(lambda c: backfill_discovery_index(c, limit=limit))
