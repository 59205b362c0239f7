"""Galera cluster nodes (MariaDB Galera Cluster, Percona XtraDB Cluster): what agora adapts.

Nothing is configured: a MySQL/MariaDB connection asks the server for ``wsrep_on`` when it
opens (``engine.is_galera``), and on a cluster node

- reads are causal (``wsrep_sync_wait = 1``, set per session): a read waits until this node has
  applied every transaction the cluster had committed when it began, so ``frames tail`` and any
  read of a write made through another node see it;
- a transaction that loses certification at commit (another node committed a conflicting write
  first: error 1213) or is aborted by a replicated write is retried whole, boundedly and with
  random jitter, like a deadlock (``engine.retry_transient``); a claim that lost certification
  never returns its lease, since the lease is returned only after the commit;
- ``claim_next`` takes one of the oldest due rows of this node's share of the queue, read
  without locking and taken by the version fence (``SKIP LOCKED`` skips only this node's locks);
- provisioning, whose lock (``GET_LOCK``) is node-local, re-plans after a statement that lost
  a race with another node's identical DDL, until nothing is missing;
- ``agora db check`` adds what Galera cannot replicate safely (``galera_problems``) and
  ``agora db status`` reports the node (``galera_status``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from agora_cli.store._engine import is_galera
from agora_cli.store._problems import Problem

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection


__all__ = ["GaleraStatus", "galera_problems", "galera_status"]


@dataclass(frozen=True)
class GaleraStatus:
    """A Galera node as it reports itself (``SHOW GLOBAL STATUS LIKE 'wsrep_%'``)."""

    cluster_size: int
    state: str  # wsrep_local_state_comment: Synced, Donor/Desynced, Joining, ...
    cluster_status: str  # wsrep_cluster_status: Primary, non-Primary, Disconnected
    ready: bool  # wsrep_ready: the node accepts queries

    @property
    def synced(self) -> bool:
        return self.state == "Synced" and self.ready and self.cluster_status == "Primary"

    def describe(self) -> str:
        """``Galera cluster, 3 nodes, this node synced`` (or its state, and non-Primary)."""
        nodes = f"{self.cluster_size} node{'s' if self.cluster_size != 1 else ''}"
        state = "synced" if self.synced else self.state.lower() or "in an unknown state"
        text = f"Galera cluster, {nodes}, this node {state}"
        if self.cluster_status != "Primary":
            text += f" ({self.cluster_status}: not part of the primary component)"
        return text


def galera_status(conn: Connection) -> GaleraStatus | None:
    """This node's cluster membership and state; ``None`` when the server is not a Galera node."""
    if not is_galera(conn):
        return None
    rows = conn.exec_driver_sql(
        "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_cluster_size', "
        "'wsrep_local_state_comment', 'wsrep_cluster_status', 'wsrep_ready')"
    ).all()
    found = {str(k): str(v) for k, v in rows}
    try:
        size = int(found.get("wsrep_cluster_size", "0"))
    except ValueError:
        size = 0
    return GaleraStatus(
        cluster_size=size,
        state=found.get("wsrep_local_state_comment", ""),
        cluster_status=found.get("wsrep_cluster_status", ""),
        ready=found.get("wsrep_ready", "").upper() == "ON",
    )


def galera_problems(conn: Connection, agent_tables: set[str]) -> list[Problem]:
    """What a Galera cluster cannot replicate safely in this database (empty elsewhere).

    Every base table of the database is checked, agora's or not, since they share the cluster:
    a table without a primary key (``no_primary_key``: rows are found by a full scan on every
    node, and MariaDB with ``wsrep_mode=REQUIRED_PRIMARY_KEY`` refuses it), a table not in
    InnoDB (``wrong_engine``: MyISAM, Aria, MEMORY ... tables are not replicated); and the
    server settings replication needs (``galera_setting``: ``binlog_format=ROW``, a Primary
    component). Agent tables with a wrong engine are already reported by the schema check.
    (Explicit ``LOCK TABLES`` and XA transactions, which Galera also refuses, agora never
    issues; its ``GET_LOCK`` is node-local, which provisioning allows for.)
    """
    if not is_galera(conn):
        return []
    problems: list[Problem] = []
    tables = conn.exec_driver_sql(
        "SELECT t.table_name, t.engine, EXISTS (SELECT 1 "
        "FROM information_schema.table_constraints c WHERE c.table_schema = t.table_schema "
        "AND c.table_name = t.table_name "
        "AND c.constraint_type = 'PRIMARY KEY') "
        "FROM information_schema.tables t WHERE t.table_schema = DATABASE() "
        "AND t.table_type = 'BASE TABLE' ORDER BY t.table_name"
    ).all()
    for name, engine, has_pk in tables:
        table = str(name)
        if not has_pk:
            problems.append(
                Problem(
                    "no_primary_key",
                    table,
                    f"{table} has no primary key: Galera needs one on every table to replicate "
                    "row changes safely",
                )
            )
        if table not in agent_tables and str(engine).lower() != "innodb":
            problems.append(
                Problem(
                    "wrong_engine",
                    table,
                    f"{table} uses ENGINE={engine}: Galera replicates InnoDB tables only",
                )
            )
    binlog_format = str(conn.exec_driver_sql("SELECT @@GLOBAL.binlog_format").scalar())
    status = galera_status(conn)
    if binlog_format.upper() != "ROW":
        problems.append(
            Problem(
                "galera_setting",
                "",
                f"binlog_format is {binlog_format}: Galera replicates ROW only",
            )
        )
    if status is not None and status.cluster_status != "Primary":
        problems.append(
            Problem(
                "galera_setting",
                "",
                f"this node is {status.cluster_status}, not in the primary component: "
                "it refuses reads and writes until it rejoins",
            )
        )
    return problems
