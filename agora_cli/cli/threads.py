"""`agora threads`: List, show and delete conversation threads."""

from __future__ import annotations

# internal on purpose: the operator's commands import the store's private modules (cli/__init__.py)
import json
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agora_cli.cli.options import (
    CsvOpt,
    DbOpt,
    JsonOpt,
    NoPagerOpt,
    ReadDbOpt,
    TzOpt,
    YesOpt,
    open_db,
    open_read_db,
    scoped_tenant,
)
from agora_cli.cli.output import (
    Col,
    finish,
    first_line,
    money,
    money_text,
    one_format,
    out_console,
    render_table,
    safe_text,
    say,
    short_ids,
    table_time,
)
from agora_cli.cli.pager import page
from agora_cli.store._clock import iso_ms
from agora_cli.store._errors import InvalidInput
from agora_cli.store._values import load_json
from agora_cli.store._vocabulary import usage_from_json

if TYPE_CHECKING:
    from agora_cli.store._thread_model import (
        Thread,
        ThreadUsageRow,
        ThreadUsageTotals,
        ToolCall,
        Transcript,
    )

__all__ = ["app"]

app = typer.Typer(
    help=(
        "List, show and delete conversation threads.\n\n"
        "Example: agora threads list --actor alice && agora threads show demo-thread-01"
    ),
    no_args_is_help=True,
)


def _stdin_is_terminal() -> bool:
    """Whether a person can be asked (tests stand in a terminal here)."""
    return sys.stdin.isatty()


IdArg = Annotated[
    str,
    typer.Argument(metavar="ID", help="The thread's id, or a unique prefix (8+ characters)."),
]


def _usage_totals_doc(u: ThreadUsageTotals) -> dict[str, Any]:
    return {
        "turns": u.turns,
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cost_usd": money(u.cost_usd),
        "unpriced_turns": u.unpriced_turns,
    }


_LIST_CSV = [
    Col(name)
    for name in (
        "id",
        "actor_ref",
        "tenant_ref",
        "title",
        "messages",
        "turns",
        "input_tokens",
        "output_tokens",
        "cost_usd",
        "unpriced_turns",
        "updated_at",
        "deleted_at",
        "transient",
    )
]


@app.command("list")
def list_(
    actor: Annotated[
        str | None, typer.Option("--actor", help="Only this actor's threads.", show_default=False)
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=1000, help="At most N threads (1-1000).")
    ] = 50,
    include_deleted: Annotated[
        bool,
        typer.Option("--include-deleted", help="Also threads the runtime soft-deleted (marked)."),
    ] = False,
    include_transient: Annotated[
        bool,
        typer.Option("--include-transient", help="Also transient threads (marked)."),
    ] = False,
    tz: TzOpt = "UTC",
    db: DbOpt = None,
    read_db: ReadDbOpt = None,
    as_json: JsonOpt = False,
    csv: CsvOpt = False,
) -> None:
    """List threads, newest activity first, with message counts and their ledger's tokens and cost.

    Threads the runtime soft-deleted and transient ones are hidden, as the runtime hides them;
    --include-deleted and --include-transient show them, marked.

    Example: agora threads list --actor carol --include-deleted
    """
    from agora_cli.store._threads import list_threads

    one_format(as_json, csv)
    tenant = scoped_tenant(None)
    engine = open_read_db(db, read_db, tenant=tenant)
    with engine.connect() as conn:
        threads = list_threads(
            conn,
            actor_ref=actor,
            tenant_ref=tenant,
            limit=limit,
            include_deleted=include_deleted,
            include_transient=include_transient,
        )
        conn.rollback()
    rows: list[dict[str, Any]] = [
        {
            "id": t.id,
            "actor_ref": t.actor_ref,
            "tenant_ref": t.tenant_ref,
            "title": t.title,
            "messages": t.messages,
            "usage": _usage_totals_doc(t.usage),
            "updated_at": iso_ms(t.updated_at),
            "deleted_at": iso_ms(t.deleted_at),
            "transient": t.transient,
        }
        for t in threads
    ]
    finish(
        {"threads": rows},
        as_json=as_json,
        csv=([{**r, **r["usage"]} for r in rows], _LIST_CSV) if csv else None,
        show=lambda: _render_thread_list(rows),
    )


def _marks(row: dict[str, Any]) -> str:
    marks = []
    if row["deleted_at"]:
        marks.append(f"deleted {table_time(row['deleted_at'])[:10]}")
    if row["transient"]:
        marks.append("transient")
    return f"  [{', '.join(marks)}]" if marks else ""


