"""Add the stream frames' tenant (agent_stream_frame.tenant_ref), for row-level security.

The frame writer fills it with its run's tenant; frames written before keep NULL and follow
their run (issue 24, finding 5).

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
    refuse_downgrade(revision, "the stream frames' tenant")
