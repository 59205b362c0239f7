"""`agora prices`: price models from models.dev, set prices by hand, resolve and reprice."""

from __future__ import annotations

# internal on purpose: the operator's commands import the store's private modules (cli/__init__.py)
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agora_cli.cli.options import CsvOpt, DbOpt, JsonOpt, ReadDbOpt, open_db, open_read_db
from agora_cli.cli.output import (
    Col,
    emit_csv,
    emit_json,
    finish,
    money,
    money_text,
    one_format,
    out_console,
    progress,
    render_table,
    safe_text,
    say,
)
from agora_cli.store._clock import SystemClock, day_window, iso_ms, ms_to_date, parse_day
from agora_cli.store._errors import InvalidInput

if TYPE_CHECKING:
    from agora_cli.store._catalog import ModelCatalog
    from agora_cli.store._pricing import (
        CatalogMatch,
        ModelPrice,
        PriceChange,
        Resolution,
        SeedResult,
        SkippedModel,
    )

__all__ = ["app"]

app = typer.Typer(
    help="Price models from models.dev, set prices by hand, resolve and reprice.",
    no_args_is_help=True,
)

DryRunOpt = Annotated[
    bool, typer.Option("--dry-run", help="Report what would change; write nothing.")
]
TimeoutOpt = Annotated[
    float,
    typer.Option(
        "--timeout",
        metavar="S",
        help="Give up on the catalog fetch after S seconds, retries included (at most 600).",
    ),
]
OfflineOpt = Annotated[
    bool,
    typer.Option(
        "--offline",
        help="Use the cached copy of the catalog URL; no network (exit 3 if there is none).",
    ),
]
_RATES = (
    ("input_per_1m", "input"),
    ("output_per_1m", "output"),
    ("cache_read_per_1m", "cache read"),
    ("cache_write_per_1m", "cache write"),
)


# --- documents --------------------------------------------------------------------------------


def _price_doc(price: ModelPrice) -> dict[str, Any]:
    from agora_cli.store._pricing import tiers_to_json

    return {
        "model": price.model_id,
        "input_per_1m": money(price.input_per_1m),
        "output_per_1m": money(price.output_per_1m),
        "cache_read_per_1m": money(price.cache_read_per_1m),
        "cache_write_per_1m": money(price.cache_write_per_1m),
        "tiers": tiers_to_json(price.tiers),
        "source": price.source,
        "effective_from": iso_ms(price.effective_from),
        "is_current": price.is_current,
    }


def _seed_doc(change: PriceChange) -> dict[str, Any]:
    from agora_cli.store._pricing import tiers_to_json

    p = change.price
    return {
        "model": change.model,
        "catalog_id": change.catalog_id,
        "input_per_1m": money(p.input_per_1m),
        "output_per_1m": money(p.output_per_1m),
        "cache_read_per_1m": money(p.cache_read_per_1m),
        "cache_write_per_1m": money(p.cache_write_per_1m),
        "tiers": tiers_to_json(p.tiers),
        "action": change.action,
    }


# --- for people -------------------------------------------------------------------------------


def _rate(value: float | None) -> str:
    return "—" if value is None else f"{value:.6g}"


def _source(source: str | None) -> str:
    """A price's source for people; ``models.dev`` alone predates recording the provider."""
    if source == "models.dev":
        return "models.dev (provider not recorded)"
    return source or "—"


_CHOICES = {
    "route": "named by the id's route",
    "only": "the only provider listing it",
    "first-party": "first party",
    "hyperscaler": "hyperscaler",
    "agreement": "providers agree",
}


def _choice(match: CatalogMatch) -> str:
    """Whose listing a catalog match took, and why, for people."""
    why = _CHOICES.get(match.choice, match.choice)
    if match.choice == "agreement":
        why = f"{why}: {', '.join(match.agreeing)}"
    elif match.choice == "hyperscaler" and len(match.agreeing) > 1:
        why = f"{why}s agree: {', '.join(match.agreeing)}"
    return f"{match.provider}, {why}"


