"""`agora quota`: an actor's, a tenant's or every saved budget's windows, for people and cron."""

from __future__ import annotations

# internal on purpose: the operator's commands import the store's private modules (cli/__init__.py)
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agora_cli.cli.options import (
    CsvOpt,
    DbOpt,
    JsonOpt,
    ReadDbOpt,
    TzOpt,
    open_read_db,
    refuse_unscoped,
    scoped_tenant,
)
from agora_cli.cli.output import (
    Col,
    emit_csv,
    finish,
    money,
    money_text,
    one_format,
    render_table,
    safe_text,
    say,
    table_time,
)
from agora_cli.store._clock import SystemClock, iso_ms, parse_instant
from agora_cli.store._errors import InvalidInput
from agora_cli.store._values import check_identity, check_limits

if TYPE_CHECKING:
    from agora_cli.store._budgets import BudgetStatus

__all__ = ["quota"]

_BAR_WIDTH = 20


def _tokens_opt(period: str) -> Any:
    return typer.Option(
        f"--{period}-tokens",
        help=f"{period.capitalize()} limit on input + output tokens (overrides a saved one).",
        show_default=False,
    )


def _usd_opt(period: str) -> Any:
    return typer.Option(
        f"--{period}-usd",
        help=f"{period.capitalize()} limit in USD (overrides a saved one).",
        show_default=False,
    )


def quota(
    actor: Annotated[
        str | None,
        typer.Option("--actor", help="The actor whose windows to show.", show_default=False),
    ] = None,
    tenant: Annotated[
        str | None,
        typer.Option(
            "--tenant",
            help="The tenant whose windows to show (a ledger row's own tenant, else its thread's).",
            show_default=False,
        ),
    ] = None,
    every: Annotated[
        bool, typer.Option("--all", help="Every saved budget, of every scope (for cron).")
    ] = False,
    at: Annotated[
        str | None,
        typer.Option(
            "--at",
            metavar="ISO",
            help="The instant (ISO 8601; no zone = UTC); usage after it does not count. "
            "Default: now.",
            show_default=False,
        ),
    ] = None,
    day_tokens: Annotated[int | None, _tokens_opt("day")] = None,
    day_usd: Annotated[float | None, _usd_opt("day")] = None,
    week_tokens: Annotated[int | None, _tokens_opt("week")] = None,
    week_usd: Annotated[float | None, _usd_opt("week")] = None,
    month_tokens: Annotated[int | None, _tokens_opt("month")] = None,
    month_usd: Annotated[float | None, _usd_opt("month")] = None,
    provider_cost_only: Annotated[
        bool,
        typer.Option(
            "--provider-cost-only", help="Count provider-reported costs only, not estimates."
        ),
    ] = False,
    fail_on_warning: Annotated[
        bool,
        typer.Option("--fail-on-warning", help="Exit 1 on a warning too, not only when exhausted."),
    ] = False,
    tz: TzOpt = "UTC",
    db: DbOpt = None,
    read_db: ReadDbOpt = None,
    as_json: JsonOpt = False,
    csv: CsvOpt = False,
) -> None:
    """Show quota windows against limits: exit 1 when one is exhausted (for cron).

    With --actor or --tenant: that scope's day and month (in --tz, UTC by default), and every
    period it has a saved budget for (`agora budgets set`), or a limit given here (which
    overrides the saved one).
    With --all: every saved budget. Each window reports used, limit, % used, remaining and a
    state: ok, warning (at the budget's warn-at share) or exhausted (a limit reached). Tokens
    are input + output; USD sums known costs. Weeks start Monday 00:00 (--tz, else UTC). Each
    window is one indexed SUM in the database.

    Example: agora quota --all --fail-on-warning || echo "a budget needs attention"
    """
    from agora_cli.store._budgets import (
        evaluate_budgets,
        list_budgets,
        scope_has_usage,
        scope_quota,
    )

    if actor is not None or every:
        refuse_unscoped("--actor" if actor is not None else "--all")
    tenant = scoped_tenant(tenant)
    scopes = [name for name, on in (("actor", actor), ("tenant", tenant)) if on is not None]
    if len(scopes) + int(every) != 1:
        raise InvalidInput("give exactly one of --actor A, --tenant T or --all")
    one_format(as_json, csv)
    limits = {
        "day": (day_tokens, day_usd),
        "week": (week_tokens, week_usd),
        "month": (month_tokens, month_usd),
    }
    for period, (tokens, amount) in limits.items():
        check_limits(f"{period}_", tokens, amount)
    if every and any(v != (None, None) for v in limits.values()):
        raise InvalidInput("limits given here apply to --actor or --tenant, not --all")
    scope_kind = scopes[0] if scopes else "global"
    scope_ref = actor if scope_kind == "actor" else tenant
    if scope_ref is not None:
        check_identity(f"--{scope_kind}", scope_ref)
    at_ms = parse_instant(at, what="--at") if at is not None else SystemClock().now_ms()
    engine = open_read_db(db, read_db, tenant=tenant)
    notes: list[str] = []
    with engine.connect() as conn:
        if every:
            statuses = evaluate_budgets(
                conn,
                list_budgets(conn),
                at_ms=at_ms,
                provider_cost_only=provider_cost_only,
                tz=tz,
            )
        else:
            statuses = scope_quota(
                conn,
                scope_kind=scope_kind,
                scope_ref=scope_ref,
                at_ms=at_ms,
                limits=limits,
                provider_cost_only=provider_cost_only,
                tz=tz,
            )
            unused = all(s.tokens == 0 and s.unpriced_turns == 0 for s in statuses)
            if unused and not scope_has_usage(conn, scope_kind=scope_kind, scope_ref=scope_ref):
                notes.append(
                    f"the ledger has no usage of {scope_kind} {scope_ref!r} at all "
                    f"(a typo? agora spend --by {scope_kind} lists them)"
                )
        conn.rollback()
    exhausted = any(s.state == "exhausted" for s in statuses)
    warning = any(s.state == "warning" for s in statuses)
    failed = exhausted or (fail_on_warning and warning)
    if csv:
        emit_csv([_csv_line(s) for s in statuses], _CSV_COLUMNS)
    else:
        finish(
            _document(statuses, every, scope_kind, scope_ref, at_ms, notes),
            as_json=as_json,
            show=lambda: _render(statuses, every, scope_kind, scope_ref, at_ms),
        )
    for note in notes:
        say(f"note: {note}", style="yellow")
    if failed:
        raise typer.Exit(1)


