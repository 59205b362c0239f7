"""`agora tools`: which tool is flaky, and how reliable each agent's runs are."""

from __future__ import annotations

# internal on purpose: the operator's commands import the store's private modules (cli/__init__.py)
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agora_cli.cli.options import (
    CsvOpt,
    DbOpt,
    FromOpt,
    JsonOpt,
    ReadDbOpt,
    ToOpt,
    days_window,
    open_read_db,
    scoped_tenant,
)
from agora_cli.cli.output import (
    Col,
    duration_text,
    finish,
    first_line,
    one_format,
    out_console,
    render_table,
    table_time,
)
from agora_cli.store._clock import iso_ms

if TYPE_CHECKING:
    from agora_cli.store._tool_stats import AgentReliability, ToolStat

__all__ = ["app"]

app = typer.Typer(
    help=(
        "Tool health: calls by outcome, latency percentiles, last failures; and run "
        "reliability per agent.\n\n"
        "Example: agora tools stats --tenant acme"
    ),
    no_args_is_help=True,
)

DEFAULT_DAYS = 7
# A tool failing at least this share of its finished calls is shown in red, above half of it
# in yellow.
FLAKY = 0.2


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _tool_doc(s: ToolStat) -> dict[str, Any]:
    failure = s.last_failure
    return {
        "tool_name": s.tool_name,
        "tool_type": s.tool_type,
        "calls": s.calls,
        "succeeded": s.succeeded,
        "failed": s.failed,
        "rejected": s.rejected,
        "pending_approval": s.pending_approval,
        "running": s.running,
        "other": s.other,
        "timed": s.timed,
        "derived": s.derived,
        "p50_ms": _ms(s.p50_ms),
        "p95_ms": _ms(s.p95_ms),
        "last_failure": None
        if failure is None
        else {
            "at": iso_ms(failure.at),
            "tool_call_id": failure.tool_call_id,
            "run_id": failure.run_id,
            "error": failure.error,
        },
    }


def _agent_doc(a: AgentReliability) -> dict[str, Any]:
    return {
        "agent_name": a.agent_name,
        "runs": a.runs,
        "completed": a.completed,
        "failed": a.failed,
        "cancelled": a.cancelled,
        "running": a.running,
        "other": a.other,
        "finished": a.finished,
        "median_ms": _ms(a.median_ms),
    }


# One CSV for both tables: `kind` says which a line is; a column that does not apply is empty.
_CSV_COLUMNS = [
    Col(name)
    for name in (
        "kind",
        "name",
        "tool_type",
        "calls",
        "runs",
        "succeeded",
        "completed",
        "failed",
        "rejected",
        "cancelled",
        "pending_approval",
        "running",
        "other",
        "p50_ms",
        "p95_ms",
        "derived",
        "median_ms",
        "last_failure_at",
        "last_failure_error",
    )
]


def _csv_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for t in doc["tools"]:
        failure = t["last_failure"] or {}
        rows.append(
            {
                "kind": "tool",
                "name": t["tool_name"],
                **{k: t[k] for k in ("tool_type", "calls", "succeeded", "failed", "rejected")},
                **{k: t[k] for k in ("pending_approval", "running", "other")},
                **{k: t[k] for k in ("p50_ms", "p95_ms", "derived")},
                "last_failure_at": failure.get("at"),
                "last_failure_error": first_line(failure.get("error"), 200),
            }
        )
    for a in doc["agents"]:
        rows.append(
            {
                "kind": "agent",
                "name": a["agent_name"],
                **{k: a[k] for k in ("runs", "completed", "failed", "cancelled", "running")},
                **{k: a[k] for k in ("other", "median_ms")},
            }
        )
    return rows


