"""The runtime's own approvals (tool calls left pending_approval) in the inbox, on every dialect,
on rows written exactly as upstream writes them (tests/upstream.py)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event, select
from upstream import write_upstream

from agora_cli.store._clock import ManualClock
from agora_cli.store._errors import AmbiguousId, InvalidInput, NotFound
from agora_cli.store._proposals import (
    ActionProposalStore,
    NewProposal,
    Scope,
    list_tool_call_approvals,
    refuse_tool_call_decision,
)
from agora_cli.store._schema import tool_call
from agora_cli.store._steps import record_tool_call, start_run
from agora_cli.store._threads import append_message

T0 = 1_767_225_600_000
MIN = 60_000


@pytest.fixture
def up(engine: Any) -> Any:
    return write_upstream(engine, now=T0)


@pytest.fixture
def store(engine: Any, up: Any) -> ActionProposalStore:
    return ActionProposalStore(engine, clock=ManualClock(T0))


def _acme(up: Any) -> Scope:
    return Scope("acme", "alice", up.threads["acme"])


def _globex(up: Any) -> Scope:
    return Scope("globex", "bob", up.threads["globex"])


def _propose(store: ActionProposalStore, scope: Scope, pid: str, **kw: Any) -> None:
    store.create(NewProposal(scope=scope, tool_name="refund", input={"id": pid}, id=pid, **kw))


def _calls(page: Any) -> list[str]:
    return [c.id for c in page.tool_calls]


def _row(engine: Any, cid: str) -> dict[str, Any]:
    with engine.connect() as conn:
        return dict(conn.execute(select(tool_call).where(tool_call.c.id == cid)).mappings().one())


def test_the_pending_inbox_lists_the_runtimes_approval_beside_a_proposal(
    store: ActionProposalStore, up: Any
) -> None:
    _propose(store, _acme(up), "p-soon", expires_at=T0 + 10 * MIN)
    page = store.inbox()
    assert [e.proposal.id for e in page.entries] == ["p-soon"]
    [call] = page.tool_calls  # globex's pending one: not the rejected one, not acme's executed
    assert call.id == up.tool_calls["pending"]
    assert (call.actor_ref, call.tenant_ref, call.thread_id, call.run_id) == (
        "bob",
        "globex",
        up.threads["globex"],
        up.runs["globex"],
    )
    assert (call.tool_name, call.tool_type, call.status, call.pending) == (
        "cancel_invoice",
        "action",
        "pending_approval",
        True,
    )
    assert call.input_value == {"order_id": 7} and call.created_at == T0 - 600_000 + 6_030
    assert (page.more, page.past_expiry, page.legacy) == (False, 0, 0)


def test_the_filters_paging_and_states_apply_to_tool_calls(
    store: ActionProposalStore, up: Any
) -> None:
    _propose(store, _acme(up), "p-acme", expires_at=T0 + 10 * MIN)
    pending = up.tool_calls["pending"]
    assert _calls(store.inbox(tenant_ref="globex")) == [pending]
    assert store.inbox(tenant_ref="globex").entries == []
    assert _calls(store.inbox(tenant_ref="acme")) == []
    assert _calls(store.inbox(actor_ref="bob")) == [pending]
    assert _calls(store.inbox(actor_ref="alice")) == []
    assert _calls(store.inbox(tool_name="cancel_invoice")) == [pending]
    assert _calls(store.inbox(tool_name="cancel_invoice ")) == []  # exact, PAD SPACE or not
    assert _calls(store.inbox(tool_name="update_invoice")) == []  # rejected: decided
    assert _calls(store.inbox(expiring_within_ms=366 * 24 * 60 * MIN)) == []  # never expires
    for state in ("queued", "running", "failed"):
        assert _calls(store.inbox(state)) == []  # type: ignore[arg-type]
    one = store.inbox(limit=1)
    assert [e.proposal.id for e in one.entries] == ["p-acme"] and one.tool_calls == []
    assert one.more
    two = store.inbox(limit=2)
    assert _calls(two) == [pending] and not two.more


def test_oldest_first_either_word_the_run_s_actor_else_the_thread_s(
    engine: Any, store: ActionProposalStore, up: Any
) -> None:
    acme = up.threads["acme"]
    with engine.begin() as conn:
        # an older agora writer's word, on a run that another actor started in alice's thread
        delegated = start_run(conn, thread_id=acme, actor_ref="dave", tenant_ref="acme").id
        m1 = append_message(
            conn, thread_id=acme, role="assistant", content="", run_id=delegated,
            clock=ManualClock(T0 - 900_000),
        ).id  # fmt: skip
        # the call has no run_id of its own: upstream reads the message's
        record_tool_call(
            conn, message_id=m1, tool_call_id="call-old-word", tool_name="wire_money",
            tool_type="function", status="awaiting_approval", clock=ManualClock(T0 - 900_000),
        )  # fmt: skip
        # no run at all: the thread's actor
        m2 = append_message(
            conn, thread_id=acme, role="assistant", content="", clock=ManualClock(T0 - 1_000)
        ).id
        record_tool_call(
            conn, message_id=m2, tool_call_id="call-no-run", tool_name="wire_money",
            tool_type="action", status="pending_approval", clock=ManualClock(T0 - 1_000),
        )  # fmt: skip
    page = store.inbox()
    assert _calls(page) == ["call-old-word", up.tool_calls["pending"], "call-no-run"]
    old, _, no_run = page.tool_calls
    assert (old.actor_ref, old.run_id, old.status, old.pending) == (
        "dave",
        delegated,
        "awaiting_approval",
        True,
    )
    assert (no_run.actor_ref, no_run.run_id, no_run.tenant_ref) == ("alice", None, "acme")
    assert _calls(store.inbox(actor_ref="dave")) == ["call-old-word"]
    assert _calls(store.inbox(actor_ref="alice")) == ["call-no-run"]
    with engine.connect() as conn:
        assert [c.id for c in list_tool_call_approvals(conn, tool_name="wire_money", limit=1)] == [
            "call-old-word"
        ]
        with pytest.raises(InvalidInput):
            list_tool_call_approvals(conn, limit=1001)


def test_a_call_a_proposal_stands_for_is_listed_once(
    engine: Any, store: ActionProposalStore, up: Any
) -> None:
    """agora's own model writes the proposal and leaves its call awaiting_approval (the demo)."""
    _propose(
        store, _globex(up), "p-for-the-call",
        run_id=up.runs["globex"], tool_call_id=up.tool_calls["pending"],
    )  # fmt: skip
    page = store.inbox()
    assert [e.proposal.id for e in page.entries] == ["p-for-the-call"] and page.tool_calls == []
    assert store.resolve_approval(up.tool_calls["pending"], _globex(up)) == (
        "proposal",
        up.tool_calls["pending"],
    )  # not a tool-call approval any more: answered as any unknown proposal id


