"""The agent store's thread side: threads, messages, tool calls and runs.

Every function takes a ``Connection`` and runs inside the caller's transaction (``with
engine.begin() as conn``); the multi-statement operations (``append_message``, ``fork_thread``,
``truncate_from``, ``delete_thread``) are only correct as one transaction, which is the caller's.

Message order: ``seq`` is assigned on append as 1 + the thread's current maximum. The append locks
the thread row first (``SELECT … FOR UPDATE`` on PostgreSQL and MySQL; SQLite's ``BEGIN
IMMEDIATE`` already serialises writers), so two appenders on one thread never share a ``seq``.
The upstream runtime writes no ``seq`` (0), and both write to one thread, so a thread reads in
``created_at`` order, ties by ``seq``, then ``id`` (``agent_message_thread_created_idx``): an
unnumbered message lands between numbered ones by its time, not before all of them.

The runtime's vocabulary (``vocabulary.py``): tool-call statuses ``auto_executed``,
``pending_approval``, ``executed``, ``rejected``, ``failed``; tool types ``read``/``action``;
per-turn ``usage`` stored camelCase (``inputTokens`` …), read in either spelling; an assistant
message's ``tool_calls`` is ``[{"id", "name", "input"}]``.

JSON payload arguments (``tool_calls``, ``input``, ``props`` …) take JSON values and are stored
as text; the dataclasses hand back the stored text unchanged (another writer may have written it).
Deleting children explicitly (``truncate_from``, ``delete_thread``) keeps both correct on a SQLite
connection whose ``foreign_keys`` pragma is off.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import LargeBinary, cast, delete, func, insert, or_, select, update

from agora_cli.store._clock import Clock, SystemClock
from agora_cli.store._dialects import dialect_of
from agora_cli.store._errors import InvalidInput, KeyUnavailable, NotFound, SealBroken
from agora_cli.store._fold import mark_days_dirty
from agora_cli.store._ids import new_id
from agora_cli.store._schema import (
    action_proposal,
    action_proposal_event,
    confirm_token,
    genui_call,
    message,
    queued_message,
    run,
    stream_frame,
    thread,
    token_usage,
    tool_call,
)
from agora_cli.store._sealing import (
    SEALED_COLUMNS,
    is_sealed,
    open_columns,
    seal_columns,
    sealer_for,
    tenants_of_threads,
)
from agora_cli.store._sqlexpr import exact_eq, finite_cost, known_usd
from agora_cli.store._thread_model import (
    Message,
    Run,
    Thread,
    ThreadDeletion,
    ThreadSummary,
    ThreadTurn,
    ThreadUsageRow,
    ThreadUsageTotals,
    ToolCall,
    Transcript,
    TranscriptMessage,
    TruncateResult,
    TurnMessage,
)
from agora_cli.store._values import (
    check_identity,
    check_int,
    check_optional_identity,
    check_text,
    dump_json,
)
from agora_cli.store._vocabulary import usage_from_json, usage_to_json

if TYPE_CHECKING:
    from sqlalchemy import Table
    from sqlalchemy.engine import Connection
    from sqlalchemy.sql import ColumnElement, Delete

__all__ = [
    "append_message",
    "create_thread",
    "delete_thread",
    "find_thread",
    "fork_thread",
    "get_thread",
    "get_transcript",
    "list_messages",
    "list_run_messages",
    "list_threads",
    "load_thread_for_turn",
    "seal_message_values",
    "soft_delete_thread",
    "truncate_from",
    "update_thread",
    "usage_by_thread",
]


# --- helpers -------------------------------------------------------------------------------


def _clock(clock: Clock | None) -> Clock:
    return clock if clock is not None else SystemClock()


def _ident(value: str | None, what: str, *, optional: bool = False) -> str | None:
    if optional:
        return check_optional_identity(what, value)
    return check_identity(what, value)


def _dump(value: Any, what: str = "a JSON payload") -> str | None:
    """A JSON value as stored text, strict JSON only (``None`` stays NULL)."""
    return None if value is None else dump_json(what, value)


def _threads(conn: Connection, rows: Sequence[Mapping[Any, Any]]) -> list[Thread]:
    """Threads from their rows, title and summary opened (or a marker in place)."""
    opened = open_columns(conn, thread.name, rows, [r["tenant_ref"] for r in rows])
    return [_thread(values, state) for values, state in opened]


def _thread(row: Mapping[Any, Any], seal_state: str = "plain") -> Thread:
    return Thread(
        id=row["id"],
        actor_ref=row["actor_ref"],
        tenant_ref=row["tenant_ref"],
        title=row["title"],
        persona=row["persona"],
        model=row["model"],
        default_agent=row["default_agent"],
        transient=bool(row["transient"]),
        pinned_at=row["pinned_at"],
        summary=row["summary"],
        summary_message_count=int(row["summary_message_count"]),
        active_stream_id=row["active_stream_id"],
        created_at=int(row["created_at"]),
        updated_at=int(row["updated_at"]),
        deleted_at=row["deleted_at"],
        seal_state=seal_state,
    )


_MESSAGE_COLUMNS = tuple(
    name for name in Message.__dataclass_fields__ if name not in ("sealed", "seal_state")
)


def _message(row: Mapping[Any, Any], seal_state: str = "plain") -> Message:
    """A message from its row (sealed columns already opened by ``_open_messages``)."""
    values = {name: row[name] for name in _MESSAGE_COLUMNS}
    return Message(**values, sealed=seal_state != "plain", seal_state=seal_state)


def _open_messages(
    conn: Connection, tenant: str | bool | None, rows: Sequence[Mapping[Any, Any]]
) -> list[tuple[dict[str, Any], str]]:
    """The rows with their sealed columns opened (or a marker in place) and their seal state.

    ``tenant`` is the thread's, or ``False`` when the caller has not read the threads: they
    are then read (one query) only if a row holds a sealed value.
    """
    columns = [c for c in SEALED_COLUMNS[message.name] if not rows or c in rows[0]]
    if not any(is_sealed(r[c]) for r in rows for c in columns):
        return [(dict(r), "plain") for r in rows]
    if tenant is False:
        owners = tenants_of_threads(conn, [r["thread_id"] for r in rows])
        tenants = [owners.get(r["thread_id"]) for r in rows]
    else:
        tenants = [tenant if isinstance(tenant, str) else None] * len(rows)
    return open_columns(conn, message.name, rows, tenants)


def _tool_call_tenant(conn: Connection, message_id: str) -> str | None:
    """The tenant a tool call's input and output are sealed for: its message's thread's."""
    q = (
        select(thread.c.tenant_ref)
        .join(message, message.c.thread_id == thread.c.id)
        .where(message.c.id == message_id)
    )
    return conn.execute(q).scalar()


