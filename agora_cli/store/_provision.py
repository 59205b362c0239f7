"""Provision and check the agent schema on PostgreSQL, MySQL/MariaDB and SQLite.

``ensure_agent_tables`` reads the catalog in a few queries (independent of the number of tables),
and against a current schema does nothing else: no DDL, no lock. When something is missing it takes
the provisioning lock (PostgreSQL ``pg_try_advisory_xact_lock``, MySQL ``GET_LOCK``
salted with the database name; SQLite's ``BEGIN IMMEDIATE`` is its own lock), re-reads the
catalog, and does only what is still to do: create missing tables, columns and indexes, widen
columns narrower than the schema, add foreign keys missing by shape, and with
``convert_collation`` (MySQL) convert tables that are not InnoDB in ``utf8mb4_bin`` first. It never
drops data, renames or narrows anything.

Before any DDL it refuses (``SchemaDrift``, creating nothing) what it cannot build on: an expected
index name already taken by another table's index (PostgreSQL and SQLite index names are
schema-wide, and ``CREATE INDEX IF NOT EXISTS`` would silently skip it), a column of another type
family, rows a foreign key to be added would reject, and on MySQL, unless asked to convert, an
existing agent table that is not InnoDB in ``utf8mb4_bin`` (its foreign keys cannot be formed).
Every lock wait of the DDL is bounded (``table_lock_timeout_s``, default 10 s): PostgreSQL
``lock_timeout``, MySQL ``lock_wait_timeout`` and ``innodb_lock_wait_timeout``, SQLite's busy
timeout; past it, ``LockTimeout`` names the table and, where the server can tell, the session
holding it.

Beside this module: ``live_schema`` reads the live catalog, ``ddl`` plans and compiles the
statements, ``lock_waits`` bounds and explains lock waits. Their public names are re-exported
here, so ``from agora_cli.store._provision import read_catalog`` keeps working.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Column, ForeignKeyConstraint, MetaData, Table, select, text, update
from sqlalchemy.engine import Connection, Dialect, Engine
from sqlalchemy.exc import DBAPIError

from agora_cli.store._ddl import (
    Step,
    compile_dialect,
    conversion_steps,
    create_table_statements,
    describe_fk,
    expected_shape,
    expected_type_sql,
    keys_around,
    plan,
    revision_statements,
    same_shape,
    sorted_indexes,
    sqlite_affinity,
    table_options_ok,
    tables_to_convert,
    type_verdict,
)
from agora_cli.store._dialects import dialect_of
from agora_cli.store._engine import dialect_name, is_galera, retry_transient, translate_error
from agora_cli.store._errors import (
    DatabaseError,
    LockTimeout,
    SchemaDrift,
)
from agora_cli.store._galera import galera_problems
from agora_cli.store._live_schema import (
    ForeignKeyShape,
    RowCount,
    SchemaCatalog,
    foreign_keys_into,
    read_catalog,
    table_row_counts,
)
from agora_cli.store._lock_waits import (
    DEFAULT_TABLE_LOCK_TIMEOUT_S,
    MAX_TABLE_LOCK_TIMEOUT_S,
    bounded_lock_waits,
    is_lock_wait,
    lock_wait_error,
    table_lock_timeout,
)
from agora_cli.store._problems import Problem
from agora_cli.store._rls import policy_problems
from agora_cli.store._schema import RETIRED_INDEXES, RetiredIndex, metadata

__all__ = [
    "DEFAULT_TABLE_LOCK_TIMEOUT_S",
    "MAX_TABLE_LOCK_TIMEOUT_S",
    "PROBLEM_KINDS",
    "ForeignKeyShape",
    "ProvisionReport",
    "RowCount",
    "SchemaCatalog",
    "bounded_lock_waits",
    "check_agent_tables",
    "compile_dialect",
    "create_table_statements",
    "ensure_agent_tables",
    "provisioning_lock",
    "read_catalog",
    "revision_statements",
    "shape_problems",
    "table_lock_timeout",
    "table_row_counts",
]


PROBLEM_KINDS = (
    "missing_table",
    "missing_column",
    "missing_index",
    "missing_foreign_key",
    "wrong_engine",
    "wrong_collation",
    "wrong_type",
    "no_primary_key",  # Galera cluster nodes only (see galera.galera_problems)
    "galera_setting",  # Galera cluster nodes only
    "retired_index",  # an index a later revision replaced (schema.RETIRED_INDEXES)
)


_PG_LOCK_KEY = 0x61676F7261  # "agora"
# The provisioning lock's statements: PostgreSQL's advisory lock on _PG_LOCK_KEY, MySQL's named
# lock salted with the database name (``provisioning_lock``).
_PG_TRY_XACT_LOCK = "SELECT pg_try_advisory_xact_lock(:k)"
_MYSQL_LOCK_NAME = "CONCAT('agora_provision_', SHA1(DATABASE()))"
_MYSQL_GET_LOCK = f"SELECT GET_LOCK({_MYSQL_LOCK_NAME}, :t)"
_MYSQL_RELEASE_LOCK = f"SELECT RELEASE_LOCK({_MYSQL_LOCK_NAME})"


@dataclass(frozen=True)
class ProvisionReport:
    """What ``ensure_agent_tables`` did (or, dry, would do)."""

    dialect: str
    created_tables: list[str]
    added_columns: list[str]
    created_indexes: list[str]
    sql: list[str]
    notes: list[str]
    already_current: bool
    dry_run: bool = False
    converted_tables: list[str] = field(default_factory=list)
    widened_columns: list[str] = field(default_factory=list)
    added_foreign_keys: list[str] = field(default_factory=list)
    dropped_indexes: list[str] = field(default_factory=list)

    @property
    def statements(self) -> int:
        return len(self.sql)


def _plan_checked(conn: Connection, dialect: Dialect, *, convert: bool = False) -> list[Step]:
    """Read the catalog and plan what is missing; refuse what provisioning cannot build on."""
    cat = read_catalog(conn)
    steps = plan(cat, dialect, convert=convert)
    _refuse_unbuildable(conn, cat, steps, convert=convert)
    return steps


def _refuse_unbuildable(
    conn: Connection, cat: SchemaCatalog, steps: list[Step], *, convert: bool
) -> None:
    """Raise ``SchemaDrift`` (before any DDL) for what no statement of ``steps`` could fix.

    A column of another type family than expected (a token count stored as text, a price as a
    decimal): provisioning widens, it never guesses a conversion. This one is refused even when
    nothing else is to be done, so that provisioning never calls current what ``db check``
    does not. The rest only when there is DDL to run: an expected index name taken by another
    table's index (``CREATE INDEX IF NOT EXISTS`` would skip it silently, on every run); on
    MySQL, without ``convert``, an agent table that is not InnoDB in ``utf8mb4_bin`` (the first
    foreign key to it fails, errno 150), and with it, a key between such a table and a table
    agora does not convert; rows a foreign key to be added would not accept.
    """
    name = dialect_name(conn)
    reasons = [
        f"column {t}.{c.name} is {_declared(cat, t, c.name)}, not {_expected(c, name)}, and "
        "provisioning only widens a column within its type family: change it by hand"
        for t, c in _typed_columns(cat)
        if type_verdict(c, cat.column_types[t][c.name], name) == "wrong"
    ]
    if not steps and not reasons:
        return
    for step in steps:
        owner = cat.index_owners.get(step.name) if step.kind == "index" else None
        if owner is not None and owner != step.table:
            reasons.append(
                f"index {step.name} belongs on {step.table}, but an index on table {owner} "
                f"already has that name (index names are shared by the whole schema on {name}): "
                f"rename or drop that index on {owner}, then provision again"
            )
    if dialect_of(name).has_table_options:
        wrong = tables_to_convert(cat)
        if wrong and not convert:
            described = ", ".join(
                f"{t} is ENGINE={cat.table_options[t][0]} with {cat.table_options[t][1]}"
                for t in wrong
            )
            by_hand = "; ".join(s.sql for s in conversion_steps(cat, compile_dialect(name)))
            rewrites = "each rewrites its table" if len(wrong) > 1 else "it rewrites the table"
            reasons.append(
                f"{described}, but agora's tables must be InnoDB in utf8mb4_bin (else their "
                f"foreign keys cannot be formed and ids compare case-insensitively): run "
                f"`agora db provision --convert-collation` ({rewrites}; --dry-run prints every "
                f"statement), or convert first with {by_hand} ({rewrites}), then provision again"
            )
        elif wrong:
            reasons += _foreign_tables(conn, cat, wrong)
    if not reasons:
        reasons += _orphan_reasons(conn, cat, steps)
    if reasons:
        raise SchemaDrift(f"cannot provision: {'; '.join(reasons)}; nothing was changed")


def _typed_columns(cat: SchemaCatalog) -> Iterator[tuple[str, Column[Any]]]:
    """Every expected column that exists live, with its table's name."""
    for table in metadata.sorted_tables:
        live = cat.column_types.get(table.name, {})
        for column in table.columns:
            if column.name in live:
                yield table.name, column


