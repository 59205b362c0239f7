"""Runs: the filtered listing with keyset cursors, and one run in detail, on every dialect."""

from __future__ import annotations

import base64
import random
from typing import Any

import pytest

from agora_cli.store._clock import ManualClock
from agora_cli.store._errors import InvalidInput, NotFound
from agora_cli.store._frames import FrameWriter
from agora_cli.store._proposals import NewProposal, Scope, create_proposal
from agora_cli.store._runs import (
    decode_run_cursor,
    encode_run_cursor,
    get_run_detail,
    list_runs,
)
from agora_cli.store._schema import run
from agora_cli.store._steps import complete_tool_call, end_run, record_tool_call, start_run
from agora_cli.store._threads import append_message, create_thread
from agora_cli.store._usage import record_usage

T0 = 1_767_225_600_000


def _insert_runs(engine: Any, rows: list[dict[str, Any]]) -> None:
    with engine.begin() as conn:
        conn.execute(run.insert(), rows)


def _run_row(run_id: str, started_at: int, **extra: Any) -> dict[str, Any]:
    row = {
        "id": run_id,
        "thread_id": "t1",
        "agent_name": "support",
        "actor_ref": "alice",
        "tenant_ref": "acme",
        "status": "completed",
        "started_at": started_at,
        "finished_at": started_at + 1000,
        "step_count": 1,
        "input_tokens": 10,
        "output_tokens": 5,
        "cost_usd": None,
        "error": None,
        "durable": 0,
    }
    row.update(extra)
    return row


@pytest.fixture
def t1(engine: Any) -> None:
    with engine.begin() as conn:
        create_thread(conn, actor_ref="alice", tenant_ref="acme", thread_id="t1")
        create_thread(conn, actor_ref="bob", thread_id="t2")


def _all_pages(engine: Any, limit: int, **filters: Any) -> list[list[str]]:
    pages: list[list[str]] = []
    cursor = None
    while True:
        with engine.connect() as conn:
            page = list_runs(conn, after=cursor, limit=limit, **filters)
        pages.append([r.id for r in page.runs])
        if page.next_cursor is None:
            return pages
        cursor = page.next_cursor


