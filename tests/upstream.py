"""Rows written exactly as the upstream runtime (adonis-agent's Lucid stores) writes them.

Read from upstream's own store code (``packages/adonis/src/stores/lucid.ts``,
``lucid-pricing.ts``, the ``create_agent_tables`` and ``create_agent_run_tracking`` migration
stubs and ``agent-loop.ts``), not from agora's. What that runtime does differently from agora:

- ``agent_token_usage`` has no ``tenant_ref`` and no ``cost_source``: the tenant is the
  thread's; ``cost_usd`` is NULL unless the provider reported a cost (then it is that cost, with
  no source). Upstream prices NULL-cost rows when it reads them, with the current price.
- ``agent_message`` has no ``seq`` (0 on an agora-provisioned table); order is ``created_at``.
  ``usage`` is camelCase JSON (``inputTokens``, ``outputTokens``, ``cacheReadTokens``,
  ``cacheWriteTokens``, ``reasoningTokens``, ``costUsd``); ``tool_calls`` on the assistant
  message is ``[{"id", "name", "input"}]``; ``tool_results`` is ``[{"id", "name", "output",
  "error"?}]``, on a message whose content is ``''``.
- ``agent_tool_call.status`` is one of ``auto_executed``, ``pending_approval``, ``executed``,
  ``rejected``, ``failed``; ``tool_type`` is ``read`` or ``action``; ``execution_ms`` is never
  written by the loop, ``executed_at`` is set on ``executed``/``failed`` only. An approval is a
  tool call left ``pending_approval``; the runtime never writes ``agent_action_proposal``.
- ``agent_run``: ``status`` ``running`` then ``completed``/``failed``/``cancelled``; its
  ``cost_usd`` is the loop's own total (provider costs plus the estimates it made at write time).
- Pricing rows: no ``tiers``, no ``source``.
- Its own schema (``create_upstream_schema``): INTEGER token columns, ``DOUBLE`` money,
  ``TEXT`` JSON, foreign keys named ``<table>_<column>_foreign``, and on MySQL/MariaDB the
  database's default collation (``utf8mb4_general_ci``).

``write_upstream`` inserts only the columns upstream writes, so it works on an agora-provisioned
database and on an upstream-made one alike.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text

DAY_MS = 86_400_000

# The model ids upstream records are the provider's (``turn.modelId``).
MODEL_PRICED = "gpt-4o-mini"  # priced by an upstream pricing row
MODEL_UNPRICED = "mystery-model-1"  # no price anywhere
PRICE_IN, PRICE_OUT = 0.15, 0.60  # USD per 1M tokens, upstream's LucidPricingStore row


@dataclass
class Turn:
    thread_id: str
    actor: str
    tenant: str | None  # the thread's tenant (the ledger row has none)
    model: str
    input_tokens: int
    output_tokens: int
    cache_read: int | None
    cost_usd: float | None  # the provider's reported cost, else NULL
    at: int
    run_id: str | None


@dataclass
class Upstream:
    """What ``write_upstream`` wrote, with the figures upstream's own governance queries give."""

    now: int
    threads: dict[str, str] = field(default_factory=dict)  # name -> id
    runs: dict[str, str] = field(default_factory=dict)
    tool_calls: dict[str, str] = field(default_factory=dict)
    messages: dict[str, list[str]] = field(default_factory=dict)  # thread name -> ids in order
    turns: list[Turn] = field(default_factory=list)

    def estimate(self, t: Turn) -> float | None:
        """Upstream's ``rowCost``: the provider's cost wins, else the current price, else None."""
        if t.cost_usd is not None:
            return t.cost_usd
        if t.model != MODEL_PRICED:
            return None
        return (t.input_tokens * PRICE_IN + t.output_tokens * PRICE_OUT) / 1_000_000

    def tenant_usd(self, tenant: str) -> float:
        return sum(self.estimate(t) or 0.0 for t in self.turns if t.tenant == tenant)

    def tenant_tokens(self, tenant: str) -> int:
        return sum(t.input_tokens + t.output_tokens for t in self.turns if t.tenant == tenant)

    def run_usd(self, run: str) -> float:
        return sum(self.estimate(t) or 0.0 for t in self.turns if t.run_id == self.runs[run])


