"""Row-level security on a real PostgreSQL, under a real NOBYPASSRLS app role.

Every test gets its own database, provisioned, with `enable_rls(app_role=…)`; the role is created
for that database and dropped afterwards (roles are cluster-wide). For every protected table:
tenant A cannot read, update, delete or insert B's rows; untenanted rows are visible only while
`agora.tenant` is unset; the policy keeps the tenant indexes in use (EXPLAIN); `rls verify` passes
on a fresh schema and names the table whose policy was dropped by hand.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from helpers import member_login_url
from sqlalchemy import BigInteger, Double, Integer, and_, func, select, text, update
from sqlalchemy.exc import DBAPIError

from agora_cli.store._engine import open_engine
from agora_cli.store._provision import check_agent_tables
from agora_cli.store._rls import (
    POLICY_NAME,
    PROTECTED_TABLES,
    READ_ONLY_TABLES,
    THREAD_TENANT_INDEX,
    disable_rls,
    enable_rls,
    rls_status,
)
from agora_cli.store._rls_verify import verify_isolation
from agora_cli.store._schema import metadata
from agora_cli.store._tenant_session import tenant_session

TABLES = {t.name: t for t in metadata.sorted_tables}
TENANTS = ("acme", "globex", None)  # None: an untenanted row
PARENT = {
    "agent_message": ("thread_id", "agent_thread"),
    "agent_genui_call": ("thread_id", "agent_thread"),
    "agent_confirm_token": ("thread_id", "agent_thread"),
    "agent_queued_message": ("thread_id", "agent_thread"),
    "agent_token_usage": ("thread_id", "agent_thread"),
    "agent_run": ("thread_id", "agent_thread"),
    "agent_action_proposal": ("thread_id", "agent_thread"),
    "agent_action_proposal_event": ("proposal_id", "agent_action_proposal"),
    "agent_tool_call": ("message_id", "agent_message"),
    "agent_stream_frame": ("run_id", "agent_run"),
}


@pytest.fixture
def rls(pg_url: str, app_role: str) -> Iterator[Any]:
    engine = open_engine(pg_url)
    plan = enable_rls(engine, app_role=app_role)
    assert plan.role_created
    yield engine
    engine.dispose()


def _row(
    table: Any, key: str, tenant: str | None, parents: dict[str, Any], n: int
) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for column in table.columns:
        if (column.nullable or column.server_default is not None) and not column.primary_key:
            continue
        if isinstance(column.type, Integer | BigInteger):
            row[column.name] = n
        elif isinstance(column.type, Double):
            row[column.name] = 0.0
        else:
            row[column.name] = f"{key}-{table.name}-{column.name}"
    if "tenant_ref" in table.columns:
        row["tenant_ref"] = tenant
    if "tenant_key" in table.columns:  # the daily fold, tenant keys
        row["tenant_key"] = tenant or ""
    if table.name in PARENT:
        column, parent = PARENT[table.name]
        row[column] = parents[parent]["id"]
    return row


def seed(engine: Any) -> dict[str | None, dict[str, dict[str, Any]]]:
    """One row per protected table for acme, globex and no tenant, written as the owner."""
    rows: dict[str | None, dict[str, dict[str, Any]]] = {}
    with engine.begin() as conn:
        for n, tenant in enumerate(TENANTS, start=1):
            key = tenant or "none"
            rows[tenant] = {}
            for name in PROTECTED_TABLES:
                row = _row(TABLES[name], key, tenant, rows[tenant], n)
                conn.execute(TABLES[name].insert().values(**row))
                rows[tenant][name] = row
    return rows


def pk(table: Any, row: dict[str, Any]) -> Any:
    return and_(*(c == row[c.name] for c in table.primary_key.columns))


def pk_value(table: Any, row: Any) -> tuple[Any, ...]:
    return tuple(row[c.name] for c in table.primary_key.columns)


@contextmanager
def as_app(engine: Any, role: str, tenant: str | None) -> Iterator[Any]:
    """A transaction as the app role, scoped by the library's tenant_session; rolled back."""
    with engine.connect() as conn:
        conn.exec_driver_sql(f'SET LOCAL ROLE "{role}"')
        with tenant_session(conn, tenant):
            yield conn
        conn.rollback()


def visible(conn: Any, table: Any) -> set[tuple[Any, ...]]:
    return {pk_value(table, r) for r in conn.execute(select(table)).mappings()}


