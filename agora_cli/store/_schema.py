"""The agent schema as one SQLAlchemy Core ``MetaData`` (also Alembic's target metadata).

Portable types only: identity columns ``VARCHAR(255)``, epoch-ms ``BIGINT`` timestamps,
``INTEGER`` 0/1 booleans, double-precision money, and long text (``LONGTEXT`` on MySQL) for
JSON payloads. Every MySQL table is InnoDB, utf8mb4 with the binary collation. Foreign keys are
table-level, named ``<table>_<column>_fk``, ``ON DELETE CASCADE``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Double,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    event,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

from agora_cli.store._dialects import dialect_of

__all__ = [
    "AGENT_TABLES",
    "UPGRADE_COLUMNS",
    "UPGRADE_INDEXES",
    "UPGRADE_TABLES",
    "metadata",
]

metadata = MetaData()
# The optional ``rollup`` branch's table (``agora db upgrade rollup@head``): not part of the
# spec's schema, so never provisioned, checked or counted with the agent tables.
rollup_metadata = MetaData()


class _LongText(TypeDecorator[str]):
    """``TEXT``; ``LONGTEXT`` on MySQL, whose ``TEXT`` holds 64 KiB.

    A decorator rather than ``with_variant(mysql.LONGTEXT())``: the MySQL dialect (~50 ms of
    imports) is loaded only when a MySQL database is used.
    """

    impl = Text
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect_of(dialect).sized_text:
            # lazy: a dialect's module (MySQL's ~50 ms) loads only where that dialect is used
            from sqlalchemy.dialects.mysql import LONGTEXT

            return dialect.type_descriptor(LONGTEXT())
        return self.impl_instance


LongText = _LongText()
Ident = String(255)
Millis = BigInteger()
Money: Double[float] = Double(asdecimal=False)

_MYSQL = {
    "mysql_engine": "InnoDB",
    "mysql_charset": "utf8mb4",
    "mysql_collate": "utf8mb4_bin",
}
_MYSQL_APPLIED: list[bool] = []


def apply_mysql_options() -> None:
    """Give every table its MySQL options (InnoDB, utf8mb4, utf8mb4_bin).

    Done when MySQL DDL is first compiled (``ddl.py``, ``metadata.create_all``), not when the
    tables are declared: SQLAlchemy checks ``mysql_*`` keywords by loading the MySQL dialect
    (~50 ms of imports), which a command on PostgreSQL or SQLite never needs.
    """
    if _MYSQL_APPLIED:
        return
    for table in (*metadata.tables.values(), *rollup_metadata.tables.values()):
        for key, value in _MYSQL.items():
            table.dialect_kwargs[key] = value
    _MYSQL_APPLIED.append(True)


@event.listens_for(metadata, "before_create")
@event.listens_for(rollup_metadata, "before_create")
def _before_create(target: MetaData, connection: Any, **_: Any) -> None:
    if dialect_of(connection).has_table_options:
        apply_mysql_options()


def _id(name: str = "id", *, nullable: bool = False, pk: bool = False) -> Column[Any]:
    return Column(name, Ident, primary_key=pk, nullable=nullable)


def _fk(table: str, column: str, target: str) -> ForeignKeyConstraint:
    return ForeignKeyConstraint(
        [column], [f"{target}.id"], name=f"{table}_{column}_fk", ondelete="CASCADE"
    )


def _int(name: str, default: int | None = None, *, nullable: bool = False) -> Column[Any]:
    return Column(
        name,
        Integer(),
        nullable=nullable,
        server_default=None if default is None else text(str(default)),
    )


def _table(name: str, *items: Any, meta: MetaData = metadata) -> Table:
    table: Table = Table(name, meta, *items)
    if _MYSQL_APPLIED:  # a table declared after MySQL DDL was compiled
        table.dialect_kwargs.update(_MYSQL)
    return table


thread = _table(
    "agent_thread",
    _id(pk=True),
    _id("actor_ref"),
    _id("tenant_ref", nullable=True),
    Column("title", LongText, nullable=False),
    Column("persona", Ident, nullable=False, server_default=text("'default'")),
    Column("model", Ident, nullable=True),
    Column("default_agent", Ident, nullable=True),
    _int("transient", 0),
    Column("pinned_at", Millis, nullable=True),
    Column("summary", LongText, nullable=True),
    _int("summary_message_count", 0),
    _id("active_stream_id", nullable=True),
    Column("created_at", Millis, nullable=False),
    Column("updated_at", Millis, nullable=False),
    Column("deleted_at", Millis, nullable=True),
    Index("agent_thread_actor_updated_idx", "actor_ref", "updated_at"),
    Index("agent_thread_tenant_actor_idx", "tenant_ref", "actor_ref"),
)

message = _table(
    "agent_message",
    _id(pk=True),
    _id("thread_id"),
    _int("seq", 0),
    Column("role", Ident, nullable=False),
    Column("content", LongText, nullable=False),
    Column("tool_calls", LongText, nullable=True),
    Column("tool_results", LongText, nullable=True),
    Column("attachments", LongText, nullable=True),
    Column("follow_ups", LongText, nullable=True),
    Column("usage", LongText, nullable=True),
    Column("persona", Ident, nullable=True),
    _id("run_id", nullable=True),
    Column("outcome", LongText, nullable=True),
    Column("created_at", Millis, nullable=False),
    _fk("agent_message", "thread_id", "agent_thread"),
    Index("agent_message_thread_seq_idx", "thread_id", "seq"),
    Index("agent_message_thread_created_idx", "thread_id", "created_at"),
    Index("agent_message_run_idx", "run_id"),
)

tool_call = _table(
    "agent_tool_call",
    _id(pk=True),
    _id("message_id"),
    Column("tool_name", Ident, nullable=False),
    Column("tool_type", Ident, nullable=False),
    Column("input", LongText, nullable=True),
    Column("output", LongText, nullable=True),
    Column("status", Ident, nullable=False),
    _id("executed_by_ref", nullable=True),
    _int("execution_ms", nullable=True),
    Column("error", LongText, nullable=True),
    _id("run_id", nullable=True),
    Column("created_at", Millis, nullable=False),
    Column("executed_at", Millis, nullable=True),
    _fk("agent_tool_call", "message_id", "agent_message"),
    Index("agent_tool_call_message_idx", "message_id"),
    Index("agent_tool_call_run_idx", "run_id"),
    Index("agent_tool_call_status_created_idx", "status", "created_at"),
)

token_usage = _table(
    "agent_token_usage",
    _id(pk=True),
    _id("thread_id"),
    _id("actor_ref"),
    _id("tenant_ref", nullable=True),
    _id("message_id", nullable=True),
    Column("model_id", Ident, nullable=False),
    Column("purpose", Ident, nullable=False),
    Column("input_tokens", BigInteger(), nullable=False),
    Column("output_tokens", BigInteger(), nullable=False),
    Column("cache_write_tokens", BigInteger(), nullable=True),
    Column("cache_read_tokens", BigInteger(), nullable=True),
    Column("cost_usd", Money, nullable=True),
    Column("cost_source", Ident, nullable=True),
    _id("run_id", nullable=True),
    Column("created_at", Millis, nullable=False),
    _fk("agent_token_usage", "thread_id", "agent_thread"),
    Index("agent_token_usage_actor_created_idx", "actor_ref", "created_at"),
    Index("agent_token_usage_created_idx", "created_at"),
    Index("agent_token_usage_thread_idx", "thread_id"),
    Index("agent_token_usage_run_idx", "run_id"),
    Index("agent_token_usage_tenant_created_idx", "tenant_ref", "created_at"),  # 0004
)

model_pricing = _table(
    "agent_model_pricing",
    _id(pk=True),
    Column("model_id", Ident, nullable=False),
    Column("input_price_per_1m", Money, nullable=False),
    Column("output_price_per_1m", Money, nullable=False),
    Column("cache_write_price_per_1m", Money, nullable=True),
    Column("cache_read_price_per_1m", Money, nullable=True),
    Column("tiers", LongText, nullable=True),
    Column("source", Ident, nullable=True),
    Column("effective_from", Millis, nullable=False),
    _int("is_current"),
    Index("agent_model_pricing_model_current_idx", "model_id", "is_current"),
)

run = _table(
    "agent_run",
    _id(pk=True),
    _id("thread_id"),
    Column("agent_name", Ident, nullable=True),
    _id("actor_ref"),
    _id("tenant_ref", nullable=True),
    Column("status", Ident, nullable=False),
    Column("started_at", Millis, nullable=False),
    Column("finished_at", Millis, nullable=True),
    _int("step_count", 0),
    Column("input_tokens", BigInteger(), nullable=False, server_default=text("0")),
    Column("output_tokens", BigInteger(), nullable=False, server_default=text("0")),
    Column("cost_usd", Money, nullable=True),
    Column("error", LongText, nullable=True),
    _int("durable", 0),
    _fk("agent_run", "thread_id", "agent_thread"),
    Index("agent_run_thread_idx", "thread_id"),
    Index("agent_run_started_idx", "started_at"),
    Index("agent_run_actor_started_idx", "actor_ref", "started_at"),
    Index("agent_run_status_started_idx", "status", "started_at"),
)

queued_message = _table(
    "agent_queued_message",
    _id(pk=True),
    _id("thread_id"),
    _id("actor_ref"),
    _id("tenant_ref", nullable=True),
    Column("content", LongText, nullable=False),
    Column("attachments", LongText, nullable=True),
    Column("ui_capabilities", LongText, nullable=True),
    Column("status", Ident, nullable=False, server_default=text("'queued'")),
    Column("created_at", Millis, nullable=False),
    Column("claimed_at", Millis, nullable=True),
    _fk("agent_queued_message", "thread_id", "agent_thread"),
    Index("agent_queued_message_thread_created_idx", "thread_id", "created_at"),
)

confirm_token = _table(
    "agent_confirm_token",
    Column("token_hash", Ident, primary_key=True),
    _id("thread_id"),
    _id("actor_ref"),
    _id("tool_call_id", nullable=True),
    Column("expires_at", Millis, nullable=False),
    Column("used_at", Millis, nullable=True),
    Column("created_at", Millis, nullable=False),
    _fk("agent_confirm_token", "thread_id", "agent_thread"),
    Index("agent_confirm_token_thread_idx", "thread_id"),
    Index("agent_confirm_token_expires_idx", "expires_at"),
)

genui_call = _table(
    "agent_genui_call",
    _id(pk=True),
    _id("thread_id"),
    _id("message_id", nullable=True),
    _id("run_id", nullable=True),
    Column("component", Ident, nullable=False),
    Column("props", LongText, nullable=False),
    Column("status", Ident, nullable=False),
    Column("created_at", Millis, nullable=False),
    Column("updated_at", Millis, nullable=False),
    _fk("agent_genui_call", "thread_id", "agent_thread"),
    Index("agent_genui_call_thread_created_idx", "thread_id", "created_at"),
)

stream_frame = _table(
    "agent_stream_frame",
    Column("run_id", Ident, primary_key=True),
    Column("seq", Integer(), primary_key=True, autoincrement=False),
    Column("frame", LongText, nullable=True),
    Column("created_at", Millis, nullable=False),
    # 0007: the tenant the frame was written under (its run's), so that row-level security keeps
    # it that tenant's even once its run is gone; NULL for frames written before, or by a writer
    # that does not fill it (they follow their run)
    _id("tenant_ref", nullable=True),
    Index("agent_stream_frame_created_run_idx", "created_at", "run_id"),
)

channel_state = _table(
    "agent_channel_state",
    Column("channel", Ident, primary_key=True),
    Column("state_key", Ident, primary_key=True),
    Column("value", LongText, nullable=False),
    Column("expires_at", Millis, nullable=True),
    Column("updated_at", Millis, nullable=False),
    Index("agent_channel_state_expires_idx", "expires_at"),
)

action_proposal = _table(
    "agent_action_proposal",
    _id(pk=True),
    _id("idempotency_key"),
    _id("tenant_ref", nullable=True),
    _id("actor_ref"),
    _id("thread_id"),
    _id("run_id", nullable=True),
    _id("tool_call_id", nullable=True),
    Column("tool_name", Ident, nullable=False),
    Column("input", LongText, nullable=False),
    Column("card", LongText, nullable=True),
    Column("decision", Ident, nullable=False, server_default=text("'pending'")),
    _id("decided_by", nullable=True),
    Column("decided_at", Millis, nullable=True),
    Column("decision_note", LongText, nullable=True),
    Column("expires_at", Millis, nullable=True),
    Column("execution_state", Ident, nullable=True),
    _id("lease_owner", nullable=True),
    Column("lease_token_hash", Ident, nullable=True),
    Column("lease_expires_at", Millis, nullable=True),
    _int("generation", 0),
    _int("attempts", 0),
    Column("result", LongText, nullable=True),
    Column("error", LongText, nullable=True),
    Column("settled_at", Millis, nullable=True),
    _int("version", 0),
    Column("created_at", Millis, nullable=False),
    Column("updated_at", Millis, nullable=False),
    # discovery upgrade (0002)
    Column("discovery_state", Ident, nullable=True),
    Column("discovery_at", Millis, nullable=True),
    # runtime upgrade (0003)
    Column("outcome_delivered_at", Millis, nullable=True),
    _id("outcome_message_id", nullable=True),
    # 0008: the tenant the idempotency key belongs to (``tenant_ref``, or '' for none: a NULL
    # would let two untenanted rows share a key), so that keys are unique per tenant
    Column("tenant_key", Ident, nullable=False, server_default=text("''")),
    _fk("agent_action_proposal", "thread_id", "agent_thread"),
    Index(
        "agent_action_proposal_tenant_idempotency_uq", "tenant_key", "idempotency_key", unique=True
    ),
    Index("agent_action_proposal_thread_idx", "thread_id"),
    Index("agent_action_proposal_scope_idx", "actor_ref", "thread_id", "created_at"),
    Index("agent_action_proposal_discovery_idx", "discovery_state", "discovery_at"),
    # 0010: approved work by execution state and tool (``agora metrics``' failed executions: a
    # range of the failed rows, where the discovery index's ``done`` range grows with history)
    Index("agent_action_proposal_execution_idx", "execution_state", "discovery_state", "tool_name"),
)

# 0009: the operator's acts on a proposal (issue 28), one row each, never updated: a decision
# taken without the proposal's scope (``operator_decision``), a failed execution put back in the
# queue (``requeue``: the attempt it replaced kept in the ``prior_*`` columns) and queued work
# withdrawn (``cancel``). ``tenant_ref`` is the proposal's (row-level security keeps it that
# tenant's); ``prior_result`` is the proposal's ``result`` column exactly as it was (sealed for
# the proposal when its tenant has a key, and opened as the proposal's result).
action_proposal_event = _table(
    "agent_action_proposal_event",
    _id(pk=True),
    _id("proposal_id"),
    _id("tenant_ref", nullable=True),
    Column("kind", Ident, nullable=False),  # operator_decision | requeue | cancel
    _id("acted_by"),
    Column("reason", LongText, nullable=True),
    Column("decision", Ident, nullable=True),  # operator_decision: approved | rejected
    Column("prior_execution_state", Ident, nullable=True),
    _int("prior_attempts", nullable=True),
    _int("prior_generation", nullable=True),
    _id("prior_lease_owner", nullable=True),
    Column("prior_result", LongText, nullable=True),
    Column("prior_error", LongText, nullable=True),
    Column("prior_settled_at", Millis, nullable=True),
    Column("prior_outcome_delivered_at", Millis, nullable=True),
    _id("prior_outcome_message_id", nullable=True),
    Column("created_at", Millis, nullable=False),
    _fk("agent_action_proposal_event", "proposal_id", "agent_action_proposal"),
    Index("agent_action_proposal_event_proposal_idx", "proposal_id", "created_at"),
)

budget = _table(
    "agent_budget",
    _id(pk=True),
    Column("scope_kind", Ident, nullable=False),  # actor | tenant | global
    Column("scope_ref", Ident, nullable=False),  # the actor or tenant; '' for global
    Column("period", Ident, nullable=False),  # day | week | month (UTC; weeks start Monday)
    Column("limit_usd", Money, nullable=True),
    Column("limit_tokens", BigInteger(), nullable=True),
    Column("warn_at", Money, nullable=False, server_default=text("0.8")),
    Column("note", LongText, nullable=True),
    _id("created_by"),
    Column("created_at", Millis, nullable=False),
    Column("updated_at", Millis, nullable=False),
    Index("agent_budget_scope_period_uq", "scope_kind", "scope_ref", "period", unique=True),
)


def _fold_measures() -> list[Column[Any]]:
    """The sums a fold row holds (``agent_usage_daily`` and its per-model rollup)."""
    return [
        Column("turns", BigInteger(), nullable=False),
        Column("input_tokens", BigInteger(), nullable=False),
        Column("output_tokens", BigInteger(), nullable=False),
        Column("cache_read_tokens", BigInteger(), nullable=False),
        Column("cache_write_tokens", BigInteger(), nullable=False),
        Column("cost_usd", Money, nullable=True),  # NULL when every row was unpriced
        Column("estimated_usd", Money, nullable=False, server_default=text("0")),
        Column("provider_usd", Money, nullable=False, server_default=text("0")),
        Column("unpriced_turns", BigInteger(), nullable=False),
        Column("folded_at", Millis, nullable=False),
    ]


usage_daily = _table(
    "agent_usage_daily",
    Column("day", Integer(), primary_key=True, autoincrement=False),  # days since 1970-01-01
    Column("model_id", Ident, primary_key=True),
    Column("actor_ref", Ident, primary_key=True),
    Column("tenant_key", Ident, primary_key=True),  # the tenant, or '' for none
    *_fold_measures(),
    Index("agent_usage_daily_actor_day_idx", "actor_ref", "day"),
    Index("agent_usage_daily_tenant_day_idx", "tenant_key", "day"),
)

# The ledger folded by UTC day and model alone (the optional ``rollup`` branch, revision m001):
# each day's rows of ``agent_usage_daily`` summed per model, written in the same transaction
# when the table exists. Reports that need no actor or tenant read it: ~12 rows a day instead
# of ~1,400 (``fold.py``).
usage_model_daily = _table(
    "agent_usage_model_daily",
    Column("day", Integer(), primary_key=True, autoincrement=False),  # days since 1970-01-01
    Column("model_id", Ident, primary_key=True),
    *_fold_measures(),
    meta=rollup_metadata,
)

usage_fold = _table(
    "agent_usage_fold",
    Column("day", Integer(), primary_key=True, autoincrement=False),
    Column("rows", BigInteger(), nullable=False),
    Column("folded_at", Millis, nullable=False),
    _int("dirty", 0),
)

tenant_key = _table(
    "agent_tenant_key",
    _id(pk=True),  # the key id, named in every value it sealed
    _id("tenant_key"),  # the tenant
    Column("wrapped_key", Text(), nullable=False),  # the data key sealed by the KEK, base64
    Column("kek_fingerprint", Ident, nullable=False),  # which KEK wrapped it
    Column("created_at", Millis, nullable=False),
    Column("retired_at", Millis, nullable=True),
    Index("agent_tenant_key_tenant_idx", "tenant_key", "created_at"),
)

AGENT_TABLES: dict[str, str] = {
    "thread": thread.name,
    "message": message.name,
    "tool_call": tool_call.name,
    "token_usage": token_usage.name,
    "model_pricing": model_pricing.name,
    "run": run.name,
    "queued_message": queued_message.name,
    "confirm_token": confirm_token.name,
    "genui_call": genui_call.name,
    "stream_frame": stream_frame.name,
    "channel_state": channel_state.name,
    "action_proposal": action_proposal.name,
    "action_proposal_event": action_proposal_event.name,
    "budget": budget.name,
    "usage_daily": usage_daily.name,
    "usage_fold": usage_fold.name,
    "tenant_key": tenant_key.name,
}

# What each forward-only upgrade added to the 0001 shape: tables, (table, column) and
# (table, index). Online, every revision simply runs ``ensure_agent_tables``; offline (``db
# upgrade --sql``) revision 0001 emits the shape without these and each later revision adds its
# own. A revision's new table brings its own indexes.
UPGRADE_TABLES: dict[str, list[str]] = {
    "0004": ["agent_budget"],
    "0005": ["agent_usage_daily", "agent_usage_fold"],
    "0006": ["agent_tenant_key"],
    "0009": ["agent_action_proposal_event"],
}
UPGRADE_COLUMNS: dict[str, list[tuple[str, str]]] = {
    "0002": [
        ("agent_action_proposal", "discovery_state"),
        ("agent_action_proposal", "discovery_at"),
    ],
    "0003": [
        ("agent_message", "outcome"),
        ("agent_action_proposal", "outcome_delivered_at"),
        ("agent_action_proposal", "outcome_message_id"),
        ("agent_queued_message", "ui_capabilities"),
    ],
    "0007": [("agent_stream_frame", "tenant_ref")],
    "0008": [("agent_action_proposal", "tenant_key")],
}
UPGRADE_INDEXES: dict[str, list[tuple[str, str]]] = {
    "0002": [("agent_action_proposal", "agent_action_proposal_discovery_idx")],
    "0003": [],
    "0004": [("agent_token_usage", "agent_token_usage_tenant_created_idx")],
    "0008": [("agent_action_proposal", "agent_action_proposal_tenant_idempotency_uq")],
    "0010": [("agent_action_proposal", "agent_action_proposal_execution_idx")],
}


@dataclass(frozen=True)
class RetiredIndex:
    """An index an earlier revision created and a later one replaced: provisioning drops it (by
    name, only once ``replaced_by`` exists, after filling ``backfill``'s column) and ``db
    check`` reports it as drift (``retired_index``) while it stands."""

    revision: str  # the revision that retired it
    table: str
    name: str
    columns: tuple[str, ...]
    unique: bool
    replaced_by: str
    # (column, source): rows whose column is still '' take the source's value (not NULL, not '')
    backfill: tuple[str, str] | None = None


# Only these, by name: provisioning never drops an index it does not list here.
RETIRED_INDEXES: tuple[RetiredIndex, ...] = (
    RetiredIndex(
        "0008",
        "agent_action_proposal",
        "agent_action_proposal_idempotency_uq",
        ("idempotency_key",),
        unique=True,
        replaced_by="agent_action_proposal_tenant_idempotency_uq",
        backfill=("tenant_key", "tenant_ref"),
    ),
)