def _tool_calls(
    conn: Connection, rows: Sequence[Mapping[Any, Any]], tenant: str | bool | None = False
) -> list[ToolCall]:
    """Tool calls from their rows, input and output opened (or a marker in place).

    ``tenant`` is their thread's, or ``False``: then read (one query) only if one is sealed.
    """
    if not any(is_sealed(r[c]) for r in rows for c in SEALED_COLUMNS[tool_call.name]):
        return [_tool_call(r) for r in rows]
    if tenant is False:
        q = (
            select(message.c.id, thread.c.tenant_ref)
            .join(thread, message.c.thread_id == thread.c.id)
            .where(message.c.id.in_(sorted({r["message_id"] for r in rows})))
        )
        owners: dict[str, str | None] = {i: t for i, t in conn.execute(q).all()}
        tenants = [owners.get(r["message_id"]) for r in rows]
    else:
        tenants = [tenant if isinstance(tenant, str) else None] * len(rows)
    return [
        _tool_call(values, state)
        for values, state in open_columns(conn, tool_call.name, rows, tenants)
    ]


_TOOL_CALL_COLUMNS = tuple(name for name in ToolCall.__dataclass_fields__ if name != "seal_state")


def _tool_call(row: Mapping[Any, Any], seal_state: str = "plain") -> ToolCall:
    return ToolCall(**{name: row[name] for name in _TOOL_CALL_COLUMNS}, seal_state=seal_state)


def _run(row: Mapping[Any, Any]) -> Run:
    """An ``agent_run`` row as a ``Run`` (here and in ``runs``: one mapper for the table)."""
    values = {name: row[name] for name in Run.__dataclass_fields__}
    values["durable"] = bool(values["durable"])
    # Sums and counts: NULL for a run with no rows yet, a Decimal from MySQL's SUM.
    values["input_tokens"] = int(values["input_tokens"] or 0)
    values["output_tokens"] = int(values["output_tokens"] or 0)
    values["step_count"] = int(values["step_count"] or 0)
    return Run(**values)


