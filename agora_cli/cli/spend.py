"""`agora spend` and `agora quota`: the ledger reports."""

from __future__ import annotations

from datetime import date, timedelta
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agora_cli.cli.options import CsvOpt, DbOpt, JsonOpt, open_db
from agora_cli.cli.output import (
    Col,
    emit_csv,
    emit_json,
    money,
    out_console,
    render_table,
    safe_text,
    say,
)
from agora_cli.store.clock import SystemClock, iso_ms, ms_to_date, parse_day, parse_instant
from agora_cli.store.errors import InvalidInput
from agora_cli.store.values import check_count, check_finite, check_identity

if TYPE_CHECKING:
    from agora_cli.store.ledger import QuotaReport, QuotaWindow, SpendReport, SpendRow

__all__ = ["quota", "spend"]

_FIELDS = (
    "turns",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cost_usd",
    "estimated_usd",
    "unpriced_turns",
)
_BLOCKS = " ▏▎▍▌▋▊▉█"


def _usd(value: Any) -> str:
    return "unknown" if value is None else f"${value:,.4f}"


_MONEY = frozenset({"cost_usd", "estimated_usd"})


def _row_doc(row: SpendRow) -> dict[str, Any]:
    return {
        name: money(getattr(row, name)) if name in _MONEY else getattr(row, name)
        for name in _FIELDS
    }


def _window(from_text: str | None, to_text: str | None, today: date) -> tuple[date, date]:

    start = parse_day(from_text, what="--from") if from_text is not None else None
    end = parse_day(to_text, what="--to") if to_text is not None else None
    if end is None:
        end = today
    if start is None:
        start = end.replace(day=1)
    return start, end


def spend(
    by: Annotated[
        str, typer.Option("--by", help="Group by model, actor, tenant, day or month.")
    ] = "model",
    from_day: Annotated[
        str | None,
        typer.Option(
            "--from",
            metavar="YYYY-MM-DD",
            help="First UTC day, inclusive (default: the 1st of --to's month).",
            show_default=False,
        ),
    ] = None,
    to_day: Annotated[
        str | None,
        typer.Option(
            "--to",
            metavar="YYYY-MM-DD",
            help="Last UTC day, inclusive (default: today).",
            show_default=False,
        ),
    ] = None,
    actor: Annotated[
        str | None, typer.Option("--actor", help="Only this actor.", show_default=False)
    ] = None,
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="Only this tenant.", show_default=False)
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", help="Only this ledger model id (exact).", show_default=False),
    ] = None,
    provider_cost_only: Annotated[
        bool,
        typer.Option(
            "--provider-cost-only", help="Count provider-reported costs only, not estimates."
        ),
    ] = False,
    chart: Annotated[
        bool, typer.Option("--chart", help="Draw bars instead of a table (day/month: a series).")
    ] = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
    csv: CsvOpt = False,
) -> None:
    """Show spend and token use from the ledger, grouped, over an inclusive UTC window.

    The default window is the current UTC month to date. `unpriced` counts turns whose cost is
    unknown: they are never summed as free, and each unpriced model is named under the table
    with the command that would price it.

    Example: agora spend --by day --from 2026-11-01 --to 2026-11-30 --actor alice
    """
    from agora_cli.store.ledger import SPEND_GROUPINGS, list_unpriced_models
    from agora_cli.store.ledger import spend as spend_report

    if by not in SPEND_GROUPINGS:
        raise InvalidInput(f"--by {by!r} is not one of {', '.join(SPEND_GROUPINGS)}")
    if as_json and csv:
        raise InvalidInput("choose one of --json and --csv")
    start, end = _window(from_day, to_day, ms_to_date(SystemClock().now_ms()))
    if start > end:
        raise InvalidInput(f"--from {start.isoformat()} is after --to {end.isoformat()}")
    if chart:
        _check_chart_window(by, start, end)
    filters = {"actor": actor, "tenant": tenant, "model": model}
    engine = open_db(db, readonly=True)
    with engine.connect().execution_options(sqlite_deferred=True) as conn:
        report = spend_report(
            conn,
            by=by,
            from_day=start,
            to_day=end,
            provider_cost_only=provider_cost_only,
            **filters,
        )
        unpriced: list[tuple[str, int]] = []
        if report.total.unpriced_turns and not (as_json or csv):
            if by == "model":
                unpriced = [(str(r.key), r.unpriced_turns) for r in report.rows if r.unpriced_turns]
            else:
                found = list_unpriced_models(conn, from_day=start, to_day=end, **filters)
                unpriced = [(m.model_id, m.turns) for m in found]
        conn.rollback()
    if as_json:
        emit_json(
            {
                "by": by,
                "from": start.isoformat(),
                "to": end.isoformat(),
                "rows": [{"key": r.key, **_row_doc(r)} for r in report.rows],
                "total": _row_doc(report.total),
            }
        )
        return
    if csv:
        columns = [Col("key"), *(Col(name) for name in _FIELDS)]
        rows = [{"key": r.key, **_row_doc(r)} for r in report.rows]
        emit_csv([*rows, {"key": "TOTAL", **_row_doc(report.total)}], columns)
        return
    if chart:
        _render_chart(report)
    else:
        _render_spend_table(report)
    _explain_unpriced(unpriced)