_PG_TYPE_NAMES = {
    "int2": "smallint",
    "int4": "integer",
    "int8": "bigint",
    "float4": "real",
    "float8": "double precision",
    "bpchar": "char",
}


def _declared(cat: SchemaCatalog, table: str, column: str) -> str:
    name = cat.column_types[table][column].name
    return _PG_TYPE_NAMES.get(name, name).upper() or "untyped"


def _expected(column: Column[Any], name: str) -> str:
    return expected_type_sql(column, compile_dialect(name))


def _foreign_tables(conn: Connection, cat: SchemaCatalog, wrong: list[str]) -> list[str]:
    """Keys from a table agora does not convert into a table it does: MySQL would refuse the
    conversion (1833), and re-creating the key after it would fail on the other collation."""
    converting = set(wrong)
    out = [
        f"foreign key {name} of {table} (not an agent table) references {target}: agora "
        f"converts only its own tables; drop that key first"
        for table, name, target in foreign_keys_into(conn)
        if target in converting
    ]
    for child, fk in keys_around(cat, wrong):  # agent_* tables outside agora's schema
        other = fk.target if child in converting else child
        if other not in converting and not table_options_ok(
            cat.table_options.get(other, (None, None))
        ):
            out.append(
                f"foreign key {fk.name} {describe_fk(child, fk)} joins {other}, which agora "
                f"does not convert, to a table it does: convert {other} to utf8mb4_bin or drop "
                "that key first"
            )
    return out