def _usage_row(row: Mapping[Any, Any]) -> ThreadUsageRow:
    """An ``agent_token_usage`` row as a ``ThreadUsageRow`` (here and in ``runs``)."""
    values = {name: row[name] for name in ThreadUsageRow.__dataclass_fields__}
    values["input_tokens"] = int(values["input_tokens"])
    values["output_tokens"] = int(values["output_tokens"])
    values["cost_usd"] = known_usd(values["cost_usd"])  # another writer's NaN: unknown
    return ThreadUsageRow(**values)


def _message_order() -> tuple[ColumnElement[Any], ...]:
    # Time first, so the runtime's unnumbered rows (seq 0) interleave with agora's numbered ones;
    # seq splits a millisecond, id keeps it total.
    return (message.c.created_at, message.c.seq, message.c.id)


def _lock_thread(conn: Connection, thread_id: str) -> Thread:
    """Read the thread row and hold its write lock until the transaction ends."""
    check_identity("thread_id", thread_id)
    q = select(thread).where(exact_eq(thread.c.id, thread_id)).with_for_update()
    row = conn.execute(q).mappings().first()
    if row is None:
        raise NotFound(f"no thread {thread_id!r}")
    return _threads(conn, [row])[0]


def _delete_tool_calls_of_messages(conn: Connection, where: ColumnElement[bool]) -> int:
    """Delete the tool calls of the messages matching ``where`` (one statement)."""
    stmt: Delete
    if not dialect_of(conn).deletes_through_joins:
        doomed = select(message.c.id).where(where)
        stmt = delete(tool_call).where(tool_call.c.message_id.in_(doomed))
    else:
        # A multi-table DELETE: MariaDB before 11.1 runs ``IN (subquery)`` in a DELETE as a
        # dependent subquery over the whole child table.
        stmt = delete(tool_call).where(tool_call.c.message_id == message.c.id, where)
    return int(conn.execute(stmt).rowcount)


# --- threads -------------------------------------------------------------------------------


def create_thread(
    conn: Connection,
    *,
    actor_ref: str,
    title: str = "",
    tenant_ref: str | None = None,
    persona: str = "default",
    model: str | None = None,
    default_agent: str | None = None,
    transient: bool = False,
    thread_id: str | None = None,
    clock: Clock | None = None,
) -> Thread:
    """Create a thread and return it."""
    now = _clock(clock).now_ms()
    values: dict[str, Any] = {
        "id": _ident(thread_id or new_id(now), "thread id"),
        "actor_ref": _ident(actor_ref, "actor_ref"),
        "tenant_ref": _ident(tenant_ref, "tenant_ref", optional=True),
        "title": check_text("title", title),
        "persona": _ident(persona, "persona"),
        "model": _ident(model, "model", optional=True),
        "default_agent": _ident(default_agent, "default_agent", optional=True),
        "transient": 1 if transient else 0,
        "pinned_at": None,
        "summary": None,
        "summary_message_count": 0,
        "active_stream_id": None,
        "created_at": now,
        "updated_at": now,
        "deleted_at": None,
    }
    sealer = sealer_for(conn, values["tenant_ref"])
    conn.execute(insert(thread).values(seal_columns(sealer, thread.name, values["id"], values)))
    return _thread(values)


def find_thread(conn: Connection, thread_id: str) -> Thread | None:
    """Return the thread, or ``None``."""
    check_identity("thread_id", thread_id)
    row = conn.execute(select(thread).where(exact_eq(thread.c.id, thread_id))).mappings().first()
    return None if row is None else _threads(conn, [row])[0]


def get_thread(conn: Connection, thread_id: str) -> Thread:
    """Return the thread; ``NotFound`` if there is none."""
    found = find_thread(conn, thread_id)
    if found is None:
        raise NotFound(f"no thread {thread_id!r}")
    return found


