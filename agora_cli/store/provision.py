"""Provision and check the agent schema on PostgreSQL, MySQL/MariaDB and SQLite.

``ensure_agent_tables`` reads the catalog in a few queries (independent of the number of tables),
and against a current schema does nothing else: no DDL, no lock. When something is missing it takes
the session-level provisioning lock (PostgreSQL ``pg_try_advisory_lock``, MySQL ``GET_LOCK``
salted with the database name; SQLite's ``BEGIN IMMEDIATE`` is its own lock), re-reads the
catalog, and creates only what is still missing. It never drops, renames or rewrites anything.

Before any DDL it refuses (``SchemaDrift``, creating nothing) what it cannot build on: an expected
index name already taken by another table's index (PostgreSQL and SQLite index names are
schema-wide, and ``CREATE INDEX IF NOT EXISTS`` would silently skip it), and on MySQL an existing
agent table that is not InnoDB in ``utf8mb4_bin`` (its foreign keys cannot be formed). Every lock
wait of the DDL is bounded (``table_lock_timeout_s``, default 10 s): PostgreSQL ``lock_timeout``,
MySQL ``lock_wait_timeout`` and ``innodb_lock_wait_timeout``, SQLite's busy timeout; past it,
``LockTimeout`` names the table and, where the server can tell, the session holding it.

Beside this module: ``live_schema`` reads the live catalog, ``ddl`` plans and compiles the
statements, ``lock_waits`` bounds and explains lock waits. Their public names are re-exported
here, so ``from agora_cli.store.provision import read_catalog`` keeps working.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ForeignKeyConstraint, text
from sqlalchemy.engine import Connection, Dialect, Engine

from agora_cli.store.ddl import (
    Step,
    compile_dialect,
    create_table_statements,
    plan,
    revision_statements,
    sorted_indexes,
)
from agora_cli.store.engine import dialect_name, is_galera, retry_transient, translate_error
from agora_cli.store.errors import (
    DatabaseError,
    LockTimeout,
    SchemaDrift,
)
from agora_cli.store.live_schema import (
    ForeignKeyShape,
    RowCount,
    SchemaCatalog,
    read_catalog,
    read_mysql_options,
    table_row_counts,
)
from agora_cli.store.lock_waits import (
    DEFAULT_TABLE_LOCK_TIMEOUT_S,
    MAX_TABLE_LOCK_TIMEOUT_S,
    bounded_lock_waits,
    is_lock_wait,
    lock_wait_error,
    table_lock_timeout,
)
from agora_cli.store.schema import metadata

__all__ = [
    "DEFAULT_TABLE_LOCK_TIMEOUT_S",
    "MAX_TABLE_LOCK_TIMEOUT_S",
    "PROBLEM_KINDS",
    "ForeignKeyShape",
    "Problem",
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
    "table_lock_timeout",
    "table_row_counts",
]

Catalog = SchemaCatalog  # the old name, kept for imports written before the rename

PROBLEM_KINDS = (
    "missing_table",
    "missing_column",
    "missing_index",
    "missing_foreign_key",
    "wrong_engine",
    "wrong_collation",
    "no_primary_key",  # Galera cluster nodes only (see galera.galera_problems)
    "galera_setting",  # Galera cluster nodes only
)


_PG_LOCK_KEY = 0x61676F7261  # "agora"


_CONVERT = "ENGINE=InnoDB, CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"


@dataclass(frozen=True)
class Problem:
    """One difference between the live schema and the expected one."""

    kind: str
    table: str
    detail: str


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

    @property
    def statements(self) -> int:
        return len(self.sql)


def _plan_checked(conn: Connection, dialect: Dialect) -> list[Step]:
    """Read the catalog and plan what is missing; refuse what provisioning cannot build on."""
    cat = read_catalog(conn)
    steps = plan(cat, dialect)
    if steps:
        _refuse_unbuildable(conn, cat, steps)
    return steps


def _refuse_unbuildable(conn: Connection, cat: SchemaCatalog, steps: list[Step]) -> None:
    """Raise ``SchemaDrift`` (before any DDL) for what no statement of ``steps`` could fix.

    An expected index name taken by another table's index: ``CREATE INDEX IF NOT EXISTS`` would
    skip it silently, on every run. On MySQL, an agent table that is not InnoDB in
    ``utf8mb4_bin``: the first foreign key to it fails (errno 150) after other tables exist.
    One more catalog query on MySQL, and only when there is DDL to run.
    """
    name = dialect_name(conn)
    reasons = []
    for step in steps:
        owner = cat.index_owners.get(step.name) if step.kind == "index" else None
        if owner is not None and owner != step.table:
            reasons.append(
                f"index {step.name} belongs on {step.table}, but an index on table {owner} "
                f"already has that name (index names are shared by the whole schema on {name}): "
                f"rename or drop that index on {owner}, then provision again"
            )
    if name == "mysql":
        read_mysql_options(conn, cat)
        wrong = _wrong_table_options(cat)
        if wrong:
            described = ", ".join(f"{t} is ENGINE={e} with {c}" for t, e, c in wrong)
            converts = "; ".join(f"ALTER TABLE {t} {_CONVERT}" for t, _, _ in wrong)
            rewrites = "each rewrites its table" if len(wrong) > 1 else "it rewrites the table"
            reasons.append(
                f"{described}, but agora's tables must be InnoDB in utf8mb4_bin (else their "
                f"foreign keys cannot be formed and ids compare case-insensitively): convert "
                f"first with {converts} ({rewrites}), then provision again"
            )
    if reasons:
        raise SchemaDrift(f"cannot provision: {'; '.join(reasons)}; nothing was changed")


def _engine_ok(engine: str | None) -> bool:
    return str(engine).lower() == "innodb"


def _collation_ok(collation: str | None) -> bool:
    return collation == "utf8mb4_bin"


def _wrong_table_options(cat: SchemaCatalog) -> list[tuple[str, str | None, str | None]]:
    """The existing agent tables (MySQL) whose engine or collation agora cannot build on."""
    out = []
    for table in metadata.sorted_tables:
        if table.name in cat.table_options:
            engine, collation = cat.table_options[table.name]
            if not (_engine_ok(engine) and _collation_ok(collation)):
                out.append((table.name, engine, collation))
    return out


@contextmanager
def provisioning_lock(conn: Connection, *, timeout_s: float = 300.0) -> Iterator[None]:
    """Hold agora's session-level provisioning lock on ``conn`` (no-op on SQLite).

    PostgreSQL: ``pg_try_advisory_lock`` polled until ``timeout_s``. MySQL: ``GET_LOCK`` on a name
    salted with the database name. Raises ``LockTimeout`` when not granted in time.
    """
    name = dialect_name(conn)
    if name == "sqlite":
        yield
        return
    if name == "postgresql":
        deadline = time.monotonic() + timeout_s
        while True:
            got = conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": _PG_LOCK_KEY})
            granted = bool(got.scalar())
            conn.commit()
            if granted:
                break
            if time.monotonic() > deadline:
                raise LockTimeout(f"the provisioning lock was not granted within {timeout_s:g} s")
            time.sleep(0.05)
        release = text("SELECT pg_advisory_unlock(:k)")
        params: dict[str, Any] = {"k": _PG_LOCK_KEY}
    else:
        lock_name = "CONCAT('agora_provision_', SHA1(DATABASE()))"
        got = conn.execute(text(f"SELECT GET_LOCK({lock_name}, :t)"), {"t": int(timeout_s)})
        granted = got.scalar() == 1
        conn.commit()
        if not granted:
            raise LockTimeout(f"the provisioning lock was not granted within {timeout_s:g} s")
        release = text(f"SELECT RELEASE_LOCK({lock_name})")
        params = {}
    try:
        yield
    finally:
        if conn.in_transaction():
            conn.rollback()
        conn.execute(release, params)
        conn.commit()


def ensure_agent_tables(
    bind: Engine | Connection,
    *,
    dry_run: bool = False,
    lock: bool = True,
    lock_timeout_s: float = 300.0,
    table_lock_timeout_s: float = DEFAULT_TABLE_LOCK_TIMEOUT_S,
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
    table's index has, or a MySQL agent table that is not InnoDB in ``utf8mb4_bin``.
    """
    seconds = table_lock_timeout(table_lock_timeout_s)
    name = dialect_name(bind)
    dialect = compile_dialect(name)
    if isinstance(bind, Engine):

        def read_plan() -> list[Step]:
            with bind.connect().execution_options(sqlite_deferred=True) as conn:
                planned = _plan_checked(conn, dialect)
                conn.rollback()
                return planned

        # On Galera a catalog read can be aborted by another node's DDL (1213): read again.
        steps = retry_transient(read_plan)
    else:
        steps = _plan_checked(bind, dialect)
    if not steps or dry_run:
        return _report(name, steps, already_current=not steps, dry_run=dry_run)

    doing = "to provision " + ", ".join(dict.fromkeys(s.table for s in steps))
    if isinstance(bind, Connection) and not lock:
        done = _apply_on(bind, dialect, nested=bind.in_transaction() and name != "mysql")
    elif isinstance(bind, Connection) and name == "sqlite":
        with bounded_lock_waits(bind, seconds, doing=doing):
            done = _apply_on(bind, dialect, nested=bind.in_transaction())
    else:
        engine = bind if isinstance(bind, Engine) else bind.engine
        with engine.connect() as conn, bounded_lock_waits(conn, seconds, doing=doing):
            if name == "sqlite":
                with conn.begin():
                    done = _apply_on(conn, dialect, nested=False)
            else:
                with provisioning_lock(conn, timeout_s=lock_timeout_s):
                    if is_galera(conn):
                        done = _apply_converging(conn, dialect)
                    else:
                        done = _apply_each(conn, dialect)
    return _report(name, done, already_current=False, dry_run=False)