def _orphan_reasons(conn: Connection, cat: SchemaCatalog, steps: list[Step]) -> list[str]:
    """The rows each foreign key to be added would refuse: one set-based query per key, run
    only when provisioning adds keys (adopting a database, or repairing a lost key)."""
    reasons = []
    for step in steps:
        if step.kind != "foreign_key" or step.fk is None or step.table not in cat.columns:
            continue
        if step.fk.target not in cat.columns:
            continue
        found = orphan_rows(conn, step.table, step.fk)
        if found is not None:
            reasons.append(found)
    return reasons


def orphan_rows(conn: Connection, table: str, fk: ForeignKeyShape) -> str | None:
    """Describe the rows of ``table`` whose key ``fk`` names no row of its target, or ``None``.

    On MySQL, before a conversion, a case-insensitive collation would let ``'ABC'`` find
    ``'abc'``, which the binary collation after it does not: the match is made in
    ``utf8mb4_bin``, as the key will compare (the explicit collation wins, whatever either
    table's, and the target's primary key is still used). Not ``p.id = c.x AND BINARY p.id =
    BINARY c.x``: MariaDB propagates the first equality into the second and finds no orphan.
    """
    prep = conn.dialect.identifier_preparer
    col, target_col = fk.columns[0], fk.target_columns[0]
    c = f"c.{prep.quote(col)}"
    p = f"p.{prep.quote(target_col)}"
    match = f"{p} = {c}"
    if dialect_of(conn).has_table_options:  # tables of their own collation
        match = f"{p} = CONVERT({c} USING utf8mb4) COLLATE utf8mb4_bin"
    sql = (
        f"SELECT COUNT(*), MIN({c}) FROM {prep.quote(table)} c WHERE {c} IS NOT NULL "
        f"AND NOT EXISTS (SELECT 1 FROM {prep.quote(fk.target)} p WHERE {match})"
    )
    count, example = conn.execute(text(sql)).one()
    if not count:
        return None
    return (
        f"{count:,} row(s) of {table} have a {col} that no {fk.target} row has "
        f"(e.g. {str(example)!r}), so the foreign key {describe_fk(table, fk)} cannot be added: "
        f"delete those rows or add the missing {fk.target} rows, then provision again"
    )


