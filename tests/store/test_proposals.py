"""The action-proposal store on every dialect: identity, scope, decisions, leases, discovery."""

from __future__ import annotations

import json
from typing import Any

import pytest
from helpers import T0, snapshot
from sqlalchemy import event, select

from agora_cli.store._clock import ManualClock
from agora_cli.store._errors import InvalidInput, NotFound
from agora_cli.store._proposals import (
    ID_PREFIX,
    ActionProposalStore,
    NewProposal,
    Scope,
    backfill_discovery_index,
    claim_next_proposal,
    count_legacy_proposals,
    decide_proposal,
    default_idempotency_key,
    find_proposal,
    proposal_id,
    utf16_units,
)
from agora_cli.store._schema import action_proposal, message, thread

ALICE = Scope(None, "alice", "t1")
ACME = Scope("acme", "alice", "t2")


def add_thread(
    engine: Any, thread_id: str, actor: str = "alice", tenant: str | None = None
) -> None:
    with engine.begin() as conn:
        conn.execute(
            thread.insert().values(
                id=thread_id,
                actor_ref=actor,
                tenant_ref=tenant,
                title="t",
                created_at=0,
                updated_at=0,
            )
        )


@pytest.fixture
def store(engine: Any, clock: ManualClock) -> ActionProposalStore:
    add_thread(engine, "t1")
    add_thread(engine, "t2", tenant="acme")
    return ActionProposalStore(engine, clock)


def new(
    call: str = "c1", scope: Scope = ALICE, expires_at: int | None = None, **kw: Any
) -> NewProposal:
    kw.setdefault("input", {"order": 7, "amount": 12.5, "note": "naïve ☃"})
    kw.setdefault("card", {"title": "Refund order 7"})
    return NewProposal(
        scope=scope, tool_name="refund", run_id="r1", tool_call_id=call, expires_at=expires_at, **kw
    )


def raw_row(engine: Any, pid: str) -> dict[str, Any]:
    with engine.connect() as conn:
        row = conn.execute(select(action_proposal).where(action_proposal.c.id == pid)).mappings()
        return dict(row.one())


def approved(store: ActionProposalStore, call: str = "c1", scope: Scope = ALICE) -> str:
    pid = store.create(new(call, scope)).proposal.id
    assert store.decide(pid, scope, "approved", "bob").outcome == "applied"
    return pid


# --- identity ---------------------------------------------------------------------------------


def test_proposal_id_is_a_fixed_prefix_and_a_sha256_digest() -> None:
    pid = proposal_id("r1", "c1")
    assert pid.startswith(ID_PREFIX)
    assert len(pid) == len(ID_PREFIX) + 64
    assert int(pid[len(ID_PREFIX) :], 16) >= 0
    assert pid == proposal_id("r1", "c1")
    assert pid != proposal_id("r1", "c2")
    assert proposal_id("a:b", "c") != proposal_id("a", "b:c")
    assert default_idempotency_key("r1", "c1") == "r1:c1"


def test_create_then_existing_then_conflict(store: ActionProposalStore, engine: Any) -> None:
    first = store.create(new())
    assert first.outcome == "created"
    p = first.proposal
    assert p.id == proposal_id("r1", "c1")
    assert p.idempotency_key == "r1:c1"
    assert (p.decision, p.version, p.generation, p.attempts) == ("pending", 0, 0, 0)
    assert p.created_at == p.updated_at == T0
    assert p.input_value == {"order": 7, "amount": 12.5, "note": "naïve ☃"}
    assert store.get(p.id, ALICE) == p

    again = store.create(new())
    assert again.outcome == "existing"
    assert again.proposal == p

    before = raw_row(engine, p.id)
    changed = store.create(new(input={"order": 8}))
    assert changed.outcome == "conflict"
    assert changed.proposal == p
    other_key = store.create(new(idempotency_key="another-key"))
    assert other_key.outcome == "conflict"
    same_key_other_id = store.create(new(id="ap_other", idempotency_key="r1:c1"))
    assert same_key_other_id.outcome == "conflict"
    assert raw_row(engine, p.id) == before
    with engine.connect() as conn:
        assert conn.execute(select(action_proposal.c.id)).scalars().all() == [p.id]


