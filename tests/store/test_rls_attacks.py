"""Issue 24's attacks on row-level security, replayed as a tenant's runtime login would.

Every attack runs on PostgreSQL as a LOGIN role that is a *member* of the app role (never the
superuser, never `SET ROLE` by the superuser), holding the other tenant's ids, and must now fail
closed: a child row on another tenant's parent (finding 1), an app role that could switch RLS
off (4), frames outliving their thread (5), a table added later and a policy edited by hand (8),
the fold's tables writable by the app role (6); `db rls verify` catches 1, 4, 6 and 8 when they
are re-introduced by hand.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from helpers import drop_roles
from sqlalchemy import func, select, text
from sqlalchemy.exc import DBAPIError

from agora_cli.store._engine import open_engine
from agora_cli.store._errors import InvalidInput
from agora_cli.store._frames import FrameWriter, delete_frames_of_runs
from agora_cli.store._provision import check_agent_tables
from agora_cli.store._rls import (
    POLICY_NAME,
    PROTECTED_TABLES,
    SHARED_TABLES,
    enable_rls,
    rls_status,
)
from agora_cli.store._rls_verify import verify_isolation
from agora_cli.store._schema import (
    action_proposal,
    message,
    queued_message,
    run,
    stream_frame,
    thread,
    token_usage,
    tool_call,
)

TENANTS = ("acme", "globex")


@pytest.fixture
def roles(pg_url: str) -> Iterator[tuple[str, str]]:
    """(app role, a LOGIN that is a member of it): the runtime's login, as deployed."""
    suffix = secrets.token_hex(4)
    app, login = f"agora_app_a_{suffix}", f"agora_rt_a_{suffix}"
    engine = open_engine(pg_url)
    assert enable_rls(engine, app_role=app).role_created
    with engine.begin() as conn:
        conn.exec_driver_sql(f'CREATE ROLE "{login}" LOGIN NOBYPASSRLS IN ROLE "{app}"')
    engine.dispose()
    yield app, login
    drop_roles(pg_url, login, app)


@pytest.fixture
def owner(pg_url: str) -> Iterator[Any]:
    engine = open_engine(pg_url)
    yield engine
    engine.dispose()


@contextmanager
def login_engine(pg_url: str, login: str, tenant: str | None = None) -> Iterator[Any]:
    url = pg_url.replace("postgres@", f"{login}@", 1)
    assert url != pg_url
    engine = open_engine(url, tenant=tenant) if tenant else open_engine(url)
    try:
        yield engine
    finally:
        engine.dispose()


def seed(owner: Any) -> dict[str, dict[str, str]]:
    """A thread, message, run and proposal per tenant, written by the owner."""
    ids: dict[str, dict[str, str]] = {}
    with owner.begin() as conn:
        for n, tenant in enumerate(TENANTS):
            ids[tenant] = {k: f"{tenant}-{k}" for k in ("thread", "message", "run")}
            conn.execute(
                thread.insert().values(
                    id=ids[tenant]["thread"],
                    actor_ref="alice",
                    tenant_ref=tenant,
                    title="",
                    created_at=n,
                    updated_at=n,
                )
            )
            conn.execute(
                message.insert().values(
                    id=ids[tenant]["message"],
                    thread_id=ids[tenant]["thread"],
                    seq=1,
                    role="assistant",
                    content="hi",
                    created_at=n,
                )
            )
            conn.execute(
                run.insert().values(
                    id=ids[tenant]["run"],
                    thread_id=ids[tenant]["thread"],
                    actor_ref="alice",
                    tenant_ref=tenant,
                    status="running",
                    started_at=n,
                )
            )
    return ids


def _error(conn: Any, statement: Any) -> str | None:
    """The first line of the error ``statement`` fails with, or None (in a savepoint)."""
    savepoint = conn.begin_nested()
    try:
        conn.execute(statement)
    except DBAPIError as exc:
        savepoint.rollback()
        return str(exc.orig).splitlines()[0]
    savepoint.rollback()
    return None


