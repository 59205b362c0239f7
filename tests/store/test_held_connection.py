"""A worker's store that holds its connection (issue 29): every dialect, real servers.

``ActionProposalStore(engine, hold_connection=True)`` runs the lease steps on one connection it
holds: one pool checkout for a whole queue, the same guarantees as a store that checks out per
step (a lost connection reconnects and the work goes on, each job settles once), given back by
``close()``; another thread's call is refused before any SQL.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from helpers import end_other_sessions, examples
from sqlalchemy import event, select

from agora_cli.store._clock import ManualClock
from agora_cli.store._engine import open_engine
from agora_cli.store._errors import InvalidInput
from agora_cli.store._proposals import ActionProposalStore, NewProposal, Scope, Settlement
from agora_cli.store._schema import action_proposal, thread

ALICE = Scope(None, "alice", "t1")
LEASE_MS = 60_000


def queue(engine: Any, clock: ManualClock, n: int) -> list[str]:
    with engine.begin() as conn:
        conn.execute(
            thread.insert().values(id="t1", actor_ref="alice", title="t", created_at=0,
                                   updated_at=0)
        )  # fmt: skip
    store = ActionProposalStore(engine, clock)
    ids = []
    for i in range(n):
        new = NewProposal(ALICE, "refund", {"i": i}, run_id="r", tool_call_id=f"c{i:02d}")
        pid = store.create(new).proposal.id
        assert store.decide(pid, ALICE, "approved", "bob").outcome == "applied"
        clock.advance(1)
        ids.append(pid)
    return ids


def states(engine: Any) -> dict[str, str]:
    with engine.connect() as conn:
        rows = conn.execute(select(action_proposal.c.id, action_proposal.c.execution_state))
        return {pid: state for pid, state in rows}


def with_query(url: str, query: str) -> str:
    """``url`` with ``query`` (``name=value``) added to its query string."""
    if not query:
        return url
    return f"{url}{'&' if '?' in url else '?'}{query}"


_ONCE_A_STATEMENT = (0x16, 0x19)  # COM_STMT_PREPARE, COM_STMT_CLOSE


def count_commands(dbapi: Any, sent: list[int]) -> Callable[[], None]:
    """Record each command PyMySQL's connection ``dbapi`` sends (a round trip each) in ``sent``,
    but a statement's prepare and close (MariaDB's held connection prepares a statement text
    once, the second time it runs, and then executes it: ``_mysql_prepared``; the step's round
    trips are its statements' runs, text or prepared); the call that stops recording."""
    command = dbapi._execute_command

    def counted(cmd: int, sql: Any) -> Any:
        if cmd not in _ONCE_A_STATEMENT:
            sent.append(cmd)
        return command(cmd, sql)

    dbapi._execute_command = counted

    def restore() -> None:
        dbapi._execute_command = command

    return restore


def succeeded(claims: Any, result: Any = None) -> list[Settlement]:
    """``claims`` settled ``succeeded`` with ``result`` (``{"n": 1}`` when not given)."""
    result = {"n": 1} if result is None else result
    return [
        Settlement(c.work.id, c.lease.token, c.lease.generation, "succeeded", result)
        for c in claims
    ]


def checkouts(engine: Any) -> list[int]:
    counted = [0]

    def on_checkout(*_args: Any) -> None:
        counted[0] += 1

    event.listen(engine.pool, "checkout", on_checkout)
    return counted