def test_create_with_an_explicit_id_and_no_run_defaults_the_key_to_the_id(
    store: ActionProposalStore,
) -> None:
    made = store.create(NewProposal(ALICE, "refund", {"x": 1}, id="custom-1"))
    assert (made.outcome, made.proposal.id, made.proposal.idempotency_key) == (
        "created",
        "custom-1",
        "custom-1",
    )
    with pytest.raises(InvalidInput, match="run_id and tool_call_id"):
        store.create(NewProposal(ALICE, "refund", {"x": 1}))


def test_create_in_a_missing_thread_is_not_found(store: ActionProposalStore) -> None:
    with pytest.raises(NotFound, match="thread 'nope'"):
        store.create(new(scope=Scope(None, "alice", "nope")))


def test_identity_limit_counts_utf16_units(store: ActionProposalStore, engine: Any) -> None:
    assert utf16_units("😀") == 2
    assert utf16_units("é") == 1
    fits = "a" * 253 + "😀"  # 255 units
    too_long = "a" * 254 + "😀"  # 256 units, only 255 code points
    assert utf16_units(fits) == 255 and len(too_long) == 255
    made = store.create(NewProposal(ALICE, "refund", {}, id=fits, idempotency_key=fits))
    assert made.outcome == "created"
    assert store.get(fits, ALICE).id == fits
    with pytest.raises(InvalidInput, match="id is 256 UTF-16 code units"):
        store.create(NewProposal(ALICE, "refund", {}, id=too_long))
    with pytest.raises(InvalidInput, match="idempotency_key is 256 UTF-16 code units"):
        store.create(NewProposal(ALICE, "refund", {}, id="x", idempotency_key=too_long))
    with pytest.raises(InvalidInput, match="actor_ref is 256"):
        Scope(None, too_long, "t1")
    with pytest.raises(InvalidInput, match="tenant_ref must be a non-empty"):
        Scope("", "alice", "t1")
    with pytest.raises(InvalidInput, match="worker_id is 256"):
        store.claim_next(too_long, 1000)
    with pytest.raises(InvalidInput, match="decided_by is 256"):
        store.decide(fits, ALICE, "approved", too_long)


def test_invalid_input_is_rejected_before_any_sql(store: ActionProposalStore, engine: Any) -> None:
    statements: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        bad_calls = [
            lambda: store.get("", ALICE),
            lambda: store.list(ALICE, limit=0),
            lambda: store.list(ALICE, limit=1001),
            lambda: store.list(ALICE, decision="maybe"),
            lambda: store.decide("x", ALICE, "maybe", "bob"),
            lambda: store.decide("x", ALICE, "approved", ""),
            lambda: store.claim("x", ALICE, "w", 0),
            lambda: store.renew("x", "", 1, 1000),
            lambda: store.settle("x", "tok", 0, "succeeded"),
            lambda: store.settle("x", "tok", 1, "done"),
            lambda: store.expire(0),
            lambda: store.expire(1001),
            lambda: store.create(new(input=float("nan"))),
            lambda: store.create(NewProposal(ALICE, "", {}, id="x")),
            lambda: store.backfill(0),
        ]
        for call in bad_calls:
            with pytest.raises(InvalidInput):
                call()
    finally:
        event.remove(engine, "before_cursor_execute", record)
    assert statements == []


# --- scope ------------------------------------------------------------------------------------


def test_a_wrong_scope_looks_exactly_like_not_found(store: ActionProposalStore) -> None:
    pid = store.create(new(scope=ACME)).proposal.id
    wrong = [
        Scope(None, "alice", "t2"),  # NULL tenant vs 'acme'
        Scope("ACME", "alice", "t2"),  # case matters, MySQL too
        Scope("acme ", "alice", "t2"),  # trailing space (MySQL PAD SPACE)
        Scope("other", "alice", "t2"),
        Scope("acme", "mallory", "t2"),
        Scope("acme", "alice", "t1"),
    ]
    for scope in wrong:
        assert store.find(pid, scope) is None
        with pytest.raises(NotFound) as missing:
            store.get(pid, scope)
        with pytest.raises(NotFound) as truly_missing:
            store.get("ap_does_not_exist", scope)
        assert str(missing.value) == str(truly_missing.value).replace("ap_does_not_exist", pid)
        assert store.list(scope) == []
        assert store.decide(pid, scope, "approved", "bob").outcome == "not_found"
        assert store.decide(pid, scope, "approved", "bob").proposal is None
        claim = store.claim(pid, scope, "w", 1000)
        assert (claim.outcome, claim.lease, claim.work) == ("not_found", None, None)
    assert store.get(pid, ACME).decision == "pending"


