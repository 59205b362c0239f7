"""`agora db rls …` and `agora db redact` through the real Typer app.

RLS commands on a real PostgreSQL (a database and an app role per test, the role dropped after);
MySQL/MariaDB and SQLite refuse them with exit 2. Redaction on all three dialects.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from helpers import member_login_url, no_data
from sqlalchemy import select

from agora_cli.store._clock import DAY_MS, ManualClock, SystemClock
from agora_cli.store._engine import open_engine
from agora_cli.store._rls import PROTECTED_TABLES
from agora_cli.store._schema import tool_call
from agora_cli.store._steps import record_tool_call
from agora_cli.store._tenant_session import tenant_session
from agora_cli.store._threads import append_message, create_thread
from agora_cli.store._usage import record_usage


def test_enable_dry_run_then_enable_status_verify_disable(
    cli: Any, pg_url: str, app_role: str
) -> None:
    dry = cli("db", "rls", "enable", "--app-role", app_role, "--dry-run", "--db", pg_url)
    assert dry.exit_code == 0, dry.stderr
    assert "FORCE ROW LEVEL SECURITY;" in dry.stdout
    assert f'CREATE ROLE "{app_role}" NOLOGIN NOBYPASSRLS;' in dry.stdout
    status = cli("db", "rls", "status", "--db", pg_url, "--json").json()
    assert not status["enabled"] and not status["partial"]  # the dry run ran nothing

    done = cli("db", "rls", "enable", "--app-role", app_role, "--db", pg_url, "--json")
    assert done.exit_code == 0, done.stderr
    doc = done.json()
    assert doc["changed"] and doc["role_created"] and doc["statements"] == len(doc["sql"])
    again = cli("db", "rls", "enable", "--app-role", app_role, "--db", pg_url, "--json").json()
    assert (again["changed"], again["statements"], again["role_created"]) == (False, 0, False)

    status = cli("db", "rls", "status", "--db", pg_url, "--json").json()
    assert status["enabled"] and status["role_kind"] == "superuser" and status["bypasses_rls"]
    assert status["thread_tenant_index"] == "valid"
    protected = {t["table"] for t in status["tables"] if t["protected"]}
    assert protected == set(PROTECTED_TABLES)
    assert all(
        t["rls_enabled"] and t["rls_forced"] and t["policy"]
        for t in status["tables"]
        if t["protected"]
    )
    assert not any(t["policy"] for t in status["tables"] if not t["protected"])
    human = cli("db", "rls", "status", "--db", pg_url)
    assert "superuser" in human.stdout and "agent_tool_call" in human.stdout
    assert "agent_token_usage_thread_tenant_idx built" in human.stdout

    verify = cli("db", "rls", "verify", "--app-role", app_role, "--db", pg_url, "--json")
    assert verify.exit_code == 0, verify.stdout
    assert verify.json()["ok"] and verify.json()["failed"] == []
    assert cli("db", "check", "--db", pg_url).exit_code == 0

    off = cli("db", "rls", "disable", "--app-role", app_role, "--drop-role", "--db", pg_url)
    assert off.exit_code == 0, off.stderr
    assert f"role {app_role} dropped" in off.stdout
    status = cli("db", "rls", "status", "--db", pg_url, "--json").json()
    assert not status["enabled"] and not status["partial"] and not status["function"]
    assert status["thread_tenant_index"] == "missing"


def test_verify_exits_1_naming_the_table_whose_policy_was_dropped(cli: Any, pg_url: str) -> None:
    assert cli("db", "rls", "enable", "--db", pg_url).exit_code == 0
    engine = open_engine(pg_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP POLICY agent_tenant_isolation ON agent_genui_call")
    engine.dispose()
    result = cli("db", "rls", "verify", "--db", pg_url)
    assert result.exit_code == 1
    assert "isolation fails on: agent_genui_call" in result.stderr
    doc = cli("db", "rls", "verify", "--db", pg_url, "--json")
    assert doc.exit_code == 1 and doc.json()["failed"] == ["agent_genui_call"]
    check = cli("db", "check", "--db", pg_url, "--json")
    assert check.exit_code == 1
    assert [(p["kind"], p["table"]) for p in check.json()["problems"]] == [
        ("missing_policy", "agent_genui_call")
    ]
    assert cli("db", "rls", "enable", "--db", pg_url).exit_code == 0
    assert cli("db", "rls", "verify", "--db", pg_url).exit_code == 0


def test_an_app_role_that_could_switch_rls_off_is_exit_2_in_one_line(
    cli: Any, pg_url: str, app_role: str
) -> None:
    engine = open_engine(pg_url)
    with engine.begin() as conn:  # the tables' owner's role, with the app role in it
        conn.exec_driver_sql(f'CREATE ROLE "{app_role}" NOLOGIN NOBYPASSRLS')
        conn.exec_driver_sql(f'ALTER TABLE agent_run OWNER TO "{app_role}"')
    try:
        for args in (
            ("enable", "--app-role", app_role, "--dry-run"),
            ("enable", "--app-role", app_role),
            ("verify", "--app-role", app_role),
            ("enable", "--app-role", "public", "--dry-run"),
            ("verify", "--app-role", "PUBLIC"),
        ):
            result = cli("db", "rls", *args, "--db", pg_url)
            assert result.exit_code == 2, (args, result.stderr)
            assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
            assert no_data(result)
            if "public" not in args[2].lower():
                assert f"'{app_role}' owns agent_run" in result.stderr
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql('ALTER TABLE agent_run OWNER TO "postgres"')
        engine.dispose()
    status = cli("db", "rls", "status", "--db", pg_url, "--json").json()
    assert not status["partial"] and not status["enabled"]  # the refusals changed nothing


def test_status_names_a_table_added_later_and_verify_fails_on_it(cli: Any, pg_url: str) -> None:
    assert cli("db", "rls", "enable", "--db", pg_url).exit_code == 0
    engine = open_engine(pg_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE agent_new_thing (tenant_ref text, secret text)")
    engine.dispose()
    status = cli("db", "rls", "status", "--db", pg_url, "--json").json()
    assert status["unprotected"] == ["agent_new_thing"]
    new = next(t for t in status["tables"] if t["table"] == "agent_new_thing")
    assert new["tenant_data"] and not new["protected"] and not new["shared"]
    assert (
        "UNPROTECTED         agent_new_thing" in cli("db", "rls", "status", "--db", pg_url).stdout
    )
    verify = cli("db", "rls", "verify", "--db", pg_url)
    assert verify.exit_code == 1 and "isolation fails on: agent_new_thing" in verify.stderr
    assert cli("db", "check", "--db", pg_url).exit_code == 1


@pytest.mark.parametrize("command", ["enable", "disable", "status", "verify"])
def test_rls_is_exit_2_on_mysql_and_sqlite(
    cli: Any, dialect: str, db_url: str, command: str
) -> None:
    if dialect == "postgresql":
        pytest.skip("PostgreSQL has row-level security")
    result = cli("db", "rls", command, "--db", db_url)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert "no row-level security" in result.stderr and "by database" in result.stderr
    assert no_data(result)


def test_tenant_session_does_nothing_on_mysql_and_sqlite(dialect: str, engine: Any) -> None:
    if dialect == "postgresql":
        pytest.skip("covered by tests/store/test_rls.py")
    with engine.connect() as conn, tenant_session(conn, "acme"):
        assert conn.execute(select(tool_call.c.id)).all() == []


def test_agora_tenant_and_spend_tenant_scope_the_app_roles_view(
    cli: Any, pg_url: str, app_role: str
) -> None:
    engine = open_engine(pg_url)
    with engine.begin() as conn:
        for tenant, n in (("acme", 3), ("globex", 2), (None, 1)):
            t = create_thread(conn, actor_ref="alice", tenant_ref=tenant, title=f"{tenant}")
            for _ in range(n):
                record_usage(
                    conn,
                    thread_id=t.id,
                    actor_ref="alice",
                    tenant_ref=tenant,
                    model_id="m",
                    purpose="chat",
                    input_tokens=10,
                    output_tokens=1,
                )
    engine.dispose()
    assert cli("db", "rls", "enable", "--app-role", app_role, "--db", pg_url).exit_code == 0
    as_app = member_login_url(pg_url, app_role)

    listed = cli("threads", "list", "--db", as_app, "--json", env={"AGORA_TENANT": "acme"})
    assert listed.exit_code == 0, listed.stderr
    assert [t["tenant_ref"] for t in listed.json()["threads"]] == ["acme"]
    unset = cli("threads", "list", "--db", as_app, "--json").json()
    assert [t["tenant_ref"] for t in unset["threads"]] == [None]

    spend = cli("spend", "--by", "tenant", "--tenant", "acme", "--db", as_app, "--json")
    assert spend.exit_code == 0, spend.stderr
    assert spend.json()["total"]["turns"] == 3
    # as the owner (a superuser, bypassing the policies) the cross-tenant report sees everyone
    everyone = cli("spend", "--by", "tenant", "--db", pg_url, "--json").json()
    assert everyone["total"]["turns"] == 6


def test_commands_scoped_by_tenant_set_it_for_the_app_role(
    cli: Any, pg_url: str, app_role: str, tmp_path: Any
) -> None:
    """`--tenant` (proposals' scope, keys, db seal) sets agora.tenant: without it, the app role
    would see none of the tenant's rows and every command would answer "not found"."""
    import json

    from agora_cli.store._sealing import generate_kek

    kek = {"AGORA_KEK": generate_kek(), "AGORA_KEK_FILE": None}
    engine = open_engine(pg_url)
    with engine.begin() as conn:
        thread = create_thread(conn, actor_ref="alice", tenant_ref="acme", title="acme")
        append_message(conn, thread_id=thread.id, role="user", content="plain words")
    engine.dispose()
    assert cli("db", "rls", "enable", "--app-role", app_role, "--db", pg_url).exit_code == 0
    as_app = member_login_url(pg_url, app_role)
    doc = {
        "run_id": "run-1",
        "tool_call_id": "call-1",
        "tenant_ref": "acme",
        "actor_ref": "alice",
        "thread_id": thread.id,
        "tool_name": "refund",
        "input": {"order": 7},
        "expires_at": "2099-01-01T00:00:00Z",
    }
    path = tmp_path / "proposal.json"
    path.write_text(json.dumps(doc))
    made = cli("proposals", "create", "--file", str(path), "--db", as_app, "--json")
    assert made.exit_code == 0, made.stderr  # WITH CHECK passed: the session is acme's
    pid = made.json()["proposal"]["id"]
    scope = ("--actor", "alice", "--thread", thread.id, "--tenant", "acme")
    shown = cli("proposals", "show", pid, *scope, "--db", as_app, "--json")
    assert shown.exit_code == 0, shown.stderr
    listed = cli("proposals", "list", *scope, "--db", as_app, "--json")
    assert [p["id"] for p in listed.json()["proposals"]] == [pid]
    inbox = cli("proposals", "inbox", "--tenant", "acme", "--db", as_app, "--json")
    assert [p["id"] for p in inbox.json()["proposals"]] == [pid]
    decided = cli("proposals", "decide", pid, "--approve", "--by", "op", *scope, "--db", as_app)
    assert decided.exit_code == 0, decided.stderr
    # untenanted, the same role sees nothing of acme's
    none = cli("proposals", "inbox", "--db", as_app, "--json").json()
    assert none["proposals"] == []

    # keys: the operator (the owner, a superuser) creates acme's key; the app role reads only
    # acme's, and seals acme's rows under it
    assert cli("keys", "create", "--tenant", "acme", "--db", pg_url, env=kek).exit_code == 0
    assert cli("keys", "create", "--tenant", "globex", "--db", pg_url, env=kek).exit_code == 0
    mine = cli("keys", "list", "--tenant", "acme", "--db", as_app, "--json").json()
    assert [k["tenant"] for k in mine["keys"]] == ["acme"]
    theirs = cli("keys", "list", "--db", as_app, "--json", env={"AGORA_TENANT": "acme"}).json()
    assert [k["tenant"] for k in theirs["keys"]] == ["acme"]  # never globex's wrapped key
    sealed = cli("db", "seal", "--tenant", "acme", "--db", as_app, "--json", env=kek)
    assert sealed.exit_code == 0, sealed.stderr
    # the message, the thread's title and the proposal's input (every tenant byte, issue 24)
    counts = sealed.json()["sealed"]
    assert (counts["agent_message"], counts["agent_thread"], counts["agent_action_proposal"]) == (
        1,
        1,
        1,
    )


def test_a_tenants_login_cannot_create_a_proposal_on_another_tenants_thread(
    cli: Any, pg_url: str, app_role: str, tmp_path: Any
) -> None:
    """Issue 24, finding 1: `AGORA_TENANT=acme agora proposals create` with globex's thread id,
    as a login that is a member of the app role, fails in one line and writes nothing; a thread
    id that does not exist fails with the same message."""
    import json

    engine = open_engine(pg_url)
    with engine.begin() as conn:
        globex = create_thread(conn, actor_ref="bob", tenant_ref="globex", title="globex")
    assert cli("db", "rls", "enable", "--app-role", app_role, "--db", pg_url).exit_code == 0
    login = f"agora_rt_c_{secrets.token_hex(4)}"
    with engine.begin() as conn:
        conn.exec_driver_sql(f'CREATE ROLE "{login}" LOGIN IN ROLE "{app_role}"')
    as_login = pg_url.replace("postgres@", f"{login}@", 1)
    try:
        errors = []
        for thread_id in (globex.id, "no-such-thread"):
            doc = {
                "id": f"p-{thread_id}",
                "tenant_ref": "acme",
                "actor_ref": "alice",
                "thread_id": thread_id,
                "tool_name": "refund",
                "input": {"order_id": 7},
            }
            path = tmp_path / "proposal.json"
            path.write_text(json.dumps(doc))
            made = cli(
                "proposals", "create", "--file", str(path), "--db", as_login,
                env={"AGORA_TENANT": "acme"},
            )  # fmt: skip
            assert made.exit_code != 0 and made.stderr.count("\n") == 1, made.stderr
            # Refused by the store's tenant check before the policy's: "no thread … of tenant".
            assert "no thread" in made.stderr or "row-level security" in made.stderr
            errors.append(made.stderr.replace(thread_id, "<thread>"))
        assert errors[0] == errors[1]  # the error does not tell whether globex's thread exists
        with engine.connect() as conn:
            rows = conn.exec_driver_sql("SELECT count(*) FROM agent_action_proposal").scalar()
            conn.rollback()
        assert rows == 0
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f'DROP ROLE "{login}"')
        engine.dispose()