def _title(report: SpendReport) -> str:
    basis = " · provider-reported cost only" if report.provider_cost_only else ""
    return (
        f"Spend by {report.by}, {report.from_day.isoformat()} → {report.to_day.isoformat()} "
        f"(UTC){basis}"
    )


def _render_spend_table(report: SpendReport) -> None:
    def cells(row: SpendRow, key: str) -> dict[str, str]:
        counts = {
            "turns": row.turns,
            "input": row.input_tokens,
            "output": row.output_tokens,
            "cache_read": row.cache_read_tokens,
            "cache_write": row.cache_write_tokens,
        }
        return {
            "key": key,
            **{name: f"{n:,}" for name, n in counts.items()},
            "cost": _usd(row.cost_usd),
            "estimated": _usd(row.estimated_usd),
            "unpriced": f"{row.unpriced_turns:,}" if row.unpriced_turns else "—",
        }

    if not report.rows:
        out_console().print(f"{_title(report)}: no usage in this window.", markup=False)
        return
    render_table(
        [cells(r, "(none)" if r.key is None else r.key) for r in report.rows],
        [
            Col("key", report.by),
            Col.number("turns", drop=4),
            Col.number("input"),
            Col.number("output"),
            Col.number("cache_read", "cache read", drop=2),
            Col.number("cache_write", "cache write", drop=1),
            Col.number("cost"),
            Col.number("estimated", drop=3),
            Col.number("unpriced"),
        ],
        title=_title(report),
        footer_rows=[cells(report.total, "TOTAL")],
        row_styles=["yellow" if r.unpriced_turns else None for r in report.rows],
    )


# A chart draws every bucket of its window, empty ones too: bounded, so that a window to the
# year 9999 is a clear error rather than millions of lines.
MAX_CHART_BUCKETS = {"day": 1_000, "month": 1_200}


def _check_chart_window(by: str, start: date, end: date) -> None:

    if by == "day":
        buckets = (end - start).days + 1
    elif by == "month":
        buckets = (end.year - start.year) * 12 + end.month - start.month + 1
    else:
        return
    most = MAX_CHART_BUCKETS[by]
    if buckets > most:
        raise InvalidInput(
            f"--chart draws at most {most:,} {by}s and this window has {buckets:,}: "
            "narrow --from/--to" + (" or use --by month" if by == "day" else "")
        )


def _chart_rows(report: SpendReport) -> list[SpendRow]:
    """The groups to draw; by day or month every bucket of the window, empty ones too."""
    from agora_cli.store.ledger import SpendRow

    if report.by not in ("day", "month"):
        return report.rows
    have = {r.key: r for r in report.rows}
    keys: list[str] = []
    day = report.from_day if report.by == "day" else report.from_day.replace(day=1)
    while day <= report.to_day:
        keys.append(day.isoformat() if report.by == "day" else day.isoformat()[:7])
        if day >= date.max - timedelta(days=31):
            break
        day = day + timedelta(days=1) if report.by == "day" else _next_month(day)
    return [have.get(k) or SpendRow(key=k, estimated_usd=0.0, **_zero()) for k in keys]


def _next_month(first: date) -> date:
    return (first + timedelta(days=32)).replace(day=1)


def _zero() -> dict[str, Any]:
    return {
        "turns": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "cost_usd": None,
        "unpriced_turns": 0,
    }