def test_newest_first_and_pages_cover_every_run_once(engine: Any, t1: None) -> None:
    # ties on started_at are broken by id, so pages never split a tie unpredictably
    rows = [_run_row(f"r{n:03d}", T0 + (n // 3) * 1000) for n in range(40)]
    random.Random(5).shuffle(rows)
    _insert_runs(engine, rows)
    expected = sorted((r["started_at"], r["id"]) for r in rows)[::-1]
    pages = _all_pages(engine, 7)
    assert [len(p) for p in pages] == [7, 7, 7, 7, 7, 5]
    assert [i for p in pages for i in p] == [i for _, i in expected]
    assert _all_pages(engine, 40) == [[i for _, i in expected]]
    assert _all_pages(engine, 1000) == [[i for _, i in expected]]


def test_paging_under_concurrent_inserts_neither_skips_nor_repeats(engine: Any, t1: None) -> None:
    _insert_runs(engine, [_run_row(f"old-{n:03d}", T0 + n * 10) for n in range(30)])
    seen: list[str] = []
    cursor = None
    newer = 0
    while True:
        with engine.connect() as conn:
            page = list_runs(conn, after=cursor, limit=8)
        seen += [r.id for r in page.runs]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
        # between pages the runtime starts runs: newer than everything, and one at the very
        # instant of the cursor's row whose id sorts after it (newer in the listing's order)
        started, last_id = decode_run_cursor(cursor)
        _insert_runs(
            engine,
            [
                _run_row(f"new-{newer:03d}", T0 + 10_000 + newer),
                _run_row(last_id + "~", started),
            ],
        )
        newer += 1
    assert seen == [f"old-{n:03d}" for n in range(29, -1, -1)]
    assert len(set(seen)) == len(seen)
    with engine.connect() as conn:
        first = list_runs(conn, limit=3).runs
    assert [r.id for r in first] == ["new-002", "new-001", "new-000"]


def test_filters_each_use_their_column(engine: Any, t1: None) -> None:
    day = 86_400_000
    _insert_runs(
        engine,
        [
            _run_row("a1", T0, status="failed", error="boom"),
            _run_row("a2", T0 + day, agent_name="billing"),
            _run_row("b1", T0 + 2 * day, actor_ref="bob", tenant_ref=None, thread_id="t2"),
            _run_row("b2", T0 + 3 * day, actor_ref="bob ", tenant_ref="acme ", status="running"),
        ],
    )

    def ids(**filters: Any) -> list[str]:
        with engine.connect() as conn:
            return [r.id for r in list_runs(conn, **filters).runs]

    assert ids() == ["b2", "b1", "a2", "a1"]
    assert ids(actor_ref="bob") == ["b1"]  # exact: "bob " is someone else, on MySQL too
    assert ids(tenant_ref="acme") == ["a2", "a1"]
    assert ids(agent_name="billing") == ["a2"]
    assert ids(status="failed") == ["a1"]
    assert ids(status="running") == ["b2"]
    assert ids(thread_id="t2") == ["b1"]
    assert ids(from_ms=T0 + day, to_ms=T0 + 2 * day) == ["b1", "a2"]
    assert ids(from_ms=T0 + day, to_ms=T0 + 2 * day - 1) == ["a2"]
    assert ids(actor_ref="alice", status="completed") == ["a2"]


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "not a cursor",
        "!!!!",
        base64.urlsafe_b64encode(b"[1, 2]").decode(),
        base64.urlsafe_b64encode(b'["x", "r1"]').decode(),
        base64.urlsafe_b64encode(b'[true, "r1"]').decode(),
        base64.urlsafe_b64encode(b'[1, ""]').decode(),
        base64.urlsafe_b64encode(b'[99999999999999999999, "r1"]').decode(),
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
        "x" * 5000,
    ],
)
def test_a_bad_cursor_is_invalid_input(engine: Any, cursor: str) -> None:
    with engine.connect() as conn, pytest.raises(InvalidInput) as caught:
        list_runs(conn, after=cursor)
    assert caught.value.param == "after"


def test_the_cursor_round_trips() -> None:
    assert decode_run_cursor(encode_run_cursor(T0, "run/ü 😀")) == (T0, "run/ü 😀")


@pytest.mark.parametrize("limit", [0, 1001, -1, True])
def test_limits_out_of_range(engine: Any, limit: Any) -> None:
    with engine.connect() as conn, pytest.raises(InvalidInput):
        list_runs(conn, limit=limit)


def test_the_detail_of_a_run(engine: Any, t1: None) -> None:
    clock = ManualClock(T0)
    with engine.begin() as conn:
        r = start_run(conn, thread_id="t1", actor_ref="alice", run_id="run-1", clock=clock)
        start_run(conn, thread_id="t1", actor_ref="alice", run_id="run-2", clock=clock)
        m = append_message(conn, thread_id="t1", role="assistant", content="x", clock=clock)
        record_tool_call(
            conn, message_id=m.id, tool_call_id="c1", tool_name="lookup", run_id=r.id, clock=clock
        )
        record_tool_call(
            conn, message_id=m.id, tool_call_id="c2", tool_name="refund", run_id="run-2"
        )
        clock.advance(120)
        complete_tool_call(conn, "c1", status="failed", error="503", clock=clock)
        record_usage(
            conn,
            thread_id="t1",
            actor_ref="alice",
            model_id="gpt-4o-mini",
            purpose="turn",
            input_tokens=10,
            output_tokens=5,
            run_id=r.id,
            clock=clock,
        )
        create_proposal(
            conn,
            NewProposal(
                scope=Scope("acme", "alice", "t1"),
                tool_name="refund",
                input={"order": 7},
                run_id=r.id,
                tool_call_id="c1",
            ),
            clock=clock,
        )
        end_run(conn, r.id, status="failed", error="step 1: 503", clock=clock)
    with engine.connect() as conn:
        detail = get_run_detail(conn, "run-1")
        assert detail.frames is None
    assert detail.run.status == "failed" and detail.run.error == "step 1: 503"
    assert [(c.id, c.status, c.execution_ms) for c in detail.tool_calls] == [("c1", "failed", 120)]
    assert detail.tool_calls_total == 1 and detail.usage_total == 1
    assert [u.model_id for u in detail.usage] == ["gpt-4o-mini"]
    assert [p.tool_call_id for p in detail.proposals] == ["c1"]
    writer = FrameWriter(engine, "run-1", clock=clock, autoflush=False, auto_purge=False)
    writer.append({"type": "text-delta", "delta": "hi"})
    writer.flush()
    with engine.connect() as conn:
        frames = get_run_detail(conn, "run-1").frames
    assert frames is not None and (frames.rows, frames.ended) == (1, False)
    writer.end()
    with engine.connect() as conn:
        frames = get_run_detail(conn, "run-1").frames
        assert frames is not None and (frames.rows, frames.last_seq, frames.ended) == (2, 2, True)
        with pytest.raises(NotFound):
            get_run_detail(conn, "run-3")
