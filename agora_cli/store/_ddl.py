"""The DDL of the agent schema: the steps that bring a live schema to the expected one.

``plan`` compares a ``SchemaCatalog`` with the ``MetaData`` and returns, as compiled statements,
the missing tables, columns and indexes, the columns to widen (``type_verdict``: an ``INT``
token count to ``BIGINT``, MySQL ``TEXT`` JSON to ``LONGTEXT``; never narrower), the missing
foreign keys (compared by shape, not name), and, when asked on MySQL, the conversion of tables
that are not InnoDB in ``utf8mb4_bin`` with the foreign keys around them dropped first and
re-created after (``conversion_steps``); ``create_table_statements`` is the whole schema for a
dialect (what ``agora db sql`` prints) and ``revision_statements`` what one revision added (for
offline ``agora db upgrade --sql``); ``schema_at`` is the schema as a revision of the main chain
leaves it (what ``agora db stamp`` compares the live schema with), and ``advance`` carries a
catalog through an offline script.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import (
    BigInteger,
    Column,
    Double,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.schema import DDL, CreateColumn, CreateIndex, CreateTable, ExecutableDDLElement

from agora_cli.store._dialects import dialect_of
from agora_cli.store._live_schema import ColumnType, ForeignKeyShape, SchemaCatalog
from agora_cli.store._schema import (
    RETIRED_INDEXES,
    UPGRADE_COLUMNS,
    UPGRADE_INDEXES,
    UPGRADE_TABLES,
    LongText,
    RetiredIndex,
    apply_mysql_options,
    metadata,
)

__all__ = [
    "advance",
    "compile_dialect",
    "create_table_statements",
    "revision_statements",
    "schema_at",
]


StepKind = Literal[
    "table",
    "column",
    "index",
    "widen",
    "foreign_key",
    "drop_foreign_key",
    "convert",
    "backfill",
    "drop_index",
]


@dataclass(frozen=True)
class Step:
    """One statement of a plan. ``name`` is the column, index or constraint (the table for
    ``table`` and ``convert``); ``fk`` the key a ``foreign_key``/``drop_foreign_key`` step is
    about; ``doing`` says what it does, for a lock-wait error."""

    kind: StepKind
    table: str
    name: str
    element: ExecutableDDLElement
    sql: str
    note: str | None = None
    fk: ForeignKeyShape | None = None
    doing: str | None = None
    retired: RetiredIndex | None = None  # what a ``backfill``/``drop_index`` step retires


def compile_dialect(name: str) -> Dialect:
    """A SQLAlchemy dialect object for ``postgresql``, ``mysql`` or ``sqlite`` (no database)."""
    return dialect_of(name).sqlalchemy_dialect()


def _sql(element: ExecutableDDLElement, dialect: Dialect) -> str:
    if dialect_of(dialect).has_table_options:
        apply_mysql_options()
    return "\n".join(
        line.rstrip() for line in str(element.compile(dialect=dialect)).strip().splitlines()
    )


def _create_table(table: Table, dialect: Dialect) -> Step:
    element = CreateTable(table, if_not_exists=True)
    return Step("table", table.name, table.name, element, _sql(element, dialect))


def _create_index(index: Index, dialect: Dialect) -> Step:
    table = index.table
    assert table is not None
    element = CreateIndex(index, if_not_exists=dialect_of(dialect).create_index_if_not_exists)
    return Step("index", table.name, str(index.name), element, _sql(element, dialect))


class _AddColumn(ExecutableDDLElement):
    """``ALTER TABLE t ADD COLUMN <column DDL>`` compiled for any dialect."""

    def __init__(self, table: Table, column: Column[Any]) -> None:
        self.table = table
        self.column = column


@compiles(_AddColumn)
def _compile_add_column(element: _AddColumn, compiler: Any, **kw: Any) -> str:
    prep = compiler.preparer
    return (
        f"ALTER TABLE {prep.format_table(element.table)} "
        f"ADD COLUMN {compiler.process(CreateColumn(element.column), **kw)}"
    )


def _add_column(table: Table, column: Column[Any], dialect: Dialect) -> Step:
    note = None
    if not column.nullable and column.server_default is None:
        # A NOT NULL column without a default cannot be added to a table that has rows.
        shadow = Table(table.name, MetaData(), column._copy(), **table.kwargs)
        column = shadow.c[column.name]
        column.nullable = True
        note = f"{table.name}.{column.name} was added nullable (NOT NULL needs a default)"
    element = _AddColumn(table, column)
    return Step("column", table.name, column.name, element, _sql(element, dialect), note)


def plan(
    cat: SchemaCatalog, dialect: Dialect, meta: MetaData = metadata, *, convert: bool = False
) -> list[Step]:
    """The statements that bring ``cat`` to ``meta``, in an order that works.

    With ``convert`` (MySQL), first the conversion of the tables that are not InnoDB in
    ``utf8mb4_bin`` (``conversion_steps``). Then, table by table: create what is missing, add
    columns, widen columns, create indexes; then the missing foreign keys of existing tables
    (after every index, so that MySQL finds the index it needs). SQLite cannot add a foreign
    key to an existing table, nor change a column's type: it plans neither. Last, each retired
    index still standing (``RETIRED_INDEXES``, by name only) is dropped once its replacement
    exists or is planned before it, after its backfill.
    """
    steps: list[Step] = []
    if convert and dialect_of(dialect).has_table_options:
        steps += conversion_steps(cat, dialect)
    fk_steps: list[Step] = []
    for table in meta.sorted_tables:
        live_columns = cat.columns.get(table.name)
        if live_columns is None:
            steps.append(_create_table(table, dialect))
            steps.extend(_create_index(i, dialect) for i in sorted_indexes(table))
            continue
        for column in table.columns:
            if column.name not in live_columns:
                steps.append(_add_column(table, column, dialect))
        widen = _widen(table, cat, dialect)
        if widen is not None:
            steps.append(widen)
        live_indexes = cat.indexes.get(table.name, set())
        for index in sorted_indexes(table):
            if index.name not in live_indexes:
                steps.append(_create_index(index, dialect))
        if dialect_of(dialect).adds_foreign_keys:
            live_fks = cat.foreign_keys.get(table.name, [])
            for fk in table.foreign_key_constraints:
                if not any(same_shape(fk, s) for s in live_fks):
                    shape = expected_shape(fk)
                    fk_steps.append(_add_foreign_key(table, shape, shape.name, dialect))
    return steps + fk_steps + _retire_steps(cat, dialect, meta, steps)


def _retire_steps(
    cat: SchemaCatalog, dialect: Dialect, meta: MetaData, planned: list[Step]
) -> list[Step]:
    """Backfill then drop each retired index of ``meta``'s tables that is still live."""
    built = {s.name for s in planned if s.kind == "index"}
    out: list[Step] = []
    for retired in RETIRED_INDEXES:
        if retired.table not in meta.tables or retired.name in built:
            continue
        if retired.name not in cat.indexes.get(retired.table, set()):
            continue
        live = cat.indexes.get(retired.table, set())
        if retired.replaced_by not in live and retired.replaced_by not in built:
            continue
        if retired.backfill is not None:
            out.append(backfill_step(retired, dialect))
        out.append(drop_index_step(retired, dialect))
    return out