def test_upstream_ledger_rows_under_rls_are_their_threads_tenants(
    cli: Any, pg_url: str, app_role: str
) -> None:
    """The upstream runtime writes ledger rows with no tenant_ref: the app role's `spend` as
    acme counts acme's, as globex globex's, untenanted only the untenanted thread's."""
    from upstream import write_upstream

    engine = open_engine(pg_url)
    up = write_upstream(engine, now=1_773_144_000_000)  # 2026-03-10T12:00:00Z
    engine.dispose()
    assert cli("db", "rls", "enable", "--app-role", app_role, "--db", pg_url).exit_code == 0
    as_app = member_login_url(pg_url, app_role)
    window = ("--from", "2026-03-10", "--to", "2026-03-10", "--raw")
    for tenant in ("acme", "globex", None):
        env = {"AGORA_TENANT": tenant or ""}
        result = cli("spend", "--by", "model", *window, "--db", as_app, "--json", env=env)
        assert result.exit_code == 0, result.stderr
        total = result.json()["total"]
        turns = [t for t in up.turns if t.tenant == tenant]
        assert total["turns"] == len(turns) > 0, tenant
        assert total["input_tokens"] + total["output_tokens"] == up.tenant_tokens(tenant)
    # the owner (a superuser) sees every row: nothing was lost, only scoped
    everyone = cli("spend", "--by", "model", *window, "--db", pg_url, "--json").json()
    assert everyone["total"]["turns"] == len(up.turns)

    verify = cli("db", "rls", "verify", "--app-role", app_role, "--db", pg_url, "--json")
    assert verify.exit_code == 0, verify.stdout
    probed = {t["table"]: t["thread_tenant"] for t in verify.json()["tables"]}
    assert {t for t, v in probed.items() if v is True} == {
        "agent_token_usage",
        "agent_run",
        "agent_queued_message",
        "agent_action_proposal",
        "agent_action_proposal_event",  # issue 28: its proposal's tenant
    }
    assert all(v is None for t, v in probed.items() if t in ("agent_thread", "agent_message"))
    human = cli("db", "rls", "verify", "--db", pg_url)
    assert "thread's tenant" in human.stdout


