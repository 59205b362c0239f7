"""Batched claims and settles (issue 15) on every dialect: the guarantees of a single lease."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import FrozenInstanceError, replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import func, select
from sqlalchemy.exc import DBAPIError

from agora_cli.store._clock import ManualClock
from agora_cli.store._engine import run_pipelined
from agora_cli.store._errors import InvalidInput
from agora_cli.store._proposals import (
    ActionProposalStore,
    NewProposal,
    Scope,
    Settlement,
    claim_next_proposals,
)
from agora_cli.store._proposals.model import Lease, Work, fast_maker
from agora_cli.store._proposals.queries import fence_mysql, next_due_probed
from agora_cli.store._schema import action_proposal, thread

ALICE = Scope(None, "alice", "t1")


@pytest.fixture(params=[False, True], ids=["pooled", "held"])
def store(engine: Any, clock: ManualClock, request: Any) -> Iterator[ActionProposalStore]:
    """Each test twice: a store that checks a connection out per step, and a worker's store
    that holds one (on MariaDB its batch settle then commits in the UPDATE's round trip, under
    the server's own test of the rows changed)."""
    with engine.begin() as conn:
        conn.execute(
            thread.insert().values(
                id="t1", actor_ref="alice", title="t", created_at=0, updated_at=0
            )
        )
    with ActionProposalStore(engine, clock, hold_connection=request.param) as store:
        yield store


def queue(store: ActionProposalStore, clock: ManualClock, n: int, run: str = "r") -> list[str]:
    ids = []
    for i in range(n):
        pid = store.create(
            NewProposal(ALICE, "refund", {"order": i}, run_id=run, tool_call_id=f"c{i:03d}")
        ).proposal.id
        assert store.decide(pid, ALICE, "approved", "bob").outcome == "applied"
        clock.advance(1)  # queued one after the other: discovery order is creation order
        ids.append(pid)
    return ids


def test_a_batch_claims_the_oldest_with_a_lease_each(
    store: ActionProposalStore, clock: ManualClock
) -> None:
    ids = queue(store, clock, 5)
    batch = store.claim_next("w1", 60_000, limit=3)
    assert [c.work.id for c in batch if c.work] == ids[:3]
    assert all(c.outcome == "claimed" and c.lease for c in batch)
    tokens = {c.lease.token for c in batch if c.lease}
    assert len(tokens) == 3 and all(c.lease and c.lease.generation == 1 for c in batch)
    assert all(c.work and c.work.attempts == 1 and c.work.input_value for c in batch)
    rest = store.claim_next("w2", 60_000, limit=10)
    assert [c.work.id for c in rest if c.work] == ids[3:]
    assert store.claim_next("w3", 60_000, limit=10) == []
    # Every lease works on its own: renew one, settle them all.
    first = batch[0]
    assert first.lease and first.work
    assert store.renew(first.work.id, first.lease.token, 1, 60_000).outcome == "renewed"
    done = [
        Settlement(c.work.id, c.lease.token, c.lease.generation, "succeeded", {"n": i})
        for i, c in enumerate(batch + rest)
        if c.work and c.lease
    ]
    assert [r.outcome for r in store.settle_many(done)] == ["settled"] * 5
    assert [r.outcome for r in store.settle_many(done)] == ["lost"] * 5  # settled already


def test_stale_leases_inside_a_batch_settle_are_lost_and_block_nothing(
    store: ActionProposalStore, clock: ManualClock, engine: Any
) -> None:
    queue(store, clock, 4)
    a, b, c, d = store.claim_next("w1", 60_000, limit=4)
    assert a.lease and a.work and b.lease and b.work and c.lease and c.work and d.lease and d.work
    results = store.settle_many(
        [
            Settlement(a.work.id, a.lease.token, a.lease.generation, "succeeded"),
            Settlement(b.work.id, "not-the-token", b.lease.generation, "succeeded"),
            Settlement(c.work.id, c.lease.token, c.lease.generation + 1, "failed", None, "x"),
            Settlement(d.work.id, d.lease.token, d.lease.generation, "failed", None, "boom"),
        ]
    )
    assert [r.outcome for r in results] == ["settled", "lost", "lost", "settled"]
    with engine.connect() as conn:
        states = dict(
            conn.execute(select(action_proposal.c.id, action_proposal.c.execution_state)).all()
        )
    assert (states[a.work.id], states[b.work.id], states[c.work.id], states[d.work.id]) == (
        "succeeded",
        "running",
        "running",
        "failed",
    )


def test_a_batch_that_half_expires_is_recovered_with_new_generations(
    store: ActionProposalStore, clock: ManualClock
) -> None:
    queue(store, clock, 4)
    first = store.claim_next("w1", 10_000, limit=2)
    clock.advance(5_000)
    second = store.claim_next("w2", 60_000, limit=2)
    clock.advance(6_000)  # the first batch's leases have expired; the second's have not
    again = store.claim_next("w3", 60_000, limit=4)
    assert [c.outcome for c in again] == ["recovered", "recovered"]
    assert {c.work.id for c in again if c.work} == {c.work.id for c in first if c.work}
    assert all(c.lease and c.lease.generation == 2 for c in again)
    assert all(c.work and c.work.attempts == 2 for c in again)
    keys = {c.work.idempotency_key for c in first if c.work}
    assert {c.work.idempotency_key for c in again if c.work} == keys  # same key across attempts
    stale = [
        Settlement(c.work.id, c.lease.token, c.lease.generation, "succeeded")
        for c in first
        if c.work and c.lease
    ]
    assert [r.outcome for r in store.settle_many(stale)] == ["lost", "lost"]
    fresh = [
        Settlement(c.work.id, c.lease.token, c.lease.generation, "succeeded")
        for c in [*again, *second]
        if c.work and c.lease
    ]
    assert [r.outcome for r in store.settle_many(fresh)] == ["settled"] * 4


class Taker:
    """A batch worker's claim of up to ``limit``: ``claim_next``, or a step
    (``settle_many_and_claim_next``) that settles a lease of a job claimed by scope (its lease
    far from due, so it never joins the due rows) and claims."""

    def __init__(self, store: ActionProposalStore, clock: ManualClock, mode: str) -> None:
        self.store, self.mode, self.carried = store, mode, []
        if mode == "step":
            for pid in queue(store, clock, 3, "carriers"):
                claimed = store.claim(pid, ALICE, "carrier", 3_600_000)
                assert claimed.lease is not None
                self.carried.append(Settlement(pid, claimed.lease.token, 1, "succeeded"))

    def __call__(self, limit: int) -> list[tuple[str, str | None]]:
        if self.mode == "step":
            settled, batch = self.store.settle_many_and_claim_next(
                [self.carried.pop()], "w1", 60_000, limit
            )
            assert [r.outcome for r in settled] == ["settled"]
        else:
            batch = self.store.claim_next("w1", 60_000, limit=limit)
        return [(c.outcome, c.work.id if c.work else None) for c in batch]


def leased(store: ActionProposalStore, clock: ManualClock, run: str, lease_ms: int) -> str:
    """A job queued now and claimed by scope at once: running, its lease due ``lease_ms`` on."""
    (pid,) = queue(store, clock, 1, run)
    assert store.claim(pid, ALICE, "w0", lease_ms).outcome == "claimed"
    return pid


@pytest.mark.parametrize("mode", ["claim_next", "step"])
def test_a_due_lease_older_than_a_full_batch_of_queued_work_is_taken_first(
    store: ActionProposalStore, clock: ManualClock, mode: str
) -> None:
    """MySQL/MariaDB read the queued rows first and the due leases only when a probe says one
    may be among the oldest: here the queued rows alone would fill the batch."""
    take = Taker(store, clock, mode)
    a = leased(store, clock, "r0", 1_000)  # due 1 s from now
    clock.advance(2_000)
    later = queue(store, clock, 3, "r1")  # queued after a's lease expired
    assert take(2) == [("recovered", a), ("claimed", later[0])]
    assert take(5) == [("claimed", later[1]), ("claimed", later[2])]


@pytest.mark.parametrize("mode", ["claim_next", "step"])
def test_a_due_lease_newer_than_a_full_batch_of_queued_work_waits_its_turn(
    store: ActionProposalStore, clock: ManualClock, mode: str
) -> None:
    take = Taker(store, clock, mode)
    first = queue(store, clock, 2, "r2")
    a = leased(store, clock, "r3", 10)  # due after both were queued
    clock.advance(100)
    assert take(2) == [("claimed", first[0]), ("claimed", first[1])]
    assert take(2) == [("recovered", a)]
    assert take(2) == []


@pytest.mark.parametrize("mode", ["claim_next", "step"])
def test_a_batch_that_queued_work_leaves_room_in_takes_a_newer_due_lease(
    store: ActionProposalStore, clock: ManualClock, mode: str
) -> None:
    take = Taker(store, clock, mode)
    (first,) = queue(store, clock, 1, "r4")
    a = leased(store, clock, "r5", 10)
    clock.advance(100)  # a's lease is due, and newer than the one queued row
    assert take(5) == [("claimed", first), ("recovered", a)]
    (last,) = queue(store, clock, 1, "r6")
    assert take(5) == [("claimed", last)]


@pytest.mark.parametrize("mode", ["claim_next", "step"])
def test_a_due_lease_as_old_as_the_newest_queued_row_goes_by_id(
    store: ActionProposalStore, clock: ManualClock, mode: str
) -> None:
    take = Taker(store, clock, mode)
    a = leased(store, clock, "r8", 50)
    clock.advance(50)  # now is a's lease expiry: b is queued at the same discovery time
    (b,) = queue(store, clock, 1, "r7")
    assert a < b  # the lease goes first by id: the queued row alone would fill the batch
    assert take(1) == [("recovered", a)]
    assert take(1) == [("claimed", b)]


def test_the_probed_read_is_for_dialects_that_read_discovery_rows_as_json() -> None:
    """The probe rides as a column after the one JSON column ``due_rows`` reads back: a dialect
    that reads its rows column by column would take the probe for a row's field."""
    reads = next_due_probed("mysql", 10)
    assert "SKIP LOCKED" in reads.queued and "AS running_due" in reads.queued
    assert "SKIP LOCKED" not in reads.running and "running_due" not in reads.running
    for dialect in ("postgresql", "sqlite"):
        with pytest.raises(ValueError, match="does not read discovery rows as JSON"):
            next_due_probed(dialect, 10)


def test_settle_and_claim_next_is_one_step(store: ActionProposalStore, clock: ManualClock) -> None:
    ids = queue(store, clock, 3)
    (one,) = store.claim_next("w1", 60_000, limit=1)
    assert one.lease and one.work
    settled, following = store.settle_and_claim_next(
        Settlement(one.work.id, one.lease.token, one.lease.generation, "succeeded"), "w1", 60_000, 2
    )
    assert settled.outcome == "settled"
    assert [c.work.id for c in following if c.work] == ids[1:]


def test_bad_batches_are_refused_before_any_sql(
    store: ActionProposalStore, clock: ManualClock, engine: Any
) -> None:
    queue(store, clock, 1)
    for limit in (0, 1001, True):
        with pytest.raises(InvalidInput):
            store.claim_next("w", 1_000, limit=limit)  # type: ignore[arg-type]
    ok = Settlement("p", "t", 1, "succeeded")
    for bad in ([], [ok] * 1001, [ok, ok], [Settlement("p", "t", 0, "succeeded")]):
        with pytest.raises(InvalidInput):
            store.settle_many(bad)
    with pytest.raises(InvalidInput):
        store.settle_many([Settlement("p", "t", 1, "done")])  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        store.settle_many([Settlement("p", "t", 1, "succeeded", {"x": float("nan")})])
    with engine.connect() as conn:
        assert (
            conn.execute(
                select(func.count()).where(action_proposal.c.execution_state == "running")
            ).scalar()
            == 0
        )


def test_the_library_function_in_the_callers_transaction(
    store: ActionProposalStore, clock: ManualClock, engine: Any
) -> None:
    queue(store, clock, 3)
    with engine.begin() as conn:
        got = claim_next_proposals(conn, worker_id="w", lease_ms=1_000, limit=2, clock=clock)
        assert len(got) == 2
        conn.rollback()  # the caller owns the transaction: nothing is claimed
    assert len(store.claim_next("w", 1_000, limit=5)) == 3


def test_settle_and_claim_next_with_a_lost_lease_still_claims(
    store: ActionProposalStore, clock: ManualClock
) -> None:
    ids = queue(store, clock, 2)
    (one,) = store.claim_next("w1", 60_000, limit=1)
    assert one.lease and one.work
    # with a result: on PostgreSQL the unkeyed UPDATE changes nothing, the sealed one neither
    stale = Settlement(one.work.id, "not-the-token", one.lease.generation, "succeeded", {"n": 1})
    settled, following = store.settle_and_claim_next(stale, "w1", 60_000, 5)
    assert settled.outcome == "lost"
    assert [c.work.id for c in following if c.work] == ids[1:]
    assert store.settle(one.work.id, one.lease.token, one.lease.generation, "failed", None, "x")


def test_settle_many_and_claim_next_drains_a_queue_exactly_once(
    store: ActionProposalStore, clock: ManualClock, engine: Any
) -> None:
    """A batch worker's loop: each step settles the batch it ran and claims the next; every job
    is claimed once, in discovery order, and settled to its own result."""
    ids = queue(store, clock, 7)
    batch = store.claim_next("w1", 60_000, limit=3)
    seen = [c.work.id for c in batch if c.work]
    steps = 0
    while batch:
        done = [
            Settlement(c.work.id, c.lease.token, c.lease.generation, "succeeded", {"id": c.work.id})
            for c in batch
            if c.work and c.lease
        ]
        settled, batch = store.settle_many_and_claim_next(done, "w1", 60_000, 3)
        assert [r.outcome for r in settled] == ["settled"] * len(done)
        assert all(c.outcome == "claimed" and c.lease and c.lease.generation == 1 for c in batch)
        seen += [c.work.id for c in batch if c.work]
        steps += 1
    assert seen == ids and steps == 3
    with engine.connect() as conn:
        rows = conn.execute(
            select(
                action_proposal.c.id, action_proposal.c.execution_state, action_proposal.c.result
            )
        ).all()
    assert {row.id: (row.execution_state, json.loads(row.result)) for row in rows} == {
        pid: ("succeeded", {"id": pid}) for pid in ids
    }


def test_settle_many_and_claim_next_with_lost_leases_settles_the_rest_and_still_claims(
    store: ActionProposalStore, clock: ManualClock, engine: Any
) -> None:
    """A lost lease in the batch is ``lost`` and blocks neither the others' settles nor the
    claim (MySQL/MariaDB: the one fenced UPDATE changed fewer rows, nothing of it was committed,
    and the step ran again settling each lease on its own)."""
    ids = queue(store, clock, 5)
    a, b, c = store.claim_next("w1", 60_000, limit=3)
    assert a.lease and a.work and b.lease and b.work and c.lease and c.work
    settled, following = store.settle_many_and_claim_next(
        [
            Settlement(a.work.id, a.lease.token, a.lease.generation, "succeeded", {"a": 1}),
            Settlement(b.work.id, "not-the-token", b.lease.generation, "succeeded", {"b": 1}),
            Settlement(c.work.id, c.lease.token, c.lease.generation, "failed", None, "boom"),
        ],
        "w1",
        60_000,
        5,
    )
    assert [r.outcome for r in settled] == ["settled", "lost", "settled"]
    assert [x.work.id for x in following if x.work] == ids[3:]
    with engine.connect() as conn:
        states = dict(
            conn.execute(select(action_proposal.c.id, action_proposal.c.execution_state)).all()
        )
    assert [states[pid] for pid in ids] == ["succeeded", "running", "failed", "running", "running"]
    # the lost one is still b's own lease: settled with it, once
    assert store.settle(b.work.id, b.lease.token, b.lease.generation, "succeeded")


def test_settle_many_and_claim_next_refuses_bad_input_before_any_sql(
    store: ActionProposalStore, clock: ManualClock, engine: Any
) -> None:
    queue(store, clock, 2)
    (one,) = store.claim_next("w1", 60_000, limit=1)
    assert one.work and one.lease
    ok = Settlement(one.work.id, one.lease.token, one.lease.generation, "succeeded")
    bad_calls: list[tuple[Any, Any, Any]] = [
        ([], 60_000, 1),
        ([ok, ok], 60_000, 1),
        ([ok], 60_000, 0),
        ([ok], 60_000, 1001),
        ([ok], 0, 1),
        ([replace(ok, result={"x": float("inf")})], 60_000, 1),
    ]
    for settlements, lease_ms, limit in bad_calls:
        with pytest.raises(InvalidInput):
            store.settle_many_and_claim_next(settlements, "w1", lease_ms, limit)
    with engine.connect() as conn:
        states = conn.execute(select(action_proposal.c.execution_state)).scalars().all()
    assert sorted(states) == ["queued", "running"]  # nothing settled, nothing claimed


def test_pipelined_statements_answer_in_order_and_fail_together(
    store: ActionProposalStore, clock: ManualClock, engine: Any
) -> None:
    """``run_pipelined``: one result per statement, in order; on PostgreSQL statements sent
    together are one implicit transaction even in autocommit (what settle_and_claim_next's
    retry relies on): a failing one undoes those before it."""
    (pid,) = queue(store, clock, 1)
    count = "SELECT count(*) FROM agent_action_proposal WHERE version > 100"
    bump = "UPDATE agent_action_proposal SET version = version + 100"
    with engine.begin() as conn:
        first, second = run_pipelined(conn, [(bump, ()), (count, ())])
        assert (first.rowcount, [tuple(r) for r in second.rows]) == (1, [(1,)])
        conn.rollback()
    if engine.dialect.name != "postgresql":
        return
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        with pytest.raises(DBAPIError):
            run_pipelined(conn, [(bump, ()), ("SELECT 1 / 0", ())])
    with engine.connect() as conn:
        version = conn.execute(
            select(action_proposal.c.version).where(action_proposal.c.id == pid)
        ).scalar()
    assert version is not None and version < 100


def test_leases_crossed_inside_a_batch_are_lost(
    store: ActionProposalStore, clock: ManualClock, engine: Any
) -> None:
    """Each settlement is fenced by its own proposal's token and generation: two leases'
    tokens swapped, or one proposal given another's generation, settle nothing."""
    queue(store, clock, 3)
    a, b, c = store.claim_next("w1", 60_000, limit=3)
    assert a.lease and a.work and b.lease and b.work and c.lease and c.work
    results = store.settle_many(
        [
            Settlement(a.work.id, b.lease.token, b.lease.generation, "succeeded", {"r": 1}),
            Settlement(b.work.id, a.lease.token, a.lease.generation, "succeeded", {"r": 1}),
            Settlement(c.work.id, c.lease.token, c.lease.generation, "succeeded", {"r": 1}),
        ]
    )
    assert [r.outcome for r in results] == ["lost", "lost", "settled"]
    with engine.connect() as conn:
        states = dict(
            conn.execute(select(action_proposal.c.id, action_proposal.c.execution_state)).all()
        )
    assert [states[x.work.id] for x in (a, b, c)] == ["running", "running", "succeeded"]


_HASHES = st.sampled_from(["0" * 64, "a" * 64, "0a" * 32])
_GENERATIONS = st.integers(1, 2**63 - 1)
_SHORT = st.text(alphabet=":ab0 ", min_size=1, max_size=6)
# ids that hold what a fence's tail looks like (":<hash>:<generation>"), to try to collide
_IDS = _SHORT | st.builds(lambda a, h, g: f"{a}:{h}:{g}", _SHORT, _HASHES, _GENERATIONS)


@given(
    st.lists(
        st.tuples(_IDS, _HASHES, _GENERATIONS),
        min_size=2,
        max_size=2,
        unique=True,
    )
)
def test_a_fence_reads_back_one_way_only(leases: list[tuple[str, str, int]]) -> None:
    """MySQL/MariaDB's batch settle compares ``id:hash:generation`` texts: two different
    leases never make the same text, whatever their ids hold (colons included)."""
    (one, other) = leases
    assert fence_mysql(*one) != fence_mysql(*other)


def test_a_claim_built_fast_is_the_claim_its_class_builds() -> None:
    """``fast_maker`` (the batch claims' constructor) makes what the dataclass makes: equal,
    hashed alike, frozen, and ``replace`` still works on it."""
    values = ("p1", "k", None, "alice", "t1", "r", "c", "refund", "{}", 1)
    made, built = fast_maker(Work)(*values), Work(*values)
    assert made == built and hash(made) == hash(built) and repr(made) == repr(built)
    with pytest.raises(FrozenInstanceError):
        made.attempts = 2  # type: ignore[misc]
    assert replace(made, attempts=2) == Work(*values[:-1], 2)
    for make in (fast_maker(Lease), Lease):  # every field, in order: refused as the class does
        with pytest.raises(TypeError):
            make("token", 1)
        with pytest.raises(TypeError):
            make("token", 1, 2, 3)


def test_a_due_rows_claim_built_in_one_call_is_the_claim_the_classes_build() -> None:
    """``claim_maker`` (a MySQL/MariaDB batch's claims): a due row's claim holds its work with
    one more attempt, a lease of one more generation, ``recovered`` from ``running`` only —
    equal to the dataclasses' own, frozen; a row without the columns it needs is refused."""
    from agora_cli.store._proposals.model import ClaimResult, claim_maker
    from agora_cli.store._proposals.queries import Due

    make = claim_maker(Due._fields)
    work = ("p1", "k", "t-a", "alice", "t1", None, "c", "refund", '{"x": 1}')
    for state, outcome in (("queued", "claimed"), ("running", "recovered")):
        row = Due(*work, 3, 9, 4, state, 1234)  # attempts, version, generation
        made = make("tok", 5000, row)
        built = ClaimResult(outcome, Lease("tok", 5, 5000), Work(*work, 4))
        assert made == built and repr(made) == repr(built) and hash(made) == hash(built)
        with pytest.raises(FrozenInstanceError):
            made.lease.generation = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        claim_maker(Due._fields[:-2])


def test_due_rows_read_from_json_are_the_due_rows_their_values_make() -> None:
    """``due_rows`` on a dialect that reads each discovery row as one JSON array (MySQL/MariaDB,
    the rows built in C): each row is the ``Due`` its values make, every field in place, the
    probe column after it ignored; a row with a column too few or too many is refused whole."""
    import json

    from agora_cli.store._proposals.queries import Due, due_rows

    values = [
        ["p1", "k1", None, "alice", "t1", None, "c1", "refund", '{"x": 1}', 0, 1, 0, "queued", 5],
        ["p2", "k2", "t-a", "bob", "t2", "r2", None, "send", "[]", 2, 7, 3, "running", 4],
    ]
    found = [(json.dumps(v), 99) for v in values]
    rows = due_rows("mysql", found)
    assert rows == [Due(*v) for v in values]
    assert all(type(row) is Due for row in rows)
    assert [row.discovery_at for row in rows] == [5, 4] and rows[1].tenant_ref == "t-a"
    assert due_rows("mysql", []) == []
    for wrong in (values[0][:-1], [*values[0], 1]):
        with pytest.raises(ValueError, match="not one JSON array"):
            due_rows("mysql", [found[1], (json.dumps(wrong), None)])


def test_a_settlement_is_the_dataclass_it_was() -> None:
    """``Settlement``'s own ``__init__`` (one dict for its fields): positional and keyword
    arguments, defaults, equality, ``replace``, frozen."""
    one = Settlement("p1", "tok", 2, "failed", None, "boom")
    assert one == Settlement(
        proposal_id="p1", token="tok", generation=2, outcome="failed", error="boom"
    )
    assert repr(Settlement("p", "t", 1, "succeeded")) == (
        "Settlement(proposal_id='p', token='t', generation=1, outcome='succeeded', "
        "result=None, error=None)"
    )
    assert replace(one, outcome="succeeded", error=None) == Settlement("p1", "tok", 2, "succeeded")
    assert hash(one) == hash(Settlement("p1", "tok", 2, "failed", None, "boom"))
    with pytest.raises(FrozenInstanceError):
        one.token = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Settlement("p1", "tok")  # type: ignore[call-arg]


def test_a_batch_of_tokens_is_distinct_urlsafe_and_hashed_as_one_token_is() -> None:
    """``new_tokens`` (a batch claim's leases): each of ``token_urlsafe(32)``'s shape — 43
    characters of the base64url alphabet — none repeated, every character of the alphabet
    reached in every place; ``token_hash`` (remembering recent tokens) is SHA-256 hex."""
    import hashlib
    import re

    from agora_cli.store._proposals.model import new_tokens, token_hash

    tokens = new_tokens(1000)
    assert len(tokens) == len(set(tokens)) == 1000
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{43}", t) for t in tokens)
    for place in (0, 21, 42):  # the first, a middle, the last character: each random
        assert len({t[place] for t in tokens}) > 50
    assert new_tokens(1) != new_tokens(1) and len(new_tokens(1)) == 1
    for token in [*tokens[:3], "a", "é"]:
        assert token_hash(token) == hashlib.sha256(token.encode()).hexdigest()
        assert token_hash(token) == token_hash(token)


# ids a runtime's own rows may hold (the store decides the ids it creates; a row written by
# another writer is read as it is): what a driver must quote, and what a ``%`` format reads.
_HOSTILE_IDS = [
    "it's",
    'say "hi"',
    "back\\slash",
    "trail\\",
    "%s",
    "%(x)s 100%",
    "semi; DROP TABLE agent_action_proposal; --",
    "tab\there",
    "zh-中文-é",
    "end'",
]


@pytest.mark.parametrize("via", ["settle_many", "step"])
@pytest.mark.parametrize("held", [False, True], ids=["pooled", "held"])
@pytest.mark.parametrize("sql_mode", ["", "NO_BACKSLASH_ESCAPES"], ids=["default", "no-bs"])
def test_ids_and_results_a_driver_must_quote_are_claimed_and_settled_exactly(
    db_url: str, dialect: str, clock: ManualClock, held: bool, sql_mode: str, via: str
) -> None:
    """A batch's statements quote every id and value (MySQL/MariaDB: rendered with the driver's
    own quoting, each id once): ids and results with quotes, backslashes, ``%`` and SQL are
    claimed with their own leases and settled to exactly what was given, the other rows
    untouched — also under ``NO_BACKSLASH_ESCAPES``, where a backslash is no escape."""
    from sqlalchemy import event

    from agora_cli.store._engine import open_engine

    if sql_mode and dialect != "mysql":
        pytest.skip("sql_mode is MySQL/MariaDB's")
    engine = open_engine(db_url)
    if sql_mode:

        @event.listens_for(engine, "connect")
        def _mode(dbapi_conn: Any, _record: Any) -> None:
            with dbapi_conn.cursor() as cur:
                cur.execute(f"SET SESSION sql_mode = CONCAT(@@sql_mode, ',{sql_mode}')")

    try:
        ids = [f"{n:02d}-{text}" for n, text in enumerate(_HOSTILE_IDS)]
        with engine.begin() as conn:
            conn.execute(
                thread.insert().values(
                    id="t1", actor_ref="alice", title="t", created_at=0, updated_at=0
                )
            )
            conn.execute(
                action_proposal.insert(),
                [
                    {
                        "id": pid,
                        "idempotency_key": f"k{n}",
                        "actor_ref": "alice",
                        "thread_id": "t1",
                        "tool_name": "refund",
                        "input": json.dumps({"n": n}),
                        "decision": "approved",
                        "decided_by": "bob",
                        "decided_at": 1,
                        "execution_state": "queued",
                        "generation": 0,
                        "attempts": 0,
                        "version": 1,
                        "created_at": 1,
                        "updated_at": 1,
                        "discovery_state": "queued",
                        "discovery_at": 1 + n,
                    }
                    for n, pid in enumerate(ids)
                ],
            )
            # a bystander whose id a broken quoting could match: never claimed, never changed
            conn.execute(
                action_proposal.insert().values(
                    id="it",
                    idempotency_key="kb",
                    actor_ref="alice",
                    thread_id="t1",
                    tool_name="refund",
                    input="{}",
                    decision="pending",
                    execution_state="none",
                    generation=0,
                    attempts=0,
                    version=1,
                    created_at=1,
                    updated_at=1,
                )
            )
        store = ActionProposalStore(engine, clock, hold_connection=held)
        batch = store.claim_next("w'1\\", 60_000, limit=len(ids) + 5)
        assert [c.work.id for c in batch if c.work] == ids
        assert len({c.lease.token for c in batch if c.lease}) == len(ids)
        results = [{"it's": "a \\ b", "pct": "100% %s"}, None, {"sql": "'; --"}]
        outcomes = ["succeeded", "failed"]
        done = [
            Settlement(
                c.work.id,
                c.lease.token,
                c.lease.generation,
                outcomes[n % 2],
                results[n % 3] if n % 2 == 0 else None,
                None if n % 2 == 0 else f"broke: it's \\ 50% at {c.work.id}",
            )
            for n, c in enumerate(batch)
            if c.work and c.lease
        ]
        if via == "step":  # settled with the next claim's reads (nothing left to claim)
            settled, following = store.settle_many_and_claim_next(done, "w'1\\", 60_000, 5)
            assert [r.outcome for r in settled] == ["settled"] * len(ids) and following == []
        else:
            assert [r.outcome for r in store.settle_many(done)] == ["settled"] * len(ids)
        assert [r.outcome for r in store.settle_many(done)] == ["lost"] * len(ids)
        store.close()
        with engine.connect() as conn:
            rows = {
                row.id: row
                for row in conn.execute(
                    select(
                        action_proposal.c.id,
                        action_proposal.c.execution_state,
                        action_proposal.c.result,
                        action_proposal.c.error,
                        action_proposal.c.lease_owner,
                        action_proposal.c.version,
                    )
                )
            }
        assert rows["it"].execution_state == "none" and rows["it"].version == 1
        for item in done:
            row = rows[item.proposal_id]
            assert row.execution_state == item.outcome and row.error == item.error
            stored = None if row.result is None else json.loads(row.result)
            assert stored == item.result and row.lease_owner == "w'1\\"
    finally:
        engine.dispose()