def backfill_step(retired: RetiredIndex, dialect: Dialect) -> Step:
    """The backfill before ``retired`` is dropped, as one statement (offline SQL and dry runs
    show it so; online, ``provision`` runs it in bounded batches)."""
    assert retired.backfill is not None
    column, source = retired.backfill
    prep = dialect.identifier_preparer
    col, src = prep.quote(column), prep.quote(source)
    sql = (
        f"UPDATE {prep.quote(retired.table)} SET {col} = {src} "
        f"WHERE {col} = '' AND {src} IS NOT NULL AND {src} <> ''"
    )
    return Step(
        "backfill",
        retired.table,
        column,
        _raw(sql),
        sql,
        note=f"{retired.table}.{column} was filled from {source} (in batches) before "
        f"{retired.name} was dropped",
        doing=f"to fill {retired.table}.{column} from {source}",
        retired=retired,
    )


def drop_index_step(retired: RetiredIndex, dialect: Dialect) -> Step:
    prep = dialect.identifier_preparer
    sql = dialect_of(dialect).drop_index_sql(prep, retired.name, retired.table)
    return Step(
        "drop_index",
        retired.table,
        retired.name,
        _raw(sql),
        sql,
        note=f"{retired.name} was dropped: {retired.replaced_by} replaces it "
        f"(revision {retired.revision})",
        doing=f"to drop the retired index {retired.name}",
        retired=retired,
    )


