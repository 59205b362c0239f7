"""`agora runs`: list the agent's runs and show one with everything that hangs off it."""

from __future__ import annotations

# internal on purpose: the operator's commands import the store's private modules (cli/__init__.py)
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agora_cli.cli.choices import choice_option
from agora_cli.cli.options import (
    CsvOpt,
    DbOpt,
    FromOpt,
    JsonOpt,
    NoPagerOpt,
    ReadDbOpt,
    ToOpt,
    TzOpt,
    days_window,
    open_read_db,
    scoped_tenant,
)
from agora_cli.cli.output import (
    Col,
    duration_text,
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
from agora_cli.store._clock import SystemClock, iso_ms
from agora_cli.store._values import load_json
from agora_cli.store._vocabulary import RUN_STATUSES

if TYPE_CHECKING:
    from agora_cli.store._runs import RunDetail, RunFrames
    from agora_cli.store._thread_model import (
        Message,
        Run,
        ThreadUsageRow,
        ThreadUsageTotals,
        ToolCall,
    )

__all__ = ["app", "run_document"]

app = typer.Typer(
    help=(
        "List the agent's runs, newest first, and show one with its messages, tool calls, "
        "usage, proposals and stream frames.\n\n"
        "Example: agora runs list --status failed && agora runs show demo-run-03-1"
    ),
    no_args_is_help=True,
)


def _opt(flag: str, text: str) -> Any:
    return typer.Option(flag, help=text, show_default=False)


LimitOpt = Annotated[int, typer.Option("--limit", min=1, max=1000, help="At most N (1-1000).")]


def run_document(r: Run, ledger: ThreadUsageTotals | None) -> dict[str, Any]:
    """A run as scripts get it: ISO times, ``duration_ms`` (null while it runs), money rounded.

    ``cost_usd`` is the run's ledger rows' known costs summed (``null`` when none has one) and
    ``unpriced_turns`` counts those without; ``recorded_cost_usd`` is the run row's own figure
    (the runtime's rollup when it wrote it)."""
    return {
        "id": r.id,
        "thread_id": r.thread_id,
        "agent_name": r.agent_name,
        "actor_ref": r.actor_ref,
        "tenant_ref": r.tenant_ref,
        "status": r.status,
        "started_at": iso_ms(r.started_at),
        "finished_at": iso_ms(r.finished_at),
        "duration_ms": None if r.finished_at is None else r.finished_at - r.started_at,
        "step_count": r.step_count,
        "input_tokens": r.input_tokens,
        "output_tokens": r.output_tokens,
        "cost_usd": None if ledger is None else money(ledger.cost_usd),
        "unpriced_turns": 0 if ledger is None else ledger.unpriced_turns,
        "recorded_cost_usd": money(r.cost_usd),
        "error": r.error,
        "durable": r.durable,
    }


_CSV_COLUMNS = [
    Col(name)
    for name in (
        "id",
        "thread_id",
        "agent_name",
        "actor_ref",
        "tenant_ref",
        "status",
        "started_at",
        "finished_at",
        "duration_ms",
        "step_count",
        "input_tokens",
        "output_tokens",
        "cost_usd",
        "unpriced_turns",
        "recorded_cost_usd",
        "error",
        "durable",
    )
]


@app.command("list")
def list_(
    actor: Annotated[str | None, _opt("--actor", "Only this actor's runs.")] = None,
    tenant: Annotated[str | None, _opt("--tenant", "Only this tenant's runs.")] = None,
    agent: Annotated[str | None, _opt("--agent", "Only runs of this agent (agent_name).")] = None,
    status: Annotated[
        str | None, choice_option("--status", RUN_STATUSES, help="Only runs in this status.")
    ] = None,
    thread: Annotated[
        str | None, _opt("--thread", "Only this thread's runs (its full id).")
    ] = None,
    from_day: FromOpt = None,
    to_day: ToOpt = None,
    after: Annotated[
        str | None,
        typer.Option(
            "--after",
            metavar="CURSOR",
            help="The next page: the cursor the previous page printed (JSON `next`).",
            show_default=False,
        ),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=1000, help="At most N (1-1000).")
    ] = 50,
    tz: TzOpt = "UTC",
    db: DbOpt = None,
    read_db: ReadDbOpt = None,
    as_json: JsonOpt = False,
    csv: CsvOpt = False,
) -> None:
    """List runs, newest first, filtered; page through them with --after.

    Reads one range of a run index, from the cursor on: a deep page costs what the first does,
    and runs started while you page never repeat or push a row off the next page.

    Example: agora runs list --status failed --from 2026-11-01 --limit 20
    """
    from agora_cli.store._runs import list_runs

    one_format(as_json, csv)
    from_ms, to_ms, _, _ = days_window(from_day, to_day, tz=tz)
    tenant = scoped_tenant(tenant)
    engine = open_read_db(db, read_db, tenant=tenant)
    with engine.connect() as conn:
        page = list_runs(
            conn,
            actor_ref=actor,
            tenant_ref=tenant,
            agent_name=agent,
            status=status,
            thread_id=thread,
            from_ms=from_ms,
            to_ms=to_ms,
            after=after,
            limit=limit,
        )
        conn.rollback()
    runs = [run_document(r, page.usage.get(r.id)) for r in page.runs]
    finish(
        {"runs": runs, "next": page.next_cursor},
        as_json=as_json,
        csv=(runs, _CSV_COLUMNS) if csv else None,
        show=lambda: _render_list(page.runs, runs),
    )
    if page.next_cursor and not as_json:
        say(f"more: add --after {page.next_cursor} for the next page")


