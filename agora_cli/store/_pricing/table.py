"""The price table: reading current prices and history, writing prices safely under concurrency.

``agent_model_pricing`` keeps one current row per model (``is_current = 1``) and the retired rows
as history. A write happens in the caller's transaction: a model's first price inserts its current
row; a new price copies the current row into history (a new row, ``is_current = 0``) and updates
the current row in place. No reader ever sees two current rows or none, and a current row, once
it exists, is never deleted or moved in the ``(model_id, is_current)`` index, which is what lets
writers queue on it.

Concurrent writers of one model are serialised before they read, so they never deadlock each
other: on PostgreSQL by a transaction-scoped advisory lock per model; on SQLite by the write lock
every transaction takes (``BEGIN IMMEDIATE``); on MySQL/MariaDB by a locking read of the model's
current row (forced onto that index, so that it touches no other model's rows), on which every
writer of the model waits in turn; a model with no current row yet has nothing to wait on, so
writers of first prices also take one named lock (``GET_LOCK``, per database) just while they
insert them, and release it before the commit — any later writer then waits on the inserted
rows themselves. (The
earlier design inserted first and took the locking read afterwards: two writers of a new model
then each waited on the other's inserted row, a deadlock InnoDB broke by rolling one back.) As
with any row locks, two transactions that each write *several* models in opposite orders can
still deadlock; ``engine.retry_transient`` retries such a transaction whole.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import bindparam, insert, select, text, update

from agora_cli.store._clock import Clock, SystemClock
from agora_cli.store._dialects import dialect_of, index_hint
from agora_cli.store._errors import DatabaseError, InvalidInput
from agora_cli.store._ids import new_hex_id
from agora_cli.store._pricing.rules import (
    MAX_PRICE_PER_1M,
    ModelPrice,
    PriceTier,
    Resolution,
    check_price,
    resolution_candidates,
    resolve_model_price,
    tiers_from_json,
    tiers_to_json,
)
from agora_cli.store._schema import model_pricing as mp
from agora_cli.store._sqlexpr import exact_eq
from agora_cli.store._values import (
    check_count,
    check_identity,
    dump_json,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, RowMapping

__all__ = [
    "PriceChange",
    "current_prices",
    "list_prices",
    "resolve_current_price",
    "set_price",
]

T = TypeVar("T")
_CHUNK = 500
_MODEL_INDEX = "agent_model_pricing_model_current_idx"


@dataclass(frozen=True)
class PriceChange:
    """What a write did to one model's price: ``inserted``, ``updated`` or ``unchanged``."""

    model: str
    catalog_id: str | None
    price: ModelPrice
    previous: ModelPrice | None
    action: str


