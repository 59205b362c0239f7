"""agora's Alembic migrations (shipped inside the package as ``agora_cli.migrations``).

Every main-chain revision delegates to ``ensure_agent_tables`` on the migration's own connection
(which already holds the provisioning lock), so migrations and provisioning cannot drift. Offline
(``agora db upgrade --sql``) each revision emits the DDL that it introduced.
"""

from __future__ import annotations

from alembic import context, op

from agora_cli.store._errors import ForwardOnlyMigration


def apply_revision(revision: str) -> None:
    """Run revision ``revision``: online, bring the schema to *head's* shape; offline, print the
    revision's own historical DDL.

    Online, every revision delegates to ``ensure_agent_tables``, which builds the library's
    current shape (so a later revision finds nothing left to do, and migrations and
    provisioning can never drift apart). Offline (``db upgrade --sql``) there is no database to
    read, so each revision prints exactly the statements it added
    (``provision.revision_statements``) and the script is valid from an empty database.
    """
    if context.is_offline_mode():
        from agora_cli.store._provision import revision_statements

        for statement in revision_statements(revision, op.get_context().dialect.name):
            op.execute(statement)
        return
    from agora_cli.store._provision import ensure_agent_tables

    ensure_agent_tables(op.get_bind(), lock=False)


def refuse_downgrade(revision: str, what: str) -> None:
    raise ForwardOnlyMigration(
        f"revision {revision} ({what}) is forward-only and cannot be downgraded; "
        "restore from a backup to go back"
    )


def say(message: str) -> None:
    """A line in offline SQL output (as a comment), or on stderr online."""
    if context.is_offline_mode():
        context.get_context().impl.static_output(f"-- {message}")
    else:
        import sys

        print(message, file=sys.stderr)