def _raw(sql: str) -> ExecutableDDLElement:
    """A statement agora wrote itself (names quoted by the dialect's preparer)."""
    return DDL(sql)  # type: ignore[no-untyped-call]


# --- foreign keys -------------------------------------------------------------------------------


def expected_shape(fk: ForeignKeyConstraint) -> ForeignKeyShape:
    return ForeignKeyShape(
        tuple(e.parent.name for e in fk.elements),
        fk.elements[0].column.table.name,
        tuple(e.column.name for e in fk.elements),
        fk.ondelete.upper() if fk.ondelete else None,
        str(fk.name),
    )


def same_shape(fk: ForeignKeyConstraint, live: ForeignKeyShape) -> bool:
    """Whether ``live`` joins the same columns to the same target (``ON DELETE`` aside)."""
    want = expected_shape(fk)
    return (live.columns, live.target, live.target_columns) == (
        want.columns,
        want.target,
        want.target_columns,
    )


def describe_fk(table: str, fk: ForeignKeyShape) -> str:
    return f"{table}({', '.join(fk.columns)}) -> {fk.target}({', '.join(fk.target_columns)})"


def _add_foreign_key(
    table: Table | str, fk: ForeignKeyShape, name: str | None, dialect: Dialect
) -> Step:
    prep = dialect.identifier_preparer
    table_name = table if isinstance(table, str) else table.name
    constraint = name or f"{table_name}_{'_'.join(fk.columns)}_fk"
    cols = ", ".join(prep.quote(c) for c in fk.columns)
    target_cols = ", ".join(prep.quote(c) for c in fk.target_columns)
    sql = (
        f"ALTER TABLE {prep.quote(table_name)} ADD CONSTRAINT {prep.quote(constraint)} "
        f"FOREIGN KEY ({cols}) REFERENCES {prep.quote(fk.target)} ({target_cols})"
        + (f" ON DELETE {fk.on_delete}" if fk.on_delete else "")
    )
    return Step(
        "foreign_key",
        table_name,
        constraint,
        _raw(sql),
        sql,
        fk=fk,
        doing=f"to add foreign key {describe_fk(table_name, fk)}",
    )


def _drop_foreign_key(table: str, fk: ForeignKeyShape, dialect: Dialect) -> Step:
    prep = dialect.identifier_preparer
    sql = f"ALTER TABLE {prep.quote(table)} DROP FOREIGN KEY {prep.quote(str(fk.name))}"
    return Step(
        "drop_foreign_key",
        table,
        str(fk.name),
        _raw(sql),
        sql,
        fk=fk,
        doing=f"to drop foreign key {fk.name} of {table} before converting",
    )


# --- MySQL: engine and collation ----------------------------------------------------------------

CONVERT_CLAUSE = "ENGINE=InnoDB, CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"


def table_options_ok(options: tuple[str | None, str | None]) -> bool:
    engine, collation = options
    return str(engine).lower() == "innodb" and collation == "utf8mb4_bin"


def tables_to_convert(cat: SchemaCatalog, meta: MetaData = metadata) -> list[str]:
    """The existing agent tables (MySQL) that are not InnoDB in ``utf8mb4_bin``."""
    return [
        t.name
        for t in meta.sorted_tables
        if t.name in cat.table_options and not table_options_ok(cat.table_options[t.name])
    ]