def _fails(conn: Any, statement: Any, reason: str) -> bool:
    """Whether ``statement`` fails, for ``reason`` only (in a savepoint, so the test goes on)."""
    savepoint = conn.begin_nested()
    try:
        conn.execute(statement)
    except DBAPIError as exc:
        savepoint.rollback()
        assert reason in str(exc.orig), exc
        return True
    savepoint.rollback()
    return False


def refused(conn: Any, statement: Any) -> bool:
    """Whether the policy refuses ``statement``."""
    return _fails(conn, statement, "row-level security")


def denied(conn: Any, statement: Any) -> bool:
    """Whether the app role lacks the grant for ``statement`` (a table it may only read)."""
    return _fails(conn, statement, "permission denied")


@pytest.mark.parametrize("name", PROTECTED_TABLES)
def test_a_tenant_cannot_read_update_delete_or_insert_another_tenants_rows(
    rls: Any, app_role: str, name: str
) -> None:
    rows = seed(rls)
    table = TABLES[name]
    mine, theirs = rows["acme"][name], rows["globex"][name]
    with as_app(rls, app_role, "acme") as conn:
        assert visible(conn, table) == {pk_value(table, mine)}
        first = next(c for c in table.columns if not c.primary_key)
        if name in READ_ONLY_TABLES:  # tenant keys: the runtime reads its own, writes none
            intruder = _row(table, "intruder", "globex", rows["globex"], 99)
            for statement in (
                update(table).where(pk(table, theirs)).values({first: first}),
                update(table).where(pk(table, mine)).values({first: first}),
                table.delete().where(pk(table, theirs)),
                table.insert().values(**intruder),
            ):
                assert denied(conn, statement)
            return
        assert (
            conn.execute(update(table).where(pk(table, theirs)).values({first: first})).rowcount
            == 0
        )
        assert conn.execute(table.delete().where(pk(table, theirs))).rowcount == 0
        intruder = _row(table, "intruder", "globex", rows["globex"], 99)
        assert refused(conn, table.insert().values(**intruder))
        # nor can it move its own row over to the other tenant
        if "tenant_ref" in table.columns:
            moved = {"tenant_ref": "globex"}
        elif name == "agent_usage_daily":
            moved = {"tenant_key": "globex"}
        else:
            column, parent = PARENT[name]
            moved = {column: rows["globex"][parent]["id"]}
        assert refused(conn, update(table).where(pk(table, mine)).values(**moved))
        # and its own row stays writable
        assert (
            conn.execute(update(table).where(pk(table, mine)).values({first: first})).rowcount == 1
        )
    with rls.connect() as conn:  # the owner (a superuser here) sees that nothing changed
        assert conn.execute(select(table).where(pk(table, theirs))).mappings().one() is not None
        assert conn.execute(select(func.count()).select_from(table)).scalar() == 3
        conn.rollback()


@pytest.mark.parametrize("name", PROTECTED_TABLES)
def test_untenanted_rows_are_visible_only_while_the_setting_is_unset(
    rls: Any, app_role: str, name: str
) -> None:
    rows = seed(rls)
    table = TABLES[name]
    untenanted = pk_value(table, rows[None][name])
    with as_app(rls, app_role, None) as conn:
        assert visible(conn, table) == {untenanted}
        intruder = _row(table, "intruder", "acme", rows["acme"], 99)
        own = _row(table, "fresh", None, rows[None], 98)
        if name in READ_ONLY_TABLES:
            assert denied(conn, table.insert().values(**intruder))
        else:
            assert refused(conn, table.insert().values(**intruder))
            conn.execute(table.insert().values(**own))  # untenanted sessions write untenanted
    with as_app(rls, app_role, "acme") as conn:
        assert untenanted not in visible(conn, table)
    with as_app(rls, app_role, "") as conn:  # empty is unset
        assert visible(conn, table) == {untenanted}


def test_frames_of_a_run_without_a_run_row_are_visible_to_no_app_session(
    rls: Any, app_role: str
) -> None:
    seed(rls)
    frames = TABLES["agent_stream_frame"]
    with rls.begin() as conn:  # an untenanted frame whose run is gone (written before 0007)
        conn.execute(frames.insert().values(run_id="ghost", seq=1, frame="{}", created_at=1))
    with as_app(rls, app_role, None) as conn:
        runs = {r for (r, _) in visible(conn, frames)}
        assert runs == {"none-agent_run-id"}  # never globex's, acme's, nor the orphan
    with as_app(rls, app_role, "acme") as conn:
        assert {r for (r, _) in visible(conn, frames)} == {"acme-agent_run-id"}
    with rls.connect() as conn:  # the owner (it bypasses RLS here) sees it, and purges it
        assert conn.execute(select(func.count()).select_from(frames)).scalar() == 4
        conn.rollback()