def test_status_check_and_verify_name_an_older_agoras_policy_and_enable_upgrades_it(
    cli: Any, pg_url: str
) -> None:
    assert cli("db", "rls", "enable", "--db", pg_url).exit_code == 0
    old = (
        "(tenant_ref = nullif(current_setting('agora.tenant', true), '') OR (tenant_ref IS NULL "
        "AND coalesce(current_setting('agora.tenant', true), '') = ''))"
    )
    engine = open_engine(pg_url)
    with engine.begin() as conn:  # the ledger's policy as agora left it before issue 23
        conn.exec_driver_sql(
            f"ALTER POLICY agent_tenant_isolation ON agent_token_usage USING ({old}) "
            f"WITH CHECK ({old})"
        )
        conn.exec_driver_sql(
            "COMMENT ON POLICY agent_tenant_isolation ON agent_token_usage IS NULL"
        )
    engine.dispose()
    status = cli("db", "rls", "status", "--db", pg_url, "--json").json()
    assert status["enabled"] and status["outdated"] == ["agent_token_usage"]
    ledger = next(t for t in status["tables"] if t["table"] == "agent_token_usage")
    assert ledger["policy"] and not ledger["policy_current"]
    human = cli("db", "rls", "status", "--db", pg_url)
    assert "outdated policies   agent_token_usage" in human.stdout
    check = cli("db", "check", "--db", pg_url, "--json")
    assert check.exit_code == 1
    [problem] = check.json()["problems"]
    assert (problem["kind"], problem["table"]) == ("missing_policy", "agent_token_usage")
    assert "outdated" in problem["detail"]
    verify = cli("db", "rls", "verify", "--db", pg_url, "--json")
    assert verify.exit_code == 1 and verify.json()["failed"] == ["agent_token_usage"]

    upgrade = cli("db", "rls", "enable", "--db", pg_url, "--json").json()
    assert [s.split(" ")[0] for s in upgrade["sql"]] == ["ALTER", "DO"]  # DO: the comment
    assert cli("db", "rls", "status", "--db", pg_url, "--json").json()["outdated"] == []
    assert cli("db", "check", "--db", pg_url).exit_code == 0
    assert cli("db", "rls", "verify", "--db", pg_url).exit_code == 0


