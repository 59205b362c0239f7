"""The two PostgreSQL-only table sets, created only by their optional migrations.

``documents``: ``agent_document`` and ``agent_document_node`` (a tree of titled, ordered
nodes). ``rag``: ``agent_rag_chunk`` with a pgvector ``vector(N)`` embedding (N from
``AGORA_RAG_DIMENSIONS``, default 1536) and an HNSW cosine index. Neither is ever created by
``provision``, so a plain upgrade never needs an extension.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from agora_cli.store._errors import InvalidInput, MissingExtension

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

__all__ = [
    "create_agent_document_tree",
    "create_agent_rag_chunks",
    "document_tree_statements",
    "rag_dimensions",
    "rag_statements",
]


def document_tree_statements() -> list[str]:
    return [
        "CREATE TABLE IF NOT EXISTS agent_document (\n"
        "  id VARCHAR(255) PRIMARY KEY,\n"
        "  title TEXT NOT NULL,\n"
        "  metadata JSONB,\n"
        "  created_at BIGINT NOT NULL\n)",
        "CREATE TABLE IF NOT EXISTS agent_document_node (\n"
        "  id VARCHAR(255) PRIMARY KEY,\n"
        "  document_id VARCHAR(255) NOT NULL,\n"
        "  parent_id VARCHAR(255),\n"
        "  path TEXT NOT NULL,\n"
        "  title TEXT NOT NULL,\n"
        "  content TEXT NOT NULL,\n"
        "  position INTEGER NOT NULL DEFAULT 0,\n"
        "  created_at BIGINT NOT NULL,\n"
        "  CONSTRAINT agent_document_node_document_id_fk FOREIGN KEY (document_id)\n"
        "    REFERENCES agent_document (id) ON DELETE CASCADE\n)",
        "CREATE INDEX IF NOT EXISTS agent_document_node_document_idx "
        "ON agent_document_node (document_id, parent_id, position)",
    ]


def rag_dimensions() -> int:
    raw = os.environ.get("AGORA_RAG_DIMENSIONS", "1536")
    if not raw.isdigit() or not 1 <= int(raw) <= 16000:
        raise InvalidInput(f"AGORA_RAG_DIMENSIONS={raw!r} is not a dimension count (1-16000)")
    return int(raw)


def rag_statements() -> list[str]:
    n = rag_dimensions()
    return [
        "CREATE EXTENSION IF NOT EXISTS vector",
        "CREATE TABLE IF NOT EXISTS agent_rag_chunk (\n"
        "  id VARCHAR(255) PRIMARY KEY,\n"
        "  source_id VARCHAR(255) NOT NULL,\n"
        "  chunk_index INTEGER NOT NULL,\n"
        "  content TEXT NOT NULL,\n"
        "  metadata JSONB,\n"
        f"  embedding vector({n}),\n"
        "  created_at BIGINT NOT NULL\n)",
        "CREATE INDEX IF NOT EXISTS agent_rag_chunk_source_idx "
        "ON agent_rag_chunk (source_id, chunk_index)",
        "CREATE INDEX IF NOT EXISTS agent_rag_chunk_embedding_idx "
        "ON agent_rag_chunk USING hnsw (embedding vector_cosine_ops)",
    ]


def create_agent_document_tree(conn: Connection) -> None:
    """Create the document tree on PostgreSQL (inside the caller's transaction)."""
    for statement in document_tree_statements():
        conn.exec_driver_sql(statement)


def create_agent_rag_chunks(conn: Connection) -> None:
    """Create ``agent_rag_chunk``; ``MissingExtension`` (nothing created) without pgvector."""
    available = conn.exec_driver_sql(
        "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
    ).first()
    if available is None:
        raise MissingExtension(
            "the PostgreSQL server has no pgvector extension ('vector'): install pgvector "
            "on the server (e.g. the postgresql-NN-pgvector package), then run "
            "`agora db upgrade rag@head` again; nothing was created"
        )
    for statement in rag_statements():
        conn.exec_driver_sql(statement)