def list_threads(
    conn: Connection,
    *,
    actor_ref: str | None = None,
    tenant_ref: str | None = None,
    limit: int = 50,
    include_deleted: bool = False,
    include_transient: bool = False,
) -> list[ThreadSummary]:
    """List threads, newest activity first, with their message counts and ledger totals.

    Threads the runtime soft-deleted (``deleted_at`` set) or marked ``transient`` are left out
    unless asked for; the summaries carry both marks. The ledger totals of the page are one
    grouped query over ``agent_token_usage_thread_idx`` (``usage_by_thread``), not one per thread.
    """
    check_int("limit", limit, low=1, high=1000)
    counts = (
        select(func.count())
        .where(message.c.thread_id == thread.c.id)
        .correlate(thread)
        .scalar_subquery()
    )
    q = select(
        thread.c.id,
        thread.c.actor_ref,
        thread.c.tenant_ref,
        thread.c.title,
        counts.label("messages"),
        thread.c.updated_at,
        thread.c.deleted_at,
        thread.c.transient,
    )
    if actor_ref is not None:
        q = q.where(exact_eq(thread.c.actor_ref, check_identity("actor_ref", actor_ref)))
    if tenant_ref is not None:
        q = q.where(exact_eq(thread.c.tenant_ref, check_identity("tenant_ref", tenant_ref)))
    if not include_deleted:
        q = q.where(thread.c.deleted_at.is_(None))
    if not include_transient:
        # A foreign writer may have left NULL in the 0/1 column: that is not transient.
        q = q.where(or_(thread.c.transient.is_(None), thread.c.transient == 0))
    q = q.order_by(thread.c.updated_at.desc(), thread.c.id.desc()).limit(limit)
    found = conn.execute(q).mappings().all()
    totals = usage_by_thread(conn, [r["id"] for r in found])
    rows = [r for r, _ in open_columns(conn, thread.name, found, [r["tenant_ref"] for r in found])]
    return [
        ThreadSummary(
            id=r["id"],
            actor_ref=r["actor_ref"],
            tenant_ref=r["tenant_ref"],
            title=r["title"],
            messages=int(r["messages"]),
            updated_at=int(r["updated_at"]),
            deleted_at=r["deleted_at"],
            transient=bool(r["transient"]),
            usage=totals.get(r["id"], ThreadUsageTotals()),
        )
        for r in rows
    ]


def usage_by_thread(conn: Connection, thread_ids: Sequence[str]) -> dict[str, ThreadUsageTotals]:
    """The ledger totals of each thread in ``thread_ids`` (at most 1,000): one ``GROUP BY``.

    Threads without ledger rows are absent from the result.
    """
    ids = list(dict.fromkeys(thread_ids))
    if len(ids) > 1000:
        raise InvalidInput("usage_by_thread takes at most 1,000 thread ids", param="thread_ids")
    if not ids:
        return {}
    key = token_usage.c.thread_id
    q = select(key, *_usage_sums()).where(key.in_(ids)).group_by(key)
    # MySQL's PAD SPACE: a ledger row may name its thread with trailing spaces (its foreign key
    # still reaches the thread, and IN and GROUP BY take it for the thread); two thread ids that
    # differ only so cannot both exist there, so stripping them names the thread.
    pad = dialect_of(conn).pads_spaces
    wanted = {(i.rstrip(" ") if pad else i): i for i in ids}
    found: dict[str, ThreadUsageTotals] = {}
    for r in conn.execute(q).mappings():
        name = wanted.get(r["thread_id"].rstrip(" ") if pad else r["thread_id"])
        if name is not None:
            found[name] = _usage_totals(r)
    return found


def _usage_sums() -> tuple[ColumnElement[Any], ...]:
    return (
        func.count().label("turns"),
        func.coalesce(func.sum(token_usage.c.input_tokens), 0).label("input_tokens"),
        func.coalesce(func.sum(token_usage.c.output_tokens), 0).label("output_tokens"),
        # A non-finite cost (another writer's NaN) is unpriced: sqlexpr.finite_cost.
        func.sum(finite_cost(token_usage.c.cost_usd)).label("cost_usd"),
        func.count(finite_cost(token_usage.c.cost_usd)).label("priced"),
    )


def _usage_totals(row: Mapping[Any, Any]) -> ThreadUsageTotals:
    turns = int(row["turns"])
    priced = int(row["priced"])
    return ThreadUsageTotals(
        turns=turns,
        input_tokens=int(row["input_tokens"]),
        output_tokens=int(row["output_tokens"]),
        cost_usd=None if not priced else float(row["cost_usd"]),
        unpriced_turns=turns - priced,
    )


