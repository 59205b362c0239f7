"""Short ids, git-style: a unique prefix of at least 8 characters stands for the whole id.

``resolve_prefix(conn, table, text)`` returns the full id that ``text`` names: the id itself when
one is exactly ``text`` (an exact match always wins, however short), else the one id that starts
with ``text`` when ``text`` has at least ``MIN_PREFIX`` characters, else ``None``. When several
ids start with it, ``AmbiguousId`` (exit 2) names a few of them. It reads the primary key: one
exact lookup, then at most one range of ``MAX_SHOWN + 1`` rows (``sqlexpr.starts_with``).

``where`` narrows the ids a prefix may name. A proposal's prefix is resolved inside its scope
only, so a prefix never widens the scope check: in a wrong scope it finds nothing, exactly as a
full id does, and an ambiguity lists only ids of that scope.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import select

from agora_cli.store._errors import AmbiguousId, NotFound
from agora_cli.store._schema import run, thread
from agora_cli.store._sqlexpr import exact_eq, starts_with
from agora_cli.store._values import check_identity

if TYPE_CHECKING:
    from sqlalchemy import Table
    from sqlalchemy.engine import Connection
    from sqlalchemy.sql import ColumnElement

__all__ = [
    "MAX_SHOWN",
    "MIN_PREFIX",
    "resolve_prefix",
    "resolve_run_id",
    "resolve_thread_id",
]

MIN_PREFIX = 8
MAX_SHOWN = 5


def resolve_prefix(
    conn: Connection,
    table: Table,
    text: str,
    *,
    where: ColumnElement[bool] | None = None,
    what: str = "row",
) -> str | None:
    """The full id that ``text`` names in ``table.c.id`` (see the module docs), or ``None``.

    ``AmbiguousId`` when ``text`` is a prefix of more than one id (and of no id exactly).
    """
    check_identity("id", text)
    column = table.c.id
    exact = select(column).where(exact_eq(column, text))
    if where is not None:
        exact = exact.where(where)
    if conn.execute(exact.limit(1)).first() is not None:
        return text
    if len(text) < MIN_PREFIX:
        return None
    q = select(column).where(starts_with(conn, column, text))
    if where is not None:
        q = q.where(where)
    rows = conn.execute(q.order_by(column).limit(MAX_SHOWN + 1)).scalars().all()
    found = [r for r in rows if r.startswith(text)]  # exact in Python too, whatever the collation
    if len(found) == 1:
        return str(found[0])
    if not found:
        return None
    more = len(found) > MAX_SHOWN
    listed = ", ".join(found[:MAX_SHOWN]) + (", …" if more else "")
    raise AmbiguousId(
        f"{what} id {text!r} is ambiguous: {'more than ' if more else ''}"
        f"{min(len(found), MAX_SHOWN)} {what}s start with it ({listed}); give more characters",
        matches=tuple(found[:MAX_SHOWN]),
    )


def _not_found(what: str, text: str) -> NotFound:
    hint = (
        "" if len(text) >= MIN_PREFIX else f" (a short id needs at least {MIN_PREFIX} characters)"
    )
    return NotFound(f"no {what} {text!r}{hint}")


def resolve_thread_id(conn: Connection, text: str) -> str:
    """The full id of the thread that ``text`` names (an id or a unique prefix); ``NotFound``."""
    found = resolve_prefix(conn, thread, text, what="thread")
    if found is None:
        raise _not_found("thread", text)
    return found


def resolve_run_id(conn: Connection, text: str) -> str:
    """The full id of the run that ``text`` names (an id or a unique prefix); ``NotFound``."""
    found = resolve_prefix(conn, run, text, what="run")
    if found is None:
        raise _not_found("run", text)
    return found
