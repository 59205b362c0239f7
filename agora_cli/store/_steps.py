"""A thread's steps: the tool calls a turn makes and the runs that group them (record,
complete, start, end)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy import case, insert, select, update

from agora_cli.store._clock import Clock
from agora_cli.store._errors import InvalidInput, NotFound
from agora_cli.store._ids import new_id
from agora_cli.store._schema import (
    run,
    tool_call,
)
from agora_cli.store._sealing import (
    seal_columns,
    sealer_for,
)
from agora_cli.store._sqlexpr import exact_eq
from agora_cli.store._tenant_guard import check_thread_tenant
from agora_cli.store._thread_model import (
    RUN_TERMINAL_STATUSES,
    Run,
    RunEnd,
    ToolCall,
)
from agora_cli.store._values import (
    check_identity,
    check_text,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection
from agora_cli.store._threads import (
    _clock,
    _dump,
    _ident,
    _run,
    _tool_call,
    _tool_call_tenant,
    _tool_calls,
)

__all__ = [
    "complete_tool_call",
    "end_run",
    "get_run",
    "get_tool_call",
    "record_tool_call",
    "set_tool_call_status",
    "start_run",
]


# --- tool calls ----------------------------------------------------------------------------


def record_tool_call(
    conn: Connection,
    *,
    message_id: str,
    tool_call_id: str,
    tool_name: str,
    tool_type: str = "read",
    input: Any = None,
    status: str = "auto_executed",
    run_id: str | None = None,
    clock: Clock | None = None,
) -> ToolCall:
    """Record a tool call the model emitted (its id is the model's) on a message.

    The runtime's words: a ``read`` tool is recorded ``auto_executed`` (about to run), an
    ``action`` tool ``pending_approval`` (waiting for a person).
    """
    values: dict[str, Any] = {
        "id": _ident(tool_call_id, "tool call id"),
        "message_id": _ident(message_id, "message_id"),
        "tool_name": _ident(tool_name, "tool_name"),
        "tool_type": _ident(tool_type, "tool_type"),
        "input": _dump(input),
        "output": None,
        "status": _ident(status, "status"),
        "executed_by_ref": None,
        "execution_ms": None,
        "error": None,
        "run_id": _ident(run_id, "run_id", optional=True),
        "created_at": _clock(clock).now_ms(),
        "executed_at": None,
    }
    sealer = sealer_for(conn, _tool_call_tenant(conn, values["message_id"]))
    conn.execute(
        insert(tool_call).values(seal_columns(sealer, tool_call.name, values["id"], values))
    )
    return _tool_call(values, "plain" if sealer is None else "opened")


def get_tool_call(conn: Connection, tool_call_id: str) -> ToolCall:
    """Return a tool call; ``NotFound`` if there is none."""
    check_identity("tool_call_id", tool_call_id)
    q = select(tool_call).where(exact_eq(tool_call.c.id, tool_call_id))
    row = conn.execute(q).mappings().first()
    if row is None:
        raise NotFound(f"no tool call {tool_call_id!r}")
    return _tool_calls(conn, [row])[0]


def complete_tool_call(
    conn: Connection,
    tool_call_id: str,
    *,
    status: str = "executed",
    output: Any = None,
    error: str | None = None,
    executed_by_ref: str | None = None,
    clock: Clock | None = None,
) -> ToolCall:
    """Record a tool call's result (``executed`` or ``failed``, the runtime's words); the first
    completion wins and a later one changes nothing. For a keyed tenant the output is sealed
    (``KeyUnavailable`` without the KEK: never written in plaintext)."""
    check_identity("tool_call_id", tool_call_id)
    now = _clock(clock).now_ms()
    text = _dump(output)
    if text is not None:
        owner = select(tool_call.c.message_id).where(exact_eq(tool_call.c.id, tool_call_id))
        message_id = conn.execute(owner).scalar()
        if message_id is not None:
            sealer = sealer_for(conn, _tool_call_tenant(conn, message_id))
            text = seal_columns(sealer, tool_call.name, tool_call_id, {"output": text})["output"]
    stmt = (
        update(tool_call)
        .where(exact_eq(tool_call.c.id, tool_call_id), tool_call.c.executed_at.is_(None))
        .values(
            status=_ident(status, "status"),
            output=text,
            error=error,
            executed_by_ref=_ident(executed_by_ref, "executed_by_ref", optional=True),
            executed_at=now,
            execution_ms=case(
                (tool_call.c.created_at < now, now - tool_call.c.created_at), else_=0
            ),
        )
    )
    conn.execute(stmt)
    return get_tool_call(conn, tool_call_id)


def set_tool_call_status(
    conn: Connection, tool_call_id: str, *, status: str, error: str | None = None
) -> ToolCall:
    """Record a new status of a tool call that has not run (``rejected``, ``expired``…).

    A call already completed keeps its outcome: this changes only calls without ``executed_at``.
    """
    stmt = (
        update(tool_call)
        .where(
            exact_eq(tool_call.c.id, check_identity("tool_call_id", tool_call_id)),
            tool_call.c.executed_at.is_(None),
        )
        .values(
            status=_ident(status, "status"),
            error=None if error is None else check_text("error", error),
        )
    )
    conn.execute(stmt)
    return get_tool_call(conn, tool_call_id)


# --- runs ----------------------------------------------------------------------------------


def start_run(
    conn: Connection,
    *,
    thread_id: str,
    actor_ref: str,
    tenant_ref: str | None = None,
    agent_name: str | None = None,
    run_id: str | None = None,
    durable: bool = False,
    clock: Clock | None = None,
) -> Run:
    """Start a run (status ``running``) on a thread and return it."""
    now = _clock(clock).now_ms()
    values: dict[str, Any] = {
        "id": _ident(run_id or new_id(now), "run id"),
        "thread_id": _ident(thread_id, "thread_id"),
        "agent_name": _ident(agent_name, "agent_name", optional=True),
        "actor_ref": _ident(actor_ref, "actor_ref"),
        "tenant_ref": _ident(tenant_ref, "tenant_ref", optional=True),
        "status": "running",
        "started_at": now,
        "finished_at": None,
        "step_count": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "cost_usd": None,
        "error": None,
        "durable": 1 if durable else 0,
    }
    check_thread_tenant(conn, thread_id, tenant_ref)  # never on another tenant's thread
    conn.execute(insert(run).values(values))
    return _run(values)


def get_run(conn: Connection, run_id: str) -> Run:
    """Return a run; ``NotFound`` if there is none."""
    check_identity("run_id", run_id)
    row = conn.execute(select(run).where(exact_eq(run.c.id, run_id))).mappings().first()
    if row is None:
        raise NotFound(f"no run {run_id!r}")
    return _run(row)


def end_run(
    conn: Connection,
    run_id: str,
    *,
    status: str,
    error: str | None = None,
    step_count: int | None = None,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    cost_usd: float | None = None,
    clock: Clock | None = None,
) -> RunEnd:
    """End a run with a terminal status; the first terminal status wins (fenced update)."""
    if status not in RUN_TERMINAL_STATUSES:
        raise InvalidInput(
            f"run status {status!r} is not terminal: use one of {', '.join(RUN_TERMINAL_STATUSES)}"
        )
    changes: dict[str, Any] = {
        "status": status,
        "finished_at": _clock(clock).now_ms(),
        "error": error,
    }
    extra: Mapping[str, Any] = {
        "step_count": step_count,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cost_usd": cost_usd,
    }
    changes.update({k: v for k, v in extra.items() if v is not None})
    stmt = (
        update(run)
        .where(exact_eq(run.c.id, run_id), run.c.status.not_in(RUN_TERMINAL_STATUSES))
        .values(changes)
    )
    ended = conn.execute(stmt).rowcount == 1
    return RunEnd(ended=ended, run=get_run(conn, run_id))