def soft_delete_thread(conn: Connection, thread_id: str, *, clock: Clock | None = None) -> Thread:
    """Mark a thread deleted (``deleted_at``) as the runtime does, keeping every row.

    The first mark wins: a thread already marked keeps its ``deleted_at``. ``threads list``
    hides marked threads unless asked; ``delete_thread`` removes a thread for good.
    """
    _lock_thread(conn, thread_id)
    conn.execute(
        update(thread)
        .where(thread.c.id == thread_id, thread.c.deleted_at.is_(None))
        .values(deleted_at=_clock(clock).now_ms())
    )
    return get_thread(conn, thread_id)


# --- messages ------------------------------------------------------------------------------


def append_message(
    conn: Connection,
    *,
    thread_id: str,
    role: str,
    content: str,
    tool_calls: Any = None,
    tool_results: Any = None,
    attachments: Any = None,
    follow_ups: Any = None,
    usage: Any = None,
    persona: str | None = None,
    run_id: str | None = None,
    outcome: Any = None,
    message_id: str | None = None,
    clock: Clock | None = None,
) -> Message:
    """Append a message with the thread's next ``seq`` and bump the thread's ``updated_at``.

    Locks the thread row first, so concurrent appenders on one thread take turns. When the
    thread's tenant has an active key the content is stored sealed (``KeyUnavailable`` without
    the KEK: never stored in plaintext); the returned message holds the text as given.

    In the runtime's shapes: ``usage`` (agora's snake_case fields or the runtime's camelCase) is
    stored camelCase (``inputTokens``, ``outputTokens``, ``cacheReadTokens``, … ``costUsd``);
    an assistant message's ``tool_calls`` is ``[{"id", "name", "input"}]``; a tool-results
    message has content ``''`` and ``tool_results`` ``[{"id", "name", "output", "error"?}]``.
    """
    check_text("content", content)
    turn_usage = usage_from_json(usage)
    if turn_usage is not None:
        usage = usage_to_json(turn_usage)
    values: dict[str, Any] = {
        "id": _ident(message_id, "message id") if message_id else None,
        "thread_id": _ident(thread_id, "thread_id"),
        "role": _ident(role, "role"),
        "content": content,
        "tool_calls": _dump(tool_calls, "tool_calls"),
        "tool_results": _dump(tool_results, "tool_results"),
        "attachments": _dump(attachments, "attachments"),
        "follow_ups": _dump(follow_ups, "follow_ups"),
        "usage": _dump(usage, "usage"),
        "persona": _ident(persona, "persona", optional=True),
        "run_id": _ident(run_id, "run_id", optional=True),
        "outcome": _dump(outcome, "outcome"),
    }
    locked = _lock_thread(conn, thread_id)
    now = _clock(clock).now_ms()
    if values["id"] is None:
        values["id"] = new_id(now)  # the same clock reading as created_at
    plain = dict(values)
    # sealed after the id is chosen: each value is bound to its row
    values = seal_columns(sealer_for(conn, locked.tenant_ref), message.name, values["id"], values)
    # A locking read sees the latest committed row even in a REPEATABLE READ transaction
    # (InnoDB's default) that has already taken its snapshot; the thread lock makes it exact.
    top = conn.execute(
        select(message.c.seq)
        .where(message.c.thread_id == thread_id)
        .order_by(message.c.seq.desc())
        .limit(1)
        .with_for_update()
    ).scalar()
    values["seq"] = (top or 0) + 1
    values["created_at"] = now
    conn.execute(insert(message).values(values))
    conn.execute(update(thread).where(thread.c.id == thread_id).values(updated_at=now))
    sealed = values["content"] != content
    return _message(
        {**plain, "seq": values["seq"], "created_at": now}, "opened" if sealed else "plain"
    )


def seal_message_values(
    conn: Connection, thread_id: str, message_id: str, values: Mapping[str, Any]
) -> dict[str, Any]:
    """``values`` of a message of ``thread_id``, about to be written over its columns: sealed
    for the thread's tenant when it has a key (``KeyUnavailable`` without the KEK; never
    plaintext over a keyed tenant's values), else as they are."""
    tenant = conn.execute(select(thread.c.tenant_ref).where(thread.c.id == thread_id)).scalar()
    return seal_columns(sealer_for(conn, tenant), message.name, message_id, values)


