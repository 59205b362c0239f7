"""`agora spend`: the ledger rolled up by model, actor, tenant, thread, day, week or month."""

from __future__ import annotations

# internal on purpose: the operator's commands import the store's private modules (cli/__init__.py)
import re
import shlex
from datetime import date, timedelta
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agora_cli.cli.choices import Choice, choice_option
from agora_cli.cli.options import (
    CsvOpt,
    DbOpt,
    JsonOpt,
    LastOpt,
    ReadDbOpt,
    TzOpt,
    WindowFromOpt,
    WindowToOpt,
    given_on_command_line,
    open_db,
    open_read_db,
    scoped_tenant,
    window_now,
)
from agora_cli.cli.output import (
    Col,
    emit_csv,
    finish,
    fit,
    money,
    money_text,
    one_format,
    out_console,
    progress,
    render_table,
    safe_text,
    series_marks,
    table_time,
)
from agora_cli.store._clock import iso_ms, parse_day
from agora_cli.store._errors import InvalidInput
from agora_cli.store._windows import (
    GROUP_KEYS,
    SPEND_GROUPINGS,
    SPEND_ORDERS,
    TIME_KEYS,
    parse_bound,
    parse_grouping,
)

if TYPE_CHECKING:
    from agora_cli.store._ledger import SpendReport, SpendRow
    from agora_cli.store._windows import DefaultWindow, Window

__all__ = ["app", "spend"]

app = typer.Typer(invoke_without_command=True)

# Each word of --by checked alone (a typo is named), then the pair as a whole.
SPEND_BY = Choice(
    GROUP_KEYS,
    separator=",",
    max_parts=2,
    combos=SPEND_GROUPINGS,
    combos_hint="one key or two of them, at most one a period (model,actor; day,model)",
)

FIELDS = (
    "turns",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cost_usd",
    "estimated_usd",
    "unpriced_turns",
)
_MONEY = frozenset({"cost_usd", "estimated_usd"})
_BLOCKS = " ▏▎▍▌▋▊▉█"
_STACK_STYLES = ("cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan", "white")
# A chart draws every bucket of its window, empty ones too: bounded, so that a window to the
# year 9999 is a clear error rather than millions of lines.
MAX_CHART_BUCKETS = {"day": 1_000, "week": 520, "month": 1_200}
# The default window: this month to date, or the last 7 days while fewer of the month have
# begun (never a one-day report on the 1st). A profile's `last` replaces it.
DEFAULT_WINDOW: DefaultWindow = "month_min_7d"
_CHOSEN = {"month": "month to date", "7d": "the last 7 days: month to date is under a week"}


def row_doc(row: SpendRow) -> dict[str, Any]:
    """A spend row's fields for scripts (money rounded)."""
    return {
        name: money(getattr(row, name)) if name in _MONEY else getattr(row, name) for name in FIELDS
    }