def _plan(conn: Any, sql: str) -> str:
    return "\n".join(r[0] for r in conn.exec_driver_sql("EXPLAIN " + sql))


def test_the_policy_keeps_the_tenant_indexes_in_use(rls: Any, app_role: str) -> None:
    with rls.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO agent_thread (id, actor_ref, tenant_ref, title, created_at, updated_at) "
            "SELECT 't' || g, 'actor' || mod(g, 20), 'tenant' || mod(g, 50), '', g, g "
            "FROM generate_series(1, 5000) g"
        )
        conn.exec_driver_sql(
            "INSERT INTO agent_token_usage (id, thread_id, actor_ref, tenant_ref, model_id, "
            "purpose, input_tokens, output_tokens, created_at) "
            "SELECT 'u' || g, 't' || (1 + mod(g, 5000)), 'actor', 'tenant' || mod(g, 50), 'm', "
            "'chat', 1, 1, g FROM generate_series(1, 20000) g"
        )
        conn.exec_driver_sql("ANALYZE agent_thread")
        conn.exec_driver_sql("ANALYZE agent_token_usage")
    with as_app(rls, app_role, "tenant7") as conn:
        # The policy's own condition is an index condition: no user filter on the tenant at all.
        ledger = _plan(conn, "SELECT sum(input_tokens) FROM agent_token_usage")
        assert "agent_token_usage_tenant_created_idx" in ledger, ledger
        assert "Index Cond: ((tenant_ref)::text = NULLIF(current_setting(" in ledger, ledger
        month = _plan(
            conn,
            "SELECT sum(input_tokens) FROM agent_token_usage WHERE tenant_ref = 'tenant7' "
            "AND created_at >= 100 AND created_at < 10000",
        )
        assert "agent_token_usage_tenant_created_idx" in month, month
        threads = _plan(conn, "SELECT id FROM agent_thread WHERE actor_ref = 'actor3'")
        assert "agent_thread_tenant_actor_idx" in threads, threads
        assert "Seq Scan" not in ledger + month + threads
        total = conn.execute(text("SELECT count(*) FROM agent_token_usage")).scalar()
        assert total == 400  # and the rows are exactly tenant7's


def test_verify_passes_on_a_fresh_schema_and_leaves_nothing(rls: Any, app_role: str) -> None:
    report = verify_isolation(rls)
    assert report.ok, [(t.table, t.detail) for t in report.tables if not t.ok]
    assert report.temporary_role
    assert [t.table for t in report.tables] == list(PROTECTED_TABLES)
    named = verify_isolation(rls, app_role=app_role)
    assert named.ok and named.role == app_role
    with rls.connect() as conn:
        for name in PROTECTED_TABLES:
            assert conn.execute(select(func.count()).select_from(TABLES[name])).scalar() == 0
        gone = conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": report.role})
        assert gone.first() is None  # the throw-away role was rolled back with the rest
        conn.rollback()


def test_verify_fails_without_rls_on_every_table(pg_url: str) -> None:
    engine = open_engine(pg_url)
    report = verify_isolation(engine)
    engine.dispose()
    assert not report.ok
    assert report.failed == list(PROTECTED_TABLES)
    assert all(not t.hides_other for t in report.tables)


def test_a_policy_dropped_by_hand_is_named_by_verify_and_check(rls: Any) -> None:
    assert check_agent_tables(rls) == []
    with rls.begin() as conn:
        conn.exec_driver_sql(f"DROP POLICY {POLICY_NAME} ON agent_tool_call")
    report = verify_isolation(rls)
    assert report.failed == ["agent_tool_call"]
    problems = check_agent_tables(rls)
    assert [(p.kind, p.table) for p in problems] == [("missing_policy", "agent_tool_call")]
    repair = enable_rls(rls)
    assert len(repair.sql) == 2
    assert repair.sql[0].startswith(f'CREATE POLICY {POLICY_NAME} ON "agent_tool_call"')
    assert repair.sql[1].startswith(f"DO $agora$BEGIN EXECUTE 'COMMENT ON POLICY {POLICY_NAME}")
    assert "quote_ident('agent_tool_call')" in repair.sql[1]
    assert verify_isolation(rls).ok
    assert check_agent_tables(rls) == []


