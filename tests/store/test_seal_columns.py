"""Every tenant byte sealed, on every dialect: frames' payloads, proposals' input, card and result,
tool calls' input and output, a delivered outcome, a thread's title and summary set later.

Each test writes through the library for a keyed tenant, checks the stored bytes hold no
plaintext, reads back through the library (opened with the KEK, ``[sealed]`` without), and that
a write without the KEK is refused rather than stored in plaintext; ``seal_tenant`` seals the
same columns for rows written before the tenant had a key.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select, update

from agora_cli.store._clock import ManualClock
from agora_cli.store._errors import KeyUnavailable
from agora_cli.store._frames import FrameWriter, read_frames
from agora_cli.store._proposals import ActionProposalStore, NewProposal, Scope, Settlement
from agora_cli.store._schema import (
    action_proposal,
    message,
    stream_frame,
    thread,
    tool_call,
)
from agora_cli.store._seal_rows import count_to_seal, seal_tenant
from agora_cli.store._sealing import (
    SEAL_BROKEN_MARKER,
    SEALED_MARKER,
    SEALED_PREFIX,
    Kek,
    create_tenant_key,
    generate_kek,
    using_kek,
)
from agora_cli.store._steps import complete_tool_call, get_tool_call, record_tool_call, start_run
from agora_cli.store._threads import (
    append_message,
    create_thread,
    get_thread,
    get_transcript,
    update_thread,
)

pytestmark = pytest.mark.usefixtures("no_kek_in_env")

KEK = Kek.from_text(generate_kek())
SECRET = "ssn 123-45-6789"
T0 = 1_767_225_600_000
ACME = Scope("acme", "alice", "t-acme")


@pytest.fixture
def kek() -> Iterator[Kek]:
    with using_kek(KEK) as k:
        yield k


def _acme(engine: Any, *, key: bool = True) -> None:
    """acme's thread t-acme with message m-acme and run r-acme (and its key)."""
    with engine.begin() as conn:
        if key:
            create_tenant_key(conn, tenant="acme")
        create_thread(conn, actor_ref="alice", tenant_ref="acme", thread_id="t-acme")
        append_message(
            conn, thread_id="t-acme", role="assistant", content="hi", message_id="m-acme"
        )
        start_run(conn, thread_id="t-acme", actor_ref="alice", tenant_ref="acme", run_id="r-acme")


def _raw(engine: Any, table: Any, column: str) -> list[Any]:
    with engine.connect() as conn:
        # in primary-key order: an unordered SELECT may return rows in any order (PostgreSQL
        # does after an update), and callers take "the first" and "the second"
        keys = list(table.primary_key.columns)
        return list(conn.execute(select(table.c[column]).order_by(*keys)).scalars())


def _no_plaintext(values: list[Any]) -> None:
    text = [v for v in values if v is not None]
    assert text and all(v.startswith(SEALED_PREFIX) for v in text), text
    assert not any("123-45" in v for v in text)


def _write_frames(engine: Any) -> None:
    with FrameWriter(engine, "r-acme", autoflush=False, auto_purge=False) as w:
        w.append({"type": "text-delta", "delta": "the " + SECRET})
        w.append({"type": "tool-input", "tool_call_id": "c1", "input": {"ssn": SECRET}})
        w.end()


def test_frames_are_sealed_by_the_writer_and_opened_by_readers(engine: Any, kek: Kek) -> None:
    _acme(engine)
    _write_frames(engine)
    _no_plaintext(_raw(engine, stream_frame, "frame"))
    with engine.connect() as conn:
        frames = read_frames(conn, "r-acme")
    assert [f.payload() for f in frames] == [
        {"type": "text-delta", "delta": "the " + SECRET},
        {"type": "tool-input", "tool_call_id": "c1", "input": {"ssn": SECRET}},
        None,
    ]
    assert [f.seal_state for f in frames] == ["opened", "opened", "plain"]


def test_frames_without_the_kek_are_refused_and_read_as_markers(engine: Any) -> None:
    with using_kek(KEK):
        _acme(engine)
        _write_frames(engine)
    with pytest.raises(KeyUnavailable):
        FrameWriter(engine, "r-acme", autoflush=False, auto_purge=False).append(
            {"type": "finish", "text": SECRET}
        )
    _no_plaintext(_raw(engine, stream_frame, "frame"))
    with engine.connect() as conn:
        frames = read_frames(conn, "r-acme")
    assert [f.frame for f in frames[:2]] == [SEALED_MARKER, SEALED_MARKER]


