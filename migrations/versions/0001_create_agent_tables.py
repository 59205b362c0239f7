"""Create the agent tables.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

from alembic import op

from agora_cli.migrations import apply_revision

revision = "0001"
down_revision = None
branch_labels = ("agent",)
depends_on = None


def upgrade() -> None:
    apply_revision(revision)


def downgrade() -> None:
    # The only migration that may drop anything.
    from agora_cli.store._schema import metadata

    metadata.drop_all(op.get_bind(), checkfirst=True)
