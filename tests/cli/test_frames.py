"""`agora frames …` through the real command line: JSON documents, exit codes, tail --follow."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from helpers import no_data
from sqlalchemy import func, insert, select

from agora_cli.store._clock import ManualClock
from agora_cli.store._frames import FrameWriter
from agora_cli.store._schema import stream_frame

HOUR = 3_600_000
AGORA = str(Path(sys.executable).with_name("agora"))


def now_ms() -> int:
    return int(time.time() * 1000)


def add(engine: Any, runs: dict[str, list[int]]) -> None:
    rows = [
        {"run_id": run_id, "seq": i + 1, "frame": '{"type":"data-n"}', "created_at": at}
        for run_id, times in runs.items()
        for i, at in enumerate(times)
    ]
    with engine.begin() as conn:
        conn.execute(insert(stream_frame), rows)


def row_count(engine: Any) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(stream_frame)).scalar_one())


def iso_to_ms(text: str) -> int:
    assert text.endswith("Z") and len(text) == 24, text
    return int(datetime.fromisoformat(text[:-1]).replace(tzinfo=UTC).timestamp() * 1000)


def one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def write_transcript(engine: Any, run_id: str) -> None:
    w = FrameWriter(engine, run_id, clock=ManualClock(), autoflush=False, auto_purge=False)
    for frame in (
        {"type": "start"},
        {"type": "text-start", "id": "t1"},
        {"type": "text-delta", "id": "t1", "delta": "Hello, "},
        {"type": "text-delta", "id": "t1", "delta": "wörld"},
        {"type": "reasoning-delta", "delta": "checking"},
        {"type": "tool-input-delta", "tool_call_id": "c1", "delta": '{"q":1}'},
        {"type": "tool-result", "tool_call_id": "c1", "output": {"hits": 3}},
        {"type": "text-delta", "id": "t2", "delta": "Done."},
    ):
        w.append(frame)
    w.end()


# --- purge, close, stats -------------------------------------------------------------------


def test_purge_json_document(engine: Any, db_url: str, cli: Any) -> None:
    now = now_ms()
    add(
        engine,
        {
            "expired": [now - 5 * HOUR, now - 3 * HOUR],
            "crashed": [now - 2 * HOUR],
            "active": [now - 4 * HOUR, now],
        },
    )
    dry = cli("frames", "purge", "--dry-run", "--db", db_url, "--json")
    assert dry.exit_code == 0, dry.stderr
    assert row_count(engine) == 5
    real = cli("frames", "purge", "--ttl", "3600", "--batch", "1", "--db", db_url, "--json")
    assert real.exit_code == 0, real.stderr
    for result in (dry, real):
        doc = result.json()
        assert list(doc) == ["cutoff", "runs_purged", "rows_deleted", "runs_still_active"]
        assert (doc["runs_purged"], doc["rows_deleted"], doc["runs_still_active"]) == (2, 3, 1)
        assert abs(iso_to_ms(doc["cutoff"]) - (now - HOUR)) < 60_000
    assert row_count(engine) == 2
    again = cli("frames", "purge", "--db", db_url, "--json").json()
    assert (again["runs_purged"], again["rows_deleted"], again["runs_still_active"]) == (0, 0, 1)
    people = cli("frames", "purge", "--db", db_url)
    assert people.exit_code == 0 and "Purged 0 run(s)" in people.stdout


def test_close_json_document(engine: Any, db_url: str, cli: Any) -> None:
    add(engine, {"r1": [1, 2, 3], "r2": [1]})
    result = cli("frames", "close", "r1", "--db", db_url, "--json")
    assert result.exit_code == 0, result.stderr
    assert result.json() == {"run_id": "r1", "rows_deleted": 3}
    assert cli("frames", "close", "r1", "--db", db_url, "--json").json() == {
        "run_id": "r1",
        "rows_deleted": 0,
    }
    assert row_count(engine) == 1


def test_stats_json_document(engine: Any, db_url: str, cli: Any) -> None:
    empty = cli("frames", "stats", "--db", db_url, "--json")
    assert empty.exit_code == 0, empty.stderr
    assert empty.json() == {
        "runs": 0,
        "rows": 0,
        "ended_runs": 0,
        "oldest": None,
        "expired_runs": 0,
    }
    now = now_ms()
    oldest = now - 3 * HOUR
    add(engine, {"old": [oldest, now - 2 * HOUR], "new": [now - 10 * 60_000, now]})
    FrameWriter(engine, "new", auto_purge=False).end()
    doc = cli("frames", "stats", "--ttl", "1800", "--db", db_url, "--json").json()
    assert doc == {
        "runs": 2,
        "rows": 5,
        "ended_runs": 1,
        "oldest": doc["oldest"],
        "expired_runs": 1,
    }
    assert iso_to_ms(doc["oldest"]) == oldest
    table = cli("frames", "stats", "--db", db_url)
    assert table.exit_code == 0 and "ended runs" in table.stdout


# --- tail ----------------------------------------------------------------------------------


def test_tail_json_lines(engine: Any, db_url: str, cli: Any) -> None:
    write_transcript(engine, "run-1")
    result = cli("frames", "tail", "run-1", "--db", db_url, "--json")
    assert result.exit_code == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [list(doc) for doc in lines] == [["seq", "created_at", "frame"]] * len(lines)
    assert [doc["seq"] for doc in lines] == list(range(1, 9))
    assert lines[2]["frame"] == {"type": "text-delta", "id": "t1", "delta": "Hello, wörld"}
    assert lines[-1]["frame"] is None
    assert lines[0]["created_at"] == "2026-01-01T00:00:00.000Z"
    after = cli("frames", "tail", "run-1", "--after", "6", "--db", db_url, "--json")
    assert [json.loads(line)["seq"] for line in after.stdout.splitlines()] == [7, 8]
    past_end = cli("frames", "tail", "run-1", "--after", "8", "--db", db_url, "--json")
    assert past_end.exit_code == 0 and no_data(past_end)


def test_tail_reassembles_text_for_people(engine: Any, db_url: str, cli: Any) -> None:
    write_transcript(engine, "run-2")
    result = cli("frames", "tail", "run-2", "--db", db_url)
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "Hello, wörld\n" in out and "thinking: checking" in out and "Done.\n" in out
    assert '[tool-result] {"tool_call_id": "c1", "output": {"hits": 3}}' in out
    assert "text-start" not in out
    assert out.index("Hello") < out.index("checking") < out.index("tool-result") < out.index("Done")
    assert out.rstrip().endswith("[end of run · seq 8]")


def test_tail_of_a_run_without_rows_is_exit_1(db_url: str, cli: Any) -> None:
    for extra in ((), ("--follow",)):
        result = cli("frames", "tail", "nobody", *extra, "--db", db_url, "--json")
        assert result.exit_code == 1
        assert no_data(result)
        assert "nobody" in one_error_line(result.stderr)


@pytest.mark.parametrize(
    "args",
    [
        ("purge", "--ttl", "0"),
        ("purge", "--ttl", "-5"),
        ("purge", "--ttl", "soon"),
        ("purge", "--batch", "0"),
        ("purge", "--batch", "10001"),
        ("stats", "--ttl", "0"),
        ("tail", "r", "--after", "-1"),
        ("tail", "r", "--poll-ms", "0"),
        ("tail", "r", "--poll-ms", "999999"),
        ("tail",),
        ("close",),
        ("purge", "--frobnicate"),
    ],
)
def test_bad_arguments_are_exit_2(db_url: str, cli: Any, args: tuple[str, ...]) -> None:
    result = cli("frames", *args, "--db", db_url, "--json")
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert no_data(result)


def test_empty_run_id_is_one_error_line_exit_2(engine: Any, db_url: str, cli: Any) -> None:
    add(engine, {"r": [1]})
    for command in ("close", "tail"):
        result = cli("frames", command, " ", "--db", db_url, "--json")
        assert result.exit_code == 2
        assert "run id" in one_error_line(result.stderr)
    assert row_count(engine) == 1


def test_every_frames_command_has_help_with_an_example(cli: Any) -> None:
    for command in ("purge", "close", "stats", "tail"):
        result = cli("frames", command, "--help")
        assert result.exit_code == 0
        assert "Example: agora frames " + command in result.stdout


# --- tail --follow against a writer in another process ------------------------------------

WRITER = textwrap.dedent(
    """
    import os, sys, time
    from agora_cli.store._engine import open_engine
    from agora_cli.store._frames import FrameWriter

    url, run_id, words, end = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "end"
    go = sys.argv[5]
    w = FrameWriter(open_engine(url), run_id, flush_ms=30, auto_purge=False)
    w.append({"type": "start"})
    w.flush()
    deadline = time.monotonic() + 30
    while not os.path.exists(go) and time.monotonic() < deadline:  # the readers attach
        time.sleep(0.01)
    for i in range(words):
        w.append({"type": "text-delta", "delta": f"w{i} "})
        time.sleep(0.012)
    w.append({"type": "tool-result", "tool_call_id": "c1", "output": "ok"})
    w.append({"type": "text-delta", "delta": "bye"})
    if end:
        w.end()
    else:
        w.flush()
        time.sleep(60)
    """
)


def start_writer(
    db_url: str, run_id: str, words: int, go: Path, *, end: bool
) -> subprocess.Popen[str]:
    """A writer process: one frame, then (once ``go`` exists) the rest."""
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            WRITER,
            db_url,
            run_id,
            str(words),
            "end" if end else "park",
            str(go),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_rows(engine: Any, run_id: str, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            n = conn.execute(
                select(func.count()).where(stream_frame.c.run_id == run_id)
            ).scalar_one()
        if n:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    raise AssertionError("the writer wrote nothing")


def tail_follow(db_url: str, run_id: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [AGORA, "frames", "tail", run_id, "--follow", "--poll-ms", "40", "--db", db_url, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )


@pytest.mark.slow
def test_tail_follow_against_a_writer_in_another_process(
    engine: Any, db_url: str, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    writer = start_writer(db_url, "live", 40, go, end=True)
    wait_for_rows(engine, "live", writer)
    as_json = tail_follow(db_url, "live", "--json")
    for_people = tail_follow(db_url, "live")
    assert as_json.stdout is not None and for_people.stdout is not None
    # Both readers are following before the writer writes the rest.
    first_json = as_json.stdout.readline()
    assert json.loads(first_json)["frame"] == {"type": "start"}
    first_people = for_people.stdout.readline()
    assert first_people == "[start]\n"
    go.touch()
    json_out, json_err = as_json.communicate(timeout=60)
    people_out, people_err = for_people.communicate(timeout=60)
    json_out, people_out = first_json + json_out, first_people + people_out
    assert writer.wait(timeout=60) == 0, writer.communicate()
    assert as_json.returncode == 0, json_err
    assert for_people.returncode == 0, people_err
    lines = [json.loads(line) for line in json_out.splitlines()]
    assert [doc["seq"] for doc in lines] == list(range(1, len(lines) + 1))
    assert lines[0]["frame"] == {"type": "start"} and lines[-1]["frame"] is None
    text = "".join(
        doc["frame"]["delta"] for doc in lines[:-1] if doc["frame"]["type"] == "text-delta"
    )
    expected = "".join(f"w{i} " for i in range(40))
    assert text == expected + "bye"
    assert len(lines) < 40  # deltas were coalesced
    assert json_err == ""
    assert expected in people_out and people_out.rstrip().endswith(f"seq {len(lines)}]")


@pytest.mark.slow
def test_ctrl_c_ends_a_follow_with_exit_130(engine: Any, db_url: str, tmp_path: Path) -> None:
    go = tmp_path / "go"
    go.touch()
    writer = start_writer(db_url, "parked", 3, go, end=False)
    try:
        wait_for_rows(engine, "parked", writer)
        tail = tail_follow(db_url, "parked", "--json")
        assert tail.stdout is not None
        first = json.loads(tail.stdout.readline())
        assert first["seq"] == 1
        time.sleep(0.2)
        tail.send_signal(signal.SIGINT)
        rest, err = tail.communicate(timeout=30)
    finally:
        writer.kill()
        writer.wait()
    assert tail.returncode == 130, err
    assert "Traceback" not in err and "stopped" in err
    assert all(json.loads(line)["frame"] is not None for line in rest.splitlines())
