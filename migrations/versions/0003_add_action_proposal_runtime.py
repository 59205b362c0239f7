"""Add message outcomes, proposal outcome delivery, and queued messages' UI capabilities.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from agora_cli.migrations import apply_revision, refuse_downgrade

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision(revision)


def downgrade() -> None:
    refuse_downgrade(revision, "action-proposal runtime")