def keys_around(cat: SchemaCatalog, tables: list[str]) -> list[tuple[str, ForeignKeyShape]]:
    """The foreign keys from or to ``tables``: MySQL refuses to change the collation of a
    column a foreign key uses (errors 1832/1833, even with ``foreign_key_checks=0``)."""
    wrong = set(tables)
    return [
        (child, fk)
        for child in sorted(cat.foreign_keys)
        for fk in cat.foreign_keys[child]
        if child in wrong or fk.target in wrong
    ]


def conversion_steps(cat: SchemaCatalog, dialect: Dialect) -> list[Step]:
    """Drop the foreign keys around the tables to convert, convert each, re-create the keys.

    Each statement commits on its own (MySQL DDL). Re-planning after a crash midway finds the
    tables still to convert and the keys still there; a key dropped before the crash is added
    back by ``plan`` as a missing one (agora's name when it is one of agora's keys).
    """
    tables = tables_to_convert(cat)
    if not tables:
        return []
    prep = dialect.identifier_preparer
    keys = keys_around(cat, tables)
    steps = [_drop_foreign_key(child, fk, dialect) for child, fk in keys]
    for t in tables:
        sql = f"ALTER TABLE {prep.quote(t)} {CONVERT_CLAUSE}"
        engine, collation = cat.table_options[t]
        steps.append(
            Step(
                "convert",
                t,
                t,
                _raw(sql),
                sql,
                note=f"{t} was converted from ENGINE={engine} {collation} (the table was "
                "rewritten)",
                doing=f"to convert table {t} to InnoDB utf8mb4_bin",
            )
        )
    steps += [_add_foreign_key(child, fk, fk.name, dialect) for child, fk in keys]
    return steps


# --- column types -------------------------------------------------------------------------------

# Integer and float widths, text capacities: a live column below the expected rank is widened.
_INT_RANK = {
    "tinyint": 1, "int1": 1, "smallint": 2, "int2": 2, "mediumint": 3, "int": 4, "integer": 4,
    "int4": 4, "bigint": 8, "int8": 8,
}  # fmt: skip
_FLOAT_RANK = {"float": 4, "real": 4, "float4": 4, "double": 8, "double precision": 8, "float8": 8}
_MYSQL_TEXT_RANK = {
    "char": 0, "varchar": 0, "tinytext": 1, "text": 2, "mediumtext": 3, "longtext": 4,
}  # fmt: skip
_PG_TEXT_RANK = {"bpchar": 0, "varchar": 0, "text": 4}

TypeVerdict = Literal["ok", "widen", "wrong"]


def _expected_kind(column: Column[Any], dialect: str) -> tuple[str, int] | None:
    """The family and rank ``column`` needs on ``dialect``; ``None``: its type is not compared
    (identity ``VARCHAR(255)`` columns)."""
    t = column.type
    if isinstance(t, BigInteger):
        return ("int", 8)
    if isinstance(t, Integer):
        return ("int", 4)
    if isinstance(t, Double):
        return ("float", 8)
    if isinstance(t, type(LongText)):
        return ("text", 4)
    if isinstance(t, Text):
        return ("text", 2 if dialect_of(dialect).sized_text else 4)  # MySQL's TEXT: 64 KB
    return None


def _live_kind(live: ColumnType, dialect: str) -> tuple[str, int] | None:
    name = live.name
    if name in _INT_RANK:
        return ("int", _INT_RANK[name])
    if name in _FLOAT_RANK:
        return ("float", _FLOAT_RANK[name])
    ranks = _MYSQL_TEXT_RANK if dialect_of(dialect).sized_text else _PG_TEXT_RANK
    if name in ranks:
        return ("text", ranks[name])
    return None


def sqlite_affinity(declared: str) -> str:
    """SQLite's affinity of a declared type (its documented rules, in order)."""
    d = declared.upper()
    if "INT" in d:
        return "INTEGER"
    if any(w in d for w in ("CHAR", "CLOB", "TEXT")):
        return "TEXT"
    if "BLOB" in d or not d:
        return "BLOB"
    if any(w in d for w in ("REAL", "FLOA", "DOUB")):
        return "REAL"
    return "NUMERIC"