@contextmanager
def provisioning_lock(conn: Connection, *, timeout_s: float = 300.0) -> Iterator[None]:
    """Hold agora's provisioning lock on ``conn`` for the block (no-op on SQLite).

    PostgreSQL: ``pg_try_advisory_xact_lock``, polled until ``timeout_s``, in a transaction
    that the block runs in and that commits when it ends (rolls back on an error): a lock of the
    transaction, not the session, so that it holds behind a transaction pooler, and the block's
    DDL commits with it, all or nothing. MySQL: ``GET_LOCK`` on a name salted with the database
    name, for the session; the block commits as it goes. Raises ``LockTimeout`` when not
    granted in time.
    """
    d = dialect_of(conn)
    if d.single_writer:
        yield
        return
    if d.keyed_advisory_locks:
        deadline = time.monotonic() + timeout_s
        if conn.in_transaction():
            conn.rollback()
        while True:
            got = conn.execute(text(_PG_TRY_XACT_LOCK), {"k": _PG_LOCK_KEY})
            if bool(got.scalar()):
                break
            conn.rollback()
            if time.monotonic() > deadline:
                raise LockTimeout(f"the provisioning lock was not granted within {timeout_s:g} s")
            time.sleep(0.05)
        try:
            yield
        except BaseException:
            if conn.in_transaction() and not conn.invalidated:
                conn.rollback()
            raise
        if conn.in_transaction():
            conn.commit()
        return
    got = conn.execute(text(_MYSQL_GET_LOCK), {"t": int(timeout_s)})
    granted = got.scalar() == 1
    conn.commit()
    if not granted:
        raise LockTimeout(f"the provisioning lock was not granted within {timeout_s:g} s")
    try:
        yield
    finally:
        if conn.in_transaction():
            conn.rollback()
        conn.execute(text(_MYSQL_RELEASE_LOCK))
        conn.commit()


def _apply_in_lock(conn: Connection, dialect: Dialect, *, convert: bool) -> list[Step]:
    """PostgreSQL: every missing step in the provisioning lock's one transaction (DDL is
    transactional there), planned again under the lock; nothing is kept if one fails."""
    steps = _plan_checked(conn, dialect, convert=convert)
    for step in steps:
        try:
            _execute(conn, step)
        except Exception as exc:
            if is_lock_wait(exc):
                conn.rollback()  # the lock's holder is read outside the failed transaction
                raise lock_wait_error(conn, step, kept=0) from exc
            raise
    return steps