def test_a_held_store_works_a_queue_on_one_connection(engine: Any, clock: ManualClock) -> None:
    """Claims, a renew, settles, a batch and a step: one checkout for all, each job settled
    once, and a stale lease still ``lost``."""
    ids = queue(engine, clock, 8)
    counted = checkouts(engine)
    with ActionProposalStore(engine, clock, hold_connection=True) as store:
        first = store.claim_next("w1", LEASE_MS)
        assert first.outcome == "claimed" and first.work and first.lease
        lease = first.lease
        assert store.renew(first.work.id, lease.token, lease.generation, LEASE_MS).outcome == (
            "renewed"
        )
        assert store.settle(first.work.id, lease.token, lease.generation, "succeeded", {"n": 1})
        again = store.settle(first.work.id, lease.token, lease.generation, "succeeded", {"n": 2})
        assert again.outcome == "lost"
        batch = store.claim_next("w1", LEASE_MS, limit=3)
        assert [c.work.id for c in batch if c.work] == ids[1:4]
        items = [
            Settlement(c.work.id, c.lease.token, c.lease.generation, "succeeded", {"n": 3})
            for c in batch
            if c.work and c.lease
        ]
        stale = Settlement(first.work.id, lease.token, lease.generation, "failed", None, "x")
        outcomes = [r.outcome for r in store.settle_many([*items, stale])]
        assert outcomes == ["settled", "settled", "settled", "lost"]
        step = store.claim_next("w1", LEASE_MS, limit=1)
        while step:
            c = step[0]
            assert c.work and c.lease
            done = Settlement(c.work.id, c.lease.token, c.lease.generation, "succeeded", None)
            settled, step = store.settle_and_claim_next(done, "w1", LEASE_MS)
            assert settled.outcome == "settled"
        assert engine.pool.checkedout() == 1
    assert counted[0] == 1
    assert engine.pool.checkedout() == 0  # the with block gave it back
    assert states(engine) == dict.fromkeys(ids, "succeeded")


def test_a_closed_store_opens_a_new_connection_on_its_next_step(
    engine: Any, clock: ManualClock
) -> None:
    ids = queue(engine, clock, 2)
    store = ActionProposalStore(engine, clock, hold_connection=True)
    got = store.claim_next("w1", LEASE_MS)
    assert got.work and got.lease and engine.pool.checkedout() == 1
    store.close()
    assert engine.pool.checkedout() == 0
    store.close()  # twice is harmless
    assert store.settle(got.work.id, got.lease.token, got.lease.generation, "succeeded")
    assert engine.pool.checkedout() == 1
    store.close()
    assert states(engine)[ids[0]] == "succeeded"


def test_another_threads_call_is_refused_before_any_sql(engine: Any, clock: ManualClock) -> None:
    """The held connection is the first caller's thread's: another thread gets ``InvalidInput``
    and nothing is claimed; a store that holds no connection is any thread's."""
    ids = queue(engine, clock, 2)
    held = ActionProposalStore(engine, clock, hold_connection=True)
    assert held.claim_next("w1", LEASE_MS).outcome == "claimed"
    errors: list[BaseException] = []
    claimed: list[str] = []

    def other() -> None:
        try:
            held.claim_next("w2", LEASE_MS)
        except BaseException as exc:
            errors.append(exc)
        plain = ActionProposalStore(engine, clock).claim_next("w3", LEASE_MS)
        claimed.append(plain.work.id if plain.work else "")

    t = threading.Thread(target=other)
    t.start()
    t.join(timeout=60)
    held.close()
    assert len(errors) == 1 and isinstance(errors[0], InvalidInput)
    assert "one store per thread" in str(errors[0])
    assert claimed == [ids[1]]  # w2 claimed nothing: the second job went to w3


def test_a_held_connection_lost_between_steps_is_reopened(
    dialect: str, db_url: str, clock: ManualClock
) -> None:
    """The server ends the held connection between every two steps: each step reconnects and
    goes on, every job settles once."""
    if dialect == "sqlite":
        pytest.skip("a SQLite connection is a file: it cannot be lost")
    engine = open_engine(db_url)
    try:
        ids = queue(engine, clock, 4)
        engine.dispose()  # only the held connection remains to be killed
        store = ActionProposalStore(engine, clock, hold_connection=True)
        done = []
        for _ in range(2):
            got = store.claim_next("w1", LEASE_MS)
            assert got.work and got.lease
            assert end_other_sessions(dialect, db_url) >= 1
            renewed = store.renew(got.work.id, got.lease.token, got.lease.generation, LEASE_MS)
            assert renewed.outcome == "renewed"
            assert end_other_sessions(dialect, db_url) >= 1
            settled = store.settle(
                got.work.id, got.lease.token, got.lease.generation, "succeeded", {"ok": 1}
            )
            assert settled.outcome == "settled"
            done.append(got.work.id)
        batch = store.claim_next("w1", LEASE_MS, limit=5)
        assert end_other_sessions(dialect, db_url) >= 1
        items = [
            Settlement(c.work.id, c.lease.token, c.lease.generation, "succeeded")
            for c in batch
            if c.work and c.lease
        ]
        assert [r.outcome for r in store.settle_many(items)] == ["settled"] * 2
        done += [s.proposal_id for s in items]
        store.close()
        assert sorted(done) == sorted(ids)
        assert states(engine) == dict.fromkeys(ids, "succeeded")
    finally:
        engine.dispose()


