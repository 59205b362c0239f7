"""`agora prices`: price models from models.dev, set prices by hand, resolve and reprice."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from agora_cli.cli.options import DbOpt, JsonOpt, open_db
from agora_cli.cli.output import Col, emit_json, money, out_console, render_table, safe_text, say
from agora_cli.store.clock import SystemClock, day_window, iso_ms, parse_day
from agora_cli.store.errors import InvalidInput

if TYPE_CHECKING:
    from agora_cli.store.catalog import ModelCatalog
    from agora_cli.store.pricing import ModelPrice, PriceChange, SeedResult

__all__ = ["app"]

app = typer.Typer(
    help="Price models from models.dev, set prices by hand, resolve and reprice.",
    no_args_is_help=True,
)

DryRunOpt = Annotated[
    bool, typer.Option("--dry-run", help="Report what would change; write nothing.")
]
_RATES = (
    ("input_per_1m", "input"),
    ("output_per_1m", "output"),
    ("cache_read_per_1m", "cache read"),
    ("cache_write_per_1m", "cache write"),
)


# --- documents --------------------------------------------------------------------------------


def _price_doc(price: ModelPrice) -> dict[str, Any]:
    from agora_cli.store.pricing import tiers_to_json

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
    from agora_cli.store.pricing import tiers_to_json

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
    for c in result.prices:
        where = f" ({safe_text(c.catalog_id)})" if c.catalog_id else ""
        console.print(f"{c.action:<9} {safe_text(c.model)}{where}: {_describe(c)}", markup=False)
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
            "source": f"{p.source or '—'}{', tiered' if p.tiers else ''}",
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
            help="Catalog URL or file (else $AGORA_MODELS_DEV_URL, else models.dev).",
            show_default=False,
        ),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            metavar="S",
            help="Give up on the catalog fetch after S seconds, retries included (at most 600).",
        ),
    ] = 10.0,
    offline: Annotated[
        bool,
        typer.Option(
            "--offline",
            help="Use the cached copy of the catalog URL; no network (exit 3 if there is none).",
        ),
    ] = False,
    dry_run: DryRunOpt = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Price models from the models.dev catalog, all or nothing, and show what changed.

    Prices are stored under the model id the provider publishes (openai/gpt-4o-mini is stored as
    gpt-4o-mini) with source models.dev; the ledger finds them through the resolution rules.
    --missing prices every ledger model id that resolves to no price and never overwrites one.
    When the fetch fails and a copy of that catalog is cached, the copy is used, with a warning.

    Example: agora prices seed openai/gpt-4o-mini anthropic/claude-sonnet-4-5 --dry-run
    """
    from agora_cli.store.catalog import check_timeout, fetch_catalog
    from agora_cli.store.engine import retry_transient
    from agora_cli.store.pricing import (
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
    from agora_cli.store.engine import retry_transient
    from agora_cli.store.pricing import check_price, set_price

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


@app.command("list")
def list_(
    model: Annotated[
        str | None, typer.Option("--model", metavar="M", help="Only this model id.")
    ] = None,
    history: Annotated[
        bool, typer.Option("--history", help="Every row, retired prices included.")
    ] = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List current prices (with --history, retired ones too), in USD per 1M tokens.

    Example: agora prices list --model gpt-4o-mini --history
    """
    from agora_cli.store.pricing import list_prices

    engine = open_db(db, readonly=True)
    with engine.connect() as conn:
        prices = list_prices(conn, model_id=model, history=history)
    if as_json:
        emit_json({"prices": [_price_doc(p) for p in prices]})
        return
    cols = _PRICE_COLS
    if history:
        cols = [*_PRICE_COLS, Col("effective_from", "Since (UTC)"), Col("current", "Current")]
    render_table(
        _price_rows(prices),
        cols,
        title="Prices, USD per 1M tokens",
        empty="no prices yet: agora prices seed openai/gpt-4o-mini, or agora prices set …",
    )


@app.command("resolve")
def resolve(
    model_id: Annotated[str, typer.Argument(help="A model id as the ledger records it.")],
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show which price a ledger model id resolves to, and by which rule (exit 0 either way).

    Rules, in order: exact id; route prefixes dropped (openrouter/openai/gpt-4o-mini → gpt-4o-mini,
    Bedrock ARNs and us./eu./apac./global. profiles); one trailing calendar date dropped.

    Example: agora prices resolve openrouter/openai/gpt-4o-mini-2024-07-18
    """
    from agora_cli.store.pricing import resolve_current_price

    engine = open_db(db, readonly=True)
    with engine.connect() as conn:
        res = resolve_current_price(conn, model_id)
    if as_json:
        emit_json(
            {
                "model_id": res.model_id,
                "matched": res.matched,
                "rule": res.rule,
                "price": None if res.price is None else _price_doc(res.price),
            }
        )
        return
    console = out_console()
    shown = safe_text(model_id)
    if res.price is None:
        console.print(f"{shown}: no price (unpriced; its ledger rows have no cost).", markup=False)
        _talk(
            f"price it: agora prices seed --missing, or agora prices set {model_id} "
            "--input X --output Y",
            style="yellow",
        )
        return
    console.print(f"{shown} → {safe_text(res.matched)} (rule: {res.rule})", markup=False)
    render_table(_price_rows([res.price]), _PRICE_COLS, title="USD per 1M tokens")


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
    dry_run: DryRunOpt = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Fill unknown (NULL) ledger costs from the current prices, as estimates.

    Provider-reported costs are never touched. Reports the model ids that are still unpriced.

    Example: agora prices reprice --from 2026-11-01 --to 2026-11-30 --dry-run
    """
    from agora_cli.store.engine import retry_transient
    from agora_cli.store.usage import RepriceResult
    from agora_cli.store.usage import reprice as run_reprice

    start = None if from_ is None else day_window(parse_day(from_, what="--from"))[0]
    end = None if to is None else day_window(parse_day(to, what="--to"))[1]
    if start is not None and end is not None and start > end:
        raise InvalidInput(f"--from {from_} is after --to {to}")
    engine = open_db(db)

    def run() -> RepriceResult:
        with engine.begin() as conn:
            return run_reprice(conn, from_ms=start, to_ms=end, dry_run=dry_run)

    result = retry_transient(run)
    if as_json:
        emit_json(
            {
                "repriced": result.repriced,
                "still_unpriced": result.still_unpriced,
                "unpriced_models": [
                    {"model_id": m.model_id, "rows": m.rows} for m in result.unpriced_models
                ],
            }
        )
        return
    verb = "would be repriced" if dry_run else "repriced"
    out_console().print(
        f"{result.repriced:,} row(s) {verb}; {result.still_unpriced:,} still unpriced."
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
                Col("rows", "Rows", justify="right"),
                Col("fix", "Price it with"),
            ],
        )
        say("or try: agora prices seed --missing", style="yellow")