def test_a_frame_copied_to_another_seq_reads_as_broken(engine: Any, kek: Kek) -> None:
    _acme(engine)
    _write_frames(engine)
    first, second = _raw(engine, stream_frame, "frame")[:2]
    with engine.begin() as conn:
        f = stream_frame
        conn.execute(update(f).where(f.c.seq == 2).values(frame=first))
        frames = read_frames(conn, "r-acme")
    assert (frames[0].seal_state, frames[1].frame) == ("opened", SEAL_BROKEN_MARKER)
    assert second != first


def _store(engine: Any, hold: bool = False) -> ActionProposalStore:
    return ActionProposalStore(engine, ManualClock(T0), hold_connection=hold)


def _propose(store: ActionProposalStore, call: str = "c1", amount: float = 12.5) -> str:
    return store.create(
        NewProposal(
            scope=ACME,
            tool_name="refund",
            run_id="r-acme",
            tool_call_id=call,
            input={"ssn": SECRET, "amount": amount},
            card={"title": "Refund " + SECRET},
        )
    ).proposal.id


@pytest.mark.parametrize("hold", [False, True], ids=["per-step", "held"])
def test_proposals_input_card_and_result_are_sealed_and_the_worker_opens_them(
    engine: Any, kek: Kek, hold: bool
) -> None:
    """Also with a held connection (issue 29): the worker's settle folds the tenant-key test into
    its UPDATE, and a keyed tenant's result is still sealed."""
    _acme(engine)
    store = _store(engine, hold)
    pid = _propose(store)
    _no_plaintext(_raw(engine, action_proposal, "input"))
    _no_plaintext(_raw(engine, action_proposal, "card"))
    # idempotent create compares the opened values (a fresh nonce each seal)
    assert (
        store.create(
            NewProposal(
                scope=ACME,
                tool_name="refund",
                run_id="r-acme",
                tool_call_id="c1",
                input={"ssn": SECRET, "amount": 12.5},
                card={"title": "Refund " + SECRET},
            )
        ).outcome
        == "existing"
    )
    assert (
        store.create(
            NewProposal(
                scope=ACME, tool_name="refund", run_id="r-acme", tool_call_id="c1", input={"x": 1}
            )
        ).outcome
        == "conflict"
    )
    shown = store.get(pid, ACME)
    assert (shown.input_value["ssn"], shown.card_value["title"], shown.seal_state) == (
        SECRET,
        "Refund " + SECRET,
        "opened",
    )
    assert [e.proposal.input_value for e in store.inbox().entries] == [shown.input_value]
    assert store.decide(pid, ACME, "approved", "bob").outcome == "applied"
    claimed = store.claim_next("w1", 60_000)
    assert claimed.work is not None and claimed.lease is not None
    assert claimed.work.input_value == {"ssn": SECRET, "amount": 12.5}
    assert (
        store.settle(
            pid, claimed.lease.token, claimed.lease.generation, "succeeded", {"refund_id": SECRET}
        ).outcome
        == "settled"
    )
    _no_plaintext(_raw(engine, action_proposal, "result"))
    assert store.get(pid, ACME).result_value == {"refund_id": SECRET}
    # delivered into the thread: the message's outcome sealed as the message path seals it
    assert store.deliver_outcome(pid, "m-acme").outcome == "delivered"
    _no_plaintext(_raw(engine, message, "outcome"))
    with engine.connect() as conn:
        got = get_transcript(conn, "t-acme").messages[0].message
    assert json.loads(str(got.outcome))["result"] == {"refund_id": SECRET}


@pytest.mark.parametrize("step", ["one", "many"])
@pytest.mark.parametrize("hold", [False, True], ids=["per-step", "held"])
def test_a_keyed_tenants_results_are_sealed_when_settled_with_the_next_claim(
    engine: Any, kek: Kek, hold: bool, step: str
) -> None:
    """``settle_and_claim_next`` and ``settle_many_and_claim_next``: a keyed tenant's result is
    never written as it is (on MySQL/MariaDB, held, the one-packet settle changes no row: the
    step is rolled back and settles the sealed result), and the next job is still claimed."""
    _acme(engine)
    store = _store(engine, hold)
    pids = [_propose(store, "c1"), _propose(store, "c2", 1.0), _propose(store, "c3", 2.0)]
    for pid in pids:
        assert store.decide(pid, ACME, "approved", "bob").outcome == "applied"
    first = store.claim_next("w1", 60_000)
    assert first.work is not None and first.lease is not None
    done = Settlement(
        first.work.id, first.lease.token, first.lease.generation, "succeeded", {"r": SECRET}
    )
    if step == "one":
        settled, following = store.settle_and_claim_next(done, "w1", 60_000, 2)
        outcomes = [settled.outcome]
    else:
        results, following = store.settle_many_and_claim_next([done], "w1", 60_000, 2)
        outcomes = [r.outcome for r in results]
    assert outcomes == ["settled"]
    assert {c.work.id for c in following if c.work} == set(pids) - {first.work.id}
    _no_plaintext(_raw(engine, action_proposal, "result"))
    assert store.get(first.work.id, ACME).result_value == {"r": SECRET}
    store.close()