def test_enable_is_idempotent_and_disable_removes_exactly_it(rls: Any, app_role: str) -> None:
    again = enable_rls(rls, app_role=app_role)
    assert again.sql == [] and not again.role_created
    with rls.connect() as conn:
        st = rls_status(conn)
        conn.rollback()
    assert st.enabled and st.role_kind == "superuser" and st.bypasses_rls
    assert {t.table for t in st.tables if t.policy} == set(PROTECTED_TABLES)
    dry = disable_rls(rls, app_role=app_role, drop_role=True, dry_run=True)
    assert dry.sql[-2] == f'DROP ROLE "{app_role}"'
    assert dry.sql[-1] == f'DROP INDEX CONCURRENTLY IF EXISTS "public"."{THREAD_TENANT_INDEX}"'
    with rls.connect() as conn:
        assert rls_status(conn).enabled  # a dry run changes nothing
        conn.rollback()
    done = disable_rls(rls, app_role=app_role, drop_role=True)
    assert done.role_dropped
    with rls.connect() as conn:
        st = rls_status(conn)
        roles = conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": app_role})
        assert roles.first() is None
        conn.rollback()
    assert not st.enabled and not st.partial and not st.function
    assert not any(t.enabled or t.forced or t.policy for t in st.tables)
    assert _index_valid(rls) is None  # the index enable built is gone too
    assert disable_rls(rls).sql == []


def _index_valid(engine: Any) -> bool | None:
    with engine.connect() as conn:
        valid = conn.execute(
            text(
                "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                "WHERE c.relname = :n"
            ),
            {"n": THREAD_TENANT_INDEX},
        ).scalar()
        conn.rollback()
    return None if valid is None else bool(valid)


def test_enable_builds_the_thread_tenant_index_and_a_thread_read_uses_it(
    rls: Any, app_role: str
) -> None:
    assert _index_valid(rls) is True
    with rls.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO agent_thread (id, actor_ref, tenant_ref, title, created_at, updated_at) "
            "SELECT 't' || g, 'actor', 'tenant' || mod(g, 5), '', g, g "
            "FROM generate_series(1, 200) g"
        )
        conn.exec_driver_sql(
            "INSERT INTO agent_token_usage (id, thread_id, actor_ref, tenant_ref, model_id, "
            "purpose, input_tokens, output_tokens, created_at) "
            "SELECT 'u' || g, 't' || (1 + mod(g, 200)), 'actor', "
            "'tenant' || mod(1 + mod(g, 200), 5), 'm', 'chat', 1, 1, g "
            "FROM generate_series(1, 40000) g"
        )
        conn.exec_driver_sql("ANALYZE agent_token_usage")
    with as_app(rls, app_role, "tenant2") as conn:
        # What `threads show` asks of the ledger: one thread's rows, the policy adding the tenant.
        plan = _plan(conn, "SELECT * FROM agent_token_usage WHERE thread_id = 't7'")
        assert THREAD_TENANT_INDEX in plan, plan
        # The policy's untenanted branch may add a probe of the (empty) NULL range; never the
        # tenant's whole range: no index condition on the tenant's value alone.
        alone = "Index Cond: ((tenant_ref)::text = NULLIF"
        assert alone not in plan, plan
        assert (
            conn.execute(
                text("SELECT count(*) FROM agent_token_usage WHERE thread_id = 't7'")
            ).scalar()
            == 200
        )


def test_enable_rebuilds_an_index_a_failed_concurrent_build_left_invalid(rls: Any) -> None:
    with rls.begin() as conn:  # what an interrupted CREATE INDEX CONCURRENTLY leaves behind
        conn.exec_driver_sql(
            "UPDATE pg_index SET indisvalid = false WHERE indexrelid = "
            f"'{THREAD_TENANT_INDEX}'::regclass"
        )
    assert _index_valid(rls) is False
    plan = enable_rls(rls)
    assert plan.sql == [
        f'DROP INDEX CONCURRENTLY IF EXISTS "public"."{THREAD_TENANT_INDEX}"',
        f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{THREAD_TENANT_INDEX}" '
        'ON "agent_token_usage" (thread_id, tenant_ref)',
    ]
    assert _index_valid(rls) is True
    assert enable_rls(rls).sql == []