def test_prepared_statements_only_on_a_direct_connection_unless_the_url_says(
    dialect: str, db_url: str, clock: ManualClock
) -> None:
    """PostgreSQL: a held connection reaching the server directly prepares its statements
    (psycopg's ``prepare_threshold`` 0); ``?prepare_threshold=none`` keeps them off and a number
    is kept as given. (Through a pooler: ``tests/pgbouncer/test_held_worker.py``.)"""
    if dialect != "postgresql":
        pytest.skip("psycopg's prepare_threshold")
    setup = open_engine(db_url)
    queue(setup, clock, 3)
    setup.dispose()
    for query, expected in (
        ("", 0),
        ("?prepare_threshold=none", None),
        ("?prepare_threshold=7", 7),
    ):
        engine = open_engine(db_url + query)
        try:
            with ActionProposalStore(engine, clock, hold_connection=True) as store:
                got = store.claim_next("w1", LEASE_MS)
                assert got.work and got.lease
                held: Any = store._held
                assert held.connection.driver_connection.prepare_threshold == expected
                lease = got.lease
                assert store.settle(got.work.id, lease.token, lease.generation, "succeeded")
        finally:
            engine.dispose()


def test_mysql_a_steps_commit_travels_with_its_last_statement(
    dialect: str, db_url: str, clock: ManualClock
) -> None:
    """MySQL/MariaDB: a held connection sends a step's COMMIT with its last statement — a settle
    or a renew is one round trip, a claim two (the locking read, the UPDATE) — and each step is
    committed when it returns (another connection sees it). Given back to the pool, the
    connection takes one statement a packet again."""
    if dialect != "mysql":
        pytest.skip("MySQL/MariaDB's merged commits (PostgreSQL's steps run in autocommit)")
    from pymysql.constants import COMMAND
    from sqlalchemy.exc import ProgrammingError

    engine = open_engine(db_url, pool_size=1)
    try:
        ids = queue(engine, clock, 3)
        other = open_engine(db_url)
        sent: list[int] = []
        with ActionProposalStore(engine, clock, hold_connection=True) as store:
            first = store.claim_next("w1", LEASE_MS)
            assert first.work and first.lease
            dbapi: Any = store._held.connection.driver_connection  # type: ignore[union-attr]
            restore = count_commands(dbapi, sent)
            lease = first.lease
            assert store.renew(first.work.id, lease.token, lease.generation, LEASE_MS).outcome == (
                "renewed"
            )
            assert len(sent) == 1
            assert store.settle(first.work.id, lease.token, lease.generation, "succeeded", 1)
            assert len(sent) == 2
            assert states(other)[first.work.id] == "succeeded"  # committed as it returned
            again = store.settle(first.work.id, lease.token, lease.generation, "failed", None, "x")
            assert again.outcome == "lost" and len(sent) == 3
            second = store.claim_next("w1", LEASE_MS)
            assert second.work and second.work.id == ids[1] and len(sent) == 5
            assert states(other)[ids[1]] == "running"
            batch = store.claim_next("w1", LEASE_MS, limit=5)
            assert [c.work.id for c in batch if c.work] == [ids[2]] and len(sent) == 7
        restore()
        # given back, the connection was asked to one statement a packet (COM_SET_OPTION)
        assert sent[7:] == [COMMAND.COM_SET_OPTION]
        other.dispose()
        with engine.connect() as conn:
            assert conn.connection.driver_connection is dbapi  # the pool's one connection
            with pytest.raises(ProgrammingError):
                conn.exec_driver_sql("SELECT 1; SELECT 2")
    finally:
        engine.dispose()


