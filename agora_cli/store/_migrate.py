"""Run agora's shipped Alembic migrations without any ``alembic.ini`` of the user's.

The version table is ``agent_alembic_version`` (never ``alembic_version``), so the agent schema
can share a database with an application's own Alembic history. The main chain is labelled
``agent``; ``documents`` and ``rag`` are optional PostgreSQL-only branches applied by name, and
``rollup`` (the fold's per-model rollup, all dialects) is an optional one too.
Alembic has no lock of its own: ``upgrade``, ``stamp`` and ``downgrade_branch`` hold the
provisioning lock around it.

What an Alembic user expects beside ``upgrade``: ``history`` (every revision of every branch, in
order, with what this database recorded), ``stamp`` (record a revision without running it, once
the live schema is what that revision leaves: ``ddl.schema_at`` derives it from the upgrade
map), ``downgrade_branch`` (an optional branch back to its base; the main chain is
forward-only), and offline SQL that starts from the live schema (``offline_statements``).
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import agora_cli.migrations as shipped_migrations
from agora_cli.store._ddl import advance, compile_dialect, plan, revision_statements, schema_at
from agora_cli.store._dialects import dialect_of
from agora_cli.store._engine import dialect_name
from agora_cli.store._errors import InvalidInput, SchemaDrift
from agora_cli.store._live_schema import SchemaCatalog, read_catalog
from agora_cli.store._problems import Problem
from agora_cli.store._provision import (
    bounded_lock_waits,
    provisioning_lock,
    shape_problems,
    table_lock_timeout,
)
from agora_cli.store._schema import RETIRED_INDEXES, apply_mysql_options

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import Script, ScriptDirectory
    from sqlalchemy import MetaData
    from sqlalchemy.engine import Connection, Engine

__all__ = [
    "MAIN_BRANCH",
    "OPTIONAL_BRANCHES",
    "VERSION_TABLE",
    "BranchDowngrade",
    "History",
    "HistoryEntry",
    "StampResult",
    "UpgradeResult",
    "applied_branches",
    "applies_main_revisions",
    "current_revision",
    "downgrade",
    "downgrade_branch",
    "downgrade_branch_of",
    "head_revision",
    "history",
    "offline_statements",
    "pending_notices",
    "stamp",
    "target_branch",
    "upgrade",
]

VERSION_TABLE = "agent_alembic_version"
MAIN_BRANCH = "agent"
OPTIONAL_BRANCHES = ("documents", "rag", "rollup")
FORWARD_ONLY_NOTICE = (
    "revisions 0002 onwards are forward-only: stop writers of older agora/runtime versions "
    "before upgrading"
)


@dataclass(frozen=True)
class UpgradeResult:
    """What ``upgrade`` did: the targeted chain's revision before and after, and each step."""

    from_revision: str | None
    to_revision: str | None
    applied: list[str]
    sql: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)


def _script_location() -> str:
    return str(Path(shipped_migrations.__file__).parent)


def make_config(connection: Connection | None = None, **attributes: Any) -> Config:
    """An Alembic ``Config`` for the shipped migrations, bound to ``connection``."""
    # lazy: Alembic loads only for migrations, never for the store's other work
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", _script_location())
    cfg.attributes["connection"] = connection
    cfg.attributes.update(attributes)
    return cfg


def script_directory() -> ScriptDirectory:
    # lazy: Alembic loads only for migrations, never for the store's other work
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(make_config())


def head_revision(branch: str = MAIN_BRANCH) -> str:
    """The head revision of a branch (``agent`` by default)."""
    head = script_directory().get_revision(f"{branch}@head")
    assert head is not None
    return str(head.revision)


def _heads(conn: Connection) -> tuple[str, ...]:
    # lazy: Alembic loads only for migrations, never for the store's other work
    from alembic.runtime.migration import MigrationContext

    ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
    return tuple(ctx.get_current_heads())


def _branch_of(script: ScriptDirectory, rev: str) -> str | None:
    revision = script.get_revision(rev)
    if revision is None:
        return None
    labels = set(revision.branch_labels)
    for name in (MAIN_BRANCH, *OPTIONAL_BRANCHES):
        if name in labels:
            return name
    return min(labels) if labels else None  # a branch added since: its own label