def test_a_null_tenant_matches_only_null(store: ActionProposalStore) -> None:
    pid = store.create(new()).proposal.id
    assert store.get(pid, ALICE).tenant_ref is None
    assert store.find(pid, Scope("acme", "alice", "t1")) is None


def test_list_is_newest_first_filtered_and_limited(
    store: ActionProposalStore, clock: ManualClock
) -> None:
    ids = []
    for i in range(5):
        ids.append(store.create(new(f"c{i}")).proposal.id)
        clock.advance(1000)
    store.decide(ids[1], ALICE, "approved", "bob")
    store.decide(ids[3], ALICE, "rejected", "bob")
    assert [p.id for p in store.list(ALICE)] == ids[::-1]
    assert [p.id for p in store.list(ALICE, limit=2)] == [ids[4], ids[3]]
    assert [p.id for p in store.list(ALICE, decision="approved")] == [ids[1]]
    assert [p.id for p in store.list(ALICE, decision="pending")] == [ids[4], ids[2], ids[0]]
    assert len(store.list(ALICE, limit=1000)) == 5


# --- decisions --------------------------------------------------------------------------------


def test_applied_approval_queues_the_work_in_the_same_update(
    store: ActionProposalStore, clock: ManualClock, engine: Any
) -> None:
    pid = store.create(new(expires_at=T0 + 60_000)).proposal.id
    clock.advance(5000)
    result = store.decide(pid, ALICE, "approved", "bob", note="looks right")
    assert result.outcome == "applied"
    p = result.proposal
    assert p is not None
    assert (p.decision, p.decided_by, p.decided_at, p.decision_note) == (
        "approved",
        "bob",
        T0 + 5000,
        "looks right",
    )
    assert (p.execution_state, p.discovery_state, p.discovery_at) == ("queued", "queued", T0 + 5000)
    assert p.version == 1
    assert store.get(pid, ALICE) == p
    row = raw_row(engine, pid)
    assert row["version"] == 1 and row["updated_at"] == T0 + 5000


def test_applied_rejection_leaves_the_discovery_index(store: ActionProposalStore) -> None:
    pid = store.create(new(expires_at=T0 + 60_000)).proposal.id
    p = store.decide(pid, ALICE, "rejected", "carol").proposal
    assert p is not None
    assert (p.decision, p.execution_state, p.discovery_state, p.discovery_at) == (
        "rejected",
        None,
        "done",
        None,
    )


@pytest.mark.parametrize("decision", ["approved", "rejected"])
def test_unchanged_keeps_the_original_audit_byte_for_byte(
    store: ActionProposalStore, clock: ManualClock, engine: Any, decision: str
) -> None:
    pid = store.create(new()).proposal.id
    store.decide(pid, ALICE, decision, "bob", note="first")
    before = raw_row(engine, pid)
    clock.advance(60_000)
    again = store.decide(pid, ALICE, decision, "mallory", note="second")
    assert again.outcome == "unchanged"
    assert again.proposal is not None and again.proposal.decided_by == "bob"
    assert raw_row(engine, pid) == before


def test_conflict_writes_nothing(store: ActionProposalStore, engine: Any) -> None:
    pid = store.create(new()).proposal.id
    store.decide(pid, ALICE, "approved", "bob")
    before = raw_row(engine, pid)
    result = store.decide(pid, ALICE, "rejected", "carol")
    assert result.outcome == "conflict"
    assert result.proposal is not None and result.proposal.decision == "approved"
    assert raw_row(engine, pid) == before


def test_deciding_past_expiry_marks_it_expired(
    store: ActionProposalStore, clock: ManualClock, engine: Any
) -> None:
    pid = store.create(new(expires_at=T0 + 1000)).proposal.id
    clock.set(T0 + 999)
    assert store.get(pid, ALICE).decision == "pending"
    clock.set(T0 + 1000)
    result = store.decide(pid, ALICE, "approved", "bob")
    assert result.outcome == "expired"
    row = raw_row(engine, pid)
    assert (row["decision"], row["decided_by"], row["decided_at"], row["execution_state"]) == (
        "expired",
        None,
        None,
        None,
    )
    assert (row["discovery_state"], row["discovery_at"], row["version"]) == ("done", None, 1)
    # Expired stays expired, for either decision, and writes nothing more.
    for decision in ("approved", "rejected"):
        assert store.decide(pid, ALICE, decision, "bob").outcome == "expired"
    assert raw_row(engine, pid) == row


