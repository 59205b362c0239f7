"""`agora db seal`: a tenant's existing plaintext sealed under its active key, in batches.

A `db` command, not a `keys` one: it rewrites rows in bulk (the keys it uses are `agora keys`).
"""

from __future__ import annotations

# internal on purpose: the operator's commands import the store's private modules (cli/__init__.py)
from typing import Annotated

import typer

from agora_cli.cli.keys import TenantOpt
from agora_cli.cli.options import DbOpt, JsonOpt, open_db, scoped_tenant
from agora_cli.cli.output import finish, progress

__all__ = ["seal"]


def seal(
    tenant: TenantOpt,
    rotate: Annotated[
        bool,
        typer.Option("--rotate", help="Also re-seal rows sealed under retired keys."),
    ] = False,
    batch: Annotated[
        int, typer.Option("--batch", min=1, max=10000, help="Rows per batch (1-10000).")
    ] = 1000,
    max_batches: Annotated[
        int | None,
        typer.Option("--max-batches", min=1, help="Stop after N batches.", show_default=False),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count the rows it would seal; seal none.")
    ] = False,
    vacuum: Annotated[
        bool,
        typer.Option(
            "--vacuum",
            help="Then rewrite the sealed tables so old row versions leave the table files "
            "(PostgreSQL VACUUM FULL: each table locked in turn, reads and writes wait).",
        ),
    ] = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Seal a tenant's existing plaintext values under its active key, in bounded batches.

    Covers every sealed column: messages (content, tool parts, attachments, outcome), threads
    (title, summary), queued messages, tool calls (input, output), proposals (input, card,
    result) and stream frames (payload) of the tenant. Every key of the
    tenant is unwrapped first: a missing or wrong key-encryption key is exit 3 with nothing
    written. Each batch is its own transaction, so an interrupted run (even kill -9) is safe to
    run again: it resumes, and no row is sealed twice. With --rotate, rows sealed under retired
    keys are re-sealed under the active one. A progress bar shows on a terminal.

    Old row versions still hold the plaintext until the database reuses their space: --vacuum
    then runs PostgreSQL VACUUM FULL on each sealed table (ACCESS EXCLUSIVE lock on that table
    for its duration), MySQL/MariaDB OPTIMIZE TABLE (an online rebuild) or SQLite VACUUM (the
    whole file, exclusively). WAL, replicas and backups keep what they hold (README).

    Example: agora db seal --tenant acme --batch 1000 --vacuum
    """
    from agora_cli.store._seal_rows import count_to_seal, seal_tenant, vacuum_sealed_tables

    scoped_tenant(tenant)  # another tenant than the session's is exit 2
    engine = open_db(db, tenant=tenant)
    total = None
    if not dry_run:
        with engine.connect() as conn:
            total = sum(count_to_seal(conn, tenant=tenant, rotate=rotate).values())
            conn.rollback()
    with progress("sealing", total) as advance:
        result = seal_tenant(
            engine,
            tenant=tenant,
            rotate=rotate,
            batch=batch,
            max_batches=max_batches,
            dry_run=dry_run,
            progress=advance,
        )
    vacuumed = vacuum_sealed_tables(engine) if vacuum and not dry_run else []
    doc = {
        "tenant": result.tenant,
        "key_id": result.key_id,
        "rotate": result.rotate,
        "dry_run": result.dry_run,
        "to_seal": result.to_seal,
        "sealed": result.sealed,
        "remaining": result.remaining,
        "batches": result.batches,
        "broken": result.broken,
        "vacuumed": vacuumed,
    }
    what = "value(s) not under the active key" if rotate else "plaintext value(s)"
    if dry_run:
        text = f"Tenant {result.tenant}: {sum(result.to_seal.values()):,} {what} to seal."
    else:
        text = (
            f"Tenant {result.tenant}: sealed {sum(result.sealed.values()):,} value(s) under key "
            f"{result.key_id} in {result.batches} batch(es); "
            f"{sum(result.remaining.values()):,} {what} remain."
        )
        if sum(result.broken.values()):
            text += (
                f" {sum(result.broken.values()):,} value(s) name a key but do not open (copied, "
                "altered or shredded): left as they are."
            )
        if vacuumed:
            text += f" Old row versions removed ({len(vacuumed)} statement(s))."
    finish(doc, as_json=as_json, show=text)
