"""`agora db history|stamp|downgrade`: the migration history, read, recorded by hand, undone.

What an Alembic user reaches for beside ``db upgrade``: ``history`` lists every revision of the
main chain and of the optional branches (with what this database recorded), ``stamp`` records a
revision without running it once the live schema is what that revision leaves, and
``downgrade`` takes an optional branch back to its base (the main chain is forward-only).
"""

from __future__ import annotations

# internal on purpose: the operator's commands import the store's private modules (cli/__init__.py)
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agora_cli.cli.db.schema import LockTimeoutOpt
from agora_cli.cli.options import DbOpt, JsonOpt, YesOpt, open_db
from agora_cli.cli.output import Col, finish, out_console, render_table, safe_text, say

if TYPE_CHECKING:
    from agora_cli.store._migrate import BranchDowngrade, History, StampResult


def _nothing_to_read(db: str | None) -> bool:
    """Whether ``history`` has no database to read: the embedded SQLite default (or a SQLite
    file named) that does not exist is listed without, never created."""
    from agora_cli.store._engine import normalize_url, resolve_url, sqlite_path

    path = sqlite_path(normalize_url(resolve_url(db)))
    return path is not None and not path.exists()


def history(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """List every migration revision, in order, and which ones this database recorded.

    The main chain (agent) first, then each optional branch (documents, rag, rollup), each from
    its base to its head, with the revision it revises, its message and whether this database
    applied it (the version table agent_alembic_version holds it or a later revision of its
    branch). Without a database to read (no --db, no AGORA_DATABASE_URL and no ./agora.db, or a
    SQLite file that does not exist) it lists the revisions alone, applied unknown.

    Example: agora db history --db postgresql://app@db.internal/app --json
    """
    from agora_cli.store._engine import describe_url
    from agora_cli.store._migrate import history as read_history

    if _nothing_to_read(db):
        found = read_history(None)
        where = None
    else:
        engine = open_db(db, readonly=True)
        with engine.connect().execution_options(sqlite_deferred=True) as conn:
            found = read_history(conn)
            conn.rollback()
        where = describe_url(db)
    finish(_history_doc(found, where), as_json=as_json, show=lambda: _show_history(found))


def _history_doc(found: History, database: str | None) -> dict[str, Any]:
    return {
        "database": database,
        "revisions": [
            {
                "revision": r.revision,
                "down_revision": r.down_revision,
                "branch": r.branch,
                "message": r.message,
                "applied": r.applied,
                "head": r.head,
            }
            for r in found.revisions
        ],
        "current": found.current,
    }


def _yes_no(value: bool | None) -> str:
    return "—" if value is None else ("yes" if value else "no")


def _show_history(found: History) -> None:
    rows = [
        {
            "revision": r.revision,
            "revises": r.down_revision,
            "branch": r.branch,
            "head": "head" if r.head else "",
            "applied": _yes_no(r.applied),
            "message": r.message,
        }
        for r in found.revisions
    ]
    render_table(
        rows,
        [
            Col("revision", wrap=False),
            Col("revises", wrap=False, drop=1),
            Col("branch", wrap=False),
            Col("head", wrap=False, drop=2),
            Col("applied", wrap=False),
            Col("message"),
        ],
        fuller="--json",
    )
    if found.current is None:
        say("no database read: applied is unknown (give --db)")
    elif not found.current:
        say(
            "no revision is recorded here: `agora db upgrade` runs the migrations, and "
            "`agora db stamp agent@head` records head on a schema `agora db provision` made"
        )
    else:
        say(f"recorded: {', '.join(found.current)}")


RevisionArg = Annotated[
    str,
    typer.Argument(
        metavar="REVISION",
        help="A revision (0005), BRANCH@head (agent@head, documents@head, rag@head, "
        "rollup@head) or BRANCH@base (removes that branch's row).",
        show_default=False,
    ),
]


def stamp(
    revision: RevisionArg,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Record the revision even when the live schema is not what it leaves.",
        ),
    ] = False,
    lock_timeout: LockTimeoutOpt = 10.0,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Record REVISION in the version table without running any migration.

    Refuses (exit 1, recording nothing, naming what differs and the revision the schema is)
    when the live schema is not what REVISION leaves: for the main chain the schema the
    library derives for that revision (tables, columns, indexes, foreign keys, column types,
    MySQL's engine and collation; what later revisions add may stand too), for an optional
    branch the tables its revisions create. --force records it anyway. BRANCH@base removes the
    branch's row and claims nothing about the schema. Runs under the provisioning lock; other
    branches' rows are kept.

    Example: agora db provision --db mysql://root@db.internal/app && agora db stamp agent@head
    """
    from agora_cli.store._migrate import stamp as run_stamp
    from agora_cli.store._provision import table_lock_timeout

    seconds = table_lock_timeout(lock_timeout)
    result = run_stamp(open_db(db), revision, force=force, table_lock_timeout_s=seconds)
    if result.forced:
        first = result.differences[0].detail
        say(
            f"note: recorded {result.to_revision} although the live schema differs from it "
            f"({len(result.differences):,} difference(s), e.g. {first})",
            style="yellow",
        )
    for note in result.notes:
        say(f"note: {note}", style="yellow")
    finish(_stamp_doc(result), as_json=as_json, show=_stamp_sentence(result))


def _stamp_doc(result: StampResult) -> dict[str, Any]:
    return {
        "branch": result.branch,
        "from": result.from_revision,
        "to": result.to_revision,
        "stamped": result.stamped,
        "forced": result.forced,
        "differences": [
            {"kind": p.kind, "table": p.table, "detail": p.detail} for p in result.differences
        ],
        "notes": result.notes,
    }


def _stamp_sentence(result: StampResult) -> str:
    branch = result.branch
    if not result.stamped:
        return f"Already recorded: {result.to_revision or 'nothing'} ({branch}); nothing to stamp."
    if result.to_revision is None:
        return (
            f"Removed {result.from_revision} ({branch}) from the version table; the schema is "
            "unchanged."
        )
    before = result.from_revision or "nothing recorded"
    return f"Stamped {result.to_revision} ({branch}; was {before}); no migration ran."


TargetArg = Annotated[
    str,
    typer.Argument(
        metavar="BRANCH@base",
        help="An optional branch's base: documents@base, rag@base or rollup@base (or a "
        "revision of that branch). The main chain (agent) is forward-only.",
        show_default=False,
    ),
]


def downgrade(
    target: TargetArg,
    sql: Annotated[
        bool, typer.Option("--sql", help="Print the SQL instead of running it.")
    ] = False,
    yes: YesOpt = False,
    lock_timeout: LockTimeoutOpt = 10.0,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Undo an optional branch: drop its tables and remove its row from the version table.

    For the optional branches only (documents, rag, rollup). The main chain is forward-only:
    agent@base or a main-chain revision is refused (exit 2) before connecting; restore from a
    backup to go back. Tables that hold rows are dropped only after a question on a terminal,
    or with --yes. Runs under the provisioning lock; every lock wait gives up after
    --lock-timeout (exit 3).

    Example: agora db downgrade rollup@base --sql && agora db downgrade rollup@base --yes
    """
    from agora_cli.store._migrate import downgrade_branch, downgrade_branch_of
    from agora_cli.store._provision import table_lock_timeout

    seconds = table_lock_timeout(lock_timeout)
    downgrade_branch_of(target)  # the main chain is refused before connecting
    engine = open_db(db)
    preview = downgrade_branch(engine, target, sql=True, table_lock_timeout_s=seconds)
    if sql or not preview.undone:
        finish(_downgrade_doc(preview, sql=sql), as_json=as_json, show=lambda: _show_sql(preview))
        return
    full = {t: n for t, n in preview.tables.items() if n}
    if full and not yes:
        _confirm_drop(target, full)
    result = downgrade_branch(engine, target, table_lock_timeout_s=seconds)
    finish(_downgrade_doc(result, sql=False), as_json=as_json, show=_downgrade_sentence(result))


def _stdin_is_terminal() -> bool:
    """Whether a person can be asked (tests stand in a terminal here)."""
    return sys.stdin.isatty()


def _confirm_drop(target: str, full: dict[str, int]) -> None:
    from agora_cli.store._errors import InvalidInput

    held = ", ".join(f"{t} ({_rows_text(n)})" for t, n in full.items())
    if not _stdin_is_terminal():
        raise InvalidInput(f"not dropping {held} without --yes: there is no terminal to ask on")
    if not typer.confirm(
        safe_text(f"Downgrading to {target} drops {held}, for good. Drop them?"),
        default=False,
        err=True,
    ):
        say("nothing dropped.")
        raise typer.Exit(1)


def _rows_text(n: int) -> str:
    from agora_cli.store._migrate import ROWS_COUNTED_UP_TO

    return f"more than {ROWS_COUNTED_UP_TO:,} rows" if n > ROWS_COUNTED_UP_TO else f"{n:,} rows"


def _downgrade_doc(result: BranchDowngrade, *, sql: bool) -> dict[str, Any]:
    from agora_cli.store._migrate import ROWS_COUNTED_UP_TO

    doc: dict[str, Any] = {
        "branch": result.branch,
        "from": result.from_revision,
        "to": result.to_revision,
        "undone": [] if sql else result.undone,
        "tables": [
            {
                "table": t,
                "rows": min(n, ROWS_COUNTED_UP_TO),
                "rows_exact": n <= ROWS_COUNTED_UP_TO,
            }
            for t, n in result.tables.items()
        ],
    }
    if sql:
        doc["sql"] = result.sql
    return doc


def _show_sql(result: BranchDowngrade) -> None:
    if not result.undone:
        where = (
            "is not applied here"
            if result.from_revision is None
            else f"is at {result.from_revision} already"
        )
        out_console().print(f"The {result.branch} branch {where}: nothing to undo.", markup=False)
        return
    console = out_console()
    for statement in result.sql:
        console.print(statement + ";", markup=False)


def _downgrade_sentence(result: BranchDowngrade) -> str:
    dropped = ", ".join(f"{t} ({_rows_text(n)})" for t, n in result.tables.items())
    what = f"dropped {dropped}" if dropped else "no table to drop on this database"
    return (
        f"Downgraded the {result.branch} branch {result.from_revision} → "
        f"{result.to_revision or 'base'} (undid {', '.join(result.undone)}; {what})."
    )