def test_not_found_for_an_unknown_id(store: ActionProposalStore) -> None:
    result = store.decide("ap_nope", ALICE, "approved", "bob")
    assert (result.outcome, result.proposal) == ("not_found", None)


@pytest.fixture
def racing_clock(dialect: str) -> None:
    if dialect == "sqlite":
        pytest.skip("BEGIN IMMEDIATE serialises SQLite writers: the interleaving cannot happen")


class MeddlingClock(ManualClock):
    """Runs ``meddle`` (another connection's write) the first time the store asks the time —
    after the decision's read and before its fenced update."""

    def __init__(self, meddle: Any) -> None:
        super().__init__(T0)
        self.meddle = meddle

    def now_ms(self) -> int:
        if self.meddle is not None:
            meddle, self.meddle = self.meddle, None
            meddle()
        return super().now_ms()


@pytest.mark.parametrize(
    ("theirs", "ours", "outcome"),
    [("rejected", "approved", "conflict"), ("approved", "approved", "unchanged")],
)
def test_a_fenced_decision_that_loses_a_race_rereads_and_redecides(
    store: ActionProposalStore,
    engine: Any,
    racing_clock: None,
    theirs: str,
    ours: str,
    outcome: str,
) -> None:
    pid = store.create(new()).proposal.id

    def meddle() -> None:
        assert ActionProposalStore(engine).decide(pid, ALICE, theirs, "carol").outcome == "applied"

    with engine.begin() as conn:
        result = decide_proposal(
            conn, pid, scope=ALICE, decision=ours, decided_by="bob", clock=MeddlingClock(meddle)
        )
    assert result.outcome == outcome
    row = raw_row(engine, pid)
    assert (row["decision"], row["decided_by"], row["version"]) == (theirs, "carol", 1)


# --- leases -----------------------------------------------------------------------------------


def test_claim_renew_settle(store: ActionProposalStore, clock: ManualClock, engine: Any) -> None:
    pid = approved(store)
    clock.advance(1000)
    got = store.claim(pid, ALICE, "w1", 30_000)
    assert got.outcome == "claimed"
    assert got.lease is not None and got.work is not None
    assert (got.lease.generation, got.lease.expires_at) == (1, T0 + 31_000)
    assert (got.work.id, got.work.idempotency_key, got.work.attempts) == (pid, "r1:c1", 1)
    assert got.work.input_value["order"] == 7
    row = raw_row(engine, pid)
    assert got.lease.token not in {str(v) for v in row.values()}
    assert len(row["lease_token_hash"]) == 64
    assert (row["execution_state"], row["lease_owner"], row["lease_expires_at"]) == (
        "running",
        "w1",
        T0 + 31_000,
    )
    assert (row["discovery_state"], row["discovery_at"]) == ("running", T0 + 31_000)

    assert store.claim(pid, ALICE, "w2", 30_000).outcome == "not_claimable"
    clock.advance(20_000)
    renewed = store.renew(pid, got.lease.token, 1, 30_000)
    assert (renewed.outcome, renewed.expires_at) == ("renewed", T0 + 51_000)
    assert raw_row(engine, pid)["discovery_at"] == T0 + 51_000

    clock.advance(1000)
    settled = store.settle(pid, got.lease.token, 1, "succeeded", {"refund_id": "r-9"})
    assert settled.outcome == "settled"
    p = store.get(pid, ALICE)
    assert (p.execution_state, p.settled_at, p.result_value, p.error) == (
        "succeeded",
        T0 + 22_000,
        {"refund_id": "r-9"},
        None,
    )
    assert (p.lease_expires_at, p.discovery_state, p.discovery_at) == (None, "done", None)
    assert raw_row(engine, pid)["lease_token_hash"] is None
    assert store.settle(pid, got.lease.token, 1, "failed").outcome == "lost"
    assert store.claim(pid, ALICE, "w2", 30_000).outcome == "not_claimable"


