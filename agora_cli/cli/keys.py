"""`agora keys create|rotate|destroy|status|list`: tenants' data keys for sealed content.

The key-encryption key comes from AGORA_KEK or AGORA_KEK_FILE and never from an option: an
option would put it in the shell history and in `ps`. Nothing here prints key material: keys are
named by id, the KEK by its fingerprint.
"""

from __future__ import annotations

# internal on purpose: the operator's commands import the store's private modules (cli/__init__.py)
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agora_cli.cli.options import CsvOpt, DbOpt, JsonOpt, YesOpt, open_db, scoped_tenant
from agora_cli.cli.output import (
    Col,
    finish,
    render_table,
    safe_text,
    say,
    table_time,
)
from agora_cli.store._clock import iso_ms

if TYPE_CHECKING:
    from agora_cli.store._sealing import TenantKey

__all__ = ["TenantOpt", "app"]

app = typer.Typer(
    help=(
        "Tenants' data keys for sealed content (wrapped by the key-encryption key in "
        "AGORA_KEK or AGORA_KEK_FILE; never shown)."
    ),
    no_args_is_help=True,
)

TenantOpt = Annotated[
    str,
    typer.Option("--tenant", metavar="TENANT", help="The tenant.", show_default=False),
]


def _key_doc(key: TenantKey) -> dict[str, Any]:
    return {
        "id": key.id,
        "tenant": key.tenant,
        "state": "destroyed" if key.destroyed else "active" if key.active else "retired",
        "kek_fingerprint": key.kek_fingerprint,
        "created_at": iso_ms(key.created_at),
        "retired_at": iso_ms(key.retired_at),
    }


KEY_COLUMNS = [
    Col("tenant"),
    Col("id", wrap=False),
    Col("state"),
    Col("created_at", "created", fmt=table_time, wrap=False),
    Col("retired_at", "retired", fmt=table_time, wrap=False),
    Col("kek_fingerprint", "KEK fingerprint", wrap=False, drop=1),
]


