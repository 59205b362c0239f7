"""What a transaction pooler shares between clients, tried as an attacker would.

Through PgBouncer in transaction mode the next transaction of a client may run on a server
connection another client used a moment ago: nothing a session of agora's sets may stay behind
on it. Each test has a database of its own (``pooled_db``), so the pooler's pool for it is
shared by this test's clients only, and the server connection a client releases is the next
one's (PgBouncer hands out the most recently used first).
"""

from __future__ import annotations

from typing import Any

import pytest
from helpers import member_login_url, run_agora

pytestmark = [pytest.mark.pgbouncer, pytest.mark.slow]

ROUNDS = 8  # transactions read back: more than the pool's server connections (3)


def _settings(url: str, names: tuple[str, ...]) -> set[tuple[Any, ...]]:
    """Each of ``names``'s values as ROUNDS fresh transactions of a new client see them."""
    from agora_cli.store import open_engine

    columns = ", ".join(f"coalesce(current_setting('{n}', true), '')" for n in names)
    engine = open_engine(url)
    seen = set()
    try:
        with engine.connect() as conn:
            for _ in range(ROUNDS):
                seen.add(tuple(conn.exec_driver_sql(f"SELECT {columns}").one()))
                conn.rollback()
    finally:
        engine.dispose()
    return seen


def test_a_tenant_workers_setting_never_reaches_the_next_client(
    pooled_db: dict[str, str], app_role_on: Any
) -> None:
    """acme's worker runs its autocommit steps (renew, settle, claim) through the pooler; an
    untenanted login of the same app role, with acme's thread, run and proposal ids in hand,
    then reads through the same pool: it sees none of acme's rows and no ``agora.tenant`` is
    left set."""
    from sqlalchemy import select

    from agora_cli.store import ActionProposalStore, NewProposal, Scope, metadata, open_engine
    from agora_cli.store._steps import start_run

    direct, pooled = pooled_db["direct"], pooled_db["transaction"]
    role = app_role_on(direct)
    owner = open_engine(direct)
    try:
        with owner.begin() as conn:
            conn.execute(
                metadata.tables["agent_thread"].insert(),
                [
                    {"id": "acme-t", "actor_ref": "alice", "tenant_ref": "acme",
                     "title": "secret", "created_at": 0, "updated_at": 0},
                ],
            )  # fmt: skip
            run = start_run(conn, thread_id="acme-t", actor_ref="alice", tenant_ref="acme")
        acme = Scope("acme", "alice", "acme-t")
        new = NewProposal(acme, "refund", {"order": 7}, run_id=run.id, tool_call_id="c1")
        proposal = ActionProposalStore(owner).create(new).proposal.id
    finally:
        owner.dispose()
    login = member_login_url(pooled, role)
    worker = open_engine(login, tenant="acme")
    try:
        store = ActionProposalStore(worker)
        for _ in range(ROUNDS):  # autocommit steps: the setting rides with each statement
            assert store.renew("ap_missing00000000", "t" * 43, 1, 1000).outcome == "lost"
            assert store.claim_next("w1", 1000).outcome == "none"
    finally:
        worker.dispose()
    assert _settings(login, ("agora.tenant",)) == {("",)}
    stolen = {"agent_thread": "acme-t", "agent_run": run.id, "agent_action_proposal": proposal}
    attacker = open_engine(login)
    try:
        with attacker.connect() as conn:
            for _ in range(ROUNDS):
                for name, row_id in stolen.items():
                    table = metadata.tables[name]
                    found = conn.execute(select(table.c.id).where(table.c.id == row_id)).all()
                    assert found == [], name
                conn.rollback()
        assert ActionProposalStore(attacker).find(proposal, acme) is None
    finally:
        attacker.dispose()


def test_provisioning_leaves_no_lock_timeout_and_no_lock_behind(pooled_db: dict[str, str]) -> None:
    """``db provision`` and ``db upgrade`` bound their lock waits and take the provisioning lock
    per transaction: afterwards no server connection of the pool carries a ``lock_timeout``,
    and another provisioner is not kept waiting by a lock left on one."""
    pooled = pooled_db["transaction"]
    for args in (("db", "provision"), ("db", "upgrade"), ("db", "provision")):
        done = run_agora(*args, "--db", pooled, "--lock-timeout", "7", timeout=120)
        assert done.exit_code == 0, done.stdout + done.stderr
    assert _settings(pooled, ("lock_timeout",)) == {("0",)}
    from agora_cli.store import open_engine

    engine = open_engine(pooled_db["direct"])
    try:
        with engine.connect() as conn:
            held = conn.exec_driver_sql(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = "
                "(SELECT oid FROM pg_database WHERE datname = current_database())"
            ).scalar()  # this database's: another test's provisioning may hold one elsewhere
    finally:
        engine.dispose()
    assert held == 0


def test_no_statement_is_prepared_on_the_server(pooled_db: dict[str, str]) -> None:
    """psycopg would prepare a statement after its fifth run: agora turns that off, so a pooled
    server connection never holds a prepared statement of agora's."""
    from agora_cli.store import open_engine

    pooled = pooled_db["transaction"]
    engine = open_engine(pooled)
    try:
        with engine.connect() as conn:
            assert conn.connection.driver_connection.prepare_threshold is None
            for _ in range(ROUNDS):
                conn.exec_driver_sql("SELECT %s::int", (1,)).scalar()
                conn.rollback()
            prepared = conn.exec_driver_sql("SELECT count(*) FROM pg_prepared_statements")
            assert prepared.scalar() == 0
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("mode", "sharing"), [("transaction", True), ("session", False), ("direct", None)]
)
def test_db_status_says_whether_a_pooler_stands_in_between(
    pooled_db: dict[str, str], mode: str, sharing: bool | None
) -> None:
    shown = run_agora("db", "status", "--db", pooled_db[mode], "--json")
    assert shown.exit_code == 0, shown.stderr
    pooler = shown.json()["pooler"]
    if sharing is None:
        assert pooler is None
    else:
        assert pooler["detected"] is True
        assert pooler["transaction_pooling"] is sharing
    human = run_agora("db", "status", "--db", pooled_db[mode])
    assert ("pooler" in human.stdout) is (sharing is not None)
