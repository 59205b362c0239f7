"""Who reads the figures on PostgreSQL with row-level security: a role that sees every tenant.

Written as the attacker and as the misconfigured deploy: the app role's member login (with
another tenant's setting in hand, or none) is refused, because row-level security would narrow
it to some tenants' rows and the figures would look whole while they are not; a superuser and a
dedicated BYPASSRLS read-only login read every tenant's rows.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from helpers import drop_roles, member_login_url, run_agora, run_cli

from agora_cli.store._engine import open_engine
from agora_cli.store._errors import InvalidInput
from agora_cli.store._metrics import check_metrics_privilege, collect_metrics
from agora_cli.store._proposals import ActionProposalStore, NewProposal, Scope
from agora_cli.store._rls import enable_rls
from agora_cli.store._threads import create_thread


def _seed(url: str) -> None:
    """A waiting proposal in each of two tenants, written by the owner."""
    engine = open_engine(url)
    try:
        with engine.begin() as conn:
            for tenant in ("acme", "globex"):
                create_thread(conn, actor_ref="a", tenant_ref=tenant, thread_id=f"t-{tenant}")
        store = ActionProposalStore(engine)
        for tenant in ("acme", "globex"):
            scope = Scope(tenant, "a", f"t-{tenant}")
            store.create(NewProposal(scope=scope, tool_name="refund", input={}, id=f"p-{tenant}"))
    finally:
        engine.dispose()


def _check(url: str, tenant: str | None = None) -> None:
    engine = open_engine(url, tenant=tenant) if tenant else open_engine(url)
    try:
        with engine.connect() as conn:
            check_metrics_privilege(conn)
            conn.rollback()
    finally:
        engine.dispose()


def test_the_app_roles_login_is_refused_with_or_without_a_tenant(
    pg_url: str, app_role: str
) -> None:
    _seed(pg_url)
    owner = open_engine(pg_url)
    enable_rls(owner, app_role=app_role)
    owner.dispose()
    login = member_login_url(pg_url, app_role)
    for tenant in (None, "acme", "globex"):
        with pytest.raises(InvalidInput, match="row-level security narrows role"):
            _check(login, tenant)
    got = run_cli("metrics", "--db", login)
    assert got.exit_code == 2 and got.stdout == ""
    assert got.stderr.startswith("error: metrics read every tenant's rows") and "BYPASSRLS" in (
        got.stderr
    )
    assert got.stderr.count("\n") == 1
    served = run_agora("metrics", "serve", "--port", "1", "--db", login, timeout=60)
    assert served.exit_code == 2 and "BYPASSRLS" in served.stderr  # before it listens
    # What the refusal spares: the app role's untenanted session sees neither tenant's proposal.
    engine = open_engine(login)
    try:
        partial = collect_metrics(engine)
        assert partial.inbox is not None and partial.inbox.pending == ()
    finally:
        engine.dispose()


def test_a_superuser_and_a_bypassrls_login_read_every_tenant(pg_url: str, app_role: str) -> None:
    _seed(pg_url)
    owner = open_engine(pg_url)
    enable_rls(owner, app_role=app_role)
    reader = f"agora_metrics_{secrets.token_hex(4)}"
    with owner.begin() as conn:
        conn.exec_driver_sql(f'CREATE ROLE "{reader}" LOGIN BYPASSRLS')
        conn.exec_driver_sql(f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{reader}"')
    owner.dispose()
    try:
        _check(pg_url)
        url = pg_url.replace("postgres@", f"{reader}@", 1)
        _check(url)
        engine = open_engine(url)
        try:
            snap = collect_metrics(engine)
        finally:
            engine.dispose()
        assert snap.ok, snap.errors
        assert snap.inbox is not None
        assert sorted((c.tenant_ref, c.count) for c in snap.inbox.pending) == [
            ("acme", 1),
            ("globex", 1),
        ]
        got = run_cli("metrics", "--db", url)
        assert got.exit_code == 0, got.stderr
        assert 'tenant="globex"' in got.stdout and 'tenant="acme"' in got.stdout
    finally:
        drop_roles(pg_url, reader)


def test_a_session_tenant_is_refused_before_any_connection(tmp_path: Any) -> None:
    nowhere = f"sqlite:///{tmp_path / 'none.db'}"
    for argv in (("metrics",), ("metrics", "serve")):
        got = run_cli(*argv, "--db", nowhere, env={"AGORA_TENANT": "acme"})
        assert got.exit_code == 2 and "works across tenants" in got.stderr
        assert "--all-tenants" in got.stderr and got.stdout == ""
