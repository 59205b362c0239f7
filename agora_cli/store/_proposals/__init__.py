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

The package, one concern a module: ``model`` (the values, states and results), ``queries`` (every
statement, once), ``decisions`` (create, read, decide, expire), ``leases`` (claim, claim the next
due work, renew, settle), ``delivery`` (outcomes into threads), ``backfill`` (legacy rows),
``inbox`` (the operator's cross-scope view), ``tool_calls`` (the runtime's own approvals, read
beside the proposals) and ``store`` (``ActionProposalStore``).
"""

from __future__ import annotations

from agora_cli.store._proposals.backfill import backfill_discovery_index, count_legacy_proposals
from agora_cli.store._proposals.decisions import (
    create_proposal,
    decide_proposal,
    expire_proposals,
    find_proposal,
    find_proposal_id,
    get_proposal,
    list_proposals,
)
from agora_cli.store._proposals.delivery import deliver_outcome, list_undelivered_outcomes
from agora_cli.store._proposals.inbox import (
    INBOX_STATES,
    MAX_EXPIRING_WITHIN_MS,
    Inbox,
    InboxEntry,
    InboxState,
    list_inbox,
)
from agora_cli.store._proposals.leases import (
    claim_next_proposal,
    claim_next_proposals,
    claim_proposal,
    renew_lease,
    settle_and_claim_next,
    settle_proposal,
    settle_proposals,
    settle_proposals_and_claim_next,
)
from agora_cli.store._proposals.model import (
    DECISIONS,
    ID_PREFIX,
    BackfillResult,
    CancelOutcome,
    CancelResult,
    ClaimOutcome,
    ClaimResult,
    CreateOutcome,
    CreateResult,
    DecideOutcome,
    DecideResult,
    Decision,
    DeliveryOutcome,
    DeliveryResult,
    DiscoveryState,
    EventKind,
    ExecutionState,
    Lease,
    NewProposal,
    Proposal,
    ProposalEvent,
    RenewOutcome,
    RenewResult,
    RequeueOutcome,
    RequeueResult,
    Scope,
    SettledState,
    Settlement,
    SettleOutcome,
    SettleResult,
    Work,
    default_idempotency_key,
    proposal_id,
)
from agora_cli.store._proposals.operator import (
    cancel_proposal,
    decide_as_operator,
    find_any_approval_id,
    find_any_proposal_id,
    list_proposal_events,
    requeue_proposal,
)
from agora_cli.store._proposals.store import ActionProposalStore
from agora_cli.store._proposals.tool_calls import (
    ApprovalKind,
    ToolCallApproval,
    find_any_tool_call_approval,
    find_any_tool_call_approval_id,
    find_approval_id,
    find_tool_call_approval,
    find_tool_call_approval_id,
    get_tool_call_approval,
    list_tool_call_approvals,
    refuse_tool_call_decision,
)
from agora_cli.store._proposals.wakeups import WORK_CHANNEL, WorkWaiter, notify_work
from agora_cli.store._values import MAX_IDENTITY_UNITS, check_identity, utf16_units

__all__ = [
    "DECISIONS",
    "ID_PREFIX",
    "INBOX_STATES",
    "MAX_EXPIRING_WITHIN_MS",
    "MAX_IDENTITY_UNITS",
    "WORK_CHANNEL",
    "ActionProposalStore",
    "ApprovalKind",
    "BackfillResult",
    "CancelOutcome",
    "CancelResult",
    "ClaimOutcome",
    "ClaimResult",
    "CreateOutcome",
    "CreateResult",
    "DecideOutcome",
    "DecideResult",
    "Decision",
    "DeliveryOutcome",
    "DeliveryResult",
    "DiscoveryState",
    "EventKind",
    "ExecutionState",
    "Inbox",
    "InboxEntry",
    "InboxState",
    "Lease",
    "NewProposal",
    "Proposal",
    "ProposalEvent",
    "RenewOutcome",
    "RenewResult",
    "RequeueOutcome",
    "RequeueResult",
    "Scope",
    "SettleOutcome",
    "SettleResult",
    "SettledState",
    "Settlement",
    "ToolCallApproval",
    "Work",
    "WorkWaiter",
    "backfill_discovery_index",
    "cancel_proposal",
    "check_identity",
    "claim_next_proposal",
    "claim_next_proposals",
    "claim_proposal",
    "count_legacy_proposals",
    "create_proposal",
    "decide_as_operator",
    "decide_proposal",
    "default_idempotency_key",
    "deliver_outcome",
    "expire_proposals",
    "find_any_approval_id",
    "find_any_proposal_id",
    "find_any_tool_call_approval",
    "find_any_tool_call_approval_id",
    "find_approval_id",
    "find_proposal",
    "find_proposal_id",
    "find_tool_call_approval",
    "find_tool_call_approval_id",
    "get_proposal",
    "get_tool_call_approval",
    "list_inbox",
    "list_proposal_events",
    "list_proposals",
    "list_tool_call_approvals",
    "list_undelivered_outcomes",
    "notify_work",
    "proposal_id",
    "refuse_tool_call_decision",
    "renew_lease",
    "requeue_proposal",
    "settle_and_claim_next",
    "settle_proposal",
    "settle_proposals",
    "settle_proposals_and_claim_next",
    "utf16_units",
]