# --- db redact --------------------------------------------------------------------------------


def _seed_calls(engine: Any) -> None:
    old = ManualClock(SystemClock().now_ms() - 60 * DAY_MS)
    with engine.begin() as conn:
        t = create_thread(conn, actor_ref="alice", tenant_ref="acme", clock=old)
        m = append_message(conn, thread_id=t.id, role="assistant", content="x", clock=old)
        for n in range(3):
            record_tool_call(
                conn,
                message_id=m.id,
                tool_call_id=f"call-{n}",
                tool_name="search",
                input={"q": f"secret {n}"},
                clock=old,
            )


def test_redact_asks_and_needs_yes_without_a_terminal(cli: Any, engine: Any, db_url: str) -> None:
    _seed_calls(engine)
    result = cli("db", "redact", "--tool-io", "--older-than", "30d", "--db", db_url)
    assert result.exit_code == 2
    assert "without --yes" in result.stderr and no_data(result)
    for bad in (["--older-than", "30d"], ["--tool-io", "--older-than", "soon"], ["--tool-io"]):
        wrong = cli("db", "redact", *bad, "--yes", "--db", db_url)
        assert wrong.exit_code == 2 and wrong.stderr.startswith("error: "), bad
    with engine.connect() as conn:
        inputs = conn.execute(select(tool_call.c.input)).scalars().all()
        conn.rollback()
    assert all(not i.startswith(("sha256:", '"agora:redacted:')) for i in inputs)