@app.command("create")
def create(tenant: TenantOpt, db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Give a tenant its first data key: from then on its new content is stored sealed.

    Needs the key-encryption key (AGORA_KEK or AGORA_KEK_FILE; missing or wrong: exit 3, nothing
    written). A tenant that already has an active key is exit 1 (use `keys rotate`). Existing
    plaintext rows stay as they are until `agora db seal --tenant T`.

    Example: agora keys create --tenant acme   # with AGORA_KEK_FILE=/run/secrets/agora-kek
    """
    from agora_cli.store._sealing import create_tenant_key

    scoped_tenant(tenant)  # another tenant than the session's is exit 2
    with open_db(db, tenant=tenant).begin() as conn:
        key = create_tenant_key(conn, tenant=tenant)
    finish(
        _key_doc(key),
        as_json=as_json,
        show=f"Created key {key.id} for tenant {key.tenant}: its new messages are sealed. "
        f"Seal its existing ones with `agora db seal --tenant {key.tenant}`.",
    )


@app.command("rotate")
def rotate(tenant: TenantOpt, db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Make a new active key for a tenant; the old one is retired and kept for opening.

    Rows sealed under the retired key stay readable; `agora db seal --tenant T --rotate`
    re-seals them under the new key. Needs the key-encryption key that wrapped the tenant's
    keys (missing or wrong: exit 3, nothing written); a tenant without a key is exit 1.

    Example: agora keys rotate --tenant acme && agora db seal --tenant acme --rotate
    """
    from agora_cli.store._engine import retry_transient
    from agora_cli.store._sealing import KeyRotation, rotate_tenant_key

    scoped_tenant(tenant)  # another tenant than the session's is exit 2
    engine = open_db(db, tenant=tenant)

    def run() -> KeyRotation:
        # Concurrent rotations of one tenant can deadlock on MySQL/MariaDB (1213): the whole
        # transaction is tried again, as every other write command does.
        with engine.begin() as conn:
            return rotate_tenant_key(conn, tenant=tenant)

    rotation = retry_transient(run)
    doc = {**_key_doc(rotation.key), "retired": rotation.retired}
    finish(
        doc,
        as_json=as_json,
        show=f"Tenant {rotation.key.tenant}: new active key {rotation.key.id}; retired "
        f"{', '.join(rotation.retired)}. Re-seal its rows with `agora db seal --tenant "
        f"{rotation.key.tenant} --rotate`.",
    )


@app.command("destroy")
def destroy(
    tenant: TenantOpt,
    yes: YesOpt = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Crypto-shred a tenant: destroy every one of its data keys, for good.

    Its sealed values can never be opened again, by anyone: they read as [shredded] (exit 0),
    and writing the tenant's content is refused until `agora keys create` gives it a new key.
    The key rows stay (marked destroyed) so that what they sealed is known for what it is.
    Needs no key-encryption key. Asks first on a terminal; without one, needs --yes. Copies of
    the database taken before (backups, replicas) still hold the wrapped keys: see the README.

    Example: agora keys destroy --tenant acme --yes
    """
    import sys

    from agora_cli.store._errors import InvalidInput
    from agora_cli.store._seal_rows import destroy_tenant_keys

    scoped_tenant(tenant)  # another tenant than the session's is exit 2, before any question
    if not yes and not sys.stdin.isatty():
        raise InvalidInput(
            f"not destroying tenant {tenant!r}'s keys without --yes: there is no terminal to ask on"
        )
    if not yes and not typer.confirm(
        safe_text(
            f"Destroy every key of tenant {tenant}? Its sealed content becomes unreadable for good."
        ),
        default=False,
        err=True,
    ):
        say("nothing destroyed.")
        raise typer.Exit(1)
    with open_db(db, tenant=tenant).begin() as conn:
        destroyed = destroy_tenant_keys(conn, tenant=tenant)
    finish(
        {"tenant": tenant, "destroyed": destroyed},
        as_json=as_json,
        show=f"Tenant {tenant}: destroyed {len(destroyed)} key(s)"
        + (f" ({', '.join(destroyed)})" if destroyed else " (already destroyed)")
        + "; its sealed values now read as [shredded].",
    )


@app.command("status")
def status(tenant: TenantOpt, db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Say whether a tenant seals its content: active key, destroyed (crypto-shredded), or none.

    Needs no key-encryption key.

    Example: agora keys status --tenant acme --json
    """
    from agora_cli.store._sealing import list_tenant_keys

    scoped_tenant(tenant)  # another tenant than the session's is exit 2
    engine = open_db(db, readonly=True, tenant=tenant)
    with engine.connect() as conn:
        keys = list_tenant_keys(conn, tenant=tenant)
        conn.rollback()
    active = next((k.id for k in keys if k.active), None)
    if active is not None:
        state, text = "sealed", f"Tenant {tenant}: sealed under active key {active}."
    elif keys and all(k.destroyed for k in keys):
        state = "shredded"
        text = (
            f"Tenant {tenant}: keys destroyed (crypto-shredded); its sealed values read as "
            "[shredded] and its content is not written until `agora keys create`."
        )
    else:
        state, text = "plain", f"Tenant {tenant}: no key; its content is stored in plaintext."
    doc = {"tenant": tenant, "state": state, "active_key": active, "keys": len(keys)}
    finish(doc, as_json=as_json, show=text)


@app.command("list")
def list_keys(
    tenant: Annotated[
        str | None,
        typer.Option("--tenant", metavar="TENANT", help="Only this tenant.", show_default=False),
    ] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
    as_csv: CsvOpt = False,
) -> None:
    """List tenants' data keys: id, state, created, retired (never key material).

    Needs no key-encryption key.

    Example: agora keys list --tenant acme --json
    """
    from agora_cli.store._sealing import list_tenant_keys

    tenant = scoped_tenant(tenant)
    engine = open_db(db, readonly=True, tenant=tenant)
    with engine.connect() as conn:
        keys = list_tenant_keys(conn, tenant=tenant)
        conn.rollback()
    rows = [_key_doc(k) for k in keys]
    finish(
        {"keys": rows},
        as_json=as_json,
        csv=(rows, KEY_COLUMNS) if as_csv else None,
        show=lambda: render_table(rows, KEY_COLUMNS, title="Tenant keys", empty="no tenant keys"),
    )
