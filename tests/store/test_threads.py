"""The thread side of the agent store, on every dialect: seq, fork, truncate, delete, runs."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import func, select

from agora_cli.store._clock import ManualClock
from agora_cli.store._engine import retry_transient
from agora_cli.store._errors import InvalidInput, NotFound
from agora_cli.store._schema import (
    action_proposal,
    action_proposal_event,
    confirm_token,
    genui_call,
    message,
    queued_message,
    run,
    stream_frame,
    thread,
    token_usage,
    tool_call,
)
from agora_cli.store._steps import complete_tool_call, end_run, record_tool_call, start_run
from agora_cli.store._threads import (
    append_message,
    create_thread,
    delete_thread,
    find_thread,
    fork_thread,
    get_thread,
    get_transcript,
    list_messages,
    list_threads,
    load_thread_for_turn,
    truncate_from,
)

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00.000Z


def count(conn: Any, table: Any, **where: Any) -> int:
    q = select(func.count()).select_from(table)
    for column, value in where.items():
        q = q.where(table.c[column] == value)
    return int(conn.execute(q).scalar_one())


def add_usage(conn: Any, thread_id: str, n: int, *, message_id: str | None = None) -> None:
    conn.execute(
        token_usage.insert(),
        [
            {
                "id": f"{thread_id}-u{i}",
                "thread_id": thread_id,
                "actor_ref": "alice",
                "message_id": message_id,
                "model_id": "gpt-4o-mini",
                "purpose": "chat",
                "input_tokens": 10,
                "output_tokens": 5,
                "cost_usd": 0.001,
                "cost_source": "estimate",
                "created_at": T0,
            }
            for i in range(n)
        ],
    )


def add_proposal(conn: Any, thread_id: str, key: str) -> None:
    conn.execute(
        action_proposal.insert().values(
            id=f"prop-{key}",
            idempotency_key=key,
            actor_ref="alice",
            thread_id=thread_id,
            tool_name="refund",
            input='{"order": 7}',
            created_at=T0,
            updated_at=T0,
        )
    )


def populate(conn: Any, thread_id: str, clock: ManualClock) -> dict[str, int]:
    """Give a thread one row or more in every child table; return the expected counts."""
    msgs = [
        append_message(conn, thread_id=thread_id, role="user", content=f"m{i}", clock=clock)
        for i in range(3)
    ]
    record_tool_call(
        conn, message_id=msgs[1].id, tool_call_id=f"{thread_id}-tc1", tool_name="a", clock=clock
    )
    record_tool_call(
        conn, message_id=msgs[2].id, tool_call_id=f"{thread_id}-tc2", tool_name="b", clock=clock
    )
    add_usage(conn, thread_id, 4, message_id=msgs[1].id)
    start_run(conn, thread_id=thread_id, actor_ref="alice", run_id=f"{thread_id}-r", clock=clock)
    conn.execute(  # the run's stream frames (no foreign key: they go with the thread all the same)
        stream_frame.insert(),
        [{"run_id": f"{thread_id}-r", "seq": n, "frame": "{}", "created_at": T0} for n in (1, 2)],
    )
    add_proposal(conn, thread_id, f"{thread_id}:k1")
    add_proposal(conn, thread_id, f"{thread_id}:k2")
    conn.execute(  # an operator's act on one of them (issue 28): it goes with its proposal
        action_proposal_event.insert().values(
            id=f"{thread_id}-ev",
            proposal_id=f"prop-{thread_id}:k1",
            kind="cancel",
            acted_by="ops",
            created_at=T0,
        )
    )
    conn.execute(
        queued_message.insert().values(
            id=f"{thread_id}-q",
            thread_id=thread_id,
            actor_ref="alice",
            content="later",
            created_at=T0,
        )
    )
    conn.execute(
        confirm_token.insert().values(
            token_hash=f"{thread_id}-hash",
            thread_id=thread_id,
            actor_ref="alice",
            expires_at=T0 + 1,
            created_at=T0,
        )
    )
    conn.execute(
        genui_call.insert().values(
            id=f"{thread_id}-g",
            thread_id=thread_id,
            component="Card",
            props="{}",
            status="done",
            created_at=T0,
            updated_at=T0,
        )
    )
    return {
        "agent_message": 3,
        "agent_tool_call": 2,
        "agent_stream_frame": 2,
        "agent_action_proposal_event": 1,
        "agent_token_usage": 4,
        "agent_run": 1,
        "agent_action_proposal": 2,
        "agent_queued_message": 1,
        "agent_confirm_token": 1,
        "agent_genui_call": 1,
        "agent_thread": 1,
    }


CHILD_TABLES = (
    message,
    token_usage,
    run,
    action_proposal,
    queued_message,
    confirm_token,
    genui_call,
)


def test_create_and_get(engine: Any) -> None:
    clock = ManualClock(T0)
    with engine.begin() as conn:
        t = create_thread(conn, actor_ref="alice", title="hi", tenant_ref="acme", clock=clock)
    with engine.begin() as conn:
        got = get_thread(conn, t.id)
        assert got == t
        assert got.created_at == got.updated_at == T0
        assert got.transient is False and got.persona == "default"
        assert find_thread(conn, "nope") is None
        with pytest.raises(NotFound):
            get_thread(conn, "nope")


def test_append_assigns_seq_and_bumps_updated_at(engine: Any) -> None:
    clock = ManualClock(T0)
    with engine.begin() as conn:
        t = create_thread(conn, actor_ref="alice", clock=clock)
    for i in range(3):
        clock.advance(1000)
        with engine.begin() as conn:
            m = append_message(conn, thread_id=t.id, role="user", content=f"c{i}", clock=clock)
        assert m.seq == i + 1
    with engine.begin() as conn:
        assert get_thread(conn, t.id).updated_at == T0 + 3000
        assert [m.content for m in list_messages(conn, t.id)] == ["c0", "c1", "c2"]


def test_seq_order_when_two_messages_share_a_millisecond(engine: Any) -> None:
    clock = ManualClock(T0)  # never moves: every message has the same created_at
    with engine.begin() as conn:
        t = create_thread(conn, actor_ref="alice", clock=clock)
        # ids that sort the other way round, so only seq can give the right order
        for i, mid in enumerate(["zz", "yy", "xx", "ww"]):
            append_message(
                conn, thread_id=t.id, role="user", content=f"c{i}", message_id=mid, clock=clock
            )
    with engine.begin() as conn:
        assert [m.content for m in list_messages(conn, t.id)] == ["c0", "c1", "c2", "c3"]
        assert [m.seq for m in list_messages(conn, t.id)] == [1, 2, 3, 4]
        turn = load_thread_for_turn(conn, t.id, limit=3)
        assert [m.content for m in turn.messages] == ["c1", "c2", "c3"]
        transcript = get_transcript(conn, t.id)
        assert [m.message.id for m in transcript.messages] == ["zz", "yy", "xx", "ww"]


def test_legacy_seq_zero_rows_sort_first_then_by_created_at(engine: Any) -> None:
    clock = ManualClock(T0 + 10_000)
    with engine.begin() as conn:
        t = create_thread(conn, actor_ref="alice", clock=clock)
        for mid, created in (("old-b", T0 + 2), ("old-a", T0 + 1)):
            conn.execute(
                message.insert().values(
                    id=mid, thread_id=t.id, role="user", content=mid, created_at=created
                )
            )
        new = append_message(conn, thread_id=t.id, role="user", content="new", clock=clock)
    assert new.seq == 1
    with engine.begin() as conn:
        assert [m.id for m in list_messages(conn, t.id)] == ["old-a", "old-b", new.id]


def test_append_to_missing_thread_is_not_found_and_writes_nothing(engine: Any) -> None:
    with pytest.raises(NotFound), engine.begin() as conn:
        append_message(conn, thread_id="missing", role="user", content="x")
    with engine.begin() as conn:
        assert count(conn, message) == 0


def test_concurrent_appenders_never_share_a_seq(engine: Any) -> None:
    with engine.begin() as conn:
        t = create_thread(conn, actor_ref="alice")
    workers, each = 3, 12
    errors: list[BaseException] = []
    start = threading.Barrier(workers)

    def appender(w: int) -> None:
        try:
            start.wait()
            for i in range(each):

                def once(i: int = i) -> None:
                    with engine.begin() as conn:
                        append_message(conn, thread_id=t.id, role="user", content=f"{w}-{i}")

                retry_transient(once)
        except BaseException as exc:
            errors.append(exc)

    pool = [threading.Thread(target=appender, args=(w,)) for w in range(workers)]
    for p in pool:
        p.start()
    for p in pool:
        p.join()
    assert not errors, errors
    with engine.begin() as conn:
        seqs = [m.seq for m in list_messages(conn, t.id)]
    assert seqs == list(range(1, workers * each + 1))


def test_load_thread_for_turn_projects_the_newest_messages(engine: Any) -> None:
    clock = ManualClock(T0)
    with engine.begin() as conn:
        t = create_thread(conn, actor_ref="alice", clock=clock)
        for i in range(5):
            clock.advance(1)
            append_message(
                conn,
                thread_id=t.id,
                role="assistant" if i % 2 else "user",
                content=f"c{i}",
                tool_calls=[{"id": f"call{i}"}] if i == 4 else None,
                usage={"input": 3},
                clock=clock,
            )
    with engine.begin() as conn:
        turn = load_thread_for_turn(conn, t.id, limit=2)
        assert turn.thread.id == t.id
        assert [(m.seq, m.role, m.content) for m in turn.messages] == [
            (4, "assistant", "c3"),
            (5, "user", "c4"),
        ]
        assert turn.messages[1].tool_calls == '[{"id":"call4"}]'
        assert not hasattr(turn.messages[0], "usage")  # a turn does not read the usage column
        assert len(load_thread_for_turn(conn, t.id, limit=50).messages) == 5
        with pytest.raises(InvalidInput):
            load_thread_for_turn(conn, t.id, limit=0)
        with pytest.raises(NotFound):
            load_thread_for_turn(conn, "missing")


def test_tool_call_record_and_complete_first_wins(engine: Any) -> None:
    clock = ManualClock(T0)
    with engine.begin() as conn:
        t = create_thread(conn, actor_ref="alice", clock=clock)
        m = append_message(conn, thread_id=t.id, role="assistant", content="", clock=clock)
        call = record_tool_call(
            conn,
            message_id=m.id,
            tool_call_id="call_1",
            tool_name="refund",
            input={"order": 7},
            clock=clock,
        )
    # the runtime's words: a read tool, recorded as about to run, then executed
    assert (call.status, call.tool_type, call.input) == ("auto_executed", "read", '{"order":7}')
    clock.advance(250)
    with engine.begin() as conn:
        done = complete_tool_call(
            conn, "call_1", output={"ok": True}, executed_by_ref="w1", clock=clock
        )
    assert (done.status, done.output, done.execution_ms) == ("executed", '{"ok":true}', 250)
    assert done.executed_at == T0 + 250
    clock.advance(1000)
    with engine.begin() as conn:
        again = complete_tool_call(conn, "call_1", status="failed", error="late", clock=clock)
    assert again == done
    with pytest.raises(NotFound), engine.begin() as conn:
        complete_tool_call(conn, "nope")


def test_runs_first_terminal_status_wins(engine: Any) -> None:
    clock = ManualClock(T0)
    with engine.begin() as conn:
        t = create_thread(conn, actor_ref="alice", clock=clock)
        r = start_run(conn, thread_id=t.id, actor_ref="alice", agent_name="main", clock=clock)
    assert (r.status, r.finished_at) == ("running", None)
    clock.advance(5000)
    with engine.begin() as conn:
        first = end_run(
            conn,
            r.id,
            status="completed",
            step_count=3,
            input_tokens=100,
            output_tokens=40,
            cost_usd=0.25,
            clock=clock,
        )
    assert first.ended
    assert (first.run.status, first.run.finished_at, first.run.step_count) == (
        "completed",
        T0 + 5000,
        3,
    )
    assert (first.run.input_tokens, first.run.cost_usd) == (100, 0.25)
    clock.advance(5000)
    with engine.begin() as conn:
        second = end_run(conn, r.id, status="failed", error="boom", clock=clock)
    assert not second.ended
    assert second.run == first.run
    with pytest.raises(InvalidInput), engine.begin() as conn:
        end_run(conn, r.id, status="running")
    with pytest.raises(NotFound), engine.begin() as conn:
        end_run(conn, "nope", status="failed")


def test_fork_copies_messages_up_to_a_seq(engine: Any) -> None:
    clock = ManualClock(T0)
    with engine.begin() as conn:
        t = create_thread(conn, actor_ref="alice", tenant_ref="acme", title="orig", clock=clock)
        msgs = [
            append_message(
                conn,
                thread_id=t.id,
                role="user",
                content=f"c{i}",
                attachments=[{"n": i}],
                clock=clock,
            )
            for i in range(4)
        ]
        record_tool_call(conn, message_id=msgs[0].id, tool_call_id="tc", tool_name="x")
        add_usage(conn, t.id, 2, message_id=msgs[0].id)
    clock.advance(60_000)
    with engine.begin() as conn:
        fork = fork_thread(conn, t.id, up_to_seq=2, title="branch", clock=clock)
    assert (fork.actor_ref, fork.tenant_ref, fork.title) == ("alice", "acme", "branch")
    assert fork.created_at == fork.updated_at == T0 + 60_000
    with engine.begin() as conn:
        copied = list_messages(conn, fork.id)
        assert [(m.seq, m.content, m.attachments) for m in copied] == [
            (1, "c0", '[{"n":0}]'),
            (2, "c1", '[{"n":1}]'),
        ]
        assert not {m.id for m in copied} & {m.id for m in msgs}
        assert len(list_messages(conn, t.id)) == 4  # the original is untouched
        assert count(conn, token_usage, thread_id=fork.id) == 0  # spend is not duplicated
        assert count(conn, tool_call) == 1
        nxt = append_message(conn, thread_id=fork.id, role="user", content="more", clock=clock)
        assert nxt.seq == 3
        whole = fork_thread(conn, t.id, clock=clock)
        assert len(list_messages(conn, whole.id)) == 4
    with pytest.raises(NotFound), engine.begin() as conn:
        fork_thread(conn, "missing")


def test_fork_keeps_a_summary_only_if_it_covers_what_was_copied(engine: Any) -> None:
    with engine.begin() as conn:
        t = create_thread(conn, actor_ref="alice")
        for i in range(4):
            append_message(conn, thread_id=t.id, role="user", content=f"c{i}")
        conn.execute(
            thread.update().where(thread.c.id == t.id).values(summary="s", summary_message_count=3)
        )
        assert fork_thread(conn, t.id, up_to_seq=3).summary == "s"
        short = fork_thread(conn, t.id, up_to_seq=2)
        assert (short.summary, short.summary_message_count) == (None, 0)


def test_truncate_from_deletes_messages_and_their_tool_calls(engine: Any) -> None:
    clock = ManualClock(T0)
    with engine.begin() as conn:
        t = create_thread(conn, actor_ref="alice", clock=clock)
        msgs = [
            append_message(conn, thread_id=t.id, role="user", content=f"c{i}", clock=clock)
            for i in range(5)
        ]
        for i, m in enumerate(msgs):
            record_tool_call(conn, message_id=m.id, tool_call_id=f"tc{i}", tool_name="x")
        add_usage(conn, t.id, 2, message_id=msgs[4].id)
        conn.execute(
            thread.update().where(thread.c.id == t.id).values(summary="s", summary_message_count=4)
        )
    clock.advance(1000)
    with engine.begin() as conn:
        result = truncate_from(conn, t.id, seq=3, clock=clock)
    assert (result.messages_deleted, result.tool_calls_deleted, result.summary_cleared) == (
        3,
        3,
        True,
    )
    with engine.begin() as conn:
        assert [m.content for m in list_messages(conn, t.id)] == ["c0", "c1"]
        assert sorted(r.id for r in conn.execute(select(tool_call.c.id))) == ["tc0", "tc1"]
        assert count(conn, token_usage, thread_id=t.id) == 2  # the money was spent
        after = get_thread(conn, t.id)
        assert after.updated_at == T0 + 1000 and after.summary is None
        assert append_message(conn, thread_id=t.id, role="user", content="again").seq == 3
        with pytest.raises(InvalidInput):
            truncate_from(conn, t.id, seq=0)
    with pytest.raises(NotFound), engine.begin() as conn:
        truncate_from(conn, "missing", seq=1)


def test_delete_thread_removes_every_child_and_reports_counts(engine: Any) -> None:
    clock = ManualClock(T0)
    with engine.begin() as conn:
        doomed = create_thread(conn, actor_ref="alice", clock=clock)
        kept = create_thread(conn, actor_ref="alice", clock=clock)
        expected = populate(conn, doomed.id, clock)
        populate(conn, kept.id, clock)
    with engine.begin() as conn:
        result = delete_thread(conn, doomed.id)
    assert result.id == doomed.id
    assert result.deleted == expected
    with engine.begin() as conn:
        for table in CHILD_TABLES:
            assert count(conn, table, thread_id=doomed.id) == 0, table.name
            assert count(conn, table, thread_id=kept.id) > 0, table.name
        assert count(conn, tool_call) == 2  # the kept thread's
        assert count(conn, action_proposal_event) == 1  # the kept thread's
        assert find_thread(conn, doomed.id) is None
    with pytest.raises(NotFound), engine.begin() as conn:
        delete_thread(conn, doomed.id)


def test_delete_thread_is_complete_with_sqlite_foreign_keys_off(tmp_path: Any) -> None:
    from sqlalchemy import create_engine

    from agora_cli.store._engine import open_engine
    from agora_cli.store._provision import ensure_agent_tables

    url = f"sqlite:///{tmp_path / 'fk-off.db'}"
    ensure_agent_tables(open_engine(url))
    plain = create_engine(url)  # pysqlite's default: foreign_keys OFF, nothing cascades
    clock = ManualClock(T0)
    with plain.begin() as conn:
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 0
        t = create_thread(conn, actor_ref="alice", clock=clock)
        expected = populate(conn, t.id, clock)
    with plain.begin() as conn:
        assert delete_thread(conn, t.id).deleted == expected
        for table in (*CHILD_TABLES, tool_call, action_proposal_event, thread):
            assert count(conn, table) == 0, table.name
    plain.dispose()


def test_list_threads_newest_activity_first(engine: Any) -> None:
    clock = ManualClock(T0)
    with engine.begin() as conn:
        a = create_thread(conn, actor_ref="alice", title="a", clock=clock)
        clock.advance(10)
        b = create_thread(conn, actor_ref="bob", title="b", clock=clock)
        clock.advance(10)
        c = create_thread(conn, actor_ref="alice", title="c", clock=clock)
        clock.advance(10)
        append_message(conn, thread_id=a.id, role="user", content="x", clock=clock)
        append_message(conn, thread_id=a.id, role="user", content="y", clock=clock)
    with engine.begin() as conn:
        listed = list_threads(conn)
        assert [t.id for t in listed] == [a.id, c.id, b.id]
        assert [t.messages for t in listed] == [2, 0, 0]
        assert listed[0].updated_at == T0 + 30
        assert [t.id for t in list_threads(conn, actor_ref="alice", limit=1)] == [a.id]
        with pytest.raises(InvalidInput):
            list_threads(conn, limit=0)


def test_identity_fields_are_validated_before_writing(engine: Any) -> None:
    with pytest.raises(InvalidInput), engine.begin() as conn:
        create_thread(conn, actor_ref="")
    with pytest.raises(InvalidInput), engine.begin() as conn:
        create_thread(conn, actor_ref="x" * 256)
    with engine.begin() as conn:
        assert count(conn, thread) == 0


def test_append_in_a_repeatable_read_transaction_never_reuses_a_seq(
    db_url: str, dialect: str
) -> None:
    from agora_cli.store._engine import is_retryable, open_engine

    if dialect == "sqlite":
        pytest.skip("SQLite's BEGIN IMMEDIATE serialises the two writers outright")
    rr = open_engine(db_url, isolation_level="REPEATABLE READ")
    try:
        with rr.begin() as conn:
            t = create_thread(conn, actor_ref="alice")
            append_message(conn, thread_id=t.id, role="user", content="first")
        with rr.connect() as stale:
            stale.begin()
            assert len(list_messages(stale, t.id)) == 1  # the snapshot is taken here
            with rr.begin() as other:
                append_message(other, thread_id=t.id, role="user", content="second")
            try:
                late = append_message(stale, thread_id=t.id, role="user", content="third")
            except Exception as exc:  # PostgreSQL refuses: a retryable serialization failure
                assert dialect == "postgresql" and is_retryable(exc), exc
                stale.rollback()
            else:
                assert late.seq == 3
                stale.commit()
        with rr.begin() as conn:
            seqs = [m.seq for m in list_messages(conn, t.id)]
        assert len(seqs) == len(set(seqs))
    finally:
        rr.dispose()


# --- threads as the runtime left them: soft-deleted, transient; their ledger -----------------


def test_soft_deleted_and_transient_threads_are_hidden_unless_asked(engine: Any) -> None:
    from agora_cli.store._threads import soft_delete_thread

    clock = ManualClock(T0)
    with engine.begin() as conn:
        for name, transient in (("kept", False), ("gone", False), ("scratch", True)):
            create_thread(conn, actor_ref="alice", thread_id=name, transient=transient, clock=clock)
            clock.advance(1000)
        first = soft_delete_thread(conn, "gone", clock=clock)
        clock.advance(1000)
        again = soft_delete_thread(conn, "gone", clock=clock)  # the first mark stays
    assert first.deleted_at == again.deleted_at == T0 + 3000

    def listed(**flags: bool) -> list[tuple[str, bool, int | None]]:
        with engine.connect() as conn:
            return [(t.id, t.transient, t.deleted_at) for t in list_threads(conn, **flags)]

    assert listed() == [("kept", False, None)]
    assert listed(include_deleted=True) == [("gone", False, T0 + 3000), ("kept", False, None)]
    assert listed(include_transient=True) == [("scratch", True, None), ("kept", False, None)]
    assert [t for t, _, _ in listed(include_deleted=True, include_transient=True)] == [
        "scratch",
        "gone",
        "kept",
    ]
    with engine.connect() as conn, pytest.raises(NotFound):
        soft_delete_thread(conn, "nope")


def test_each_listed_thread_carries_its_ledger_totals_in_one_query(engine: Any) -> None:
    from agora_cli.store._thread_model import ThreadUsageTotals
    from agora_cli.store._threads import usage_by_thread

    with engine.begin() as conn:
        for name in ("t-a", "t-b", "t-c"):
            create_thread(conn, actor_ref="alice", thread_id=name)
        add_usage(conn, "t-a", 3)
        add_usage(conn, "t-c", 2)
        conn.execute(token_usage.update().where(token_usage.c.id == "t-a-u1").values(cost_usd=None))
    with engine.connect() as conn:
        totals = usage_by_thread(conn, ["t-a", "t-b", "t-a"])
        listed = {t.id: t.usage for t in list_threads(conn)}
    a = totals["t-a"]
    assert (a.turns, a.unpriced_turns) == (3, 1) and set(totals) == {"t-a"}
    assert listed["t-a"] == a and listed["t-b"] == ThreadUsageTotals()
    assert listed["t-c"].turns == 2
    with engine.connect() as conn:
        assert usage_by_thread(conn, []) == {}
        with pytest.raises(InvalidInput):
            usage_by_thread(conn, [str(i) for i in range(1001)])


def test_delete_reports_the_ledger_that_goes_with_the_thread(engine: Any) -> None:
    with engine.begin() as conn:
        create_thread(conn, actor_ref="alice", thread_id="t-a")
        add_usage(conn, "t-a", 2)
        result = delete_thread(conn, "t-a")
        empty = create_thread(conn, actor_ref="alice", thread_id="t-b")
        nothing = delete_thread(conn, empty.id)
    assert result.ledger.turns == 2 and result.deleted["agent_token_usage"] == 2
    assert nothing.ledger.turns == 0 and nothing.ledger.cost_usd is None


def test_a_tool_call_that_never_ran_gets_its_status(engine: Any) -> None:
    from agora_cli.store._steps import set_tool_call_status

    clock = ManualClock(T0)
    with engine.begin() as conn:
        create_thread(conn, actor_ref="alice", thread_id="t-a")
        m = append_message(conn, thread_id="t-a", role="assistant", content="", clock=clock)
        for call_id in ("c1", "c2"):
            record_tool_call(
                conn, message_id=m.id, tool_call_id=call_id, tool_name="refund", clock=clock
            )
        complete_tool_call(conn, "c2", clock=clock)
        rejected = set_tool_call_status(conn, "c1", status="rejected", error="no")
        kept = set_tool_call_status(conn, "c2", status="rejected")
    assert (rejected.status, rejected.error, rejected.executed_at) == ("rejected", "no", None)
    assert kept.status == "executed"