def _bar(value: float, top: float, width: int) -> str:
    if top <= 0 or value <= 0:
        return ""
    eighths = max(1, round(value / top * width * 8))
    full, part = divmod(eighths, 8)
    return "█" * full + (_BLOCKS[part] if part else "")


def _render_chart(report: SpendReport) -> None:
    from rich.markup import escape
    from rich.text import Text

    console = out_console()
    rows = _chart_rows(report)
    console.print(_title(report), style="bold", markup=False)
    if not report.rows:
        console.print("no usage in this window.")
        return
    by_cost = any(r.cost_usd is not None for r in rows)
    values = [
        (r.cost_usd or 0.0) if by_cost else float(r.input_tokens + r.output_tokens) for r in rows
    ]
    labels = ["(none)" if r.key is None else safe_text(r.key) for r in rows]
    shown = [
        _usd(r.cost_usd) if by_cost else f"{int(v):,} tokens"
        for r, v in zip(rows, values, strict=True)
    ]
    label_w = min(max(len(s) for s in labels), 40)
    value_w = max(len(s) for s in shown)
    marks = [f" +{r.unpriced_turns:,} unpriced" if r.unpriced_turns else "" for r in rows]
    width = max(10, console.width - label_w - value_w - max(map(len, marks)) - 3)
    top = max(values)
    for label, value, text, mark in zip(labels, values, shown, marks, strict=True):
        line = Text(f"{label[:label_w]:<{label_w}} ")
        line.append(f"{_bar(value, top, width):<{width}}", style="cyan")
        line.append(f" {text:>{value_w}}")
        line.append(mark, style="yellow")
        console.print(line, soft_wrap=True)
    total = report.total
    measure = "cost" if by_cost else "input + output tokens"
    console.print(
        f"TOTAL {escape(_usd(total.cost_usd))} over {total.turns:,} turns "
        f"({total.input_tokens + total.output_tokens:,} tokens); bars show {measure}."
    )


def _explain_unpriced(unpriced: list[tuple[str, int]]) -> None:
    from rich.text import Text

    console = out_console()
    for model_id, turns in unpriced:
        shown = safe_text(model_id)
        line = Text(f"unpriced: {shown}, {turns:,} turn(s) with no cost", style="yellow")
        line.append(_pricing_hint(model_id))
        console.print(line, soft_wrap=not console.is_terminal)


def _pricing_hint(model_id: str) -> str:
    import shlex

    # A command to copy: quoted for the shell, control characters escaped for the terminal.
    quoted = safe_text(shlex.quote(model_id))
    manual = f"agora prices set {quoted} --input X --output Y"
    if model_id.startswith("us-gov.") or ":us-gov-" in model_id:
        return f" (GovCloud: priced by hand) → {manual}"
    if "/" in model_id and not model_id.startswith("arn:"):
        return f" → agora prices seed {quoted}  (or {manual})"
    return f" → agora prices seed --missing  (or {manual})"


# --- quota ---------------------------------------------------------------------------------


def _window_doc(window: QuotaWindow) -> dict[str, Any]:

    return {
        "from": iso_ms(window.from_ms),
        "to": iso_ms(window.to_ms),
        "tokens": window.tokens,
        "usd": money(window.usd),
        "limits": {"tokens": window.limit_tokens, "usd": money(window.limit_usd)},
        "exhausted": window.exhausted,
    }


_QUOTA_CSV = [
    Col(name)
    for name in ("window", "from", "to", "tokens", "usd", "limit_tokens", "limit_usd", "exhausted")
]


def _window_csv(window: QuotaWindow) -> dict[str, Any]:
    doc = _window_doc(window)
    limits = doc.pop("limits")
    return {**doc, "limit_tokens": limits["tokens"], "limit_usd": limits["usd"]}


