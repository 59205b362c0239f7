"""PostgreSQL only: agent_rag_chunk with a pgvector embedding and an HNSW index.

Revision ID: r001
Revises:
"""

from __future__ import annotations

from alembic import context, op

from agora_cli.migrations import say

revision = "r001"
down_revision = None
branch_labels = ("rag",)
depends_on = None


def creates(dialect: str) -> tuple[str, ...]:
    """The tables this revision creates on ``dialect`` (``agora db stamp`` and ``downgrade``)."""
    from agora_cli.store._dialects import dialect_of

    return ("agent_rag_chunk",) if dialect_of(dialect).has_pg_extras else ()


def upgrade() -> None:
    from agora_cli.store._dialects import dialect_of
    from agora_cli.store._pg_extras import create_agent_rag_chunks, rag_statements

    dialect = op.get_context().dialect.name
    if not dialect_of(dialect).has_pg_extras:
        say(f"the rag branch is PostgreSQL-only: nothing to do on {dialect}")
        return
    if context.is_offline_mode():
        for statement in rag_statements():
            op.execute(statement)
        return
    create_agent_rag_chunks(op.get_bind())


def downgrade() -> None:
    from agora_cli.store._dialects import dialect_of

    if dialect_of(op.get_context().dialect.name).has_pg_extras:
        op.execute("DROP TABLE IF EXISTS agent_rag_chunk")
