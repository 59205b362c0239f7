"""Add the action-proposal discovery columns and index, then backfill them in batches.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from alembic import context, op

from agora_cli.migrations import apply_revision, refuse_downgrade, say

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

BATCH = 500


def upgrade() -> None:
    apply_revision(revision)
    if context.is_offline_mode():
        say("then fill the discovery index of older rows: agora db backfill --limit 500")
        return
    from agora_cli.store._proposals import backfill_discovery_index

    # Bounded batches until no legacy row remains; re-running after an interruption is safe
    # because a batch only ever touches rows whose discovery_state is still NULL.
    bind = op.get_bind()
    while True:
        result = backfill_discovery_index(bind, limit=BATCH, count_remaining=False)
        if result.backfilled == 0 or result.remaining == 0:
            break


def downgrade() -> None:
    refuse_downgrade(revision, "action-proposal discovery")