def _render_thread_list(rows: list[dict[str, Any]]) -> None:
    ids = short_ids([r["id"] for r in rows])
    render_table(
        [
            {
                "id": ids[r["id"]],
                "actor_ref": r["actor_ref"],
                "tenant_ref": r["tenant_ref"] or "—",
                "title": (r["title"] or "(untitled)") + _marks(r),
                "messages": r["messages"],
                "tokens": r["usage"]["input_tokens"] + r["usage"]["output_tokens"],
                "cost": _cost(r["usage"]),
                "updated_at": table_time(r["updated_at"]),
            }
            for r in rows
        ],
        [
            Col("id", wrap=False),
            Col("actor_ref", "actor", drop=3),
            Col("tenant_ref", "tenant", drop=1),
            Col.text("title"),
            Col.number("messages", drop=4),
            Col.number("tokens", drop=5),
            Col.number("cost", drop=6),
            Col("updated_at", "last activity (UTC)", wrap=False, drop=2),
        ],
        row_styles=["dim" if r["deleted_at"] else None for r in rows],
        empty="no threads.",
        fuller="--json",
    )


def _cost(usage: dict[str, Any]) -> str:
    if not usage["turns"]:
        return "—"
    cost = money_text(usage["cost_usd"])
    return cost + (f" +{usage['unpriced_turns']} unpriced" if usage["unpriced_turns"] else "")


def _thread_doc(thread: Thread, usage: list[ThreadUsageRow]) -> dict[str, Any]:
    costs = [u.cost_usd for u in usage if u.cost_usd is not None]
    return {
        "id": thread.id,
        "actor_ref": thread.actor_ref,
        "tenant_ref": thread.tenant_ref,
        "title": thread.title,
        "persona": thread.persona,
        "model": thread.model,
        "default_agent": thread.default_agent,
        "transient": thread.transient,
        "pinned_at": iso_ms(thread.pinned_at),
        "summary": thread.summary,
        "summary_message_count": thread.summary_message_count,
        "active_stream_id": thread.active_stream_id,
        "created_at": iso_ms(thread.created_at),
        "updated_at": iso_ms(thread.updated_at),
        "deleted_at": iso_ms(thread.deleted_at),
        "sealed": thread.seal_state != "plain",
        "usage": {
            "turns": len(usage),
            "input_tokens": sum(u.input_tokens for u in usage),
            "output_tokens": sum(u.output_tokens for u in usage),
            "cost_usd": money(sum(costs)) if costs else None,
            "unpriced_turns": len(usage) - len(costs),
        },
    }


def _tool_call_doc(call: ToolCall) -> dict[str, Any]:
    return {
        "id": call.id,
        "tool_name": call.tool_name,
        "tool_type": call.tool_type,
        "status": call.status,
        "input": load_json(call.input),
        "output": load_json(call.output),
        "error": call.error,
        "executed_by_ref": call.executed_by_ref,
        "execution_ms": call.execution_ms,
        "latency_ms": call.latency_ms,
        "run_id": call.run_id,
        "created_at": iso_ms(call.created_at),
        "executed_at": iso_ms(call.executed_at),
    }


def _usage_doc(row: ThreadUsageRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "model_id": row.model_id,
        "purpose": row.purpose,
        "input_tokens": row.input_tokens,
        "output_tokens": row.output_tokens,
        "cache_read_tokens": row.cache_read_tokens,
        "cache_write_tokens": row.cache_write_tokens,
        "cost_usd": money(row.cost_usd),
        "cost_source": row.cost_source,
        "run_id": row.run_id,
        "created_at": iso_ms(row.created_at),
    }


def _turn_usage(text: str | None) -> Any:
    """A message's per-turn usage in agora's field names, whichever spelling stored it (the
    runtime's camelCase or agora's older snake_case); a value that is no object as it is."""
    value = load_json(text)
    found = usage_from_json(value)
    return value if found is None else found


def _transcript_doc(transcript: Transcript) -> dict[str, Any]:
    usage = [u for m in transcript.messages for u in m.usage] + transcript.other_usage
    messages = []
    for item in transcript.messages:
        m = item.message
        messages.append(
            {
                "id": m.id,
                "seq": m.seq,
                "role": m.role,
                "content": m.content,
                "sealed": m.sealed,
                "seal_broken": m.seal_broken,
                "shredded": m.seal_state == "shredded",
                "persona": m.persona,
                "run_id": m.run_id,
                "created_at": iso_ms(m.created_at),
                "tool_calls": [_tool_call_doc(c) for c in item.tool_calls],
                "usage": [_usage_doc(u) for u in item.usage],
                "payload": {
                    "tool_calls": load_json(m.tool_calls),
                    "tool_results": load_json(m.tool_results),
                    "attachments": load_json(m.attachments),
                    "follow_ups": load_json(m.follow_ups),
                    "usage": _turn_usage(m.usage),
                    "outcome": load_json(m.outcome),
                },
            }
        )
    broken = [m["id"] for m in messages if m["seal_broken"]]
    if transcript.thread.seal_state == "broken":
        broken.insert(0, transcript.thread.id)
    thread = _thread_doc(transcript.thread, usage)
    return {"thread": thread, "messages": messages, "seal_broken": broken}