def test_pending_and_rejected_are_not_claimable(store: ActionProposalStore) -> None:
    pending = store.create(new("c1")).proposal.id
    rejected = store.create(new("c2")).proposal.id
    store.decide(rejected, ALICE, "rejected", "bob")
    for pid in (pending, rejected):
        result = store.claim(pid, ALICE, "w", 1000)
        assert (result.outcome, result.lease, result.work) == ("not_claimable", None, None)


def test_wrong_token_wrong_generation_or_expired_lease_is_lost(
    store: ActionProposalStore, clock: ManualClock, engine: Any
) -> None:
    pid = approved(store)
    got = store.claim(pid, ALICE, "w1", 10_000)
    assert got.lease is not None
    token = got.lease.token
    before = raw_row(engine, pid)
    assert store.renew(pid, token + "x", 1, 10_000).outcome == "lost"
    assert store.renew(pid, token, 2, 10_000).outcome == "lost"
    assert store.renew("ap_other", token, 1, 10_000).outcome == "lost"
    assert store.settle(pid, "not-the-token", 1, "succeeded").outcome == "lost"
    assert store.settle(pid, token, 2, "succeeded").outcome == "lost"
    assert raw_row(engine, pid) == before
    clock.advance(10_000)  # the lease ends at exactly now
    assert store.renew(pid, token, 1, 10_000).outcome == "lost"
    assert store.settle(pid, token, 1, "succeeded", {"late": True}).outcome == "lost"
    assert raw_row(engine, pid) == before


def test_recovery_advances_the_generation_and_keeps_the_key(
    store: ActionProposalStore, clock: ManualClock, engine: Any
) -> None:
    pid = approved(store)
    first = store.claim(pid, ALICE, "w1", 5_000)
    assert first.lease is not None
    clock.advance(4_999)
    assert store.claim(pid, ALICE, "w2", 5_000).outcome == "not_claimable"
    clock.advance(1)
    second = store.claim(pid, ALICE, "w2", 5_000)
    assert second.outcome == "recovered"
    assert second.lease is not None and second.work is not None
    assert second.lease.generation == 2
    assert second.lease.token != first.lease.token
    assert (second.work.idempotency_key, second.work.attempts) == ("r1:c1", 2)
    # The old worker wakes up: its token can neither renew nor settle.
    assert store.renew(pid, first.lease.token, 1, 5_000).outcome == "lost"
    assert store.settle(pid, first.lease.token, 1, "succeeded").outcome == "lost"
    assert store.settle(pid, first.lease.token, 2, "succeeded").outcome == "lost"
    assert store.settle(pid, second.lease.token, 2, "failed", error="card declined").outcome == (
        "settled"
    )
    p = store.get(pid, ALICE)
    assert (p.execution_state, p.error, p.generation, p.attempts, p.lease_owner) == (
        "failed",
        "card declined",
        2,
        2,
        "w2",
    )


# --- discovery --------------------------------------------------------------------------------


def test_claim_next_takes_the_most_overdue_work_across_scopes(
    store: ActionProposalStore, clock: ManualClock
) -> None:
    a = approved(store, "c1", ALICE)
    clock.advance(1000)
    b = approved(store, "c2", ACME)
    clock.advance(1000)
    c = approved(store, "c3", ALICE)
    first = store.claim_next("w1", 10_000)
    assert (first.outcome, first.work and first.work.id) == ("claimed", a)
    assert first.work is not None and first.work.tenant_ref is None
    second = store.claim_next("w1", 10_000)
    assert (second.outcome, second.work and second.work.id) == ("claimed", b)
    assert second.work is not None and second.work.tenant_ref == "acme"
    third = store.claim_next("w1", 10_000)
    assert (third.outcome, third.work and third.work.id) == ("claimed", c)
    assert store.claim_next("w1", 10_000).outcome == "none"  # every lease runs to T0+12000
    clock.advance(10_000)
    recovered = store.claim_next("w2", 10_000)
    assert recovered.outcome == "recovered"
    assert recovered.lease is not None and recovered.lease.generation == 2


def test_claim_next_orders_queued_and_expired_leases_together(
    store: ActionProposalStore, clock: ManualClock
) -> None:
    old = approved(store, "c1")
    got = store.claim(old, ALICE, "w1", 1000)  # lease ends at T0+1000
    assert got.lease is not None
    clock.advance(5000)
    fresh = approved(store, "c2")  # queued at T0+5000, after the lease expired
    result = store.claim_next("w2", 1000)
    assert (result.outcome, result.work and result.work.id) == ("recovered", old)
    after = store.claim_next("w2", 1000)
    assert (after.outcome, after.work and after.work.id) == ("claimed", fresh)