@pytest.mark.parametrize("prepare", ["", "prepare_threshold=none", "prepare_threshold=0"])
def test_mariadb_answers_each_step_once(
    dialect: str, db_url: str, clock: ManualClock, prepare: str, monkeypatch: Any
) -> None:
    """MariaDB answers each statement of a multi-statement text as it finishes it: a step's
    write and its COMMIT (a batch settle's test too) go as one compound statement, read as one
    answer, which reports the write's rows — a renew, a settle, a lost settle, a claim's
    ``UPDATE``, a batch settle and a batch step each read one answer a round trip: sent as text
    (``prepare_threshold=none``), prepared from the first run (``0``) or from the second (the
    default), where an answer is a prepared statement's result read."""
    from agora_cli.store import _mysql_prepared

    if dialect != "mysql":
        pytest.skip("MariaDB's compound statements")
    engine = open_engine(with_query(db_url, prepare), pool_size=1)
    if not getattr(engine.dialect, "is_mariadb", False):
        engine.dispose()
        pytest.skip("MySQL has no compound statement outside a stored program")
    try:
        ids = queue(engine, clock, 8)
        sent: list[int] = []
        answers: list[int] = []
        with ActionProposalStore(engine, clock, hold_connection=True) as store:
            first = store.claim_next("w1", LEASE_MS)
            assert first.work and first.lease
            dbapi: Any = store._held.connection.driver_connection  # type: ignore[union-attr]
            restore = count_commands(dbapi, sent)
            read = dbapi._read_query_result

            def counted(*args: Any, **kwargs: Any) -> Any:
                answers.append(1)
                return read(*args, **kwargs)

            dbapi._read_query_result = counted
            read_prepared = _mysql_prepared._read_result

            def counted_prepared(*args: Any) -> Any:
                answers.append(1)
                return read_prepared(*args)

            monkeypatch.setattr(_mysql_prepared, "_read_result", counted_prepared)
            lease = first.lease
            renewed = store.renew(first.work.id, lease.token, lease.generation, LEASE_MS)
            assert renewed.outcome == "renewed" and (len(sent), len(answers)) == (1, 1)
            assert store.settle(first.work.id, lease.token, lease.generation, "succeeded", 1)
            assert (len(sent), len(answers)) == (2, 2)
            lost = store.settle(first.work.id, lease.token, lease.generation, "failed", None, "x")
            assert lost.outcome == "lost" and (len(sent), len(answers)) == (3, 3)
            batch = store.claim_next("w1", LEASE_MS, limit=3)  # the probed read, the take
            assert [c.work.id for c in batch if c.work] == ids[1:4]
            assert (len(sent), len(answers)) == (5, 5)
            settled = store.settle_many(succeeded(batch))
            assert [r.outcome for r in settled] == ["settled"] * 3
            assert (len(sent), len(answers)) == (6, 6)
            more = store.claim_next("w1", LEASE_MS, limit=2)
            del sent[:], answers[:]
            done, following = store.settle_many_and_claim_next(succeeded(more), "w1", LEASE_MS, 2)
            assert [r.outcome for r in done] == ["settled"] * 2
            assert [c.work.id for c in following if c.work] == ids[6:8]
            assert (len(sent), len(answers)) == (2, 2)  # the probed read, the settle and claim
            prepared = _mysql_prepared.prepared_count(dbapi)
            assert (prepared > 0) == (prepare != "prepare_threshold=none"), prepared
            dbapi._read_query_result = read
            restore()
        seen = states(engine)
        assert [seen[pid] for pid in ids] == ["succeeded"] * 6 + ["running"] * 2
    finally:
        engine.dispose()