def _id() -> str:
    return str(uuid.uuid4())  # upstream: crypto.randomUUID()


def _insert(conn: Any, table: str, row: dict[str, Any]) -> None:
    q = conn.dialect.identifier_preparer.quote
    cols = ", ".join(q(c) for c in row)
    marks = ", ".join(f":{c}" for c in row)
    conn.execute(text(f"INSERT INTO {table} ({cols}) VALUES ({marks})"), row)


def write_upstream(engine: Any, *, now: int) -> Upstream:
    """Write one tenant's finished run, another's run waiting for an approval, and an untenanted
    thread — all within the UTC day of ``now`` (the rows start 10 minutes before ``now``)."""
    up = Upstream(now=now)
    t0 = now - 600_000
    with engine.begin() as conn:
        # Pricing, as LucidPricingStore.upsertModelPrice writes it.
        _insert(
            conn,
            "agent_model_pricing",
            {
                "id": _id(),
                "model_id": MODEL_PRICED,
                "input_price_per_1m": PRICE_IN,
                "output_price_per_1m": PRICE_OUT,
                "cache_write_price_per_1m": None,
                "cache_read_price_per_1m": None,
                "effective_from": t0 - DAY_MS,
                "is_current": 1,
            },
        )
        for name, actor, tenant in (
            ("acme", "alice", "acme"),
            ("globex", "bob", "globex"),
            ("none", "carol", None),
        ):
            tid = _id()
            up.threads[name] = tid
            up.messages[name] = []
            _insert(
                conn,
                "agent_thread",
                {
                    "id": tid,
                    "actor_ref": actor,
                    "tenant_ref": tenant,
                    "title": f"{name} chat",
                    "persona": "default",
                    "transient": 0,
                    "pinned_at": None,
                    "summary": None,
                    "summary_message_count": 0,
                    "active_stream_id": None,
                    "created_at": t0,
                    "updated_at": t0,
                    "deleted_at": None,
                },
            )

        def run(name: str, thread: str, actor: str, tenant: str | None, at: int) -> str:
            rid = _id()
            up.runs[name] = rid
            _insert(
                conn,
                "agent_run",
                {
                    "id": rid,
                    "thread_id": up.threads[thread],
                    "agent_name": "support",
                    "actor_ref": actor,
                    "tenant_ref": tenant,
                    "status": "running",
                    "started_at": at,
                    "finished_at": None,
                    "step_count": 0,
                    "input_tokens": 0,
                    "output_tokens": 0,
                    "cost_usd": None,
                    "error": None,
                    "durable": 0,
                },
            )
            return rid

        def message(
            thread: str, role: str, content: str, at: int, run_id: str | None, **json_cols: Any
        ) -> str:
            mid = _id()
            up.messages[thread].append(mid)
            row: dict[str, Any] = {
                "id": mid,
                "thread_id": up.threads[thread],
                "role": role,
                "content": content,
                "tool_calls": None,
                "tool_results": None,
                "attachments": None,
                "follow_ups": None,
                "usage": None,
                "persona": None,
                "run_id": run_id,
                "created_at": at,
            }
            for key, value in json_cols.items():
                row[key] = json.dumps(value)
            _insert(conn, "agent_message", row)
            conn.execute(
                text("UPDATE agent_thread SET updated_at = :at WHERE id = :id"),
                {"at": at, "id": up.threads[thread]},
            )
            return mid

        def tool_call(
            name: str, message_id: str, tool: str, kind: str, status: str, at: int, run_id: str
        ) -> str:
            cid = f"call_{name}_{uuid.uuid4().hex[:8]}"  # the model-supplied toolCallId
            up.tool_calls[name] = cid
            _insert(
                conn,
                "agent_tool_call",
                {
                    "id": cid,
                    "message_id": message_id,
                    "tool_name": tool,
                    "tool_type": kind,
                    "input": json.dumps({"order_id": 7}),
                    "output": None,
                    "status": status,
                    "executed_by_ref": None,
                    "execution_ms": None,
                    "error": None,
                    "run_id": run_id,
                    "created_at": at,
                    "executed_at": None,
                },
            )
            return cid

        def settle_call(cid: str, status: str, at: int, **patch: Any) -> None:
            values: dict[str, Any] = {"status": status, **patch}
            if status in ("executed", "failed"):
                values["executed_at"] = at
            q = conn.dialect.identifier_preparer.quote
            sets = ", ".join(f"{q(k)} = :{k}" for k in values)
            conn.execute(
                text(f"UPDATE agent_tool_call SET {sets} WHERE id = :cid"), {**values, "cid": cid}
            )

        def usage(
            thread: str,
            actor: str,
            tenant: str | None,
            model: str,
            i: int,
            o: int,
            at: int,
            run_id: str | None,
            *,
            cache_read: int | None = None,
            cost: float | None = None,
            message_id: str | None = None,
        ) -> dict[str, Any]:
            t = Turn(up.threads[thread], actor, tenant, model, i, o, cache_read, cost, at, run_id)
            up.turns.append(t)
            _insert(
                conn,
                "agent_token_usage",
                {
                    "id": _id(),
                    "thread_id": up.threads[thread],
                    "actor_ref": actor,
                    "message_id": message_id,
                    "model_id": model,
                    "purpose": "chat",
                    "input_tokens": i,
                    "output_tokens": o,
                    "cache_write_tokens": None,
                    "cache_read_tokens": cache_read,
                    "cost_usd": cost,
                    "run_id": run_id,
                    "created_at": at,
                },
            )
            camel: dict[str, Any] = {"inputTokens": i, "outputTokens": o}
            if cache_read is not None:
                camel["cacheReadTokens"] = cache_read
            camel["costUsd"] = up.estimate(t)
            return camel

        # acme: a finished run — a read tool executed, an action approved then executed, a
        # provider-reported cost on one turn, the price-on-read rows on the others.
        r1 = run("acme", "acme", "alice", "acme", t0)
        message("acme", "user", "Where is order 7?", t0 + 1_000, r1)
        u1 = usage("acme", "alice", "acme", MODEL_PRICED, 1_200_000, 150_000, t0 + 2_000, r1)
        a1 = message(
            "acme",
            "assistant",
            "Let me look that up.",
            t0 + 2_000,
            r1,
            usage=u1,
            tool_calls=[
                {"id": "lookup", "name": "lookup_order", "input": {"order_id": 7}},
            ],
        )
        c1 = tool_call("lookup", a1, "lookup_order", "read", "auto_executed", t0 + 2_010, r1)
        settle_call(c1, "executed", t0 + 2_030, output=json.dumps({"status": "shipped"}))
        message(
            "acme",
            "user",
            "",
            t0 + 2_040,
            r1,
            tool_results=[{"id": c1, "name": "lookup_order", "output": {"status": "shipped"}}],
        )
        u2 = usage(
            "acme", "alice", "acme", MODEL_PRICED, 900_000, 80_000, t0 + 3_000, r1,
            cache_read=400_000, cost=0.0125,
        )  # fmt: skip
        a2 = message(
            "acme",
            "assistant",
            "I can refund it.",
            t0 + 3_000,
            r1,
            usage=u2,
            tool_calls=[{"id": "refund", "name": "refund_order", "input": {"order_id": 7}}],
        )
        c2 = tool_call("refund", a2, "refund_order", "action", "pending_approval", t0 + 3_010, r1)
        settle_call(
            c2, "executed", t0 + 3_034, output=json.dumps({"ok": True}), executed_by_ref="alice"
        )
        c3 = tool_call("flaky", a2, "lookup_order", "read", "auto_executed", t0 + 3_050, r1)
        settle_call(c3, "failed", t0 + 3_068, error="timeout talking to orders")
        u3 = usage("acme", "alice", "acme", MODEL_UNPRICED, 10_000, 2_000, t0 + 4_000, r1)
        message("acme", "assistant", "Refunded.", t0 + 4_000, r1, usage=u3)
        # The loop's own rollup on the run: provider costs plus the estimates it made then.
        run_cost = sum(c for c in (u1["costUsd"], u2["costUsd"]) if c is not None)
        conn.execute(
            text(
                "UPDATE agent_run SET status = 'completed', finished_at = :f, step_count = 3,"
                " input_tokens = :i, output_tokens = :o, cost_usd = :c WHERE id = :id"
            ),
            {"f": t0 + 4_100, "i": 2_110_000, "o": 232_000, "c": run_cost, "id": r1},
        )

        # globex: a run that waits on an approval (a rejected one before it).
        r2 = run("globex", "globex", "bob", "globex", t0 + 5_000)
        message("globex", "user", "Cancel my invoice", t0 + 5_100, r2)
        u4 = usage("globex", "bob", "globex", MODEL_PRICED, 300_000, 40_000, t0 + 6_000, r2)
        a3 = message(
            "globex",
            "assistant",
            "I need approval to cancel it.",
            t0 + 6_000,
            r2,
            usage=u4,
            tool_calls=[{"id": "cancel", "name": "cancel_invoice", "input": {"order_id": 7}}],
        )
        c4 = tool_call(
            "rejected", a3, "update_invoice", "action", "pending_approval", t0 + 6_010, r2
        )
        settle_call(c4, "rejected", t0 + 6_020, error="not allowed")
        tool_call("pending", a3, "cancel_invoice", "action", "pending_approval", t0 + 6_030, r2)

        # untenanted: one turn, no run.
        usage("none", "carol", None, MODEL_PRICED, 100_000, 10_000, t0 + 7_000, None)
        message("none", "user", "hello", t0 + 7_000, None)
    return up


