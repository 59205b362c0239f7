"""Idempotency keys unique per tenant (issue 24, finding 10; revision 0008).

The same key under two tenants gives two proposals, under one tenant ``existing``; no outcome
or error tells one tenant of another's key or row. An old database (0007: the global
``agent_action_proposal_idempotency_uq``) upgrades to the per-tenant index with its rows
backfilled, and provisioning gives a fresh and an old database the same shape.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError

from agora_cli.store._engine import open_engine
from agora_cli.store._errors import Conflict
from agora_cli.store._live_schema import read_catalog
from agora_cli.store._migrate import current_revision, upgrade
from agora_cli.store._proposals import NewProposal, Scope, create_proposal
from agora_cli.store._provision import check_agent_tables, ensure_agent_tables
from agora_cli.store._rls import enable_rls
from agora_cli.store._schema import action_proposal, metadata, thread

OLD, NEW = "agent_action_proposal_idempotency_uq", "agent_action_proposal_tenant_idempotency_uq"
TABLE = "agent_action_proposal"


def _threads(engine: Any) -> None:
    with engine.begin() as conn:
        for tenant in ("acme", "globex", None):
            conn.execute(
                thread.insert().values(
                    id=f"{tenant or 'none'}-t",
                    actor_ref="alice",
                    tenant_ref=tenant,
                    title="",
                    created_at=1,
                    updated_at=1,
                )
            )


def _new(tenant: str | None, run: str = "run-1", **kw: Any) -> NewProposal:
    scope = Scope(tenant, "alice", f"{tenant or 'none'}-t")
    kw.setdefault("idempotency_key", "refund-order-7")
    return NewProposal(scope, "refund", {"order": 7}, run_id=run, tool_call_id="c1", **kw)


def _indexes(engine: Any) -> set[str]:
    with engine.connect() as conn:
        return set(read_catalog(conn).indexes[TABLE])


def test_the_same_key_under_two_tenants_gives_two_proposals(engine: Any) -> None:
    _threads(engine)
    with engine.begin() as conn:
        acme = create_proposal(conn, _new("acme", "run-a"))
        globex = create_proposal(conn, _new("globex", "run-g"))
        none = create_proposal(conn, _new(None, "run-n"))
        again = create_proposal(conn, _new("acme", "run-a"))
        other = create_proposal(conn, _new("acme", "run-b"))  # same key, another content
        twice = create_proposal(conn, _new(None, "run-n"))
    assert [r.outcome for r in (acme, globex, none)] == ["created"] * 3
    assert again.outcome == "existing" and again.proposal.id == acme.proposal.id
    assert other.outcome == "conflict" and other.proposal.tenant_ref == "acme"
    assert twice.outcome == "existing" and twice.proposal.id == none.proposal.id
    with engine.connect() as conn:
        keys = conn.execute(
            select(action_proposal.c.tenant_key, action_proposal.c.tenant_ref).order_by(
                action_proposal.c.tenant_key
            )
        ).all()
    assert keys == [("", None), ("acme", "acme"), ("globex", "globex")]


def test_two_untenanted_proposals_never_share_a_key(engine: Any) -> None:
    _threads(engine)
    row = {c.name: None for c in action_proposal.columns if c.name not in ("id", "tenant_key")}
    row |= dict(
        idempotency_key="k", actor_ref="a", thread_id="none-t", tool_name="t", input="{}",
        decision="pending",
        generation=0, attempts=0, version=0, created_at=1, updated_at=1,
    )  # fmt: skip
    with engine.begin() as conn:
        conn.execute(action_proposal.insert().values(**row, id="p1"))
    with pytest.raises(Exception, match=r"(?i)unique|duplicate"), engine.begin() as conn:
        conn.execute(action_proposal.insert().values(**row, id="p2"))


def test_an_id_of_another_tenant_is_a_clean_conflict(engine: Any) -> None:
    _threads(engine)
    with engine.begin() as conn:
        create_proposal(conn, _new("globex", "run-g", idempotency_key="globex-secret"))
    # acme derives the same id (globex's run and call) under a key of its own
    with pytest.raises(Conflict) as err, engine.begin() as conn:
        create_proposal(conn, _new("acme", "run-g", idempotency_key="mine"))
    assert "globex" not in str(err.value) and "secret" not in str(err.value)
    assert "cannot be used" in str(err.value)


def _make_old(url: str) -> Any:
    """A database at revision 0007, as 0007 left it: the global index, no ``tenant_key``."""
    engine = open_engine(url)
    upgrade(engine, "0007")
    mysql = engine.dialect.name == "mysql"
    with engine.begin() as conn:
        conn.exec_driver_sql(f"DROP INDEX {NEW} ON {TABLE}" if mysql else f"DROP INDEX {NEW}")
        conn.exec_driver_sql(f"ALTER TABLE {TABLE} DROP COLUMN tenant_key")
        conn.exec_driver_sql(f"CREATE UNIQUE INDEX {OLD} ON {TABLE} (idempotency_key)")
    return engine


def _old_rows(engine: Any, n: int) -> None:
    _threads(engine)
    with engine.begin() as conn:
        for i in range(n):
            tenant = ("acme", "globex", None)[i % 3]
            conn.execute(
                text(
                    f"INSERT INTO {TABLE} (id, idempotency_key, tenant_ref, actor_ref, thread_id,"
                    " tool_name, input, decision, generation, attempts, version, created_at,"
                    " updated_at) VALUES (:id, :k, :t, 'alice', :th, 'refund', '{}', 'pending',"
                    " 0, 0, 0, 1, 1)"
                ),
                {"id": f"old-{i}", "k": f"key-{i}", "t": tenant, "th": f"{tenant or 'none'}-t"},
            )


def test_upgrade_0007_to_0008_backfills_and_retires_the_global_index(empty_url: str) -> None:
    engine = _make_old(empty_url)
    _old_rows(engine, 2500)  # more than one backfill batch
    problems = {(p.kind, p.detail.split(" ")[1]) for p in check_agent_tables(engine)}
    assert ("retired_index", OLD) in problems and ("missing_index", NEW) in problems
    assert ("missing_index", OLD) not in problems
    result = upgrade(engine, "0008")  # revision 0009 (issue 28) came after
    assert result.applied == ["0008"]
    assert check_agent_tables(engine) == []
    assert OLD not in _indexes(engine) and NEW in _indexes(engine)
    with engine.connect() as conn:
        assert current_revision(conn) == "0008"
        pairs = conn.execute(
            select(action_proposal.c.tenant_ref, action_proposal.c.tenant_key)
        ).all()
    assert len(pairs) == 2500 and all((t or "") == k for t, k in pairs)
    with engine.begin() as conn:  # an old tenanted row is found by its tenant, under its key
        old = create_proposal(conn, _new("acme", "run-x", id="old-0", idempotency_key="key-0"))
        assert old.outcome == "conflict" and old.proposal.id == "old-0"  # other content
        same = create_proposal(conn, _new("globex", "run-y", idempotency_key="key-0"))
        assert same.outcome == "created"
    engine.dispose()


def test_provision_gives_a_fresh_and_an_old_database_the_same_shape(
    empty_url: str, dialect: str, databases: Any
) -> None:
    old = _make_old(empty_url)
    _old_rows(old, 3)
    dry = ensure_agent_tables(old, dry_run=True)
    assert [s.split(" ")[0] for s in dry.sql] == ["ALTER", "CREATE", "UPDATE", "DROP"]
    report = ensure_agent_tables(old)
    assert report.dropped_indexes == [OLD] and report.created_indexes == [NEW]
    assert ensure_agent_tables(old).already_current
    fresh = open_engine(databases.new(dialect))
    ensure_agent_tables(fresh)
    with old.connect() as a, fresh.connect() as b:
        cat_old, cat_new = read_catalog(a, full=True), read_catalog(b, full=True)
    tables = set(metadata.tables)  # not agent_alembic_version: only the old one was migrated
    old_idx, new_idx = ({t: c.indexes.get(t) for t in tables} for c in (cat_old, cat_new))
    assert old_idx == new_idx
    assert cat_old.columns[TABLE] == cat_new.columns[TABLE]
    assert cat_old.column_types[TABLE]["tenant_key"] == cat_new.column_types[TABLE]["tenant_key"]
    assert check_agent_tables(old) == [] == check_agent_tables(fresh)
    old.dispose()
    fresh.dispose()


def test_a_tenant_login_creating_another_tenants_key_learns_nothing(databases: Any) -> None:
    """On PostgreSQL, as a LOGIN that is a member of the app role, holding globex's key."""
    databases.require("postgresql")
    url = str(databases.new("postgresql"))
    owner = open_engine(url)
    ensure_agent_tables(owner)
    _threads(owner)
    with owner.begin() as conn:
        create_proposal(conn, _new("globex", "run-g", idempotency_key="globex-key"))
    suffix = secrets.token_hex(4)
    app, login = f"agora_app_k_{suffix}", f"agora_rt_k_{suffix}"
    enable_rls(owner, app_role=app)
    with owner.begin() as conn:
        conn.exec_driver_sql(f'CREATE ROLE "{login}" LOGIN NOBYPASSRLS IN ROLE "{app}"')
    acme = open_engine(url.replace("postgres@", f"{login}@", 1), tenant="acme")
    try:
        with acme.begin() as conn:
            made = create_proposal(conn, _new("acme", "run-a", idempotency_key="globex-key"))
        assert made.outcome == "created" and made.proposal.tenant_ref == "acme"
        with pytest.raises(Conflict) as err, acme.begin() as conn:
            create_proposal(conn, _new("acme", "run-g", idempotency_key="other"))
        assert "globex" not in str(err.value)
        with acme.connect() as conn:
            seen = conn.execute(select(action_proposal.c.tenant_ref)).scalars().all()
        assert seen == ["acme"]
        # Raw SQL under globex's tenant_key (acme's tenant_ref) is refused by the policy, the
        # same way whether globex uses the key or not: no duplicate-key oracle.
        errors = []
        for key in ("globex-key", "never-used"):
            with pytest.raises(DBAPIError) as raw, acme.begin() as conn:
                conn.execute(
                    action_proposal.insert().values(
                        id=f"raw-{key}", idempotency_key=key, tenant_ref="acme",
                        tenant_key="globex", actor_ref="a", thread_id="acme-t",
                        tool_name="refund", input="{}", created_at=1, updated_at=1,
                    )
                )  # fmt: skip
            errors.append(str(raw.value.orig).split("\n")[0].replace(key, "<key>"))
        assert errors[0] == errors[1] and "row-level security" in errors[0]
    finally:
        acme.dispose()
        with owner.begin() as conn:
            for role in (login, app):
                conn.exec_driver_sql(f'DROP OWNED BY "{role}"')
                conn.exec_driver_sql(f'DROP ROLE "{role}"')
        owner.dispose()