@app.command("show")
def show(
    thread_id: IdArg,
    db: DbOpt = None,
    read_db: ReadDbOpt = None,
    as_json: JsonOpt = False,
    no_pager: NoPagerOpt = False,
) -> None:
    """Show a thread's transcript, with its tool calls, tool results and token usage.

    Messages are in time order (created_at, then seq, then id), so the runtime's unnumbered
    messages (seq 0) and agora's numbered ones interleave as they were written; #N is the
    message's place in the thread. Each turn shows its ledger rows, or else the usage the
    runtime stored on the message (either spelling).

    ID may be any unique prefix of at least 8 characters; an ambiguous one is exit 2 and lists
    the threads it starts. Sealed messages (a tenant with a key) are opened with the
    key-encryption key in AGORA_KEK or AGORA_KEK_FILE, and show as [sealed] without it; a wrong
    key is exit 3, a sealed value that does not belong to its row exit 1.

    Example: agora threads show demo-thread-01 --json
    """
    from agora_cli.store._sealing import SEAL_BROKEN_MARKER
    from agora_cli.store._short_ids import resolve_thread_id
    from agora_cli.store._tenant_guard import check_thread_in_scope
    from agora_cli.store._threads import get_transcript

    tenant = scoped_tenant(None)
    engine = open_read_db(db, read_db, tenant=tenant)
    with engine.connect() as conn:
        resolved = resolve_thread_id(conn, thread_id)
        check_thread_in_scope(conn, resolved, tenant)  # before any sealed value is opened
        transcript = get_transcript(conn, resolved)
        conn.rollback()
    doc = _transcript_doc(transcript)
    if doc["seal_broken"]:
        say(
            f"error: {len(doc['seal_broken'])} sealed value(s) do not open where they are stored "
            f"(copied or altered), shown as {SEAL_BROKEN_MARKER}: "
            + ", ".join(doc["seal_broken"][:10])
        )
    finish(
        doc,
        as_json=as_json,
        show=lambda: page(lambda: _render_transcript(doc), no_pager=no_pager),
        exit_code=1 if doc["seal_broken"] else 0,
    )


def _render_transcript(doc: dict[str, Any]) -> None:
    from rich.markup import escape

    def shown(value: Any) -> str:  # stored text, for a terminal: never obeyed, never markup
        return escape(safe_text(value))

    console = out_console()
    t = doc["thread"]
    usage = t["usage"]
    cost = money_text(usage["cost_usd"])
    unpriced = f", {usage['unpriced_turns']} unpriced" if usage["unpriced_turns"] else ""
    console.print(f"[bold]{shown(t['title'] or '(untitled)')}[/bold]  {shown(t['id'])}")
    console.print(
        f"actor {shown(t['actor_ref'])} · tenant {shown(t['tenant_ref'] or '—')} · "
        f"created {t['created_at']} · last activity {t['updated_at']}"
    )
    console.print(
        f"{len(doc['messages'])} message(s) · {usage['turns']} model turn(s), "
        f"{usage['input_tokens']:,} in / {usage['output_tokens']:,} out, {cost}{unpriced}"
    )
    for n, m in enumerate(doc["messages"], 1):
        console.print()
        lock = "  [dim](sealed)[/dim]" if m["sealed"] else ""
        console.print(f"[bold cyan]#{n} {shown(m['role'])}[/bold cyan]  {m['created_at']}{lock}")
        results = m["payload"]["tool_results"]
        if m["content"] or not isinstance(results, list) or not results:
            # A message body keeps its newlines and tabs; every other control character is shown.
            console.print(safe_text(m["content"], body=True), markup=False)
        for line in _tool_result_lines(results):
            console.print(line, markup=False)
        for call in m["tool_calls"]:
            took = f", {call['latency_ms']} ms" if call["latency_ms"] is not None else ""
            console.print(
                f"  ↳ tool {safe_text(call['tool_name'])} [{safe_text(call['status'])}{took}]",
                markup=False,
            )
        for u in m["usage"]:
            cost = money_text(u["cost_usd"])
            console.print(
                f"  · {safe_text(u['model_id'])}: {u['input_tokens']:,} in / "
                f"{u['output_tokens']:,} out, {cost}",
                style="dim",
                markup=False,
            )
        turn = m["payload"]["usage"]
        if not m["usage"] and isinstance(turn, dict):
            console.print(_turn_usage_line(turn), style="dim", markup=False)