def _children(tenant: str, parents: dict[str, str], key: str) -> dict[str, Any]:
    """One row per child table, carrying ``tenant`` (where it can) on the given parents."""
    return {
        "agent_token_usage": token_usage.insert().values(
            id=f"u-{key}",
            thread_id=parents["thread"],
            actor_ref="alice",
            tenant_ref=tenant,
            model_id="m",
            purpose="chat",
            input_tokens=1,
            output_tokens=1,
            created_at=1,
        ),
        "agent_run": run.insert().values(
            id=f"r-{key}",
            thread_id=parents["thread"],
            actor_ref="alice",
            tenant_ref=tenant,
            status="running",
            started_at=1,
        ),
        "agent_action_proposal": action_proposal.insert().values(
            id=f"p-{key}",
            idempotency_key=f"k-{key}",
            tenant_ref=tenant,
            tenant_key=tenant or "",  # the key's namespace: its own tenant's (revision 0008)
            actor_ref="alice",
            thread_id=parents["thread"],
            tool_name="refund",
            input="{}",
            created_at=1,
            updated_at=1,
        ),
        "agent_queued_message": queued_message.insert().values(
            id=f"q-{key}",
            thread_id=parents["thread"],
            actor_ref="alice",
            tenant_ref=tenant,
            content="x",
            created_at=1,
        ),
        "agent_message": message.insert().values(
            id=f"m-{key}",
            thread_id=parents["thread"],
            seq=9,
            role="user",
            content="x",
            created_at=1,
        ),
        "agent_tool_call": tool_call.insert().values(
            id=f"c-{key}",
            message_id=parents["message"],
            tool_name="t",
            tool_type="function",
            status="done",
            created_at=1,
        ),
        "agent_stream_frame": stream_frame.insert().values(
            run_id=parents["run"], seq=99, frame="{}", created_at=1, tenant_ref=tenant
        ),
    }


# --- finding 1: a child row carries its parent's tenant ------------------------------------------


def test_a_tenant_cannot_write_a_row_of_its_own_tenant_on_another_tenants_parent(
    pg_url: str, roles: tuple[str, str], owner: Any
) -> None:
    ids = seed(owner)
    _, login = roles
    ghost = {"thread": "no-such-thread", "message": "no-such-message", "run": "no-such-run"}
    with login_engine(pg_url, login, "acme") as acme, acme.connect() as conn:
        # acme may write each child on its own parents...
        for name, statement in _children("acme", ids["acme"], "own").items():
            assert _error(conn, statement) is None, name
        # ... never on globex's, even naming itself as the tenant; and a parent that does not
        # exist fails with the very same error: it does not tell whether globex's exists
        on_globex = _children("acme", ids["globex"], "x")
        on_nothing = _children("acme", ghost, "x")
        for name in on_globex:
            theirs, nothing = _error(conn, on_globex[name]), _error(conn, on_nothing[name])
            assert theirs is not None and "row-level security" in theirs, (name, theirs)
            assert theirs == nothing, name
        # nor move its own run over to globex's thread
        moved = run.update().where(run.c.id == ids["acme"]["run"])
        moved = moved.values(thread_id=ids["globex"]["thread"])
        assert "row-level security" in (_error(conn, moved) or "")
        conn.rollback()
    with owner.connect() as conn:  # nothing reached globex's thread
        on_theirs = select(func.count()).where(token_usage.c.thread_id == ids["globex"]["thread"])
        assert conn.execute(on_theirs).scalar() == 0
        conn.rollback()


