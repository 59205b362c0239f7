"""Provision, check and describe the agent schema on PostgreSQL, MySQL/MariaDB and SQLite.

``ensure_agent_tables`` reads the catalog in a few queries (independent of the number of tables),
and against a current schema does nothing else: no DDL, no lock. When something is missing it takes
the session-level provisioning lock (PostgreSQL ``pg_try_advisory_lock``, MySQL ``GET_LOCK``
salted with the database name; SQLite's ``BEGIN IMMEDIATE`` is its own lock), re-reads the
catalog, and creates only what is still missing. It never drops, renames or rewrites anything.

Before any DDL it refuses (``SchemaDrift``, creating nothing) what it cannot build on: an expected
index name already taken by another table's index (PostgreSQL and SQLite index names are
schema-wide, and ``CREATE INDEX IF NOT EXISTS`` would silently skip it), and on MySQL an existing
agent table that is not InnoDB in ``utf8mb4_bin`` (its foreign keys cannot be formed).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Column, ForeignKeyConstraint, Index, MetaData, Table, text
from sqlalchemy.engine import Connection, Dialect, Engine
from sqlalchemy.schema import CreateColumn, CreateIndex, CreateTable, ExecutableDDLElement

from agora_cli.store.engine import dialect_name, translate_error
from agora_cli.store.errors import (
    DatabaseError,
    LockTimeout,
    SchemaDrift,
    UnknownDialect,
)
from agora_cli.store.schema import UPGRADE_COLUMNS, UPGRADE_INDEXES, metadata

__all__ = [
    "Catalog",
    "ForeignKeyShape",
    "Problem",
    "ProvisionReport",
    "RowCount",
    "check_agent_tables",
    "compile_dialect",
    "create_table_statements",
    "ensure_agent_tables",
    "provisioning_lock",
    "read_catalog",
    "revision_statements",
    "table_row_counts",
]

PROBLEM_KINDS = (
    "missing_table",
    "missing_column",
    "missing_index",
    "missing_foreign_key",
    "wrong_engine",
    "wrong_collation",
)
_PG_LOCK_KEY = 0x61676F7261  # "agora"
_LIKE = "agent!_%"
_CONVERT = "ENGINE=InnoDB, CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"


@dataclass(frozen=True)
class ForeignKeyShape:
    """A foreign key compared by shape: columns, target, target columns, ON DELETE."""

    columns: tuple[str, ...]
    target: str
    target_columns: tuple[str, ...]
    on_delete: str | None


@dataclass
class Catalog:
    """What the live database holds of the agent tables.

    ``index_owners`` maps an ``agent_*`` index name to the table it is on, whatever that table,
    where index names are schema-wide (PostgreSQL, SQLite; empty on MySQL, where they are per
    table). ``table_options`` (MySQL: engine, collation) is read by the full check, and by
    provisioning only when it has DDL to run.
    """

    columns: dict[str, set[str]] = field(default_factory=dict)
    indexes: dict[str, set[str]] = field(default_factory=dict)
    foreign_keys: dict[str, list[ForeignKeyShape]] = field(default_factory=dict)
    table_options: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    index_owners: dict[str, str] = field(default_factory=dict)


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


@dataclass(frozen=True)
class _Step:
    kind: str  # table | column | index
    table: str
    name: str
    element: ExecutableDDLElement
    sql: str
    note: str | None = None


# --------------------------------------------------------------------------- catalog reads


def read_catalog(conn: Connection, *, full: bool = False) -> Catalog:
    """Read the agent tables' columns and index names (and, ``full``, FKs and MySQL options).

    Two queries for provisioning, at most four for a full check, whatever the number of tables.
    """
    name = dialect_name(conn)
    reader = {"postgresql": _read_pg, "mysql": _read_mysql, "sqlite": _read_sqlite}[name]
    return reader(conn, full)


def _rows(conn: Connection, sql: str) -> list[Any]:
    return list(conn.execute(text(sql), {"p": _LIKE}).all())


def _fill(cat: Catalog, cols: list[Any], idx: list[Any], *, schema_wide: bool) -> None:
    for table, column in cols:
        cat.columns.setdefault(str(table), set()).add(str(column))
    for table, index in idx:
        if index is None:
            continue
        if str(table).startswith("agent_"):
            cat.indexes.setdefault(str(table), set()).add(str(index))
        if schema_wide:
            cat.index_owners[str(index)] = str(table)


def _read_pg(conn: Connection, full: bool) -> Catalog:
    cat = Catalog()
    cols = _rows(
        conn,
        "SELECT c.relname, a.attname FROM pg_catalog.pg_class c "
        "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
        "JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid "
        "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') "
        "AND c.relname LIKE :p ESCAPE '!' AND a.attnum > 0 AND NOT a.attisdropped",
    )
    idx = _rows(
        conn,
        "SELECT tablename, indexname FROM pg_catalog.pg_indexes "
        "WHERE schemaname = current_schema() "
        "AND (tablename LIKE :p ESCAPE '!' OR indexname LIKE :p ESCAPE '!')",
    )
    _fill(cat, cols, idx, schema_wide=True)
    if full:
        fks = _rows(
            conn,
            "SELECT cl.relname, ref.relname, con.confdeltype, "
            "ARRAY(SELECT a.attname::text FROM unnest(con.conkey) WITH ORDINALITY AS k(n, o) "
            "  JOIN pg_catalog.pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.n "
            "  ORDER BY k.o), "
            "ARRAY(SELECT a.attname::text FROM unnest(con.confkey) WITH ORDINALITY AS k(n, o) "
            "  JOIN pg_catalog.pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.n "
            "  ORDER BY k.o) "
            "FROM pg_catalog.pg_constraint con "
            "JOIN pg_catalog.pg_class cl ON cl.oid = con.conrelid "
            "JOIN pg_catalog.pg_namespace n ON n.oid = cl.relnamespace "
            "JOIN pg_catalog.pg_class ref ON ref.oid = con.confrelid "
            "WHERE con.contype = 'f' AND n.nspname = current_schema() "
            "AND cl.relname LIKE :p ESCAPE '!'",
        )
        rules = {"c": "CASCADE", "a": None, "r": "RESTRICT", "n": "SET NULL", "d": "SET DEFAULT"}
        for table, target, rule, columns, target_columns in fks:
            cat.foreign_keys.setdefault(table, []).append(
                ForeignKeyShape(tuple(columns), target, tuple(target_columns), rules.get(rule))
            )
    return cat


def _read_mysql(conn: Connection, full: bool) -> Catalog:
    cat = Catalog()
    cols = _rows(
        conn,
        "SELECT table_name, column_name FROM information_schema.columns "
        "WHERE table_schema = DATABASE() AND table_name LIKE :p ESCAPE '!'",
    )
    idx = _rows(
        conn,
        "SELECT DISTINCT table_name, index_name FROM information_schema.statistics "
        "WHERE table_schema = DATABASE() AND table_name LIKE :p ESCAPE '!'",
    )
    _fill(cat, cols, idx, schema_wide=False)
    if full:
        fks = _rows(
            conn,
            "SELECT k.table_name, k.constraint_name, k.column_name, k.referenced_table_name, "
            "k.referenced_column_name, r.delete_rule "
            "FROM information_schema.key_column_usage k "
            "JOIN information_schema.referential_constraints r "
            "  ON r.constraint_schema = k.constraint_schema "
            "  AND r.constraint_name = k.constraint_name AND r.table_name = k.table_name "
            "WHERE k.table_schema = DATABASE() AND k.referenced_table_name IS NOT NULL "
            "AND k.table_name LIKE :p ESCAPE '!' "
            "ORDER BY k.table_name, k.constraint_name, k.ordinal_position",
        )
        grouped: dict[tuple[str, str], list[Any]] = {}
        for row in fks:
            grouped.setdefault((row[0], row[1]), []).append(row)
        for (table, _name), rows in grouped.items():
            rule = str(rows[0][5]).upper()
            cat.foreign_keys.setdefault(table, []).append(
                ForeignKeyShape(
                    tuple(r[2] for r in rows),
                    rows[0][3],
                    tuple(r[4] for r in rows),
                    None if rule in ("NO ACTION", "RESTRICT") else rule,
                )
            )
        _read_mysql_options(conn, cat)
    return cat


def _read_mysql_options(conn: Connection, cat: Catalog) -> None:
    for table, engine, collation in _rows(
        conn,
        "SELECT table_name, engine, table_collation FROM information_schema.tables "
        "WHERE table_schema = DATABASE() AND table_name LIKE :p ESCAPE '!'",
    ):
        cat.table_options[table] = (engine, collation)


def _read_sqlite(conn: Connection, full: bool) -> Catalog:
    cat = Catalog()
    cols = _rows(
        conn,
        "SELECT m.name, p.name FROM sqlite_master m JOIN pragma_table_info(m.name) p "
        "WHERE m.type = 'table' AND m.name LIKE :p ESCAPE '!'",
    )
    idx = _rows(
        conn,
        "SELECT tbl_name, name FROM sqlite_master "
        "WHERE type = 'index' AND (tbl_name LIKE :p ESCAPE '!' OR name LIKE :p ESCAPE '!')",
    )
    _fill(cat, cols, idx, schema_wide=True)
    if full:
        fks = _rows(
            conn,
            'SELECT m.name, f.id, f."from", f."table", f."to", f.on_delete '
            "FROM sqlite_master m JOIN pragma_foreign_key_list(m.name) f "
            "WHERE m.type = 'table' AND m.name LIKE :p ESCAPE '!' ORDER BY m.name, f.id, f.seq",
        )
        grouped: dict[tuple[str, int], list[Any]] = {}
        for row in fks:
            grouped.setdefault((row[0], row[1]), []).append(row)
        for (table, _id), rows in grouped.items():
            rule = str(rows[0][5]).upper()
            cat.foreign_keys.setdefault(table, []).append(
                ForeignKeyShape(
                    tuple(r[2] for r in rows),
                    rows[0][3],
                    # an inline "REFERENCES t" without columns means t's primary key
                    tuple(r[4] if r[4] is not None else "id" for r in rows),
                    None if rule in ("NO ACTION", "RESTRICT") else rule,
                )
            )
    return cat


# --------------------------------------------------------------------------- DDL


def compile_dialect(name: str) -> Dialect:
    """A SQLAlchemy dialect object for ``postgresql``, ``mysql`` or ``sqlite`` (no database)."""
    if name in ("postgresql", "postgres"):
        from sqlalchemy.dialects.postgresql import psycopg

        return psycopg.dialect()  # type: ignore[no-untyped-call]
    if name in ("mysql", "mariadb"):
        from sqlalchemy.dialects.mysql import pymysql

        return pymysql.dialect()
    if name == "sqlite":
        from sqlalchemy.dialects.sqlite import pysqlite

        return pysqlite.dialect()
    raise UnknownDialect(f"unknown dialect {name!r}: use postgresql, mysql or sqlite")


def _sql(element: ExecutableDDLElement, dialect: Dialect) -> str:
    return "\n".join(
        line.rstrip() for line in str(element.compile(dialect=dialect)).strip().splitlines()
    )


def _create_table(table: Table, dialect: Dialect) -> _Step:
    element = CreateTable(table, if_not_exists=True)
    return _Step("table", table.name, table.name, element, _sql(element, dialect))


def _create_index(index: Index, dialect: Dialect) -> _Step:
    table = index.table
    assert table is not None
    element = CreateIndex(index, if_not_exists=dialect.name != "mysql")
    return _Step("index", table.name, str(index.name), element, _sql(element, dialect))


class _AddColumn(ExecutableDDLElement):
    """``ALTER TABLE t ADD COLUMN <column DDL>`` compiled for any dialect."""

    def __init__(self, table: Table, column: Column[Any]) -> None:
        self.table = table
        self.column = column


def _compile_add_column(element: _AddColumn, compiler: Any, **kw: Any) -> str:
    prep = compiler.preparer
    return (
        f"ALTER TABLE {prep.format_table(element.table)} "
        f"ADD COLUMN {compiler.process(CreateColumn(element.column), **kw)}"
    )


from sqlalchemy.ext.compiler import compiles  # noqa: E402

compiles(_AddColumn)(_compile_add_column)


def _add_column(table: Table, column: Column[Any], dialect: Dialect) -> _Step:
    note = None
    if not column.nullable and column.server_default is None:
        # A NOT NULL column without a default cannot be added to a table that has rows.
        shadow = Table(table.name, MetaData(), column._copy(), **table.kwargs)
        column = shadow.c[column.name]
        column.nullable = True
        note = f"{table.name}.{column.name} was added nullable (NOT NULL needs a default)"
    element = _AddColumn(table, column)
    return _Step("column", table.name, column.name, element, _sql(element, dialect), note)


def _plan(cat: Catalog, dialect: Dialect, meta: MetaData = metadata) -> list[_Step]:
    steps: list[_Step] = []
    for table in meta.sorted_tables:
        live_columns = cat.columns.get(table.name)
        if live_columns is None:
            steps.append(_create_table(table, dialect))
            steps.extend(_create_index(i, dialect) for i in _sorted_indexes(table))
            continue
        for column in table.columns:
            if column.name not in live_columns:
                steps.append(_add_column(table, column, dialect))
        live_indexes = cat.indexes.get(table.name, set())
        for index in _sorted_indexes(table):
            if index.name not in live_indexes:
                steps.append(_create_index(index, dialect))
    return steps


def _sorted_indexes(table: Table) -> list[Index]:
    return sorted(table.indexes, key=lambda i: str(i.name))


def create_table_statements(dialect: str, *, if_not_exists: bool = False) -> list[str]:
    """The full DDL of the agent schema for ``dialect`` (no trailing semicolons)."""
    d = compile_dialect(dialect)
    out: list[str] = []
    for table in metadata.sorted_tables:
        out.append(_sql(CreateTable(table, if_not_exists=if_not_exists), d))
        for index in _sorted_indexes(table):
            ine = if_not_exists and d.name != "mysql"
            out.append(_sql(CreateIndex(index, if_not_exists=ine), d))
    return out


def _base_metadata() -> MetaData:
    """The schema as revision 0001 first created it (without the upgrades' columns/indexes)."""
    later_cols = {c for cols in UPGRADE_COLUMNS.values() for c in cols}
    later_idx = {i for idx in UPGRADE_INDEXES.values() for i in idx}
    base = MetaData()
    for table in metadata.sorted_tables:
        cols = [c._copy() for c in table.columns if (table.name, c.name) not in later_cols]
        fks = [
            ForeignKeyConstraint(
                [e.parent.name for e in fk.elements],
                [e.target_fullname for e in fk.elements],
                name=fk.name,
                ondelete=fk.ondelete,
            )
            for fk in table.foreign_key_constraints
        ]
        idx = [
            Index(i.name, *[c.name for c in i.columns], unique=i.unique)
            for i in table.indexes
            if (table.name, i.name) not in later_idx
        ]
        Table(table.name, base, *cols, *fks, *idx, **table.kwargs)
    return base


def revision_statements(revision: str, dialect: str) -> list[str]:
    """The DDL a revision adds, for offline SQL (``agora db upgrade --sql``)."""
    d = compile_dialect(dialect)
    if revision == "0001":
        base = _base_metadata()
        return [s.sql for s in _plan(Catalog(), d, base)]
    steps: list[str] = []
    for table_name, column_name in UPGRADE_COLUMNS.get(revision, []):
        table = metadata.tables[table_name]
        steps.append(_add_column(table, table.c[column_name], d).sql)
    for table_name, index_name in UPGRADE_INDEXES.get(revision, []):
        index = next(i for i in metadata.tables[table_name].indexes if i.name == index_name)
        steps.append(_create_index(index, d).sql)
    return steps


# --------------------------------------------------------------------------- refusals


def _plan_checked(conn: Connection, dialect: Dialect) -> list[_Step]:
    """Read the catalog and plan what is missing; refuse what provisioning cannot build on."""
    cat = read_catalog(conn)
    steps = _plan(cat, dialect)
    if steps:
        _refuse_unbuildable(conn, cat, steps)
    return steps


def _refuse_unbuildable(conn: Connection, cat: Catalog, steps: list[_Step]) -> None:
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
        _read_mysql_options(conn, cat)
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


def _wrong_table_options(cat: Catalog) -> list[tuple[str, str | None, str | None]]:
    """The existing agent tables (MySQL) whose engine or collation agora cannot build on."""
    out = []
    for table in metadata.sorted_tables:
        if table.name in cat.table_options:
            engine, collation = cat.table_options[table.name]
            if not (_engine_ok(engine) and _collation_ok(collation)):
                out.append((table.name, engine, collation))
    return out


# --------------------------------------------------------------------------- locking


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


# --------------------------------------------------------------------------- ensure / check


def ensure_agent_tables(
    bind: Engine | Connection,
    *,
    dry_run: bool = False,
    lock: bool = True,
    lock_timeout_s: float = 300.0,
) -> ProvisionReport:
    """Bring the database to the current agent schema, idempotently; report what was done.

    ``bind`` is normally an ``Engine``: the catalog is read on a short connection and DDL, when
    needed, runs on a connection of its own under the provisioning lock (waited for up to
    ``lock_timeout_s``). With a ``Connection`` and ``lock=False`` (inside a migration, which
    already holds the lock) everything runs on that connection. SQLite always uses the given
    connection: its single writer is the lock.

    ``SchemaDrift`` (nothing
    created, dry run or not) for what it cannot build on: an expected index name that another
    table's index has, or a MySQL agent table that is not InnoDB in ``utf8mb4_bin``.
    """
    name = dialect_name(bind)
    dialect = compile_dialect(name)
    if isinstance(bind, Engine):
        with bind.connect().execution_options(sqlite_deferred=True) as conn:
            steps = _plan_checked(conn, dialect)
            conn.rollback()
    else:
        steps = _plan_checked(bind, dialect)
    if not steps or dry_run:
        return _report(name, steps, already_current=not steps, dry_run=dry_run)

    if isinstance(bind, Connection) and (name == "sqlite" or not lock):
        done = _apply_on(bind, dialect, nested=bind.in_transaction() and name != "mysql")
    else:
        engine = bind if isinstance(bind, Engine) else bind.engine
        with engine.connect() as conn:
            if name == "sqlite":
                with conn.begin():
                    done = _apply_on(conn, dialect, nested=False)
            else:
                with provisioning_lock(conn, timeout_s=lock_timeout_s):
                    done = _apply_each(conn, dialect)
    return _report(name, done, already_current=False, dry_run=False)


def _apply_on(conn: Connection, dialect: Dialect, *, nested: bool) -> list[_Step]:
    """Re-read under the lock/transaction and run what is still missing on ``conn``."""
    steps = _plan_checked(conn, dialect)
    for step in steps:
        if nested:
            with conn.begin_nested():
                conn.execute(step.element)
        else:
            conn.execute(step.element)
    return steps


def _apply_each(conn: Connection, dialect: Dialect) -> list[_Step]:
    """Run each missing step in its own transaction; a lost race is re-checked, not raised."""
    steps = _plan_checked(conn, dialect)
    conn.commit()
    done: list[_Step] = []
    for step in steps:
        try:
            with conn.begin():
                conn.execute(step.element)
            done.append(step)
        except Exception as exc:
            if conn.in_transaction():
                conn.rollback()
            still = {(s.kind, s.table, s.name) for s in _plan(read_catalog(conn), dialect)}
            conn.rollback()
            if (step.kind, step.table, step.name) in still:
                err = translate_error(exc)
                raise (err or DatabaseError(str(exc))) from exc
    return done


def _report(
    name: str, steps: list[_Step], *, already_current: bool, dry_run: bool
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

    Extra tables, columns and indexes are not drift; foreign keys are compared by shape.
    """
    if isinstance(bind, Engine):
        with bind.connect().execution_options(sqlite_deferred=True) as conn:
            cat = read_catalog(conn, full=True)
            conn.rollback()
    else:
        cat = read_catalog(bind, full=True)
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
        for index in _sorted_indexes(table):
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
    return problems


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


# --------------------------------------------------------------------------- sizes

ESTIMATE_ABOVE = 100_000


@dataclass(frozen=True)
class RowCount:
    """A table's row count; ``estimated`` when it comes from the catalog's statistics."""

    rows: int
    estimated: bool


def table_row_counts(conn: Connection) -> dict[str, RowCount]:
    """Row counts of the agent tables that exist: exact, or a catalog estimate on large tables.

    Two queries: the catalog's estimates (PostgreSQL ``reltuples``, MySQL ``table_rows``), then
    one ``UNION ALL`` of exact counts for the tables estimated below 100,000 rows.
    """
    name = dialect_name(conn)
    estimates: dict[str, int] = {}
    if name == "postgresql":
        sql = (
            "SELECT c.relname, c.reltuples::bigint FROM pg_catalog.pg_class c "
            "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') "
            "AND c.relname LIKE :p ESCAPE '!'"
        )
    elif name == "mysql":
        sql = (
            "SELECT table_name, table_rows FROM information_schema.tables "
            "WHERE table_schema = DATABASE() AND table_name LIKE :p ESCAPE '!'"
        )
    else:
        sql = "SELECT name, 0 FROM sqlite_master WHERE type = 'table' AND name LIKE :p ESCAPE '!'"
    for table, estimate in _rows(conn, sql):
        estimates[str(table)] = int(estimate or 0)
    expected = [t.name for t in metadata.sorted_tables if t.name in estimates]
    large = {t for t in expected if estimates[t] >= ESTIMATE_ABOVE}
    small = [t for t in expected if t not in large]
    exact: dict[str, int] = {}
    if small:
        prep = conn.dialect.identifier_preparer
        union = " UNION ALL ".join(f"SELECT '{t}', COUNT(*) FROM {prep.quote(t)}" for t in small)
        exact = {str(t): int(n) for t, n in conn.execute(text(union)).all()}
    return {
        t: RowCount(estimates[t], True) if t in large else RowCount(exact[t], False)
        for t in expected
    }
