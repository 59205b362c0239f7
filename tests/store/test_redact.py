"""`db redact --tool-io` on every dialect: finished calls older than the cutoff, hashed once."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from sqlalchemy import select

from agora_cli.store.clock import DAY_MS, ManualClock, SystemClock
from agora_cli.store.redact import count_redactable_tool_io, hash_marker, redact_tool_io
from agora_cli.store.schema import tool_call
from agora_cli.store.threads import (
    append_message,
    complete_tool_call,
    create_thread,
    end_run,
    record_tool_call,
    start_run,
)

NOW = SystemClock().now_ms()
OLD = NOW - 60 * DAY_MS
RECENT = NOW - DAY_MS
CUTOFF = NOW - 30 * DAY_MS


def _sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def seed(engine: Any, tenant: str | None = "acme", prefix: str = "") -> None:
    """Six tool calls: two finished and old (redactable), four that must stay as they are."""
    old, recent = ManualClock(OLD), ManualClock(RECENT)
    with engine.begin() as conn:
        t = create_thread(
            conn, actor_ref="alice", tenant_ref=tenant, thread_id=f"{prefix}t", clock=old
        )
        m = append_message(
            conn, thread_id=t.id, role="assistant", content="hi", message_id=f"{prefix}m", clock=old
        )
        done = start_run(
            conn, thread_id=t.id, actor_ref="alice", run_id=f"{prefix}r-done", clock=old
        )
        end_run(conn, done.id, status="completed", clock=ManualClock(OLD + 3_600_000))
        running = start_run(
            conn, thread_id=t.id, actor_ref="alice", run_id=f"{prefix}r-live", clock=old
        )
        late = start_run(
            conn, thread_id=t.id, actor_ref="alice", run_id=f"{prefix}r-late", clock=old
        )
        end_run(conn, late.id, status="completed", clock=recent)

        def call(name: str, clock: ManualClock, run_id: str | None, **done_with: Any) -> None:
            record_tool_call(
                conn,
                message_id=m.id,
                tool_call_id=f"{prefix}{name}",
                tool_name="search",
                input=None if name == "empty" else {"query": f"secret {name}"},
                run_id=run_id,
                clock=clock,
            )
            if done_with:
                complete_tool_call(conn, f"{prefix}{name}", clock=clock, **done_with)

        call("norun", old, None, output={"rows": ["private"]})
        call("finished", old, done.id, status="failed", error="boom\nstack with secrets")
        call("running", old, running.id, output="partial")
        call("young", recent, None, output="fresh")
        call("late", old, late.id, output="finished recently")
        call("empty", old, None)


def rows(engine: Any) -> dict[str, Any]:
    with engine.connect() as conn:
        found = conn.execute(select(tool_call).order_by(tool_call.c.id)).mappings().all()
        conn.rollback()
    return {r["id"]: dict(r) for r in found}


def test_redacts_only_finished_calls_older_than_the_cutoff(engine: Any) -> None:
    seed(engine)
    before = rows(engine)
    report = redact_tool_io(engine, cutoff_ms=CUTOFF)
    after = rows(engine)
    assert (report.matched, report.redacted, report.remaining) == (2, 2, 0)
    assert (report.inputs, report.outputs, report.errors_trimmed) == (2, 1, 1)
    for name in ("norun", "finished"):
        assert after[name]["input"] == _sha(before[name]["input"])
        output = before[name]["output"]
        assert after[name]["output"] == (None if output is None else _sha(output))
        assert after[name]["input"] == hash_marker(before[name]["input"])
        # counts, status and timing stay
        for kept in ("status", "execution_ms", "created_at", "executed_at", "tool_name", "run_id"):
            assert after[name][kept] == before[name][kept]
    assert before["finished"]["output"] is None  # a failed call: only its error was kept
    assert after["finished"]["error"] == "boom"
    for name in ("running", "young", "late", "empty"):
        assert after[name] == before[name], name


def test_is_idempotent_and_keeps_counts(engine: Any) -> None:
    seed(engine)
    first = redact_tool_io(engine, cutoff_ms=CUTOFF)
    once = rows(engine)
    second = redact_tool_io(engine, cutoff_ms=CUTOFF)
    assert first.redacted == 2
    assert (second.matched, second.redacted, second.batches) == (0, 0, 0)
    assert rows(engine) == once
    assert len(once) == 6  # no row removed


def test_bounded_batches_resume(engine: Any) -> None:
    seed(engine)
    part = redact_tool_io(engine, cutoff_ms=CUTOFF, batch=1, max_batches=1)
    assert (part.redacted, part.batches, part.remaining) == (1, 1, 1)
    rest = redact_tool_io(engine, cutoff_ms=CUTOFF, batch=1)
    assert (rest.matched, rest.redacted, rest.remaining) == (1, 1, 0)


def test_dry_run_counts_and_tenant_scopes(engine: Any) -> None:
    seed(engine, tenant="acme", prefix="a-")
    seed(engine, tenant="globex", prefix="g-")
    before = rows(engine)
    dry = redact_tool_io(engine, cutoff_ms=CUTOFF, dry_run=True)
    assert (dry.matched, dry.redacted, dry.remaining) == (4, 0, 4)
    assert rows(engine) == before
    with engine.connect() as conn:
        assert count_redactable_tool_io(conn, cutoff_ms=CUTOFF, tenant="acme") == 2
        conn.rollback()
    report = redact_tool_io(engine, cutoff_ms=CUTOFF, tenant="acme")
    after = rows(engine)
    assert report.redacted == 2
    assert after["a-norun"]["input"].startswith("sha256:")
    assert after["g-norun"] == before["g-norun"]


@pytest.mark.parametrize("batch", [0, 10_001])
def test_batch_is_bounded(engine: Any, batch: int) -> None:
    from agora_cli.store.errors import InvalidInput

    with pytest.raises(InvalidInput):
        redact_tool_io(engine, cutoff_ms=CUTOFF, batch=batch)
