"""`agora tools`: which tool is flaky, and how reliable each agent's runs are."""

from __future__ import annotations

# internal on purpose: the operator's commands import the store's private modules (cli/__init__.py)
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agora_cli.cli.choices import choice_option
from agora_cli.cli.options import (
    CsvOpt,
    DbOpt,
    JsonOpt,
    LastOpt,
    ReadDbOpt,
    TzOpt,
    WindowFromOpt,
    WindowToOpt,
    open_read_db,
    scoped_tenant,
    window_now,
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
from agora_cli.store._windows import TOOL_SORTS

if TYPE_CHECKING:
    from agora_cli.store._tool_stats import AgentReliability, ToolStat
    from agora_cli.store._windows import DefaultWindow

__all__ = ["app"]

app = typer.Typer(
    help=(
        "Tool health: calls by outcome, latency percentiles, last failures; and run "
        "reliability per agent.\n\n"
        "Example: agora tools stats --tenant acme"
    ),
    no_args_is_help=True,
)

# The default window: 30 days, today included. Seven hid a tool that fails now and then (none
# of its failures in the last week, 40 % over the month); --last 7d asks for the recent week.
DEFAULT_WINDOW: DefaultWindow = "30d"
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
        "settled": s.settled,
        "fail_rate": None if s.fail_rate is None else round(s.fail_rate, 6),
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
        "fail_rate",
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
                **{k: t[k] for k in ("pending_approval", "running", "other", "fail_rate")},
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
    from_day: WindowFromOpt = None,
    to_day: WindowToOpt = None,
    last: LastOpt = None,
    sort: Annotated[
        str,
        choice_option(
            "--sort",
            TOOL_SORTS,
            help="Order the tools by calls, failures, fail_rate (failed / (ok + failed)) or "
            "p95 latency, each highest first.",
            show_default=True,
        ),
    ] = "calls",
    tenant: Annotated[
        str | None,
        typer.Option("--tenant", help="Only this tenant's calls and runs.", show_default=False),
    ] = None,
    tz: TzOpt = "UTC",
    db: DbOpt = None,
    read_db: ReadDbOpt = None,
    as_json: JsonOpt = False,
    csv: CsvOpt = False,
) -> None:
    """Per tool: calls by outcome, p50/p95 latency, the last failure; per agent: runs by status
    and the median duration. The window defaults to the last 30 days, today included (the
    header says so; --last 7d for the last week, --last 24h for the last day).

    Every outcome is a column and they add up to calls: ok (executed), failed, rejected,
    awaiting approval (pending_approval), running (auto_executed: recorded, not settled) and
    other (any other status); the TOTAL line sums them. fail % is failed / (ok + failed): the
    calls awaiting approval, running, rejected or other are not in it, and the line under the
    table says how many. Latency is execution_ms, else executed_at - created_at (the runtime
    records no duration; for an approved action it includes the wait); the table marks the
    tools where some latencies come from the timestamps with *.

    Counted by the database (GROUP BY; percentile_cont on PostgreSQL, an exact rank-based
    percentile elsewhere), one index range per tool-call status: the cost follows the window.

    Example: agora tools stats --last 30d --sort fail_rate --tz Europe/Berlin
    """
    from agora_cli.store._tool_stats import run_reliability, stats_by_tool

    one_format(as_json, csv)
    window = window_now(from_day, to_day, last, tz, default=DEFAULT_WINDOW)
    tenant = scoped_tenant(tenant)
    engine = open_read_db(db, read_db, tenant=tenant)
    with engine.connect() as conn:
        tools = stats_by_tool(
            conn,
            from_ms=window.from_ms,
            to_ms=window.to_ms,
            tenant_ref=tenant,
            sort=sort,
        )
        agents = run_reliability(
            conn, from_ms=window.from_ms, to_ms=window.to_ms, tenant_ref=tenant
        )
        conn.rollback()
    doc = {
        "from": window.from_day.isoformat(),
        "to": window.to_day.isoformat(),
        "from_at": iso_ms(window.from_ms),
        "to_at": iso_ms(window.to_ms),
        "tz": window.tz,
        "window": window.chosen,
        "sort": sort,
        "tenant": tenant,
        "tools": [_tool_doc(t) for t in tools],
        "agents": [_agent_doc(a) for a in agents],
    }
    finish(
        doc,
        as_json=as_json,
        csv=(_csv_rows(doc), _CSV_COLUMNS) if csv else None,
        show=lambda: _render(doc, hours=window.hours),
    )


def _latency_text(ms: float | None, t: dict[str, Any]) -> str | None:
    text = duration_text(ms)
    return f"{text}*" if ms is not None and t["derived"] else text


def _rate_text(failed: int, settled: int) -> str | None:
    return f"{failed / settled:.0%}" if failed and settled else None


def _failure_share(t: dict[str, Any]) -> float:
    done = t["succeeded"] + t["failed"]
    return t["failed"] / done if done else 0.0


_OUTCOMES = ("succeeded", "failed", "rejected", "pending_approval", "running", "other")


def _window_text(doc: dict[str, Any], hours: bool) -> str:
    if hours:
        span = f"{table_time(doc['from_at'])} → {table_time(doc['to_at'])}"
    else:
        span = f"{doc['from']} → {doc['to']}"
    chosen = " · the last 30 days (the default)" if doc["window"] == "30d" else ""
    tenant = f", tenant {doc['tenant']}" if doc["tenant"] else ""
    return f"{span} ({doc['tz']}){tenant}{chosen}"


def _render(doc: dict[str, Any], *, hours: bool = False) -> None:
    window = _window_text(doc, hours)
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
        sums = {name: sum(t[name] for t in tools) for name in ("calls", *_OUTCOMES)}
        total = {
            "tool": "TOTAL",
            **dict.fromkeys(("type", "p50", "p95", "last_failure"), ""),
            "calls": sums["calls"],
            "ok": sums["succeeded"],
            "failed": sums["failed"] or None,
            "rate": _rate_text(sums["failed"], sums["succeeded"] + sums["failed"]),
            "rejected": sums["rejected"] or None,
            "waiting": sums["pending_approval"] or None,
            "running": sums["running"] or None,
            "other": sums["other"] or None,
        }
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
            footer_rows=[total],
            row_styles=styles,
        )
        unsettled = sums["calls"] - sums["succeeded"] - sums["failed"]
        out_console().print(
            "calls = ok + failed + rejected + awaiting approval + running + other; "
            f"fail % = failed / (ok + failed): {unsettled:,} call(s) awaiting approval, "
            "running, rejected or other are not in it.",
            style="dim",
            markup=False,
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
