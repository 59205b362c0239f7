"""`agora budgets`: saved spending limits per actor, tenant or the whole platform."""

from __future__ import annotations

# internal on purpose: the operator's commands import the store's private modules (cli/__init__.py)
import enum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agora_cli.cli.options import CsvOpt, DbOpt, JsonOpt, TzOpt, open_db
from agora_cli.cli.output import (
    Col,
    emit_csv,
    finish,
    money,
    money_text,
    one_format,
    render_table,
    table_time,
)
from agora_cli.store._clock import iso_ms
from agora_cli.store._errors import InvalidInput
from agora_cli.store._windows import PERIODS

if TYPE_CHECKING:
    from agora_cli.store._budgets import Budget

__all__ = ["app"]

app = typer.Typer(
    help=(
        "Save spending limits per actor, tenant or the whole platform; `agora quota` checks "
        "them.\n\nExample: agora budgets set --tenant acme --period month --usd 500 --by ops"
    ),
    no_args_is_help=True,
)

PeriodChoice = enum.StrEnum("PeriodChoice", {p: p for p in PERIODS})  # type: ignore[misc]

ActorOpt = Annotated[
    str | None, typer.Option("--actor", help="An actor's budget.", show_default=False)
]
TenantOpt = Annotated[
    str | None, typer.Option("--tenant", help="A tenant's budget.", show_default=False)
]
GlobalOpt = Annotated[
    bool, typer.Option("--global", help="The whole platform's budget (every scope together).")
]


def _scope(actor: str | None, tenant: str | None, everyone: bool) -> tuple[str, str | None]:
    given = [(kind, ref) for kind, ref in (("actor", actor), ("tenant", tenant)) if ref is not None]
    if len(given) + int(everyone) != 1:
        raise InvalidInput("give exactly one of --actor A, --tenant T or --global")
    return given[0] if given else ("global", None)


def budget_document(b: Budget) -> dict[str, Any]:
    return {
        "id": b.id,
        "scope_kind": b.scope_kind,
        "scope_ref": b.scope_ref,
        "period": b.period,
        "limit_usd": money(b.limit_usd),
        "limit_tokens": b.limit_tokens,
        "warn_at": b.warn_at,
        "note": b.note,
        "created_by": b.created_by,
        "created_at": iso_ms(b.created_at),
        "updated_at": iso_ms(b.updated_at),
    }