def quota(
    actor: Annotated[
        str, typer.Option("--actor", help="The actor whose windows to show.", show_default=False)
    ],
    at: Annotated[
        str | None,
        typer.Option(
            "--at",
            metavar="ISO",
            help="The instant (ISO 8601; no zone = UTC). Default: now.",
            show_default=False,
        ),
    ] = None,
    day_tokens: Annotated[
        int | None,
        typer.Option(
            "--day-tokens", help="Day limit on input + output tokens.", show_default=False
        ),
    ] = None,
    day_usd: Annotated[
        float | None, typer.Option("--day-usd", help="Day limit in USD.", show_default=False)
    ] = None,
    month_tokens: Annotated[
        int | None,
        typer.Option(
            "--month-tokens", help="Month limit on input + output tokens.", show_default=False
        ),
    ] = None,
    month_usd: Annotated[
        float | None, typer.Option("--month-usd", help="Month limit in USD.", show_default=False)
    ] = None,
    provider_cost_only: Annotated[
        bool,
        typer.Option(
            "--provider-cost-only", help="Count provider-reported costs only, not estimates."
        ),
    ] = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
    csv: CsvOpt = False,
) -> None:
    """Show an actor's UTC day and calendar-month use; exit 1 when a given limit is reached.

    Tokens are input + output (cache tokens are part of input, never added again); USD sums the
    known costs. Each window is one indexed SUM in the database.

    Example: agora quota --actor alice --day-tokens 200000 --month-usd 25 --json
    """
    from agora_cli.store.ledger import quota as quota_report

    if as_json and csv:
        raise InvalidInput("choose one of --json and --csv")
    check_identity("--actor", actor)
    for flag, tokens in (("--day-tokens", day_tokens), ("--month-tokens", month_tokens)):
        if tokens is not None:
            check_count(flag, tokens)
    for flag, usd in (("--day-usd", day_usd), ("--month-usd", month_usd)):
        if usd is not None:
            check_finite(flag, usd)
    at_ms = parse_instant(at, what="--at") if at is not None else SystemClock().now_ms()
    engine = open_db(db, readonly=True)
    with engine.connect().execution_options(sqlite_deferred=True) as conn:
        report = quota_report(
            conn,
            actor=actor,
            at_ms=at_ms,
            day_tokens=day_tokens,
            day_usd=day_usd,
            month_tokens=month_tokens,
            month_usd=month_usd,
            provider_cost_only=provider_cost_only,
        )
        conn.rollback()
    if as_json:
        emit_json(
            {
                "actor": report.actor,
                "at": iso_ms(report.at_ms),
                "day": _window_doc(report.day),
                "month": _window_doc(report.month),
                "exhausted": report.exhausted,
                "notes": _quota_notes(report),
            }
        )
    elif csv:
        emit_csv(
            [
                {"window": name, **_window_csv(window)}
                for name, window in (("day", report.day), ("month", report.month))
            ],
            _QUOTA_CSV,
        )
    else:
        _render_quota(report)
    for note in _quota_notes(report):
        say(f"note: {safe_text(note)}", style="yellow")
    if report.exhausted:
        raise typer.Exit(1)


def _quota_notes(report: QuotaReport) -> list[str]:
    if report.actor_seen:
        return []
    return [
        f"the ledger has no usage of actor {report.actor!r} at all "
        "(a typo? agora spend --by actor lists the actors)"
    ]


def _render_quota(report: QuotaReport) -> None:
    from rich.markup import escape

    def limit(value: Any, fmt: Any) -> str:
        return "—" if value is None else fmt(value)

    day = ms_to_date(report.day.from_ms)
    rows = []
    styles: list[str | None] = []
    for name, window in (
        ("day " + day.isoformat(), report.day),
        ("month " + day.isoformat()[:7], report.month),
    ):
        rows.append(
            {
                "window": name,
                "tokens": f"{window.tokens:,}",
                "token_limit": limit(window.limit_tokens, lambda v: f"{v:,}"),
                "usd": _usd(window.usd),
                "usd_limit": limit(window.limit_usd, _usd),
                "status": "EXHAUSTED" if window.exhausted else "ok",
            }
        )
        styles.append("bold red" if window.exhausted else None)
    render_table(
        rows,
        [
            Col("window"),
            Col("tokens", justify="right"),
            Col("token_limit", "token limit", "right"),
            Col("usd", "USD", "right"),
            Col("usd_limit", "USD limit", "right"),
            Col("status"),
        ],
        title=escape(f"Quota for {safe_text(report.actor)} at {iso_ms(report.at_ms)}"),
        row_styles=styles,
    )
    console = out_console()
    if report.month.unpriced_turns:
        console.print(
            f"{report.month.unpriced_turns:,} turn(s) this month have no known cost and are not "
            "in USD: agora spend --by model names them.",
            style="yellow",
            markup=False,
        )