def update_thread(
    conn: Connection,
    thread_id: str,
    *,
    title: str | None = None,
    summary: str | None = None,
    summary_message_count: int | None = None,
    clock: Clock | None = None,
) -> Thread:
    """Set a thread's ``title`` and/or ``summary`` (``None``: left as it is); for a keyed tenant
    they are sealed, never written in plaintext (``KeyUnavailable`` without the KEK)."""
    changes: dict[str, Any] = {}
    if title is not None:
        changes["title"] = check_text("title", title)
    if summary is not None:
        changes["summary"] = check_text("summary", summary)
    if summary_message_count is not None:
        changes["summary_message_count"] = check_int(
            "summary_message_count", summary_message_count, low=0, high=2**31 - 1
        )
    if not changes:
        raise InvalidInput("give a title, a summary or a summary_message_count to set")
    found = _lock_thread(conn, check_identity("thread_id", thread_id))
    sealed = seal_columns(sealer_for(conn, found.tenant_ref), thread.name, found.id, changes)
    now = _clock(clock).now_ms()
    conn.execute(
        update(thread).where(thread.c.id == found.id).values({**sealed, "updated_at": now})
    )
    return get_thread(conn, found.id)


def list_messages(conn: Connection, thread_id: str) -> list[Message]:
    """List a thread's messages in order: ``created_at``, ``seq``, ``id`` (sealed contents opened,
    or marked)."""
    return _list_messages(conn, thread_id, False)


def _list_messages(conn: Connection, thread_id: str, tenant: str | bool | None) -> list[Message]:
    q = select(message).where(message.c.thread_id == thread_id).order_by(*_message_order())
    rows = conn.execute(q).mappings().all()
    return [_message(r, state) for r, state in _open_messages(conn, tenant, rows)]


def list_run_messages(conn: Connection, run: Run, *, limit: int = 1000) -> list[Message]:
    """List the first ``limit`` messages of ``run`` (those naming it in ``run_id``) in the
    thread's order (``created_at``, ``seq``, ``id``), sealed contents opened or marked.

    One read of ``agent_message_run_idx``; a sealed content is opened under its thread's
    tenant (read only when one is sealed).
    """
    check_int("limit", limit, low=1, high=100_000)
    q = (
        select(message)
        .where(exact_eq(message.c.run_id, run.id))
        .order_by(*_message_order())
        .limit(limit)
    )
    rows = conn.execute(q).mappings().all()
    # A run's messages are its thread's; a foreign writer's stray one opens under its own.
    return [_message(r, state) for r, state in _open_messages(conn, False, rows)]


def load_thread_for_turn(conn: Connection, thread_id: str, *, limit: int = 50) -> ThreadTurn:
    """Return the thread and its newest ``limit`` messages, oldest first, as a turn reads them."""
    if limit < 1:
        raise InvalidInput(f"limit must be at least 1, not {limit}")
    found = get_thread(conn, thread_id)
    cols = [message.c[name] for name in TurnMessage.__dataclass_fields__]
    newest = (
        select(*cols)
        .where(message.c.thread_id == thread_id)
        .order_by(*(c.desc() for c in _message_order()))
        .limit(limit)
    )
    found_rows = conn.execute(newest).mappings().all()
    opened = _open_messages(conn, found.tenant_ref, found_rows)
    rows = [TurnMessage(**r) for r, _ in opened]
    rows.reverse()
    return ThreadTurn(thread=found, messages=rows)