def test_claim_next_with_nothing_due(store: ActionProposalStore) -> None:
    store.create(new())
    result = store.claim_next("w", 1000)
    assert (result.outcome, result.lease, result.work) == ("none", None, None)


def test_claim_next_skips_a_row_another_transaction_has_locked(
    store: ActionProposalStore, engine: Any, dialect: str, clock: ManualClock
) -> None:
    if dialect == "sqlite":
        pytest.skip("SQLite has no row locks")
    first = approved(store, "c1")
    clock.advance(1)
    second = approved(store, "c2")
    with engine.connect() as holder:
        holder.begin()
        locked = holder.execute(
            select(action_proposal.c.id)
            .where(action_proposal.c.id == first)
            .with_for_update(skip_locked=True)
        ).scalar()
        assert locked == first
        result = store.claim_next("w", 1000)  # must not wait for the holder
        assert result.work is not None and result.work.id == second
        holder.rollback()
    assert store.claim_next("w", 1000).work is not None


def test_claim_next_inside_the_callers_transaction(
    store: ActionProposalStore, engine: Any, clock: ManualClock
) -> None:
    pid = approved(store)
    with engine.begin() as conn:
        got = claim_next_proposal(conn, worker_id="w", lease_ms=1000, clock=clock)
        assert got.work is not None and got.work.id == pid
        conn.rollback()
    assert store.get(pid, ALICE).execution_state == "queued"


def test_expire_takes_a_bounded_batch_oldest_first(
    store: ActionProposalStore, clock: ManualClock, engine: Any
) -> None:
    ids = [store.create(new(f"c{i}", expires_at=T0 + 1000 * (5 - i))).proposal.id for i in range(5)]
    keep = store.create(new("later", expires_at=T0 + 60_000)).proposal.id
    never = store.create(new("never")).proposal.id
    decided = store.create(new("decided", expires_at=T0 + 1)).proposal.id
    store.decide(decided, ALICE, "approved", "bob")
    clock.set(T0 + 10_000)
    assert store.expire(limit=2) == 2
    assert [store.get(i, ALICE).decision for i in ids] == [
        "pending",
        "pending",
        "pending",
        "expired",
        "expired",
    ]
    expired = store.get(ids[4], ALICE)
    assert (expired.updated_at, expired.discovery_state, expired.discovery_at) == (
        T0 + 10_000,
        "done",
        None,
    )
    assert store.expire(limit=100) == 3
    assert store.expire(limit=100) == 0
    assert store.get(keep, ALICE).decision == "pending"
    assert store.get(never, ALICE).decision == "pending"
    assert store.get(decided, ALICE).decision == "approved"


# --- outcome delivery -------------------------------------------------------------------------


def add_message(engine: Any, message_id: str, thread_id: str) -> None:
    with engine.begin() as conn:
        conn.execute(
            message.insert().values(
                id=message_id, thread_id=thread_id, seq=1, role="tool", content="", created_at=0
            )
        )


def test_outcomes_are_delivered_exactly_once(
    store: ActionProposalStore, clock: ManualClock, engine: Any
) -> None:
    pid = approved(store)
    other = store.create(new("c2")).proposal.id
    assert store.list_undelivered_outcomes() == []
    got = store.claim(pid, ALICE, "w", 1000)
    assert got.lease is not None
    store.settle(pid, got.lease.token, 1, "succeeded", {"refund_id": "r-9"})
    assert [p.id for p in store.list_undelivered_outcomes(limit=10)] == [pid]
    add_message(engine, "m1", "t1")
    add_message(engine, "m-other-thread", "t2")
    with pytest.raises(NotFound, match="m-other-thread"):
        store.deliver_outcome(pid, "m-other-thread")
    assert store.deliver_outcome(other, "m1").outcome == "not_settled"
    assert store.deliver_outcome("ap_nope", "m1").outcome == "not_found"
    clock.advance(500)
    first = store.deliver_outcome(pid, "m1")
    assert (first.outcome, first.message_id) == ("delivered", "m1")
    p = store.get(pid, ALICE)
    assert (p.outcome_delivered_at, p.outcome_message_id) == (T0 + 500, "m1")
    with engine.connect() as conn:
        outcome = conn.execute(select(message.c.outcome).where(message.c.id == "m1")).scalar_one()
    doc = json.loads(outcome)
    assert (doc["proposal_id"], doc["execution_state"], doc["result"]) == (
        pid,
        "succeeded",
        {"refund_id": "r-9"},
    )
    again = store.deliver_outcome(pid, "m1")
    assert (again.outcome, again.message_id) == ("already_delivered", "m1")
    assert store.list_undelivered_outcomes() == []


