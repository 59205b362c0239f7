"""PostgreSQL only: the document tree (agent_document, agent_document_node).

Revision ID: d001
Revises:
"""

from __future__ import annotations

from alembic import context, op

from agora_cli.migrations import say

revision = "d001"
down_revision = None
branch_labels = ("documents",)
depends_on = None


def creates(dialect: str) -> tuple[str, ...]:
    """The tables this revision creates on ``dialect`` (``agora db stamp`` and ``downgrade``)."""
    from agora_cli.store._dialects import dialect_of

    if not dialect_of(dialect).has_pg_extras:
        return ()
    return ("agent_document", "agent_document_node")


def upgrade() -> None:
    from agora_cli.store._dialects import dialect_of
    from agora_cli.store._pg_extras import create_agent_document_tree, document_tree_statements

    dialect = op.get_context().dialect.name
    if not dialect_of(dialect).has_pg_extras:
        say(f"the documents branch is PostgreSQL-only: nothing to do on {dialect}")
        return
    if context.is_offline_mode():
        for statement in document_tree_statements():
            op.execute(statement)
        return
    create_agent_document_tree(op.get_bind())


def downgrade() -> None:
    from agora_cli.store._dialects import dialect_of

    if dialect_of(op.get_context().dialect.name).has_pg_extras:
        op.execute("DROP TABLE IF EXISTS agent_document_node")
        op.execute("DROP TABLE IF EXISTS agent_document")