def _branch_names(script: ScriptDirectory) -> list[str]:
    """Every branch the shipped migrations hold: the main chain first, then the others by name."""
    labels = {label for rev in script.walk_revisions() for label in rev.branch_labels}
    return [MAIN_BRANCH, *sorted(labels - {MAIN_BRANCH})]


def _chain(script: ScriptDirectory, target: str) -> list[Script]:
    """The revisions from a branch's base up to ``target`` (a revision or ``BRANCH@head``)."""
    return list(reversed(list(script.iterate_revisions(target, "base"))))


def _revision_on(script: ScriptDirectory, heads: tuple[str, ...], branch: str) -> str | None:
    for rev in heads:
        if _branch_of(script, rev) == branch:
            return rev
    return None


def current_revision(conn: Connection, branch: str = MAIN_BRANCH) -> str | None:
    """The applied revision of ``branch``, or ``None`` if its migrations never ran."""
    return _revision_on(script_directory(), _heads(conn), branch)


def applied_branches(conn: Connection) -> list[str]:
    """The optional branches (``documents``, ``rag``, ``rollup``) applied to this database."""
    script = script_directory()
    heads = _heads(conn)
    return [b for b in OPTIONAL_BRANCHES if _revision_on(script, heads, b) is not None]


def target_branch(revision: str) -> str:
    """The branch (``agent``, ``documents``, ``rag`` or ``rollup``) that ``revision`` belongs to."""
    return _target_branch(script_directory(), revision)


def pending_notices(revision: str) -> list[str]:
    """What an operator must hear before upgrading to ``revision``."""
    return [FORWARD_ONLY_NOTICE] if target_branch(revision) == MAIN_BRANCH else []


def _target_branch(script: ScriptDirectory, revision: str) -> str:
    label = revision.split("@", 1)[0] if "@" in revision else None
    if label is not None and label in _branch_names(script):
        return label
    if revision in ("head", "heads"):
        raise InvalidInput(
            "give a branch: agent@head (the default), documents@head, rag@head or rollup@head"
        )
    # lazy: Alembic loads only for migrations, never for the store's other work
    from alembic.util import CommandError

    try:
        branch = _branch_of(script, revision)
    except CommandError:
        branch = None
    if branch is None:
        raise InvalidInput(
            f"unknown revision {revision!r}: use agent@head, documents@head, rag@head, "
            f"rollup@head or a "
            f"revision id such as {head_revision()}"
        )
    return branch


def upgrade(
    engine: Engine,
    revision: str = f"{MAIN_BRANCH}@head",
    *,
    sql: bool = False,
    table_lock_timeout_s: float = 10.0,
) -> UpgradeResult:
    """Upgrade to ``revision`` under the provisioning lock; with ``sql``, return the SQL instead.

    Offline SQL starts from the database's current revision of that branch and from its live
    schema: each revision prints what it adds to the schema as the live one and the revisions
    before it leave it (``offline_statements``), so the script runs on this database, and a
    database that ``provision`` made gets the version table's rows only. Online, every lock
    wait gives up after ``table_lock_timeout_s`` (more than 0, at most 3600) with ``LockTimeout``
    naming the table and who holds it; the revision that was running is rolled back where the
    dialect can (PostgreSQL, SQLite) and not recorded.
    """
    # lazy: Alembic loads only for migrations, never for the store's other work
    from alembic import command
    from alembic.util import CommandError

    seconds = table_lock_timeout(table_lock_timeout_s)
    script = script_directory()
    branch = _target_branch(script, revision)
    notices = [FORWARD_ONLY_NOTICE] if branch == MAIN_BRANCH else []
    with engine.connect() as conn:
        if sql:
            before = _revision_on(script, _heads(conn), branch)
            catalog = read_catalog(conn, full=True)
            conn.rollback()
            buf = io.StringIO()
            cfg = make_config(
                None, dialect=dialect_name(engine), output_buffer=buf, catalog=catalog
            )
            try:
                command.upgrade(cfg, f"{before}:{revision}" if before else revision, sql=True)
            except CommandError as exc:
                raise InvalidInput(str(exc).splitlines()[0]) from None
            statements = [s.strip() for s in buf.getvalue().split(";\n") if s.strip()]
            if VERSION_TABLE in catalog.columns:
                # Alembic creates the version table when a branch starts from its base; here
                # it exists already (another branch's rows, or a stamp removed).
                statements = [s for s in statements if not _creates_version_table(s)]
            target = script.get_revision(revision)
            to = str(target.revision) if target is not None else before
            return UpgradeResult(before, to, [], statements, notices)
        applied: list[str] = []
        # The bound comes first: on SQLite, reading the version table already waits for the
        # write lock (every transaction there begins IMMEDIATE).
        with (
            bounded_lock_waits(conn, seconds, doing=f"to upgrade to {revision}"),
            provisioning_lock(conn),
        ):
            before = _revision_on(script, _heads(conn), branch)
            if not dialect_of(conn).keyed_advisory_locks:
                # PostgreSQL's lock is its transaction's: the migrations run in it (Alembic
                # joins a transaction it finds open), all or nothing, committed with the lock.
                conn.rollback()
            cfg = make_config(conn, applied=applied)
            try:
                command.upgrade(cfg, revision)
            except CommandError as exc:
                raise InvalidInput(str(exc).splitlines()[0]) from None
            after = _revision_on(script, _heads(conn), branch)
            if conn.in_transaction() and not dialect_of(conn).keyed_advisory_locks:
                conn.commit()
    return UpgradeResult(before, after, applied, [], notices)


