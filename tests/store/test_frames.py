"""The stream-frame writer and reader (frames.md) on every dialect: seq, coalescing, replay."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import insert

from agora_cli.store._clock import ManualClock
from agora_cli.store._errors import Conflict, InvalidInput
from agora_cli.store._frames import (
    FrameWriter,
    StreamFrame,
    close,
    find_last_frame,
    follow,
    frame_stats,
    read_frames,
)
from agora_cli.store._schema import stream_frame

T0 = 1_767_225_600_000


def writer(engine: Any, run_id: str, clock: ManualClock, **kw: Any) -> FrameWriter:
    return FrameWriter(engine, run_id, clock=clock, autoflush=False, auto_purge=False, **kw)


def rows_of(engine: Any, run_id: str) -> list[StreamFrame]:
    with engine.connect() as conn:
        return read_frames(conn, run_id)


def payloads(engine: Any, run_id: str) -> list[Any]:
    return [r.payload() for r in rows_of(engine, run_id)]


def text(delta: str, **kw: Any) -> dict[str, Any]:
    return {"type": "text-delta", "delta": delta, **kw}


def insert_rows(engine: Any, run_id: str, seqs: range, created_at: int, tag: str = "") -> None:
    with engine.begin() as conn:
        conn.execute(
            insert(stream_frame),
            [
                {
                    "run_id": run_id,
                    "seq": s,
                    "frame": json.dumps({"type": "data-n", "data": f"{tag}{s}"}),
                    "created_at": created_at,
                }
                for s in seqs
            ],
        )


# --- writer --------------------------------------------------------------------------------


def test_seq_is_gapless_from_one_and_end_marker_is_null(engine: Any) -> None:
    clock = ManualClock(T0)
    w = writer(engine, "run-a", clock)
    for i in range(7):
        w.append({"type": "tool-result", "tool_call_id": f"c{i}", "output": i})
        clock.advance(1)
    assert w.last_seq == 7
    assert w.end() == 8
    assert w.end() == 8  # idempotent
    rows = rows_of(engine, "run-a")
    assert [r.seq for r in rows] == list(range(1, 9))
    assert [r.is_end for r in rows] == [False] * 7 + [True]
    assert rows[-1].frame is None and rows[-1].payload() is None
    assert rows[0].payload() == {"type": "tool-result", "tool_call_id": "c0", "output": 0}
    assert [r.created_at for r in rows] == [T0 + i for i in range(7)] + [T0 + 7]
    with pytest.raises(Conflict):
        w.append(text("late"))


def test_text_deltas_within_flush_ms_become_one_row(engine: Any) -> None:
    clock = ManualClock(T0)
    w = writer(engine, "run-t", clock, flush_ms=50)
    for piece in ("Hel", "lo, ", "wor"):
        w.append(text(piece))
        clock.advance(20)  # 0, 20, 40 ms after the first: one row
    assert rows_of(engine, "run-t") == []  # gathered in the process, not yet written
    w.append(text("ld"))  # 60 ms after the first: the gathered row is written, a new one starts
    assert payloads(engine, "run-t") == [text("Hello, wor")]
    w.end()
    assert payloads(engine, "run-t") == [text("Hello, wor"), text("ld"), None]


def test_reasoning_and_tool_input_deltas_coalesce_per_kind_and_call(engine: Any) -> None:
    clock = ManualClock(T0)
    w = writer(engine, "run-k", clock)
    frames = [
        {"type": "reasoning-delta", "delta": "think "},
        {"type": "reasoning-delta", "delta": "hard"},
        {"type": "tool-input-delta", "tool_call_id": "a", "delta": '{"q":'},
        {"type": "tool-input-delta", "tool_call_id": "a", "delta": '"x"}'},
        {"type": "tool-input-delta", "tool_call_id": "b", "delta": "{}"},
        {"type": "tool-input-delta", "tool_call_id": "a", "delta": " "},
        text("t1", id="p1"),
        text("t2", id="p2"),  # another text part: not the same kind
        text("t3", id="p2"),
    ]
    for frame in frames:
        w.append(frame)
        clock.advance(1)
    w.end()
    assert payloads(engine, "run-k") == [
        {"type": "reasoning-delta", "delta": "think hard"},
        {"type": "tool-input-delta", "tool_call_id": "a", "delta": '{"q":"x"}'},
        {"type": "tool-input-delta", "tool_call_id": "b", "delta": "{}"},
        {"type": "tool-input-delta", "tool_call_id": "a", "delta": " "},
        text("t1", id="p1"),
        text("t2t3", id="p2"),
        None,
    ]


def test_other_frames_and_flush_write_the_gathered_delta_first(engine: Any) -> None:
    clock = ManualClock(T0)
    w = writer(engine, "run-o", clock)
    w.append(text("a"))
    w.append(text("b"))
    w.append({"type": "tool-result", "tool_call_id": "c", "output": "ok"})
    w.append(text("c"))
    w.append({"type": "reasoning-delta", "delta": "r"})  # another kind: "c" is written first
    w.flush()
    assert payloads(engine, "run-o") == [
        text("ab"),
        {"type": "tool-result", "tool_call_id": "c", "output": "ok"},
        text("c"),
        {"type": "reasoning-delta", "delta": "r"},
    ]
    assert [r.seq for r in rows_of(engine, "run-o")] == [1, 2, 3, 4]


def test_flush_ms_zero_writes_every_delta(engine: Any) -> None:
    w = writer(engine, "run-z", ManualClock(T0), flush_ms=0)
    w.append(text("a"))
    w.append(text("b"))
    assert payloads(engine, "run-z") == [text("a"), text("b")]


def test_timer_writes_a_gathered_delta_after_flush_ms(engine: Any) -> None:
    w = FrameWriter(engine, "run-timer", flush_ms=30, auto_purge=False)
    w.append(text("soon"))
    deadline = time.monotonic() + 10
    while not rows_of(engine, "run-timer") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert payloads(engine, "run-timer") == [text("soon")]
    w.append(text("next"))
    w.end()
    assert payloads(engine, "run-timer") == [text("soon"), text("next"), None]


def test_context_manager_flushes_without_ending(engine: Any) -> None:
    with writer(engine, "run-cm", ManualClock(T0)) as w:
        w.append(text("kept"))
    assert payloads(engine, "run-cm") == [text("kept")]


def test_restarted_writer_continues_after_the_highest_seq(engine: Any) -> None:
    clock = ManualClock(T0)
    first = writer(engine, "run-r", clock)
    for i in range(3):
        first.append({"type": "data-n", "data": i})
    second = writer(engine, "run-r", clock)  # the process restarted
    second.append({"type": "data-n", "data": 3})
    assert second.end() == 5
    assert [r.seq for r in rows_of(engine, "run-r")] == [1, 2, 3, 4, 5]


def test_primary_key_refuses_a_duplicate_seq(engine: Any) -> None:
    clock = ManualClock(T0)
    a = writer(engine, "run-dup", clock)
    b = writer(engine, "run-dup", clock)
    a.append({"type": "data-n", "data": "a1"})  # seq 1
    b.append({"type": "data-n", "data": "b2"})  # b reads the highest seq: 2
    with pytest.raises(Conflict, match="another writer"):
        a.append({"type": "data-n", "data": "a2"})  # a believes 2 is free
    assert [r.payload()["data"] for r in rows_of(engine, "run-dup")] == ["a1", "b2"]


@pytest.mark.parametrize(
    "frame",
    [
        {"delta": "no type"},
        {"type": ""},
        {"type": "text-delta"},
        {"type": "text-delta", "delta": 3},
        {"type": "tool-input-delta", "delta": "x"},
        {"type": "data-x", "data": object()},
        {"type": "data-x", "data": float("nan")},
        ["type", "text-delta"],
    ],
)
def test_malformed_frames_are_invalid_input(engine: Any, frame: Any) -> None:
    w = writer(engine, "run-bad", ManualClock(T0))
    with pytest.raises(InvalidInput):
        w.append(frame)
    assert rows_of(engine, "run-bad") == []


def test_bad_run_ids_are_invalid_input(engine: Any) -> None:
    with pytest.raises(InvalidInput):
        FrameWriter(engine, " ")
    with pytest.raises(InvalidInput):
        FrameWriter(engine, "x" * 256)
    with engine.connect() as conn, pytest.raises(InvalidInput):
        read_frames(conn, "")


def test_long_frames_round_trip(engine: Any) -> None:
    big = "é🙂" * 50_000  # well past MySQL's 64 KB TEXT
    w = writer(engine, "run-big", ManualClock(T0))
    w.append({"type": "tool-result", "tool_call_id": "c", "output": big})
    w.end()
    assert payloads(engine, "run-big")[0]["output"] == big


# --- reader --------------------------------------------------------------------------------


def test_read_frames_after_and_limit(engine: Any) -> None:
    insert_rows(engine, "run-read", range(1, 11), T0)
    insert_rows(engine, "other", range(1, 4), T0)
    with engine.connect() as conn:
        assert [r.seq for r in read_frames(conn, "run-read", after=6)] == [7, 8, 9, 10]
        assert [r.seq for r in read_frames(conn, "run-read", after=2, limit=3)] == [3, 4, 5]
        last = find_last_frame(conn, "run-read")
        assert last is not None and last.seq == 10 and last.run_id == "run-read"
        assert find_last_frame(conn, "nobody") is None


def scripted(steps: list[Callable[[], None]]) -> Callable[[float], None]:
    """A ``sleep`` for ``follow`` that runs the next step instead of sleeping."""

    def sleep(_seconds: float) -> None:
        if not steps:
            raise AssertionError("the reader kept polling after the script ran out")
        steps.pop(0)()

    return sleep


def test_late_reader_replays_from_the_first_row(engine: Any) -> None:
    clock = ManualClock(T0)
    w = writer(engine, "run-late", clock)
    for piece in ("a", "b"):
        w.append({"type": "data-n", "data": piece})
    w.end()
    got = list(follow(engine, "run-late", sleep=scripted([])))
    assert [r.seq for r in got] == [1, 2, 3] and got[-1].is_end


def test_reader_follows_a_writer_to_the_end_marker(engine: Any) -> None:
    clock = ManualClock(T0)
    w = writer(engine, "run-f", clock)
    w.append({"type": "start"})

    def write(n: int) -> Callable[[], None]:
        def step() -> None:
            for i in range(n):
                w.append({"type": "data-n", "data": i})
            clock.advance(100)

        return step

    def end() -> None:
        w.end()

    steps = [write(0), write(3), write(0), write(2), end]
    got = list(follow(engine, "run-f", poll_ms=5, page=2, sleep=scripted(steps)))
    assert [r.seq for r in got] == list(range(1, 8))
    assert got[-1].is_end and not any(r.is_end for r in got[:-1])


def test_reader_resumes_after_a_seq(engine: Any) -> None:
    insert_rows(engine, "run-resume", range(1, 6), T0)
    steps = [lambda: close_run(engine, "run-resume")]
    got = list(follow(engine, "run-resume", after=3, sleep=scripted(steps)))
    assert [r.seq for r in got] == [4, 5]


def close_run(engine: Any, run_id: str) -> None:
    with engine.begin() as conn:
        close(conn, run_id)


def test_a_purged_run_ends_its_reader(engine: Any) -> None:
    insert_rows(engine, "run-p", range(1, 4), T0)
    steps = [lambda: None, lambda: close_run(engine, "run-p")]
    got = list(follow(engine, "run-p", sleep=scripted(steps)))
    assert [r.seq for r in got] == [1, 2, 3]  # then no rows left: the reader ended


def test_restarted_numbering_is_replayed_from_the_new_first_row(engine: Any) -> None:
    insert_rows(engine, "run-n", range(1, 6), T0, tag="old")

    def restart() -> None:
        close_run(engine, "run-n")  # purged past its TTL while parked ...
        insert_rows(engine, "run-n", range(1, 3), T0 + 10, tag="new")  # ... then wrote again

    def end() -> None:
        writer(engine, "run-n", ManualClock(T0 + 20)).end()

    got = list(follow(engine, "run-n", sleep=scripted([restart, end])))
    assert [r.seq for r in got] == [1, 2, 3, 4, 5, 1, 2, 3]
    assert [r.payload() for r in got[5:7]] == [
        {"type": "data-n", "data": "new1"},
        {"type": "data-n", "data": "new2"},
    ]
    assert got[-1].is_end


def test_restarted_numbering_past_the_readers_cursor_is_detected(engine: Any) -> None:
    insert_rows(engine, "run-m", range(1, 3), T0, tag="old")

    def restart() -> None:
        close_run(engine, "run-m")
        insert_rows(engine, "run-m", range(1, 5), T0 + 10, tag="new")  # seq 2 exists again
        writer(engine, "run-m", ManualClock(T0 + 11)).end()

    got = list(follow(engine, "run-m", sleep=scripted([restart])))
    assert [r.seq for r in got] == [1, 2, 1, 2, 3, 4, 5]
    assert got[3].payload()["data"] == "new2"


def test_reader_waits_for_a_first_row_only_with_wait_ms(engine: Any) -> None:
    assert list(follow(engine, "run-w", sleep=scripted([]))) == []

    def first() -> None:
        writer(engine, "run-w", ManualClock(T0)).end()

    sleep = scripted([lambda: None, first])
    got = list(follow(engine, "run-w", poll_ms=10, wait_ms=30, sleep=sleep))
    assert [r.seq for r in got] == [1] and got[0].is_end


# --- close and stats -----------------------------------------------------------------------


def test_close_deletes_one_run(engine: Any) -> None:
    insert_rows(engine, "run-c", range(1, 5), T0)
    insert_rows(engine, "run-keep", range(1, 3), T0)
    with engine.begin() as conn:
        assert close(conn, "run-c") == 4
        assert close(conn, "run-c") == 0
    assert rows_of(engine, "run-c") == [] and len(rows_of(engine, "run-keep")) == 2


def test_frame_stats(engine: Any) -> None:
    clock = ManualClock(T0 + 10 * 3_600_000)
    with engine.connect() as conn:
        empty = frame_stats(conn, clock=clock)
    assert (empty.runs, empty.rows, empty.ended_runs, empty.oldest, empty.expired_runs) == (
        0,
        0,
        0,
        None,
        0,
    )
    insert_rows(engine, "old-ended", range(1, 4), T0)
    writer(engine, "old-ended", ManualClock(T0 + 5)).end()
    insert_rows(engine, "old-crashed", range(1, 3), T0 + 1000)
    insert_rows(engine, "live", range(1, 3), T0 + 2000)  # old first rows ...
    insert_rows(engine, "live", range(3, 4), clock.now_ms())  # ... and a new last one
    with engine.connect() as conn:
        st = frame_stats(conn, ttl_s=3600, clock=clock)
        off = frame_stats(conn, ttl_s=0, clock=clock)
    assert (st.runs, st.rows, st.ended_runs, st.oldest, st.expired_runs) == (3, 9, 1, T0, 2)
    assert st.cutoff == clock.now_ms() - 3_600_000
    assert off.expired_runs == 0 and off.cutoff is None


def test_frames_carry_their_runs_tenant_and_die_with_its_runs(engine: Any) -> None:
    from sqlalchemy import select

    from agora_cli.store._frames import delete_frames_of_runs
    from agora_cli.store._schema import run, thread

    clock = ManualClock(T0)
    with engine.begin() as conn:
        for tenant, own in (("acme", None), ("globex", "globex")):
            conn.execute(
                insert(thread).values(
                    id=f"t-{tenant}",
                    actor_ref="a",
                    tenant_ref=tenant,
                    title="",
                    created_at=T0,
                    updated_at=T0,
                )
            )
            conn.execute(  # acme's run has no tenant_ref of its own: its thread's
                insert(run).values(
                    id=f"r-{tenant}",
                    thread_id=f"t-{tenant}",
                    actor_ref="a",
                    tenant_ref=own,
                    status="running",
                    started_at=T0,
                )
            )
    for run_id in ("r-acme", "r-globex", "r-none"):
        with writer(engine, run_id, clock) as w:
            w.append({"type": "text", "text": "x"})
            w.end()
    with engine.connect() as conn:
        got = dict(
            conn.execute(select(stream_frame.c.run_id, stream_frame.c.tenant_ref).distinct()).all()
        )
    assert got == {"r-acme": "acme", "r-globex": "globex", "r-none": None}  # no run: none
    with engine.begin() as conn:
        # exact ids: 'r-none ' is another run, even under MySQL's PAD SPACE
        assert delete_frames_of_runs(conn, ["r-acme", "r-globex", "r-globex", "r-none "]) == 4
        assert delete_frames_of_runs(conn, []) == 0
    assert [r.run_id for r in rows_of(engine, "r-none")] == ["r-none", "r-none"]
    assert rows_of(engine, "r-acme") == []
