"""Run agora's shipped Alembic migrations without any ``alembic.ini`` of the user's.

The version table is ``agent_alembic_version`` (never ``alembic_version``), so the agent schema
can share a database with an application's own Alembic history. The main chain is labelled
``agent``; ``documents`` and ``rag`` are optional PostgreSQL-only branches applied by name, and
``rollup`` (the fold's per-model rollup, all dialects) is an optional one too.
Alembic has no lock of its own: ``upgrade`` holds the provisioning lock around it.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import agora_cli.migrations as shipped_migrations
from agora_cli.store._dialects import dialect_of
from agora_cli.store._engine import dialect_name
from agora_cli.store._errors import InvalidInput
from agora_cli.store._provision import bounded_lock_waits, provisioning_lock, table_lock_timeout

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from sqlalchemy.engine import Connection, Engine

__all__ = [
    "MAIN_BRANCH",
    "OPTIONAL_BRANCHES",
    "VERSION_TABLE",
    "UpgradeResult",
    "applied_branches",
    "current_revision",
    "downgrade",
    "head_revision",
    "pending_notices",
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
    return None


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
    if label in (MAIN_BRANCH, *OPTIONAL_BRANCHES):
        return str(label)
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

    Offline SQL starts from the database's current revision of that branch. Online, every lock
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
            conn.rollback()
            buf = io.StringIO()
            cfg = make_config(None, dialect=dialect_name(engine), output_buffer=buf)
            try:
                command.upgrade(cfg, f"{before}:{revision}" if before else revision, sql=True)
            except CommandError as exc:
                raise InvalidInput(str(exc).splitlines()[0]) from None
            statements = [s.strip() for s in buf.getvalue().split(";\n") if s.strip()]
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