def test_verify_catches_a_write_check_weakened_by_hand(
    pg_url: str, roles: tuple[str, str], owner: Any
) -> None:
    app, _ = roles
    assert verify_isolation(owner, app_role=app).ok
    own = (
        "(tenant_ref = nullif(current_setting('agora.tenant', true), '') OR "
        "(tenant_ref IS NULL AND coalesce(current_setting('agora.tenant', true), '') = ''))"
    )
    with owner.begin() as conn:  # finding 1 again: the write checks only the row's own tenant
        conn.exec_driver_sql(f"ALTER POLICY {POLICY_NAME} ON agent_run WITH CHECK ({own})")
    report = verify_isolation(owner, app_role=app)
    assert report.failed == ["agent_run"]
    [runs] = [t for t in report.tables if t.table == "agent_run"]
    assert runs.parent_blocked is False
    assert "own tenant on tenant B's parent" in (runs.detail or "")
    # the comment (the mark) was kept: status and check compare the live expressions anyway
    with owner.connect() as conn:
        assert rls_status(conn).outdated == ["agent_run"]
        conn.rollback()
    assert [(p.kind, p.table) for p in check_agent_tables(owner)] == [
        ("missing_policy", "agent_run")
    ]
    assert [s.split(" ")[0] for s in enable_rls(owner).sql] == ["ALTER", "DO"]
    assert verify_isolation(owner, app_role=app).ok


# --- finding 4: no app role that could switch row-level security off -----------------------------


def test_an_app_role_that_could_switch_rls_off_is_refused(pg_url: str, owner: Any) -> None:
    suffix = secrets.token_hex(4)
    table_owner, member, creator = (f"agora_{k}_{suffix}" for k in ("own", "mem", "cre"))
    try:
        with owner.begin() as conn:
            for role in (table_owner, member, creator):
                conn.exec_driver_sql(f'CREATE ROLE "{role}" NOLOGIN NOBYPASSRLS')
            conn.exec_driver_sql(f'ALTER TABLE agent_budget OWNER TO "{table_owner}"')
            conn.exec_driver_sql(f'GRANT "{table_owner}" TO "{member}"')
            conn.exec_driver_sql(f'GRANT CREATE ON SCHEMA public TO "{creator}"')
        refusals = {
            table_owner: "owns agent_budget",
            member: f"is a member of '{table_owner}', which owns agent_budget",
            creator: "has CREATE on schema 'public'",
            "postgres": "superuser role",
        }
        for role, why in refusals.items():
            for dry in (True, False):
                with pytest.raises(InvalidInput, match=why):
                    enable_rls(owner, app_role=role, dry_run=dry)
            with pytest.raises(InvalidInput, match=why):
                verify_isolation(owner, app_role=role)
        for dry in (True, False):  # PUBLIC is every role: refused before anything is read
            with pytest.raises(InvalidInput, match="reserved name"):
                enable_rls(owner, app_role="public", dry_run=dry)
        with owner.connect() as conn:  # none of it enabled anything
            assert not rls_status(conn).partial
            conn.rollback()
    finally:
        with owner.begin() as conn:
            conn.exec_driver_sql('ALTER TABLE agent_budget OWNER TO "postgres"')
        drop_roles(pg_url, member, creator, table_owner)


def test_verify_refuses_an_app_role_made_a_member_of_the_owner_by_hand(
    pg_url: str, roles: tuple[str, str], owner: Any
) -> None:
    app, login = roles
    suffix = secrets.token_hex(4)
    table_owner = f"agora_own_{suffix}"
    try:
        with owner.begin() as conn:
            conn.exec_driver_sql(f'CREATE ROLE "{table_owner}" NOLOGIN')
            conn.exec_driver_sql(f'ALTER TABLE agent_thread OWNER TO "{table_owner}"')
            conn.exec_driver_sql(f'GRANT "{table_owner}" TO "{app}"')
        # what the reviewer did as such a role: the owner may switch FORCE off
        with login_engine(pg_url, login) as engine, engine.begin() as conn:
            conn.exec_driver_sql(f'SET LOCAL ROLE "{table_owner}"')
            conn.exec_driver_sql("ALTER TABLE agent_thread NO FORCE ROW LEVEL SECURITY")
            conn.rollback()
        with pytest.raises(InvalidInput, match="which owns agent_thread"):
            verify_isolation(owner, app_role=app)
    finally:
        with owner.begin() as conn:
            conn.exec_driver_sql('ALTER TABLE agent_thread OWNER TO "postgres"')
        drop_roles(pg_url, table_owner)


