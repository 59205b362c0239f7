"""Creating, reading and deciding proposals, and expiring the ones nobody decided in time.

Every read and decision names the whole scope ``(tenant_ref, actor_ref, thread_id)``; a
proposal outside it looks exactly like a missing one. Decisions are fenced by the row's
``version`` and re-read when they lose a race; an approval queues the work in the same update,
and notifies waiting workers in the same transaction (``wakeups.notify_work``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from sqlalchemy.exc import IntegrityError

from agora_cli.store._clock import Clock
from agora_cli.store._errors import Conflict, InvalidInput, NotFound
from agora_cli.store._proposals.model import (
    FENCE_ROUNDS,
    CreateResult,
    DecideResult,
    NewProposal,
    Proposal,
    Scope,
    check_decide,
    check_decision_filter,
    check_limit,
    clock_or_system,
    default_idempotency_key,
    proposal_id,
    raced_too_often,
)
from agora_cli.store._proposals.queries import (
    EXPIRE_DUE,
    EXPIRE_ONE,
    fenced_update,
    in_scope,
    insert_proposal,
    proposal_row,
    rows_by_id_or_key,
    scope_filter,
    select_proposal,
    select_proposals,
    select_thread_id,
    tenant_key_of,
)
from agora_cli.store._proposals.sealed import open_proposals
from agora_cli.store._proposals.wakeups import notify_work
from agora_cli.store._schema import action_proposal as p
from agora_cli.store._sealing import seal_columns, sealer_for
from agora_cli.store._short_ids import resolve_prefix
from agora_cli.store._tenant_guard import check_thread_tenant
from agora_cli.store._values import (
    check_identity,
    check_instant,
    check_optional_identity,
    dump_json,
    load_json,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

__all__ = [
    "create_proposal",
    "decide_proposal",
    "expire_proposals",
    "find_proposal",
    "find_proposal_id",
    "get_proposal",
    "list_proposals",
]


# --- create -----------------------------------------------------------------------------------


def _resolve_identity(new: NewProposal) -> tuple[str, str]:
    if not isinstance(new.scope, Scope):
        raise InvalidInput("scope must be a Scope(tenant_ref, actor_ref, thread_id)")
    check_identity("tool_name", new.tool_name)
    run_id = check_optional_identity("run_id", new.run_id)
    call_id = check_optional_identity("tool_call_id", new.tool_call_id)
    pid = check_optional_identity("id", new.id)
    key = check_optional_identity("idempotency_key", new.idempotency_key)
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
            if load_json(getattr(row, name)) != load_json(value):
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


def _rows_by_id_or_key(conn: Connection, pid: str, key: str, tenant: str | None) -> list[Proposal]:
    """The tenant's proposals with this id or key (``rows_by_id_or_key``), their sealed
    values opened (an idempotent create compares what was meant, not ciphertext)."""
    return open_proposals(conn, rows_by_id_or_key(conn, pid, key, tenant))


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
        "input": dump_json("input", new.input),
        "card": None if new.card is None else dump_json("card", new.card),
        "expires_at": new.expires_at,
    }


def create_proposal(
    conn: Connection, new: NewProposal, *, clock: Clock | None = None
) -> CreateResult:
    """Create a pending proposal, or return the one with the same key and content.

    The same id or key with different content is ``conflict`` and writes nothing. A thread that
    does not exist raises ``NotFound``. For a keyed tenant ``input`` and ``card`` are sealed
    (``KeyUnavailable`` without the KEK), and an existing proposal is compared by its opened
    values (each seal has a fresh nonce).
    """
    values = _validate_new(new)
    sealer = sealer_for(conn, values["tenant_ref"])
    pid, key, tenant = values["id"], values["idempotency_key"], values["tenant_ref"]
    found = _rows_by_id_or_key(conn, pid, key, tenant)  # in this tenant only
    if found:
        return _existing_or_conflict(found, values)
    check_thread_tenant(conn, values["thread_id"], values["tenant_ref"])  # never another's
    now = clock_or_system(clock).now_ms()
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
            sealed = seal_columns(sealer, p.name, row["id"], row)
            conn.execute(insert_proposal({**sealed, "tenant_key": tenant_key_of(tenant)}))
    except IntegrityError:
        found = _rows_by_id_or_key(conn, pid, key, tenant)
        if found:
            return _existing_or_conflict(found, values)
        _refuse_failed_insert(conn, values)
    return CreateResult(
        "created", Proposal(**row, seal_state="plain" if sealer is None else "opened")
    )


def _refuse_failed_insert(conn: Connection, values: dict[str, Any]) -> NoReturn:
    """An insert refused though the tenant has no such id or key: its thread is gone, or the id
    is another tenant's proposal's (ids are global). ``Conflict`` names neither that tenant nor
    anything of its row."""
    thread_id = values["thread_id"]
    if conn.execute(select_thread_id(thread_id)).first() is None:
        raise NotFound(f"thread {thread_id!r} does not exist") from None
    raise Conflict(
        f"proposal id {values['id']!r} cannot be used: give another id, or another "
        "run_id/tool_call_id to derive it from"
    ) from None


# --- read -------------------------------------------------------------------------------------


def find_proposal(conn: Connection, proposal_id: str, *, scope: Scope) -> Proposal | None:
    """Return the proposal with this id in this scope, or ``None``."""
    check_identity("id", proposal_id)
    row = conn.execute(select_proposal(proposal_id, scope)).mappings().first()
    if row is None:
        return None
    found = proposal_row(row)
    if not in_scope(found, proposal_id, scope):
        return None
    return open_proposals(conn, [found])[0]


def find_proposal_id(conn: Connection, text: str, *, scope: Scope) -> str | None:
    """The full id of the proposal in ``scope`` that ``text`` names — its id, or a unique prefix
    of at least 8 characters — or ``None``.

    The prefix is resolved inside the scope only: it never widens the scope check (in a wrong
    scope it finds nothing, like a full id), and an ambiguity (``AmbiguousId``, exit 2) lists
    only ids of that scope.
    """
    if not isinstance(scope, Scope):
        raise InvalidInput("scope must be a Scope(tenant_ref, actor_ref, thread_id)")
    return resolve_prefix(conn, p, text, where=scope_filter(scope), what="proposal")


def get_proposal(conn: Connection, proposal_id: str, *, scope: Scope) -> Proposal:
    """Return the proposal with this id in this scope, or raise ``NotFound``."""
    found = find_proposal(conn, proposal_id, scope=scope)
    if found is None:
        raise NotFound(f"no proposal {proposal_id!r} in that scope")
    return found


def list_proposals(
    conn: Connection, *, scope: Scope, decision: str | None = None, limit: int = 100
) -> list[Proposal]:
    """List a scope's proposals, newest first, optionally of one decision (limit 1–1000)."""
    check_decision_filter(decision)
    check_limit(limit)
    stmt = select_proposals(scope, decision, limit)
    rows = [proposal_row(r) for r in conn.execute(stmt).mappings()]
    return open_proposals(conn, [r for r in rows if in_scope(r, r.id, scope)])