def fork_thread(
    conn: Connection,
    thread_id: str,
    *,
    up_to_seq: int | None = None,
    title: str | None = None,
    new_thread_id: str | None = None,
    clock: Clock | None = None,
) -> Thread:
    """Copy a thread and its messages (all, or those with ``seq <= up_to_seq``) into a new one.

    The copies get new ids and keep ``seq``, role, content and payloads; the tool-call records,
    the ledger, runs and proposals stay with the original (money spent once is counted once).
    The thread's summary is kept only if it covers no more messages than were copied. A sealed
    content is bound to its row: the copies are opened and sealed again for their new ids
    under the tenant's active key (so forking a sealed thread needs the KEK).
    """
    source = _lock_thread(conn, thread_id)
    now = _clock(clock).now_ms()
    q = select(message).where(message.c.thread_id == thread_id)
    if up_to_seq is not None:
        q = q.where(message.c.seq <= up_to_seq)
    copied = [dict(r) for r in conn.execute(q.order_by(*_message_order())).mappings()]
    keep_summary = source.summary is not None and source.summary_message_count <= len(copied)
    new = Thread(
        id=str(_ident(new_thread_id or new_id(now), "thread id")),
        actor_ref=source.actor_ref,
        tenant_ref=source.tenant_ref,
        title=source.title if title is None else title,
        persona=source.persona,
        model=source.model,
        default_agent=source.default_agent,
        transient=source.transient,
        pinned_at=None,
        summary=source.summary if keep_summary else None,
        summary_message_count=source.summary_message_count if keep_summary else 0,
        active_stream_id=None,
        created_at=now,
        updated_at=now,
        deleted_at=None,
    )
    opened = _open_messages(conn, source.tenant_ref, copied)
    states = {source.seal_state} | {state for _, state in opened}
    if "locked" in states:
        raise KeyUnavailable(
            f"thread {thread_id!r} holds sealed values: set AGORA_KEK or AGORA_KEK_FILE"
        )
    if states & {"broken", "shredded"}:
        raise SealBroken(f"thread {thread_id!r} holds values that do not open: not copied")
    sealer = sealer_for(conn, source.tenant_ref)
    if sealer is None and states - {"plain"}:
        raise KeyUnavailable(
            f"thread {thread_id!r} holds sealed values but its tenant has no active key"
        )
    values = {name: getattr(new, name) for name in Thread.__dataclass_fields__}
    values["transient"] = 1 if new.transient else 0
    del values["seal_state"]
    conn.execute(insert(thread).values(seal_columns(sealer, thread.name, new.id, values)))
    rows = []
    for row, _ in opened:
        row["id"] = new_id(now)
        row["thread_id"] = new.id
        rows.append(seal_columns(sealer, message.name, row["id"], row))
    if rows:
        conn.execute(insert(message), rows)
    return new


def truncate_from(
    conn: Connection, thread_id: str, *, seq: int, clock: Clock | None = None
) -> TruncateResult:
    """Delete the thread's messages from ``seq`` on, and their tool calls (explicitly).

    The ledger keeps its rows (the money was spent). A summary that covered more messages than
    remain is cleared. The thread's ``updated_at`` is bumped.
    """
    if seq < 1:
        raise InvalidInput(f"seq must be at least 1, not {seq}")
    found = _lock_thread(conn, thread_id)
    doomed = (message.c.thread_id == thread_id) & (message.c.seq >= seq)
    tool_calls_deleted = _delete_tool_calls_of_messages(conn, doomed)
    messages_deleted = int(conn.execute(delete(message).where(doomed)).rowcount)
    changes: dict[str, Any] = {"updated_at": _clock(clock).now_ms()}
    cleared = False
    if found.summary is not None and messages_deleted:
        remaining = conn.execute(
            select(func.count()).where(message.c.thread_id == thread_id)
        ).scalar_one()
        if found.summary_message_count > int(remaining):
            changes.update(summary=None, summary_message_count=0)
            cleared = True
    conn.execute(update(thread).where(thread.c.id == thread_id).values(changes))
    return TruncateResult(messages_deleted, tool_calls_deleted, cleared)


_FRAME_RUNS_PER_DELETE = 500


def _delete_frames_of_thread(conn: Connection, thread_id: str) -> int:
    """Delete the stream frames of the thread's runs (its ``agent_run`` rows and the runs its
    messages name): frames have no foreign key, so nothing cascades to them.

    One read of the run ids, then deletes by the frames' primary key prefix, 500 runs each
    (MariaDB before 11.1 runs ``IN (subquery)`` in a DELETE over the whole frames table).
    """
    runs = select(run.c.id).where(run.c.thread_id == thread_id)
    named = select(message.c.run_id).where(
        message.c.thread_id == thread_id, message.c.run_id.is_not(None)
    )
    ids = sorted({str(r) for (r,) in conn.execute(runs.union(named))})
    deleted = 0
    for i in range(0, len(ids), _FRAME_RUNS_PER_DELETE):
        chunk = ids[i : i + _FRAME_RUNS_PER_DELETE]
        where = [stream_frame.c.run_id.in_(chunk)]
        if dialect_of(conn).pads_spaces:  # PAD SPACE: 'r1 ' is another run's; bytes are exact
            exact = cast(stream_frame.c.run_id, LargeBinary())
            where.append(exact.in_([r.encode() for r in chunk]))
        deleted += int(conn.execute(delete(stream_frame).where(*where)).rowcount)
    return deleted