# --- finding 6: the fold's tables are not the app role's to write ---------------------------------


def test_the_app_role_may_only_read_the_folds_tables_and_verify_flags_a_grant(
    pg_url: str, roles: tuple[str, str], owner: Any
) -> None:
    app, login = roles
    fold_row = text(
        "INSERT INTO agent_usage_fold (day, rows, folded_at, dirty) VALUES (20000, 0, 0, 0)"
    )
    with login_engine(pg_url, login, "acme") as engine, engine.connect() as conn:
        assert "permission denied" in (_error(conn, fold_row) or "")
        conn.rollback()
    assert verify_isolation(owner, app_role=app).problems == []
    with owner.begin() as conn:  # re-introduced by hand
        conn.exec_driver_sql(f'GRANT INSERT, DELETE ON agent_usage_fold TO "{app}"')
    report = verify_isolation(owner, app_role=app)
    assert not report.ok and report.failed == []
    [problem] = report.problems
    assert f"role {app} holds DELETE, INSERT on agent_usage_fold" in problem


# --- finding 8: tables from the live catalog, policies by their expressions ----------------------


def _live_tenant_tables(conn: Any) -> set[str]:
    """Every table of the schema with a tenant column or a foreign key to such a table."""
    tables = {
        str(r[0])
        for r in conn.execute(
            text(
                "SELECT table_name FROM information_schema.columns "
                "WHERE table_schema = current_schema() "
                "AND column_name IN ('tenant_ref', 'tenant_key')"
            )
        )
    }
    while True:
        more = {
            str(r[0])
            for r in conn.execute(
                text(
                    "SELECT c.relname FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid "
                    "JOIN pg_class f ON f.oid = k.confrelid WHERE k.contype = 'f' "
                    "AND f.relname = ANY(CAST(:t AS text[]))"
                ),
                {"t": sorted(tables)},
            )
        } - tables
        if not more:
            return tables
        tables |= more


def _leaks(pg_url: str, login: str, owner: Any) -> dict[str, int]:
    """Per tenant table of the live catalog: globex's rows acme's login reads (0 = isolated)."""
    with owner.connect() as conn:
        tables = sorted(_live_tenant_tables(conn) | set(PROTECTED_TABLES))
        conn.rollback()
    leaks: dict[str, int] = {}
    with login_engine(pg_url, login, "acme") as engine, engine.connect() as conn:
        for name in tables:
            column = "tenant_key" if name in ("agent_usage_daily", "agent_tenant_key") else None
            has = conn.execute(
                text(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = :t "
                    "AND column_name IN ('tenant_ref', 'tenant_key')"
                ),
                {"t": name},
            ).scalar()
            column = column or has
            if column is None:
                continue  # a child without a tenant column: its parent's policy is tested
            savepoint = conn.begin_nested()
            try:
                leaks[name] = int(
                    conn.exec_driver_sql(
                        f"SELECT count(*) FROM {name} WHERE {column} = 'globex'"
                    ).scalar()
                    or 0
                )
            except DBAPIError:
                leaks[name] = 0  # no grant: nothing to read
            savepoint.rollback()
        conn.rollback()
    return leaks