def _cost_text(doc: dict[str, Any]) -> str | None:
    """A run's cost from its ledger: known costs, and how many rows have none."""
    if doc["cost_usd"] is None and not doc["unpriced_turns"]:
        return None  # no ledger rows
    cost = money_text(doc["cost_usd"])
    if doc["unpriced_turns"]:
        return f"{cost} +{doc['unpriced_turns']} unpriced"
    return cost


def _render_list(runs: list[Run], docs: list[dict[str, Any]]) -> None:
    now = SystemClock().now_ms()
    ids = short_ids([r.id for r in runs])
    rows = [
        {
            "id": ids[r.id],
            "agent": r.agent_name,
            "actor": r.actor_ref,
            "status": r.status,
            "started": table_time(iso_ms(r.started_at)),
            "duration": _took(r, now),
            "steps": r.step_count,
            "tokens": r.input_tokens + r.output_tokens,
            "cost": _cost_text(doc),
            "error": first_line(r.error, 60),
        }
        for r, doc in zip(runs, docs, strict=True)
    ]
    render_table(
        rows,
        [
            Col("id", wrap=False),
            Col("agent", drop=4),
            Col("actor", drop=3),
            Col("status", wrap=False),
            Col("started", "started (UTC)", wrap=False, drop=5),
            Col.number("duration"),
            Col.number("steps", drop=1),
            Col.number("tokens", drop=2),
            Col.number("cost", drop=6),
            Col.text("error"),
        ],
        row_styles=[_status_style(r.status) for r in runs],
        empty="no runs.",
    )


def _took(r: Run, now: int) -> str:
    """How long it took, or (still running) how long it has run so far, marked ``…``."""
    if r.finished_at is None:
        return duration_text(max(0, now - r.started_at)) + "…"
    return duration_text(r.finished_at - r.started_at)


def _status_style(status: str) -> str | None:
    return {"failed": "red", "running": "cyan", "cancelled": "yellow"}.get(status)


# --- show -------------------------------------------------------------------------------------


def _tool_call_doc(c: ToolCall) -> dict[str, Any]:
    return {
        "id": c.id,
        "message_id": c.message_id,
        "tool_name": c.tool_name,
        "tool_type": c.tool_type,
        "status": c.status,
        "execution_ms": c.execution_ms,
        "latency_ms": c.latency_ms,
        "error": c.error,
        "executed_by_ref": c.executed_by_ref,
        "created_at": iso_ms(c.created_at),
        "executed_at": iso_ms(c.executed_at),
    }