def test_an_app_role_that_bypasses_rls_is_refused(rls: Any) -> None:
    from agora_cli.store._errors import InvalidInput

    with pytest.raises(InvalidInput, match="bypasses row-level security"):
        enable_rls(rls, app_role="postgres")
    with pytest.raises(InvalidInput, match="not a usable role name"):
        enable_rls(rls, app_role="bad;name")


def test_open_engine_tenant_sets_the_setting_per_transaction(
    rls: Any, pg_url: str, app_role: str
) -> None:
    seed(rls)
    as_role = member_login_url(pg_url, app_role)
    scoped = open_engine(as_role, tenant="acme")
    plain = open_engine(as_role)
    try:
        for _ in range(2):  # every transaction, not just the first
            with scoped.begin() as conn:
                setting = conn.execute(text("SELECT current_setting('agora.tenant', true)"))
                assert setting.scalar() == "acme"
                assert conn.execute(select(TABLES["agent_thread"].c.id)).scalars().all() == [
                    "acme-agent_thread-id"
                ]
        with plain.begin() as conn:  # the same pooled server, another engine: nothing carried
            ids = conn.execute(select(TABLES["agent_thread"].c.id)).scalars().all()
            assert ids == ["none-agent_thread-id"]
    finally:
        scoped.dispose()
        plain.dispose()


def test_tenant_session_nests_and_ends_with_the_transaction(rls: Any) -> None:
    with rls.connect() as conn:
        with tenant_session(conn, "acme"):
            with tenant_session(conn, "globex"):
                now = conn.execute(text("SELECT current_setting('agora.tenant', true)")).scalar()
                assert now == "globex"
            assert conn.execute(text("SELECT current_setting('agora.tenant')")).scalar() == "acme"
        conn.commit()
        # SET LOCAL: gone with the transaction
        after = conn.execute(text("SELECT coalesce(current_setting('agora.tenant', true), '')"))
        assert after.scalar() == ""
        conn.rollback()


def test_a_tenant_sessions_report_by_model_never_reads_the_cross_tenant_rollup(
    rls: Any, app_role: str
) -> None:
    from datetime import date

    from agora_cli.store._clock import DAY_MS, ManualClock, parse_instant
    from agora_cli.store._fold import create_rollup, fold
    from agora_cli.store._ledger import spend
    from agora_cli.store._schema import thread, token_usage, usage_model_daily

    t0 = parse_instant("2026-03-01T00:00:00Z")
    with rls.begin() as conn:
        for tenant in ("acme", "globex"):
            conn.execute(
                thread.insert().values(
                    id=f"t-{tenant}",
                    actor_ref="a",
                    tenant_ref=tenant,
                    title="",
                    created_at=0,
                    updated_at=0,
                )
            )
        conn.execute(
            token_usage.insert(),
            [
                {
                    "id": f"u{n}",
                    "thread_id": f"t-{tenant}",
                    "actor_ref": "a",
                    "tenant_ref": tenant,
                    "model_id": "m1",
                    "purpose": "chat",
                    "input_tokens": 10 if tenant == "acme" else 1_000,
                    "output_tokens": 1,
                    "cost_usd": 0.5,
                    "cost_source": "estimate",
                    "created_at": t0 + n * DAY_MS // 2,
                }
                for n, tenant in enumerate(["acme", "globex"] * 4)
            ],
        )
    with rls.begin() as conn:  # agora db upgrade rollup@head, after rls enable
        create_rollup(conn)
    fold(rls, clock=ManualClock(t0 + 10 * DAY_MS))  # as the owner, who bypasses RLS
    with rls.connect() as conn:
        assert conn.execute(select(func.count()).select_from(usage_model_daily)).scalar() == 4
        conn.rollback()
    window = {"by": "model", "from_day": date(2026, 3, 1), "to_day": date(2026, 3, 4)}
    with as_app(rls, app_role, "acme") as conn:
        savepoint = conn.begin_nested()
        with pytest.raises(DBAPIError, match="permission"):
            conn.execute(select(usage_model_daily))  # the app role has no grant on it
        savepoint.rollback()
    with as_app(rls, app_role, "acme") as conn:
        folded = spend(conn, **window)  # the daily fold, under the policy: acme's rows only
        raw = spend(conn, **window, raw=True)
    assert folded.folded_days == 4
    assert [(r.key, r.turns, r.input_tokens) for r in folded.rows] == [("m1", 4, 40)]
    assert [(r.key, r.turns, r.input_tokens) for r in raw.rows] == [("m1", 4, 40)]
    with rls.connect() as conn:  # the owner reads the rollup: every tenant
        assert spend(conn, **window).total.input_tokens == 4_040
        conn.rollback()