def test_mysql_a_store_nobody_closed_gives_its_connection_back_as_it_took_it(
    dialect: str, db_url: str, clock: ManualClock
) -> None:
    """MySQL/MariaDB: the held connection's two-statements-a-packet is asked off as the
    connection goes back to its pool however it goes — here without ``close()``, the store
    dropped mid-queue."""
    if dialect != "mysql":
        pytest.skip("MySQL/MariaDB's merged commits")
    import gc
    import warnings

    from sqlalchemy.exc import ProgrammingError

    engine = open_engine(db_url, pool_size=1)
    try:
        queue(engine, clock, 2)
        store = ActionProposalStore(engine, clock, hold_connection=True)
        got = store.claim_next("w1", LEASE_MS)
        assert got.work and got.lease
        dbapi: Any = store._held.connection.driver_connection  # type: ignore[union-attr]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SQLAlchemy says a connection was left unclosed
            del store
            gc.collect()
        with engine.connect() as conn:
            assert conn.connection.driver_connection is dbapi
            with pytest.raises(ProgrammingError):
                conn.exec_driver_sql("SELECT 1; SELECT 2")
            assert conn.exec_driver_sql("SELECT 1").scalar() == 1
    finally:
        engine.dispose()


def test_mariadb_a_batch_settle_commits_in_its_round_trip_only_if_every_lease_holds(
    dialect: str, db_url: str, clock: ManualClock
) -> None:
    """MariaDB: a held connection's batch claim is two round trips (both states' reads in one,
    the UPDATE and its COMMIT in the other) and its batch settle one — the fenced UPDATE, the
    server's own test that it changed every row, and the COMMIT. When a lease in the batch is
    lost nothing of that UPDATE is committed: the exact path then settles the leases that hold
    (were the others committed already, it would find them settled and call them lost)."""
    if dialect != "mysql":
        pytest.skip("MariaDB's guarded commit")
    engine = open_engine(db_url, pool_size=1)
    if not getattr(engine.dialect, "is_mariadb", False):
        engine.dispose()
        pytest.skip("MySQL has no IF outside a stored program: its batch settle commits apart")
    try:
        ids = queue(engine, clock, 4)
        other = open_engine(db_url)
        sent: list[int] = []
        with ActionProposalStore(engine, clock, hold_connection=True) as store:
            store.claim_next("w0", LEASE_MS, limit=1)  # the held connection, its context
            dbapi: Any = store._held.connection.driver_connection  # type: ignore[union-attr]
            restore = count_commands(dbapi, sent)
            a, b, c = store.claim_next("w1", LEASE_MS, limit=3)
            assert [x.work.id for x in (a, b, c) if x.work] == ids[1:] and len(sent) == 2
            done = [
                Settlement(x.work.id, x.lease.token, x.lease.generation, "succeeded", {"n": 1})
                for x in (a, b)
                if x.work and x.lease
            ]
            assert [r.outcome for r in store.settle_many(done)] == ["settled", "settled"]
            assert len(sent) == 3  # one round trip, committed as it returned:
            assert [states(other)[pid] for pid in ids[1:3]] == ["succeeded", "succeeded"]
            assert c.work and c.lease
            mixed = [
                Settlement(c.work.id, c.lease.token, c.lease.generation, "succeeded", {"n": 2}),
                done[0],  # settled already: its lease is gone
            ]
            assert [r.outcome for r in store.settle_many(mixed)] == ["settled", "lost"]
            assert states(other)[ids[3]] == "succeeded"
            restore()
        other.dispose()
    finally:
        engine.dispose()