# --- upstream's own schema ----------------------------------------------------------------------

_TABLES: list[tuple[str, list[str], list[tuple[str, str, str]], list[tuple[str, str]]]] = [
    # (table, columns, foreign keys (column, parent, name), indexes (name, columns))
    (
        "agent_thread",
        [
            "id {s} NOT NULL PRIMARY KEY",
            "actor_ref {s} NOT NULL",
            "tenant_ref {s}",
            "title {t} NOT NULL",
            "persona {s} NOT NULL DEFAULT 'default'",
            "transient {i} NOT NULL DEFAULT 0",
            "pinned_at {b}",
            "summary {t}",
            "summary_message_count {i} NOT NULL DEFAULT 0",
            "active_stream_id {s}",
            "created_at {b} NOT NULL",
            "updated_at {b} NOT NULL",
            "deleted_at {b}",
        ],
        [],
        [("agent_thread_actor_updated_idx", "actor_ref, updated_at")],
    ),
    (
        "agent_message",
        [
            "id {s} NOT NULL PRIMARY KEY",
            "thread_id {s} NOT NULL",
            "role {s} NOT NULL",
            "content {t} NOT NULL",
            "tool_calls {t}",
            "tool_results {t}",
            "attachments {t}",
            "follow_ups {t}",
            "usage {t}",
            "persona {s}",
            "created_at {b} NOT NULL",
            "run_id {s}",
        ],
        [("thread_id", "agent_thread", "agent_message_thread_id_foreign")],
        [
            ("agent_message_thread_created_idx", "thread_id, created_at"),
            ("agent_message_run_idx", "run_id"),
        ],
    ),
    (
        "agent_tool_call",
        [
            "id {s} NOT NULL PRIMARY KEY",
            "message_id {s} NOT NULL",
            "tool_name {s} NOT NULL",
            "tool_type {s} NOT NULL",
            "input {t}",
            "output {t}",
            "status {s} NOT NULL",
            "executed_by_ref {s}",
            "execution_ms {i}",
            "error {t}",
            "created_at {b} NOT NULL",
            "executed_at {b}",
            "run_id {s}",
        ],
        [("message_id", "agent_message", "agent_tool_call_message_id_foreign")],
        [
            ("agent_tool_call_run_idx", "run_id"),
            ("agent_tool_call_status_created_idx", "status, created_at"),
        ],
    ),
    (
        "agent_token_usage",
        [
            "id {s} NOT NULL PRIMARY KEY",
            "thread_id {s} NOT NULL",
            "actor_ref {s} NOT NULL",
            "message_id {s}",
            "model_id {s} NOT NULL",
            "purpose {s} NOT NULL",
            "input_tokens {i} NOT NULL",
            "output_tokens {i} NOT NULL",
            "cache_write_tokens {i}",
            "cache_read_tokens {i}",
            "cost_usd {d}",
            "created_at {b} NOT NULL",
            "run_id {s}",
        ],
        [("thread_id", "agent_thread", "agent_token_usage_thread_id_foreign")],
        [
            ("agent_token_usage_actor_created_idx", "actor_ref, created_at"),
            ("agent_token_usage_run_idx", "run_id"),
        ],
    ),
    (
        "agent_model_pricing",
        [
            "id {s} NOT NULL PRIMARY KEY",
            "model_id {s} NOT NULL",
            "input_price_per_1m {d} NOT NULL",
            "output_price_per_1m {d} NOT NULL",
            "cache_write_price_per_1m {d}",
            "cache_read_price_per_1m {d}",
            "effective_from {b} NOT NULL",
            "is_current {i} NOT NULL",
        ],
        [],
        [],
    ),
    (
        "agent_run",
        [
            "id {s} NOT NULL PRIMARY KEY",
            "thread_id {s} NOT NULL",
            "agent_name {s}",
            "actor_ref {s} NOT NULL",
            "tenant_ref {s}",
            "status {s} NOT NULL",
            "started_at {b} NOT NULL",
            "finished_at {b}",
            "step_count {i} NOT NULL DEFAULT 0",
            "input_tokens {i} NOT NULL DEFAULT 0",
            "output_tokens {i} NOT NULL DEFAULT 0",
            "cost_usd {d}",
            "error {t}",
            "durable {i} NOT NULL DEFAULT 0",
        ],
        [("thread_id", "agent_thread", "agent_run_thread_id_foreign")],
        [
            ("agent_run_started_idx", "started_at"),
            ("agent_run_actor_started_idx", "actor_ref, started_at"),
            ("agent_run_status_started_idx", "status, started_at"),
        ],
    ),
]

