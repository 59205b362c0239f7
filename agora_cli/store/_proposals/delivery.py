"""Outcome delivery: admitting a settled proposal's outcome into its thread, exactly once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agora_cli.store._clock import Clock, iso_ms
from agora_cli.store._errors import NotFound
from agora_cli.store._proposals.model import (
    FENCE_ROUNDS,
    DeliveryResult,
    Proposal,
    check_limit,
    clock_or_system,
    raced_too_often,
)
from agora_cli.store._proposals.queries import (
    fenced_update,
    proposal_row,
    select_message_thread,
    select_proposal,
    select_undelivered,
    update_message_outcome,
)
from agora_cli.store._proposals.sealed import open_proposals
from agora_cli.store._threads import seal_message_values
from agora_cli.store._values import check_identity, dump_json

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

__all__ = ["deliver_outcome", "list_undelivered_outcomes"]


def list_undelivered_outcomes(conn: Connection, *, limit: int = 100) -> list[Proposal]:
    """List settled proposals whose outcome is not yet in their thread, oldest settled first."""
    check_limit(limit)
    stmt = select_undelivered(limit)
    return open_proposals(conn, [proposal_row(r) for r in conn.execute(stmt).mappings()])


def _outcome_document(row: Proposal) -> str:
    return dump_json(
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
    ``outcome`` in the caller's transaction. A message outside the proposal's thread, or a thread
    that is not the proposal's tenant's, raises ``NotFound``: an outcome never crosses tenants.
    """
    check_identity("id", proposal_id)
    check_identity("message_id", message_id)
    clock = clock_or_system(clock)
    for _ in range(FENCE_ROUNDS):
        found = conn.execute(select_proposal(proposal_id)).mappings().first()
        if found is None or found["id"] != proposal_id:
            return DeliveryResult("not_found", None)
        row = open_proposals(conn, [proposal_row(found)])[0]
        if row.outcome_delivered_at is not None:
            return DeliveryResult("already_delivered", row.outcome_message_id)
        if row.settled_at is None:
            return DeliveryResult("not_settled", None)
        target = conn.execute(select_message_thread(message_id)).first()
        if target is None or target[0] != row.thread_id:
            raise NotFound(f"no message {message_id!r} in thread {row.thread_id!r}")
        if row.tenant_ref is not None and target[1] != row.tenant_ref:
            # A proposal written for one tenant on another's thread (before the store checked
            # it): its outcome never goes into that thread.
            raise NotFound(
                f"no message {message_id!r} in a thread of tenant {row.tenant_ref!r} "
                f"(proposal {proposal_id!r}'s thread is another tenant's)"
            )
        now = clock.now_ms()
        changes = {"outcome_delivered_at": now, "outcome_message_id": message_id, "updated_at": now}
        if fenced_update(conn, row, changes) is None:
            continue
        # sealed for the thread's tenant when it has a key, as a message's own columns are
        outcome = seal_message_values(
            conn, row.thread_id, message_id, {"outcome": _outcome_document(row)}
        )
        conn.execute(update_message_outcome(message_id, outcome))
        return DeliveryResult("delivered", message_id)
    raise raced_too_often(proposal_id)