# --- decide -----------------------------------------------------------------------------------


def _expiry(now: int) -> dict[str, Any]:
    return {
        "decision": "expired",
        "discovery_state": "done",
        "discovery_at": None,
        "updated_at": now,
    }


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
    check_decide(decision, decided_by, note)
    check_identity("id", proposal_id)
    clock = clock_or_system(clock)
    for _ in range(FENCE_ROUNDS):
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
            expired = fenced_update(conn, row, _expiry(now))
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
        applied = fenced_update(conn, row, changes)
        if applied is not None:
            if decision == "approved":
                notify_work(conn)  # claimable on commit: wake the waiting workers then
            return DecideResult("applied", applied)
    raise raced_too_often(proposal_id)


# --- expire -----------------------------------------------------------------------------------


def expire_proposals(conn: Connection, *, limit: int = 100, clock: Clock | None = None) -> int:
    """Expire up to ``limit`` (1–1000) pending proposals past ``expires_at``, oldest first."""
    check_limit(limit)
    now = clock_or_system(clock).now_ms()
    due = conn.execute(EXPIRE_DUE, {"now": now, "limit": limit}).all()
    if not due:
        return 0
    params = [{"b_id": pid, "b_version": version, "now": now} for pid, version in due]
    return int(conn.execute(EXPIRE_ONE, params).rowcount)