_TYPES = {
    # knex's column types per dialect: string, text, integer, bigInteger, double
    "mysql": {"s": "varchar(255)", "t": "text", "i": "int", "b": "bigint", "d": "double"},
    "postgresql": {
        "s": "varchar(255)",
        "t": "text",
        "i": "integer",
        "b": "bigint",
        "d": "double precision",
    },
    "sqlite": {"s": "varchar(255)", "t": "text", "i": "integer", "b": "bigint", "d": "float"},
}


def upstream_schema_statements(dialect: str) -> list[str]:
    """The DDL upstream's two migrations run (knex's output, one statement per step)."""
    types = _TYPES[dialect]
    quote = "`" if dialect == "mysql" else '"'
    out: list[str] = []
    for table, columns, fks, indexes in _TABLES:
        body = []
        for c in columns:
            name, rest = c.split(" ", 1)
            body.append(f"{quote}{name}{quote} {rest.format(**types)}")
        if dialect == "sqlite":  # knex on SQLite: foreign keys inline in CREATE TABLE
            body += [
                f"CONSTRAINT {name} FOREIGN KEY ({col}) REFERENCES {parent} (id) ON DELETE CASCADE"
                for col, parent, name in fks
            ]
        suffix = ""
        if dialect == "mysql":
            # The database's default collation: what MariaDB gives a knex migration.
            suffix = " DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci"
        out.append(f"CREATE TABLE {table} ({', '.join(body)}){suffix}")
        if dialect != "sqlite":
            out += [
                f"ALTER TABLE {table} ADD CONSTRAINT {name} FOREIGN KEY ({col})"
                f" REFERENCES {parent} (id) ON DELETE CASCADE"
                for col, parent, name in fks
            ]
        out += [f"CREATE INDEX {name} ON {table} ({cols})" for name, cols in indexes]
    return out


def create_upstream_schema(engine: Any) -> None:
    """Create the tables as upstream's ``create_agent_tables`` + ``create_agent_run_tracking``
    migrations do, on an empty database."""
    with engine.begin() as conn:
        for statement in upstream_schema_statements(engine.dialect.name):
            conn.execute(text(statement))
