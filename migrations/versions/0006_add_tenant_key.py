"""Add the tenants' wrapped data keys (agent_tenant_key), for sealed message content.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from agora_cli.migrations import apply_revision, refuse_downgrade

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision(revision)


def downgrade() -> None:
    refuse_downgrade(revision, "the tenant key table")
