"""Add the proposals' audit trail of operator acts (agent_action_proposal_event, issue 28).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

from agora_cli.migrations import apply_revision, refuse_downgrade

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision(revision)


def downgrade() -> None:
    refuse_downgrade(revision, "the proposals' audit trail")
