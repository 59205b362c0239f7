"""The operator's acts on a proposal, across scopes, and their audit trail.

Privileged, like ``claim_next`` and the inbox: behind operator tooling only. Each act names the
proposal by its full id alone (the caller resolves a short id: ``find_any_approval_id``) and
works on the row's own scope; each is version-fenced like every proposal update, and writes its
row of ``agent_action_proposal_event`` in the caller's transaction, with the update it records:

- ``decide_as_operator``: the decision of ``decide_proposal``, taken with the row's own scope:
  the same outcomes and writes, and when it applies, an ``operator_decision`` event (a decision
  taken without the scope is a privileged, cross-scope act);
- ``requeue_proposal``: a failed execution back to ``queued`` for a new attempt. The discovery
  columns follow (``queued``, now), the lease and the outcome are cleared (owner, token hash,
  expiry, ``result``, ``error``, ``settled_at`` and the outcome's delivery, so that the next
  outcome is delivered in turn); the ``requeue`` event keeps what was cleared. The next claim is
  a new attempt (``attempts`` and ``generation`` + 1, as every claim); it notifies waiting
  workers on commit, like an approval (``wakeups.notify_work``);
- ``cancel_proposal``: approved work that waits for a worker (``queued``, or approved and never
  queued by an older writer) never runs: ``execution_state = 'cancelled'``, discovery ``done``,
  ``settled_at`` now (its outcome, ``cancelled`` with no result, is delivered to its thread like
  any settled one). A proposal under a lease is refused: ``running`` while the lease holds,
  ``stuck`` once it ran out (the work may have run, partly: ``claim_next`` recovers it, a new
  attempt, and a failed one can be requeued), so that ``cancelled`` always means "never ran
  since it was queued". Undecided ones are ``pending`` (reject them instead).

An event's ``prior_result`` is the proposal's ``result`` column copied as stored: when the
tenant seals, it stays sealed for the proposal's own result cell, and opens as that (no KEK is
needed to requeue). Events are never updated; they go with their proposal (``ON DELETE
CASCADE``, and ``threads delete`` removes them explicitly first).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from agora_cli.store._clock import Clock
from agora_cli.store._errors import AmbiguousId
from agora_cli.store._ids import new_hex_id
from agora_cli.store._proposals.decisions import decide_proposal
from agora_cli.store._proposals.model import (
    FENCE_ROUNDS,
    MAX_EVENTS,
    CancelResult,
    DecideResult,
    EventKind,
    Proposal,
    ProposalEvent,
    RequeueResult,
    check_decide,
    check_limit,
    check_operator_act,
    clock_or_system,
    raced_too_often,
)
from agora_cli.store._proposals.queries import (
    event_row,
    fenced_update,
    insert_event,
    proposal_row,
    select_events,
    select_proposal,
)
from agora_cli.store._proposals.sealed import open_proposals
from agora_cli.store._proposals.tool_calls import ApprovalKind, find_any_tool_call_approval_id
from agora_cli.store._proposals.wakeups import notify_work
from agora_cli.store._schema import action_proposal as p
from agora_cli.store._sealing import open_columns
from agora_cli.store._short_ids import resolve_prefix
from agora_cli.store._sqlexpr import exact_eq
from agora_cli.store._values import check_identity, check_optional_identity

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

__all__ = [
    "cancel_proposal",
    "decide_as_operator",
    "find_any_approval_id",
    "find_any_proposal_id",
    "list_proposal_events",
    "requeue_proposal",
]


# --- which proposal ---------------------------------------------------------------------------


def find_any_proposal_id(
    conn: Connection, text: str, *, tenant_ref: str | None = None
) -> str | None:
    """The full id of the proposal that ``text`` names in any scope — its id, or a unique
    prefix of at least 8 characters — or ``None``; with ``tenant_ref``, among that tenant's
    proposals only (as the inbox's ``tenant_ref`` filter). Privileged: the operator's."""
    where = None
    if check_optional_identity("tenant_ref", tenant_ref) is not None:
        where = exact_eq(p.c.tenant_ref, tenant_ref)
    return resolve_prefix(conn, p, text, where=where, what="proposal")


def find_any_approval_id(
    conn: Connection, text: str, *, tenant_ref: str | None = None
) -> tuple[ApprovalKind, str] | None:
    """What ``text`` names in any scope: a proposal or the runtime's tool-call approval, by id
    or unique prefix (8+ characters) — or ``None``; ``find_approval_id`` without the scope.

    An exact id wins over a prefix; a prefix that starts one id of each kind is ``AmbiguousId``.
    """
    proposal = find_any_proposal_id(conn, text, tenant_ref=tenant_ref)
    if proposal == text:
        return ("proposal", text)
    call = find_any_tool_call_approval_id(conn, text, tenant_ref=tenant_ref)
    if call == text:
        return ("tool_call", text)
    if proposal is not None and call is not None:
        raise AmbiguousId(
            f"id {text!r} is ambiguous: it starts proposal {proposal} and tool call {call}; "
            "give more characters",
            matches=(proposal, call),
        )
    if proposal is not None:
        return ("proposal", proposal)
    return None if call is None else ("tool_call", call)


def _stored(conn: Connection, proposal_id: str) -> Proposal | None:
    """The proposal with exactly this id, in any scope, its columns as stored (not opened)."""
    row = conn.execute(select_proposal(proposal_id)).mappings().first()
    if row is None or row["id"] != proposal_id:
        return None
    return proposal_row(row)


def _opened(conn: Connection, row: Proposal | None) -> Proposal | None:
    return None if row is None else open_proposals(conn, [row])[0]


# --- the audit trail --------------------------------------------------------------------------


def _record(
    conn: Connection,
    before: Proposal,
    *,
    kind: EventKind,
    acted_by: str,
    reason: str | None,
    now: int,
    decision: str | None = None,
) -> None:
    """Write the event of one act on ``before`` (the row as the act found it, as stored)."""
    prior: dict[str, Any] = {}
    if kind != "operator_decision":
        prior = {
            "prior_execution_state": before.execution_state,
            "prior_attempts": before.attempts,
            "prior_generation": before.generation,
            "prior_lease_owner": before.lease_owner,
            "prior_result": before.result,
            "prior_error": before.error,
            "prior_settled_at": before.settled_at,
            "prior_outcome_delivered_at": before.outcome_delivered_at,
            "prior_outcome_message_id": before.outcome_message_id,
        }
    conn.execute(
        insert_event(
            {
                "id": new_hex_id(now),
                "proposal_id": before.id,
                "tenant_ref": before.tenant_ref,
                "kind": kind,
                "acted_by": acted_by,
                "reason": reason,
                "decision": decision,
                **prior,
                "created_at": now,
            }
        )
    )


def list_proposal_events(
    conn: Connection, proposal_id: str, *, limit: int = MAX_EVENTS
) -> list[ProposalEvent]:
    """The operator's acts on one proposal, oldest first (the newest ``limit``, 1–1000), each
    ``prior_result`` opened as the proposal's result (a marker in its place without the KEK).

    The caller has already found the proposal in its scope: events are read by its id alone.
    """
    check_identity("id", proposal_id)
    check_limit(limit)
    rows = [event_row(r) for r in conn.execute(select_events(proposal_id, limit)).mappings()]
    rows.reverse()
    sealed = [e for e in rows if e.prior_result is not None]
    if not sealed:
        return rows
    opened = open_columns(
        conn,
        p.name,
        [{"result": e.prior_result} for e in sealed],
        [e.tenant_ref for e in sealed],
        row_ids=[e.proposal_id for e in sealed],
    )
    texts = {e.id: values["result"] for e, (values, _) in zip(sealed, opened, strict=True)}
    return [replace(e, prior_result=texts[e.id]) if e.id in texts else e for e in rows]


# --- decide, requeue, cancel ------------------------------------------------------------------


def decide_as_operator(
    conn: Connection,
    proposal_id: str,
    *,
    decision: str,
    decided_by: str,
    note: str | None = None,
    clock: Clock | None = None,
) -> DecideResult:
    """Approve or reject the proposal with this full id, in whatever scope it is, as
    ``decide_proposal`` does in that scope (same outcomes, same writes); when it applies, an
    ``operator_decision`` event records who decided, when and the note, in the same
    transaction. Privileged: the caller is the operator, already authorised."""
    check_decide(decision, decided_by, note)
    check_identity("id", proposal_id)
    clock = clock_or_system(clock)
    row = _stored(conn, proposal_id)
    if row is None:
        return DecideResult("not_found", None)
    result = decide_proposal(
        conn,
        proposal_id,
        scope=row.scope,
        decision=decision,
        decided_by=decided_by,
        note=note,
        clock=clock,
    )
    if result.outcome == "applied" and result.proposal is not None:
        applied = result.proposal
        assert applied.decided_at is not None
        _record(
            conn,
            applied,
            kind="operator_decision",
            acted_by=decided_by,
            reason=note,
            now=applied.decided_at,
            decision=decision,
        )
    return result


def requeue_proposal(
    conn: Connection,
    proposal_id: str,
    *,
    requeued_by: str,
    reason: str,
    clock: Clock | None = None,
) -> RequeueResult:
    """Put a failed execution back in the queue for a new attempt (see the module docs):
    ``requeued``, ``not_failed`` (anything but approved work settled as failed; nothing
    written) or ``not_found``. Fenced: of two racing requeues exactly one applies."""
    check_operator_act("requeued_by", requeued_by, reason)
    check_identity("id", proposal_id)
    clock = clock_or_system(clock)
    for _ in range(FENCE_ROUNDS):
        row = _stored(conn, proposal_id)
        if row is None:
            return RequeueResult("not_found", None)
        if row.decision != "approved" or row.execution_state != "failed":
            return RequeueResult("not_failed", _opened(conn, row))
        now = clock.now_ms()
        changes: dict[str, Any] = {
            "execution_state": "queued",
            "discovery_state": "queued",
            "discovery_at": now,
            "lease_owner": None,
            "lease_expires_at": None,
            "result": None,
            "error": None,
            "settled_at": None,
            "outcome_delivered_at": None,
            "outcome_message_id": None,
            "updated_at": now,
        }
        applied = fenced_update(conn, row, changes, also={"lease_token_hash": None})
        if applied is None:
            continue
        _record(conn, row, kind="requeue", acted_by=requeued_by, reason=reason, now=now)
        notify_work(conn)  # claimable again on commit
        return RequeueResult("requeued", _opened(conn, applied))
    raise raced_too_often(proposal_id)


def cancel_proposal(
    conn: Connection,
    proposal_id: str,
    *,
    cancelled_by: str,
    reason: str,
    clock: Clock | None = None,
) -> CancelResult:
    """Withdraw approved work that waits for a worker, so that it never runs (see the module
    docs): ``cancelled``, ``unchanged`` (already cancelled), or — nothing written —
    ``pending``, ``running``, ``stuck``, ``not_queued`` or ``not_found``. Fenced: of a cancel
    and a claim racing, exactly one applies."""
    check_operator_act("cancelled_by", cancelled_by, reason)
    check_identity("id", proposal_id)
    clock = clock_or_system(clock)
    for _ in range(FENCE_ROUNDS):
        row = _stored(conn, proposal_id)
        if row is None:
            return CancelResult("not_found", None)
        now = clock.now_ms()
        state = row.execution_state
        if row.decision == "pending":
            return CancelResult("pending", _opened(conn, row))
        if row.decision != "approved":
            return CancelResult("not_queued", _opened(conn, row))
        if state == "cancelled":
            return CancelResult("unchanged", _opened(conn, row))
        if state == "running":
            live = row.lease_expires_at is not None and row.lease_expires_at > now
            return CancelResult("running" if live else "stuck", _opened(conn, row))
        if state not in (None, "queued"):
            return CancelResult("not_queued", _opened(conn, row))
        changes: dict[str, Any] = {
            "execution_state": "cancelled",
            "discovery_state": "done",
            "discovery_at": None,
            "settled_at": now,
            "updated_at": now,
        }
        applied = fenced_update(conn, row, changes)
        if applied is None:
            continue
        _record(conn, row, kind="cancel", acted_by=cancelled_by, reason=reason, now=now)
        return CancelResult("cancelled", _opened(conn, applied))
    raise raced_too_often(proposal_id)