_SQLITE_AFFINITY = {"int": {"INTEGER", "NUMERIC"}, "float": {"REAL", "NUMERIC"}, "text": {"TEXT"}}


def type_verdict(column: Column[Any], live: ColumnType | None, dialect: str) -> TypeVerdict:
    """``ok``, ``widen`` (the live type holds less: provisioning widens it) or ``wrong`` (another
    family: a text token count, a decimal price; provisioning refuses to guess).

    SQLite's types are affinities: an ``INTEGER`` column holds 64-bit integers whatever its
    declared width, so only an affinity that stores the value differently is ``wrong``; SQLite
    cannot change a column's type, so nothing there is ``widen``.
    """
    want = _expected_kind(column, dialect)
    if want is None or live is None:
        return "ok"
    if dialect_of(dialect).types_are_affinities:
        return "ok" if sqlite_affinity(live.name) in _SQLITE_AFFINITY[want[0]] else "wrong"
    have = _live_kind(live, dialect)
    if have is None or have[0] != want[0]:
        return "wrong"
    return "ok" if have[1] >= want[1] else "widen"


def expected_type_sql(column: Column[Any], dialect: Dialect) -> str:
    return str(column.type.compile(dialect=dialect))


def _widen(table: Table, cat: SchemaCatalog, dialect: Dialect) -> Step | None:
    """One ``ALTER TABLE`` widening every column of ``table`` that holds less than it should
    (one rewrite of the table, not one per column); nullability is kept as it is live."""
    if not dialect_of(dialect).alters_column_types:
        return None
    live_types = cat.column_types.get(table.name, {})
    prep = dialect.identifier_preparer
    clauses: list[str] = []
    names: list[str] = []
    for column in table.columns:
        live = live_types.get(column.name)
        if live is None or type_verdict(column, live, dialect.name) != "widen":
            continue
        names.append(column.name)
        new_type = expected_type_sql(column, dialect)
        if dialect_of(dialect).widens_by_modify:
            default = ""
            if column.server_default is not None:
                default = f" DEFAULT {column.server_default.arg.text}"  # type: ignore[attr-defined]
            null = "NULL" if live.nullable else "NOT NULL"
            clauses.append(f"MODIFY COLUMN {prep.quote(column.name)} {new_type} {null}{default}")
        else:
            clauses.append(f"ALTER COLUMN {prep.quote(column.name)} TYPE {new_type}")
    if not clauses:
        return None
    sql = f"ALTER TABLE {prep.quote(table.name)} " + ", ".join(clauses)
    return Step(
        "widen",
        table.name,
        ", ".join(names),
        _raw(sql),
        sql,
        doing=f"to widen {', '.join(f'{table.name}.{n}' for n in names)}",
    )


def sorted_indexes(table: Table) -> list[Index]:
    return sorted(table.indexes, key=lambda i: str(i.name))


def create_table_statements(dialect: str, *, if_not_exists: bool = False) -> list[str]:
    """The full DDL of the agent schema for ``dialect`` (no trailing semicolons)."""
    d = compile_dialect(dialect)
    out: list[str] = []
    for table in metadata.sorted_tables:
        out.append(_sql(CreateTable(table, if_not_exists=if_not_exists), d))
        for index in sorted_indexes(table):
            ine = if_not_exists and dialect_of(d).create_index_if_not_exists
            out.append(_sql(CreateIndex(index, if_not_exists=ine), d))
    return out


def _base_metadata() -> MetaData:
    """The schema as revision 0001 first created it (without the upgrades' tables, columns and
    indexes)."""
    return schema_at(())