def ensure_agent_tables(
    bind: Engine | Connection,
    *,
    dry_run: bool = False,
    lock: bool = True,
    lock_timeout_s: float = 300.0,
    table_lock_timeout_s: float = DEFAULT_TABLE_LOCK_TIMEOUT_S,
    convert_collation: bool = False,
) -> ProvisionReport:
    """Bring the database to the current agent schema, idempotently; report what was done.

    ``bind`` is normally an ``Engine``: the catalog is read on a short connection and DDL, when
    needed, runs on a connection of its own under the provisioning lock (waited for up to
    ``lock_timeout_s``). With a ``Connection`` and ``lock=False`` (inside a migration, which
    already holds the lock) everything runs on that connection. SQLite always uses the given
    connection: its single writer is the lock.

    Every lock wait of the DDL gives up after ``table_lock_timeout_s`` (more than 0, at most 3600;
    ``InvalidInput`` before anything is read otherwise) with ``LockTimeout`` naming the table and
    the session holding it, instead of queueing everyone behind it; with ``lock=False`` the
    connection keeps the bound its owner set (``upgrade`` sets one). ``SchemaDrift`` (nothing
    created, dry run or not) for what it cannot build on: an expected index name that another
    table's index has, a column of another type family, rows a foreign key to be added would
    refuse, or a MySQL agent table that is not InnoDB in ``utf8mb4_bin``.

    Besides creating what is missing, it widens columns that hold less than the schema says
    (``INT`` token counts to ``BIGINT``, MySQL ``TEXT`` JSON to ``LONGTEXT``; each widened table
    is rewritten once: MySQL blocks its writes meanwhile, PostgreSQL its reads and writes) and
    adds the foreign keys an existing table lacks (compared by shape; a key named otherwise
    counts). ``convert_collation`` (MySQL) first converts the agent tables that are not InnoDB
    in ``utf8mb4_bin``: their foreign keys, read from the catalog, are dropped, each table is
    converted (rewritten, its writes blocked meanwhile) and the keys are re-created under their
    names. Each statement commits on its own: after a crash, running it again does the rest.
    """
    seconds = table_lock_timeout(table_lock_timeout_s)
    name = dialect_name(bind)
    dialect = compile_dialect(name)
    if isinstance(bind, Engine):

        def read_plan() -> list[Step]:
            with bind.connect().execution_options(sqlite_deferred=True) as conn:
                planned = _plan_checked(conn, dialect, convert=convert_collation)
                conn.rollback()
                return planned

        # On Galera a catalog read can be aborted by another node's DDL (1213): read again.
        steps = retry_transient(read_plan)
    else:
        steps = _plan_checked(bind, dialect, convert=convert_collation)
    if not steps or dry_run:
        return _report(name, steps, already_current=not steps, dry_run=dry_run)

    doing = "to provision " + ", ".join(dict.fromkeys(s.table for s in steps))
    convert = convert_collation
    if isinstance(bind, Connection) and not lock:
        nested = bind.in_transaction() and dialect_of(name).transactional_ddl
        done = _apply_on(bind, dialect, nested=nested, convert=convert)
    elif isinstance(bind, Connection) and dialect_of(name).single_writer:
        with bounded_lock_waits(bind, seconds, doing=doing):
            done = _apply_on(bind, dialect, nested=bind.in_transaction(), convert=convert)
    else:
        engine = bind if isinstance(bind, Engine) else bind.engine
        with engine.connect() as conn, bounded_lock_waits(conn, seconds, doing=doing):
            if dialect_of(name).single_writer:
                with conn.begin():
                    done = _apply_on(conn, dialect, nested=False, convert=convert)
            else:
                with provisioning_lock(conn, timeout_s=lock_timeout_s):
                    if dialect_of(name).keyed_advisory_locks:
                        done = _apply_in_lock(conn, dialect, convert=convert)
                    elif is_galera(conn):
                        done = _apply_converging(conn, dialect, convert=convert)
                    else:
                        done = _apply_each(conn, dialect, convert=convert)
    return _report(name, done, already_current=False, dry_run=False)


# A Galera cluster: the provisioning lock (GET_LOCK) is node-local, so provisioners on several
# nodes run DDL at once. Each statement is replicated in total order (TOI), so they cannot
# corrupt anything, but a statement can fail because another node's has just done the same
# (1050 table exists, 1060 duplicate column, 1061 duplicate key), and a catalog read can be
# aborted by, or briefly miss, a table another node is altering. Such a provisioner reads the
# catalog again and carries on until nothing is missing.
GALERA_ROUNDS = 12


