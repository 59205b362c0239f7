"""`db redact --tool-io` on every dialect: settled tool I/O older than the cutoff, keyed hashes.

Everywhere the tool I/O was copied (tool calls, messages' tool parts, proposals, frames), hashed
under the tenant's key derived from the KEK: a guess cannot be checked without it, two tenants'
equal inputs differ, and a value is taken as redacted only in its exact form.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from typing import Any

import pytest
from sqlalchemy import select, update

from agora_cli.store._clock import DAY_MS, ManualClock, SystemClock
from agora_cli.store._errors import InvalidInput, KeyUnavailable
from agora_cli.store._frames import FrameWriter
from agora_cli.store._proposals import (
    NewProposal,
    Scope,
    claim_proposal,
    create_proposal,
    decide_proposal,
    settle_proposal,
)
from agora_cli.store._redact import (
    REDACTED_TABLES,
    count_redactable_tool_io,
    redact_tool_io,
    redact_tool_io_batch,
    redaction_marker,
)
from agora_cli.store._redaction_form import is_redacted
from agora_cli.store._schema import action_proposal, message, stream_frame, tool_call
from agora_cli.store._sealing import Kek, generate_kek, using_kek
from agora_cli.store._steps import complete_tool_call, end_run, record_tool_call, start_run
from agora_cli.store._threads import append_message, create_thread

NOW = SystemClock().now_ms()
OLD = NOW - 60 * DAY_MS
RECENT = NOW - DAY_MS
CUTOFF = NOW - 30 * DAY_MS
KEK = Kek.from_text(generate_kek())
ORDER = {"order_id": 7, "amount_usd": 42.5}
MARKER = re.compile(r'"agora:redacted:v1:[0-9a-f]{8}:[0-9a-f]{64}"')
FRAME_MARKER = re.compile(
    r'\{"type":"redacted","digest":"agora:redacted:v1:[0-9a-f]{8}:[0-9a-f]{64}"\}'
)


@pytest.fixture(autouse=True)
def _kek() -> Any:
    with using_kek(KEK):
        yield


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


def one_call(engine: Any, *, tenant: str | None, prefix: str, **payload: Any) -> str:
    """A thread of ``tenant`` with one old finished tool call holding ``payload``."""
    old = ManualClock(OLD)
    with engine.begin() as conn:
        t = create_thread(
            conn, actor_ref="al", tenant_ref=tenant, thread_id=f"{prefix}t", clock=old
        )
        m = append_message(
            conn, thread_id=t.id, role="assistant", content="", message_id=f"{prefix}m", clock=old
        )
        record_tool_call(
            conn,
            message_id=m.id,
            tool_call_id=f"{prefix}c",
            tool_name="lookup_order",
            input=payload.get("input", ORDER),
            clock=old,
        )
        if "output" in payload:
            complete_tool_call(conn, f"{prefix}c", output=payload["output"], clock=old)
    return f"{prefix}c"


def rows(engine: Any, table: Any = tool_call) -> dict[Any, Any]:
    with engine.connect() as conn:
        keys = [c for c in table.primary_key.columns]
        found = conn.execute(select(table).order_by(*keys)).mappings().all()
        conn.rollback()
    if len(keys) == 1:
        return {r[keys[0].name]: dict(r) for r in found}
    return {tuple(r[k.name] for k in keys): dict(r) for r in found}


def test_redacts_only_finished_calls_older_than_the_cutoff(engine: Any) -> None:
    seed(engine)
    before = rows(engine)
    report = redact_tool_io(engine, cutoff_ms=CUTOFF)
    after = rows(engine)
    assert (report.tables["agent_tool_call"].matched, report.remaining) == (2, 0)
    assert (report.inputs, report.outputs, report.errors_trimmed) == (2, 1, 1)
    for name in ("norun", "finished"):
        assert after[name]["input"] == redaction_marker(before[name]["input"], tenant="acme")
        assert MARKER.fullmatch(after[name]["input"]) and is_redacted(after[name]["input"])
        output = before[name]["output"]
        assert after[name]["output"] == (
            None if output is None else redaction_marker(output, tenant="acme")
        )
        # names, states, counts and timing stay
        for kept in ("status", "execution_ms", "created_at", "executed_at", "tool_name", "run_id"):
            assert after[name][kept] == before[name][kept]
    assert before["finished"]["output"] is None  # a failed call: only its error was kept
    assert after["finished"]["error"] == "boom"
    for name in ("running", "young", "late", "empty"):
        assert after[name] == before[name], name
    # the marker is a JSON string: every JSON reader still parses the column
    assert json.loads(after["norun"]["input"]).startswith("agora:redacted:v1:")


def test_a_bare_sha256_brute_force_no_longer_recovers_the_input(engine: Any) -> None:
    call = one_call(engine, tenant="acme", prefix="a-", output={"status": "refunded"})
    redact_tool_io(engine, cutoff_ms=CUTOFF)
    stored = rows(engine)[call]["input"]
    digest = json.loads(stored).rsplit(":", 1)[1]

    # The attack that worked on bare SHA-256 (0.28 s): every order id and amount, hashed.
    def guesses() -> Any:
        for order_id, cents in itertools.product(range(50), range(0, 10_000, 50)):
            yield json.dumps(
                {"order_id": order_id, "amount_usd": cents / 100}, separators=(",", ":")
            )

    bare = {hashlib.sha256(g.encode()).hexdigest() for g in guesses()}
    assert len(bare) == 10_000 and digest not in bare
    # the input is among the guesses: with the bare hash the loop would have found it
    assert hashlib.sha256(json.dumps(ORDER, separators=(",", ":")).encode()).hexdigest() in bare
    # another KEK (or none) checks no guess; the database's KEK does
    other = Kek.from_text(generate_kek())
    assert all(redaction_marker(g, tenant="acme", kek=other) != stored for g in guesses())
    assert [g for g in guesses() if redaction_marker(g, tenant="acme") == stored] == [
        json.dumps(ORDER, separators=(",", ":"))
    ]


def test_equal_inputs_of_two_tenants_hash_differently(engine: Any) -> None:
    calls = {
        tenant: one_call(engine, tenant=tenant, prefix=f"{tenant or 'none'}-")
        for tenant in ("acme", "globex", None)
    }
    before = rows(engine)
    assert len({before[c]["input"] for c in calls.values()}) == 1
    redact_tool_io(engine, cutoff_ms=CUTOFF)
    after = rows(engine)
    stored = {tenant: after[c]["input"] for tenant, c in calls.items()}
    assert all(MARKER.fullmatch(v) for v in stored.values())
    assert len(set(stored.values())) == 3
    tags = {json.loads(v).split(":")[3] for v in stored.values()}
    assert len(tags) == 3  # each tenant's key, and the database's for untenanted rows
    for tenant, value in stored.items():
        assert value == redaction_marker(before[calls[tenant]]["input"], tenant=tenant)


FORGED = [
    "sha256:deadbeef SSN 123-45-6789 card 4111111111111111",
    "sha256:" + "a" * 64,  # what older versions wrote: bare SHA-256, reversible by guessing
    '"agora:redacted:v1:0123abcd:' + "a" * 64 + '" SSN 123-45-6789',
    '"agora:redacted:v1:0123abcd:' + "A" * 64 + '"',  # not the store's alphabet
    '"agora:redacted:v1:0123abcd:' + "a" * 64 + '"\n',  # a trailing newline
    '"agora:redacted:v1:0123abcd:' + "a" * 63 + '"',
    "agora:redacted:v1:0123abcd:" + "a" * 64,  # not the JSON string the store writes
    '"agora:redacted:v2:0123abcd:' + "a" * 64 + '"',
]


def test_a_forged_prefix_is_redacted_and_counted(engine: Any) -> None:
    genuine = '"agora:redacted:v1:0123abcd:' + "0123456789abcdef" * 4 + '"'
    for n, value in enumerate([*FORGED, genuine]):
        one_call(engine, tenant="acme", prefix=f"f{n}-", input={"n": n})
        with engine.begin() as conn:
            conn.execute(update(tool_call).where(tool_call.c.id == f"f{n}-c").values(output=value))
    with engine.connect() as conn:
        assert count_redactable_tool_io(conn, cutoff_ms=CUTOFF) == len(FORGED) + 1
        conn.rollback()
    report = redact_tool_io(engine, cutoff_ms=CUTOFF)
    after = rows(engine)
    assert (report.inputs, report.outputs) == (len(FORGED) + 1, len(FORGED))
    for n, value in enumerate(FORGED):
        kept = after[f"f{n}-c"]["output"]
        assert kept == redaction_marker(value, tenant="acme"), value
        assert "123-45-6789" not in kept
    assert after[f"f{len(FORGED)}-c"]["output"] == genuine  # exactly the form: only hex in it
    again = redact_tool_io(engine, cutoff_ms=CUTOFF)
    assert (again.matched, again.redacted, again.batches) == (0, 0, 0)
    assert rows(engine) == after


def test_is_redacted_is_the_whole_form() -> None:
    value = redaction_marker("x", tenant="acme")
    assert is_redacted(value) and not is_redacted(value, frame=True)
    assert is_redacted(redaction_marker("x", tenant=None, frame=True), frame=True)
    assert not any(is_redacted(v) for v in FORGED)
    assert not is_redacted(None) and not is_redacted(value + " ")


def _proposal(
    conn: Any, scope: Scope, name: str, clock: ManualClock, *, settle: bool, reject: bool = False
) -> str:
    create_proposal(
        conn,
        NewProposal(
            scope=scope,
            tool_name="refund_order",
            input=ORDER,
            card={"title": f"Refund order 7 ({name})"},
            id=f"ap_{name}",
            idempotency_key=name,
        ),
        clock=clock,
    )
    pid = f"ap_{name}"
    if reject or settle:
        decide_proposal(
            conn,
            pid,
            scope=scope,
            decision="rejected" if reject else "approved",
            decided_by="bob",
            clock=clock,
        )
    if settle:
        claim = claim_proposal(conn, pid, scope=scope, worker_id="w", lease_ms=60_000, clock=clock)
        assert claim.lease is not None
        settle_proposal(
            conn,
            pid,
            token=claim.lease.token,
            generation=claim.lease.generation,
            outcome="succeeded",
            result={"refund_id": "rf_1", "card_last4": "4111"},
            clock=clock,
        )
    return pid


@pytest.mark.parametrize("batch", [1, 2])
def test_messages_proposals_and_frames_are_redacted_too(engine: Any, batch: int) -> None:
    old = ManualClock(OLD)
    with engine.begin() as conn:
        t = create_thread(conn, actor_ref="al", tenant_ref="acme", thread_id="t", clock=old)
        done = start_run(conn, thread_id=t.id, actor_ref="al", run_id="r-done", clock=old)
        live = start_run(conn, thread_id=t.id, actor_ref="al", run_id="r-live", clock=old)
        append_message(
            conn,
            thread_id=t.id,
            role="assistant",
            content="",
            message_id="m-done",
            run_id=done.id,
            tool_calls=[{"id": "c1", "name": "refund_order", "input": ORDER}],
            clock=old,
        )
        append_message(
            conn,
            thread_id=t.id,
            role="tool",
            content="",
            message_id="m-result",
            run_id=done.id,
            tool_results=[{"id": "c1", "name": "refund_order", "output": {"ok": True}}],
            outcome={"tool_name": "refund_order", "result": {"refund_id": "rf_1"}},
            clock=old,
        )
        append_message(
            conn,
            thread_id=t.id,
            role="assistant",
            content="",
            message_id="m-live",
            run_id=live.id,
            tool_calls=[{"id": "c2", "name": "refund_order", "input": ORDER}],
            clock=old,
        )
        scope = Scope(tenant_ref="acme", actor_ref="al", thread_id=t.id)
        _proposal(conn, scope, "settled", old, settle=True)
        _proposal(conn, scope, "rejected", old, settle=False, reject=True)
        _proposal(conn, scope, "pending", old, settle=False)
        end_run(conn, done.id, status="completed", clock=ManualClock(OLD + 1000))
    for run_id in ("r-done", "r-live"):
        with FrameWriter(
            engine, run_id, clock=old, autoflush=False, auto_purge=False, flush_ms=0
        ) as w:
            w.append({"type": "tool-input-available", "tool_call_id": "c1", "input": ORDER})
            w.append({"type": "tool-result", "tool_call_id": "c1", "output": {"ok": True}})
            if run_id == "r-done":
                w.end()
    before = {name: rows(engine, table) for name, table in _TABLES.items()}
    report = redact_tool_io(engine, cutoff_ms=CUTOFF, batch=batch)
    after = {name: rows(engine, table) for name, table in _TABLES.items()}
    counts = {name: (n.matched, n.redacted, n.remaining) for name, n in report.tables.items()}
    assert counts == {
        "agent_tool_call": (0, 0, 0),
        "agent_message": (2, 2, 0),
        "agent_action_proposal": (2, 2, 0),
        "agent_action_proposal_event": (0, 0, 0),  # tests/store/test_proposal_operator.py
        "agent_stream_frame": (2, 2, 0),
    }
    assert set(REDACTED_TABLES) == set(counts)
    assert report.values == {
        "agent_tool_call.input": 0,
        "agent_tool_call.output": 0,
        "agent_message.tool_calls": 1,
        "agent_message.tool_results": 1,
        "agent_message.outcome": 1,
        "agent_action_proposal.input": 2,
        "agent_action_proposal.card": 2,
        "agent_action_proposal.result": 1,
        "agent_action_proposal_event.prior_result": 0,
        "agent_stream_frame.frame": 2,
    }
    assert report.batches == 6 // batch  # a batch is in one table only, each read once in key order
    msgs = after["message"]
    assert msgs["m-done"]["tool_calls"] == redaction_marker(
        before["message"]["m-done"]["tool_calls"], tenant="acme"
    )
    assert MARKER.fullmatch(msgs["m-result"]["tool_results"])
    assert MARKER.fullmatch(msgs["m-result"]["outcome"])
    assert msgs["m-done"]["outcome"] is None and msgs["m-done"]["content"] == ""
    assert msgs["m-live"] == before["message"]["m-live"]  # its run is still running
    props = after["proposal"]
    for pid in ("ap_settled", "ap_rejected"):
        for column in ("input", "card"):
            assert MARKER.fullmatch(props[pid][column]), (pid, column)
        for kept in ("tool_name", "decision", "execution_state", "settled_at", "created_at"):
            assert props[pid][kept] == before["proposal"][pid][kept]
    assert MARKER.fullmatch(props["ap_settled"]["result"])
    assert props["ap_pending"] == before["proposal"]["ap_pending"]
    # the settled proposal's input hashes as the tool call's would: same tenant, same key
    assert props["ap_settled"]["input"] == redaction_marker(
        before["proposal"]["ap_settled"]["input"], tenant="acme"
    )
    frames = after["frame"]
    assert FRAME_MARKER.fullmatch(frames[("r-done", 1)]["frame"])
    assert frames[("r-done", 1)]["frame"] == redaction_marker(
        before["frame"][("r-done", 1)]["frame"], tenant="acme", frame=True
    )
    assert frames[("r-done", 3)]["frame"] is None  # the end marker stays
    assert frames[("r-live", 1)] == before["frame"][("r-live", 1)]
    redacted = [
        msgs["m-done"],
        msgs["m-result"],
        props["ap_settled"],
        props["ap_rejected"],
        frames[("r-done", 1)],
        frames[("r-done", 2)],
    ]
    for row in redacted:
        # The markers' digests are random hex under this run's KEK: "4111" may appear in one.
        text = re.sub(r"agora:redacted:v1:[0-9a-f]+:[0-9a-f]{64}", "<marker>", json.dumps(row))
        assert "order_id" not in text and "4111" not in text and "refund_id" not in text, row
    again = redact_tool_io(engine, cutoff_ms=CUTOFF)
    assert (again.matched, again.redacted, again.batches) == (0, 0, 0)


_TABLES = {
    "message": message,
    "proposal": action_proposal,
    "frame": stream_frame,
}


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
    with engine.begin() as conn:
        assert redact_tool_io_batch(conn, cutoff_ms=CUTOFF).redacted == 0


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
    assert is_redacted(after["a-norun"]["input"])
    assert after["g-norun"] == before["g-norun"]


def test_redacting_needs_the_kek_counting_does_not(engine: Any) -> None:
    seed(engine)
    before = rows(engine)
    with using_kek(None):  # type: ignore[arg-type]
        dry = redact_tool_io(engine, cutoff_ms=CUTOFF, dry_run=True)
        assert dry.matched == 2
        with pytest.raises(KeyUnavailable, match="AGORA_KEK"):
            redact_tool_io(engine, cutoff_ms=CUTOFF)
    assert rows(engine) == before


@pytest.mark.parametrize("batch", [0, 10_001])
def test_batch_is_bounded(engine: Any, batch: int) -> None:
    with pytest.raises(InvalidInput):
        redact_tool_io(engine, cutoff_ms=CUTOFF, batch=batch)


def test_two_redactors_share_the_work_and_count_each_row_once(engine: Any) -> None:
    import threading

    old = ManualClock(OLD)
    with engine.begin() as conn:
        t = create_thread(conn, actor_ref="al", tenant_ref="acme", thread_id="t", clock=old)
        m = append_message(
            conn, thread_id=t.id, role="assistant", content="", message_id="m", clock=old
        )
        for n in range(60):
            record_tool_call(
                conn,
                message_id=m.id,
                tool_call_id=f"c{n:02d}",
                tool_name="lookup_order",
                input={"order_id": n},
                clock=old,
            )
    reports: list[Any] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            with using_kek(KEK):
                reports.append(redact_tool_io(engine, cutoff_ms=CUTOFF, batch=4))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    assert sum(r.tables["agent_tool_call"].redacted for r in reports) == 60
    assert sum(r.inputs for r in reports) == 60
    assert all(is_redacted(row["input"]) for row in rows(engine).values())
    assert redact_tool_io(engine, cutoff_ms=CUTOFF).matched == 0


def test_the_sql_check_and_is_redacted_agree_whatever_the_collation(engine: Any) -> None:
    # A literal has the connection's collation (utf8mb4_general_ci on MariaDB, case-blind), as a
    # database the upstream runtime made has: the check must not depend on the column's.
    from sqlalchemy import literal

    from agora_cli.store._redaction_form import FRAME_FORM as _FRAME_FORM
    from agora_cli.store._redaction_form import VALUE_FORM as _VALUE_FORM
    from agora_cli.store._redaction_form import _IsRedacted

    value = redaction_marker("x", tenant="acme")
    frame = redaction_marker("x", tenant="acme", frame=True)
    candidates = [*FORGED, value, frame, value.upper(), frame + "\n", "", "x" * 93]
    with engine.connect() as conn:
        for text in candidates:
            for form, is_frame in ((_VALUE_FORM, False), (_FRAME_FORM, True)):
                found = conn.execute(select(_IsRedacted(literal(text), form))).scalar()
                assert bool(found) == is_redacted(text, frame=is_frame), (text, is_frame)
        conn.rollback()


def test_db_seal_leaves_redacted_values_and_redaction_stays_done(engine: Any) -> None:
    """A keyed hash holds nothing to seal: `db seal` after `db redact` leaves it, so a second
    `db redact` finds nothing (sealing it would have the two undo each other forever)."""
    from agora_cli.store._seal_rows import count_to_seal, seal_tenant
    from agora_cli.store._sealing import create_tenant_key

    seed(engine)
    redact_tool_io(engine, cutoff_ms=CUTOFF)
    redacted = {k: v for k, v in rows(engine).items() if is_redacted(v["input"])}
    assert set(redacted) == {"norun", "finished"}
    with engine.begin() as conn:
        create_tenant_key(conn, tenant="acme")
        pending = count_to_seal(conn, tenant="acme")["agent_tool_call"]
    # the three unredacted inputs and three outputs (running, young, late) still need sealing;
    # the markers (two inputs, one output) do not
    assert pending == 6
    seal_tenant(engine, tenant="acme")
    after = rows(engine)
    for name, row in redacted.items():
        assert after[name]["input"] == row["input"] and after[name]["output"] == row["output"]
    again = redact_tool_io(engine, cutoff_ms=CUTOFF)
    assert (again.matched, again.redacted) == (0, 0)
    with engine.connect() as conn:
        assert count_to_seal(conn, tenant="acme")["agent_tool_call"] == 0