def schema_at(applied: Collection[str], *, without_indexes: Collection[str] = ()) -> MetaData:
    """The schema as the main chain leaves it once the revisions ``applied`` have run.

    The upgrade map (``UPGRADE_TABLES``, ``UPGRADE_COLUMNS``, ``UPGRADE_INDEXES``) says what
    each revision after 0001 added: what a revision not in ``applied`` added is left out, and
    an index a revision not in ``applied`` retired (``RETIRED_INDEXES``) still stands (unless
    named in ``without_indexes``). With every revision, it is the library's ``metadata``
    itself (not a copy: never change it); with none (or only 0001), 0001's.
    """
    done = set(applied)
    mapped = {*UPGRADE_TABLES, *UPGRADE_COLUMNS, *UPGRADE_INDEXES}
    mapped |= {r.revision for r in RETIRED_INDEXES}
    if mapped <= done and not without_indexes:
        return metadata  # head: a copy of 16 tables costs tens of milliseconds
    later_tables = {t for r, tables in UPGRADE_TABLES.items() if r not in done for t in tables}
    later_cols = {c for r, cols in UPGRADE_COLUMNS.items() if r not in done for c in cols}
    later_idx = {i for r, idx in UPGRADE_INDEXES.items() if r not in done for i in idx}
    later_idx |= {(t.name, str(i)) for t in metadata.sorted_tables for i in without_indexes}
    shape = MetaData()
    for table in metadata.sorted_tables:
        if table.name in later_tables:
            continue
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
        idx += [
            Index(r.name, *r.columns, unique=r.unique)
            for r in RETIRED_INDEXES
            if r.table == table.name and r.revision not in done and r.name not in without_indexes
        ]
        Table(table.name, shape, *cols, *fks, *idx, **table.kwargs)
    return shape


def advance(cat: SchemaCatalog, steps: list[Step]) -> None:
    """Record in ``cat`` what ``steps`` made, as if they had run: an offline script's catalog,
    carried from one revision to the next (``agora db upgrade --sql``)."""
    for step in steps:
        if step.kind == "table":
            table = step.element.element  # type: ignore[attr-defined]
            cat.columns[step.table] = {c.name for c in table.columns}
            cat.indexes.setdefault(step.table, set())
            cat.foreign_keys[step.table] = [
                expected_shape(fk) for fk in table.foreign_key_constraints
            ]
        elif step.kind == "column":
            cat.columns.setdefault(step.table, set()).add(step.name)
        elif step.kind == "index":
            cat.indexes.setdefault(step.table, set()).add(step.name)
        elif step.kind == "drop_index":
            cat.indexes.get(step.table, set()).discard(step.name)
        elif step.kind == "foreign_key" and step.fk is not None:
            cat.foreign_keys.setdefault(step.table, []).append(step.fk)
        elif step.kind == "widen":
            for name in step.name.split(", "):
                cat.column_types.get(step.table, {}).pop(name, None)


def revision_statements(revision: str, dialect: str) -> list[str]:
    """The DDL a revision adds, for offline SQL (``agora db upgrade --sql``)."""
    d = compile_dialect(dialect)
    if dialect_of(d).has_table_options:
        apply_mysql_options()  # before the copies: they take each table's options with them
    if revision == "0001":
        base = _base_metadata()
        return [s.sql for s in plan(SchemaCatalog(), d, base)]
    steps: list[str] = []
    for table_name in UPGRADE_TABLES.get(revision, []):
        table = metadata.tables[table_name]
        steps.append(_create_table(table, d).sql)
        steps += [_create_index(index, d).sql for index in sorted_indexes(table)]
    for table_name, column_name in UPGRADE_COLUMNS.get(revision, []):
        table = metadata.tables[table_name]
        steps.append(_add_column(table, table.c[column_name], d).sql)
    for table_name, index_name in UPGRADE_INDEXES.get(revision, []):
        index = next(i for i in metadata.tables[table_name].indexes if i.name == index_name)
        steps.append(_create_index(index, d).sql)
    for retired in RETIRED_INDEXES:
        if retired.revision == revision:
            if retired.backfill is not None:
                steps.append(backfill_step(retired, d).sql)
            steps.append(drop_index_step(retired, d).sql)
    return steps