def test_mysql_a_batch_step_settles_and_claims_in_two_round_trips_and_one_commit(
    dialect: str, db_url: str, clock: ManualClock
) -> None:
    """MySQL/MariaDB: ``settle_many_and_claim_next`` on a held connection takes two round trips
    (MariaDB: the next claim's reads, then the batch's fenced UPDATE, the claim's UPDATE and the
    COMMIT of both in one compound statement; MySQL: the fenced UPDATE with the reads, then the
    claim's UPDATE with the COMMIT), where a ``settle_many`` and a ``claim_next`` take three.
    Nothing of the settle is visible before that COMMIT; a lost lease in the batch commits
    nothing of the optimistic UPDATE (the step runs again, each lease settled on its own)."""
    if dialect != "mysql":
        pytest.skip("MySQL/MariaDB's statements in one packet")
    engine = open_engine(db_url, pool_size=1)
    try:
        ids = queue(engine, clock, 7)
        other = open_engine(db_url)
        sent: list[int] = []
        with ActionProposalStore(engine, clock, hold_connection=True) as store:
            store.claim_next("w0", LEASE_MS, limit=1)  # the held connection, its context
            dbapi: Any = store._held.connection.driver_connection  # type: ignore[union-attr]
            restore = count_commands(dbapi, sent)
            a, b = store.claim_next("w1", LEASE_MS, limit=2)
            assert len(sent) == 2

            # what another connection sees as the step's second packet goes: a and b unsettled
            midway: list[dict[str, str]] = []
            send = dbapi._execute_command

            def look(cmd: int, sql: Any) -> Any:
                if len(sent) == 3:  # the first packet is in; the second about to go
                    midway.append(states(other))
                return send(cmd, sql)

            dbapi._execute_command = look
            settled, following = store.settle_many_and_claim_next(
                succeeded((a, b)), "w1", LEASE_MS, 2
            )
            dbapi._execute_command = send
            assert [midway[0][pid] for pid in ids[1:5]] == ["running"] * 2 + ["queued"] * 2
            assert [r.outcome for r in settled] == ["settled", "settled"]
            assert [x.work.id for x in following if x.work] == ids[3:5]
            assert len(sent) == 4  # two round trips for the step
            seen = states(other)
            assert [seen[pid] for pid in ids[1:5]] == ["succeeded"] * 2 + ["running"] * 2
            c, d = following
            # d's lease lost (settled apart with its own token): the batch's UPDATE changes one
            # row of two, is rolled back, and the exact path settles c and calls d lost
            assert store.settle(d.work.id, d.lease.token, d.lease.generation, "failed", None, "x")
            settled, following = store.settle_many_and_claim_next(
                succeeded((c, d)), "w1", LEASE_MS, 5
            )
            assert [r.outcome for r in settled] == ["settled", "lost"]
            assert [x.work.id for x in following if x.work] == ids[5:]
            seen = states(other)
            assert [seen[pid] for pid in ids[3:]] == ["succeeded", "failed", "running", "running"]
            sent.clear()
            settled, following = store.settle_many_and_claim_next(
                succeeded(following), "w1", LEASE_MS, 5
            )
            assert [r.outcome for r in settled] == ["settled"] * 2 and following == []
            # nothing queued: the settle and the queued read; the running read (no queued row
            # carried the probe: ``next_due_probed``); then the COMMIT
            assert len(sent) == 3
            assert set(states(other).values()) == {"running", "succeeded", "failed"}
            assert [states(other)[pid] for pid in ids[5:]] == ["succeeded", "succeeded"]
            restore()
        other.dispose()
    finally:
        engine.dispose()


def test_mysql_a_large_batch_step_is_still_two_round_trips_on_mariadb(
    dialect: str, db_url: str, clock: ManualClock
) -> None:
    """Past ``STEP_IN_ONE_TRANSACTION_MAX`` (MySQL's limit for a settle held open through the
    claim's round trips) MariaDB's step still settles inside the claim's last statement, which
    holds the settled rows for no round trip: two round trips, the same outcomes."""
    from agora_cli.store._proposals.leases import STEP_IN_ONE_TRANSACTION_MAX

    if dialect != "mysql":
        pytest.skip("MySQL/MariaDB's statements in one packet")
    k = STEP_IN_ONE_TRANSACTION_MAX + 1
    engine = open_engine(db_url, pool_size=1)
    try:
        ids = queue(engine, clock, k + 2)
        other = open_engine(db_url)
        sent: list[int] = []
        with ActionProposalStore(engine, clock, hold_connection=True) as store:
            batch = store.claim_next("w1", LEASE_MS, limit=k)
            dbapi: Any = store._held.connection.driver_connection  # type: ignore[union-attr]
            restore = count_commands(dbapi, sent)
            settled, following = store.settle_many_and_claim_next(
                succeeded(batch), "w1", LEASE_MS, k
            )
            restore()
            assert [r.outcome for r in settled] == ["settled"] * k
            assert [x.work.id for x in following if x.work] == ids[k:]
            assert len(sent) == (2 if engine.dialect.is_mariadb else 3)  # type: ignore[attr-defined]
            seen = states(other)
            assert [seen[pid] for pid in ids] == ["succeeded"] * k + ["running"] * 2
        other.dispose()
    finally:
        engine.dispose()