@app.command("stats")
def stats(
    from_day: FromOpt = None,
    to_day: ToOpt = None,
    tenant: Annotated[
        str | None,
        typer.Option("--tenant", help="Only this tenant's calls and runs.", show_default=False),
    ] = None,
    db: DbOpt = None,
    read_db: ReadDbOpt = None,
    as_json: JsonOpt = False,
    csv: CsvOpt = False,
) -> None:
    """Per tool: calls by outcome, p50/p95 latency, the last failure; per agent: runs by status
    and the median duration. The window defaults to the last 7 UTC days, today included.

    The outcome columns add up to calls: ok (executed), failed, rejected, awaiting approval
    (pending_approval), running (auto_executed: recorded, not settled) and other (any other
    status). fail % is failed / (ok + failed): calls awaiting approval, running or rejected are
    not in it. Latency is execution_ms, else executed_at - created_at (the runtime records no
    duration; for an approved action it includes the wait); the table marks the tools where
    some latencies come from the timestamps with *.

    Counted by the database (GROUP BY; percentile_cont on PostgreSQL, an exact rank-based
    percentile elsewhere), one index range per tool-call status: the cost follows the window.

    Example: agora tools stats --from 2026-11-01 --to 2026-11-30 --tenant acme
    """
    from agora_cli.store._tool_stats import run_reliability, stats_by_tool

    one_format(as_json, csv)
    from_ms, to_ms, start, end = days_window(from_day, to_day, default_days=DEFAULT_DAYS)
    assert from_ms is not None and to_ms is not None and start and end
    tenant = scoped_tenant(tenant)
    engine = open_read_db(db, read_db, tenant=tenant)
    with engine.connect() as conn:
        tools = stats_by_tool(conn, from_ms=from_ms, to_ms=to_ms, tenant_ref=tenant)
        agents = run_reliability(conn, from_ms=from_ms, to_ms=to_ms, tenant_ref=tenant)
        conn.rollback()
    doc = {
        "from": start.isoformat(),
        "to": end.isoformat(),
        "tenant": tenant,
        "tools": [_tool_doc(t) for t in tools],
        "agents": [_agent_doc(a) for a in agents],
    }
    finish(
        doc,
        as_json=as_json,
        csv=(_csv_rows(doc), _CSV_COLUMNS) if csv else None,
        show=lambda: _render(doc),
    )


def _latency_text(ms: float | None, t: dict[str, Any]) -> str | None:
    text = duration_text(ms)
    return f"{text}*" if ms is not None and t["derived"] else text


def _failure_share(t: dict[str, Any]) -> float:
    done = t["succeeded"] + t["failed"]
    return t["failed"] / done if done else 0.0


def _render(doc: dict[str, Any]) -> None:
    window = f"{doc['from']} → {doc['to']} (UTC)" + (
        f", tenant {doc['tenant']}" if doc["tenant"] else ""
    )
    tools = doc["tools"]
    if not tools:
        out_console().print(f"Tools, {window}: no tool calls in this window.", markup=False)
    else:
        rows = []
        styles: list[str | None] = []
        for t in tools:
            failure = t["last_failure"]
            share = _failure_share(t)
            rows.append(
                {
                    "tool": t["tool_name"],
                    "type": t["tool_type"],
                    "calls": t["calls"],
                    "ok": t["succeeded"],
                    "failed": t["failed"] or None,
                    "rate": f"{share:.0%}" if t["failed"] else None,
                    "rejected": t["rejected"] or None,
                    "waiting": t["pending_approval"] or None,
                    "running": t["running"] or None,
                    "other": t["other"] or None,
                    "p50": _latency_text(t["p50_ms"], t),
                    "p95": _latency_text(t["p95_ms"], t),
                    "last_failure": None
                    if failure is None
                    else f"{table_time(failure['at'])} {first_line(failure['error'], 50) or ''}",
                }
            )
            styles.append("red" if share >= FLAKY else "yellow" if share >= FLAKY / 2 else None)
        render_table(
            rows,
            [
                Col("tool"),
                Col("type", drop=7),
                Col.number("calls"),
                Col.number("ok"),
                Col.number("failed"),
                Col.number("rate", "fail %"),
                Col.number("rejected"),
                Col.number("waiting", "awaiting approval"),
                Col.number("running"),
                Col.number("other"),
                Col.number("p50", "p50 latency", drop=5),
                Col.number("p95", "p95 latency", drop=4),
                Col("last_failure", "last failure (UTC)", drop=1),
            ],
            title=f"Tools, {window}",
            row_styles=styles,
        )
        if any(t["derived"] for t in tools):
            out_console().print(
                "* latency from executed_at − created_at: the runtime recorded no execution_ms "
                "(an approved action's includes the wait)",
                style="dim",
                markup=False,
            )
    agents = doc["agents"]
    console = out_console()
    if not agents:
        console.print(f"Runs, {window}: no runs in this window.", markup=False)
        return
    console.print()
    render_table(
        [
            {
                "agent": a["agent_name"] or "(none)",
                "runs": a["runs"],
                "completed": a["completed"],
                "failed": a["failed"] or None,
                "rate": f"{a['failed'] / a['runs']:.0%}" if a["failed"] else None,
                "cancelled": a["cancelled"] or None,
                "running": a["running"] or None,
                "median": duration_text(a["median_ms"]),
            }
            for a in agents
        ],
        [
            Col("agent"),
            Col.number("runs"),
            Col.number("completed", drop=3),
            Col.number("failed"),
            Col.number("rate", "fail %"),
            Col.number("cancelled", drop=2),
            Col.number("running", drop=1),
            Col.number("median", "median duration"),
        ],
        title=f"Run reliability by agent, {window}",
    )