def _price(row: RowMapping) -> ModelPrice:
    return ModelPrice(
        id=row["id"],
        model_id=row["model_id"],
        input_per_1m=float(row["input_price_per_1m"]),
        output_per_1m=float(row["output_price_per_1m"]),
        cache_read_per_1m=_opt_float(row["cache_read_price_per_1m"]),
        cache_write_per_1m=_opt_float(row["cache_write_price_per_1m"]),
        tiers=tiers_from_json(row["tiers"]),
        source=row["source"],
        effective_from=int(row["effective_from"]),
        is_current=bool(row["is_current"]),
    )


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _chunks(items: Sequence[T], size: int = _CHUNK) -> Iterable[Sequence[T]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def current_prices(
    conn: Connection, *, model_ids: Iterable[str] | None = None
) -> dict[str, ModelPrice]:
    """The current price of every model (or of ``model_ids``), keyed by model id."""
    if model_ids is None:
        q = select(mp).where(mp.c.is_current == 1).order_by(mp.c.effective_from, mp.c.id)
        return {row["model_id"]: _price(row) for row in conn.execute(q).mappings()}
    return {m: rows[-1] for m, rows in _current_rows(conn, model_ids, lock=False).items()}


def _current_rows(
    conn: Connection, model_ids: Iterable[str], *, lock: bool
) -> dict[str, list[ModelPrice]]:
    """The current rows of exactly these model ids, oldest first (normally one per model).

    ``IN`` on MySQL's PAD SPACE collation also matches trailing-space variants (``'a' IN ('a ')``);
    those rows are dropped here. ``lock`` reads ``FOR UPDATE`` (on MySQL forced onto the
    ``(model_id, is_current)`` index, so that the read locks no other model's rows).
    """
    ids = sorted(set(model_ids))
    wanted = set(ids)
    out: dict[str, list[ModelPrice]] = {}
    for chunk in _chunks(ids):
        q = (
            select(mp)
            .where(mp.c.model_id.in_(chunk), mp.c.is_current == 1)
            .order_by(mp.c.model_id, mp.c.effective_from, mp.c.id)
        )
        if lock:
            q = index_hint(q, mp, f"FORCE INDEX ({_MODEL_INDEX})")
            q = q.with_for_update()
        for row in conn.execute(q).mappings():
            if row["model_id"] in wanted:
                out.setdefault(row["model_id"], []).append(_price(row))
    for rows in out.values():
        rows.sort(key=lambda p: (p.effective_from or 0, p.id or ""))
    return out


def list_prices(
    conn: Connection, *, model_id: str | None = None, history: bool = False
) -> list[ModelPrice]:
    """Current prices (with ``history``, every row), by model, newest first within a model."""
    q = select(mp).order_by(mp.c.model_id, mp.c.effective_from.desc(), mp.c.is_current.desc())
    if not history:
        q = q.where(mp.c.is_current == 1)
    if model_id is not None:
        q = q.where(exact_eq(mp.c.model_id, check_identity("model_id", model_id)))
    return [_price(row) for row in conn.execute(q).mappings()]


def resolve_current_price(conn: Connection, model_id: str) -> Resolution:
    """Resolve a ledger model id against the current prices (one indexed query)."""
    check_identity("model_id", model_id)
    forms = [form for form, _rule in resolution_candidates(model_id)]
    return resolve_model_price(model_id, current_prices(conn, model_ids=forms))


def set_price(
    conn: Connection,
    model_id: str,
    *,
    input_per_1m: float,
    output_per_1m: float,
    cache_read_per_1m: float | None = None,
    cache_write_per_1m: float | None = None,
    tiers: Sequence[PriceTier] = (),
    source: str = "manual",
    clock: Clock | None = None,
) -> PriceChange:
    """Make this the model's current price; ``unchanged`` when it already is (see module docs).

    The model id is stored exactly as given (it is the id the ledger records). Rates are USD per
    1M tokens, each a finite number from 0 to ``MAX_PRICE_PER_1M``; cache rates are optional.
    Concurrent callers never deadlock each other, whatever the dialect (see module docs).
    """
    check_identity("model_id", model_id)
    price = ModelPrice(
        model_id=model_id,
        input_per_1m=check_price("input_per_1m", input_per_1m),
        output_per_1m=check_price("output_per_1m", output_per_1m),
        cache_read_per_1m=_opt_price("cache_read_per_1m", cache_read_per_1m),
        cache_write_per_1m=_opt_price("cache_write_per_1m", cache_write_per_1m),
        tiers=_check_tiers(tiers),
        source=check_identity("source", source),
    )
    return write_prices(conn, [(None, price)], overwrite=True, dry_run=False, clock=clock)[0]


def _opt_price(name: str, value: object) -> float | None:
    return None if value is None else check_price(name, value)


def _check_tiers(tiers: Sequence[PriceTier]) -> tuple[PriceTier, ...]:
    checked = []
    for i, tier in enumerate(tiers):
        if not isinstance(tier, PriceTier):
            raise InvalidInput(f"tiers[{i}] must be a PriceTier, not {type(tier).__name__}")
        checked.append(
            PriceTier(
                size=check_count(f"tiers[{i}].size", tier.size),
                input_per_1m=check_price(f"tiers[{i}].input_per_1m", tier.input_per_1m),
                output_per_1m=check_price(f"tiers[{i}].output_per_1m", tier.output_per_1m),
                cache_read_per_1m=_opt_price(
                    f"tiers[{i}].cache_read_per_1m", tier.cache_read_per_1m
                ),
                cache_write_per_1m=_opt_price(
                    f"tiers[{i}].cache_write_per_1m", tier.cache_write_per_1m
                ),
            )
        )
    return tuple(sorted(checked, key=lambda t: t.size))


def write_prices(
    conn: Connection,
    wanted: Sequence[tuple[str | None, ModelPrice]],
    *,
    overwrite: bool,
    dry_run: bool,
    clock: Clock | None,
) -> list[PriceChange]:
    """Write prices of distinct models (see module docs); without ``overwrite`` keep existing ones.

    Every price is checked first (identity, rates), so a batch is refused whole before anything
    is written, with the same message on every dialect.
    """
    for _catalog_id, price in wanted:
        _check_storable(price)
    now = (clock or SystemClock()).now_ms()
    if dry_run:
        return _apply(conn, wanted, overwrite=overwrite, now=now, lock=False, write=False)
    ids = sorted({price.model_id for _, price in wanted})
    d = dialect_of(conn)
    if d.keyed_advisory_locks:
        _advisory_lock_models(conn, ids)
    if not d.named_locks:
        return _apply(conn, wanted, overwrite=overwrite, now=now, lock=True)
    # MySQL/MariaDB: queue on the models' current rows (all of them, in index order); models
    # without one have nothing to queue on, so their writers take turns on a named lock.
    changes = {
        c.model: c for c in _apply(conn, wanted, overwrite=overwrite, now=now, lock=True, new=False)
    }
    fresh = [w for w in wanted if w[1].model_id not in changes]
    if fresh:
        with _mysql_new_prices_lock(conn):
            # Re-read under the lock: a writer that held it may have inserted some of them.
            for change in _apply(conn, fresh, overwrite=overwrite, now=now, lock=True):
                changes[change.model] = change
    return [changes[price.model_id] for _, price in wanted]


def _check_storable(price: ModelPrice) -> None:
    check_identity("model_id", price.model_id)
    check_identity("source", price.source)
    if not price.in_range():
        raise InvalidInput(
            f"the price of {price.model_id!r} is out of range: every rate must be a finite "
            f"number from 0 to {MAX_PRICE_PER_1M:,.0f} USD per 1M tokens"
        )


def _apply(
    conn: Connection,
    wanted: Sequence[tuple[str | None, ModelPrice]],
    *,
    overwrite: bool,
    now: int,
    lock: bool,
    write: bool = True,
    new: bool = True,
) -> list[PriceChange]:
    """Read the current rows, decide each model's change, write them.

    ``new=False`` leaves out models that have no current row (the caller handles them).
    """
    current = _current_rows(conn, [price.model_id for _, price in wanted], lock=lock)
    changes: list[PriceChange] = []
    inserts: list[dict[str, Any]] = []
    updates: list[dict[str, Any]] = []
    retire: list[str] = []
    for catalog_id, price in wanted:
        rows = current.get(price.model_id, [])
        if not rows:
            if new:
                fresh = replace(price, id=new_hex_id(now), effective_from=now, is_current=True)
                inserts.append(_row(fresh))
                changes.append(PriceChange(price.model_id, catalog_id, fresh, None, "inserted"))
            continue
        *others, old = rows
        if not overwrite or old.same_rates(price):
            changes.append(PriceChange(price.model_id, catalog_id, old, old, "unchanged"))
            continue
        # The current row keeps its id (it is what the next writer queues on): its old content
        # goes into history as a new row, and the row itself takes the new price.
        history = replace(old, id=new_hex_id(now), is_current=False)
        inserts.append(_row(history))
        retire += [str(p.id) for p in others]  # more than one current row: a legacy accident
        updated = replace(price, id=old.id, effective_from=now, is_current=True)
        updates.append(_row(updated))
        changes.append(PriceChange(price.model_id, catalog_id, updated, history, "updated"))
    if not write:
        return changes
    if updates:
        _update_in_place(conn, updates)
    if inserts:
        conn.execute(insert(mp), inserts)
    for chunk in _chunks(retire):
        conn.execute(update(mp).where(mp.c.id.in_(chunk)).values(is_current=0))
    return changes


def _update_in_place(conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
    """Give current rows (by id) their new prices, in as few round trips as the dialect allows.

    MySQL/MariaDB: one multi-row ``INSERT … ON DUPLICATE KEY UPDATE`` on the primary key (every
    id exists, so every row is updated in place; PyMySQL would send an executemany of UPDATEs as
    one round trip per row). PostgreSQL (psycopg pipelines an executemany) and SQLite (in
    process): an executemany of UPDATEs.
    """
    columns = [name for name in rows[0] if name != "id"]
    if dialect_of(conn).upserts_on_duplicate_key:
        # lazy: a dialect's module (MySQL's ~50 ms) loads only where that dialect is used
        from sqlalchemy.dialects.mysql import insert as mysql_insert

        upsert = mysql_insert(mp)
        stmt = upsert.on_duplicate_key_update({name: upsert.inserted[name] for name in columns})
        conn.execute(stmt, list(rows))
        return
    by_id = (
        update(mp)
        .where(mp.c.id == bindparam("b_id"))
        .values({name: bindparam(f"b_{name}") for name in columns})
    )
    conn.execute(by_id, [{f"b_{k}": v for k, v in row.items()} for row in rows])


def _advisory_lock_models(conn: Connection, model_ids: Sequence[str]) -> None:
    """PostgreSQL: transaction-scoped advisory locks, one per model, taken in sorted order."""
    if not model_ids:
        return
    conn.execute(
        text(
            "SELECT count(pg_advisory_xact_lock(hashtextextended(k, 0))) "
            "FROM (SELECT unnest(CAST(:keys AS text[])) AS k ORDER BY 1) AS s"
        ),
        {"keys": [f"agora.model_price:{m}" for m in sorted(model_ids)]},
    )


@contextlib.contextmanager
def _mysql_new_prices_lock(conn: Connection) -> Iterator[None]:
    """MySQL: a named lock held while models' first current rows are inserted.

    One lock for every model that has no current row yet (salted with the database name), so
    that a seed of 500 new models costs two round trips for locking, not one pair per model;
    first prices are rare, and writers of existing models never take it. Named locks belong to
    the session, not the transaction, so it is released as soon as the rows exist (before the
    commit): from then on a later writer waits on the rows themselves. It waits as long as a
    row lock would (``innodb_lock_wait_timeout``).
    """
    key = "CONCAT('agora.price.new:', SHA1(DATABASE()))"  # GET_LOCK names: 64 characters at most
    got = conn.execute(text(f"SELECT GET_LOCK({key}, @@innodb_lock_wait_timeout)")).scalar()
    if got != 1:
        raise DatabaseError("timed out waiting for another writer of new prices; try again")
    release = text(f"SELECT RELEASE_LOCK({key})")
    try:
        yield
    except BaseException:
        # The first error is the one to report; a lost connection releases the lock anyway.
        with contextlib.suppress(Exception):
            conn.execute(release)
        raise
    conn.execute(release)


def _row(p: ModelPrice) -> dict[str, Any]:
    tiers = tiers_to_json(p.tiers)
    return {
        "id": p.id,
        "model_id": p.model_id,
        "input_price_per_1m": p.input_per_1m,
        "output_price_per_1m": p.output_per_1m,
        "cache_read_price_per_1m": p.cache_read_per_1m,
        "cache_write_price_per_1m": p.cache_write_per_1m,
        "tiers": None if tiers is None else dump_json("tiers", tiers),
        "source": p.source,
        "effective_from": p.effective_from,
        "is_current": 1 if p.is_current else 0,
    }