def _usage_doc(u: ThreadUsageRow) -> dict[str, Any]:
    return {
        "id": u.id,
        "message_id": u.message_id,
        "model_id": u.model_id,
        "purpose": u.purpose,
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cache_read_tokens": u.cache_read_tokens,
        "cache_write_tokens": u.cache_write_tokens,
        "cost_usd": money(u.cost_usd),
        "cost_source": u.cost_source,
        "created_at": iso_ms(u.created_at),
    }


def _frames_doc(f: RunFrames | None) -> dict[str, Any]:
    if f is None:
        return {"buffered": False, "rows": 0, "last_seq": None, "ended": None}
    return {
        "buffered": True,
        "rows": f.rows,
        "last_seq": f.last_seq,
        "ended": f.ended,
        "first_at": iso_ms(f.first_at),
        "last_at": iso_ms(f.last_at),
    }


def _message_doc(m: Message) -> dict[str, Any]:
    return {
        "id": m.id,
        "seq": m.seq,
        "role": m.role,
        "content": m.content,
        "sealed": m.sealed,
        "tool_results": load_json(m.tool_results),
        "created_at": iso_ms(m.created_at),
    }


def _detail_document(d: RunDetail) -> dict[str, Any]:
    from agora_cli.cli.proposal_views import proposal_document

    return {
        "run": run_document(d.run, d.ledger),
        "messages": [_message_doc(m) for m in d.messages],
        "messages_total": d.messages_total,
        "tool_calls": [_tool_call_doc(c) for c in d.tool_calls],
        "tool_calls_total": d.tool_calls_total,
        "usage": [_usage_doc(u) for u in d.usage],
        "usage_total": d.usage_total,
        "proposals": [proposal_document(p) for p in d.proposals],
        "frames": _frames_doc(d.frames),
    }


@app.command("show")
def show(
    run_id: Annotated[
        str, typer.Argument(metavar="ID", help="The run's id, or a unique prefix (8+ characters).")
    ],
    db: DbOpt = None,
    read_db: ReadDbOpt = None,
    as_json: JsonOpt = False,
    no_pager: NoPagerOpt = False,
) -> None:
    """Show a run: its messages, tool calls, ledger rows, proposals and whether its frames are
    buffered.

    The run's cost is its ledger rows' (known costs summed, unpriced rows counted apart): the
    figure threads show and spend use, repriced by prices reprice. The run row's own cost_usd
    (the runtime's rollup when it wrote it) is shown as "recorded". Messages are in the
    thread's order (created_at, then seq, then id); latency is execution_ms, else
    executed_at - created_at.

    ID may be any unique prefix of at least 8 characters; an ambiguous one is exit 2 and lists
    the runs it starts.

    Example: agora runs show demo-run-03-1 --json
    """
    from agora_cli.store._runs import get_run_detail
    from agora_cli.store._short_ids import resolve_run_id
    from agora_cli.store._tenant_guard import check_run_in_scope

    tenant = scoped_tenant(None)
    engine = open_read_db(db, read_db, tenant=tenant)
    with engine.connect() as conn:
        resolved = resolve_run_id(conn, run_id)
        check_run_in_scope(conn, resolved, tenant)
        detail = get_run_detail(conn, resolved)
        conn.rollback()
    doc = _detail_document(detail)
    finish(
        doc,
        as_json=as_json,
        show=lambda: page(lambda: _render_detail(doc, detail.run), no_pager=no_pager),
    )


def _message_line(m: dict[str, Any]) -> str | None:
    """A message's first line; an empty tool-results message names its results instead."""
    results = m["tool_results"]
    if not m["content"] and isinstance(results, list) and results:
        names = [
            str(r.get("name") or r.get("id")) + (" (failed)" if r.get("error") else "")
            for r in results
            if isinstance(r, dict)
        ]
        return "tool results: " + ", ".join(names)
    return first_line(m["content"], 80)


