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
    from agora_cli.store._catalog import CatalogCopies, ModelCatalog
    from agora_cli.store._pricing import (
        CatalogMatch,
        ModelPrice,
        NewModel,
        PriceChange,
        PriceCheck,
        Resolution,
        SeedResult,
        SkippedModel,
        UnpricedTurns,
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
    rows = []
    for p in prices:
        since = iso_ms(p.effective_from) or ""
        rows.append(
            {
                "model": p.model_id,
                **{key: _rate(getattr(p, key)) for key, _label in _RATES},
                "source": f"{_source(p.source)}{', tiered' if p.tiers else ''}",
                "since": since[:10],
                "current": "yes" if p.is_current else "",
            }
        )
    return rows


# At 80 columns the model, its input and output rates, whose price it is and since when stay;
# the cache rates give way first, then (at 60) the date (the table says so; --csv and --json have
# them all).
_PRICE_COLS = [
    Col("model", "Model"),
    Col("input_per_1m", "Input", justify="right", wrap=False),
    Col("output_per_1m", "Output", justify="right", wrap=False),
    Col("cache_read_per_1m", "Cache read", justify="right", wrap=False, drop=2),
    Col("cache_write_per_1m", "Cache write", justify="right", wrap=False, drop=1),
    Col("source", "Source", wrap=False),
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
    taken), manual, or models.dev alone for prices seeded before the provider was recorded; Since
    is the UTC day it took effect. On a narrow terminal the cache rates give way first. --csv
    prints every column, tiers as JSON. Are they current? agora prices status.

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
    # Since: the UTC day the price took effect (--json and --csv have the instant).
    # With --history, whether a row is the current price gives way before since when it held.
    cols = [*_PRICE_COLS, Col("since", "Since", wrap=False, drop=4)]
    if history:
        cols.append(Col("current", "Current", wrap=False, drop=3))
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


# --- status ------------------------------------------------------------------------------------

_STATE_WORDS = {
    "changed": "changed",
    "missing": "no longer listed",
    "no_price": "listed without a price",
    "unchanged": "unchanged",
    "not_from_catalog": "not from the catalog",
}
_FIELD_WORDS = dict(_RATES) | {"tiers": "tiers"}
_SHOWN_NEW = 20  # new listings a person sees; --json has them all


def _when(ms: int | None) -> str:
    """An instant for people: ``2026-11-20 14:03 UTC``."""
    return "unknown" if ms is None else (iso_ms(ms) or "")[:16].replace("T", " ") + " UTC"


def _copy_doc(copy: ModelCatalog | None, now: int) -> dict[str, Any] | None:
    if copy is None:
        return None
    return {"downloaded_at": iso_ms(copy.downloaded_at), "age_s": copy.copy_age_ms(now) // 1000}


def _status_doc(
    copies: CatalogCopies,
    checks: list[PriceCheck],
    new: list[NewModel] | None,
    unpriced: list[UnpricedTurns],
    window: tuple[Any, Any],
    now: int,
) -> dict[str, Any]:
    from agora_cli.store._pricing import CHECK_STATES, RATE_FIELDS, STALE_STATES

    compared = copies.current
    counts: dict[str, int] = dict.fromkeys(CHECK_STATES, 0)
    for check in checks:
        counts[check.state] += 1

    def value(field: str, v: Any) -> Any:
        return money(v) if field in RATE_FIELDS else v

    return {
        "current": not any(counts[s] for s in STALE_STATES) and not unpriced,
        "catalog": {
            "source": copies.source,
            "compared_with": copies.compared_with,
            "live_error": copies.live_error,
            "modified_at": iso_ms(compared.modified_at),
            "downloaded_at": iso_ms(compared.downloaded_at),
            "cache": _copy_doc(copies.cached, now),
        },
        "from": window[0].isoformat(),
        "to": window[1].isoformat(),
        "prices": [
            {
                "model": c.price.model_id,
                "source": c.price.source,
                "effective_from": iso_ms(c.price.effective_from),
                "state": c.state,
                "catalog_id": c.catalog_id,
                "changes": [
                    {
                        "field": f.field,
                        "stored": value(f.field, f.stored),
                        "catalog": value(f.field, f.catalog),
                    }
                    for f in c.changes
                ],
            }
            for c in checks
        ],
        "new_models": None
        if new is None
        else [
            {
                "catalog_id": m.catalog_id,
                "provider": m.provider,
                "model": m.model_id,
                "input_per_1m": None if m.price is None else money(m.price.input_per_1m),
                "output_per_1m": None if m.price is None else money(m.price.output_per_1m),
                "ledger_ids": list(m.ledger_ids),
            }
            for m in new
        ],
        "unpriced": [
            {"model_id": u.model_id, "turns": u.turns, "priced_as": u.priced_as} for u in unpriced
        ],
        "counts": {
            **counts,
            "new_models": None if new is None else len(new),
            "unpriced_models": len(unpriced),
            "unpriced_turns": sum(u.turns for u in unpriced),
        },
    }


def _change_text(check: PriceCheck) -> str:
    if check.state != "changed":
        return _STATE_WORDS[check.state]
    parts = []
    for f in check.changes:
        if f.field == "tiers":
            parts.append("tiers differ")
        else:
            parts.append(f"{_FIELD_WORDS[f.field]} {_rate(f.stored)} → {_rate(f.catalog)}")
    return "; ".join(parts)


def _show_status(doc: dict[str, Any], checks: list[PriceCheck], copies: CatalogCopies) -> None:
    from agora_cli.store._pricing import STALE_STATES

    console = out_console()
    cat, counts = doc["catalog"], doc["counts"]
    now = SystemClock().now_ms()
    cache = copies.cached
    cache_words = (
        f"the cache from {_when(cache.downloaded_at)} ({_ago(cache.copy_age_ms(now))} old)"
        if cache is not None
        else None
    )
    if cat["compared_with"] == "live":
        line = f"compared with the live catalog {cat['source']}"
        if cache_words:
            line += f"; new models since {cache_words}"
        else:
            line += " (no cached copy to find new models against)"
    elif cat["compared_with"] == "file":
        changed = _when(copies.current.modified_at)
        line = f"compared with the catalog file {cat['source']} (changed {changed})"
    elif copies.offline:
        line = f"--offline: compared with {cache_words} of {cat['source']}"
    else:
        line = f"live catalog unreachable, compared with {cache_words} of {cat['source']}"
    console.print(safe_text(line + "."), markup=False)
    if copies.live_error:
        _talk(f"the live catalog: {copies.live_error}", style="yellow")
    stale = [c for c in checks if c.state in STALE_STATES]
    if stale:
        render_table(
            [
                {
                    "model": c.price.model_id,
                    "provider": (c.catalog_id or "").split("/", 1)[0] or None,
                    "since": (iso_ms(c.price.effective_from) or "")[:10],
                    "what": _change_text(c),
                }
                for c in stale
            ],
            [
                Col("model", "Model"),
                Col("provider", "Listed by", wrap=False, drop=1),
                Col("since", "Since", wrap=False),
                Col("what", "Against the catalog"),
            ],
            title="Prices that are not current",
        )
    new = doc["new_models"]
    if new:
        shown = new[:_SHOWN_NEW]
        render_table(
            [
                {
                    **m,
                    "input_per_1m": _rate(m["input_per_1m"]),
                    "output_per_1m": _rate(m["output_per_1m"]),
                    "ledger_ids": ", ".join(m["ledger_ids"]),
                }
                for m in shown
            ],
            [
                Col("catalog_id", "Listing"),
                Col("input_per_1m", "Input", justify="right", wrap=False),
                Col("output_per_1m", "Output", justify="right", wrap=False),
                Col("ledger_ids", "For the ledger's"),
            ],
            title="New in the catalog since the cached copy",
        )
        if len(new) > len(shown):
            say(f"… and {len(new) - len(shown)} more (--json lists them all)")
    unpriced = doc["unpriced"]
    if unpriced:
        render_table(
            [
                {
                    "model_id": u["model_id"],
                    "turns": u["turns"],
                    "fix": "agora prices reprice"
                    if u["priced_as"] is not None
                    else "agora prices seed --missing",
                }
                for u in unpriced
            ],
            [
                Col("model_id", "Model id"),
                Col.number("turns", "Turns"),
                Col("fix", "Fix"),
            ],
            title=f"Ledger turns with no cost, {doc['from']} to {doc['to']}",
        )
    tally = [
        f"{counts['unchanged']:,} unchanged",
        *(
            f"{counts[s]:,} {_STATE_WORDS[s]}"
            for s in ("changed", "missing", "no_price", "not_from_catalog")
            if counts[s]
        ),
    ]
    if doc["current"]:
        console.print(f"prices are current: {', '.join(tally)}.", markup=False)
    else:
        turns = (
            f"; {counts['unpriced_turns']:,} turn(s) of {counts['unpriced_models']:,} model id(s) "
            "with no cost"
            if unpriced
            else ""
        )
        console.print(f"prices are not current: {', '.join(tally)}{turns}.", markup=False)
    names = [c.catalog_id for c in checks if c.state == "changed" and c.catalog_id]
    if names:
        _talk(
            f"take the catalog's prices: agora prices seed {' '.join(names)} (then agora "
            "prices reprice --estimates)",
            style="yellow",
        )
    if any(c.state in ("missing", "no_price") for c in checks):
        say(
            "a price the catalog no longer gives stays as it is: set it by hand (agora prices "
            "set MODEL --input X --output Y) or seed it from another provider",
            style="yellow",
        )


@app.command("status")
def status(
    catalog: Annotated[
        str | None,
        typer.Option(
            "--catalog",
            metavar="URL|PATH",
            help="Catalog URL or file (else the environment, else the profile's catalog, else "
            "models.dev).",
            envvar="AGORA_MODELS_DEV_URL",
            show_envvar=True,
            show_default=False,
        ),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            metavar="S",
            help="Give up on the live catalog after S seconds (at most 600); the cached copy "
            "answers then.",
        ),
    ] = 5.0,
    offline: Annotated[
        bool,
        typer.Option(
            "--offline", help="Compare with the cached copy only; no network (exit 3 if none)."
        ),
    ] = False,
    last: Annotated[
        str,
        typer.Option(
            "--last",
            metavar="30d|4w|3m",
            help="The ledger window searched for turns with no cost: the last N UTC days, "
            "weeks or months, up to today.",
        ),
    ] = "30d",
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Answer "are my prices current?": stored prices against the catalog, and unpriced turns.

    Compares every current price seeded from models.dev with its provider's listing in the live
    catalog (a short --timeout; the cache is read, never written) or, when that cannot be
    reached or with --offline, with the cached copy, saying from when: unchanged, changed (field
    by field), no longer listed, or listed without a price; a price set by hand is not compared.
    Also lists what the live catalog added since the cached copy (for the providers you price
    and the spellings unpriced ledger ids need), and the ledger's model ids with turns of no
    cost in the window. Exit 0 when current; 1 when a price changed or is gone or turns have no
    cost (a cron check); 3 only when neither the live catalog nor a cached copy can be read.

    Example: agora prices status --last 7d --json
    """
    from agora_cli.store._catalog import check_timeout, read_catalog_copies
    from agora_cli.store._pricing import (
        check_prices,
        list_prices,
        list_unpriced_turns,
        new_catalog_models,
        source_provider,
    )
    from agora_cli.store._windows import last_window

    check_timeout(timeout, "--timeout")
    now = SystemClock().now_ms()
    window = last_window(last, ms_to_date(now), what="--last")
    engine = open_db(db, readonly=True)
    with engine.connect() as conn:
        prices = list_prices(conn)
        unpriced = list_unpriced_turns(conn, from_day=window[0], to_day=window[1])
    copies = read_catalog_copies(catalog, timeout=timeout, offline=offline)
    checks = check_prices(prices, copies.current)
    new: list[NewModel] | None = None
    if copies.live is not None and copies.cached is not None:
        providers = {source_provider(p.source) for p in prices} - {None}
        new = new_catalog_models(
            copies.live,
            copies.cached,
            providers=[p for p in providers if p is not None],
            unpriced_ids=[u.model_id for u in unpriced if u.priced_as is None],
        )
    doc = _status_doc(copies, checks, new, unpriced, window, now)
    finish(
        doc,
        as_json=as_json,
        show=lambda: _show_status(doc, checks, copies),
        exit_code=0 if doc["current"] else 1,
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


def _catalog_doc(
    outcome: CatalogMatch | SkippedModel, decision: CatalogMatch | SkippedModel | None
) -> dict[str, Any]:
    """What the catalog says about an id, and what seed --missing's plan decides for it."""
    from agora_cli.store._pricing import CatalogMatch, SkippedModel

    if not isinstance(outcome, CatalogMatch):
        return {
            "matched": None,
            "skipped": outcome.reason,
            "candidates": list(outcome.candidates),
        }
    held_back = None
    if isinstance(decision, SkippedModel):
        held_back = {"reason": decision.reason, "candidates": list(decision.candidates)}
    return {
        "matched": outcome.model_id,
        "catalog_id": outcome.catalog_id,
        "rule": outcome.rule,
        "provider": outcome.provider,
        "choice": outcome.choice,
        "agreeing": list(outcome.agreeing),
        "passed_over": list(outcome.passed_over),
        "price": {k: v for k, v in _price_doc(outcome.price).items() if k in _CATALOG_PRICE_KEYS},
        "seed_missing_would_price": isinstance(decision, CatalogMatch),
        "seed_missing_skipped": held_back,
    }


def _show_catalog(
    outcome: CatalogMatch | SkippedModel,
    decision: CatalogMatch | SkippedModel | None,
    *,
    priced: bool,
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
    if isinstance(decision, CatalogMatch):
        then = "reprice --estimates corrects" if priced else "reprice fills"
        _talk(
            f"agora prices seed --missing would price {decision.model_id} from "
            f"{decision.catalog_id} (then agora prices {then} its past rows)",
            style="yellow",
        )
    elif decision is not None:
        shown = ", ".join(decision.candidates)
        hint = f" ({shown})" if shown else ""
        _talk(
            "agora prices seed --missing would not price it: "
            f"{_REASONS.get(decision.reason, decision.reason)}{hint}",
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

    cat: ModelCatalog | None = None
    if catalog is not None:
        from agora_cli.store._catalog import check_timeout, fetch_catalog

        check_timeout(timeout, "--timeout")
        cat = fetch_catalog(
            None if catalog == "default" else catalog, timeout=timeout, offline=offline
        )
        _stale_warning(cat, SystemClock().now_ms())
    engine = open_db(db, readonly=True)
    outcome: CatalogMatch | SkippedModel | None = None
    decision: CatalogMatch | SkippedModel | None = None
    with engine.connect() as conn:
        res = resolve_current_price(conn, model_id)
        if cat is not None:
            from agora_cli.store._pricing import match_catalog_price, plan_missing_prices

            outcome = match_catalog_price(model_id, cat)
            # The plan seed --missing writes from, with this id as if the ledger had it: the
            # answer takes every other ledger id's claim into account, as the seed does.
            plan = plan_missing_prices(conn, catalog=cat, also=[model_id], hints=False)
            decision = plan.decision(model_id)
    doc = _resolution_doc(res)
    if cat is not None and outcome is not None:
        doc["catalog"] = {"source": cat.source, **_catalog_doc(outcome, decision)}

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
            _show_catalog(outcome, decision, priced=res.price is not None)

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
