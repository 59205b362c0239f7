"""One look at a database's agent schema: revision, drift, legacy rows and table sizes."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from agora_cli.store._dialects import dialect_of
from agora_cli.store._engine import dialect_name, server_version
from agora_cli.store._galera import GaleraStatus, galera_status
from agora_cli.store._migrate import applied_branches, current_revision, head_revision
from agora_cli.store._pooler import PoolerStatus, pooler_status
from agora_cli.store._problems import Problem
from agora_cli.store._proposals import count_legacy_proposals
from agora_cli.store._provision import RowCount, check_agent_tables, table_row_counts

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

__all__ = ["PoolerStatus", "SchemaStatus", "pooler_status", "schema_status"]


@dataclass(frozen=True)
class SchemaStatus:
    """What ``agora db status`` reports."""

    dialect: str
    server_version: str
    revision: str | None
    head: str
    branches: list[str]
    problems: list[Problem]
    legacy_proposals: int
    tables: dict[str, RowCount]
    cluster: GaleraStatus | None = None  # a Galera cluster node: its membership and state
    pooler: PoolerStatus | None = None  # PostgreSQL behind a connection pooler

    @property
    def schema_current(self) -> bool:
        return not self.problems


def schema_status(engine: Engine) -> SchemaStatus:
    """Read the migration state, the drift, the legacy proposals left and the row counts."""
    problems = check_agent_tables(engine)
    with engine.connect().execution_options(sqlite_deferred=True) as conn:
        tables = table_row_counts(conn)
        proposals = tables.get("agent_action_proposal")
        if proposals is None:
            legacy = 0
        elif any(p.kind == "missing_column" and "discovery_state" in p.detail for p in problems):
            legacy = proposals.rows  # no discovery columns yet: every row is legacy
        else:
            legacy = count_legacy_proposals(conn)
        status = SchemaStatus(
            dialect=dialect_name(engine),
            server_version=server_version(conn),
            revision=current_revision(conn),
            head=head_revision(),
            branches=applied_branches(conn),
            problems=problems,
            legacy_proposals=legacy,
            tables=tables,
            cluster=galera_status(conn) if dialect_of(engine).may_be_galera else None,
        )
        conn.rollback()
    if dialect_of(engine).has_pg_catalog:
        status = replace(status, pooler=pooler_status(engine))
    return status