def _render_detail(doc: dict[str, Any], run: Run) -> None:
    from rich.markup import escape

    def shown(value: Any) -> str:
        return escape(safe_text(value))

    console = out_console()
    r = doc["run"]
    took = _took(run, SystemClock().now_ms())
    took = f"running for {took.rstrip('…')}" if run.finished_at is None else f"took {took}"
    cost = _cost_text(r) or f"cost {money_text(None)}"
    recorded = r["recorded_cost_usd"]
    if recorded is not None and recorded != r["cost_usd"]:
        cost += f" (recorded by the runtime: {money_text(recorded)})"
    console.print(f"[bold]run {shown(r['id'])}[/bold]  {shown(r['status'])}")
    console.print(
        f"agent {shown(r['agent_name'] or '—')} · actor {shown(r['actor_ref'])} · tenant "
        f"{shown(r['tenant_ref'] or '—')} · thread {shown(r['thread_id'])}"
    )
    console.print(
        f"started {r['started_at']} · {took} · {r['step_count']:,} step(s) · "
        f"{r['input_tokens']:,} in / {r['output_tokens']:,} out · {cost}"
    )
    if r["error"]:
        console.print("error:", style="bold red")
        console.print(safe_text(r["error"], body=True), markup=False)
    if doc["messages"]:
        console.print()
        render_table(
            [
                {
                    "n": n,
                    "role": m["role"],
                    "at": table_time(m["created_at"]),
                    "text": _message_line(m),
                }
                for n, m in enumerate(doc["messages"], 1)
            ],
            [
                Col.number("n", "#"),
                Col("role", wrap=False),
                Col("at", "created (UTC)", wrap=False, drop=1),
                Col.text("text"),
            ],
            title=f"messages ({doc['messages_total']:,})",
        )
    calls = doc["tool_calls"]
    if calls:
        console.print()
        render_table(
            [
                {
                    "tool": c["tool_name"],
                    "status": c["status"],
                    "duration": duration_text(c["latency_ms"]),
                    "at": table_time(c["created_at"]),
                    "error": first_line(c["error"], 60),
                }
                for c in calls
            ],
            [
                Col("tool"),
                Col("status", wrap=False),
                Col.number("duration"),
                Col("at", "created (UTC)", wrap=False, drop=1),
                Col.text("error"),
            ],
            title=f"tool calls ({doc['tool_calls_total']:,})",
            row_styles=["red" if c["status"] in ("failed", "error") else None for c in calls],
        )
    if doc["usage"]:
        console.print()
        render_table(
            [
                {
                    "model": u["model_id"],
                    "purpose": u["purpose"],
                    "input": u["input_tokens"],
                    "output": u["output_tokens"],
                    "cost": money_text(u["cost_usd"]),
                }
                for u in doc["usage"]
            ],
            [
                Col("model"),
                Col("purpose", drop=1),
                Col.number("input"),
                Col.number("output"),
                Col.number("cost"),
            ],
            title=f"ledger rows ({doc['usage_total']:,})",
        )
    if doc["proposals"]:
        console.print()
        ids = short_ids([p["id"] for p in doc["proposals"]])
        render_table(
            [
                {
                    "id": ids[p["id"]],
                    "tool": p["tool_name"],
                    "decision": p["decision"],
                    "execution": p["execution_state"],
                }
                for p in doc["proposals"]
            ],
            [Col("id", wrap=False), Col("tool"), Col("decision"), Col("execution")],
            title="proposals",
        )
    f = doc["frames"]
    console.print()
    if not f["buffered"]:
        console.print("stream frames: none buffered (never streamed here, or purged)")
    else:
        state = "ended" if f["ended"] else "still streaming (no end marker yet)"
        console.print(
            f"stream frames: {f['rows']:,} row(s) buffered, last seq {f['last_seq']}, {state}; "
            f"last written {f['last_at']} → agora frames tail {shown(r['id'])}"
        )