_CREATE_VERSION_TABLE = re.compile(rf"CREATE TABLE [`\"]?{VERSION_TABLE}\b")


def _creates_version_table(statement: str) -> bool:
    body = [line for line in statement.splitlines() if line.strip() and not line.startswith("--")]
    return any(_CREATE_VERSION_TABLE.match(line) for line in body[:2])


def offline_statements(revision: str, dialect: str, catalog: SchemaCatalog | None) -> list[str]:
    """What main-chain ``revision`` prints in offline SQL (``upgrade(..., sql=True)``).

    With ``catalog`` (the live schema, carried through the script's revisions: ``upgrade``
    passes it), the statements that bring it to the schema as ``revision`` leaves it
    (``ddl.schema_at``), and ``catalog`` then holds their result: nothing the database already
    has, and what it lacks even of an earlier revision's shape (as the online upgrade, which
    provisions, would add it). Without, what the upgrade map says the revision added.
    """
    if catalog is None:
        return revision_statements(revision, dialect)
    compiled = compile_dialect(dialect)
    if dialect_of(compiled).has_table_options:
        apply_mysql_options()  # before ``schema_at`` copies the tables, options and all
    shape = _shape_at(catalog, script_directory(), revision)
    steps = plan(catalog, compiled, shape)
    advance(catalog, steps)
    return [step.sql for step in steps]


def applies_main_revisions(engine: Engine, revision: str) -> bool:
    """Whether upgrading to ``revision`` applies a main-chain revision on this database (its
    forward-only note is for those alone: a no-op, a revision already passed, or an optional
    branch, says nothing)."""
    script = script_directory()
    if _target_branch(script, revision) != MAIN_BRANCH:
        return False
    with engine.connect().execution_options(sqlite_deferred=True) as conn:
        now = _revision_on(script, _heads(conn), MAIN_BRANCH)
        conn.rollback()
    wanted = script.get_revision(revision)
    if now is None or wanted is None:
        return True
    return wanted.revision not in {r.revision for r in _chain(script, now)}


# --- history ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class HistoryEntry:
    """One revision: ``applied`` is whether the database recorded it or a revision after it on
    its branch (``None`` when no database was read); ``head`` whether it is its branch's last."""

    revision: str
    down_revision: str | None
    branch: str
    message: str
    head: bool
    applied: bool | None


@dataclass(frozen=True)
class History:
    """Every revision of every branch, each branch from base to head (the main chain first);
    ``current`` the revisions the version table holds (``None`` when no database was read)."""

    revisions: list[HistoryEntry]
    current: list[str] | None


def history(conn: Connection | None = None) -> History:
    """The shipped revisions in order and, with ``conn``, which of them the database recorded."""
    script = script_directory()
    current = list(_heads(conn)) if conn is not None else None
    applied: set[str] = set()
    for recorded in current or ():
        applied.update(r.revision for r in _chain(script, recorded))
    entries: list[HistoryEntry] = []
    for branch in _branch_names(script):
        for rev in _chain(script, f"{branch}@head"):
            down = rev.down_revision
            entries.append(
                HistoryEntry(
                    revision=str(rev.revision),
                    down_revision=", ".join(down) if isinstance(down, tuple | list) else down,
                    branch=branch,
                    message=(rev.doc or "").strip().splitlines()[0] if rev.doc else "",
                    head=bool(rev.is_head),
                    applied=None if current is None else rev.revision in applied,
                )
            )
    return History(entries, None if current is None else sorted(current))