def _explain(res: Resolution) -> str:
    """One sentence: how a ledger id reached its price, saying plainly what was dropped."""
    if res.price is None or res.matched is None:
        return f"{res.model_id} has no price: its ledger rows have no cost."
    if res.rule == "exact":
        how = f"{res.model_id} is priced as written"
    else:
        dropped = []
        if res.route:
            dropped.append(f"the route {res.route!r} was dropped")
        if res.date:
            dropped.append(f"the date {res.date!r} was dropped")
        how = f"{res.model_id} is priced as {res.matched} ({' and '.join(dropped)})"
    provider = res.provider
    if provider is not None:
        whose = f"the price is {provider}'s (models.dev)"
    elif res.price.source == "models.dev":
        whose = "the price is from models.dev (provider not recorded)"
    elif res.price.source == "manual":
        whose = "the price was set by hand"
    else:
        whose = f"the price's source is {res.price.source or 'not recorded'}"
    return f"{how}; {whose}."


def _describe(change: PriceChange) -> str:
    """The rates for people: all of them when inserted, old → new for those an update changed."""
    new, old = change.price, change.previous
    if change.action == "unchanged":
        return "no change"
    parts = []
    for key, label in _RATES:
        now = getattr(new, key)
        if old is None:
            if now is not None:
                parts.append(f"{label} {_rate(now)}")
        elif getattr(old, key) != now:
            parts.append(f"{label} {_rate(getattr(old, key))} → {_rate(now)}")
    if new.tiers and (old is None or old.tiers != new.tiers):
        sizes = ", ".join(f"{t.size:,}" for t in new.tiers)
        parts.append(f"tiers above {sizes} input tokens")
    elif old is not None and old.tiers and not new.tiers:
        parts.append("tiers removed")
    return ", ".join(parts) + " (USD per 1M tokens)"


_REASONS = {
    "govcloud": "GovCloud is priced differently: set its price by hand",
    "not_in_catalog": "not in the catalog",
    "no_price": "listed without a price",
    "ambiguous": "providers disagree on the price: seed one by name",
    "already_priced": "already has a price (never overwritten)",
    "spelling_conflict": "its catalog price would also reprice another ledger id that resolves to "
    "the same spelling: set this id's own price by hand",
}


def _ago(ms: int) -> str:
    seconds = max(ms, 0) // 1000
    for unit, size in (("day", 86_400), ("hour", 3_600), ("minute", 60)):
        if seconds >= size:
            n = seconds // size
            return f"{n} {unit}{'' if n == 1 else 's'}"
    return f"{seconds} second{'' if seconds == 1 else 's'}"


def _talk(text: str, *, style: str | None = None) -> None:
    """A sentence on stderr holding data (ids, URLs): controls escaped, never read as markup."""
    from rich.markup import escape

    say(escape(safe_text(text)), style=style)


def _catalog_notice(catalog: ModelCatalog, now: int) -> None:
    age = catalog.age_ms(now)
    parts = [
        f"catalog {catalog.source}: {catalog.model_count:,} models from "
        f"{len(catalog.providers):,} providers",
        f"last changed {_ago(age)} ago" if age is not None else "age unknown",
    ]
    if catalog.stale and catalog.stale_reason is None:
        parts.append(f"cached copy from {_ago(catalog.copy_age_ms(now))} ago (--offline)")
    elif catalog.from_cache and not catalog.stale:
        parts.append(f"cached copy still current (downloaded {_ago(catalog.copy_age_ms(now))} ago)")
    _talk("; ".join(parts), style="dim")


def _stale_warning(catalog: ModelCatalog, now: int) -> None:
    """Say on stderr (also under --json) that a failed fetch fell back to the cached copy."""
    if catalog.stale and catalog.stale_reason is not None:
        _talk(
            f"warning: using the cached catalog from {_ago(catalog.copy_age_ms(now))} ago: "
            f"{catalog.stale_reason}",
            style="yellow",
        )