def _apply_converging(conn: Connection, dialect: Dialect, *, convert: bool) -> list[Step]:
    """``_apply_each`` until the schema is current, re-planning after each lost race."""
    done: list[Step] = []
    for round_ in range(GALERA_ROUNDS):
        try:
            done.extend(_apply_each(conn, dialect, convert=convert))
            return done
        except (LockTimeout, SchemaDrift):
            raise
        except Exception as exc:
            if conn.in_transaction():
                conn.rollback()
            if round_ == GALERA_ROUNDS - 1 or not _lost_race(exc):
                raise
            time.sleep(random.uniform(0, min(1.0, 0.05 * 2**round_)))
    raise AssertionError("unreachable")


def _lost_race(exc: BaseException) -> bool:
    """A DDL or catalog failure that another node's concurrent provisioning explains."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, DBAPIError):
        cause = cause.__cause__
    if cause is None:
        return False
    args: tuple[object, ...] = tuple(getattr(cause.orig, "args", ()))
    # 1050/1060/1061/1826: already exists (table, column, key, foreign key); 1091: a key
    # another node dropped first; 1146: no such table (yet, on this node); 1213: aborted by a
    # replicated statement; 1047: node not ready.
    return bool(args) and args[0] in {1047, 1050, 1060, 1061, 1091, 1146, 1213, 1826}


def _apply_on(conn: Connection, dialect: Dialect, *, nested: bool, convert: bool) -> list[Step]:
    """Re-read under the lock/transaction and run what is still missing on ``conn``."""
    steps = _plan_checked(conn, dialect, convert=convert)
    for i, step in enumerate(steps):
        try:
            if nested:
                with conn.begin_nested():
                    _execute(conn, step)
            else:
                _execute(conn, step)
        except Exception as exc:
            # MySQL commits each DDL statement; elsewhere the caller's transaction undoes them.
            kept = 0 if dialect_of(dialect).transactional_ddl else i
            if not is_lock_wait(exc):
                _raise_orphans(conn, step, exc, kept=kept, own=False)
                raise
            raise lock_wait_error(conn, step, kept=kept) from exc
    return steps


def _apply_each(conn: Connection, dialect: Dialect, *, convert: bool) -> list[Step]:
    """Run each missing step in its own transaction; a lost race is re-checked, not raised."""
    steps = _plan_checked(conn, dialect, convert=convert)
    conn.commit()
    done: list[Step] = []
    for step in steps:
        try:
            if step.kind == "backfill":
                _backfill(conn, step, commit=True)
            else:
                with conn.begin():
                    conn.execute(step.element)
            done.append(step)
        except Exception as exc:
            if conn.in_transaction():
                conn.rollback()
            if is_lock_wait(exc):
                raise lock_wait_error(conn, step, kept=len(done)) from exc
            _raise_orphans(conn, step, exc, kept=len(done), own=True)
            replanned = plan(read_catalog(conn), dialect, convert=convert)
            still = {(s.kind, s.table, s.name) for s in replanned}
            conn.rollback()
            if (step.kind, step.table, step.name) in still:
                err = translate_error(exc)
                raise (err or DatabaseError(str(exc))) from exc
    return done


BACKFILL_BATCH = 1000


def _execute(conn: Connection, step: Step) -> None:
    if step.kind == "backfill":
        _backfill(conn, step, commit=False)
    else:
        conn.execute(step.element)


def _backfill(conn: Connection, step: Step, *, commit: bool) -> int:
    """Fill a retired index's ``backfill`` column in batches of ``BACKFILL_BATCH`` rows (ids
    read first, then one ``UPDATE … WHERE id IN``: MySQL refuses an UPDATE whose subquery reads
    its own table); ``commit``: each batch in its own transaction. Returns the rows filled.

    On PostgreSQL, refuses (``SchemaDrift``, nothing filled) a role that row-level security
    binds on the table: it would fill only the rows it sees, and the index dropped after it
    would leave the others' keys in the untenanted namespace.
    """
    retired = step.retired
    assert retired is not None and retired.backfill is not None
    table = metadata.tables[retired.table]
    column, source = (table.c[name] for name in retired.backfill)
    if dialect_of(conn).has_row_level_security:
        bound = conn.execute(text("SELECT row_security_active(:t)"), {"t": table.name}).scalar()
        if bound:
            if commit and conn.in_transaction():
                conn.rollback()
            raise SchemaDrift(
                f"cannot provision: {table.name}.{column.name} must be filled from "
                f"{source.name} on every tenant's rows before {retired.name} is dropped, and "
                "row-level security hides other tenants' rows from this role: run `agora db "
                "upgrade` (or provision) as a superuser or a BYPASSRLS role"
            )
    if commit and conn.in_transaction():
        conn.commit()
    pending = (
        select(table.c.id)
        .where(column == "", source.is_not(None), source != "")
        .order_by(table.c.id)
        .limit(BACKFILL_BATCH)
    )
    filled = 0
    while True:
        with conn.begin() if commit else nullcontext():
            ids = list(conn.execute(pending).scalars())
            if ids:
                conn.execute(update(table).where(table.c.id.in_(ids)).values({column: source}))
        filled += len(ids)
        if len(ids) < BACKFILL_BATCH:
            return filled


def _raise_orphans(
    conn: Connection, step: Step, exc: BaseException, *, kept: int, own: bool
) -> None:
    """A foreign key refused because of rows that arrived since the check before any DDL: say
    which, as that check does. ``own``: the connection's transaction is provisioning's own, to
    end; otherwise (a migration's) it is left to its owner, and an aborted one cannot tell."""
    if step.kind != "foreign_key" or step.fk is None:
        return
    if own and conn.in_transaction():
        conn.rollback()
    try:
        found = orphan_rows(conn, step.table, step.fk)
    except Exception:
        return  # the original error stands
    finally:
        if own and conn.in_transaction():
            conn.rollback()
    if found is not None:
        done = (
            "nothing was changed"
            if kept == 0
            else f"the {kept} statement(s) before it were applied and stay (provisioning "
            "again does the rest)"
        )
        raise SchemaDrift(f"cannot provision: {found}; {done}") from exc


def _report(
    name: str, steps: list[Step], *, already_current: bool, dry_run: bool
) -> ProvisionReport:
    return ProvisionReport(
        dialect=name,
        created_tables=[s.table for s in steps if s.kind == "table"],
        added_columns=[f"{s.table}.{s.name}" for s in steps if s.kind == "column"],
        created_indexes=[s.name for s in steps if s.kind == "index"],
        sql=[s.sql for s in steps],
        notes=[s.note for s in steps if s.note],
        already_current=already_current,
        dry_run=dry_run,
        converted_tables=[s.table for s in steps if s.kind == "convert"],
        widened_columns=[
            f"{s.table}.{c}" for s in steps if s.kind == "widen" for c in s.name.split(", ")
        ],
        added_foreign_keys=[s.name for s in steps if s.kind == "foreign_key"],
        dropped_indexes=[s.name for s in steps if s.kind == "drop_index"],
    )


def check_agent_tables(bind: Engine | Connection) -> list[Problem]:
    """Every difference between the live database and the expected agent schema.

    Extra tables, columns and indexes are not drift; foreign keys are compared by shape. On a
    Galera cluster node, also what the cluster cannot replicate safely, in any table of the
    database (``galera.galera_problems``: ``no_primary_key``, ``wrong_engine``,
    ``galera_setting``).
    """
    names = {t.name for t in metadata.sorted_tables}
    if isinstance(bind, Engine):
        with bind.connect().execution_options(sqlite_deferred=True) as conn:
            cat = read_catalog(conn, full=True)
            cluster = galera_problems(conn, names)
            conn.rollback()
    else:
        cat = read_catalog(bind, full=True)
        cluster = galera_problems(bind, names)
    problems = shape_problems(cat, dialect_name(bind))
    problems.extend(policy_problems(bind))
    return problems + cluster


def shape_problems(
    cat: SchemaCatalog,
    dialect: str,
    meta: MetaData = metadata,
    retired: tuple[RetiredIndex, ...] = RETIRED_INDEXES,
) -> list[Problem]:
    """Every difference between the catalog ``cat`` and the tables of ``meta`` (by default the
    library's schema; ``ddl.schema_at`` gives a revision's): tables, columns, indexes, foreign
    keys, column types, MySQL's engine and collation, and each index of ``retired`` standing."""
    table_options = dialect_of(dialect).has_table_options
    problems: list[Problem] = []
    for table in meta.sorted_tables:
        t = table.name
        live = cat.columns.get(t)
        if live is None:
            problems.append(Problem("missing_table", t, f"table {t} does not exist"))
            continue
        for column in table.columns:
            if column.name not in live:
                problems.append(
                    Problem("missing_column", t, f"column {t}.{column.name} is missing")
                )
        for index in sorted_indexes(table):
            if index.name not in cat.indexes.get(t, set()):
                detail = f"index {index.name} is missing"
                owner = cat.index_owners.get(str(index.name))
                if owner is not None:
                    detail += (
                        f": an index on table {owner} has that name (rename or drop that one, "
                        "then provision)"
                    )
                problems.append(Problem("missing_index", t, detail))
        for gone in retired:
            if gone.table == t and gone.name in cat.indexes.get(t, set()):
                problems.append(
                    Problem(
                        "retired_index",
                        t,
                        f"index {gone.name} was retired by revision {gone.revision} "
                        f"({gone.replaced_by} replaces it): agora db upgrade (or provision) "
                        "drops it",
                    )
                )
        for fk in table.foreign_key_constraints:
            problems.extend(_check_fk(t, fk, cat.foreign_keys.get(t, [])))
        problems.extend(_check_types(cat, table, dialect))
        if table_options:
            engine, collation = cat.table_options.get(t, (None, None))
            if str(engine).lower() != "innodb":
                problems.append(Problem("wrong_engine", t, f"{t} uses ENGINE={engine}, not InnoDB"))
            if collation != "utf8mb4_bin":
                problems.append(
                    Problem(
                        "wrong_collation",
                        t,
                        f"{t} uses {collation}, not utf8mb4_bin "
                        "(agora db provision --convert-collation converts it)",
                    )
                )
    return problems


def _check_types(cat: SchemaCatalog, table: Table, dialect: str) -> list[Problem]:
    """``wrong_type`` for each column that holds less than the schema says, or another kind."""
    live = cat.column_types.get(table.name, {})
    out = []
    for column in table.columns:
        verdict = type_verdict(column, live.get(column.name), dialect)
        if verdict == "ok":
            continue
        where = f"column {table.name}.{column.name}"
        declared = _declared(cat, table.name, column.name)
        if dialect_of(dialect).types_are_affinities:
            detail = (
                f"{where} is declared {declared} (affinity {sqlite_affinity(declared)}), not "
                f"{_expected(column, dialect)}: SQLite cannot change it (rebuild the table)"
            )
        elif verdict == "widen":
            detail = (
                f"{where} is {declared}, narrower than {_expected(column, dialect)} "
                "(agora db provision widens it)"
            )
        else:
            detail = f"{where} is {declared}, not {_expected(column, dialect)} (change it by hand)"
        out.append(Problem("wrong_type", table.name, detail))
    return out


def _check_fk(table: str, fk: ForeignKeyConstraint, live: list[ForeignKeyShape]) -> list[Problem]:
    described = describe_fk(table, expected_shape(fk))
    same = [s for s in live if same_shape(fk, s)]
    if not same:
        return [Problem("missing_foreign_key", table, f"foreign key {described} is missing")]
    if not any(s.on_delete == "CASCADE" for s in same):
        return [
            Problem(
                "missing_foreign_key",
                table,
                f"foreign key {described} exists without ON DELETE CASCADE",
            )
        ]
    return []