# A Galera cluster: the provisioning lock (GET_LOCK) is node-local, so provisioners on several
# nodes run DDL at once. Each statement is replicated in total order (TOI), so they cannot
# corrupt anything, but a statement can fail because another node's has just done the same
# (1050 table exists, 1060 duplicate column, 1061 duplicate key), and a catalog read can be
# aborted by, or briefly miss, a table another node is altering. Such a provisioner reads the
# catalog again and carries on until nothing is missing.
GALERA_ROUNDS = 12


def _apply_converging(conn: Connection, dialect: Dialect) -> list[Step]:
    """``_apply_each`` until the schema is current, re-planning after each lost race."""
    done: list[Step] = []
    for round_ in range(GALERA_ROUNDS):
        try:
            done.extend(_apply_each(conn, dialect))
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
    from sqlalchemy.exc import DBAPIError

    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, DBAPIError):
        cause = cause.__cause__
    if cause is None:
        return False
    args: tuple[object, ...] = tuple(getattr(cause.orig, "args", ()))
    # 1050/1060/1061/1826: already exists (table, column, key, foreign key); 1146: no such table
    # (yet, on this node); 1213: aborted by a replicated statement; 1047: node not ready.
    return bool(args) and args[0] in {1047, 1050, 1060, 1061, 1146, 1213, 1826}


