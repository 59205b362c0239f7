"""Frame purge (frames.md) on every dialect: whole expired runs only, never an active one."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest
from sqlalchemy import func, insert, select

from agora_cli.store._clock import ManualClock
from agora_cli.store._errors import InvalidInput
from agora_cli.store._frames import FrameWriter, purge_expired, read_frames
from agora_cli.store._frames import writer as frame_writer
from agora_cli.store._schema import stream_frame

NOW = 1_767_225_600_000 + 30 * 86_400_000
HOUR = 3_600_000


def add(engine: Any, runs: dict[str, list[int]]) -> None:
    """Insert rows: run id → the created_at of each of its rows, seq 1, 2, …"""
    rows = [
        {"run_id": run_id, "seq": i + 1, "frame": '{"type":"data-n"}', "created_at": at}
        for run_id, times in runs.items()
        for i, at in enumerate(times)
    ]
    with engine.begin() as conn:
        conn.execute(insert(stream_frame), rows)


def counts(engine: Any) -> dict[str, int]:
    with engine.connect() as conn:
        result = conn.execute(
            select(stream_frame.c.run_id, func.count()).group_by(stream_frame.c.run_id)
        )
        return {str(run_id): int(n) for run_id, n in result}


def test_purge_deletes_expired_runs_whole_and_keeps_active_ones(engine: Any) -> None:
    add(
        engine,
        {
            "ended": [NOW - 5 * HOUR, NOW - 5 * HOUR + 1, NOW - 2 * HOUR],
            "crashed": [NOW - 3 * HOUR] * 4,
            "long-running": [NOW - 9 * HOUR, NOW - 4 * HOUR, NOW - 60_000],  # old first rows
            "fresh": [NOW - 1000, NOW],
            "edge": [NOW - HOUR],  # exactly ttl old: not yet past it
        },
    )
    report = purge_expired(engine, 3600, clock=ManualClock(NOW))
    assert report.cutoff == NOW - HOUR
    assert (report.runs_purged, report.rows_deleted, report.runs_still_active) == (2, 7, 1)
    assert counts(engine) == {"long-running": 3, "fresh": 2, "edge": 1}


def test_dry_run_counts_without_deleting(engine: Any) -> None:
    add(engine, {"a": [NOW - 3 * HOUR] * 3, "b": [NOW - 3 * HOUR, NOW], "c": [NOW - 2 * HOUR]})
    before = counts(engine)
    dry = purge_expired(engine, 3600, batch=1, dry_run=True, clock=ManualClock(NOW))
    assert counts(engine) == before
    real = purge_expired(engine, 3600, batch=1, clock=ManualClock(NOW))
    assert (dry.runs_purged, dry.rows_deleted, dry.runs_still_active) == (2, 4, 1)
    assert (real.runs_purged, real.rows_deleted, real.runs_still_active) == (2, 4, 1)
    assert dry.dry_run and not real.dry_run
    assert counts(engine) == {"b": 2}


def test_many_runs_across_pages_and_batches(engine: Any) -> None:
    runs = {f"exp-{i:03d}": [NOW - 2 * HOUR - i * 7, NOW - 2 * HOUR] for i in range(120)}
    runs |= {f"act-{i:02d}": [NOW - 3 * HOUR + i, NOW - 10] for i in range(15)}
    add(engine, runs)
    batches: list[tuple[int, int]] = []
    report = purge_expired(
        engine, 3600, batch=7, clock=ManualClock(NOW), on_batch=lambda r, n: batches.append((r, n))
    )
    assert (report.runs_purged, report.rows_deleted, report.runs_still_active) == (120, 240, 15)
    assert report.batches == len(batches) >= 135 // 7
    assert all(r <= 7 for r, _ in batches)
    assert sum(n for _, n in batches) == 240
    assert counts(engine) == {f"act-{i:02d}": 2 for i in range(15)}


def test_purge_terminates_when_every_candidate_is_old_but_active(engine: Any) -> None:
    # Many old rows per run, so the index holds far more old entries than one page.
    add(
        engine, {f"act-{i:02d}": [NOW - 5 * HOUR + j for j in range(30)] + [NOW] for i in range(40)}
    )
    calls = []

    def on_batch(runs: int, rows: int) -> None:
        calls.append(runs)
        assert len(calls) < 1000, "purge does not terminate"

    report = purge_expired(engine, 3600, batch=1, clock=ManualClock(NOW), on_batch=on_batch)
    assert (report.runs_purged, report.rows_deleted, report.runs_still_active) == (0, 0, 40)
    assert sum(counts(engine).values()) == 40 * 31


def test_ttl_zero_turns_expiry_off_and_bad_arguments_are_refused(engine: Any) -> None:
    add(engine, {"old": [NOW - 100 * HOUR]})
    off = purge_expired(engine, 0, clock=ManualClock(NOW))
    assert (off.cutoff, off.runs_purged, off.rows_deleted) == (None, 0, 0)
    for kwargs in ({"ttl_s": -1}, {"batch": 0}, {"batch": 10_001}):
        with pytest.raises(InvalidInput):
            purge_expired(engine, **{"ttl_s": 3600, **kwargs})
    assert counts(engine) == {"old": 1}


def test_writer_auto_purges_at_most_once_a_minute(
    engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(frame_writer, "_AUTO_PURGE", frame_writer._PurgeGate())
    clock = ManualClock(NOW)
    add(engine, {"stale-1": [NOW - 2 * HOUR]})
    FrameWriter(engine, "w1", clock=clock, autoflush=False).end()
    assert counts(engine) == {"w1": 1}
    add(engine, {"stale-2": [NOW - 2 * HOUR]})
    clock.advance(59_000)
    FrameWriter(engine, "w2", clock=clock, autoflush=False).end()
    assert "stale-2" in counts(engine)  # within the minute: no second purge
    clock.advance(1_000)
    FrameWriter(engine, "w3", clock=clock, autoflush=False).end()
    assert set(counts(engine)) == {"w1", "w2", "w3"}
    add(engine, {"stale-3": [NOW - 2 * HOUR]})
    clock.advance(61_000)
    FrameWriter(engine, "w4", clock=clock, autoflush=False, auto_purge=False).end()
    FrameWriter(engine, "w5", clock=clock, autoflush=False, ttl_s=0).end()
    assert "stale-3" in counts(engine)  # neither may purge


WRITER = textwrap.dedent(
    """
    import json, sys
    from agora_cli.store._engine import open_engine
    from agora_cli.store._frames import FrameWriter

    url, runs, per_run = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    engine = open_engine(url)
    print("ready", flush=True)
    for run_id in runs:
        w = FrameWriter(engine, run_id, autoflush=False, auto_purge=False)
        for i in range(per_run):
            w.append({"type": "data-live", "data": f"{run_id}/{i}"})
            print(json.dumps([run_id, w.last_seq, f"{run_id}/{i}"]), flush=True)
    """
)


@pytest.mark.slow
def test_purge_racing_a_writer_in_another_process_keeps_its_new_rows(
    engine: Any, db_url: str
) -> None:
    wall = int(time.time() * 1000)
    parked = [f"parked-{i:03d}" for i in range(120)]
    # Parked runs, idle for two hours, in the order the purge walks them; the writer process
    # resumes them in that same order, so the two race along the same front.
    add(engine, {run_id: [wall - 2 * HOUR + i] * 4 for i, run_id in enumerate(parked)})
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, db_url, json.dumps(parked), "3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read() if proc.stderr else ""
    purged = 0
    while proc.poll() is None:
        purged += purge_expired(engine, 3600, batch=5).runs_purged
    purged += purge_expired(engine, 3600, batch=5).runs_purged
    # read through the buffer ``readline`` filled: ``communicate`` reads the pipe's descriptor
    # and would miss the lines that arrived with "ready" (the first run's, now and then)
    out = proc.stdout.read()
    err = proc.stderr.read() if proc.stderr else ""
    assert proc.wait(timeout=60) == 0, err
    written = [json.loads(line) for line in out.splitlines()]
    assert len(written) == 3 * len(parked)
    with engine.connect() as conn:
        for run_id in parked:
            kept = {r.seq: r.payload().get("data") for r in read_frames(conn, run_id)}
            mine = {seq: data for rid, seq, data in written if rid == run_id}
            # Every row the live writer appended is still there; old rows may have gone.
            assert {s: kept.get(s) for s in mine} == mine, run_id
            assert len(kept) in (3, 7)  # purged before it resumed, or never purged
    # Nothing is left to purge: every resumed run is active now.
    again = purge_expired(engine, 3600)
    assert again.runs_purged == 0 and again.runs_still_active == len(
        [r for r in parked if counts(engine)[r] == 7]
    )


def test_purge_for_a_tenant_takes_only_its_frames(engine: Any) -> None:
    """A tenant's purge (``frames purge`` under a session tenant): its frames by their own
    tenant_ref, or with none by their run's tenant (the run's, else its thread's)."""
    from agora_cli.store._schema import run, thread

    with engine.begin() as conn:
        for tid, tenant in (("t-acme", "acme"), ("t-globex", "globex")):
            conn.execute(
                insert(thread).values(
                    id=tid, actor_ref="a", tenant_ref=tenant, title="t", created_at=NOW,
                    updated_at=NOW,
                )
            )  # fmt: skip
        for rid, tid, tenant in (("r-acme", "t-acme", None), ("r-globex", "t-globex", "globex")):
            conn.execute(
                insert(run).values(
                    id=rid, thread_id=tid, actor_ref="a", tenant_ref=tenant, status="completed",
                    started_at=NOW - 9 * HOUR,
                )
            )  # fmt: skip
    old = [NOW - 5 * HOUR, NOW - 5 * HOUR + 1]
    add(engine, {"r-acme": old, "r-globex": old, "no-run": old})  # no tenant_ref of their own
    with engine.begin() as conn:  # one frame written under acme, of a run that is gone
        conn.execute(
            insert(stream_frame).values(
                run_id="gone", seq=1, frame="{}", created_at=NOW - 5 * HOUR, tenant_ref="acme"
            )
        )
    report = purge_expired(engine, 3600, clock=ManualClock(NOW), tenant="acme")
    assert (report.runs_purged, report.rows_deleted) == (2, 3)
    assert counts(engine) == {"r-globex": 2, "no-run": 2}
    report = purge_expired(engine, 3600, clock=ManualClock(NOW))
    assert counts(engine) == {}