def _window_doc(s: BudgetStatus) -> dict[str, Any]:
    b = s.budget
    return {
        "from": iso_ms(s.from_ms),
        "to": iso_ms(s.to_ms),
        "tokens": s.tokens,
        "usd": money(s.usd),
        "unpriced_turns": s.unpriced_turns,
        "limits": {"tokens": b.limit_tokens, "usd": money(b.limit_usd)},
        "warn_at": b.warn_at,
        "percent_used": round(s.percent_used, 2),
        "remaining": {"tokens": s.remaining_tokens, "usd": money(s.remaining_usd)},
        "state": s.state,
        "exhausted": s.state == "exhausted",
        "budget": b.id or None,
    }


def _document(
    statuses: list[BudgetStatus],
    every: bool,
    scope_kind: str,
    scope_ref: str | None,
    at_ms: int,
    notes: list[str],
) -> dict[str, Any]:
    exhausted = any(s.state == "exhausted" for s in statuses)
    warning = any(s.state == "warning" for s in statuses)
    if every:
        budgets = [
            {
                "scope_kind": s.budget.scope_kind,
                "scope_ref": s.budget.scope_ref,
                "period": s.budget.period,
                "note": s.budget.note,
                **_window_doc(s),
            }
            for s in statuses
        ]
        return {"at": iso_ms(at_ms), "budgets": budgets, "exhausted": exhausted, "warning": warning}
    doc: dict[str, Any] = {scope_kind: scope_ref, "at": iso_ms(at_ms)}
    doc.update({s.budget.period: _window_doc(s) for s in statuses})
    doc.update(exhausted=exhausted, warning=warning, notes=notes)
    return doc


