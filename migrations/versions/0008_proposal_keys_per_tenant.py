"""Make proposals' idempotency keys unique per tenant (agent_action_proposal.tenant_key).

Adds ``tenant_key`` (NOT NULL, ``''`` for untenanted), fills it from ``tenant_ref`` in bounded
batches, builds ``agent_action_proposal_tenant_idempotency_uq (tenant_key, idempotency_key)`` and
drops the global ``agent_action_proposal_idempotency_uq`` (issue 24, finding 10).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

from agora_cli.migrations import apply_revision, refuse_downgrade

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision(revision)


def downgrade() -> None:
    refuse_downgrade(revision, "idempotency keys unique per tenant")