def _render_seed(result: SeedResult, *, missing: bool) -> None:
    console = out_console()
    matches = {m.model_id: m for m in result.matches}
    for c in result.prices:
        match = matches.get(c.model)
        whose = f"; {_choice(match)}" if match is not None else ""
        where = f" ({safe_text(c.catalog_id)}{safe_text(whose)})" if c.catalog_id else ""
        console.print(f"{c.action:<9} {safe_text(c.model)}{where}: {_describe(c)}", markup=False)
        if match is not None and match.ledger_id != c.model:
            console.print(f"{'':<9} for the ledger's {safe_text(match.ledger_id)}", markup=False)
    if missing:
        for s in result.skipped:
            shown = ", ".join(safe_text(c) for c in s.candidates)
            hint = f"; candidates: {shown}" if s.candidates else ""
            console.print(
                f"{'skipped':<9} {safe_text(s.model_id)}: {_REASONS.get(s.reason, s.reason)}{hint}",
                markup=False,
            )
        if result.skipped:
            say(
                "price a skipped id by name (agora prices seed PROVIDER/MODEL) or by hand "
                "(agora prices set MODEL_ID --input X --output Y)",
                style="yellow",
            )
    changed = sum(1 for c in result.prices if c.action != "unchanged")
    if missing and changed and not result.dry_run:
        say(
            "rows estimated before keep their cost: agora prices reprice --estimates "
            "recomputes them from the prices now current",
            style="yellow",
        )
    if result.dry_run:
        say(f"dry run: {changed} price(s) would be written; nothing was written.")
    elif not result.prices and not missing:
        say("nothing to write.")
    else:
        say(f"{changed} price(s) written.")


def _price_rows(prices: list[ModelPrice]) -> list[dict[str, Any]]:

    return [
        {
            "model": p.model_id,
            **{key: _rate(getattr(p, key)) for key, _label in _RATES},
            "source": f"{_source(p.source)}{', tiered' if p.tiers else ''}",
            "effective_from": (iso_ms(p.effective_from) or "")[:16].replace("T", " "),
            "current": "yes" if p.is_current else "",
        }
        for p in prices
    ]


_PRICE_COLS = [
    Col("model", "Model"),
    *(Col(key, label.capitalize(), justify="right") for key, label in _RATES),
    Col("source", "Source"),
]


# --- commands ---------------------------------------------------------------------------------


