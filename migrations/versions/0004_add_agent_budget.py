"""Add saved budgets (agent_budget) and the tenant ledger index for their windows.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from agora_cli.migrations import apply_revision, refuse_downgrade

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision(revision)


def downgrade() -> None:
    refuse_downgrade(revision, "saved budgets")
