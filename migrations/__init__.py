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
    provisioning can never drift apart). Offline (``db upgrade --sql``) each revision prints
    what it adds to the schema the script has reached: ``agora db upgrade`` passes the live
    catalog (``config.attributes["catalog"]``), so the script starts from this database's
    schema; without one, from the shape before the revision (``ddl.revision_statements``).
    """
    if context.is_offline_mode():
        from agora_cli.store._migrate import offline_statements

        catalog = context.config.attributes.get("catalog")
        for statement in offline_statements(revision, op.get_context().dialect.name, catalog):
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