@app.command("seed")
def seed(
    names: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="PROVIDER/MODEL...",
            help="Catalog names, split on the first '/': openrouter/anthropic/claude-sonnet-4.",
            show_default=False,
        ),
    ] = None,
    missing: Annotated[
        bool,
        typer.Option("--missing", help="Price every unpriced model id the ledger has seen."),
    ] = False,
    catalog: Annotated[
        str | None,
        typer.Option(
            "--catalog",
            metavar="URL|PATH",
            help="Catalog URL or file (else the environment, else the profile's catalog, "
            "else models.dev; fetched copies are cached in the user cache folder, or "
            "$AGORA_CACHE_DIR).",
            envvar="AGORA_MODELS_DEV_URL",
            show_envvar=True,
            show_default=False,
        ),
    ] = None,
    timeout: TimeoutOpt = 10.0,
    offline: OfflineOpt = False,
    dry_run: DryRunOpt = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Price models from the models.dev catalog, all or nothing, and show what changed.

    Prices are stored under the model id the provider publishes (openai/gpt-4o-mini is stored as
    gpt-4o-mini) with source `models.dev:<provider>`; the ledger finds them through the resolution
    rules. --missing prices every ledger model id that has no price, or only one borrowed from a
    less specific spelling the catalog prices differently (eu. profiles, dated snapshots), and
    never overwrites a price. When the fetch fails and a copy of that catalog is cached, the
    copy is used, with a warning.

    Example: agora prices seed openai/gpt-4o-mini anthropic/claude-sonnet-4-5 --dry-run
    """
    from agora_cli.store._catalog import check_timeout, fetch_catalog
    from agora_cli.store._engine import retry_transient
    from agora_cli.store._pricing import (
        seed_missing_prices,
        seed_prices_from_models_dev,
        split_model_name,
    )

    if missing == bool(names):
        raise InvalidInput("name PROVIDER/MODEL... to seed, or use --missing (not both)")
    for name in names or ():
        split_model_name(name)
    check_timeout(timeout, "--timeout")
    engine = open_db(db)
    cat = fetch_catalog(catalog, timeout=timeout, offline=offline)
    now = SystemClock().now_ms()
    _stale_warning(cat, now)

    def run() -> SeedResult:
        with engine.begin() as conn:
            if missing:
                return seed_missing_prices(conn, catalog=cat, dry_run=dry_run)
            return seed_prices_from_models_dev(conn, names or [], catalog=cat, dry_run=dry_run)

    result = retry_transient(run)
    if as_json:
        doc: dict[str, Any] = {
            "catalog": result.catalog,
            "prices": [_seed_doc(c) for c in result.prices],
        }
        if cat.stale:
            doc["catalog_stale"] = True
            doc["catalog_age_s"] = cat.copy_age_ms(now) // 1000
            doc["catalog_error"] = cat.stale_reason
        if missing:
            doc["skipped"] = [
                {"model_id": s.model_id, "reason": s.reason, "candidates": list(s.candidates)}
                for s in result.skipped
            ]
        emit_json(doc)
        return
    _catalog_notice(cat, now)
    _render_seed(result, missing=missing)


@app.command("set")
def set_(
    model: Annotated[str, typer.Argument(help="The model id to price, as the ledger records it.")],
    input_: Annotated[float, typer.Option("--input", metavar="X", help="USD per 1M input tokens.")],
    output: Annotated[
        float, typer.Option("--output", metavar="Y", help="USD per 1M output tokens.")
    ],
    cache_read: Annotated[
        float | None,
        typer.Option("--cache-read", metavar="X", help="USD per 1M cache-read tokens."),
    ] = None,
    cache_write: Annotated[
        float | None,
        typer.Option("--cache-write", metavar="X", help="USD per 1M cache-write tokens."),
    ] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Set a model's price by hand (source manual); the old price is kept as history.

    Cache rates are optional and fall back to the input rate. Setting the current price again
    writes nothing (action unchanged).

    Example: agora prices set gpt-4o-mini --input 0.15 --output 0.60 --cache-read 0.075
    """
    from agora_cli.store._engine import retry_transient
    from agora_cli.store._pricing import check_price, set_price

    check_price("--input", input_)
    check_price("--output", output)
    for flag, value in (("--cache-read", cache_read), ("--cache-write", cache_write)):
        if value is not None:
            check_price(flag, value)
    engine = open_db(db)

    def run() -> PriceChange:
        with engine.begin() as conn:
            return set_price(
                conn,
                model,
                input_per_1m=input_,
                output_per_1m=output,
                cache_read_per_1m=cache_read,
                cache_write_per_1m=cache_write,
            )

    change = retry_transient(run)
    if as_json:
        emit_json({**_price_doc(change.price), "action": change.action})
        return
    shown = safe_text(change.model)
    if change.action == "unchanged":
        out_console().print(
            f"{shown}: unchanged (that is already its current price).", markup=False
        )
        return
    out_console().print(f"{shown}: {change.action} — {_describe(change)}.", markup=False)


_CSV_COLS = [
    Col("model"),
    Col("input_per_1m"),
    Col("output_per_1m"),
    Col("cache_read_per_1m"),
    Col("cache_write_per_1m"),
    Col("tiers"),
    Col("source"),
    Col("effective_from"),
    Col("is_current"),
]


def _csv_row(price: ModelPrice) -> dict[str, Any]:
    import json

    doc = _price_doc(price)
    doc["tiers"] = None if doc["tiers"] is None else json.dumps(doc["tiers"])
    doc["is_current"] = int(price.is_current)
    return doc


