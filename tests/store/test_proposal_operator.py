"""The operator's acts across scopes (issue 28, frictions 1 and 8) on every dialect.

``decide_as_operator`` decides a proposal by its id alone, in its own scope, and records it;
``requeue_proposal`` puts a failed execution back in the queue (a new attempt, the failed one
kept in the history); ``cancel_proposal`` withdraws queued work so that no claim takes it. Each
is version-fenced and writes its ``agent_action_proposal_event`` row in the same transaction.
On main none of these exist: every test here fails there (an ImportError first of all).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import T0
from sqlalchemy import func, select, update

from agora_cli.store._clock import ManualClock
from agora_cli.store._errors import InvalidInput
from agora_cli.store._proposals import (
    ActionProposalStore,
    NewProposal,
    Scope,
    cancel_proposal,
    claim_next_proposal,
    decide_as_operator,
    find_any_approval_id,
    find_any_proposal_id,
    list_inbox,
    list_proposal_events,
    list_undelivered_outcomes,
    requeue_proposal,
)
from agora_cli.store._redact import redact_tool_io
from agora_cli.store._schema import action_proposal, action_proposal_event, message, thread
from agora_cli.store._sealing import (
    SEALED_MARKER,
    SEALED_PREFIX,
    Kek,
    create_tenant_key,
    generate_kek,
    using_kek,
)

ALICE = Scope(None, "alice", "t1")
ACME = Scope("acme", "bob", "t2")
LEASE = 30_000


@pytest.fixture
def store(engine: Any, clock: ManualClock) -> ActionProposalStore:
    with engine.begin() as conn:
        for tid, actor, tenant in (("t1", "alice", None), ("t2", "bob", "acme")):
            conn.execute(
                thread.insert().values(
                    id=tid, actor_ref=actor, tenant_ref=tenant, title="t", created_at=0,
                    updated_at=0,
                )
            )  # fmt: skip
    return ActionProposalStore(engine, clock)


def new(call: str = "c1", scope: Scope = ALICE, **kw: Any) -> NewProposal:
    return NewProposal(
        scope=scope, tool_name="refund", run_id="r1", tool_call_id=call, input={"order": 7}, **kw
    )


def created(store: ActionProposalStore, call: str = "c1", scope: Scope = ALICE) -> str:
    return store.create(new(call, scope)).proposal.id


def approved(store: ActionProposalStore, call: str = "c1", scope: Scope = ALICE) -> str:
    pid = created(store, call, scope)
    assert store.decide(pid, scope, "approved", "bob").outcome == "applied"
    return pid


def failed(
    store: ActionProposalStore, call: str = "c1", scope: Scope = ALICE, result: Any = None
) -> str:
    """A proposal approved, claimed by w1 and settled as failed (attempt 1)."""
    pid = approved(store, call, scope)
    claim = store.claim(pid, scope, "w1", LEASE)
    assert claim.lease is not None
    store.clock.advance(500)  # type: ignore[attr-defined]
    settled = store.settle(pid, claim.lease.token, 1, "failed", result, "refunds-api: 503\nbusy")
    assert settled.outcome == "settled"
    return pid


def raw_row(engine: Any, pid: str) -> dict[str, Any]:
    with engine.connect() as conn:
        q = select(action_proposal).where(action_proposal.c.id == pid)
        return dict(conn.execute(q).mappings().one())


def events(engine: Any, pid: str | None = None) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        q = select(action_proposal_event).order_by(action_proposal_event.c.created_at)
        if pid is not None:
            q = q.where(action_proposal_event.c.proposal_id == pid)
        return [dict(r) for r in conn.execute(q).mappings()]


# --- decisions without the scope (friction 1) ------------------------------------------------


def test_an_operator_decision_takes_the_rows_own_scope_and_is_recorded(
    store: ActionProposalStore, engine: Any, clock: ManualClock
) -> None:
    pid = created(store, "c1", ACME)
    clock.advance(1000)
    result = store.decide_as_operator(pid, "approved", "ops-lead", "checked by phone")
    assert result.outcome == "applied"
    p = result.proposal
    assert p is not None and p.scope == ACME
    assert (p.decision, p.decided_by, p.decided_at, p.decision_note) == (
        "approved", "ops-lead", T0 + 1000, "checked by phone",
    )  # fmt: skip
    assert (p.execution_state, p.discovery_state, p.discovery_at) == ("queued", "queued", T0 + 1000)
    # the same row a scoped decision would have written, and what the store reads back
    assert store.get(pid, ACME) == p
    [event] = events(engine, pid)
    assert {k: event[k] for k in ("proposal_id", "tenant_ref", "kind", "acted_by", "reason")} == {
        "proposal_id": pid,
        "tenant_ref": "acme",
        "kind": "operator_decision",
        "acted_by": "ops-lead",
        "reason": "checked by phone",
    }
    assert (event["decision"], event["created_at"]) == ("approved", T0 + 1000)
    assert event["prior_execution_state"] is None and event["prior_attempts"] is None
    [listed] = store.events(pid)
    assert (listed.kind, listed.acted_by, listed.decision) == (
        "operator_decision", "ops-lead", "approved",
    )  # fmt: skip


def test_an_operator_decision_has_the_scoped_outcomes_and_records_only_what_applied(
    store: ActionProposalStore, engine: Any, clock: ManualClock
) -> None:
    pid = created(store)
    assert store.decide_as_operator(pid, "rejected", "ops").outcome == "applied"
    unchanged = store.decide_as_operator(pid, "rejected", "someone-else", "again")
    assert unchanged.outcome == "unchanged"
    assert unchanged.proposal is not None and unchanged.proposal.decided_by == "ops"
    assert store.decide_as_operator(pid, "approved", "someone-else").outcome == "conflict"
    missing = store.decide_as_operator("ap_no_such_proposal", "approved", "ops")
    assert (missing.outcome, missing.proposal) == ("not_found", None)
    late = store.create(new("late", expires_at=T0 + 10)).proposal.id
    clock.advance(60_000)
    assert store.decide_as_operator(late, "approved", "ops").outcome == "expired"
    assert [e["kind"] for e in events(engine)] == ["operator_decision"]  # one: the applied one


def test_an_operator_decision_checks_its_arguments_before_any_sql(
    store: ActionProposalStore, engine: Any
) -> None:
    pid = created(store)
    for kwargs in (
        {"decision": "maybe", "decided_by": "ops"},
        {"decision": "approved", "decided_by": " "},
        {"decision": "approved", "decided_by": "x" * 256},
        {"decision": "approved", "decided_by": "ops", "note": "nul\x00"},
    ):
        with pytest.raises(InvalidInput), engine.begin() as conn:
            decide_as_operator(conn, pid, **kwargs)
    assert raw_row(engine, pid)["decision"] == "pending"
    assert events(engine) == []


def test_short_ids_resolve_across_scopes_and_within_a_tenant(
    store: ActionProposalStore, engine: Any
) -> None:
    mine = created(store, "c1", ALICE)
    theirs = created(store, "c2", ACME)
    with engine.connect() as conn:
        assert find_any_proposal_id(conn, mine[:12]) == mine
        assert find_any_approval_id(conn, theirs[:12]) == ("proposal", theirs)
        # a tenant's filter (the session tenant): another tenant's id, full or short, is nothing
        assert find_any_proposal_id(conn, mine, tenant_ref="acme") is None
        assert find_any_proposal_id(conn, theirs[:12], tenant_ref="acme") == theirs
        assert find_any_proposal_id(conn, "ap_nothing_like_it") is None


# --- requeue (friction 8) ---------------------------------------------------------------------


def test_requeue_puts_a_failed_execution_back_for_a_new_attempt_and_keeps_the_old_one(
    store: ActionProposalStore, engine: Any, clock: ManualClock
) -> None:
    pid = failed(store, result={"status": 503})
    with engine.begin() as conn:  # its failed outcome was delivered to the thread
        conn.execute(
            message.insert().values(id="m1", thread_id="t1", role="tool", content="", created_at=T0)
        )
    assert store.deliver_outcome(pid, "m1").outcome == "delivered"
    before = raw_row(engine, pid)
    assert (before["execution_state"], before["attempts"], before["generation"]) == ("failed", 1, 1)
    clock.advance(60_000)
    result = store.requeue(pid, "ops-lead", "refunds-api is back")
    assert result.outcome == "requeued"
    row = raw_row(engine, pid)
    now = T0 + 60_500
    assert (row["execution_state"], row["discovery_state"], row["discovery_at"]) == (
        "queued", "queued", now,
    )  # fmt: skip
    for cleared in (
        "lease_owner", "lease_token_hash", "lease_expires_at", "result", "error", "settled_at",
        "outcome_delivered_at", "outcome_message_id",
    ):  # fmt: skip
        assert row[cleared] is None, cleared
    assert (row["attempts"], row["generation"], row["version"]) == (1, 1, before["version"] + 1)
    assert (row["decision"], row["decided_by"], row["updated_at"]) == ("approved", "bob", now)
    assert result.proposal is not None and result.proposal.execution_state == "queued"
    [event] = events(engine, pid)
    assert (event["kind"], event["acted_by"], event["reason"], event["created_at"]) == (
        "requeue", "ops-lead", "refunds-api is back", now,
    )  # fmt: skip
    assert {k[6:]: v for k, v in event.items() if k.startswith("prior_")} == {
        "execution_state": "failed",
        "attempts": 1,
        "generation": 1,
        "lease_owner": "w1",
        "result": before["result"],
        "error": "refunds-api: 503\nbusy",
        "settled_at": T0 + 500,
        "outcome_delivered_at": T0 + 500,
        "outcome_message_id": "m1",
    }
    [listed] = store.events(pid)
    assert listed.prior_result_value == {"status": 503}
    # the next claim is a new attempt: attempts and generation + 1, the same idempotency key
    with engine.begin() as conn:
        claim = claim_next_proposal(conn, worker_id="w2", lease_ms=LEASE, clock=clock)
    assert claim.outcome == "claimed" and claim.work is not None and claim.lease is not None
    assert (claim.work.id, claim.work.attempts, claim.lease.generation) == (pid, 2, 2)
    assert claim.work.idempotency_key == "r1:c1"
    settled = store.settle(pid, claim.lease.token, 2, "succeeded", {"refund_id": "rf_1"})
    assert settled.outcome == "settled"
    # and its new outcome is delivered in turn (the failed one's delivery was cleared)
    assert [p.id for p in store.list_undelivered_outcomes()] == [pid]


@pytest.mark.parametrize("state", ["pending", "rejected", "queued", "running", "succeeded"])
def test_requeue_refuses_anything_not_failed_and_writes_nothing(
    store: ActionProposalStore, engine: Any, state: str
) -> None:
    pid = created(store) if state in ("pending", "rejected") else approved(store)
    if state == "rejected":
        store.decide(pid, ALICE, "rejected", "bob")
    if state in ("running", "succeeded"):
        claim = store.claim(pid, ALICE, "w1", LEASE)
        assert claim.lease is not None
        if state == "succeeded":
            store.settle(pid, claim.lease.token, 1, "succeeded", {"ok": True})
    before = raw_row(engine, pid)
    result = store.requeue(pid, "ops", "try again")
    assert result.outcome == "not_failed"
    assert result.proposal is not None and result.proposal.id == pid
    assert raw_row(engine, pid) == before
    assert events(engine) == []
    missing = store.requeue("ap_not_there", "ops", "try again")
    assert (missing.outcome, missing.proposal) == ("not_found", None)


@pytest.mark.parametrize(
    ("by", "reason", "param"),
    [
        ("", "why", "requeued_by"),
        ("ops", "", "reason"),
        ("ops", "   ", "reason"),
        ("ops", "x" * 4097, "reason"),
        ("ops", "nul\x00", "reason"),
        ("x" * 256, "why", "requeued_by"),
    ],
)
def test_requeue_bounds_who_and_why_before_any_sql(
    store: ActionProposalStore, engine: Any, by: str, reason: str, param: str
) -> None:
    pid = failed(store)
    with pytest.raises(InvalidInput) as raised, engine.begin() as conn:
        requeue_proposal(conn, pid, requeued_by=by, reason=reason)
    assert raised.value.param == param
    assert raw_row(engine, pid)["execution_state"] == "failed"
    assert store.requeue(pid, "ops", "é" * 4096).outcome == "requeued"  # the bound itself is fine


class MeddlingClock(ManualClock):
    """Runs ``meddle`` (another connection's committed write) the first time the store asks the
    time: after the act's read and before its fenced update."""

    def __init__(self, meddle: Any) -> None:
        super().__init__(T0 + 10_000)
        self.meddle = meddle

    def now_ms(self) -> int:
        if self.meddle is not None:
            meddle, self.meddle = self.meddle, None
            meddle()
        return super().now_ms()


@pytest.fixture
def interleaving(dialect: str) -> None:
    if dialect == "sqlite":
        pytest.skip("BEGIN IMMEDIATE serialises SQLite writers: the interleaving cannot happen")


def test_a_requeue_that_loses_the_race_to_another_rereads_and_writes_nothing(
    store: ActionProposalStore, engine: Any, interleaving: None
) -> None:
    pid = failed(store)

    def meddle() -> None:
        assert ActionProposalStore(engine).requeue(pid, "carol", "first").outcome == "requeued"

    with engine.begin() as conn:
        ours = requeue_proposal(
            conn, pid, requeued_by="bob", reason="second", clock=MeddlingClock(meddle)
        )
    assert ours.outcome == "not_failed"
    assert [(e["kind"], e["acted_by"]) for e in events(engine, pid)] == [("requeue", "carol")]
    assert raw_row(engine, pid)["version"] == 4  # create 0, decide, claim, settle, one requeue


def test_racing_requeues_apply_exactly_once(store: ActionProposalStore, engine: Any) -> None:
    pids = [failed(store, f"c{n}") for n in range(4)]
    outcomes: dict[str, list[str]] = {pid: [] for pid in pids}
    barrier = threading.Barrier(4)

    def requeue_all(who: str) -> None:
        mine = ActionProposalStore(engine)
        barrier.wait()
        for pid in pids:
            outcomes[pid].append(mine.requeue(pid, who, "race").outcome)

    workers = [threading.Thread(target=requeue_all, args=(f"op{n}",)) for n in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for pid in pids:
        assert sorted(outcomes[pid]) == ["not_failed"] * 3 + ["requeued"], outcomes[pid]
        assert len(events(engine, pid)) == 1
        assert raw_row(engine, pid)["execution_state"] == "queued"


# --- cancel (friction 8) ----------------------------------------------------------------------


def test_cancel_withdraws_queued_work_so_that_no_claim_takes_it(
    store: ActionProposalStore, engine: Any, clock: ManualClock
) -> None:
    pid = approved(store)
    other = approved(store, "c2")
    clock.advance(1000)
    result = store.cancel(pid, "ops-lead", "the customer withdrew")
    assert result.outcome == "cancelled"
    row = raw_row(engine, pid)
    assert (row["execution_state"], row["discovery_state"], row["discovery_at"]) == (
        "cancelled", "done", None,
    )  # fmt: skip
    assert (row["settled_at"], row["updated_at"], row["attempts"]) == (T0 + 1000, T0 + 1000, 0)
    [event] = events(engine, pid)
    assert (event["kind"], event["acted_by"], event["reason"]) == (
        "cancel", "ops-lead", "the customer withdrew",
    )  # fmt: skip
    assert (event["prior_execution_state"], event["prior_attempts"]) == ("queued", 0)
    # no claim takes it: not claim_next (which takes the other), not a scoped claim
    with engine.begin() as conn:
        taken = claim_next_proposal(conn, worker_id="w", lease_ms=LEASE, clock=clock)
    assert taken.work is not None and taken.work.id == other
    with engine.begin() as conn:
        assert claim_next_proposal(conn, worker_id="w", lease_ms=LEASE, clock=clock).outcome == (
            "none"
        )
    assert store.claim(pid, ALICE, "w", LEASE).outcome == "not_claimable"
    # the inbox does not hold it as queued, running or failed work
    with engine.connect() as conn:
        for state in ("queued", "running", "failed"):
            page = list_inbox(conn, state=state, clock=clock)  # type: ignore[arg-type]
            assert pid not in {e.proposal.id for e in page.entries}, state
        # its outcome (cancelled, no result) goes to its thread like any settled one's
        [undelivered] = list_undelivered_outcomes(conn)
    assert (undelivered.id, undelivered.execution_state) == (pid, "cancelled")
    again = store.cancel(pid, "someone-else", "again")
    assert again.outcome == "unchanged"
    assert len(events(engine, pid)) == 1  # the first cancel's audit stays the only one


def test_cancel_takes_an_approval_an_older_writer_never_queued(
    store: ActionProposalStore, engine: Any
) -> None:
    pid = approved(store)
    with engine.begin() as conn:  # approved with no execution state (an older writer)
        conn.execute(
            update(action_proposal)
            .where(action_proposal.c.id == pid)
            .values(execution_state=None, version=action_proposal.c.version + 1)
        )
    assert store.cancel(pid, "ops", "never mind").outcome == "cancelled"
    assert events(engine, pid)[0]["prior_execution_state"] is None


def test_cancel_refuses_running_stuck_pending_and_finished_work(
    store: ActionProposalStore, engine: Any, clock: ManualClock
) -> None:
    running = approved(store, "c1")
    stuck = approved(store, "c2")
    pending = created(store, "c3")
    done = approved(store, "c4")
    rejected = created(store, "c5")
    store.decide(rejected, ALICE, "rejected", "bob")
    lease = store.claim(running, ALICE, "w-live", LEASE)
    stale = store.claim(stuck, ALICE, "w-dead", 1000)
    finished = store.claim(done, ALICE, "w", LEASE)
    assert lease.lease and stale.lease and finished.lease
    store.settle(done, finished.lease.token, 1, "succeeded", {"ok": True})
    clock.advance(5000)  # the 1 s lease has run out; the 30 s one holds
    before = {pid: raw_row(engine, pid) for pid in (running, stuck, pending, done, rejected)}
    outcomes = {pid: store.cancel(pid, "ops", "stop it").outcome for pid in before}
    assert outcomes == {
        running: "running",
        stuck: "stuck",
        pending: "pending",
        done: "not_queued",
        rejected: "not_queued",
    }
    assert {pid: raw_row(engine, pid) for pid in before} == before
    assert events(engine) == []
    shown = store.cancel(running, "ops", "stop it").proposal
    assert shown is not None and (shown.lease_owner, shown.lease_expires_at) == (
        "w-live", T0 + LEASE,
    )  # fmt: skip


def test_a_cancel_that_loses_the_race_to_a_claim_refuses(
    store: ActionProposalStore, engine: Any, interleaving: None
) -> None:
    pid = approved(store)

    def meddle() -> None:
        assert ActionProposalStore(engine).claim_next("w1", LEASE).outcome == "claimed"

    with engine.begin() as conn:
        ours = cancel_proposal(
            conn, pid, cancelled_by="ops", reason="stop", clock=MeddlingClock(meddle)
        )
    assert ours.outcome == "running"
    assert raw_row(engine, pid)["execution_state"] == "running"
    assert events(engine) == []


def test_a_claim_never_takes_work_whose_cancel_holds_it(
    store: ActionProposalStore, engine: Any, interleaving: None
) -> None:
    pid = approved(store)
    with engine.begin() as conn:  # the cancel's transaction is open: its row is locked
        assert cancel_proposal(conn, pid, cancelled_by="ops", reason="stop").outcome == (
            "cancelled"
        )
        claim = ActionProposalStore(engine).claim_next("w1", LEASE)  # SKIP LOCKED: not waiting
        assert claim.outcome == "none"
    assert ActionProposalStore(engine).claim_next("w1", LEASE).outcome == "none"
    assert raw_row(engine, pid)["execution_state"] == "cancelled"


def test_a_cancel_racing_claim_next_never_both_win(store: ActionProposalStore, engine: Any) -> None:
    pids = [approved(store, f"c{n}") for n in range(6)]
    cancelled: dict[str, str] = {}
    claimed: list[str] = []
    barrier = threading.Barrier(3)

    def cancel_all() -> None:
        mine = ActionProposalStore(engine)
        barrier.wait()
        for pid in reversed(pids):
            cancelled[pid] = mine.cancel(pid, "ops", "race").outcome

    def claim_all(worker: str) -> None:
        mine = ActionProposalStore(engine)
        barrier.wait()
        while (got := mine.claim_next(worker, LEASE)).work is not None:
            claimed.append(got.work.id)

    threads = [threading.Thread(target=cancel_all)] + [
        threading.Thread(target=claim_all, args=(f"w{n}",)) for n in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(claimed) == len(set(claimed))
    for pid in pids:
        row = raw_row(engine, pid)
        won_cancel = cancelled[pid] == "cancelled"
        assert won_cancel != (pid in claimed), (pid, cancelled[pid])
        assert row["execution_state"] == ("cancelled" if won_cancel else "running")
        assert cancelled[pid] in ("cancelled", "running")
        assert len(events(engine, pid)) == (1 if won_cancel else 0)


# --- the history: sealed results, retention, cascades ------------------------------------------


@pytest.fixture
def kek(no_kek_in_env: None) -> Iterator[Kek]:
    with using_kek(Kek.from_text(generate_kek())) as k:
        yield k


def test_a_sealed_result_stays_sealed_in_the_history_and_opens_as_the_proposals(
    store: ActionProposalStore, engine: Any, kek: Kek
) -> None:
    with engine.begin() as conn:
        create_tenant_key(conn, tenant="acme")
    pid = failed(store, "c1", ACME, result={"card": "4111 1111 1111 1111"})
    sealed = raw_row(engine, pid)["result"]
    assert sealed.startswith(SEALED_PREFIX)
    assert store.requeue(pid, "ops", "again").outcome == "requeued"
    [event] = events(engine, pid)
    assert event["prior_result"] == sealed  # copied as stored: no plaintext, no KEK needed
    [listed] = store.events(pid)
    assert listed.prior_result_value == {"card": "4111 1111 1111 1111"}


def test_a_sealed_result_reads_as_the_marker_without_the_kek(
    store: ActionProposalStore, engine: Any, no_kek_in_env: None
) -> None:
    with using_kek(Kek.from_text(generate_kek())):
        with engine.begin() as conn:
            create_tenant_key(conn, tenant="acme")
        pid = failed(store, "c1", ACME, result={"ok": False})
        # a requeue needs no KEK: the sealed value is copied, never opened
    assert store.requeue(pid, "ops", "again").outcome == "requeued"
    with engine.connect() as conn:
        [event] = list_proposal_events(conn, pid)
    assert event.prior_result == SEALED_MARKER


def test_db_redact_hashes_the_result_a_requeue_kept(
    store: ActionProposalStore, engine: Any, kek: Kek, clock: ManualClock
) -> None:
    pid = failed(store, result={"card": "4111 1111 1111 1111"})
    assert store.requeue(pid, "ops", "again").outcome == "requeued"
    clock.advance(40 * 86_400_000)
    report = redact_tool_io(engine, cutoff_ms=clock.now_ms() - 30 * 86_400_000, kek=kek)
    assert report.values["agent_action_proposal_event.prior_result"] == 1
    [event] = events(engine, pid)
    # the marker's digest is random hex under this run's KEK: "4111" alone may appear in it
    assert "4111 1111" not in event["prior_result"] and "card" not in event["prior_result"]
    assert event["prior_result"].startswith('"agora:redacted:v1:')
    assert event["prior_error"] == "refunds-api: 503"  # cut to its first line


def test_events_go_with_their_proposal(store: ActionProposalStore, engine: Any) -> None:
    pid = failed(store)
    store.requeue(pid, "ops", "again")
    keep = failed(store, "c2")
    store.requeue(keep, "ops", "again")
    with engine.begin() as conn:
        conn.execute(action_proposal.delete().where(action_proposal.c.id == pid))
    with engine.connect() as conn:
        remaining = conn.execute(
            select(action_proposal_event.c.proposal_id, func.count()).group_by(
                action_proposal_event.c.proposal_id
            )
        ).all()
    assert [tuple(r) for r in remaining] == [(keep, 1)]


# --- row-level security: another tenant's history, ids in hand (PostgreSQL) -------------------


def _seed_two_tenants(owner: Any) -> dict[str, str]:
    """As the owner: a failed-then-requeued proposal (so an event) per tenant; their ids."""
    with owner.begin() as conn:
        for tenant in ("acme", "globex"):
            conn.execute(
                thread.insert().values(
                    id=f"t-{tenant}", actor_ref="bob", tenant_ref=tenant, title="",
                    created_at=0, updated_at=0,
                )
            )  # fmt: skip
    store = ActionProposalStore(owner, ManualClock(T0))
    ids = {}
    for tenant in ("acme", "globex"):
        pid = failed(store, f"c-{tenant}", Scope(tenant, "bob", f"t-{tenant}"), {"n": 1})
        assert store.requeue(pid, "ops", "again").outcome == "requeued"
        ids[tenant] = pid
        ids[f"{tenant}-event"] = store.events(pid)[0].id
    ids["globex-queued"] = approved(store, "c-q", Scope("globex", "bob", "t-globex"))
    return ids


def _rls_error(conn: Any, statement: Any) -> str | None:
    from sqlalchemy.exc import DBAPIError

    savepoint = conn.begin_nested()
    try:
        conn.execute(statement)
    except DBAPIError as exc:
        savepoint.rollback()
        return str(exc.orig).splitlines()[0]
    savepoint.rollback()
    return None


def test_a_tenants_login_cannot_see_change_or_act_on_another_tenants_history(
    pg_url: str, app_role: str
) -> None:
    from helpers import member_login_url

    from agora_cli.store._engine import open_engine
    from agora_cli.store._rls import enable_rls
    from agora_cli.store._rls_verify import verify_isolation

    owner = open_engine(pg_url)
    try:
        assert enable_rls(owner, app_role=app_role).role_created
        ids = _seed_two_tenants(owner)
        report = verify_isolation(owner, app_role=app_role)
        assert report.ok, report.failed
        [probe] = [t for t in report.tables if t.table == "agent_action_proposal_event"]
        assert probe.thread_tenant and probe.parent_blocked  # NULL tenant: its proposal's
    finally:
        owner.dispose()
    ev = action_proposal_event
    acme = open_engine(member_login_url(pg_url, app_role), tenant="acme")
    try:
        with acme.connect() as conn:
            seen = conn.execute(select(ev.c.id)).scalars().all()
            assert seen == [ids["acme-event"]]
            theirs = ev.c.id == ids["globex-event"]
            assert conn.execute(update(ev).where(theirs).values(reason="x")).rowcount == 0
            assert conn.execute(ev.delete().where(theirs)).rowcount == 0
            # an event on globex's proposal, under any tenant: refused, exactly as on a proposal
            # that does not exist (the error does not tell that globex's exists)
            for tenant in ("acme", "globex", None):
                row = {
                    "id": f"forged-{tenant}", "proposal_id": ids["globex"], "tenant_ref": tenant,
                    "kind": "cancel", "acted_by": "mallory", "created_at": T0,
                }  # fmt: skip
                on_theirs = _rls_error(conn, ev.insert().values(**row))
                on_nothing = _rls_error(conn, ev.insert().values(**{**row, "proposal_id": "no"}))
                assert on_theirs is not None and "row-level security" in on_theirs, on_theirs
                assert on_theirs == on_nothing
            # the operator's acts with globex's ids in hand find nothing and write nothing
            for text in (ids["globex"], ids["globex"][:12]):
                assert find_any_proposal_id(conn, text) is None
            assert list_proposal_events(conn, ids["globex"]) == []
            assert requeue_proposal(conn, ids["globex"], requeued_by="m", reason="r").outcome == (
                "not_found"
            )
            assert cancel_proposal(
                conn, ids["globex-queued"], cancelled_by="m", reason="r"
            ).outcome == ("not_found")
            assert decide_as_operator(
                conn, ids["globex-queued"], decision="rejected", decided_by="m"
            ).outcome == ("not_found")
            conn.commit()
    finally:
        acme.dispose()
    owner = open_engine(pg_url)
    try:
        assert [e["acted_by"] for e in events(owner, ids["globex"])] == ["ops"]
        assert raw_row(owner, ids["globex-queued"])["execution_state"] == "queued"
        assert raw_row(owner, ids["globex"])["execution_state"] == "queued"
    finally:
        owner.dispose()


def test_the_history_is_read_on_its_index(
    store: ActionProposalStore, engine: Any, dialect: str
) -> None:
    from sqlalchemy import event

    pid = failed(store)
    store.requeue(pid, "ops", "again")
    seen: list[tuple[str, Any]] = []

    def grab(conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        if "agent_action_proposal_event" in statement:
            seen.append((statement, params))

    event.listen(engine, "before_cursor_execute", grab)
    try:
        assert len(store.events(pid)) == 1
    finally:
        event.remove(engine, "before_cursor_execute", grab)
    [(statement, params)] = seen  # one statement
    with engine.begin() as conn:
        if dialect == "postgresql":  # a table of a few rows: ask whether the index can serve it
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
        explain = "EXPLAIN QUERY PLAN" if dialect == "sqlite" else "EXPLAIN"
        rows = conn.exec_driver_sql(f"{explain} {statement}", params).mappings().all()
    if dialect == "mysql":  # InnoDB scans a table this small whatever the indexes: usable is all
        [row] = [r for r in rows if r["table"] == "agent_action_proposal_event"]
        assert "agent_action_proposal_event_proposal_idx" in row["possible_keys"], rows
    else:
        plan = " ".join(str(list(r.values())[-1]) for r in rows)
        assert "agent_action_proposal_event_proposal_idx" in plan, plan