# --- stamp -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StampResult:
    """What ``stamp`` recorded: the branch's revision before and after (``None``: none, the
    branch's base), whether the version table changed, whether it was forced past
    ``differences`` (the live schema against the revision's), and what to know."""

    branch: str
    from_revision: str | None
    to_revision: str | None
    stamped: bool
    forced: bool
    differences: list[Problem]
    notes: list[str]


def _resolve(script: ScriptDirectory, revision: str) -> str | None:
    """The revision id ``revision`` names; ``None`` for a branch's base."""
    if revision == "base" or revision.endswith("@base"):
        return None
    # lazy: Alembic loads only for migrations, never for the store's other work
    from alembic.util import CommandError

    try:
        found = script.get_revision(revision)
    except CommandError as exc:
        raise InvalidInput(str(exc).splitlines()[0]) from None
    if found is None:
        raise InvalidInput(f"unknown revision {revision!r}")
    return str(found.revision)


def _shape_at(cat: SchemaCatalog, script: ScriptDirectory, target: str) -> MetaData:
    """The main chain's schema at ``target`` (``ddl.schema_at``), as ``cat`` is measured by it.

    An index a later revision retired is not expected once its replacement stands in ``cat``:
    the schema is then past that revision (which ``db upgrade`` from ``target`` re-runs without
    DDL), and provisioning would drop it again."""
    chain = {r.revision for r in _chain(script, target)}
    passed = [
        gone.name
        for gone in RETIRED_INDEXES
        if gone.revision not in chain and gone.replaced_by in cat.indexes.get(gone.table, set())
    ]
    return schema_at(chain, without_indexes=passed)


def _main_differences(
    cat: SchemaCatalog, dialect: str, script: ScriptDirectory, target: str
) -> list[Problem]:
    """How the live schema differs from the main chain's at ``target`` (``_shape_at``)."""
    chain = {r.revision for r in _chain(script, target)}
    retired = tuple(r for r in RETIRED_INDEXES if r.revision in chain)
    return shape_problems(cat, dialect, _shape_at(cat, script, target), retired)


def _branch_differences(
    cat: SchemaCatalog, dialect: str, script: ScriptDirectory, target: str
) -> list[Problem]:
    """The tables an optional branch's revisions up to ``target`` create (each revision's
    ``creates(dialect)``) that the live schema lacks."""
    out: list[Problem] = []
    for rev in _chain(script, target):
        creates = getattr(rev.module, "creates", None)
        if creates is None:
            out.append(
                Problem(
                    "unverifiable",
                    VERSION_TABLE,
                    f"revision {rev.revision} does not say which tables it creates",
                )
            )
            continue
        for table in creates(dialect):
            if table not in cat.columns:
                out.append(
                    Problem(
                        "missing_table",
                        table,
                        f"table {table} does not exist (revision {rev.revision} creates it)",
                    )
                )
    return out


def _matching_revision(cat: SchemaCatalog, dialect: str, script: ScriptDirectory) -> str | None:
    """The last main-chain revision whose schema the live one is (``None``: none is).

    A schema that holds a revision's shape holds every earlier one's (revisions only add, and
    an index a later one retired is not missed once its replacement stands), so a bisection
    finds it: head first (the library's own schema, no copy), then 0001 (none matches if it
    does not), then about log2(n) copies between (each copy costs tens of milliseconds)."""
    chain = [str(r.revision) for r in _chain(script, f"{MAIN_BRANCH}@head")]

    def fits(i: int) -> bool:
        return not _main_differences(cat, dialect, script, chain[i])

    if fits(len(chain) - 1):
        return chain[-1]
    if not fits(0):
        return None
    low, high = 0, len(chain) - 1  # fits(low), not fits(high)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return chain[low]


