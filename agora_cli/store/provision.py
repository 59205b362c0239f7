"""Provision, check and describe the agent schema on PostgreSQL, MySQL/MariaDB and SQLite.

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
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Column, ForeignKeyConstraint, Index, MetaData, Table, bindparam, text
from sqlalchemy.engine import Connection, Dialect, Engine
from sqlalchemy.schema import CreateColumn, CreateIndex, CreateTable, ExecutableDDLElement

from agora_cli.store.engine import dialect_name, translate_error
from agora_cli.store.errors import (
    AgoraError,
    DatabaseError,
    InvalidInput,
    LockTimeout,
    SchemaDrift,
    UnknownDialect,
)
from agora_cli.store.schema import UPGRADE_COLUMNS, UPGRADE_INDEXES, metadata

__all__ = [
    "DEFAULT_TABLE_LOCK_TIMEOUT_S",
    "MAX_TABLE_LOCK_TIMEOUT_S",
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
DEFAULT_TABLE_LOCK_TIMEOUT_S = 10.0
MAX_TABLE_LOCK_TIMEOUT_S = 3600.0
_BOUND_KEY = "agora_table_lock_timeout_s"  # in Connection.info while bounded_lock_waits holds
_CONVERT = "ENGINE=InnoDB, CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"


@dataclass(frozen=True)
class ForeignKeyShape:
    """A foreign key compared by shape: columns, target, target columns, ON DELETE."""

    columns: tuple[str, ...]
    target: str
    target_columns: tuple[str, ...]
    on_delete: str | None


@dataclass
class SchemaCatalog:
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


Catalog = SchemaCatalog  # the old name, kept for imports written before the rename


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


def read_catalog(conn: Connection, *, full: bool = False) -> SchemaCatalog:
    """Read the agent tables' columns and index names (and, ``full``, FKs and MySQL options).

    Two queries for provisioning, at most four for a full check, whatever the number of tables.
    """
    name = dialect_name(conn)
    reader = {"postgresql": _read_pg, "mysql": _read_mysql, "sqlite": _read_sqlite}[name]
    return reader(conn, full)


def _rows(conn: Connection, sql: str) -> list[Any]:
    return list(conn.execute(text(sql), {"p": _LIKE}).all())


def _fill(cat: SchemaCatalog, cols: list[Any], idx: list[Any], *, schema_wide: bool) -> None:
    for table, column in cols:
        cat.columns.setdefault(str(table), set()).add(str(column))
    for table, index in idx:
        if index is None:
            continue
        if str(table).startswith("agent_"):
            cat.indexes.setdefault(str(table), set()).add(str(index))
        if schema_wide:
            cat.index_owners[str(index)] = str(table)


def _read_pg(conn: Connection, full: bool) -> SchemaCatalog:
    cat = SchemaCatalog()
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


def _read_mysql(conn: Connection, full: bool) -> SchemaCatalog:
    cat = SchemaCatalog()
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


def _read_mysql_options(conn: Connection, cat: SchemaCatalog) -> None:
    for table, engine, collation in _rows(
        conn,
        "SELECT table_name, engine, table_collation FROM information_schema.tables "
        "WHERE table_schema = DATABASE() AND table_name LIKE :p ESCAPE '!'",
    ):
        cat.table_options[table] = (engine, collation)


def _read_sqlite(conn: Connection, full: bool) -> SchemaCatalog:
    cat = SchemaCatalog()
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


def _plan(cat: SchemaCatalog, dialect: Dialect, meta: MetaData = metadata) -> list[_Step]:
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
        return [s.sql for s in _plan(SchemaCatalog(), d, base)]
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


def _refuse_unbuildable(conn: Connection, cat: SchemaCatalog, steps: list[_Step]) -> None:
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


def _wrong_table_options(cat: SchemaCatalog) -> list[tuple[str, str | None, str | None]]:
    """The existing agent tables (MySQL) whose engine or collation agora cannot build on."""
    out = []
    for table in metadata.sorted_tables:
        if table.name in cat.table_options:
            engine, collation = cat.table_options[table.name]
            if not (_engine_ok(engine) and _collation_ok(collation)):
                out.append((table.name, engine, collation))
    return out


# --------------------------------------------------------------------------- lock waits


def table_lock_timeout(seconds: float) -> float:
    """Return ``seconds`` if it can bound lock waits (finite, > 0, <= 3600), else raise."""
    ok = isinstance(seconds, int | float) and math.isfinite(seconds)
    if not (ok and 0 < seconds <= MAX_TABLE_LOCK_TIMEOUT_S):
        shown = f"{seconds:g}" if isinstance(seconds, int | float) else repr(seconds)
        raise InvalidInput(
            f"table_lock_timeout_s must be a number of seconds more than 0 and at most "
            f"{MAX_TABLE_LOCK_TIMEOUT_S:g}, not {shown}",
            param="table_lock_timeout_s",
        )
    return float(seconds)


@contextmanager
def bounded_lock_waits(conn: Connection, seconds: float, *, doing: str = "") -> Iterator[None]:
    """Bound every lock wait on ``conn`` to ``seconds`` inside the block; restore it on the way out.

    On PostgreSQL and MySQL ``conn`` is a connection of agora's own with no transaction open
    (the setting is committed at once; the connection goes back to a pool afterwards); SQLite's
    is set on the driver and may be the caller's. PostgreSQL: ``lock_timeout``. MySQL:
    ``lock_wait_timeout`` (metadata locks, which DDL waits on) and ``innodb_lock_wait_timeout``
    (row locks, which a migration's backfill waits on), whole seconds rounded up. SQLite: the busy
    timeout (its one write lock covers the whole file). A lock wait that trips inside and is not
    an agora error yet becomes ``LockTimeout``.
    """
    seconds = table_lock_timeout(seconds)
    ours = not conn.in_transaction()
    restore = _set_lock_bound(conn, dialect_name(conn), seconds)
    conn.info[_BOUND_KEY] = seconds
    try:
        yield
    except Exception as exc:
        if isinstance(exc, AgoraError) or not _is_lock_wait(exc):
            raise
        if ours and conn.in_transaction():
            conn.rollback()
        raise _lock_wait_error(conn, None, kept=0, doing=doing) from exc
    finally:
        conn.info.pop(_BOUND_KEY, None)
        if not conn.invalidated and not conn.closed:
            restore()


def _set_lock_bound(conn: Connection, name: str, seconds: float) -> Callable[[], None]:
    """Set the session's lock-wait bound; return what puts the old one back."""
    if name == "sqlite":
        # Through the driver: a statement through SQLAlchemy would BEGIN IMMEDIATE first, which
        # is itself the wait we are bounding.
        raw = conn.connection.driver_connection
        assert raw is not None
        old = int(raw.execute("PRAGMA busy_timeout").fetchone()[0])
        raw.execute(f"PRAGMA busy_timeout = {max(1, round(seconds * 1000))}")

        def restore_sqlite() -> None:
            raw.execute(f"PRAGMA busy_timeout = {old}")

        return restore_sqlite
    if name == "postgresql":
        get = text("SELECT current_setting('lock_timeout')")
        put = text("SELECT set_config('lock_timeout', :v, false)")
        old_pg = str(conn.execute(get).scalar())
        conn.execute(put, {"v": f"{max(1, round(seconds * 1000))}ms"})
        conn.commit()

        def restore_pg() -> None:
            if conn.in_transaction():
                conn.rollback()
            conn.execute(put, {"v": old_pg})
            conn.commit()

        return restore_pg
    # One round trip each way: the old values wait in user variables of the session.
    conn.execute(
        text(
            "SET @agora_lwt = @@SESSION.lock_wait_timeout, "
            "@agora_ilwt = @@SESSION.innodb_lock_wait_timeout, "
            "SESSION lock_wait_timeout = :n, SESSION innodb_lock_wait_timeout = :n"
        ),
        {"n": max(1, math.ceil(seconds))},
    )
    conn.commit()

    def restore_mysql() -> None:
        if conn.in_transaction():
            conn.rollback()
        conn.execute(
            text(
                "SET SESSION lock_wait_timeout = @agora_lwt, "
                "SESSION innodb_lock_wait_timeout = @agora_ilwt, @agora_lwt = NULL, "
                "@agora_ilwt = NULL"
            )
        )
        conn.commit()

    return restore_mysql


def _is_lock_wait(exc: BaseException) -> bool:
    """A lock wait that gave up: PostgreSQL 55P03, MySQL 1205, SQLite busy/locked."""
    orig = getattr(exc, "orig", None)
    if orig is None:
        return False
    if getattr(orig, "sqlstate", None) == "55P03":  # lock_not_available (lock_timeout)
        return True
    args = getattr(orig, "args", ())
    if args and args[0] == 1205:  # ER_LOCK_WAIT_TIMEOUT: metadata and row locks alike
        return True
    message = str(orig).lower()
    return "database is locked" in message or "database table is locked" in message


def _describe(step: _Step) -> str:
    if step.kind == "table":
        return f"to create table {step.table}"
    if step.kind == "column":
        return f"to add column {step.table}.{step.name}"
    return f"to create index {step.name} on {step.table}"


def _locked_tables(step: _Step) -> list[str]:
    """The tables whose locks ``step`` waits on: a new table waits on its foreign keys' targets."""
    if step.kind != "table":
        return [step.table]
    targets = [
        fk.elements[0].column.table.name
        for fk in metadata.tables[step.table].foreign_key_constraints
    ]
    return list(dict.fromkeys(t for t in targets if t != step.table)) or [step.table]


def _lock_wait_error(
    conn: Connection, step: _Step | None, *, kept: int, doing: str = ""
) -> LockTimeout:
    """``LockTimeout`` naming the table, and who holds it where the server can tell."""
    seconds = conn.info.get(_BOUND_KEY)
    after = f" after {seconds:g} s" if seconds else ""
    doing = _describe(step) if step is not None else doing
    if dialect_name(conn) == "sqlite":
        head = (
            f"gave up{after} waiting for SQLite's write lock {doing}: another connection holds "
            "a transaction open on this database file (SQLite cannot tell which)"
        ).replace("  ", " ")
    else:
        tables = _locked_tables(step) if step is not None else []
        where = f" on {' or '.join(tables)}" if tables else ""
        holders = _lock_holders(conn, tables) if tables else ""
        head = f"gave up{after} waiting for a lock{where} {doing}".rstrip()
        head += f": {holders}" if holders else ""
    done = (
        "nothing was changed"
        if kept == 0
        else f"{kept} earlier statement(s) were applied and stay (running it again does the rest)"
    )
    return LockTimeout(
        f"{head}; {done}. When that transaction has ended, run it again (or allow a longer "
        "lock timeout)"
    )


def _lock_holders(conn: Connection, tables: list[str]) -> str:
    """Who holds a lock on ``tables``, as far as the server tells; best effort, never raises."""
    if dialect_name(conn) == "postgresql":
        rows = _diagnose(conn, _PG_HOLDERS, tables)
        if not rows:
            return "the session holding it could not be identified (it may have just ended)"
        who = "; ".join(
            f"pid {pid} ({state}"
            + (f", transaction open {age:.1f} s" if age is not None else "")
            + f", user {user}"
            + (f", application {app!r}" if app else "")
            + ")"
            for pid, user, app, state, age in rows
        )
        pids = ", ".join(str(r[0]) for r in rows)
        return (
            f"held by {who}; commit or roll back that transaction (if it is abandoned: "
            f"SELECT pg_terminate_backend({pids}))"
        )
    for sql in (_MARIADB_MDL_HOLDERS, _MYSQL_MDL_HOLDERS):
        rows = _diagnose(conn, sql, tables)
        if rows:
            return f"held by {_mysql_threads(rows)}; commit or roll back that transaction"
    rows = _diagnose(conn, _MYSQL_OPEN_TRANSACTIONS, tables)
    if rows:
        return (
            "the server does not say which session holds it (no metadata_lock_info plugin or "
            f"performance_schema); sessions with a transaction open: {_mysql_threads(rows)}; "
            "commit or roll back the one that used it"
        )
    return "the session holding it could not be identified"


def _mysql_threads(rows: list[Any]) -> str:
    return "; ".join(
        f"thread {tid} (user {user}, {command}"
        + (f", transaction open {age} s" if age is not None else "")
        + ")"
        for tid, user, command, age in rows
    )


def _diagnose(conn: Connection, sql: str, tables: list[str]) -> list[Any] | None:
    """Run one diagnostic query; ``None`` if the server refuses it (missing view, privilege)."""
    stmt = text(sql)
    params: dict[str, Any] = {}
    if ":tables" in sql:
        stmt = stmt.bindparams(bindparam("tables", expanding=True))
        params["tables"] = tables
    began = not conn.in_transaction()
    rows: list[Any] | None
    try:
        if began or dialect_name(conn) != "postgresql":
            rows = list(conn.execute(stmt, params).all())
        else:  # inside a migration's transaction: a failure must not abort it
            with conn.begin_nested():
                rows = list(conn.execute(stmt, params).all())
    except Exception:
        # Diagnostics only: a server without the view, or a user without the privilege, gets a
        # shorter message, never a different error than the lock timeout being reported.
        rows = None
    if began and conn.in_transaction():
        conn.rollback()
    return rows


_PG_HOLDERS = (
    "SELECT DISTINCT a.pid, a.usename, a.application_name, a.state, "
    "EXTRACT(EPOCH FROM clock_timestamp() - a.xact_start)::float8 AS age "
    "FROM pg_catalog.pg_locks l "
    "JOIN pg_catalog.pg_class c ON c.oid = l.relation "
    "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
    "JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid "
    "WHERE l.granted AND l.pid <> pg_backend_pid() AND n.nspname = current_schema() "
    "AND c.relname IN :tables ORDER BY age DESC NULLS LAST LIMIT 3"
)
# MariaDB's metadata_lock_info plugin, when installed.
_MARIADB_MDL_HOLDERS = (
    "SELECT DISTINCT m.thread_id, p.user, p.command, "
    "TIMESTAMPDIFF(SECOND, x.trx_started, NOW()) "
    "FROM information_schema.metadata_lock_info m "
    "LEFT JOIN information_schema.processlist p ON p.id = m.thread_id "
    "LEFT JOIN information_schema.innodb_trx x ON x.trx_mysql_thread_id = m.thread_id "
    "WHERE m.table_schema = DATABASE() AND m.table_name IN :tables "
    "AND m.thread_id <> CONNECTION_ID() LIMIT 3"
)
# MySQL 8 (performance_schema is on by default there), or MariaDB with performance_schema on.
_MYSQL_MDL_HOLDERS = (
    "SELECT DISTINCT t.processlist_id, t.processlist_user, t.processlist_command, "
    "TIMESTAMPDIFF(SECOND, x.trx_started, NOW()) "
    "FROM performance_schema.metadata_locks ml "
    "JOIN performance_schema.threads t ON t.thread_id = ml.owner_thread_id "
    "LEFT JOIN information_schema.innodb_trx x ON x.trx_mysql_thread_id = t.processlist_id "
    "WHERE ml.object_type = 'TABLE' AND ml.object_schema = DATABASE() "
    "AND ml.object_name IN :tables AND ml.lock_status = 'GRANTED' "
    "AND t.processlist_id <> CONNECTION_ID() LIMIT 3"
)
# Otherwise the server can only list the transactions open right now, oldest first.
_MYSQL_OPEN_TRANSACTIONS = (
    "SELECT x.trx_mysql_thread_id, p.user, p.command, "
    "TIMESTAMPDIFF(SECOND, x.trx_started, NOW()) "
    "FROM information_schema.innodb_trx x "
    "LEFT JOIN information_schema.processlist p ON p.id = x.trx_mysql_thread_id "
    "WHERE x.trx_mysql_thread_id <> CONNECTION_ID() "
    "ORDER BY x.trx_started LIMIT 3"
)


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
        with bind.connect().execution_options(sqlite_deferred=True) as conn:
            steps = _plan_checked(conn, dialect)
            conn.rollback()
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
                    done = _apply_each(conn, dialect)
    return _report(name, done, already_current=False, dry_run=False)


def _apply_on(conn: Connection, dialect: Dialect, *, nested: bool) -> list[_Step]:
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
            if not _is_lock_wait(exc):
                raise
            # MySQL commits each DDL statement; elsewhere the caller's transaction undoes them.
            kept = i if dialect.name == "mysql" else 0
            raise _lock_wait_error(conn, step, kept=kept) from exc
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
            if _is_lock_wait(exc):
                raise _lock_wait_error(conn, step, kept=len(done)) from exc
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