_CSV_COLUMNS = [
    Col(name)
    for name in (
        "scope_kind",
        "scope_ref",
        "period",
        "from",
        "to",
        "tokens",
        "usd",
        "unpriced_turns",
        "limit_tokens",
        "limit_usd",
        "warn_at",
        "percent_used",
        "remaining_tokens",
        "remaining_usd",
        "state",
    )
]


def _csv_line(s: BudgetStatus) -> dict[str, Any]:
    b = s.budget
    return {
        "scope_kind": b.scope_kind,
        "scope_ref": b.scope_ref,
        "period": b.period,
        "from": iso_ms(s.from_ms),
        "to": iso_ms(s.to_ms),
        "tokens": s.tokens,
        "usd": money(s.usd),
        "unpriced_turns": s.unpriced_turns,
        "limit_tokens": b.limit_tokens,
        "limit_usd": money(b.limit_usd),
        "warn_at": b.warn_at,
        "percent_used": round(s.percent_used, 2),
        "remaining_tokens": s.remaining_tokens,
        "remaining_usd": money(s.remaining_usd),
        "state": s.state,
    }


def _bar(percent: float, has_limit: bool) -> str:
    if not has_limit:
        return ""
    filled = min(_BAR_WIDTH, round(percent / 100 * _BAR_WIDTH))
    return "█" * filled + "░" * (_BAR_WIDTH - filled)


def _render(
    statuses: list[BudgetStatus],
    every: bool,
    scope_kind: str,
    scope_ref: str | None,
    at_ms: int,
) -> None:
    rows = []
    for s in statuses:
        b = s.budget
        limited = b.limit_tokens is not None or b.limit_usd is not None
        remaining = [
            f"{s.remaining_tokens:,} tokens" if s.remaining_tokens is not None else "",
            money_text(s.remaining_usd) if s.remaining_usd is not None else "",
        ]
        rows.append(
            {
                "scope": "global" if b.scope_kind == "global" else f"{b.scope_kind} {b.scope_ref}",
                "period": f"{b.period} {table_time(iso_ms(s.from_ms))[:10]}",
                "tokens": f"{s.tokens:,}",
                "token_limit": "—" if b.limit_tokens is None else f"{b.limit_tokens:,}",
                "usd": money_text(s.usd),
                "usd_limit": "—" if b.limit_usd is None else money_text(b.limit_usd),
                "used": f"{s.percent_used:,.1f}%" if limited else "—",
                "bar": _bar(s.percent_used, limited),
                "remaining": ", ".join(r for r in remaining if r) or "—",
                "state": s.state.upper() if s.state != "ok" else "ok",
            }
        )
    styles = {"exhausted": "bold red", "warning": "yellow", "ok": None}
    columns = [
        Col("period", wrap=False),
        Col.number("tokens", drop=5),
        Col.number("token_limit", "token limit", drop=3),
        Col.number("usd", "USD", drop=6),
        Col.number("usd_limit", "USD limit", drop=4),
        Col.number("used", "% used"),
        Col("bar", "", wrap=False, drop=1),
        Col("remaining", drop=2),
        Col("state", wrap=False),
    ]
    if every:
        columns.insert(0, Col("scope", wrap=False))
        title = f"Saved budgets at {iso_ms(at_ms)}"
    else:
        title = f"Quota for {scope_kind} {scope_ref} at {iso_ms(at_ms)}"
    render_table(
        rows,
        columns,
        title=safe_text(title),
        row_styles=[styles[s.state] for s in statuses],
        empty="no saved budgets (agora budgets set …)",
    )
    # Per scope its widest window's count (a day's rows are in its month too). A non-finite
    # cost another writer left in the ledger counts here, never in USD (sqlexpr.finite_cost).
    widest: dict[tuple[str, str], int] = {}
    for s in statuses:
        scope = (s.budget.scope_kind, s.budget.scope_ref)
        widest[scope] = max(widest.get(scope, 0), s.unpriced_turns)
    unpriced = sum(widest.values())
    if unpriced:
        say(
            f"{unpriced:,} turn(s) in these windows have no known cost and are not in USD: "
            "agora spend --by model names them (agora prices reprice stores the cost of "
            "those whose model has a price: a runtime that prices on read leaves it NULL).",
            style="yellow",
        )
