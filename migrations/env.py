"""Alembic environment for agora's shipped migrations.

The connection comes from ``config.attributes["connection"]`` (``agora db upgrade`` opens it and
holds the provisioning lock); offline (``--sql``) the dialect comes from
``config.attributes["dialect"]``. The version table is ``agent_alembic_version``.
"""

from __future__ import annotations

from typing import Any

from alembic import context

from agora_cli.store._migrate import VERSION_TABLE
from agora_cli.store._schema import metadata

config = context.config
applied: list[str] | None = config.attributes.get("applied")


def _record(*, step: Any, **_: Any) -> None:
    if applied is not None:
        applied.append(str(step.up_revision_id))  # upgrading: applied; downgrading: undone


if context.is_offline_mode():
    context.configure(
        dialect_name=config.attributes.get("dialect", "postgresql"),
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        literal_binds=True,
        as_sql=True,
        output_buffer=config.attributes.get("output_buffer"),
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations()
else:
    connection = config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("agora's migrations run through `agora db upgrade` or agora_cli.store")
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        transaction_per_migration=True,
        on_version_apply=_record,
    )
    with context.begin_transaction():
        context.run_migrations()