def test_isolation_covers_every_tenant_table_of_the_live_catalog(
    pg_url: str, roles: tuple[str, str], owner: Any
) -> None:
    from agora_cli.store._pg_extras import create_agent_document_tree

    app, login = roles
    with owner.begin() as conn:
        create_agent_document_tree(conn)  # an optional branch: shared, declared so
        conn.exec_driver_sql(
            "INSERT INTO agent_thread (id, actor_ref, tenant_ref, title, created_at, "
            "updated_at) VALUES ('g', 'a', 'globex', '', 0, 0)"
        )
        conn.exec_driver_sql(
            "INSERT INTO agent_run (id, thread_id, actor_ref, tenant_ref, status, started_at) "
            "VALUES ('gr', 'g', 'a', 'globex', 'done', 0)"
        )
    with owner.connect() as conn:
        live = _live_tenant_tables(conn)
        st = rls_status(conn)
        conn.rollback()
    assert live <= set(PROTECTED_TABLES) | set(SHARED_TABLES)
    assert st.unprotected == [] and st.enabled
    assert {t.table for t in st.tables if t.shared} >= {"agent_document", "agent_document_node"}
    assert set(_leaks(pg_url, login, owner).values()) == {0}
    assert verify_isolation(owner, app_role=app).ok

    with owner.begin() as conn:  # a table added later, granted like the others
        conn.exec_driver_sql(
            "CREATE TABLE agent_new_thing (id text PRIMARY KEY, tenant_ref text, secret text)"
        )
        conn.exec_driver_sql(
            "CREATE TABLE agent_new_child (id text PRIMARY KEY, thing_id text "
            "REFERENCES agent_new_thing (id))"
        )
        conn.exec_driver_sql(f'GRANT SELECT ON agent_new_thing, agent_new_child TO "{app}"')
        conn.exec_driver_sql("INSERT INTO agent_new_thing VALUES ('n1', 'globex', 'merger')")
    assert _leaks(pg_url, login, owner)["agent_new_thing"] == 1  # the attack: acme reads it
    with owner.connect() as conn:
        st = rls_status(conn)
        conn.rollback()
    assert st.unprotected == ["agent_new_child", "agent_new_thing"]
    problems = check_agent_tables(owner)
    assert [(p.kind, p.table) for p in problems] == [
        ("missing_policy", "agent_new_child"),
        ("missing_policy", "agent_new_thing"),
    ]
    report = verify_isolation(owner, app_role=app)
    assert report.failed == ["agent_new_child", "agent_new_thing"]


# --- finding 5: frames are their tenant's, whether their run exists or not -----------------------


def test_frames_outlive_no_thread_and_no_other_session_reads_them(
    pg_url: str, roles: tuple[str, str], owner: Any
) -> None:
    ids = seed(owner)
    _, login = roles
    secret = "GLOBEX CONFIDENTIAL: merger with initech"
    with login_engine(pg_url, login, "globex") as globex:
        with FrameWriter(globex, ids["globex"]["run"], autoflush=False, auto_purge=False) as w:
            w.append({"type": "text", "text": secret})
            w.end()
    with owner.connect() as conn:  # the writer filled the frames' tenant from the run
        tenants = conn.execute(select(stream_frame.c.tenant_ref).distinct()).scalars().all()
        assert tenants == ["globex"]
        conn.rollback()
    with owner.begin() as conn:  # the thread goes (its run cascades; frames have no key)
        conn.execute(thread.delete().where(thread.c.id == ids["globex"]["thread"]))
    for tenant in (None, "acme"):
        with login_engine(pg_url, login, tenant) as engine, engine.connect() as conn:
            frames = conn.execute(select(stream_frame.c.frame)).scalars().all()
            assert not any(secret in (f or "") for f in frames), tenant
            assert frames == [], tenant
            conn.rollback()
    with login_engine(pg_url, login, "globex") as engine, engine.begin() as conn:
        # the tenant still sees, and can delete, its own frames
        assert delete_frames_of_runs(conn, [ids["globex"]["run"]]) == 2
    with owner.connect() as conn:
        assert conn.execute(select(func.count()).select_from(stream_frame)).scalar() == 0
        conn.rollback()