def test_redact_dry_run_then_yes_then_again(cli: Any, engine: Any, db_url: str) -> None:
    from agora_cli.store._redaction_form import is_redacted
    from agora_cli.store._sealing import generate_kek

    _seed_calls(engine)
    kek = {"AGORA_KEK": generate_kek(), "AGORA_KEK_FILE": None}
    args = ("db", "redact", "--tool-io", "--older-than", "30d", "--db", db_url, "--json")
    dry = cli(*args, "--dry-run").json()  # counting needs no KEK
    assert (dry["matched"], dry["redacted"], dry["remaining"], dry["dry_run"]) == (3, 0, 3, True)
    done = cli(*args, "--yes", "--batch", "2", env=kek)
    assert done.exit_code == 0, done.stderr
    doc = done.json()
    assert (doc["redacted"], doc["inputs"], doc["outputs"], doc["batches"]) == (3, 3, 0, 2)
    assert doc["remaining"] == 0 and doc["kind"] == "tool_io"
    again = cli(*args, "--yes", env=kek).json()
    assert (again["matched"], again["redacted"]) == (0, 0)
    with engine.connect() as conn:
        inputs = conn.execute(select(tool_call.c.input)).scalars().all()
        conn.rollback()
    assert len(inputs) == 3 and all(is_redacted(i) for i in inputs)
    human = cli(*args[:-1], "--yes", env=kek)
    assert human.stdout.startswith("Redacted 0 row(s)")