def _refusal(
    target: str,
    branch: str,
    differences: list[Problem],
    cat: SchemaCatalog,
    dialect: str,
    script: ScriptDirectory,
) -> str:
    more = f" (and {len(differences) - 1:,} more)" if len(differences) > 1 else ""
    said = f"the live schema is not what revision {target} leaves: {differences[0].detail}{more}"
    if branch != MAIN_BRANCH:
        hint = f"`agora db upgrade {branch}@head` creates what is missing"
    else:
        match = _matching_revision(cat, dialect, script)
        hint = (
            f"it is what revision {match} leaves (`agora db stamp {match}`)"
            if match is not None
            else "no revision's schema matches it (`agora db check` lists what differs)"
        )
    return f"{said}; {hint}; `agora db stamp {target} --force` records it anyway"


def stamp(
    engine: Engine,
    revision: str,
    *,
    force: bool = False,
    table_lock_timeout_s: float = 10.0,
) -> StampResult:
    """Record ``revision`` in the version table without running a migration, under the
    provisioning lock.

    Refuses (``SchemaDrift``, recording nothing) when the live schema is not what ``revision``
    leaves: for the main chain, the schema the upgrade map derives for it (``ddl.schema_at``:
    every table, column, index and foreign key, column types, MySQL's engine and collation;
    what a later revision added may stand too, ``db upgrade`` then finds it there); for an
    optional branch, the tables its revisions create. ``force`` records it anyway (the
    differences are in the result). ``BRANCH@base`` removes the branch's row: it claims nothing
    about the schema.
    """
    # lazy: Alembic loads only for migrations, never for the store's other work
    from alembic import command
    from alembic.util import CommandError

    seconds = table_lock_timeout(table_lock_timeout_s)
    script = script_directory()
    branch = _target_branch(script, revision)
    target = _resolve(script, revision)
    notes: list[str] = []
    with engine.connect() as conn:
        with (
            bounded_lock_waits(conn, seconds, doing=f"to stamp {revision}"),
            provisioning_lock(conn),
        ):
            before = _revision_on(script, _heads(conn), branch)
            differences: list[Problem] = []
            if target is not None:
                dialect = dialect_name(conn)
                cat = read_catalog(conn, full=True)
                if branch == MAIN_BRANCH:
                    differences = _main_differences(cat, dialect, script, target)
                    head = head_revision()
                    if not differences and target != head:
                        if not _main_differences(cat, dialect, script, head):
                            notes.append(
                                f"the live schema is also what revision {head} leaves: `agora "
                                f"db upgrade` records the revisions after {target} without DDL"
                            )
                else:
                    differences = _branch_differences(cat, dialect, script, target)
                if differences and not force:
                    raise SchemaDrift(_refusal(target, branch, differences, cat, dialect, script))
            if before != target:
                if not dialect_of(conn).keyed_advisory_locks:
                    conn.rollback()  # as in upgrade: Alembic runs in a transaction of its own
                try:
                    command.stamp(make_config(conn), revision)
                except CommandError as exc:
                    raise InvalidInput(str(exc).splitlines()[0]) from None
                if conn.in_transaction() and not dialect_of(conn).keyed_advisory_locks:
                    conn.commit()
    return StampResult(
        branch, before, target, before != target, bool(differences), differences, notes
    )


# --- downgrade -------------------------------------------------------------------------------


@dataclass(frozen=True)
class BranchDowngrade:
    """What ``downgrade_branch`` did (or, with ``sql``, would do): the branch's revision
    before and after, the revisions undone, the tables they drop on this database (those that
    exist, with their rows counted up to ``ROWS_COUNTED_UP_TO``) and the SQL."""

    branch: str
    from_revision: str | None
    to_revision: str | None
    undone: list[str]
    tables: dict[str, int]
    sql: list[str] = field(default_factory=list)


ROWS_COUNTED_UP_TO = 10_000


def downgrade_branch_of(target: str) -> str:
    """The optional branch a downgrade to ``target`` undoes; the main chain (forward-only), or
    no branch, is ``InvalidInput``. Reads no database."""
    return _downgrade_target(script_directory(), target)


def _downgrade_target(script: ScriptDirectory, target: str) -> str:
    optional = [b for b in _branch_names(script) if b != MAIN_BRANCH]
    named = ", ".join(f"{b}@base" for b in optional)
    if target in ("base", "head", "heads"):
        raise InvalidInput(f"give an optional branch's target: {named}")
    branch = _target_branch(script, target)
    if branch == MAIN_BRANCH:
        raise InvalidInput(
            f"the main chain ({MAIN_BRANCH}) is forward-only and never downgraded: the agent "
            "runtime and older writers keep their data in what its revisions add, and going "
            "back would drop it (restore a backup instead); db downgrade undoes an optional "
            f"branch: {named}"
        )
    return branch