@app.callback()
def spend(
    ctx: typer.Context,
    by: Annotated[
        str | None,
        choice_option(
            "--by",
            SPEND_BY,
            help="Group by one key or two (the first the outer level); e.g. model, day,model, "
            "model,actor. At most one period. [default: model, or the profile's by]",
        ),
    ] = None,
    from_day: WindowFromOpt = None,
    to_day: WindowToOpt = None,
    last: LastOpt = None,
    actor: Annotated[
        str | None, typer.Option("--actor", help="Only this actor.", show_default=False)
    ] = None,
    tenant: Annotated[
        str | None,
        typer.Option(
            "--tenant",
            help="Only this tenant (a row's own tenant, else its thread's).",
            show_default=False,
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", help="Only this ledger model id (exact).", show_default=False),
    ] = None,
    order: Annotated[
        str | None,
        choice_option(
            "--order",
            SPEND_ORDERS,
            help="Order groups by cost (the default), tokens or key; periods stay in time order.",
        ),
    ] = None,
    provider_cost_only: Annotated[
        bool,
        typer.Option(
            "--provider-cost-only", help="Count provider-reported costs only, not estimates."
        ),
    ] = False,
    raw: Annotated[
        bool,
        typer.Option(
            "--raw", help="Read the ledger alone, bypassing the daily fold (agora spend fold)."
        ),
    ] = False,
    chart: Annotated[
        bool,
        typer.Option(
            "--chart",
            help="Draw bars instead of a table (a period: a series; a period and a dimension: "
            "stacked bars).",
        ),
    ] = False,
    tz: TzOpt = "UTC",
    db: DbOpt = None,
    read_db: ReadDbOpt = None,
    as_json: JsonOpt = False,
    csv: CsvOpt = False,
) -> None:
    """Show spend and token use from the ledger, grouped, over an inclusive window.

    The default window is this month to date, or the last 7 days while fewer of the month have
    begun (so never a one-day report on the 1st); a profile's last replaces it. Days, weeks
    (ISO: from Monday, keyed by that day) and months are those of --tz (UTC by default).
    `unpriced` counts turns whose cost is unknown: they are never summed as free, and each
    unpriced model is named under the table with the command that would price it.

    Whole UTC days folded by `agora spend fold` are read from the daily fold and the rest from
    the ledger (the figures are the same; --raw reads the ledger alone; the JSON says how many
    days came from the fold in `folded_days`). Periods in a zone other than UTC, and thread
    groups, come from the ledger.

    From a hot standby (the primary stays free for writes): agora spend --last 7d --read-db
    postgresql://reports@standby.internal/app

    Example: agora spend --by model,actor --from yesterday --tz Europe/Berlin
    """
    if ctx.invoked_subcommand is not None:
        if given_on_command_line("read_db"):
            raise InvalidInput(
                f"--read-db is for reports: `agora spend {ctx.invoked_subcommand}` writes, on the "
                "primary (--db)"
            )
        return
    from agora_cli.store._ledger import list_unpriced_models
    from agora_cli.store._ledger import spend as spend_report
    from agora_cli.store._usage import models_priced_now

    one_format(as_json, csv)
    from agora_cli.cli.profiles import profile_default

    keys = parse_grouping(by if by is not None else profile_default("by") or "model")
    if last is None and from_day is None and to_day is None:
        last = profile_default("last")
    window = window_now(from_day, to_day, last, tz, default=DEFAULT_WINDOW)
    if chart:
        _check_chart(keys, window.from_day, window.to_day)
    tenant = scoped_tenant(tenant)
    engine = open_read_db(db, read_db, tenant=tenant)
    with engine.connect() as conn:
        report = spend_report(
            conn,
            by=",".join(keys),
            from_ms=window.from_ms,
            to_ms=window.to_ms,
            tz=window.tz,
            actor=actor,
            tenant=tenant,
            model=model,
            provider_cost_only=provider_cost_only,
            order=order,
            raw=raw,
        )
        unpriced: list[tuple[str, int]] = []
        priced_now: frozenset[str] = frozenset()
        if report.total.unpriced_turns and not (as_json or csv):
            if report.keys == ("model",):
                unpriced = [(str(r.key), r.unpriced_turns) for r in report.rows if r.unpriced_turns]
            else:
                found = list_unpriced_models(
                    conn,
                    from_ms=window.from_ms,
                    to_ms=window.to_ms,
                    actor=actor,
                    tenant=tenant,
                    model=model,
                )
                unpriced = [(m.model_id, m.turns) for m in found]
            priced_now = models_priced_now(conn, (model_id for model_id, _ in unpriced))
        conn.rollback()
    if csv:
        _emit_csv(report)
        return
    finish(
        _document(report, window),
        as_json=as_json,
        show=lambda: _render(report, window, chart=chart, unpriced=unpriced, priced_now=priced_now),
    )


def _keys_doc(report: SpendReport, *values: str | None) -> dict[str, str | None]:
    return dict(zip(report.keys, values, strict=False))


def _document(report: SpendReport, window: Window) -> dict[str, Any]:
    """The JSON document: one-level rows, or (``day,model``, ``model,actor``) the outer
    level's groups nesting their rows; every row names its keys in ``keys``."""
    rows: list[dict[str, Any]]
    if report.periods:
        rows = [
            {
                "key": period.key,
                "keys": _keys_doc(report, period.key),
                "rows": [
                    {"key": r.key, "keys": _keys_doc(report, period.key, r.key), **row_doc(r)}
                    for r in period.rows
                ],
                "total": row_doc(period.total),
            }
            for period in report.periods
        ]
    else:
        rows = [{"key": r.key, "keys": _keys_doc(report, r.key), **row_doc(r)} for r in report.rows]
    return {
        "by": report.by,
        "from": report.from_day.isoformat(),
        "to": report.to_day.isoformat(),
        "from_at": iso_ms(report.from_ms),
        "to_at": iso_ms(report.to_ms),
        "tz": report.tz,
        "window": window.chosen,
        "rows": rows,
        "total": row_doc(report.total),
        "folded_days": report.folded_days,
    }


def _emit_csv(report: SpendReport) -> None:
    """One level: ``key`` then the fields, a ``TOTAL`` line last (cli.md). Two levels: one
    column per key, named for it (``day,model``, ``model,actor``), a ``TOTAL`` line closing
    each outer group and the whole."""
    fields = [Col(name) for name in FIELDS]
    if not report.periods:
        rows = [{"key": r.key, **row_doc(r)} for r in report.rows]
        emit_csv([*rows, {"key": "TOTAL", **row_doc(report.total)}], [Col("key"), *fields])
        return
    outer, inner = report.keys
    lines: list[dict[str, Any]] = []
    for period in report.periods:
        lines += [{outer: period.key, inner: r.key, **row_doc(r)} for r in period.rows]
        lines.append({outer: period.key, inner: "TOTAL", **row_doc(period.total)})
    lines.append({outer: "TOTAL", inner: "TOTAL", **row_doc(report.total)})
    emit_csv(lines, [Col(outer), Col(inner), *fields])


def _title(report: SpendReport, window: Window) -> str:
    basis = " · provider-reported cost only" if report.provider_cost_only else ""
    if window.hours:
        span = f"{table_time(iso_ms(report.from_ms))} → {table_time(iso_ms(report.to_ms))}"
    else:
        span = f"{report.from_day.isoformat()} → {report.to_day.isoformat()}"
    chosen = f" · {_CHOSEN[window.chosen]}" if window.chosen in _CHOSEN else ""
    return f"Spend by {report.by}, {span} ({report.tz}){chosen}{basis}"


def _render(
    report: SpendReport,
    window: Window,
    *,
    chart: bool,
    unpriced: list[tuple[str, int]],
    priced_now: frozenset[str] = frozenset(),
) -> None:
    title = _title(report, window)
    if not report.rows:
        out_console().print(f"{title}: no usage in this window.", markup=False)
    elif chart and report.periods:
        _render_stacked_chart(report, title)
    elif chart:
        _render_chart(report, title)
    else:
        _render_table(report, title)
    _explain_unpriced(unpriced, priced_now)


def _cells(row: SpendRow, key: str | None) -> dict[str, str]:
    counts = {
        "turns": row.turns,
        "input": row.input_tokens,
        "output": row.output_tokens,
        "cache_read": row.cache_read_tokens,
        "cache_write": row.cache_write_tokens,
    }
    return {
        "key": "(none)" if key is None else key,
        **{name: f"{n:,}" for name, n in counts.items()},
        "cost": money_text(row.cost_usd),
        "estimated": money_text(row.estimated_usd),
        "unpriced": f"{row.unpriced_turns:,}" if row.unpriced_turns else "—",
    }


def _render_table(report: SpendReport, title: str) -> None:
    columns = [
        Col.number("turns", drop=4),
        Col.number("input"),
        Col.number("output"),
        Col.number("cache_read", "cache read", drop=2),
        Col.number("cache_write", "cache write", drop=1),
        Col.number("cost"),
        Col.number("estimated", drop=3),
        Col.number("unpriced"),
    ]
    if not report.periods:
        render_table(
            [_cells(r, r.key) for r in report.rows],
            [Col("key", report.by), *columns],
            title=title,
            footer_rows=[_cells(report.total, "TOTAL")],
            row_styles=["yellow" if r.unpriced_turns else None for r in report.rows],
        )
        return
    outer, inner = report.keys
    rows: list[dict[str, str]] = []
    styles: list[str | None] = []
    for period in report.periods:
        name = "(none)" if period.key is None else period.key
        for n, r in enumerate(period.rows):
            rows.append({"period": name if n == 0 else "", **_cells(r, r.key)})
            styles.append("yellow" if r.unpriced_turns else None)
        rows.append({"period": "", **_cells(period.total, f"{name} total")})
        styles.append("bold")
    render_table(
        rows,
        [Col("period", outer, wrap=False), Col("key", inner), *columns],
        title=title,
        footer_rows=[{"period": "TOTAL", **_cells(report.total, "")}],
        row_styles=styles,
    )


def _check_chart(keys: tuple[str, ...], start: date, end: date) -> None:
    """A chart draws a period's series, stacked by a dimension: a period first, or one key."""
    if len(keys) == 2 and keys[0] not in TIME_KEYS:
        hint = (
            f"--by {keys[1]},{keys[0]}"
            if keys[1] in TIME_KEYS
            else f"--by day,{keys[0]} (or a table: drop --chart)"
        )
        raise InvalidInput(
            f"--chart stacks a period's bars by one dimension: --by {','.join(keys)} has no "
            f"period first; try {hint}"
        )
    time = keys[0]
    if time == "day":
        buckets = (end - start).days + 1
    elif time == "week":
        buckets = (end - start).days // 7 + 2
    elif time == "month":
        buckets = (end.year - start.year) * 12 + end.month - start.month + 1
    else:
        return
    most = MAX_CHART_BUCKETS[time]
    if buckets > most:
        raise InvalidInput(
            f"--chart draws at most {most:,} {time}s and this window has {buckets:,}: "
            "narrow --from/--to" + (" or use --by month" if time != "month" else "")
        )


def _period_keys(report: SpendReport, time: str) -> list[str]:
    """Every period of the window, empty ones too (a chart shows the gaps)."""
    keys: list[str] = []
    if time == "day":
        day = report.from_day
    elif time == "week":
        day = report.from_day - timedelta(days=report.from_day.weekday())
    else:
        day = report.from_day.replace(day=1)
    while day <= report.to_day:
        keys.append(day.isoformat()[:7] if time == "month" else day.isoformat())
        if day >= date.max - timedelta(days=31):
            break
        if time == "day":
            day += timedelta(days=1)
        elif time == "week":
            day += timedelta(days=7)
        else:
            day = (day + timedelta(days=32)).replace(day=1)
    return keys


def _empty(key: str) -> SpendRow:
    from agora_cli.store._ledger import SpendRow

    return SpendRow(
        key=key,
        turns=0,
        input_tokens=0,
        output_tokens=0,
        cache_read_tokens=0,
        cache_write_tokens=0,
        cost_usd=None,
        estimated_usd=0.0,
        unpriced_turns=0,
    )


def _chart_rows(report: SpendReport) -> list[SpendRow]:
    if report.by not in ("day", "week", "month"):
        return report.rows
    have = {r.key: r for r in report.rows}
    return [have.get(k) or _empty(k) for k in _period_keys(report, report.by)]


def _bar(value: float, top: float, width: int) -> str:
    if top <= 0 or value <= 0:
        return ""
    eighths = max(1, round(value / top * width * 8))
    full, part = divmod(eighths, 8)
    return "█" * full + (_BLOCKS[part] if part else "")


def _measure(rows: list[SpendRow]) -> tuple[bool, str]:
    by_cost = any(r.cost_usd is not None for r in rows)
    return by_cost, "cost" if by_cost else "input + output tokens"


def _value(row: SpendRow, by_cost: bool) -> float:
    return (row.cost_usd or 0.0) if by_cost else float(row.input_tokens + row.output_tokens)


def _render_chart(report: SpendReport, title: str) -> None:
    from rich.text import Text

    console = out_console()
    rows = _chart_rows(report)
    console.print(title, style="bold", markup=False)
    by_cost, measure = _measure(rows)
    values = [_value(r, by_cost) for r in rows]
    labels = ["(none)" if r.key is None else safe_text(r.key) for r in rows]
    shown = [
        money_text(r.cost_usd) if by_cost else f"{int(v):,} tokens"
        for r, v in zip(rows, values, strict=True)
    ]
    value_w = max(len(s) for s in shown)
    marks = [f" +{r.unpriced_turns:,} unpriced" if r.unpriced_turns else "" for r in rows]
    # Labels get what 10 cells of bar leave (at most 40); a longer one ends in "…".
    room = console.width - value_w - max(map(len, marks)) - 13
    label_w = min(max(len(s) for s in labels), 40, max(room, 12))
    width = max(10, console.width - label_w - value_w - max(map(len, marks)) - 3)
    top = max(values)
    for label, value, text, mark in zip(labels, values, shown, marks, strict=True):
        line = Text(f"{fit(label, label_w):<{label_w}} ")
        line.append(f"{_bar(value, top, width):<{width}}", style="cyan")
        line.append(f" {text:>{value_w}}")
        line.append(mark, style="yellow")
        console.print(line, soft_wrap=True)
    _chart_total(report, by_cost, measure)


def _render_stacked_chart(report: SpendReport, title: str) -> None:
    """Two levels: one bar per period, stacked by the dimension's largest keys (then "other")."""
    from rich.text import Text

    console = out_console()
    console.print(title, style="bold", markup=False)
    by_cost, measure = _measure(report.rows)
    weight: dict[str | None, float] = {}
    for period in report.periods:
        for r in period.rows:
            weight[r.key] = weight.get(r.key, 0.0) + _value(r, by_cost)
    top_keys = sorted(weight, key=lambda k: -weight[k])[: len(_STACK_STYLES) - 1]
    styles: dict[str | None, str] = {key: _STACK_STYLES[i] for i, key in enumerate(top_keys)}
    # Without colour each series has its own glyph (the last one is "other").
    glyphs: dict[str | None, str] = dict(
        zip([*top_keys, "__other__"], series_marks(console, len(top_keys) + 1), strict=True)
    )
    have = {str(p.key): p for p in report.periods}
    time = report.keys[0]
    keys = _period_keys(report, time)
    totals = [_value(have[k].total, by_cost) if k in have else 0.0 for k in keys]
    shown = [
        money_text(have[k].total.cost_usd if k in have else None)
        if by_cost
        else f"{int(t):,} tokens"
        for k, t in zip(keys, totals, strict=True)
    ]
    label_w = max(len(k) for k in keys)
    value_w = max(len(s) for s in shown)
    width = max(10, console.width - label_w - value_w - 3)
    top = max(totals) or 1.0
    for key, text in zip(keys, shown, strict=True):
        line = Text(f"{key:<{label_w}} ")
        used = 0
        segments: dict[str | None, float] = {}
        for r in have[key].rows if key in have else []:
            slot = r.key if r.key in styles else "__other__"
            segments[slot] = segments.get(slot, 0.0) + _value(r, by_cost)
        for slot in [*top_keys, "__other__"]:
            cells = round(segments.get(slot, 0.0) / top * width)
            if cells:
                line.append(glyphs[slot] * cells, style=styles.get(slot) or "dim")
                used += cells
        line.append(" " * max(0, width - used))
        line.append(f" {text:>{value_w}}")
        console.print(line, soft_wrap=True)
    entries = [(glyphs[k], styles[k], "(none)" if k is None else safe_text(k)) for k in top_keys]
    if len(weight) > len(top_keys):
        entries.append((glyphs["__other__"], "dim", "other"))
    one_line = sum(len(name) + 4 for _, _, name in entries) + 8 <= console.width
    legend = Text("legend:" + (" " if one_line else ""))
    for glyph, style, name in entries:
        legend.append("" if one_line else "\n  ")
        legend.append(f"{glyph} ", style=style)
        legend.append(f"{name}  " if one_line else name)
    console.print(legend, soft_wrap=True)
    _chart_total(report, by_cost, measure)


def _chart_total(report: SpendReport, by_cost: bool, measure: str) -> None:
    total = report.total
    out_console().print(
        f"TOTAL {money_text(total.cost_usd)} over {total.turns:,} turns "
        f"({total.input_tokens + total.output_tokens:,} tokens); bars show {measure}.",
        markup=False,
    )


def _explain_unpriced(unpriced: list[tuple[str, int]], priced_now: frozenset[str]) -> None:
    from rich.text import Text

    console = out_console()
    for model_id, turns in unpriced:
        shown = safe_text(model_id)
        if model_id in priced_now:
            # A runtime that prices on read (the upstream one) left the cost NULL: a price
            # exists, and reprice stores the estimate the runtime would have shown.
            line = Text(f"not yet priced: {shown}, {turns:,} turn(s) with no stored cost")
            line.stylize("yellow")
            line.append(" → agora prices reprice  (a current price exists)")
        else:
            line = Text(f"unpriced: {shown}, {turns:,} turn(s) with no cost", style="yellow")
            line.append(_pricing_hint(model_id))
        console.print(line, soft_wrap=not console.is_terminal)


def _pricing_hint(model_id: str) -> str:
    # A command to copy: quoted for the shell, control characters escaped for the terminal.
    quoted = safe_text(shlex.quote(model_id))
    manual = f"agora prices set {quoted} --input X --output Y"
    if model_id.startswith("us-gov.") or ":us-gov-" in model_id:
        return f" (GovCloud: priced by hand) → {manual}"
    if "/" in model_id and not model_id.startswith("arn:"):
        return f" → agora prices seed {quoted}  (or {manual})"
    return f" → agora prices seed --missing  (or {manual})"


# --- agora spend fold ------------------------------------------------------------------------

_DURATION_RE = re.compile(r"^([0-9]{1,6})([smhd])$")
_UNIT_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def _duration_ms(text: str, what: str) -> int:
    match = _DURATION_RE.match(text.strip()) if text.strip() != "0" else None
    if text.strip() == "0":
        return 0
    if match is None:
        raise InvalidInput(f"{what} {text!r} is not a duration such as 90m, 2h or 1d")
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


def _day_range(text: str, what: str) -> tuple[date, date]:
    first, sep, last = text.partition("..")
    if not sep:
        raise InvalidInput(f"{what} {text!r} is not a range FROM..TO (2026-11-01..2026-11-30)")
    return (
        parse_bound(first, what=what, end=False),
        parse_bound(last, what=what, end=True),
    )


@app.command("fold")
def fold(
    through: Annotated[
        str | None,
        typer.Option(
            "--through",
            metavar="YYYY-MM-DD",
            help="Fold closed days up to this day, inclusive (default: the last closed day).",
            show_default=False,
        ),
    ] = None,
    refold: Annotated[
        str | None,
        typer.Option(
            "--refold",
            metavar="FROM..TO",
            help="Fold these days again (they are marked dirty first).",
            show_default=False,
        ),
    ] = None,
    grace: Annotated[
        str,
        typer.Option(
            "--grace",
            metavar="DURATION",
            help="A day is closed this long after its end (30m, 2h, 1d; at most 7 days).",
        ),
    ] = "2h",
    verify: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="Instead of folding: compare folded days with the ledger and mark those that "
            "differ dirty (late rows from other writers). Weekly from cron.",
        ),
    ] = False,
    window: Annotated[
        str | None,
        typer.Argument(
            metavar="FROM..TO",
            help="With --verify: only these days (default: every folded day).",
            show_default=False,
        ),
    ] = None,
    days: Annotated[
        str | None,
        typer.Option(
            "--days",
            metavar="FROM..TO",
            help="The same as FROM..TO after --verify.",
            show_default=False,
        ),
    ] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Fold closed UTC days of the ledger into the daily fold, dirty days first (for cron).

    Each day is one transaction that replaces the day's folded rows: idempotent, resumable after
    a kill, and safe from several processes at once (one folds a day, the others skip it).
    Reports read folded clean days from the fold, so a year of spend costs milliseconds. What
    agora changes in the past (reprice, threads delete, demo --force) marks its days dirty;
    rows other writers add to a folded day are found by --verify.

    Nightly: agora spend fold. Weekly: agora spend fold --verify (every folded day), or
    agora spend fold --verify 2026-11-01..2026-11-30 for a range.

    Privileged: run it as a superuser or a BYPASSRLS role, with no tenant (AGORA_TENANT, a
    profile's tenant): a tenant session, the app role or a role under row-level security is
    refused (exit 2).

    Example: agora spend fold --grace 2h --json
    """
    from agora_cli.store import _fold as folding

    if window is not None and days is not None and window != days:
        raise InvalidInput("give the days to verify once (FROM..TO or --days)")
    days = days if window is None else window
    if days is not None and not verify:
        raise InvalidInput("FROM..TO goes with --verify (to fold days again, use --refold)")
    if verify and (through is not None or refold is not None):
        raise InvalidInput("--verify compares folded days; it does not take --through/--refold")
    grace_ms = _duration_ms(grace, "--grace")
    through_day = parse_day(through, what="--through") if through is not None else None
    refold_days = _day_range(refold, "--refold") if refold is not None else None
    verify_days = _day_range(days, "--days") if days is not None else None
    engine = open_db(db)
    if verify:
        with progress("verifying", None) as advance:
            checked = folding.verify(
                engine,
                from_day=verify_days[0] if verify_days else None,
                to_day=verify_days[1] if verify_days else None,
                progress=lambda done, total: advance(1),
            )
        bad = [d.isoformat() for d in checked.mismatched]
        finish(
            {"days_checked": checked.days_checked, "mismatched": bad},
            as_json=as_json,
            show=f"Checked {checked.days_checked:,} folded day(s): "
            + (
                f"{len(bad)} differ from the ledger and are now dirty: {', '.join(bad)}; "
                "the next `agora spend fold` refolds them."
                if bad
                else "all match the ledger."
            ),
            exit_code=0,
        )
        return
    with progress("folding", None) as advance:
        result = folding.fold(
            engine,
            through=through_day,
            refold=refold_days,
            grace_ms=grace_ms,
            progress=lambda done, total: advance(1),
        )
    finish(
        {
            "folded_days": result.folded,
            "refolded_days": result.refolded,
            "skipped_days": result.skipped,
            "unfoldable_days": result.unfoldable,
            "rows": result.rows,
            "through": None if result.through is None else result.through.isoformat(),
        },
        as_json=as_json,
        show=(
            f"Folded {result.folded:,} day(s) ({result.refolded:,} dirty ones again) "
            f"holding {result.rows:,} ledger row(s), through "
            f"{'—' if result.through is None else result.through.isoformat()}"
            + (f"; {result.skipped} being folded by another process" if result.skipped else "")
            + (
                f"; {result.unfoldable} left raw (identities that differ only by trailing spaces)"
                if result.unfoldable
                else ""
            )
            + "."
        ),
    )
