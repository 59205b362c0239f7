"""SQL expressions the store needs on every dialect but each dialect spells differently.

``exact_eq(column, value)``: text equality that is exact everywhere. MySQL/MariaDB's
``utf8mb4_bin`` is a PAD SPACE collation: ``'alice' = 'alice '`` is true there, so a lookup of
``"alice "`` would find (and a delete would remove) ``alice``. On MySQL the comparison also
requires equal ``CHAR_LENGTH``; the ``=`` stays first, so the index on the column is still used
and the length test only filters the rows it finds. PostgreSQL and SQLite compare exactly
already and get the plain ``=``.

``starts_with(conn, column, prefix)``: "the text begins with ``prefix``", exact (case and
trailing spaces count) and served by the column's index where the dialect allows it:

- SQLite: the range ``prefix <= column < successor(prefix)``. Its ``BINARY`` collation orders
  text by UTF-8 bytes, which is code-point order, so the range holds exactly the strings that
  begin with the prefix (SQLite's ``LIKE`` would not do: it ignores ASCII case).
- MySQL/MariaDB: ``LIKE 'prefix%'`` with the metacharacters escaped. PyMySQL sends the pattern as
  a literal, so the optimizer turns it into a range of the index; ``LIKE`` compares character by
  character, so PAD SPACE does not apply.
- PostgreSQL: ``LIKE`` (exact), which a B-tree serves only under the ``C`` collation. Where the
  column's collation orders by code point (``C``, ``POSIX``, ``C.UTF-8``, ``ucs_basic``) the
  range above is added so that the index is used; under a linguistic collation (``en_US``) a
  range would not hold every match, and the lookup scans instead: one catalog query tells which.

``provider_cost(cost, source)``: a ledger row's cost as the provider reported it, else NULL. A
known cost is the provider's unless agora (or another writer) marked it an ``estimate``: the
upstream runtime stores a provider-reported cost with ``cost_source`` NULL, and only ever stores
a cost the provider reported.

``finite_cost(cost)``: a cost column as a sum may add it — ``NULL`` (unpriced) where it is not a
finite amount within ``±MAX_SUMMABLE_USD``. agora never writes such a value, but another writer
can: PostgreSQL's ``double precision`` takes ``'NaN'`` and ``'Infinity'``, SQLite stores
``1e999`` as infinity. One such row would make a ``SUM`` NaN (a budget compared with it is never
reached) or infinite. PostgreSQL orders NaN above every number, so one ``BETWEEN`` excludes NaN
and both infinities there and on SQLite; the bound (1e15, ``usage.MAX_COST_USD``) also keeps a
sum of millions of rows finite. MySQL/MariaDB's ``DOUBLE`` refuses non-finite values: the column
is read as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, case, func, literal, literal_column, text
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.sqltypes import NullType
from sqlalchemy.sql.visitors import InternalTraversal

from agora_cli.store._dialects import dialect_of

if TYPE_CHECKING:
    from sqlalchemy import Column
    from sqlalchemy.engine import Connection

__all__ = [
    "MAX_SUMMABLE_USD",
    "escape_like",
    "exact_eq",
    "finite_cost",
    "known_usd",
    "provider_cost",
    "starts_with",
    "successor",
]

MAX_SUMMABLE_USD = 1e15  # usage.MAX_COST_USD: the largest cost a ledger row may hold

LIKE_ESCAPE = "/"
# Collations whose order is code-point order: a prefix's matches are one contiguous range.
_CODE_POINT_COLLATIONS = frozenset({"c", "posix", "c.utf-8", "c.utf8", "ucs_basic"})


class ExactEq(ColumnElement[bool]):
    """``column = value``, exact on every dialect (see the module docs)."""

    inherit_cache = True
    # No Boolean type: non-native-boolean dialects would append "= 1" to the WHERE.
    type = NullType()  # type: ignore[assignment]
    _traverse_internals = [  # noqa: RUF012 - SQLAlchemy's own class-level protocol
        ("column", InternalTraversal.dp_clauseelement),
        ("value", InternalTraversal.dp_clauseelement),
    ]

    def __init__(self, column: ColumnElement[Any], value: Any) -> None:
        self.column = column
        self.value = value if isinstance(value, ColumnElement) else literal(value, column.type)


@compiles(ExactEq)
def _exact_default(element: ExactEq, compiler: Any, **kw: Any) -> str:
    return str(compiler.process(element.column == element.value, **kw))


@compiles(ExactEq, "mysql")
@compiles(ExactEq, "mariadb")
def _exact_mysql(element: ExactEq, compiler: Any, **kw: Any) -> str:
    exact = and_(
        element.column == element.value,
        func.char_length(element.column) == func.char_length(element.value),
    )
    return str(compiler.process(exact, **kw))


class FiniteCost(ColumnElement[float]):
    """A cost, ``NULL`` where it is not finite (see the module docs)."""

    inherit_cache = True
    _traverse_internals = [  # noqa: RUF012 - SQLAlchemy's own class-level protocol
        ("cost", InternalTraversal.dp_clauseelement),
    ]

    def __init__(self, cost: ColumnElement[Any]) -> None:
        self.cost = cost
        self.type = cost.type


@compiles(FiniteCost)
def _finite_default(element: FiniteCost, compiler: Any, **kw: Any) -> str:
    bound = literal_column(repr(MAX_SUMMABLE_USD), element.type)
    finite = case((element.cost.between(-bound, bound), element.cost), else_=None)
    return str(compiler.process(finite, **kw))


@compiles(FiniteCost, "mysql")
@compiles(FiniteCost, "mariadb")
def _finite_mysql(element: FiniteCost, compiler: Any, **kw: Any) -> str:
    return str(compiler.process(element.cost, **kw))


def finite_cost(cost: Any) -> ColumnElement[Any]:
    """``cost`` where it is a finite amount a sum may add, else ``NULL`` (unpriced)."""
    return FiniteCost(cost)


def known_usd(value: Any) -> float | None:
    """A cost read from one row, as ``finite_cost`` reads it in SQL: ``None`` when unknown."""
    if value is None:
        return None
    usd = float(value)
    return usd if -MAX_SUMMABLE_USD <= usd <= MAX_SUMMABLE_USD else None  # False for NaN


def exact_eq(column: Any, value: Any) -> ColumnElement[bool]:
    """``column = value`` that never matches trailing-space variants (MySQL PAD SPACE)."""
    return ExactEq(column, value)


def escape_like(text: str) -> str:
    """``text`` as a ``LIKE`` pattern matching only itself (``ESCAPE '/'``)."""
    return (
        text.replace(LIKE_ESCAPE, LIKE_ESCAPE * 2)
        .replace("%", LIKE_ESCAPE + "%")
        .replace("_", LIKE_ESCAPE + "_")
    )


def successor(prefix: str) -> str | None:
    """The least string, in code-point order, greater than every string starting with ``prefix``
    (``None`` when there is none: the prefix is all U+10FFFF)."""
    for i in range(len(prefix) - 1, -1, -1):
        code = ord(prefix[i]) + 1
        if 0xD800 <= code <= 0xDFFF:  # surrogates are not characters a column can hold
            code = 0xE000
        if code <= 0x10FFFF:
            return prefix[:i] + chr(code)
    return None


def _code_point_range(column: Column[Any], prefix: str) -> ColumnElement[bool]:
    upper = successor(prefix)
    low: ColumnElement[bool] = column >= prefix
    return low if upper is None else and_(low, column < upper)


def _orders_by_code_point(conn: Connection, column: Column[Any]) -> bool:
    """Whether PostgreSQL orders ``column`` by code point (its collation, or the database's)."""
    row = conn.execute(
        text(
            "SELECT c.collname, c.collprovider, c.collcollate, to_jsonb(d) AS db "
            "FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation "
            "CROSS JOIN pg_database d WHERE a.attrelid = CAST(:table AS regclass) "
            "AND a.attname = :column AND d.datname = current_database()"
        ),
        {"table": column.table.name, "column": column.name},
    ).first()
    if row is None:
        return False
    name, provider, collate, db = row
    if name != "default":
        return provider == "c" and str(collate or name).lower() in _CODE_POINT_COLLATIONS
    if (db or {}).get("datlocprovider", "c") != "c":  # ICU (PostgreSQL 15+): linguistic
        return False
    return str((db or {}).get("datcollate", "")).lower() in _CODE_POINT_COLLATIONS


def starts_with(conn: Connection, column: Column[Any], prefix: str) -> ColumnElement[bool]:
    """``column`` begins with ``prefix``: exact on every dialect, indexed where it can be (see
    the module docs)."""
    d = dialect_of(conn)
    if d.prefix_by_range:
        return _code_point_range(column, prefix)
    like = column.like(escape_like(prefix) + "%", escape=LIKE_ESCAPE)
    if d.asks_collation and _orders_by_code_point(conn, column):
        return and_(_code_point_range(column, prefix), like)
    return like


def provider_cost(cost: Any, source: Any) -> ColumnElement[Any]:
    """``cost`` where the provider reported it (any known cost not marked ``estimate``), else
    NULL — a cost with no source is the provider's (the runtime writes it so)."""
    return case((source == "estimate", None), else_=cost)