@pytest.mark.parametrize("hold", [False, True], ids=["per-step", "held"])
def test_a_worker_without_the_kek_gets_the_marker_and_cannot_settle_in_plaintext(
    engine: Any, hold: bool
) -> None:
    with using_kek(KEK):
        _acme(engine)
        store = _store(engine, hold)
        pids = [_propose(store, "c1"), _propose(store, "c2", 1.0)]
        for pid in pids:
            store.decide(pid, ACME, "approved", "bob")
    claims = store.claim_next("w1", 60_000, limit=2)
    assert [c.work.input for c in claims if c.work] == [SEALED_MARKER, SEALED_MARKER]
    lease = claims[0].lease
    assert lease is not None and claims[0].work is not None
    with pytest.raises(KeyUnavailable):
        store.settle(claims[0].work.id, lease.token, lease.generation, "succeeded", {"r": SECRET})
    with pytest.raises(KeyUnavailable):
        store.settle_many(
            [Settlement(claims[0].work.id, lease.token, lease.generation, "succeeded", {"r": 1})]
        )
    assert _raw(engine, action_proposal, "result") == [None, None]
    assert store.get(pids[0], ACME).input == SEALED_MARKER


def test_tool_call_input_and_output_are_sealed(engine: Any, kek: Kek) -> None:
    _acme(engine)
    with engine.begin() as conn:
        record_tool_call(
            conn, message_id="m-acme", tool_call_id="c1", tool_name="lookup", input={"q": SECRET}
        )
        complete_tool_call(conn, "c1", output={"a": SECRET})
    _no_plaintext(_raw(engine, tool_call, "input"))
    _no_plaintext(_raw(engine, tool_call, "output"))
    assert _raw(engine, tool_call, "tool_name") == ["lookup"]  # what stats read stays plain
    with engine.connect() as conn:
        call = get_tool_call(conn, "c1")
        listed = get_transcript(conn, "t-acme").messages[0].tool_calls
    assert (call.input, call.output, call.seal_state) == (
        json.dumps({"q": SECRET}, separators=(",", ":")),
        json.dumps({"a": SECRET}, separators=(",", ":")),
        "opened",
    )
    assert [c.output for c in listed] == [call.output]


def test_updates_seal_and_never_write_plaintext_without_the_kek(engine: Any) -> None:
    with using_kek(KEK):
        _acme(engine)
        with engine.begin() as conn:
            record_tool_call(conn, message_id="m-acme", tool_call_id="c1", tool_name="lookup")
            update_thread(conn, "t-acme", title="Merger " + SECRET, summary=SECRET)
        _no_plaintext(_raw(engine, thread, "title"))
        _no_plaintext(_raw(engine, thread, "summary"))
        with engine.connect() as conn:
            assert get_thread(conn, "t-acme").title == "Merger " + SECRET
    for attempt in (
        lambda conn: update_thread(conn, "t-acme", title="plain " + SECRET),
        lambda conn: complete_tool_call(conn, "c1", output={"a": SECRET}),
    ):
        with pytest.raises(KeyUnavailable), engine.begin() as conn:
            attempt(conn)
    assert _raw(engine, tool_call, "output") == [None]
    _no_plaintext(_raw(engine, thread, "title"))


def test_db_seal_seals_frames_proposals_and_tool_calls_written_before_the_key(
    engine: Any, kek: Kek
) -> None:
    _acme(engine, key=False)
    _write_frames(engine)
    store = _store(engine)
    pid = _propose(store)
    with engine.begin() as conn:
        record_tool_call(
            conn, message_id="m-acme", tool_call_id="c1", tool_name="lookup", input={"q": SECRET}
        )
        create_tenant_key(conn, tenant="acme")
        before = count_to_seal(conn, tenant="acme")
    assert before["agent_stream_frame"] == 2  # the end marker is NULL: nothing to seal
    assert (before["agent_action_proposal"], before["agent_tool_call"]) == (2, 1)
    done = seal_tenant(engine, tenant="acme", batch=1)
    assert set(done.remaining.values()) == {0}
    assert done.sealed["agent_stream_frame"] == 2
    for table, column in (
        (stream_frame, "frame"),
        (action_proposal, "input"),
        (action_proposal, "card"),
        (tool_call, "input"),
    ):
        _no_plaintext(_raw(engine, table, column))
    with engine.connect() as conn:
        assert read_frames(conn, "r-acme")[0].payload()["delta"] == "the " + SECRET
        assert get_tool_call(conn, "c1").input == json.dumps({"q": SECRET}, separators=(",", ":"))
    assert store.get(pid, ACME).input_value["ssn"] == SECRET