def _tool_result_lines(results: Any) -> list[str]:
    """A tool-results payload (``[{"id", "name", "output", "error"?}]``) as lines for people."""
    if not isinstance(results, list):
        return []
    lines = []
    for r in results:
        if not isinstance(r, dict):
            continue
        name = safe_text(r.get("name") or r.get("id") or "?")
        if r.get("error") is not None:
            lines.append(f"  ← {name} failed: {safe_text(first_line(str(r['error']), 200))}")
        else:
            output = json.dumps(r.get("output"), ensure_ascii=False, separators=(", ", ": "))
            lines.append(f"  ← {name}: {safe_text(first_line(output, 200))}")
    return lines


def _turn_usage_line(usage: dict[str, Any]) -> str:
    """The usage the runtime stored on a message (no ledger row names it), for people."""

    def count(key: str) -> str:
        value = usage.get(key)
        return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else "?"

    parts = [f"{count('input_tokens')} in / {count('output_tokens')} out"]
    for key, label in (
        ("cache_read_tokens", "cache read"),
        ("cache_write_tokens", "cache write"),
        ("reasoning_tokens", "reasoning"),
    ):
        if usage.get(key) is not None:
            parts.append(f"{label} {count(key)}")
    cost = usage.get("cost_usd")
    known = isinstance(cost, int | float) and not isinstance(cost, bool)
    parts.append(money_text(cost if known else None))
    return "  · turn usage: " + ", ".join(parts)


@app.command("delete")
def delete(
    thread_id: IdArg,
    yes: YesOpt = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Delete a thread for good: messages, tool calls, usage, runs, their frames, proposals.

    Asks first on a terminal — saying how many ledger rows and how much recorded spend go with
    it — and without a terminal needs --yes. The ledger rows of the thread go too, so its spend
    leaves the reports. ID may be any unique prefix of at least 8 characters.

    Example: agora threads delete demo-thread-12 --yes --json
    """
    from agora_cli.store._short_ids import resolve_thread_id
    from agora_cli.store._tenant_guard import check_thread_in_scope
    from agora_cli.store._thread_model import ThreadUsageTotals
    from agora_cli.store._threads import delete_thread, get_thread, usage_by_thread

    if not yes and not _stdin_is_terminal():
        raise InvalidInput(
            f"not deleting thread {thread_id!r} without --yes: there is no terminal to ask on"
        )
    tenant = scoped_tenant(None)
    engine = open_db(db, tenant=tenant)
    if not yes:
        with engine.connect().execution_options(sqlite_deferred=True) as conn:
            resolved = resolve_thread_id(conn, thread_id)
            check_thread_in_scope(conn, resolved, tenant)
            found = get_thread(conn, resolved)
            ledger = usage_by_thread(conn, [found.id]).get(found.id, ThreadUsageTotals())
            conn.rollback()
        question = safe_text(
            f"Thread {found.id} ({found.actor_ref}: {found.title or '(untitled)'}) "
            f"{_ledger_sentence(ledger)} Delete it and everything in it, for good?"
        )
        if not typer.confirm(question, default=False, err=True):
            say("nothing deleted.")
            raise typer.Exit(1)
        thread_id = found.id
    with engine.begin() as conn:
        resolved = resolve_thread_id(conn, thread_id)
        check_thread_in_scope(conn, resolved, tenant)
        result = delete_thread(conn, resolved)
    removed = ", ".join(f"{n:,} {table}" for table, n in result.deleted.items() if n)
    finish(
        {"id": result.id, "deleted": result.deleted, "ledger": _usage_totals_doc(result.ledger)},
        as_json=as_json,
        show=f"Deleted thread {result.id}: {removed}. {_ledger_sentence(result.ledger, done=True)}"
        if result.ledger.turns
        else f"Deleted thread {result.id}: {removed}.",
    )


def _ledger_sentence(ledger: ThreadUsageTotals, *, done: bool = False) -> str:
    """What the thread's ledger rows amount to, and that they leave the reports with it."""
    if not ledger.turns:
        return "had no ledger rows." if done else "has no ledger rows."
    spend = f"{money_text(ledger.cost_usd)} recorded spend"
    unpriced = f", {ledger.unpriced_turns:,} unpriced" if ledger.unpriced_turns else ""
    tokens = f"{ledger.input_tokens + ledger.output_tokens:,} tokens"
    if done:
        return f"Its {ledger.turns:,} ledger row(s) ({spend}{unpriced}; {tokens}) left the reports."
    return (
        f"has {ledger.turns:,} ledger row(s) ({spend}{unpriced}; {tokens}), which leave the "
        "spend reports with it."
    )
