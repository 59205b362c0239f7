"""The DDL of the agent schema: the steps that bring a live schema to the expected one.

``plan`` compares a ``SchemaCatalog`` with the ``MetaData`` and returns the missing tables,
columns and indexes as compiled statements; ``create_table_statements`` is the whole schema for a
dialect (what ``agora db sql`` prints) and ``revision_statements`` what one revision added (for
offline ``agora db upgrade --sql``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Column, ForeignKeyConstraint, Index, MetaData, Table
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.schema import CreateColumn, CreateIndex, CreateTable, ExecutableDDLElement

from agora_cli.store.errors import (
    UnknownDialect,
)
from agora_cli.store.live_schema import SchemaCatalog
from agora_cli.store.schema import (
    UPGRADE_COLUMNS,
    UPGRADE_INDEXES,
    UPGRADE_TABLES,
    apply_mysql_options,
    metadata,
)

__all__ = [
    "compile_dialect",
    "create_table_statements",
    "revision_statements",
]


@dataclass(frozen=True)
class Step:
    kind: str  # table | column | index
    table: str
    name: str
    element: ExecutableDDLElement
    sql: str
    note: str | None = None


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
    if dialect.name == "mysql":
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
    element = CreateIndex(index, if_not_exists=dialect.name != "mysql")
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


def plan(cat: SchemaCatalog, dialect: Dialect, meta: MetaData = metadata) -> list[Step]:
    steps: list[Step] = []
    for table in meta.sorted_tables:
        live_columns = cat.columns.get(table.name)
        if live_columns is None:
            steps.append(_create_table(table, dialect))
            steps.extend(_create_index(i, dialect) for i in sorted_indexes(table))
            continue
        for column in table.columns:
            if column.name not in live_columns:
                steps.append(_add_column(table, column, dialect))
        live_indexes = cat.indexes.get(table.name, set())
        for index in sorted_indexes(table):
            if index.name not in live_indexes:
                steps.append(_create_index(index, dialect))
    return steps


def sorted_indexes(table: Table) -> list[Index]:
    return sorted(table.indexes, key=lambda i: str(i.name))


def create_table_statements(dialect: str, *, if_not_exists: bool = False) -> list[str]:
    """The full DDL of the agent schema for ``dialect`` (no trailing semicolons)."""
    d = compile_dialect(dialect)
    out: list[str] = []
    for table in metadata.sorted_tables:
        out.append(_sql(CreateTable(table, if_not_exists=if_not_exists), d))
        for index in sorted_indexes(table):
            ine = if_not_exists and d.name != "mysql"
            out.append(_sql(CreateIndex(index, if_not_exists=ine), d))
    return out


def _base_metadata() -> MetaData:
    """The schema as revision 0001 first created it (without the upgrades' tables, columns and
    indexes)."""
    later_tables = {t for tables in UPGRADE_TABLES.values() for t in tables}
    later_cols = {c for cols in UPGRADE_COLUMNS.values() for c in cols}
    later_idx = {i for idx in UPGRADE_INDEXES.values() for i in idx}
    base = MetaData()
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
        Table(table.name, base, *cols, *fks, *idx, **table.kwargs)
    return base


def revision_statements(revision: str, dialect: str) -> list[str]:
    """The DDL a revision adds, for offline SQL (``agora db upgrade --sql``)."""
    d = compile_dialect(dialect)
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
    return steps
