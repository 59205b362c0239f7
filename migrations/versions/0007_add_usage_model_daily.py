"""Add the ledger folded by UTC day and model (agent_usage_model_daily), for reports by model.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from agora_cli.migrations import apply_revision, refuse_downgrade

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision(revision)


def downgrade() -> None:
    refuse_downgrade(revision, "the per-model daily fold")
