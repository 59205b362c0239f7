"""The redaction marker's form: what ``db redact`` leaves in place of a value, recognised whole.

A value is redacted only when it is exactly ``"agora:redacted:v1:<tag>:<hex>"`` (a JSON string)
or, for a stream frame, ``{"type":"redacted","digest":"agora:redacted:v1:<tag>:<hex>"}``: 8 then
64 lowercase hex characters, nothing else; never a prefix. Checked in Python (``is_redacted``)
and in SQL (``is_redacted_sql``: a regular expression on PostgreSQL and MySQL/MariaDB, ``GLOB``
on SQLite). ``redact`` writes markers and ``sealing`` leaves them alone (``db seal``): both take
the form from here.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import literal
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.sqltypes import NullType
from sqlalchemy.sql.visitors import InternalTraversal

__all__ = ["REDACTED_PREFIX", "is_redacted", "is_redacted_sql"]

REDACTED_PREFIX = "agora:redacted:v1:"
TAG_HEX = 8
_DIGEST_HEX = 64
_HEX = "0123456789abcdef"

# The two stored forms: a JSON string (a value) and a frame object (a stream frame).
VALUE_FORM = ('"' + REDACTED_PREFIX, '"')
FRAME_FORM = ('{"type":"redacted","digest":"' + REDACTED_PREFIX, '"}')
_FORM_LENGTH = TAG_HEX + 1 + _DIGEST_HEX
_BODY = f"[{_HEX}]{{{TAG_HEX}}}:[{_HEX}]{{{_DIGEST_HEX}}}"


def _form_regex(head: str, tail: str) -> str:
    # Every non-alphanumeric character escaped: a literal in PostgreSQL's ARE, PCRE and ICU.
    def esc(text: str) -> str:
        return "".join(c if c.isalnum() else "\\" + c for c in text)

    return f"^{esc(head)}{_BODY}{esc(tail)}$"


_PY_FORMS = {
    form: re.compile(re.escape(form[0]) + _BODY + re.escape(form[1]))
    for form in (VALUE_FORM, FRAME_FORM)
}


def is_redacted(value: str | None, *, frame: bool = False) -> bool:
    """Whether a stored value is exactly a redaction marker (a frame's form with ``frame``)."""
    form = FRAME_FORM if frame else VALUE_FORM
    return value is not None and _PY_FORMS[form].fullmatch(value) is not None


def is_redacted_sql(column: Any, *, frame: bool = False) -> ColumnElement[bool]:
    """``column`` is exactly a redaction marker, in SQL (``db seal`` leaves such values alone:
    they hold an HMAC and nothing else, and sealing them would make ``db redact`` hash again)."""
    return _IsRedacted(column, FRAME_FORM if frame else VALUE_FORM)


# --- the strict form in SQL ------------------------------------------------------------------


class _IsRedacted(ColumnElement[bool]):
    """``column`` is exactly ``head + <8 hex> + ':' + <64 hex> + tail`` (see the module docs)."""

    inherit_cache = True
    type = NullType()  # type: ignore[assignment]
    _traverse_internals = [  # noqa: RUF012 - SQLAlchemy's own class-level protocol
        ("column", InternalTraversal.dp_clauseelement),
        ("head", InternalTraversal.dp_string),
        ("tail", InternalTraversal.dp_string),
    ]

    def __init__(self, column: Any, form: tuple[str, str]) -> None:
        self.column = column
        self.head, self.tail = form


@compiles(_IsRedacted)
def _is_redacted_sqlite(element: _IsRedacted, compiler: Any, **kw: Any) -> str:
    # GLOB matches the whole text, case-sensitively; the heads and tails hold no GLOB syntax.
    hex_class = f"[{_HEX}]"
    pattern = element.head + hex_class * TAG_HEX + ":" + hex_class * _DIGEST_HEX + element.tail
    return f"({compiler.process(element.column.op('GLOB')(literal(pattern)), **kw)})"


@compiles(_IsRedacted, "postgresql")
def _is_redacted_pg(element: _IsRedacted, compiler: Any, **kw: Any) -> str:
    pattern = _form_regex(element.head, element.tail)
    return f"({compiler.process(element.column.op('~')(literal(pattern)), **kw)})"


@compiles(_IsRedacted, "mysql")
@compiles(_IsRedacted, "mariadb")
def _is_redacted_mysql(element: _IsRedacted, compiler: Any, **kw: Any) -> str:
    # ``$`` also matches before a final newline in PCRE and ICU: the length makes it exact.
    # The binary collation makes REGEXP case-sensitive whatever the column's (a database the
    # upstream runtime made has utf8mb4_general_ci).
    column = compiler.process(element.column, **kw)
    pattern = compiler.process(literal(_form_regex(element.head, element.tail)), **kw)
    length = len(element.head) + _FORM_LENGTH + len(element.tail)
    return (
        f"(CONVERT({column} USING utf8mb4) COLLATE utf8mb4_bin REGEXP {pattern} "
        f"AND char_length({column}) = {length})"
    )