def test_ids_and_prefixes_resolve_in_the_scope_only(store: ActionProposalStore, up: Any) -> None:
    globex, pending = _globex(up), up.tool_calls["pending"]
    assert store.resolve_approval(pending, globex) == ("tool_call", pending)
    assert store.resolve_approval(pending[:8], globex) == ("tool_call", pending)
    assert store.resolve_approval(pending[:7], globex) == ("proposal", pending[:7])  # too short
    for wrong in (
        Scope("acme", "bob", up.threads["globex"]),
        Scope(None, "bob", up.threads["globex"]),
        Scope("globex", "alice", up.threads["globex"]),
        Scope("globex", "bob", up.threads["acme"]),
    ):
        assert store.resolve_approval(pending, wrong) == ("proposal", pending)
        with pytest.raises(NotFound):
            store.get_tool_call_approval(pending, wrong)
    assert store.resolve_approval("call_", globex) == ("proposal", "call_")  # short: not a prefix
    shown = store.get_tool_call_approval(pending, globex)
    assert shown.pending and shown.scope == globex
    rejected = store.get_tool_call_approval(up.tool_calls["rejected"], globex)
    assert (rejected.status, rejected.pending, rejected.error) == ("rejected", False, "not allowed")
    # acme's refund was approved and executed: still an approval to show; the read call is not
    acme = _acme(up)
    refund = store.get_tool_call_approval(up.tool_calls["refund"], acme)
    assert (refund.status, refund.executed_by_ref) == ("executed", "alice")
    assert refund.executed_at == T0 - 600_000 + 3_034
    with pytest.raises(NotFound):
        store.get_tool_call_approval(up.tool_calls["lookup"], acme)