# --- rows with no tenant_ref: the thread's tenant's (the upstream runtime's ledger) --------------

NOW = 1_773_144_000_000  # 2026-03-10T12:00:00Z: write_upstream's rows all fall on that UTC day
OLD_DIRECT = (
    "(tenant_ref = nullif(current_setting('agora.tenant', true), '') OR (tenant_ref IS NULL AND "
    "coalesce(current_setting('agora.tenant', true), '') = ''))"
)
# What agora installed before issue 23, on the tables whose NULL tenant_ref is now the thread's.
OLD_EXPRESSIONS = {
    "agent_token_usage": OLD_DIRECT,
    "agent_run": OLD_DIRECT,
    "agent_action_proposal": OLD_DIRECT,
    "agent_queued_message": (
        f"({OLD_DIRECT} AND EXISTS (SELECT 1 FROM agent_thread p "
        "WHERE p.id = agent_queued_message.thread_id OFFSET 0))"
    ),
}


def _ledger_seen(conn: Any) -> tuple[int, int, set[str]]:
    """(turns, tokens, thread ids) of the ledger as ``spend`` and a plain read see it."""
    from datetime import date

    from agora_cli.store._ledger import spend

    day = date(2026, 3, 10)
    report = spend(conn, by="model", from_day=day, to_day=day, raw=True)
    usage = TABLES["agent_token_usage"]
    threads = set(conn.execute(select(usage.c.thread_id).distinct()).scalars())
    total = report.total
    return total.turns, total.input_tokens + total.output_tokens, threads


def test_upstream_ledger_rows_are_seen_by_their_threads_tenant_only(
    rls: Any, app_role: str
) -> None:
    from upstream import write_upstream

    up = write_upstream(rls, now=NOW)
    turns = {
        tenant: sum(1 for t in up.turns if t.tenant == tenant) for tenant in ("acme", "globex")
    }
    assert turns["acme"] and turns["globex"]  # the fixture has both, with no tenant_ref
    with rls.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM agent_token_usage")).scalar() == len(
            up.turns
        )
        nulls = "SELECT count(*) FROM agent_token_usage WHERE tenant_ref IS NOT NULL"
        assert conn.execute(text(nulls)).scalar() == 0
        conn.rollback()
    for tenant, name in (("acme", "acme"), ("globex", "globex"), (None, "none")):
        with as_app(rls, app_role, tenant) as conn:
            seen = _ledger_seen(conn)
        expected_turns = sum(1 for t in up.turns if t.tenant == tenant)
        assert seen == (expected_turns, up.tenant_tokens(tenant), {up.threads[name]}), tenant
    # and the runs (upstream writes their tenant_ref itself) follow the same rule
    with as_app(rls, app_role, "acme") as conn:
        runs = set(conn.execute(select(TABLES["agent_run"].c.thread_id)).scalars())
        assert runs == {up.threads["acme"]}


@pytest.mark.parametrize(
    "name", ["agent_token_usage", "agent_run", "agent_queued_message", "agent_action_proposal"]
)
def test_a_row_with_no_tenant_ref_is_its_threads_tenants_and_no_one_elses(
    rls: Any, app_role: str, name: str
) -> None:
    rows = seed(rls)
    table = TABLES[name]
    on_acme = _row(table, "nulltenant", None, rows["acme"], 7)
    on_globex = _row(table, "intruder", None, rows["globex"], 8)
    with rls.begin() as conn:  # as the owner, like the upstream runtime's login
        conn.execute(table.insert().values(**on_acme))
    key = pk_value(table, on_acme)
    with as_app(rls, app_role, "acme") as conn:
        assert key in visible(conn, table)
        # it may write such a row on its own thread, never on another tenant's
        conn.execute(table.insert().values(**_row(table, "mine", None, rows["acme"], 9)))
        assert refused(conn, table.insert().values(**on_globex))
        # nor move its no-tenant row over to another tenant's thread
        moved = (
            update(table)
            .where(pk(table, on_acme))
            .values(thread_id=rows["globex"]["agent_thread"]["id"])
        )
        assert refused(conn, moved)
    with as_app(rls, app_role, "globex") as conn:
        assert key not in visible(conn, table)
        assert conn.execute(table.delete().where(pk(table, on_acme))).rowcount == 0
        assert refused(conn, table.insert().values(**_row(table, "x", None, rows["acme"], 10)))
    with as_app(rls, app_role, None) as conn:  # the leak the old policy had
        assert visible(conn, table) == {pk_value(table, rows[None][name])}
        assert refused(conn, table.insert().values(**_row(table, "y", None, rows["acme"], 11)))