@app.command("list")
def list_(
    model: Annotated[
        str | None, typer.Option("--model", metavar="M", help="Only this model id.")
    ] = None,
    history: Annotated[
        bool, typer.Option("--history", help="Every row, retired prices included.")
    ] = False,
    db: DbOpt = None,
    read_db: ReadDbOpt = None,
    as_json: JsonOpt = False,
    csv: CsvOpt = False,
) -> None:
    """List current prices (with --history, retired ones too), in USD per 1M tokens.

    Source says whose price it is: `models.dev:<provider>` (the catalog provider whose listing was
    taken), manual, or models.dev alone for prices seeded before the provider was recorded.
    --csv prints every column, tiers as JSON.

    Example: agora prices list --model gpt-4o-mini --history
    """
    from agora_cli.store._pricing import list_prices

    one_format(as_json, csv)
    engine = open_read_db(db, read_db)
    with engine.connect() as conn:
        prices = list_prices(conn, model_id=model, history=history)
    if csv:
        emit_csv([_csv_row(p) for p in prices], _CSV_COLS)
        return
    cols = _PRICE_COLS
    if history:
        cols = [*_PRICE_COLS, Col("effective_from", "Since (UTC)"), Col("current", "Current")]
    finish(
        {"prices": [_price_doc(p) for p in prices]},
        as_json=as_json,
        show=lambda: render_table(
            _price_rows(prices),
            cols,
            title="Prices, USD per 1M tokens",
            empty="no prices yet: agora prices seed openai/gpt-4o-mini, or agora prices set …",
        ),
    )


_CATALOG_PRICE_KEYS = (
    "model",
    "input_per_1m",
    "output_per_1m",
    "cache_read_per_1m",
    "cache_write_per_1m",
    "tiers",
    "source",
)


def _resolution_doc(res: Resolution) -> dict[str, Any]:
    return {
        "model_id": res.model_id,
        "matched": res.matched,
        "rule": res.rule,
        "price": None if res.price is None else _price_doc(res.price),
        "provider": res.provider,
        "route": res.route,
        "date": res.date,
        "explanation": _explain(res),
    }


def _catalog_doc(outcome: CatalogMatch | SkippedModel, *, more_specific: bool) -> dict[str, Any]:
    from agora_cli.store._pricing import CatalogMatch

    if not isinstance(outcome, CatalogMatch):
        return {
            "matched": None,
            "skipped": outcome.reason,
            "candidates": list(outcome.candidates),
        }
    return {
        "matched": outcome.model_id,
        "catalog_id": outcome.catalog_id,
        "rule": outcome.rule,
        "provider": outcome.provider,
        "choice": outcome.choice,
        "agreeing": list(outcome.agreeing),
        "passed_over": list(outcome.passed_over),
        "price": {k: v for k, v in _price_doc(outcome.price).items() if k in _CATALOG_PRICE_KEYS},
        "seed_missing_would_price": more_specific,
    }


def _show_catalog(
    outcome: CatalogMatch | SkippedModel, *, more_specific: bool, priced: bool
) -> None:
    from agora_cli.store._pricing import CatalogMatch

    console = out_console()
    if not isinstance(outcome, CatalogMatch):
        shown = ", ".join(outcome.candidates)
        hint = f" (candidates: {shown})" if shown else ""
        reason = _REASONS.get(outcome.reason, outcome.reason)
        console.print(safe_text(f"the catalog: {reason}{hint}"), markup=False)
        return
    console.print(
        safe_text(f"the catalog: {outcome.catalog_id} (rule: {outcome.rule}; {_choice(outcome)})"),
        markup=False,
    )
    if outcome.passed_over:
        passed = ", ".join(outcome.passed_over)
        console.print(
            safe_text(f"  not taken: {passed} (only resellers list that spelling)"), markup=False
        )
    render_table(_price_rows([outcome.price]), _PRICE_COLS, title="The catalog's price")
    if more_specific:
        then = "reprice --estimates corrects" if priced else "reprice fills"
        _talk(
            f"agora prices seed --missing would price {outcome.model_id} from "
            f"{outcome.catalog_id} (then agora prices {then} its past rows)",
            style="yellow",
        )