# --- legacy rows and the backfill -------------------------------------------------------------

LEGACY_STATES = {
    # name: (state columns, expected discovery_state, expected discovery_at column)
    "pending": ({"decision": "pending", "expires_at": T0 - 1}, "pending", "expires_at"),
    "pending-no-expiry": ({"decision": "pending"}, "pending", None),
    "approved-queued": (
        {"decision": "approved", "decided_at": T0 - 50, "execution_state": "queued"},
        "queued",
        "decided_at",
    ),
    "approved-no-state": (
        {"decision": "approved", "decided_at": T0 - 40, "execution_state": None},
        "queued",
        "decided_at",
    ),
    "running": (
        {
            "decision": "approved",
            "decided_at": T0 - 30,
            "execution_state": "running",
            "lease_owner": "w-old",
            "lease_token_hash": "0" * 64,
            "lease_expires_at": T0 - 20,
            "generation": 1,
            "attempts": 1,
        },
        "running",
        "lease_expires_at",
    ),
    "succeeded": (
        {"decision": "approved", "decided_at": T0 - 30, "execution_state": "succeeded"},
        "done",
        None,
    ),
    "failed": (
        {"decision": "approved", "decided_at": T0 - 30, "execution_state": "failed"},
        "done",
        None,
    ),
    "rejected": ({"decision": "rejected", "decided_at": T0 - 30}, "done", None),
    "expired": ({"decision": "expired"}, "done", None),
}


def legacy_rows(thread_id: str = "t1", n: int = 1) -> list[dict[str, Any]]:
    """Rows as an older writer leaves them: discovery columns NULL."""
    rows = []
    for i in range(n):
        for name, (state, _, _) in LEGACY_STATES.items():
            row = {
                "id": f"legacy-{name}-{i}",
                "idempotency_key": f"key-{name}-{i}",
                "tenant_ref": None,
                "actor_ref": "alice",
                "thread_id": thread_id,
                "tool_name": "refund",
                "input": '{ "order" : 7, "text": "spaces  kept ☃" }',
                "card": '{"title":"Legacy"}',
                "decided_by": "bob" if "decided_at" in state else None,
                "decision_note": "old note" if "decided_at" in state else None,
                "version": 3,
                "created_at": T0 - 1000 - i,
                "updated_at": T0 - 900 - i,
                **state,
            }
            rows.append(row)
    return rows


def insert_legacy(engine: Any, rows: list[dict[str, Any]]) -> None:
    full = [
        {c.name: None for c in action_proposal.columns if c.name != "tenant_key"} | r for r in rows
    ]
    for row in full:
        row["generation"] = row["generation"] or 0
        row["attempts"] = row["attempts"] or 0
    with engine.begin() as conn:
        conn.execute(action_proposal.insert(), full)


def test_legacy_rows_are_invisible_to_discovery_until_backfilled(
    store: ActionProposalStore, engine: Any, clock: ManualClock
) -> None:
    insert_legacy(engine, legacy_rows())
    with engine.connect() as conn:
        assert count_legacy_proposals(conn) == len(LEGACY_STATES)
    assert store.claim_next("w", 1000).outcome == "none"
    assert store.expire(100) == 0
    result = store.backfill(limit=4)
    assert (result.backfilled, result.remaining) == (4, len(LEGACY_STATES) - 4)
    result = store.backfill(limit=500)
    assert (result.backfilled, result.remaining) == (len(LEGACY_STATES) - 4, 0)
    assert store.backfill().backfilled == 0
    claimed = {store.claim_next("w", 1000).work for _ in range(3)}
    assert {w.id for w in claimed if w} == {
        "legacy-approved-queued-0",
        "legacy-approved-no-state-0",
        "legacy-running-0",
    }
    assert store.claim_next("w", 1000).outcome == "none"
    assert store.expire(100) == 1
    assert store.get("legacy-pending-0", ALICE).decision == "expired"


