"""SQL expressions the store needs on every dialect but each dialect spells differently.

``exact_eq(column, value)``: text equality that is exact everywhere. MySQL/MariaDB's
``utf8mb4_bin`` is a PAD SPACE collation: ``'alice' = 'alice '`` is true there, so a lookup of
``"alice "`` would find (and a delete would remove) ``alice``. On MySQL the comparison also
requires equal ``CHAR_LENGTH``; the ``=`` stays first, so the index on the column is still used
and the length test only filters the rows it finds. PostgreSQL and SQLite compare exactly
already and get the plain ``=``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, func, literal
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.sqltypes import NullType
from sqlalchemy.sql.visitors import InternalTraversal

__all__ = ["exact_eq"]


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


def exact_eq(column: Any, value: Any) -> ColumnElement[bool]:
    """``column = value`` that never matches trailing-space variants (MySQL PAD SPACE)."""
    return ExactEq(column, value)