@app.command("set")
def set_(
    period: Annotated[
        PeriodChoice,
        typer.Option(
            "--period",
            help="The UTC period: day, week (from Monday) or month.",
            case_sensitive=False,
        ),
    ],
    by: Annotated[
        str,
        typer.Option(
            "--by", metavar="WHO", help="Who sets it (kept for the audit).", show_default=False
        ),
    ],
    actor: ActorOpt = None,
    tenant: TenantOpt = None,
    everyone: GlobalOpt = False,
    limit_usd: Annotated[
        float | None,
        typer.Option("--usd", help="The limit in USD (finite, >= 0).", show_default=False),
    ] = None,
    limit_tokens: Annotated[
        int | None,
        typer.Option(
            "--tokens", help="The limit on input + output tokens (>= 0).", show_default=False
        ),
    ] = None,
    warn_at: Annotated[
        float,
        typer.Option("--warn-at", help="Warn at this share of a limit: a fraction in (0, 1]."),
    ] = 0.8,
    note: Annotated[
        str | None, typer.Option("--note", help="Why this budget.", show_default=False)
    ] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Save the budget of a scope and period, or update the one that exists.

    At least one of --usd and --tokens. `agora quota` reports it; `agora quota --all` checks
    every saved budget from cron (exit 1 when one is exhausted).

    Example: agora budgets set --tenant acme --period month --usd 500 --warn-at 0.8 --by ops
    """
    from agora_cli.store._budgets import set_budget

    scope_kind, scope_ref = _scope(actor, tenant, everyone)
    from agora_cli.store._engine import retry_transient

    engine = open_db(db)

    def run() -> Any:
        with engine.begin() as conn:
            return set_budget(
                conn,
                scope_kind=scope_kind,
                scope_ref=scope_ref,
                period=str(period.value),
                created_by=by,
                limit_usd=limit_usd,
                limit_tokens=limit_tokens,
                warn_at=warn_at,
                note=note,
            )

    change = retry_transient(run)
    b = change.budget
    limits = ", ".join(
        part
        for part in (
            None if b.limit_usd is None else money_text(b.limit_usd),
            None if b.limit_tokens is None else f"{b.limit_tokens:,} tokens",
        )
        if part
    )
    who = "global" if b.scope_kind == "global" else f"{b.scope_kind} {b.scope_ref}"
    finish(
        {"action": change.action, "budget": budget_document(b)},
        as_json=as_json,
        show=f"{change.action}: the {b.period} budget of {who} is {limits} "
        f"(warn at {b.warn_at:.0%}).",
    )


_CSV_FIELDS = (
    "id",
    "scope_kind",
    "scope_ref",
    "period",
    "limit_usd",
    "limit_tokens",
    "warn_at",
    "note",
    "created_by",
    "created_at",
    "updated_at",
)
_COLUMNS = [
    Col("scope", wrap=False),
    Col("period", wrap=False),
    Col.number("usd", "USD limit"),
    Col.number("tokens", "token limit"),
    Col.number("warn", "warn at", drop=2),
    Col.text("note", drop=1),
    Col("updated", "set by / when", drop=3),
]


@app.command("list")
def list_(
    actor: ActorOpt = None,
    tenant: TenantOpt = None,
    everyone: GlobalOpt = False,
    tz: TzOpt = "UTC",
    db: DbOpt = None,
    as_json: JsonOpt = False,
    csv: CsvOpt = False,
) -> None:
    """List saved budgets (all, or one scope's), by scope then period.

    Example: agora budgets list --tenant acme --json
    """
    from agora_cli.store._budgets import list_budgets

    one_format(as_json, csv)
    filtered = actor is not None or tenant is not None or everyone
    kind, ref = _scope(actor, tenant, everyone) if filtered else (None, None)
    engine = open_db(db, readonly=True)
    with engine.connect() as conn:
        budgets = list_budgets(conn, scope_kind=kind, scope_ref=ref)
        conn.rollback()
    docs = [budget_document(b) for b in budgets]
    if csv:
        emit_csv(docs, [Col(name) for name in _CSV_FIELDS])
        return
    rows = [
        {
            "scope": "global" if b.scope_kind == "global" else f"{b.scope_kind} {b.scope_ref}",
            "period": b.period,
            "usd": "—" if b.limit_usd is None else money_text(b.limit_usd),
            "tokens": "—" if b.limit_tokens is None else f"{b.limit_tokens:,}",
            "warn": f"{b.warn_at:.0%}",
            "note": b.note or "",
            "updated": f"{b.created_by}, {table_time(iso_ms(b.updated_at))}",
        }
        for b in budgets
    ]
    finish(
        {"budgets": docs},
        as_json=as_json,
        show=lambda: render_table(
            rows, _COLUMNS, empty="no saved budgets (agora budgets set …)", fuller="--json"
        ),
    )


@app.command("remove")
def remove(
    actor: ActorOpt = None,
    tenant: TenantOpt = None,
    everyone: GlobalOpt = False,
    period: Annotated[
        PeriodChoice | None,
        typer.Option(
            "--period",
            help="Only this period (default: all of the scope's).",
            show_default=False,
            case_sensitive=False,
        ),
    ] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Remove a scope's saved budget of one period, or all of its periods; exit 1 if none.

    Example: agora budgets remove --actor alice --period day
    """
    from agora_cli.store._budgets import remove_budgets

    scope_kind, scope_ref = _scope(actor, tenant, everyone)
    engine = open_db(db)
    with engine.begin() as conn:
        removed = remove_budgets(
            conn,
            scope_kind=scope_kind,
            scope_ref=scope_ref,
            period=None if period is None else str(period.value),
        )
    who = "global" if scope_kind == "global" else f"{scope_kind} {scope_ref}"
    finish(
        {"removed": removed},
        as_json=as_json,
        show=f"removed {removed} budget(s) of {who}.",
        exit_code=0 if removed else 1,
    )
