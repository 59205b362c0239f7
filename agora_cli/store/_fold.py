"""The ledger folded by UTC day: ``agent_usage_daily`` and ``agent_usage_fold`` (revision 0005).

A closed UTC day (its end plus a grace period is past) is folded in one transaction: the day's
ledger rows grouped by (model, actor, tenant) replace that day's rows of ``agent_usage_daily``,
and ``agent_usage_fold`` marks the day folded (``rows``: how many ledger rows, ``dirty`` 0).
Reports then read folded, clean days from the fold and everything else — unfolded days, dirty
days, the current day, partial days at a window's edges — from the raw ledger, and merge: a
year of spend is a few hundred small rows instead of millions.

**The guarantee.** A folded report equals the raw ledger's, to the cent and the token, as long
as every change to a past day's ledger rows marks that day dirty in the same transaction —
which everything agora does (``reprice``, ``threads delete``, ``demo --force``). Rows written
for a day after it was folded by another writer (late arrivals: a runtime whose clock lags, a
backfill) are not seen until ``verify`` compares the day with the ledger and marks it dirty;
run ``agora spend fold --verify`` from cron (weekly is enough with a grace period longer than
your writers' lag). Reports bypass the fold with ``--raw``.

What the fold does not keep: threads and runs (reports by thread always read raw), and whether
a group had any provider-reported row (a provider-only report reads raw). On MySQL/MariaDB, whose
``utf8mb4_bin`` compares ``'a'`` and ``'a '`` equal, a day whose identities differ only by
trailing spaces is left unfolded (its primary key could not hold both), so it is always read raw.

Folding is resumable and safe from several processes at once: each day is its own transaction
that first claims the day's ``agent_usage_fold`` row; a process that finds the row taken by
another's open fold skips the day (the next run catches up).

**The per-model rollup** (``agent_usage_model_daily``, the optional ``rollup`` branch: ``agora
db upgrade rollup@head``, all three dialects; not part of the spec's schema, so a database
without it is complete): where the table exists, the same transaction sums the day's
``agent_usage_daily`` rows again per model (~1,400 rows to ~12 in the benchmark), so a report
that needs neither actor nor tenant — ``spend`` by model, day, week or month, a global budget —
reads ~12 rows a day instead of ~1,400. ``agent_usage_fold`` stays the one list of folded, clean
days: the rollup is written and deleted only with the day's fold rows, stamped with the same
``folded_at``. A report reads the rollup only where it *covers* the window's folded days
(``rollup_covers``: on each of them the rollup's turns equal the day's ``rows`` and its rows
carry the day's ``folded_at``), and reads ``agent_usage_daily`` otherwise — so days folded
before the branch was applied (or by an agora that does not know it) stay exact, and ``fold``
marks such days dirty to refold them (``mark_uncovered_days_dirty``). On PostgreSQL a session
under row-level security never reads the rollup: it holds every tenant's rows, the session sees
one tenant's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    BigInteger,
    and_,
    case,
    delete,
    func,
    insert,
    inspect,
    literal_column,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.schema import CreateTable

from agora_cli.store._clock import DAY_MS, Clock, SystemClock
from agora_cli.store._dialects import dialect_of
from agora_cli.store._engine import retry_transient, session_tenant
from agora_cli.store._errors import InvalidInput
from agora_cli.store._ledger_tenant import effective_tenant, ledger_with_threads
from agora_cli.store._schema import apply_mysql_options
from agora_cli.store._schema import token_usage as u
from agora_cli.store._schema import usage_daily as d
from agora_cli.store._schema import usage_fold as f
from agora_cli.store._schema import usage_model_daily as m
from agora_cli.store._sqlexpr import finite_cost, provider_cost

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection
    from sqlalchemy.sql import ColumnElement, Select

__all__ = [
    "DEFAULT_GRACE_MS",
    "ROLLUP_TABLE",
    "FoldResult",
    "VerifyResult",
    "WindowParts",
    "check_fold_privilege",
    "create_rollup",
    "day_bucket",
    "day_number",
    "fold",
    "has_rollup",
    "mark_days_dirty",
    "mark_uncovered_days_dirty",
    "rollup_covers",
    "rollup_statements",
    "verify",
    "window_parts",
]

DEFAULT_GRACE_MS = 2 * 3_600_000  # a day is closed two hours after its end
_EPOCH = date(1970, 1, 1)
_VERIFY_DAYS = 31  # days compared per grouped query


def day_number(day: date) -> int:
    """Days since 1970-01-01 (the fold's ``day``)."""
    return (day - _EPOCH).days


def day_bucket(conn: Connection) -> ColumnElement[Any]:
    """``created_at`` as a UTC day number (``Dialect.day_bucket``)."""
    return dialect_of(conn).day_bucket(u.c.created_at)


# --- which days a window reads from the fold --------------------------------------------------


@dataclass(frozen=True)
class WindowParts:
    """A window split into folded clean days and raw millisecond ranges (inclusive)."""

    fold_days: list[tuple[int, int]] = field(default_factory=list)  # day-number ranges
    raw: list[tuple[int, int]] = field(default_factory=list)  # epoch-ms ranges
    folded_days: int = 0


def _runs(days: Iterable[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for n in sorted(days):
        if runs and runs[-1][1] == n - 1:
            runs[-1] = (runs[-1][0], n)
        else:
            runs.append((n, n))
    return runs


def clean_folded_days(conn: Connection, first: int, last: int) -> list[int]:
    """The folded, clean days in ``[first, last]`` (day numbers)."""
    if first > last:
        return []
    q = select(f.c.day).where(f.c.day.between(first, last), f.c.dirty == 0).order_by(f.c.day)
    return [int(day) for (day,) in conn.execute(q)]


def window_parts(conn: Connection, from_ms: int, to_ms: int) -> WindowParts:
    """Split ``[from_ms, to_ms]``: whole folded clean days from the fold, the rest raw."""
    first = -(-from_ms // DAY_MS)  # the first day that starts inside the window
    last = (to_ms + 1) // DAY_MS - 1  # the last day that ends inside it
    folded = clean_folded_days(conn, first, last)
    if not folded:
        return WindowParts(raw=[(from_ms, to_ms)])
    fold_days = _runs(folded)
    raw: list[tuple[int, int]] = []
    cursor = from_ms
    for lo, hi in fold_days:
        if cursor < lo * DAY_MS:
            raw.append((cursor, lo * DAY_MS - 1))
        cursor = (hi + 1) * DAY_MS
    if cursor <= to_ms:
        raw.append((cursor, to_ms))
    return WindowParts(fold_days=fold_days, raw=raw, folded_days=len(folded))


def raw_filter(parts: WindowParts) -> ColumnElement[bool]:
    """The ledger rows of the window's raw ranges."""
    return or_(*(u.c.created_at.between(lo, hi) for lo, hi in parts.raw))


def fold_filter(parts: WindowParts, *, rollup: bool = False) -> ColumnElement[bool]:
    """The fold rows (``rollup``: the per-model rollup's rows) of the window's folded days."""
    day = m.c.day if rollup else d.c.day
    return or_(*(day.between(lo, hi) for lo, hi in parts.fold_days))


# --- the optional per-model rollup ------------------------------------------------------------

ROLLUP_TABLE = m.name


def has_rollup(conn: Connection) -> bool:
    """Whether the optional ``rollup`` branch's table exists (one catalog lookup)."""
    return bool(inspect(conn).has_table(ROLLUP_TABLE))


def rollup_statements(dialect: Any) -> list[str]:
    """The DDL of the ``rollup`` branch for ``dialect`` (offline ``db upgrade --sql``)."""
    if dialect_of(dialect).has_table_options:
        apply_mysql_options()
    return [str(CreateTable(m).compile(dialect=dialect)).strip()]


def create_rollup(conn: Connection) -> bool:
    """Create the per-model rollup table if it is missing (the ``rollup`` branch); ``True`` if
    it was created. Its days are filled by the next ``fold``, which refolds every folded day
    the rollup does not cover. Refuses (``InvalidInput``) before the fold tables exist."""
    inspector = inspect(conn)
    if not inspector.has_table(f.name) or not inspector.has_table(d.name):
        raise InvalidInput(
            "the rollup branch needs the fold tables (revision 0005): run agora db upgrade first"
        )
    if inspector.has_table(ROLLUP_TABLE):
        return False
    m.create(conn)
    return True


def _uncovered_days(ranges: list[tuple[int, int]] | None) -> Select[Any]:
    """Folded, clean days (of the day ``ranges``; ``None``: all) that the rollup does not cover:
    its turns differ from the day's ``rows``, or its rows were not written by the day's last
    fold."""
    sums = select(
        m.c.day,
        func.sum(m.c.turns).label("turns"),
        func.min(m.c.folded_at).label("first"),
        func.max(m.c.folded_at).label("last"),
    )
    days = select(f.c.day)
    if ranges is not None:
        sums = sums.where(or_(*(m.c.day.between(lo, hi) for lo, hi in ranges)))
        days = days.where(or_(*(f.c.day.between(lo, hi) for lo, hi in ranges)))
    by_day = sums.group_by(m.c.day).subquery()
    return days.select_from(f.outerjoin(by_day, by_day.c.day == f.c.day)).where(
        f.c.dirty == 0,
        or_(
            f.c.rows != func.coalesce(by_day.c.turns, 0),
            and_(
                f.c.rows > 0,
                or_(by_day.c.first != f.c.folded_at, by_day.c.last != f.c.folded_at),
            ),
        ),
    )


def rollup_covers(conn: Connection, parts: WindowParts) -> bool:
    """Whether the per-model rollup exists and covers every folded day of ``parts`` (see
    ``_uncovered_days``), and the session may use it (PostgreSQL: not under row-level security).

    Two statements at most: the table's existence, then the window's uncovered days counted.
    """
    if not parts.fold_days or not has_rollup(conn):
        return False
    missing = select(func.count()).select_from(_uncovered_days(parts.fold_days).subquery())
    if dialect_of(conn).has_row_level_security:
        # The rollup holds every tenant's rows; a session under row-level security sees its
        # tenant's ledger and fold rows only (and its role has no grant on the rollup).
        subject: Select[Any] = select(literal_column("row_security_active('agent_usage_daily')"))
        if conn.execute(subject).scalar():
            return False
    return int(conn.execute(missing).scalar_one()) == 0


# --- who may fold ----------------------------------------------------------------------------

_PRIVILEGED = "a superuser or a BYPASSRLS role, with no session tenant"


def check_fold_privilege(bind: Engine | Connection) -> None:
    """Refuse (``InvalidInput``, exit 2) a session that may not fold: the fold and its
    verification read every tenant's ledger rows and write rows every tenant's reports read.

    Refused: a session tenant (``AGORA_TENANT``, a profile's ``tenant``, ``--tenant``: the
    fold would hold that tenant's rows alone and mark the day done for everyone); on PostgreSQL
    also ``agora.tenant`` set in the session, a role without DML on the fold tables (the app
    role and its members: ``db rls enable`` grants them SELECT only), and a role subject to
    row-level security where it is enabled (it would fold only the rows it sees). One query.
    """
    if isinstance(bind, Engine):
        with bind.connect() as conn:
            try:
                return check_fold_privilege(conn)
            finally:
                conn.rollback()
    tenant = session_tenant(bind)
    if dialect_of(bind).has_row_level_security:
        row = bind.execute(
            text(
                "SELECT current_user, nullif(current_setting('agora.tenant', true), ''), "
                "r.rolsuper OR r.rolbypassrls, coalesce(c.relrowsecurity, false), "
                "has_table_privilege(CAST(:daily AS regclass), 'INSERT') "
                "AND has_table_privilege(CAST(:folds AS regclass), 'UPDATE') "
                "FROM pg_roles r LEFT JOIN pg_class c ON c.oid = to_regclass(:ledger) "
                "WHERE r.rolname = current_user"
            ),
            {"daily": d.name, "folds": f.name, "ledger": u.name},
        ).one()
        role, tenant, bypasses, rls_on, may_write = row[0], tenant or row[1], row[2], row[3], row[4]
    else:
        role, bypasses, rls_on, may_write = "", True, False, True
    why: str | None = None
    if tenant is not None:
        why = (
            f"this session is scoped to tenant {tenant!r} (AGORA_TENANT, a profile's tenant or "
            "--tenant), so it would fold that tenant's rows alone"
        )
    elif not may_write:
        why = f"role {role!r} has no DML on the fold tables (the app role and its members)"
    elif rls_on and not bypasses:
        why = f"role {role!r} is subject to row-level security and sees only some tenants' rows"
    if why is not None:
        raise InvalidInput(
            f"the fold is a privileged job over every tenant's ledger rows: {why}; run `agora "
            f"spend fold` as {_PRIVILEGED} (unset AGORA_TENANT)"
        )


# --- marking days dirty -----------------------------------------------------------------------


def mark_days_dirty(conn: Connection, where: ColumnElement[bool]) -> int:
    """Mark dirty every folded day that holds a ledger row matching ``where``, in the caller's
    transaction: call it in the transaction that changes or deletes those rows (before a
    delete). Returns how many folded days were marked.

    On PostgreSQL a role that may not update the fold (the app role: a tenant deleting its
    thread) marks nothing: the privileged ``spend fold --verify`` finds those days and marks them.
    """
    if not _may_mark(conn):
        return 0
    days = select(day_bucket(conn)).where(where).distinct()
    if not dialect_of(conn).updates_read_own_table:
        # MySQL refuses a subquery of a derived table it must materialise in UPDATE … IN; the
        # list of days is short (a day per distinct date of the rows).
        listed = [int(n) for (n,) in conn.execute(days)]
        if not listed:
            return 0
        return int(
            conn.execute(
                update(f).where(f.c.day.in_(listed), f.c.dirty == 0).values(dirty=1)
            ).rowcount
        )
    stmt = update(f).where(f.c.day.in_(days), f.c.dirty == 0).values(dirty=1)
    return int(conn.execute(stmt).rowcount)


def _may_mark(conn: Connection) -> bool:
    if not dialect_of(conn).has_row_level_security:
        return True
    held = conn.execute(
        text("SELECT has_table_privilege(CAST(:t AS regclass), 'UPDATE')"), {"t": f.name}
    ).scalar()
    return bool(held)


def mark_uncovered_days_dirty(conn: Connection) -> int:
    """Mark dirty every folded, clean day the per-model rollup does not cover (folded before
    the ``rollup`` branch was applied, or by an agora that does not write it), so that the next
    ``fold`` refolds it and writes its rollup. Call it only where the rollup table exists."""
    days = [int(n) for (n,) in conn.execute(_uncovered_days(None).order_by(f.c.day))]
    marked = 0
    for i in range(0, len(days), 500):  # MySQL refuses an UPDATE reading its own table
        chunk = days[i : i + 500]
        stmt = update(f).where(f.c.day.in_(chunk), f.c.dirty == 0).values(dirty=1)
        marked += int(conn.execute(stmt).rowcount)
    return marked


def mark_range_dirty(conn: Connection, first: int, last: int) -> int:
    """Mark dirty every folded day in ``[first, last]`` (day numbers)."""
    stmt = update(f).where(f.c.day.between(first, last), f.c.dirty == 0).values(dirty=1)
    return int(conn.execute(stmt).rowcount)


# --- folding ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FoldResult:
    """What ``fold`` did: days folded (dirty ones refolded among them), days another process
    was folding (skipped), days left raw (MySQL: identities differing by trailing spaces), and
    the ledger rows folded."""

    folded: int
    refolded: int
    skipped: int
    unfoldable: int
    rows: int
    through: date | None


def _measures() -> list[ColumnElement[Any]]:
    cost = finite_cost(u.c.cost_usd)  # a non-finite cost (another writer's) is unpriced
    priced = func.count(cost)
    return [
        func.count().label("turns"),
        func.coalesce(func.sum(u.c.input_tokens), 0).label("input_tokens"),
        func.coalesce(func.sum(u.c.output_tokens), 0).label("output_tokens"),
        func.coalesce(func.sum(u.c.cache_read_tokens), 0).label("cache_read_tokens"),
        func.coalesce(func.sum(u.c.cache_write_tokens), 0).label("cache_write_tokens"),
        func.sum(cost).label("cost_usd"),
        func.coalesce(func.sum(case((u.c.cost_source == "estimate", cost), else_=0)), 0).label(
            "estimated_usd"
        ),
        func.coalesce(func.sum(provider_cost(cost, u.c.cost_source)), 0).label("provider_usd"),
        (func.count() - priced).label("unpriced_turns"),
    ]


def _claim_day(conn: Connection, day: int, now: int) -> str:
    """Take the day's fold row for this transaction: ``claimed``, ``busy`` or ``clean``."""
    locked = select(f.c.dirty).where(f.c.day == day)
    d = dialect_of(conn)
    if d.locks_rows:
        locked = locked.with_for_update(skip_locked=d.always_skips_locked)
    found = conn.execute(locked).first()
    if found is None:
        try:
            with conn.begin_nested():
                conn.execute(insert(f).values(day=day, rows=0, folded_at=now, dirty=1))
        except IntegrityError:
            return "busy"  # another process inserted it first (and has folded it, or is)
        return "claimed"
    return "claimed" if found[0] else "clean"


def _day_groups(conn: Connection, day: int, now: int) -> Select[Any]:
    """The day's ledger rows grouped by (model, actor, tenant), as ``agent_usage_daily`` rows.

    The tenant is the effective one (the row's own, else its thread's: ``ledger_tenant.py``), so
    folded reads by tenant need no join. On MySQL the keys' lengths are grouped by too: its PAD
    SPACE collation would put ``'a'`` and ``'a '`` in one group, and the fold's primary key then
    refuses the second of the two.
    """
    lo = day * DAY_MS
    keys: list[ColumnElement[Any]] = [u.c.model_id, u.c.actor_ref, _tenant_key()]
    lengths = [func.char_length(k) for k in keys] if dialect_of(conn).pads_spaces else []
    return (
        select(
            literal_column(str(int(day)), BigInteger()),
            *keys,
            *_measures(),
            literal_column(str(int(now)), BigInteger()),
        )
        .select_from(ledger_with_threads())
        .where(u.c.created_at.between(lo, lo + DAY_MS - 1))
        .group_by(*keys, *lengths)
    )


def _tenant_key() -> ColumnElement[Any]:
    """A ledger row's ``tenant_key``: its effective tenant, ``''`` for none (select it from
    ``ledger_with_threads()``). The empty string is inlined: PostgreSQL refuses a GROUP BY that
    differs from the SELECT by a bound parameter."""
    return func.coalesce(effective_tenant(), literal_column("''"))


_FOLD_COLUMNS = [
    "day",
    "model_id",
    "actor_ref",
    "tenant_key",
    "turns",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cost_usd",
    "estimated_usd",
    "provider_usd",
    "unpriced_turns",
    "folded_at",
]


_ROLLUP_COLUMNS = [c for c in _FOLD_COLUMNS if c not in ("actor_ref", "tenant_key")]


def _model_groups(conn: Connection, day: int, now: int) -> Select[Any]:
    """The day's ``agent_usage_daily`` rows summed per model, as ``agent_usage_model_daily`` rows.

    On MySQL the model's length is grouped by too (see ``_day_groups``): ``'m'`` and ``'m '``
    on one day (of different actors) make the rollup's primary key refuse the day.
    """
    lengths = [func.char_length(d.c.model_id)] if dialect_of(conn).pads_spaces else []
    return (
        select(
            literal_column(str(int(day)), BigInteger()),
            d.c.model_id,
            func.sum(d.c.turns),
            func.sum(d.c.input_tokens),
            func.sum(d.c.output_tokens),
            func.sum(d.c.cache_read_tokens),
            func.sum(d.c.cache_write_tokens),
            func.sum(d.c.cost_usd),  # NULL only when every group's is
            func.sum(d.c.estimated_usd),
            func.sum(d.c.provider_usd),
            func.sum(d.c.unpriced_turns),
            literal_column(str(int(now)), BigInteger()),
        )
        .where(d.c.day == day)
        .group_by(d.c.model_id, *lengths)
    )


def fold_day(conn: Connection, day: int, now: int, *, rollup: bool = False) -> tuple[str, int]:
    """Fold one day in the caller's transaction: ``folded``, ``busy``, ``clean`` or
    ``unfoldable``, and the ledger rows folded. ``rollup``: the per-model rollup table exists
    (``has_rollup``); write the day's rollup rows too.

    The day's groups are written by one ``INSERT … SELECT … GROUP BY`` on the server (measured
    in ``tests/bench/bench_fold.py`` against the bare ``GROUP BY``). On MySQL/MariaDB under
    REPEATABLE READ that statement share-locks the day's ledger rows until the day's transaction
    ends: a writer of a late row for that day (or the gap just after it) waits for it, at most
    one day's fold; a deadlock is retried by ``fold``.
    """
    state = _claim_day(conn, day, now)
    if state != "claimed":
        return state, 0
    conn.execute(delete(d).where(d.c.day == day))
    if rollup:
        conn.execute(delete(m).where(m.c.day == day))
    write = insert(d).from_select(_FOLD_COLUMNS, _day_groups(conn, day, now))
    try:
        with conn.begin_nested():
            conn.execute(write)
            if rollup:  # summed from the rows just written (~1,400 rows to ~12)
                conn.execute(insert(m).from_select(_ROLLUP_COLUMNS, _model_groups(conn, day, now)))
    except IntegrityError:  # MySQL: two identities that differ only by trailing spaces
        conn.execute(delete(f).where(f.c.day == day))  # leave the day unfolded: read raw
        return "unfoldable", 0
    total = int(
        conn.execute(select(func.coalesce(func.sum(d.c.turns), 0)).where(d.c.day == day)).scalar()
        or 0
    )
    conn.execute(update(f).where(f.c.day == day).values(rows=total, folded_at=now, dirty=0))
    return "folded", total


def _candidate_days(engine: Engine, last: int) -> tuple[list[int], list[int]]:
    """(dirty days, unfolded days) up to day ``last``, oldest first."""
    with engine.connect().execution_options(sqlite_deferred=True) as conn:
        dirty = [
            int(n)
            for (n,) in conn.execute(
                select(f.c.day).where(f.c.dirty == 1, f.c.day <= last).order_by(f.c.day)
            )
        ]
        first_ms = conn.execute(select(func.min(u.c.created_at))).scalar()
        if first_ms is None:
            conn.rollback()
            return dirty, []
        first = int(first_ms) // DAY_MS
        done = {
            int(n) for (n,) in conn.execute(select(f.c.day).where(f.c.day.between(first, last)))
        }
        conn.rollback()
    return dirty, [n for n in range(first, last + 1) if n not in done]


def fold(
    engine: Engine,
    *,
    through: date | None = None,
    refold: tuple[date, date] | None = None,
    grace_ms: int = DEFAULT_GRACE_MS,
    clock: Clock | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> FoldResult:
    """Fold every closed day up to ``through`` (default: the last closed day), dirty days first.

    ``refold`` marks the days of ``(first, last)`` dirty first, so they are folded again.
    Each day is its own transaction (the exception to "the caller owns the transaction"):
    killed at any moment, no day is half-folded and the next run resumes. ``progress(done,
    total)`` is called after each day.
    """
    if (
        not isinstance(grace_ms, int)
        or isinstance(grace_ms, bool)
        or not 0 <= grace_ms <= 7 * DAY_MS
    ):
        raise InvalidInput("grace must be from 0 to 7 days", param="grace")
    check_fold_privilege(engine)
    now = (clock or SystemClock()).now_ms()
    closed = (now - grace_ms) // DAY_MS - 1  # the last day whose end + grace is past
    last = closed if through is None else min(closed, day_number(through))
    if refold is not None:
        first_day, last_day = (day_number(x) for x in refold)
        if first_day > last_day:
            raise InvalidInput("the refold range starts after it ends", param="refold")
        with engine.begin() as conn:
            mark_range_dirty(conn, first_day, last_day)
    with engine.begin() as conn:  # days the rollup does not cover: refold them with it
        rollup = has_rollup(conn)
        if rollup:
            mark_uncovered_days_dirty(conn)
    dirty, unfolded = _candidate_days(engine, last)
    todo = dirty + unfolded
    counts = {"folded": 0, "busy": 0, "unfoldable": 0, "clean": 0}
    refolded = rows = 0
    for n, day in enumerate(todo):

        def attempt(day: int = day) -> tuple[str, int]:
            with engine.begin() as conn:
                return fold_day(conn, day, now, rollup=rollup)

        state, folded_rows = retry_transient(attempt)
        counts[state] += 1
        rows += folded_rows
        if state == "folded" and n < len(dirty):
            refolded += 1
        if progress is not None:
            progress(n + 1, len(todo))
    return FoldResult(
        folded=counts["folded"],
        refolded=refolded,
        skipped=counts["busy"],
        unfoldable=counts["unfoldable"],
        rows=rows,
        through=None if last < 0 else _EPOCH + timedelta(days=last),
    )


# --- verifying --------------------------------------------------------------------------------


@dataclass(frozen=True)
class VerifyResult:
    """What ``verify`` compared, and the folded days whose ledger changed (now marked dirty)."""

    days_checked: int
    mismatched: list[date]


def verify(
    engine: Engine,
    *,
    from_day: date | None = None,
    to_day: date | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> VerifyResult:
    """Compare each clean folded day with the ledger, per group and per measure; mark the days
    that differ dirty, so that the next ``fold`` refolds them and reports read them raw meanwhile.

    A group is (day, model, actor, tenant) — on MySQL/MariaDB with each key's length, so ``'a'``
    and ``'a '`` are two — and every measure is compared: turns, the four token columns, cost,
    estimated and provider-reported cost, unpriced turns. A row moved from one actor or tenant to
    another, input swapped with output or cache tokens edited all keep a day's totals and are
    found. The rollup is compared per (day, model) with the day's fold rows. See ``_mismatched``.

    A session that cannot see every row is refused (``check_fold_privilege``).
    """
    check_fold_privilege(engine)
    with engine.connect().execution_options(sqlite_deferred=True) as conn:
        rollup = has_rollup(conn)
        q = select(f.c.day).where(f.c.dirty == 0)
        if from_day is not None:
            q = q.where(f.c.day >= day_number(from_day))
        if to_day is not None:
            q = q.where(f.c.day <= day_number(to_day))
        days = [int(n) for (n,) in conn.execute(q.order_by(f.c.day))]
        conn.rollback()
    mismatched: list[int] = []
    batches = [days[i : i + _VERIFY_DAYS] for i in range(0, len(days), _VERIFY_DAYS)]
    for n, batch in enumerate(batches):
        with engine.begin() as conn:
            bad = _mismatched(conn, batch, rollup=rollup)
            if bad:
                conn.execute(update(f).where(f.c.day.in_(bad)).values(dirty=1))
        mismatched += bad
        if progress is not None:
            progress(n + 1, len(batches))
    return VerifyResult(
        days_checked=len(days), mismatched=[_EPOCH + timedelta(days=n) for n in mismatched]
    )


# Every measure a fold row holds, in _FOLD_COLUMNS order; the costs are floats, compared within
# one part in 10^9 of the group's size (a sum's last bits depend on the order rows are added).
_MEASURES = _FOLD_COLUMNS[4:13]
_COSTS = frozenset({"cost_usd", "estimated_usd", "provider_usd"})


def _differing_days(conn: Connection, plus: Select[Any], minus: Select[Any], keys: int) -> set[int]:
    """The days of the groups where ``plus`` and ``minus`` differ: both select ``day``, ``keys``
    more key columns, then ``_MEASURES``; ``minus``'s measures come negated.

    One ``UNION ALL … GROUP BY … HAVING`` — a full outer join that MySQL can run (it has no FULL
    JOIN): a group on one side only, or whose sums differ, leaves a measure's sum non-zero.
    """
    both = plus.union_all(minus).subquery()
    cols = list(both.c)
    group = cols[: 1 + keys]
    differs: list[ColumnElement[bool]] = [func.count() != 2]
    for name, col in zip(_MEASURES, cols[1 + keys :], strict=True):
        if name in _COSTS:
            size: ColumnElement[Any] = literal_column("1e-9") * (
                literal_column("1") + func.sum(func.abs(col))
            )
            differs.append(func.abs(func.sum(col)) > size)
        else:
            differs.append(func.sum(col) != 0)
    q = select(group[0]).group_by(*group).having(or_(*differs))
    return {int(day) for (day,) in conn.execute(q)}


def _negated(t: Any, names: list[str]) -> list[ColumnElement[Any]]:
    return [-func.coalesce(t.c[name], 0) if name in _COSTS else -t.c[name] for name in names]


def _keys_with_lengths(conn: Connection, keys: list[ColumnElement[Any]]) -> list[Any]:
    """``keys``, and on MySQL each one's length (PAD SPACE groups ``'a'`` with ``'a '``)."""
    if not dialect_of(conn).pads_spaces:
        return keys
    return [*keys, *(func.char_length(k) for k in keys)]


def _mismatched(conn: Connection, days: list[int], *, rollup: bool) -> list[int]:
    """The days of ``days`` whose fold differs from the ledger in any group or measure, or
    (``rollup``) whose per-model rollup differs from the day's fold rows.

    Set-based: one statement compares the batch's ledger groups with its fold rows, one the
    rollup with the fold; only the differing days come back. The ledger side is the fold's own
    ``GROUP BY`` (``_day_groups``) over the batch's days, read from ``created_at``'s index.
    """
    if not days:
        return []
    lo, hi = days[0] * DAY_MS, (days[-1] + 1) * DAY_MS - 1
    ledger_keys = _keys_with_lengths(conn, [u.c.model_id, u.c.actor_ref, _tenant_key()])
    day = day_bucket(conn)
    measures = [c for c in _measures() if c.name in _MEASURES]
    coalesced = [func.coalesce(c.element, 0) if c.name in _COSTS else c.element for c in measures]
    plus = (
        select(day, *ledger_keys, *coalesced)
        .select_from(ledger_with_threads())
        .where(u.c.created_at.between(lo, hi))
        .group_by(day, *ledger_keys)
    )
    fold_keys = _keys_with_lengths(conn, [d.c.model_id, d.c.actor_ref, d.c.tenant_key])
    minus = select(d.c.day, *fold_keys, *_negated(d, _MEASURES)).where(
        d.c.day.between(days[0], days[-1])
    )
    bad = _differing_days(conn, plus, minus, len(fold_keys))
    if rollup:
        model = _keys_with_lengths(conn, [d.c.model_id])
        sums = [
            func.coalesce(func.sum(d.c[name]), 0) if name in _COSTS else func.sum(d.c[name])
            for name in _MEASURES
        ]
        folded = (
            select(d.c.day, *model, *sums)
            .where(d.c.day.between(days[0], days[-1]))
            .group_by(d.c.day, *model)
        )
        rolled = select(
            m.c.day, *_keys_with_lengths(conn, [m.c.model_id]), *_negated(m, _MEASURES)
        ).where(m.c.day.between(days[0], days[-1]))
        bad |= _differing_days(conn, folded, rolled, len(model))
    return sorted(bad & set(days))