def test_a_prefix_of_two_approvals_is_ambiguous(
    engine: Any, store: ActionProposalStore, up: Any
) -> None:
    with engine.begin() as conn:
        record_tool_call(
            conn, message_id=up.messages["globex"][1], tool_call_id="call_pending_second",
            tool_name="cancel_invoice", tool_type="action", status="pending_approval",
            run_id=up.runs["globex"], clock=ManualClock(T0),
        )  # fmt: skip
    with pytest.raises(AmbiguousId) as ambiguous:
        store.resolve_approval("call_pending_", _globex(up))
    assert set(ambiguous.value.matches) == {up.tool_calls["pending"], "call_pending_second"}
    assert store.resolve_approval("call_pending_s", _globex(up)) == (
        "tool_call",
        "call_pending_second",
    )


def test_a_decision_on_a_tool_call_is_refused_and_writes_nothing(
    engine: Any, store: ActionProposalStore, up: Any
) -> None:
    pending = up.tool_calls["pending"]
    before = _row(engine, pending)
    call = store.get_tool_call_approval(pending, _globex(up))
    with pytest.raises(InvalidInput) as refused:
        refuse_tool_call_decision(call)
    message = refused.value.message
    assert refused.value.exit_code == 2 and "\n" not in message
    assert pending in message and up.runs["globex"] in message
    assert "AgentService.approve(runId, toolCallId)" in message and "nothing was written" in message
    assert _row(engine, pending) == before
    rejected = store.get_tool_call_approval(up.tool_calls["rejected"], _globex(up))
    with pytest.raises(InvalidInput, match="already rejected"):
        refuse_tool_call_decision(rejected)


def test_the_tool_call_side_reads_the_status_created_index(
    engine: Any, store: ActionProposalStore, dialect: str
) -> None:
    seen: list[tuple[str, Any]] = []

    def grab(conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        if "FROM agent_tool_call" in statement and "pending_approval" in str(params):
            seen.append((statement, params))

    event.listen(engine, "before_cursor_execute", grab)
    try:
        store.inbox()
    finally:
        event.remove(engine, "before_cursor_execute", grab)
    [(statement, params)] = seen  # one statement for the tool-call side
    with engine.begin() as conn:
        if dialect == "postgresql":
            # The planner's choice on a table of a few rows depends on whether autovacuum has
            # analysed it yet: give it the shape the index is for (thousands of settled calls, a
            # few waiting), analysed, inside this transaction (rolled back below).
            conn.exec_driver_sql(
                "INSERT INTO agent_tool_call (id, message_id, tool_name, tool_type, status,"
                " created_at) SELECT 'bulk-' || g, message_id, tool_name, tool_type, 'completed',"
                " created_at - g FROM agent_tool_call, generate_series(1, 3000) AS g"
                " WHERE agent_tool_call.id = (SELECT min(id) FROM agent_tool_call)"
            )
            conn.exec_driver_sql("ANALYZE agent_tool_call")
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
            explain = "EXPLAIN"
        elif dialect == "sqlite":
            explain = "EXPLAIN QUERY PLAN"
        else:
            explain = "EXPLAIN"
        rows = conn.exec_driver_sql(f"{explain} {statement}", params).mappings().all()
        conn.rollback()
    if dialect == "mysql":  # InnoDB scans a table this small whatever the indexes: usable is all
        [call] = [r for r in rows if r["table"] == "agent_tool_call"]
        assert "agent_tool_call_status_created_idx" in call["possible_keys"], rows
    else:
        plan = " ".join(str(list(r.values())[-1]) for r in rows)
        assert "agent_tool_call_status_created_idx" in plan, plan