def test_enable_replaces_the_old_frames_policy_and_drops_its_helper_function(
    pg_url: str, roles: tuple[str, str], owner: Any
) -> None:
    """Finding 10: `agent_rls_run_absent` was executable by everyone and answered for every
    tenant's runs; upgrading an older agora's database replaces the policy and drops it."""
    app, login = roles
    old = (
        "(EXISTS (SELECT 1 FROM agent_run p WHERE p.id = agent_stream_frame.run_id OFFSET 0) OR "
        "(coalesce(current_setting('agora.tenant', true), '') = '' AND "
        "agent_rls_run_absent(agent_stream_frame.run_id)))"
    )
    with owner.begin() as conn:  # as an agora before issue 24 left it
        conn.exec_driver_sql(
            "CREATE FUNCTION agent_rls_run_absent(p_run_id text) RETURNS boolean LANGUAGE sql "
            "STABLE SECURITY DEFINER AS $$ SELECT NOT EXISTS (SELECT 1 FROM agent_run "
            "WHERE id = p_run_id) $$"
        )
        conn.exec_driver_sql(
            f"ALTER POLICY {POLICY_NAME} ON agent_stream_frame USING ({old}) WITH CHECK ({old})"
        )
    with login_engine(pg_url, login, "acme") as engine, engine.connect() as conn:
        # the oracle: anyone could ask whether another tenant's run exists
        assert conn.execute(text("SELECT agent_rls_run_absent('no-such-run')")).scalar()
        conn.rollback()
    with owner.connect() as conn:
        st = rls_status(conn)
        conn.rollback()
    assert st.function and st.outdated == ["agent_stream_frame"]
    plan = enable_rls(owner)
    assert plan.sql[-1].startswith("DROP FUNCTION IF EXISTS")
    with owner.connect() as conn:
        st = rls_status(conn)
        conn.rollback()
    assert not st.function and st.outdated == []
    with login_engine(pg_url, login, "acme") as engine, engine.connect() as conn:
        assert "does not exist" in (_error(conn, text("SELECT agent_rls_run_absent('x')")) or "")
        conn.rollback()
    assert verify_isolation(owner, app_role=app).ok


def test_a_held_worker_under_a_session_tenant_claims_and_settles_only_its_own(
    pg_url: str, roles: tuple[str, str], owner: Any
) -> None:
    """``ActionProposalStore(hold_connection=True)`` as a tenant's runtime login: the held
    connection keeps SQLAlchemy's transactions so that each carries ``agora.tenant`` (issue 29).
    With globex's work queued first, acme's worker claims acme's only — one at a time and in a
    batch — settles it, and globex's stays queued for globex."""
    from agora_cli.store._proposals import ActionProposalStore, NewProposal, Scope, Settlement

    _, login = roles
    admin = ActionProposalStore(owner)
    ids: dict[str, list[str]] = {}
    for tenant in ("globex", "acme"):  # globex's queued first: the most overdue
        scope = Scope(tenant, "alice", f"{tenant}-held")
        with owner.begin() as conn:
            row = {"id": scope.thread_id, "actor_ref": "alice", "tenant_ref": tenant}
            conn.execute(thread.insert().values(**row, title="", created_at=0, updated_at=0))
        for i in range(3):
            new = NewProposal(scope, "refund", {"n": i}, id=f"{tenant}-held-{i}")
            pid = admin.create(new).proposal.id
            assert admin.decide(pid, scope, "approved", "ops").outcome == "applied"
            ids.setdefault(tenant, []).append(pid)
    with login_engine(pg_url, login, tenant="acme") as engine:
        with ActionProposalStore(engine, hold_connection=True) as store:
            one = store.claim_next("w-acme", 60_000)
            batch = store.claim_next("w-acme", 60_000, limit=10)
            claimed = [one, *batch]
            assert sorted(c.work.id for c in claimed if c.work) == sorted(ids["acme"])
            done = [
                Settlement(c.work.id, c.lease.token, c.lease.generation, "succeeded", {"ok": 1})
                for c in claimed
                if c.work and c.lease
            ]
            assert [r.outcome for r in store.settle_many(done[1:])] == ["settled"] * 2
            first = done[0]
            assert store.settle(first.proposal_id, first.token, first.generation,
                                "succeeded", {"ok": 1}).outcome == "settled"  # fmt: skip
            assert store.claim_next("w-acme", 60_000).outcome == "none"
    with owner.connect() as conn:
        states = dict(
            conn.execute(select(action_proposal.c.id, action_proposal.c.execution_state)).all()
        )
    assert [states[i] for i in ids["acme"]] == ["succeeded"] * 3
    assert [states[i] for i in ids["globex"]] == ["queued"] * 3
