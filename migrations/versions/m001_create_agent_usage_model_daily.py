"""All dialects, optional: the ledger folded by UTC day and model (agent_usage_model_daily).

The ``rollup`` branch, never part of ``agent@head``: ``agora db upgrade rollup@head`` after the
main chain. ``spend fold`` then writes each day's per-model sums beside its fold rows (and
refolds the days folded before), and reports by model or time read ~12 rows a day instead of
one per (model, actor, tenant). Derived data only: the downgrade drops it, and reports read
``agent_usage_daily`` again.

Revision ID: m001
Revises:
"""

from __future__ import annotations

from alembic import context, op

from agora_cli.migrations import say

revision = "m001"
down_revision = None
branch_labels = ("rollup",)
depends_on = None


def creates(dialect: str) -> tuple[str, ...]:
    """The tables this revision creates on ``dialect`` (``agora db stamp`` and ``downgrade``)."""
    from agora_cli.store._fold import ROLLUP_TABLE

    return (ROLLUP_TABLE,)


def upgrade() -> None:
    from agora_cli.store._fold import ROLLUP_TABLE, create_rollup, rollup_statements

    if context.is_offline_mode():
        catalog = context.config.attributes.get("catalog")
        if catalog is not None and ROLLUP_TABLE in catalog.columns:
            say(f"{ROLLUP_TABLE} is already there")
            return
        for statement in rollup_statements(op.get_context().dialect):
            op.execute(statement)
        return
    if not create_rollup(op.get_bind()):
        say("agent_usage_model_daily is already there")
    else:
        say("created agent_usage_model_daily: the next `agora spend fold` fills it")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS agent_usage_model_daily")
