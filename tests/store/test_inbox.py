"""The proposals inbox: cross-scope, from the discovery index, on every dialect."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import insert_legacy

from agora_cli.store._clock import ManualClock
from agora_cli.store._errors import InvalidInput
from agora_cli.store._proposals import (
    ActionProposalStore,
    NewProposal,
    Scope,
    list_inbox,
)
from agora_cli.store._threads import create_thread

MIN = 60_000


@pytest.fixture
def store(engine: Any, clock: ManualClock) -> ActionProposalStore:
    with engine.begin() as conn:
        create_thread(conn, actor_ref="alice", tenant_ref="acme", thread_id="t-a")
        create_thread(conn, actor_ref="bob", thread_id="t-b")
    return ActionProposalStore(engine, clock=clock)


def _propose(
    store: ActionProposalStore, pid: str, scope: Scope, expires_in: int | None, tool: str = "refund"
) -> None:
    store.create(
        NewProposal(
            scope=scope,
            tool_name=tool,
            input={"id": pid},
            id=pid,
            expires_at=None if expires_in is None else store.clock.now_ms() + expires_in,
        )
    )


ALICE = Scope("acme", "alice", "t-a")
BOB = Scope(None, "bob", "t-b")


def _ids(inbox: Any) -> list[str]:
    return [e.proposal.id for e in inbox.entries]


def test_pending_soonest_to_expire_first_then_never(
    store: ActionProposalStore, clock: ManualClock
) -> None:
    _propose(store, "p-later", ALICE, 90 * MIN)
    _propose(store, "p-never", BOB, None)
    _propose(store, "p-soon", BOB, 10 * MIN, tool="cancel")
    _propose(store, "p-gone", ALICE, 1 * MIN)
    _propose(store, "p-decided", ALICE, 30 * MIN)
    store.decide("p-decided", ALICE, "rejected", "ops")
    clock.advance(2 * MIN)  # p-gone is past its expiry now, not yet marked expired
    page = store.inbox()
    assert page.state == "pending" and page.now == clock.now_ms()
    assert _ids(page) == ["p-soon", "p-later", "p-never"]
    assert (page.past_expiry, page.legacy, page.more) == (1, 0, False)
    assert not any(e.stuck for e in page.entries)
    assert _ids(store.inbox(limit=2)) == ["p-soon", "p-later"] and store.inbox(limit=2).more
    assert _ids(store.inbox(limit=3)) == ["p-soon", "p-later", "p-never"]
    assert not store.inbox(limit=3).more
    assert _ids(store.inbox(expiring_within_ms=60 * MIN)) == ["p-soon"]
    assert _ids(store.inbox(expiring_within_ms=120 * MIN)) == ["p-soon", "p-later"]
    assert _ids(store.inbox(tenant_ref="acme")) == ["p-later"]
    assert _ids(store.inbox(actor_ref="bob")) == ["p-soon", "p-never"]
    assert _ids(store.inbox(tool_name="cancel")) == ["p-soon"]
    assert _ids(store.inbox(actor_ref="bob ")) == []  # exact, on MySQL too
    assert store.inbox(tenant_ref="acme").past_expiry == 1


def test_a_stuck_running_lease_is_flagged(store: ActionProposalStore, clock: ManualClock) -> None:
    for pid in ("w-live", "w-dead", "w-queued", "w-failed", "w-done"):
        _propose(store, pid, ALICE, None)
        store.decide(pid, ALICE, "approved", "ops")
    dead = store.claim("w-dead", ALICE, "worker-dead", 30_000)
    clock.advance(MIN)  # the dead worker's lease ran out a while ago
    live = store.claim("w-live", ALICE, "worker-live", 10 * MIN)
    failed = store.claim("w-failed", ALICE, "w", 30_000)
    done = store.claim("w-done", ALICE, "w", 30_000)
    assert dead.lease and live.lease and failed.lease and done.lease
    store.settle("w-failed", failed.lease.token, failed.lease.generation, "failed", error="409")
    clock.advance(1000)
    store.settle("w-done", done.lease.token, done.lease.generation, "succeeded")
    running = store.inbox("running")
    assert [(e.proposal.id, e.stuck) for e in running.entries] == [
        ("w-dead", True),
        ("w-live", False),
    ]
    assert running.entries[0].proposal.lease_owner == "worker-dead"
    assert _ids(store.inbox("queued")) == ["w-queued"]
    failed_page = store.inbox("failed")
    assert _ids(failed_page) == ["w-failed"] and failed_page.entries[0].proposal.error == "409"
    assert _ids(store.inbox("pending")) == []
    # the stuck one is recovered by the next claim, and is then no longer stuck
    recovered = store.claim("w-dead", ALICE, "worker-new", 30_000)
    assert recovered.outcome == "recovered"
    assert [e.stuck for e in store.inbox("running").entries] == [False, False]


def test_legacy_rows_are_counted_never_listed(engine: Any, store: ActionProposalStore) -> None:
    insert_legacy(engine, 7)
    _propose(store, "p-new", ALICE, None)
    page = store.inbox()
    assert _ids(page) == ["p-new"] and page.legacy == 7
    assert store.inbox("queued").legacy == 7 and _ids(store.inbox("queued")) == []


def test_bad_input(engine: Any) -> None:
    with engine.connect() as conn:
        for kwargs in (
            {"state": "stuck"},
            {"limit": 0},
            {"limit": 1001},
            {"expiring_within_ms": 0},
            {"expiring_within_ms": 400 * 86_400_000},
            {"state": "queued", "expiring_within_ms": MIN},
            {"actor_ref": ""},
        ):
            with pytest.raises(InvalidInput):
                list_inbox(conn, **kwargs)