def test_mysql_a_single_step_settles_and_claims_in_two_round_trips(
    dialect: str, db_url: str, clock: ManualClock
) -> None:
    """MySQL/MariaDB: ``settle_and_claim_next`` on a held connection is a batch step of one —
    two round trips (MariaDB: the claim's reads, then the settle, the claim's UPDATE and the
    COMMIT of both as one compound statement; MySQL: the settle with the reads, then the claim
    with the COMMIT); a lost lease rolls it back and the exact path calls it ``lost`` and still
    claims."""
    if dialect != "mysql":
        pytest.skip("MySQL/MariaDB's statements in one packet")
    engine = open_engine(db_url, pool_size=1)
    try:
        ids = queue(engine, clock, 4)
        other = open_engine(db_url)
        sent: list[int] = []
        with ActionProposalStore(engine, clock, hold_connection=True) as store:
            (a,) = store.claim_next("w1", LEASE_MS, limit=1)
            dbapi: Any = store._held.connection.driver_connection  # type: ignore[union-attr]
            restore = count_commands(dbapi, sent)
            (done,) = succeeded([a])
            settled, (b,) = store.settle_and_claim_next(done, "w1", LEASE_MS)
            assert settled.outcome == "settled" and b.work.id == ids[1] and len(sent) == 2
            restore()
            assert [states(other)[pid] for pid in ids[:2]] == ["succeeded", "running"]
            stale = Settlement(b.work.id, "not-the-token", b.lease.generation, "succeeded")
            settled, (c,) = store.settle_and_claim_next(stale, "w1", LEASE_MS)
            assert settled.outcome == "lost" and c.work.id == ids[2]
            assert [states(other)[pid] for pid in ids[1:3]] == ["running", "running"]
        other.dispose()
    finally:
        engine.dispose()


def test_a_failed_statement_rendered_with_its_values_names_none_of_them(
    dialect: str, db_url: str, clock: ManualClock
) -> None:
    """MySQL/MariaDB: a batch's statements go with their values rendered into their text (ids,
    token hashes, a result). When one fails, the error names no statement: what a worker's log
    shows of it never holds a result (``hide_parameters`` hides bound values only)."""
    from sqlalchemy.exc import DBAPIError

    from agora_cli.store._engine import run_on_driver, run_write_then_reads

    if dialect != "mysql":
        pytest.skip("statements rendered with their values are MySQL/MariaDB's")
    secret = "result-text-4242"
    bad = f"UPDATE agent_no_such_table SET result = '{secret}'"
    engine = open_engine(db_url, pool_size=1)
    try:
        with engine.connect() as conn:
            with pytest.raises(DBAPIError) as named:
                run_on_driver(conn, bad, None)
            assert secret in str(named.value)  # the plain path names its text: the test can fail
            conn.rollback()
            with pytest.raises(DBAPIError) as hidden:
                run_on_driver(conn, bad, None, rendered=True)
            assert secret not in str(hidden.value) and "not shown" in str(hidden.value)
            conn.rollback()
        queue(engine, clock, 1)
        with ActionProposalStore(engine, clock, hold_connection=True) as store:
            store.claim_next("w0", LEASE_MS, limit=1)  # the held connection, merging statements
            held: Any = store._held
            with pytest.raises(DBAPIError) as packet:
                run_write_then_reads(held, f"{bad}; SELECT 1")
            assert secret not in str(packet.value)
            for sql in (bad, f"{bad}; SELECT 1"):
                with pytest.raises(DBAPIError) as committed:
                    run_on_driver(held, sql, None, commit=True, rendered=True)
                assert secret not in str(committed.value)
    finally:
        engine.dispose()