def _apply_on(conn: Connection, dialect: Dialect, *, nested: bool) -> list[Step]:
    """Re-read under the lock/transaction and run what is still missing on ``conn``."""
    steps = _plan_checked(conn, dialect)
    for i, step in enumerate(steps):
        try:
            if nested:
                with conn.begin_nested():
                    conn.execute(step.element)
            else:
                conn.execute(step.element)
        except Exception as exc:
            if not is_lock_wait(exc):
                raise
            # MySQL commits each DDL statement; elsewhere the caller's transaction undoes them.
            kept = i if dialect.name == "mysql" else 0
            raise lock_wait_error(conn, step, kept=kept) from exc
    return steps


def _apply_each(conn: Connection, dialect: Dialect) -> list[Step]:
    """Run each missing step in its own transaction; a lost race is re-checked, not raised."""
    steps = _plan_checked(conn, dialect)
    conn.commit()
    done: list[Step] = []
    for step in steps:
        try:
            with conn.begin():
                conn.execute(step.element)
            done.append(step)
        except Exception as exc:
            if conn.in_transaction():
                conn.rollback()
            if is_lock_wait(exc):
                raise lock_wait_error(conn, step, kept=len(done)) from exc
            still = {(s.kind, s.table, s.name) for s in plan(read_catalog(conn), dialect)}
            conn.rollback()
            if (step.kind, step.table, step.name) in still:
                err = translate_error(exc)
                raise (err or DatabaseError(str(exc))) from exc
    return done


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
    )


def check_agent_tables(bind: Engine | Connection) -> list[Problem]:
    """Every difference between the live database and the expected agent schema.

    Extra tables, columns and indexes are not drift; foreign keys are compared by shape. On a
    Galera cluster node, also what the cluster cannot replicate safely, in any table of the
    database (``galera.galera_problems``: ``no_primary_key``, ``wrong_engine``,
    ``galera_setting``).
    """
    from agora_cli.store.galera import galera_problems

    names = {t.name for t in metadata.sorted_tables}
    if isinstance(bind, Engine):
        with bind.connect().execution_options(sqlite_deferred=True) as conn:
            cat = read_catalog(conn, full=True)
            cluster = galera_problems(conn, names)
            conn.rollback()
    else:
        cat = read_catalog(bind, full=True)
        cluster = galera_problems(bind, names)
    is_mysql = dialect_name(bind) == "mysql"
    problems: list[Problem] = []
    for table in metadata.sorted_tables:
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
        for fk in table.foreign_key_constraints:
            problems.extend(_check_fk(t, fk, cat.foreign_keys.get(t, [])))
        if is_mysql:
            engine, collation = cat.table_options.get(t, (None, None))
            if not _engine_ok(engine):
                problems.append(Problem("wrong_engine", t, f"{t} uses ENGINE={engine}, not InnoDB"))
            if not _collation_ok(collation):
                problems.append(
                    Problem("wrong_collation", t, f"{t} uses {collation}, not utf8mb4_bin")
                )
    from agora_cli.store.rls import policy_problems  # PostgreSQL, once RLS is enabled

    problems.extend(policy_problems(bind))
    return problems + cluster


def _check_fk(table: str, fk: ForeignKeyConstraint, live: list[ForeignKeyShape]) -> list[Problem]:
    cols = tuple(e.parent.name for e in fk.elements)
    target = fk.elements[0].column.table.name
    target_cols = tuple(e.column.name for e in fk.elements)
    described = f"{table}({', '.join(cols)}) -> {target}({', '.join(target_cols)})"
    same = [
        s
        for s in live
        if s.columns == cols and s.target == target and s.target_columns == target_cols
    ]
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