def _undone(script: ScriptDirectory, before: str | None, target: str | None) -> list[Script]:
    """The revisions from ``before`` down to (not including) ``target`` (``None``: base)."""
    if before is None:
        return []
    below = {r.revision for r in _chain(script, target)} if target is not None else set()
    return [r for r in reversed(_chain(script, before)) if r.revision not in below]


def _tables_dropped(conn: Connection, undone: list[Script]) -> dict[str, int]:
    """The tables the ``undone`` revisions create that exist here, with their rows (bounded)."""
    dialect = dialect_name(conn)
    cat = read_catalog(conn, full=False)
    prep = conn.dialect.identifier_preparer
    out: dict[str, int] = {}
    for rev in undone:
        creates = getattr(rev.module, "creates", None)
        for table in creates(dialect) if creates is not None else ():
            if table in cat.columns:
                counted = (
                    f"SELECT COUNT(*) FROM (SELECT 1 FROM {prep.quote(table)} "
                    f"LIMIT {ROWS_COUNTED_UP_TO + 1}) AS r"
                )
                out[table] = int(conn.exec_driver_sql(counted).scalar() or 0)
    return out


def downgrade_branch(
    engine: Engine,
    target: str,
    *,
    sql: bool = False,
    table_lock_timeout_s: float = 10.0,
) -> BranchDowngrade:
    """Downgrade an optional branch to ``target`` (``documents@base``: its tables dropped, its
    version row removed) under the provisioning lock; with ``sql``, return the SQL instead.

    The main chain is forward-only: a target on it is ``InvalidInput`` before anything is read.
    Every lock wait gives up after ``table_lock_timeout_s`` (``LockTimeout``).
    """
    # lazy: Alembic loads only for migrations, never for the store's other work
    from alembic import command
    from alembic.util import CommandError

    seconds = table_lock_timeout(table_lock_timeout_s)
    script = script_directory()
    branch = _downgrade_target(script, target)
    to = _resolve(script, target)
    with engine.connect() as conn:
        if sql:
            before = _revision_on(script, _heads(conn), branch)
            undone = _undone(script, before, to)
            tables = _tables_dropped(conn, undone)
            conn.rollback()
            if not undone:
                return BranchDowngrade(branch, before, before, [], tables)
            buf = io.StringIO()
            cfg = make_config(None, dialect=dialect_name(engine), output_buffer=buf)
            try:
                command.downgrade(cfg, f"{before}:{target}", sql=True)
            except CommandError as exc:
                raise InvalidInput(str(exc).splitlines()[0]) from None
            statements = [s.strip() for s in buf.getvalue().split(";\n") if s.strip()]
            return BranchDowngrade(
                branch, before, to, [str(r.revision) for r in undone], tables, statements
            )
        done: list[str] = []
        with (
            bounded_lock_waits(conn, seconds, doing=f"to downgrade to {target}"),
            provisioning_lock(conn),
        ):
            before = _revision_on(script, _heads(conn), branch)
            tables = _tables_dropped(conn, _undone(script, before, to))
            if not dialect_of(conn).keyed_advisory_locks:
                conn.rollback()
            try:
                command.downgrade(make_config(conn, applied=done), target)
            except CommandError as exc:
                raise InvalidInput(str(exc).splitlines()[0]) from None
            after = _revision_on(script, _heads(conn), branch)
            if conn.in_transaction() and not dialect_of(conn).keyed_advisory_locks:
                conn.commit()
    return BranchDowngrade(branch, before, after, done, tables)


def downgrade(engine: Engine, revision: str) -> list[str]:
    """Downgrade to ``revision`` (forward-only revisions refuse with ``ForwardOnlyMigration``);
    the revisions undone."""
    # lazy: Alembic loads only for migrations, never for the store's other work
    from alembic import command

    with engine.connect() as conn, provisioning_lock(conn):
        applied: list[str] = []
        command.downgrade(make_config(conn, applied=applied), revision)
        if conn.in_transaction() and not dialect_of(conn).keyed_advisory_locks:
            conn.commit()
    return applied
