"""PostgreSQL as production runs it, on the test servers: libpq's multi-host URLs, no server-side
prepares unless asked for, lost connections retried inside the store, and what cannot be
retried raised as agora's ``DatabaseUnreachable`` (never the driver's exception).

Connections are lost for real: ``pg_terminate_backend`` on the store's own server processes
(what a failover or an administrator does), or a server that is not there at all.
"""

from __future__ import annotations

from typing import Any

import pytest
from helpers import PG_ADMIN_URL, end_other_sessions, run_agora
from sqlalchemy import select

from agora_cli.store import _engine
from agora_cli.store._engine import is_connection_lost, normalize_url, open_engine
from agora_cli.store._errors import DatabaseUnreachable, InvalidInput
from agora_cli.store._proposals import ActionProposalStore, NewProposal, Scope, Settlement
from agora_cli.store._proposals.leases import find_own_settles
from agora_cli.store._schema import action_proposal, thread

ALICE = Scope(None, "alice", "t1")
SECRET = "s3cret-Pw-123"


def queue(engine: Any, n: int) -> tuple[ActionProposalStore, list[str]]:
    with engine.begin() as conn:
        conn.execute(
            thread.insert().values(id="t1", actor_ref="alice", title="t", created_at=0,
                                   updated_at=0)
        )  # fmt: skip
    store = ActionProposalStore(engine)
    ids = []
    for i in range(n):
        new = NewProposal(ALICE, "refund", {"i": i}, run_id="r", tool_call_id=f"c{i}")
        pid = store.create(new).proposal.id
        assert store.decide(pid, ALICE, "approved", "bob").outcome == "applied"
        ids.append(pid)
    return store, ids


# --- URLs -------------------------------------------------------------------------------------


def test_libpq_multi_host_urls_become_sqlalchemys_host_list() -> None:
    url = normalize_url(
        f"postgresql://u:{SECRET}@h1:5441,h2:5442,h3/agora?target_session_attrs=read-write"
    )
    assert url.query["host"] == ("h1:5441", "h2:5442", "h3")
    assert url.query["target_session_attrs"] == "read-write"
    assert url.password == SECRET and url.database == "agora"
    with pytest.raises(InvalidInput, match="empty host"):
        normalize_url("postgresql://u@h1:5441,,h3/agora")


def test_a_multi_host_url_reaches_the_first_host_that_answers(dialect: str) -> None:
    if dialect != "postgresql":
        pytest.skip("libpq's multi-host URLs are PostgreSQL's")
    down_first = PG_ADMIN_URL.replace("127.0.0.1:5432", "127.0.0.1:1,127.0.0.1:5432")
    assert down_first != PG_ADMIN_URL
    shown = run_agora("db", "status", "--db", down_first + "?connect_timeout=3", "--json")
    assert shown.exit_code == 0, shown.stderr
    assert shown.json()["dialect"] == "postgresql"
    nobody = run_agora(
        "db", "status", "--db", f"postgresql://u:{SECRET}@127.0.0.1:1,127.0.0.1:2/x", "--json"
    )
    assert nobody.exit_code == 3
    assert SECRET not in nobody.stdout + nobody.stderr
    assert nobody.stderr.startswith("error:") and nobody.stderr.count("\n") == 1


def test_server_side_prepares_are_off_unless_the_url_asks(dialect: str) -> None:
    if dialect != "postgresql":
        pytest.skip("psycopg's prepare_threshold")
    for query, expected in (
        ("", None),
        ("?prepare_threshold=5", 5),
        ("?prepare_threshold=none", None),
    ):
        engine = open_engine(PG_ADMIN_URL + query)
        try:
            with engine.connect() as conn:
                assert conn.connection.driver_connection.prepare_threshold == expected
        finally:
            engine.dispose()
    for bad in ("-1", "5x", "10000000"):
        with pytest.raises(InvalidInput, match="prepare_threshold"):
            open_engine(f"{PG_ADMIN_URL}?prepare_threshold={bad}")
        refused = run_agora("db", "status", "--db", f"{PG_ADMIN_URL}?prepare_threshold={bad}")
        assert refused.exit_code == 2, refused.stderr