def _downgrade_to_the_old_policies(engine: Any) -> None:
    """The policies as an agora before issue 23 left them: old expressions, no marks."""
    with engine.begin() as conn:
        for name in PROTECTED_TABLES:
            if name in OLD_EXPRESSIONS:
                expr = OLD_EXPRESSIONS[name]
                conn.exec_driver_sql(
                    f"ALTER POLICY {POLICY_NAME} ON {name} USING ({expr}) WITH CHECK ({expr})"
                )
            conn.exec_driver_sql(f"COMMENT ON POLICY {POLICY_NAME} ON {name} IS NULL")


def test_enable_upgrades_an_older_agoras_policies_which_status_check_and_verify_name(
    rls: Any, app_role: str
) -> None:
    with rls.connect() as conn:
        assert rls_status(conn).outdated == []
        conn.rollback()
    _downgrade_to_the_old_policies(rls)
    with rls.connect() as conn:
        st = rls_status(conn)
        conn.rollback()
    assert st.enabled  # the policies are there ...
    assert st.outdated == sorted(PROTECTED_TABLES)  # ... but none is the current expression
    assert not any(t.policy_current for t in st.tables)
    problems = check_agent_tables(rls)
    assert [(p.kind, p.table) for p in problems] == [
        ("missing_policy", name) for name in sorted(PROTECTED_TABLES)
    ]
    assert all("outdated" in p.detail for p in problems)
    report = verify_isolation(rls, app_role=app_role)
    assert sorted(report.failed) == sorted(OLD_EXPRESSIONS)  # the old ones leak or hide
    ledger = next(t for t in report.tables if t.table == "agent_token_usage")
    assert ledger.thread_tenant is False and ledger.sees_own and ledger.hides_other
    assert "A cannot see its row with no tenant_ref" in (ledger.detail or "")
    assert "an untenanted session sees A's row with no tenant_ref" in (ledger.detail or "")

    dry = enable_rls(rls, dry_run=True)
    altered = [s.split(" ON ")[1].split(" ")[0] for s in dry.sql if s.startswith("ALTER POLICY")]
    # unmarked, every policy is replaced in place (the same text on the other eight: harmless)
    assert altered == [f'"{name}"' for name in PROTECTED_TABLES]
    comments = [s for s in dry.sql if "'COMMENT ON POLICY" in s]
    assert len(comments) == len(PROTECTED_TABLES)
    assert len(dry.sql) == len(altered) + len(comments)  # nothing else: no CREATE, no DROP
    done = enable_rls(rls)
    assert done.sql == dry.sql
    with rls.connect() as conn:
        assert rls_status(conn).outdated == []
        conn.rollback()
    assert check_agent_tables(rls) == []
    upgraded = verify_isolation(rls, app_role=app_role)
    assert upgraded.ok, [(t.table, t.detail) for t in upgraded.tables if not t.ok]
    # the tables whose rows with no tenant_ref are their parent's (issue 28: the history too)
    probed = {t.table for t in upgraded.tables if t.thread_tenant}
    assert probed == {*OLD_EXPRESSIONS, "agent_action_proposal_event"}
    assert enable_rls(rls).sql == []


def test_a_policy_altered_keeping_no_mark_is_outdated(rls: Any) -> None:
    with rls.begin() as conn:
        conn.exec_driver_sql(
            f"COMMENT ON POLICY {POLICY_NAME} ON agent_message IS 'agora {POLICY_NAME} 0000'"
        )
    problems = check_agent_tables(rls)
    assert [(p.kind, p.table) for p in problems] == [("missing_policy", "agent_message")]
    plan = enable_rls(rls)
    assert [s.split(" ")[0] for s in plan.sql] == ["ALTER", "DO"]
    assert check_agent_tables(rls) == []