@app.command("resolve")
def resolve(
    model_id: Annotated[str, typer.Argument(help="A model id as the ledger records it.")],
    catalog: Annotated[
        str | None,
        typer.Option(
            "--catalog",
            metavar="URL|PATH",
            help="Also show what the catalog says (URL or file; 'default': $AGORA_MODELS_DEV_URL"
            " or models.dev).",
            show_default=False,
        ),
    ] = None,
    timeout: TimeoutOpt = 10.0,
    offline: OfflineOpt = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show which price a ledger model id resolves to, by which rule, and whose price it is.

    Rules, in order: exact id; route prefixes dropped (openrouter/openai/gpt-4o-mini → gpt-4o-mini,
    Bedrock ARNs and us./eu./apac./jp./au./global. profiles); one trailing calendar date dropped.
    When a route or a date was dropped it says so ("priced as gpt-4o"). With --catalog it also
    shows the catalog's choice for the id: the spelling, the provider and why (first party,
    hyperscaler, the providers that agree), and whether seed --missing would price it anew.
    Exit 0 either way: it is a question.

    Example: agora prices resolve openrouter/openai/gpt-4o-mini-2024-07-18
    """
    from agora_cli.store._pricing import resolve_current_price

    if catalog is not None:
        from agora_cli.store._catalog import check_timeout

        check_timeout(timeout, "--timeout")
    engine = open_db(db, readonly=True)
    with engine.connect() as conn:
        res = resolve_current_price(conn, model_id)
    doc = _resolution_doc(res)
    outcome: CatalogMatch | SkippedModel | None = None
    more_specific = False
    if catalog is not None:
        from agora_cli.store._catalog import fetch_catalog
        from agora_cli.store._pricing import match_catalog_price, needs_catalog_price

        cat = fetch_catalog(
            None if catalog == "default" else catalog, timeout=timeout, offline=offline
        )
        _stale_warning(cat, SystemClock().now_ms())
        outcome = match_catalog_price(model_id, cat)
        more_specific = needs_catalog_price(res, outcome)
        doc["catalog"] = {
            "source": cat.source,
            **_catalog_doc(outcome, more_specific=more_specific),
        }

    def show() -> None:
        console = out_console()
        console.print(safe_text(_explain(res)), markup=False)
        if res.price is None:
            _talk(
                f"price it: agora prices seed --missing, or agora prices set {model_id} "
                "--input X --output Y",
                style="yellow",
            )
        else:
            rule = f"rule: {res.rule}; priced as {res.matched}"
            title = safe_text(f"USD per 1M tokens ({rule})")
            render_table(_price_rows([res.price]), _PRICE_COLS, title=title)
        if outcome is not None:
            _show_catalog(outcome, more_specific=more_specific, priced=res.price is not None)

    finish(doc, as_json=as_json, show=show)


@app.command("reprice")
def reprice(
    from_: Annotated[
        str | None,
        typer.Option("--from", metavar="D", help="First UTC day (YYYY-MM-DD), inclusive."),
    ] = None,
    to: Annotated[
        str | None,
        typer.Option("--to", metavar="D", help="Last UTC day (YYYY-MM-DD), inclusive."),
    ] = None,
    last: Annotated[
        str | None,
        typer.Option(
            "--last",
            metavar="2d|1w|1m",
            help="Instead of --from/--to: the last N UTC days, weeks or months, up to today "
            "(a cron step: agora prices reprice --last 2d).",
            show_default=False,
        ),
    ] = None,
    estimates: Annotated[
        bool,
        typer.Option(
            "--estimates",
            help="Also recompute rows already estimated (never provider-reported ones).",
        ),
    ] = False,
    batch: Annotated[
        int,
        typer.Option(
            "--batch", min=1, max=10_000, metavar="N", help="--estimates: rows per transaction."
        ),
    ] = 1_000,
    dry_run: DryRunOpt = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Fill unknown (NULL) ledger costs from the current prices, as estimates.

    Provider-reported costs are never touched (a known cost without a source is the
    provider's). Reports the model ids that are still unpriced. A runtime that prices on read
    (the upstream AdonisJS runtime stores NULL and prices when it reads) leaves every turn to
    this command: run it from cron (--last 2d) so spend, quota and budgets see those costs.
    --estimates first recomputes the rows already estimated (after a price correction, or after
    seed --missing priced a more specific spelling), in batches of --batch rows, each its own
    transaction: an interrupted run is safe to repeat. It reports the rows whose cost changed
    and the estimated total before and after.

    Example: agora prices reprice --from 2026-11-01 --to 2026-11-30 --estimates --dry-run
    """
    from agora_cli.store._engine import retry_transient
    from agora_cli.store._usage import EstimateBatch, RepriceResult, recompute_estimates
    from agora_cli.store._usage import reprice as run_reprice
    from agora_cli.store._windows import report_window

    start: int | None
    end: int | None
    if last is not None:
        first_day, last_day = report_window(from_, to, last, ms_to_date(SystemClock().now_ms()))
        start, end = day_window(first_day)[0], day_window(last_day)[1]
    else:
        start = None if from_ is None else day_window(parse_day(from_, what="--from"))[0]
        end = None if to is None else day_window(parse_day(to, what="--to"))[1]
    if start is not None and end is not None and start > end:
        raise InvalidInput(f"--from {from_} is after --to {to}")
    engine = open_db(db)
    examined, recomputed, before, after = 0, 0, 0.0, 0.0
    if estimates:
        cursor: str | None = None
        with progress("recomputing estimates", None) as advance:
            while True:

                def one(after_id: str | None = cursor) -> EstimateBatch:
                    with engine.begin() as conn:
                        return recompute_estimates(
                            conn,
                            from_ms=start,
                            to_ms=end,
                            after=after_id,
                            limit=batch,
                            dry_run=dry_run,
                        )

                done = retry_transient(one)
                examined += done.examined
                recomputed += done.recomputed
                before += done.before_usd
                after += done.after_usd
                advance(done.examined)
                if done.done:
                    break
                cursor = done.next_after

    def run() -> RepriceResult:
        with engine.begin() as conn:
            return run_reprice(conn, from_ms=start, to_ms=end, dry_run=dry_run)

    result = retry_transient(run)
    doc: dict[str, Any] = {
        "repriced": result.repriced,
        "still_unpriced": result.still_unpriced,
        "unpriced_models": [
            {"model_id": m.model_id, "rows": m.rows} for m in result.unpriced_models
        ],
    }
    if estimates:
        doc.update(recomputed=recomputed, before_usd=money(before), after_usd=money(after))

    def show() -> None:
        would = "would be " if dry_run else ""
        if estimates:
            out_console().print(
                f"{recomputed:,} of {examined:,} estimated row(s) {would}recomputed; "
                f"their estimated total {money_text(before)} → {money_text(after)}.",
                markup=False,
            )
        out_console().print(
            f"{result.repriced:,} row(s) {would}repriced; {result.still_unpriced:,} still "
            "unpriced.",
            markup=False,
        )
        if result.unpriced_models:
            render_table(
                [
                    {
                        "model_id": m.model_id,
                        "rows": m.rows,
                        "fix": f"agora prices set {m.model_id} --input X --output Y",
                    }
                    for m in result.unpriced_models
                ],
                [
                    Col("model_id", "Unpriced model id"),
                    Col.number("rows", "Rows"),
                    Col("fix", "Price it with"),
                ],
            )
            say("or try: agora prices seed --missing", style="yellow")

    finish(doc, as_json=as_json, show=show)
