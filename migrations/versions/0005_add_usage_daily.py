"""Add the ledger folded by UTC day (agent_usage_daily) and its folded days (agent_usage_fold).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from agora_cli.migrations import apply_revision, refuse_downgrade

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision(revision)


def downgrade() -> None:
    refuse_downgrade(revision, "the daily ledger fold")