def _delete_proposal_events_of_thread(conn: Connection, thread_id: str) -> int:
    """Delete the operator's acts on the thread's proposals (they would cascade with the
    proposals; deleted first so that the count is reported, and with the pragma off too).

    One read of the proposal ids on their thread index, then deletes on the events' proposal
    index, 500 proposals each: no ``IN (subquery)`` in a DELETE (MariaDB before 11.1 would scan
    the events' whole table).
    """
    ids = [
        str(i)
        for (i,) in conn.execute(
            select(action_proposal.c.id).where(action_proposal.c.thread_id == thread_id)
        )
    ]
    e = action_proposal_event.c
    deleted = 0
    for i in range(0, len(ids), _FRAME_RUNS_PER_DELETE):
        chunk = ids[i : i + _FRAME_RUNS_PER_DELETE]
        stmt = delete(action_proposal_event).where(e.proposal_id.in_(chunk))
        deleted += int(conn.execute(stmt).rowcount)
    return deleted


def delete_thread(conn: Connection, thread_id: str) -> ThreadDeletion:
    """Hard-delete a thread and everything that hangs off it, its runs' stream frames too;
    report rows removed per table and the ledger rows (with their recorded spend) that went
    with it.

    Children are deleted explicitly before the thread, so the result is the same whether or not
    the database cascades (SQLite with its ``foreign_keys`` pragma off).
    """
    _lock_thread(conn, thread_id)
    # Folded days holding this thread's ledger rows no longer match the ledger: refold them.
    mark_days_dirty(conn, token_usage.c.thread_id == thread_id)
    # the rows the deletions below remove, counted the same way
    sums = select(*_usage_sums()).where(token_usage.c.thread_id == thread_id)
    ledger = _usage_totals(conn.execute(sums).mappings().one())
    deleted: dict[str, int] = {}
    deleted[tool_call.name] = _delete_tool_calls_of_messages(conn, message.c.thread_id == thread_id)
    deleted[stream_frame.name] = _delete_frames_of_thread(conn, thread_id)
    deleted[action_proposal_event.name] = _delete_proposal_events_of_thread(conn, thread_id)
    children: Sequence[Table] = (
        message,
        token_usage,
        run,
        action_proposal,
        queued_message,
        confirm_token,
        genui_call,
    )
    for table in children:
        result = conn.execute(delete(table).where(table.c.thread_id == thread_id))
        deleted[table.name] = int(result.rowcount)
    deleted[thread.name] = int(
        conn.execute(delete(thread).where(thread.c.id == thread_id)).rowcount
    )
    return ThreadDeletion(id=thread_id, deleted=deleted, ledger=ledger)


def get_transcript(conn: Connection, thread_id: str) -> Transcript:
    """Return the whole thread in order (``created_at``, ``seq``, ``id``) with its tool-call
    records and ledger rows."""
    found = get_thread(conn, thread_id)
    messages = _list_messages(conn, thread_id, found.tenant_ref)
    calls_q = (
        select(tool_call)
        .join(message, tool_call.c.message_id == message.c.id)
        .where(message.c.thread_id == thread_id)
        .order_by(tool_call.c.created_at, tool_call.c.id)
    )
    calls: dict[str, list[ToolCall]] = {}
    for call in _tool_calls(conn, conn.execute(calls_q).mappings().all(), found.tenant_ref):
        calls.setdefault(call.message_id, []).append(call)
    usage_cols = [token_usage.c[name] for name in ThreadUsageRow.__dataclass_fields__]
    usage_q = (
        select(*usage_cols)
        .where(token_usage.c.thread_id == thread_id)
        .order_by(token_usage.c.created_at, token_usage.c.id)
    )
    by_message: dict[str | None, list[ThreadUsageRow]] = {}
    for r in conn.execute(usage_q).mappings():
        by_message.setdefault(r["message_id"], []).append(_usage_row(r))
    known = {m.id for m in messages}
    other = [u for key, rows in by_message.items() if key not in known for u in rows]
    return Transcript(
        thread=found,
        messages=[
            TranscriptMessage(m, calls.get(m.id, []), by_message.get(m.id, [])) for m in messages
        ],
        other_usage=other,
    )