# --- lost connections -------------------------------------------------------------------------


def test_a_worker_carries_on_when_its_server_processes_are_terminated(
    dialect: str, db_url: str
) -> None:
    """Every pooled connection of the worker's engine dies between its steps: claim, renew,
    settle and the batched forms go on as if nothing happened, and each job settles once."""
    if dialect != "postgresql":
        pytest.skip("pg_terminate_backend")
    engine = open_engine(db_url)
    try:
        store, ids = queue(engine, 6)
        done = []
        for step in range(3):
            claim = store.claim_next("w1", 60_000)
            assert claim.outcome == "claimed" and claim.lease and claim.work
            pid, lease = claim.work.id, claim.lease
            assert end_other_sessions(dialect, db_url) >= 1
            assert store.renew(pid, lease.token, lease.generation, 60_000).outcome == "renewed"
            end_other_sessions(dialect, db_url)
            settled = store.settle(pid, lease.token, lease.generation, "succeeded", {"s": step})
            assert settled.outcome == "settled"
            done.append(pid)
        batch = store.claim_next("w1", 60_000, limit=10)
        end_other_sessions(dialect, db_url)
        results = store.settle_many(
            [Settlement(c.work.id, c.lease.token, c.lease.generation, "succeeded")
             for c in batch if c.lease and c.work]
        )  # fmt: skip
        assert [r.outcome for r in results] == ["settled"] * 3
        done += [c.work.id for c in batch if c.work]
        assert sorted(done) == sorted(ids)
        with engine.connect() as conn:
            states = conn.execute(select(action_proposal.c.execution_state)).scalars().all()
        assert states == ["succeeded"] * 6
    finally:
        engine.dispose()


@pytest.mark.slow
def test_a_server_that_stays_away_is_database_unreachable(
    dialect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retried until the deadline (shortened here), then agora's error, not the driver's."""
    if dialect == "sqlite":
        pytest.skip("an embedded database cannot go away")
    monkeypatch.setattr(_engine, "RECONNECT_DEADLINE_S", 0.5)
    scheme = "postgresql" if dialect == "postgresql" else "mysql"
    engine = open_engine(f"{scheme}://u:{SECRET}@127.0.0.1:1/agora", check=False)
    store = ActionProposalStore(engine)
    try:
        for call in (
            lambda: store.claim_next("w1", 1000),
            lambda: store.renew("ap_x0000000000000", "t" * 43, 1, 1000),
            lambda: store.list_undelivered_outcomes(),
            lambda: store.create(NewProposal(ALICE, "refund", {}, run_id="r", tool_call_id="c")),
        ):
            with pytest.raises(DatabaseUnreachable) as caught:
                call()
            assert SECRET not in str(caught.value)
            assert is_connection_lost(caught.value.__cause__)  # type: ignore[arg-type]
    finally:
        engine.dispose()


def test_a_settle_that_committed_before_the_loss_is_its_own(engine: Any) -> None:
    """What a retried settle asks after a lost connection: the proposal is in the settlement's
    outcome at the settlement's generation. Another generation, outcome or a running proposal
    is not."""
    store, (first, second) = queue(engine, 2)
    a = store.claim(first, ALICE, "w1", 60_000)
    b = store.claim(second, ALICE, "w1", 60_000)
    assert a.lease is not None and b.lease is not None
    mine = Settlement(first, a.lease.token, a.lease.generation, "succeeded")
    assert store.settle_many([mine])[0].outcome == "settled"
    running = Settlement(second, b.lease.token, b.lease.generation, "succeeded")
    with engine.begin() as conn:
        assert find_own_settles(conn, [mine, running]) == {first}
        older = Settlement(first, a.lease.token, a.lease.generation + 1, "succeeded")
        failed = Settlement(first, a.lease.token, a.lease.generation, "failed", error="x")
        assert find_own_settles(conn, [older]) == set()
        assert find_own_settles(conn, [failed]) == set()
        assert find_own_settles(conn, []) == set()