def test_backfill_changes_only_the_discovery_columns_and_version(
    store: ActionProposalStore, engine: Any
) -> None:
    insert_legacy(engine, legacy_rows(n=3))
    before = snapshot(engine)
    while store.backfill(limit=5).remaining:
        pass
    after = snapshot(engine)
    assert after.keys() == before.keys()
    for pid, old in before.items():
        new_row = after[pid]
        name = pid.removeprefix("legacy-").rsplit("-", 1)[0]
        _, state, at_column = LEGACY_STATES[name]
        assert new_row["discovery_state"] == state, pid
        assert new_row["discovery_at"] == (old[at_column] if at_column else None), pid
        assert new_row["version"] == old["version"] + 1
        discovery = ("discovery_state", "discovery_at", "version")
        assert {k: v for k, v in new_row.items() if k not in discovery} == {
            k: v for k, v in old.items() if k not in discovery
        }, pid
        # byte-for-byte: the JSON text is not re-serialised
        assert new_row["input"] == '{ "order" : 7, "text": "spaces  kept ☃" }'


def test_backfill_then_decide_keeps_the_discovery_in_step(
    store: ActionProposalStore, engine: Any
) -> None:
    insert_legacy(engine, legacy_rows())
    # A current writer deciding a legacy row fills its discovery columns itself.
    result = store.decide("legacy-pending-no-expiry-0", ALICE, "approved", "carol")
    assert result.outcome == "applied"
    assert result.proposal is not None and result.proposal.discovery_state == "queued"
    assert store.backfill().backfilled == len(LEGACY_STATES) - 1
    row = raw_row(engine, "legacy-pending-no-expiry-0")
    assert (row["decision"], row["decided_by"], row["version"]) == ("approved", "carol", 4)


def test_a_decision_racing_the_backfill_is_never_overwritten(
    store: ActionProposalStore, engine: Any, racing_clock: None
) -> None:
    insert_legacy(engine, legacy_rows())
    pid = "legacy-pending-no-expiry-0"

    def meddle() -> None:  # the backfill lands between the decision's read and its update
        assert ActionProposalStore(engine).backfill().remaining == 0

    with engine.begin() as conn:
        result = decide_proposal(
            conn,
            pid,
            scope=ALICE,
            decision="rejected",
            decided_by="bob",
            clock=MeddlingClock(meddle),
        )
    assert result.outcome == "applied"
    row = raw_row(engine, pid)
    assert (row["decision"], row["discovery_state"], row["version"]) == ("rejected", "done", 5)


def test_find_in_the_callers_transaction(store: ActionProposalStore, engine: Any) -> None:
    pid = store.create(new()).proposal.id
    with engine.connect() as conn:
        assert find_proposal(conn, pid, scope=ALICE) is not None
        assert find_proposal(conn, pid, scope=ACME) is None


def test_claim_next_falls_back_to_the_fence_without_skip_locked(
    store: ActionProposalStore, engine: Any, clock: ManualClock
) -> None:
    first = approved(store, "c1")
    clock.advance(1)
    second = approved(store, "c2")
    with engine.begin() as conn:
        conn.info["agora_skip_locked"] = False  # as on MySQL < 8.0.1 or MariaDB < 10.6
        try:
            got = [claim_next_proposal(conn, worker_id="w", lease_ms=1000, clock=clock)]
            got.append(claim_next_proposal(conn, worker_id="w", lease_ms=1000, clock=clock))
            got.append(claim_next_proposal(conn, worker_id="w", lease_ms=1000, clock=clock))
        finally:
            conn.info.pop("agora_skip_locked")
    assert [g.outcome for g in got] == ["claimed", "claimed", "none"]
    assert [g.work.id for g in got[:2] if g.work] == [first, second]


def test_backfill_without_counting_reports_only_what_it_knows(
    store: ActionProposalStore, engine: Any
) -> None:
    insert_legacy(engine, legacy_rows())
    total = len(LEGACY_STATES)
    with engine.begin() as conn:
        full = backfill_discovery_index(conn, limit=total - 1, count_remaining=False)
    assert (full.backfilled, full.remaining) == (total - 1, None)  # a full batch: may be more
    with engine.begin() as conn:
        short = backfill_discovery_index(conn, limit=total, count_remaining=False)
        assert (short.backfilled, short.remaining) == (1, 0)  # a short batch: nothing left
        assert count_legacy_proposals(conn) == 0