def test_mysql_the_fast_quoting_is_pymysqls_under_either_sql_mode(
    dialect: str, db_url: str
) -> None:
    """MySQL/MariaDB: ``pymysql_quote`` — how a batch's ids, hashes and results are rendered into
    its text — quotes a ``str`` exactly as PyMySQL's ``escape`` does, with backslash escapes and
    under ``NO_BACKSLASH_ESCAPES`` (read per statement), and the server reads each literal back
    as the same text; other kinds go to PyMySQL as they are. ``quote_all`` (a batch's ids at
    once) quotes each value exactly as ``quote`` does, plain batches and tricky ones alike."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from agora_cli.store._engine import pymysql_quote, quote_all

    if dialect != "mysql":
        pytest.skip("statements rendered with their values are MySQL/MariaDB's")
    engine = open_engine(db_url, pool_size=1)
    tricky = ["", "'", "\\", "\\'", "''", '"', "\x00", "\n\r\x1a", "a'; DROP TABLE x; --", "é€😀"]
    try:
        with engine.connect() as conn:
            dbapi: Any = conn.connection.driver_connection
            cursor = dbapi.cursor()

            @settings(max_examples=examples(60), deadline=None)
            @given(st.lists(st.text(), min_size=1, max_size=5))
            def reads_back(texts: list[str]) -> None:
                quote = pymysql_quote(dbapi)
                for text in [*texts, *tricky]:
                    assert quote(text) == dbapi.escape(text)
                for batch in (texts, [*texts, *tricky], [*texts, 7, None]):
                    assert quote_all(quote, batch) == [dbapi.escape(v) for v in batch]
                literals = ", ".join(quote(t) for t in [*texts, *tricky])
                cursor.execute(f"SELECT {literals}")
                assert list(cursor.fetchone()) == [*texts, *tricky]

            reads_back()
            for other in (7, None, True, 1.5, b"\x00'"):
                assert pymysql_quote(dbapi)(other) == dbapi.escape(other)
            cursor.execute("SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES')")
            assert pymysql_quote(dbapi)("a\\'b") == "'a\\''b'" == dbapi.escape("a\\'b")
            reads_back()
            cursor.close()
            conn.invalidate()  # its sql_mode is not the pool's
    finally:
        engine.dispose()


def test_a_batch_past_a_take_chunk_gives_each_row_its_own_lease(
    dialect: str, db_url: str, clock: ManualClock
) -> None:
    """Batches of 60 and 51 (on MariaDB's prepared connection, more than ``TAKE_CHUNK`` rows:
    the claim's UPDATE in chunks of 20 and of 17): each row holds the hash of its own claim's
    token, every batch settles, and each job runs once. Each size runs three times (text, then
    prepared)."""
    from agora_cli.store._proposals.model import token_hash
    from agora_cli.store._proposals.queries import TAKE_CHUNK

    assert 60 > 51 > TAKE_CHUNK
    engine = open_engine(db_url, pool_size=1)
    try:
        ids = queue(engine, clock, 6 * 60)
        other = open_engine(db_url)
        done: list[str] = []

        def holds_own(batch: list[Any]) -> None:
            with other.connect() as conn:
                rows = conn.execute(
                    select(action_proposal.c.id, action_proposal.c.lease_token_hash)
                )
                stored = dict(rows.all())
            assert batch and all(c.work and c.lease for c in batch)
            assert {c.work.id: stored[c.work.id] for c in batch} == {
                c.work.id: token_hash(c.lease.token) for c in batch
            }

        with ActionProposalStore(engine, clock, hold_connection=True) as store:
            for _ in range(3):
                batch = store.claim_next("w1", LEASE_MS, limit=60)
                assert len(batch) == 60
                holds_own(batch)
                done += [c.work.id for c in batch if c.work]
                settled, batch = store.settle_many_and_claim_next(
                    succeeded(batch), "w1", LEASE_MS, 51
                )
                assert [r.outcome for r in settled] == ["settled"] * 60 and len(batch) == 51
                holds_own(batch)
                done += [c.work.id for c in batch if c.work]
                assert [r.outcome for r in store.settle_many(succeeded(batch))] == ["settled"] * 51
        assert sorted(done) == sorted(ids[: 3 * 111]) and len(set(done)) == len(done)
        seen = states(other)
        assert [seen[pid] for pid in ids[: 3 * 111]] == ["succeeded"] * (3 * 111)
        other.dispose()
    finally:
        engine.dispose()
