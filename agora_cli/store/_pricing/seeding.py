"""Seeding prices from the models.dev catalog: named models, or every model the ledger has seen.

``seed_prices_from_models_dev`` prices ``provider/model`` names all or nothing;
``seed_missing_prices`` prices every ledger model id that needs a price — none yet, or only a
borrowed one where the catalog lists the id's more specific spelling at its own price — never
overwriting one, by the choice rules of pricing-and-ledger.md ("Pricing what the ledger has
seen"), and reports what it could not price and why. Every price seeded records its provider:
``source='models.dev:<provider>'``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from difflib import get_close_matches
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select

from agora_cli.store._clock import Clock
from agora_cli.store._dialects import dialect_of
from agora_cli.store._errors import InvalidInput, ModelNotInCatalog
from agora_cli.store._pricing.rules import (
    ARN_RE,
    FIRST_PARTY_PROVIDERS,
    HYPERSCALERS,
    ROUTE_ALIASES,
    ModelPrice,
    Resolution,
    is_bedrock_id,
    is_govcloud,
    price_from_catalog,
    resolution_candidates,
    resolve_model_price,
    route_forms,
    split_model_name,
    strip_date_suffix,
)
from agora_cli.store._pricing.table import PriceChange, current_prices, write_prices
from agora_cli.store._schema import token_usage as u
from agora_cli.store._values import check_identity

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from agora_cli.store._catalog import ModelCatalog


__all__ = [
    "CatalogMatch",
    "MissingPlan",
    "SeedResult",
    "SkippedModel",
    "ledger_model_ids",
    "match_catalog_price",
    "needs_catalog_price",
    "plan_missing_prices",
    "seed_missing_prices",
    "seed_prices_from_models_dev",
]


@dataclass(frozen=True)
class SkippedModel:
    """A ledger model id that ``seed --missing`` could not price, why, and names to choose from."""

    model_id: str
    reason: str
    candidates: tuple[str, ...] = ()


@dataclass(frozen=True)
class CatalogMatch:
    """The catalog price chosen for a ledger id, the spelling it is stored under, and whose it is.

    ``provider`` is the provider whose listing was taken (also in ``price.source`` as
    ``models.dev:<provider>``); ``choice`` says why: ``route`` (the ledger id's route named the
    provider), ``only`` (the one provider listing the spelling), ``first-party``,
    ``hyperscaler`` or ``agreement`` (every provider listing it charges the same); ``agreeing``
    names the providers that rule stood on. ``rule`` is how the ledger id reaches the spelling
    (``exact``, ``prefix``, ``date``, ``prefix+date``). ``passed_over`` names more specific
    spellings that only resellers list (``302ai/gpt-5.4-mini-2026-03-17``), not taken because a
    first-party or hyperscaler lists a less specific one.
    """

    ledger_id: str
    model_id: str
    catalog_id: str
    price: ModelPrice
    provider: str = ""
    choice: str = "only"
    agreeing: tuple[str, ...] = ()
    rule: str = "exact"
    passed_over: tuple[str, ...] = ()


@dataclass(frozen=True)
class SeedResult:
    """The outcome of a seed: the catalog read, each price written (or not), and skipped ids.

    ``matches`` (``seed --missing`` only): the catalog match behind each price in ``prices``,
    in the same order — whose listing it is, why, and for which ledger id.
    """

    catalog: str
    prices: tuple[PriceChange, ...]
    skipped: tuple[SkippedModel, ...] = ()
    dry_run: bool = False
    matches: tuple[CatalogMatch, ...] = ()


def seed_prices_from_models_dev(
    conn: Connection,
    names: Sequence[str],
    *,
    catalog: ModelCatalog,
    dry_run: bool = False,
    clock: Clock | None = None,
) -> SeedResult:
    """Price ``provider/model`` names from the catalog, all or nothing, in the caller's transaction.

    A missing provider or model, or a model without a usable cost, raises ``ModelNotInCatalog``
    naming every such name with close-name suggestions, before anything is written; a model id
    that cannot be stored (over 255 UTF-16 code units) is ``InvalidInput``, also before.
    """
    parsed = list(dict.fromkeys(split_model_name(n) for n in names))
    if not parsed:
        raise InvalidInput("name at least one PROVIDER/MODEL to seed (or use --missing)")
    problems: list[str] = []
    wanted: dict[str, tuple[str, ModelPrice]] = {}
    for provider, model in parsed:
        name = f"{provider}/{model}"
        entry = catalog.entry(provider, model)
        if entry is None:
            problems.append(_not_found_message(catalog, provider, model))
            continue
        price = price_from_catalog(entry, model, provider)
        if price is None:
            what = "no price" if entry.get("cost") is None else "no usable price"
            problems.append(
                f"{name} has {what} in the catalog (set one by hand: "
                f"agora prices set {model} --input X --output Y)"
            )
            continue
        earlier = wanted.get(model)
        if earlier is not None and not earlier[1].same_rates(price):
            raise InvalidInput(
                f"{earlier[0]} and {name} would both price {model!r} but at different rates: "
                "seed one of them"
            )
        wanted.setdefault(model, (name, price))
    if problems:
        raise ModelNotInCatalog("; ".join(problems))
    changes = write_prices(
        conn, list(wanted.values()), overwrite=True, dry_run=dry_run, clock=clock
    )
    return SeedResult(catalog=catalog.source, prices=tuple(changes), dry_run=dry_run)


def _not_found_message(catalog: ModelCatalog, provider: str, model: str) -> str:
    name = f"{provider}/{model}"
    elsewhere = [f"{p}/{model}" for p in catalog.providers_listing(model)]
    if provider not in catalog.providers:
        close = get_close_matches(provider, list(catalog.providers), n=3, cutoff=0.6)
        hints = [f"{p}/{model}" for p in close if model in catalog.providers[p]] or close
        hints += [h for h in elsewhere if h not in hints]
        what = f"provider {provider!r} is not in the catalog ({name})"
    else:
        close = get_close_matches(model, list(catalog.providers[provider]), n=3, cutoff=0.6)
        hints = [f"{provider}/{m}" for m in close] + elsewhere
        what = f"{name} is not in the catalog"
    hints = list(dict.fromkeys(hints))[:5]
    return f"{what} (did you mean {', '.join(hints)}?)" if hints else what


def match_catalog_price(
    model_id: str, catalog: ModelCatalog, *, hints: bool = True
) -> CatalogMatch | SkippedModel:
    """Choose the catalog price for a ledger model id by the rules of ``seed --missing``.

    1. A route naming a catalog provider (directly, through ``ROUTE_ALIASES``, or a Bedrock ARN
       for ``amazon-bedrock``) selects it: only its listings count.
    2. The spellings are tried from the most specific to the least (the id as written, then the
       resolution rules' forms in their order); the first one listed with a price is priced,
       under that spelling — except that a dated spelling only resellers list gives way to its
       undated spelling when a first-party provider or a hyperscaler lists that (a reseller's
       dated listing must not displace the maker's price).
    3. Among the providers listing that spelling: the first party's listing; else the
       hyperscalers' when they agree; else the price every provider agrees on (to 1e-9
       relative); else ``ambiguous``. A spelling one provider lists is priced from it.
    GovCloud ids are never priced from here. ``hints=False`` leaves out the close names a
    ``not_in_catalog`` id is reported with (a difflib search of the whole catalog: tens of ms
    an id).
    """
    if is_govcloud(model_id):
        return SkippedModel(model_id, "govcloud")
    chosen = _route_provider(model_id, catalog)
    rules = dict(resolution_candidates(model_id))
    unpriced: list[str] = []

    def listings(spelling: str) -> list[tuple[str, ModelPrice]]:
        listed = []
        for provider in [chosen] if chosen else catalog.providers_listing(spelling):
            entry = catalog.entry(provider, spelling)
            if entry is None:
                continue
            price = price_from_catalog(entry, spelling, provider)
            if price is None:
                unpriced.append(f"{provider}/{spelling}")
            else:
                listed.append((provider, price))
        return listed

    for spelling, rule in rules.items():
        listed = listings(spelling)
        if not listed:
            continue
        if chosen:
            provider, price = listed[0]
            catalog_id = f"{provider}/{spelling}"
            return CatalogMatch(
                model_id, spelling, catalog_id, price, provider, "route", (provider,), rule
            )
        if not any(_authoritative(p, spelling) for p, _ in listed):
            # Only resellers list this spelling. If it is a dated snapshot whose undated
            # spelling the maker or a cloud lists, that price wins (a reseller's listing of
            # gpt-5.4-mini-2026-03-17 without cache rates must not displace OpenAI's).
            undated = strip_date_suffix(spelling)
            base = listings(undated) if undated in rules else []
            if undated is not None and any(_authoritative(p, undated) for p, _ in base):
                outcome = _decide(model_id, undated, rules[undated], base)
                if isinstance(outcome, CatalogMatch):
                    passed = tuple(f"{p}/{spelling}" for p, _ in listed)
                    return replace(outcome, passed_over=passed)
        return _decide(model_id, spelling, rule, listed)
    if unpriced:
        return SkippedModel(model_id, "no_price", tuple(dict.fromkeys(unpriced)))
    if not hints:
        return SkippedModel(model_id, "not_in_catalog")
    forms = route_forms(model_id)
    return SkippedModel(model_id, "not_in_catalog", _close_names(catalog, forms, chosen))


def _route_provider(model_id: str, catalog: ModelCatalog) -> str | None:
    """The catalog provider the ledger id's route names, if any (the outermost one wins)."""
    for form in route_forms(model_id)[:-1]:
        if ARN_RE.match(form):
            name = "amazon-bedrock"
        elif "/" in form:
            head = form.split("/", 1)[0]
            name = ROUTE_ALIASES.get(head, head)
        else:
            continue
        if name in catalog.providers:
            return name
    return None


def _first_party(provider: str, spelling: str) -> bool:
    return provider in FIRST_PARTY_PROVIDERS or (
        provider == "amazon-bedrock" and is_bedrock_id(spelling)
    )


def _authoritative(provider: str, spelling: str) -> bool:
    return _first_party(provider, spelling) or provider in HYPERSCALERS


def _decide(
    ledger_id: str, spelling: str, rule: str, listed: list[tuple[str, ModelPrice]]
) -> CatalogMatch | SkippedModel:
    """Which listing of ``spelling`` prices it (``listed`` is sorted by provider)."""

    def match(choice: str, group: list[tuple[str, ModelPrice]]) -> CatalogMatch:
        provider, price = group[0]
        agreeing = tuple(p for p, _ in group)
        catalog_id = f"{provider}/{spelling}"
        return CatalogMatch(
            ledger_id, spelling, catalog_id, price, provider, choice, agreeing, rule
        )

    if len(listed) == 1:
        return match("only", listed)
    for choice, group in (
        ("first-party", [(p, x) for p, x in listed if _first_party(p, spelling)]),
        ("hyperscaler", [(p, x) for p, x in listed if p in HYPERSCALERS]),
        ("agreement", listed),
    ):
        if group and all(price.same_rates(group[0][1]) for _, price in group):
            return match(choice, group)
    return SkippedModel(ledger_id, "ambiguous", tuple(f"{p}/{spelling}" for p, _ in listed))


def _close_names(
    catalog: ModelCatalog, forms: Sequence[str], provider: str | None
) -> tuple[str, ...]:
    hints: list[str] = []
    for form in reversed(forms):
        if provider is not None:
            pool = list(catalog.providers.get(provider, {}))
            hints += [f"{provider}/{m}" for m in get_close_matches(form, pool, n=3, cutoff=0.6)]
        else:
            for m in get_close_matches(form, catalog.model_ids(), n=3, cutoff=0.75):
                listing = sorted(catalog.providers_listing(m), key=_first_party_first)
                hints += [f"{p}/{m}" for p in listing[:2]]
        if hints:
            break
    return tuple(dict.fromkeys(hints))[:5]


def _first_party_first(provider: str) -> tuple[int, str]:
    return (provider not in FIRST_PARTY_PROVIDERS, provider)


@dataclass(frozen=True)
class MissingPlan:
    """What ``seed --missing`` decides for each ledger model id, before anything is written.

    ``claims``: the catalog matches to write, one per spelling they are stored under;
    ``priced``: every ledger id those prices are for, with its match (ids sharing a spelling at
    one price share a claim); ``skipped``: the ids it needs but cannot price, and why. A ledger
    id in neither needs no price from the catalog (it resolves as written, or to a price no
    more specific spelling beats). ``prices resolve --catalog`` answers from this plan too, so
    the two never disagree.
    """

    catalog: str
    claims: dict[str, CatalogMatch]
    priced: dict[str, CatalogMatch]
    skipped: tuple[SkippedModel, ...]

    def decision(self, ledger_id: str) -> CatalogMatch | SkippedModel | None:
        """The match that prices ``ledger_id``, why it is skipped, or None (it needs none)."""
        if ledger_id in self.priced:
            return self.priced[ledger_id]
        return next((s for s in self.skipped if s.model_id == ledger_id), None)


def ledger_model_ids(conn: Connection) -> list[str]:
    """Every distinct model id the ledger has recorded, sorted."""
    # DISTINCT on MySQL's PAD SPACE collation would merge 'a' and 'a '; their lengths keep them
    # apart (usage.reprice groups the same way).
    keys: list[Any] = [u.c.model_id]
    if dialect_of(conn).pads_spaces:
        keys.append(func.length(u.c.model_id))
    return sorted(conn.execute(select(u.c.model_id).group_by(*keys)).scalars())


def plan_missing_prices(
    conn: Connection,
    *,
    catalog: ModelCatalog,
    also: Sequence[str] = (),
    hints: bool = True,
) -> MissingPlan:
    """Decide what ``seed_missing_prices`` would write for the ledger's model ids (see there).

    ``also``: ids to decide for as if the ledger had them (``prices resolve --catalog`` asks
    about one it may not have seen yet); they take part in every conflict like the others.
    ``hints=False``: ``not_in_catalog`` ids come without close names (they decide nothing, and
    cost a difflib search of the catalog each: ``resolve`` asks about one id, not the ledger).
    """
    for model_id in also:
        check_identity("model_id", model_id)
    ledger_ids = sorted({*ledger_model_ids(conn), *also})
    prices = current_prices(conn)
    skipped: list[SkippedModel] = []
    claims: list[CatalogMatch] = []
    # What each ledger id must still cost once the new prices exist: its catalog match's price
    # (ids being priced) or the price it resolves to now (ids left alone).
    expected: dict[str, ModelPrice] = {}
    # Spellings the catalog prices differently at several providers, and the ledger id that
    # reached one: seed --missing chooses none of them, so it must not store one of those
    # listings under that spelling for another id either (issue 28: together_ai/meta-llama/…
    # stored Together's price under the bare meta-llama/… that DeepInfra lists too).
    ambiguous: dict[str, str] = {}
    for ledger_id in ledger_ids:
        resolved = resolve_model_price(ledger_id, prices)
        if resolved.price is not None:
            expected[ledger_id] = resolved.price
            if resolved.rule == "exact":
                continue
        outcome = match_catalog_price(ledger_id, catalog, hints=hints)
        if resolved.price is not None and not needs_catalog_price(resolved, outcome):
            continue
        if isinstance(outcome, SkippedModel):
            skipped.append(outcome)
            if outcome.reason == "ambiguous":
                for candidate in outcome.candidates:
                    ambiguous.setdefault(candidate.split("/", 1)[1], ledger_id)
        elif outcome.model_id in prices:
            skipped.append(SkippedModel(ledger_id, "already_priced", (outcome.model_id,)))
        else:
            claims.append(outcome)
            expected[ledger_id] = outcome.price
    by_spelling = _settle_claims(claims, ledger_ids, prices, expected, skipped, ambiguous)
    return MissingPlan(
        catalog=catalog.source,
        claims={spelling: ms[0] for spelling, ms in sorted(by_spelling.items())},
        priced={m.ledger_id: m for ms in by_spelling.values() for m in ms},
        skipped=tuple(skipped),
    )


def seed_missing_prices(
    conn: Connection,
    *,
    catalog: ModelCatalog,
    dry_run: bool = False,
    clock: Clock | None = None,
) -> SeedResult:
    """Price every ledger model id that needs a price, never overwriting a price.

    An id needs one when it resolves to no price, or when it resolves only through a dropped
    route or date while the catalog lists a more specific spelling of it at a different price
    (``eu.anthropic.…`` at $3.30 beside the base's $3; ``gpt-4o-2024-05-13`` at $5 beside
    ``gpt-4o``'s $2.50): that spelling is priced, and the id resolves to it from then on.
    Unresolved ids the rules cannot price are returned in ``skipped`` with a reason
    (``govcloud``, ``not_in_catalog``, ``no_price``, ``ambiguous``, ``already_priced``,
    ``spelling_conflict``) and candidates. Estimates already written keep their cost until
    ``recompute_estimates``. What to write is decided by ``plan_missing_prices``.
    """
    plan = plan_missing_prices(conn, catalog=catalog)
    skipped = list(plan.skipped)
    ordered = [(m.catalog_id, m.price) for m in plan.claims.values()]
    changes = write_prices(conn, ordered, overwrite=False, dry_run=dry_run, clock=clock)
    written: list[PriceChange] = []
    for change in changes:
        if change.action == "unchanged":  # priced meanwhile by someone else: never overwrite
            skipped.append(SkippedModel(change.model, "already_priced", (change.model,)))
        else:
            written.append(change)
    return SeedResult(
        catalog=catalog.source,
        prices=tuple(written),
        skipped=tuple(skipped),
        dry_run=dry_run,
        matches=tuple(plan.claims[change.model] for change in written),
    )


def _settle_claims(
    claims: list[CatalogMatch],
    ledger_ids: list[str],
    prices: dict[str, ModelPrice],
    expected: dict[str, ModelPrice],
    skipped: list[SkippedModel],
    ambiguous: dict[str, str],
) -> dict[str, list[CatalogMatch]]:
    """The prices to write: one per spelling, none that would reprice another ledger id.

    Prices are keyed by spelling, not by provider, so two ledger ids can want one spelling from
    two providers (``gpt-4o`` from OpenAI, ``azure/gpt-4o`` from Azure), and a spelling priced
    for one id can capture another that resolves to it (the spelling ``deepseek/deepseek-chat``
    priced from OpenRouter for ``openrouter/deepseek/deepseek-chat`` would be what the ledger's
    ``deepseek/deepseek-chat`` resolves to). An id priced under its own spelling claims it first;
    a claim that would leave any ledger id at a price other than its own, or would price a
    spelling the catalog found ``ambiguous`` for a ledger id (``ambiguous``: spelling → that
    id), is not written, and its id is reported as ``spelling_conflict`` (price it by hand,
    under its own id). Returns the claims kept, by spelling (every holder of one spelling
    charges the same).
    """
    by_spelling: dict[str, list[CatalogMatch]] = {}
    for claim in sorted(claims, key=lambda m: (m.ledger_id != m.model_id, m.ledger_id)):
        holders = by_spelling.setdefault(claim.model_id, [])
        victim = ambiguous.get(claim.model_id)
        if victim is not None:
            skipped.append(
                SkippedModel(claim.ledger_id, "spelling_conflict", (claim.catalog_id, victim))
            )
            expected.pop(claim.ledger_id, None)
        elif holders and not holders[0].price.same_rates(claim.price):
            both = (holders[0].catalog_id, claim.catalog_id)
            skipped.append(SkippedModel(claim.ledger_id, "spelling_conflict", both))
            expected.pop(claim.ledger_id, None)  # it takes what it resolves to
        else:
            holders.append(claim)
    by_spelling = {spelling: ms for spelling, ms in by_spelling.items() if ms}
    while True:
        table = {**prices, **{spelling: ms[0].price for spelling, ms in by_spelling.items()}}
        culprit = None
        for ledger_id in ledger_ids:
            res = resolve_model_price(ledger_id, table)
            own = expected.get(ledger_id)
            if own is None or res.price is None or res.price.same_rates(own):
                continue
            holders = by_spelling.get(str(res.matched), [])
            if holders and all(m.ledger_id != ledger_id for m in holders):
                culprit = (str(res.matched), ledger_id)
                break
        if culprit is None:
            return by_spelling
        spelling, victim = culprit
        for claim in by_spelling.pop(spelling):
            conflict = (claim.catalog_id, victim)
            skipped.append(SkippedModel(claim.ledger_id, "spelling_conflict", conflict))
            expected.pop(claim.ledger_id, None)


def needs_catalog_price(resolved: Resolution, outcome: CatalogMatch | SkippedModel) -> bool:
    """Whether ``seed --missing`` would price the catalog's match for a ledger id.

    Yes when the id resolves to no price; when it resolves through a dropped route or date, only
    if the catalog's spelling is more specific than the one it resolves to and priced
    differently (``gpt-4o-2024-05-13`` at $5 beside ``gpt-4o``'s $2.50); never when it
    resolves as written.
    """
    if not isinstance(outcome, CatalogMatch):
        return False
    if resolved.price is None:
        return True
    if resolved.rule == "exact" or resolved.matched is None:
        return False
    order = [spelling for spelling, _rule in resolution_candidates(resolved.model_id)]
    if order.index(outcome.model_id) >= order.index(resolved.matched):
        return False
    return not outcome.price.same_rates(resolved.price)
