"""Time-ordered ids (UUIDv7, RFC 9562) for the rows agora writes itself (issue 19, part 3).

The helper on its own (layout, order within a millisecond and across ticks, processes apart),
then the rows each store writer makes, on every dialect: the id carries the store clock's
millisecond, ids sort in the order the rows were written, and ids a caller supplies stay.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import subprocess
import sys
import uuid
from typing import Any

import pytest
from sqlalchemy import select

from agora_cli.store import _ids as ids
from agora_cli.store import _schema as schema
from agora_cli.store._budgets import set_budget
from agora_cli.store._clock import ManualClock
from agora_cli.store._demo import write_demo_data
from agora_cli.store._engine import open_engine
from agora_cli.store._ids import id_time_ms, new_hex_id, new_id, uuid7
from agora_cli.store._pricing import set_price
from agora_cli.store._steps import start_run
from agora_cli.store._threads import append_message, create_thread, fork_thread
from agora_cli.store._usage import record_usage

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


# --- the helper ----------------------------------------------------------------------------


def test_layout_version_variant_and_timestamp() -> None:
    value = uuid7(T0 + 123)
    assert value.version == 7
    assert value.variant == uuid.RFC_4122
    assert value.int >> 80 == T0 + 123
    assert (value.int >> 76) & 0xF == 0x7 and (value.int >> 62) & 0b11 == 0b10
    dashed, bare = new_id(T0), new_hex_id(T0)
    assert len(dashed) == 36 and dashed == str(uuid.UUID(dashed)) and dashed[14] == "7"
    assert len(bare) == 32 and bare == uuid.UUID(bare).hex and bare[12] == "7"
    assert bare[16] in "89ab" and dashed[19] in "89ab"  # the RFC variant
    assert id_time_ms(dashed) == id_time_ms(bare) == T0
    assert id_time_ms(str(uuid.uuid4())) is None  # a random (v4) id has no time
    assert id_time_ms("demo-thread-01") is None


def test_ids_sort_across_a_clock_tick() -> None:
    clock = ManualClock(T0)
    made: list[str] = []
    for _ in range(50):
        made += [new_id(clock.now_ms()), new_hex_id(clock.now_ms())]
        clock.advance(1)
    dashed, bare = made[0::2], made[1::2]
    assert dashed == sorted(dashed) and bare == sorted(bare)
    assert [id_time_ms(i) for i in dashed] == [T0 + n for n in range(50)]


def test_ids_sort_within_one_millisecond() -> None:
    made = [new_hex_id(T0 + 5) for _ in range(5000)]
    assert made == sorted(made) and len(set(made)) == len(made)
    assert {id_time_ms(i) for i in made} == {T0 + 5}
    counters = [uuid.UUID(i).int >> 32 & ((1 << 80) - 1) for i in made]
    assert all(b > a for a, b in itertools.pairwise(counters))


def test_a_clock_that_steps_back_is_followed() -> None:
    """The id keeps its row's time (a backfill, a time-sync step), and stays unique."""
    late = new_id(T0 + 86_400_000)
    made = [new_id(T0 + 86_400_000 - back) for back in (1, 1, 86_400_000, 86_400_000)]
    assert [id_time_ms(i) for i in made] == [T0 + 86_399_999] * 2 + [T0] * 2
    assert all(i < late for i in made) and made[0] < made[1] and made[2] < made[3]
    assert len({late, *made}) == 5


def test_instants_outside_the_uuid_range_are_clamped() -> None:
    assert id_time_ms(new_id(-62_135_596_800_000)) == 0
    assert id_time_ms(new_id(253_402_300_799_999)) == 253_402_300_799_999  # year 9999 fits


_GEN = (
    "import sys; from agora_cli.store._ids import new_hex_id; "
    "print('\\n'.join(new_hex_id(int(sys.argv[1])) for _ in range(2000)))"
)


def test_ids_are_unique_across_processes() -> None:
    """Four processes, all on the same millisecond: every id differs, and each process's own
    ids still increase."""
    procs = [
        subprocess.Popen([sys.executable, "-c", _GEN, str(T0)], stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=60)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert all(out == sorted(out) and len(out) == 2000 for out in outputs)
    everything = [i for out in outputs for i in out]
    assert len(set(everything)) == len(everything) == 8000
    assert {id_time_ms(i) for i in everything} == {T0}


def _child(queue: Any) -> None:
    queue.put(new_hex_id(T0 + 7))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_continue_its_parents_counter() -> None:
    """Without the fork hook the child would count on from the parent's counter and the two
    next ids of that millisecond would differ only in their last 32 random bits."""
    before = new_hex_id(T0 + 7)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child, args=(queue,))
    child.start()
    theirs = queue.get(timeout=30)
    child.join(timeout=30)
    ours = new_hex_id(T0 + 7)
    assert ours > before
    assert theirs[:24] != ours[:24]  # a counter of its own, not the parent's next value


# --- the rows the store writes ----------------------------------------------------------


def _is_v7(ident: str, at_ms: int) -> bool:
    return id_time_ms(ident) == at_ms


def test_store_rows_get_time_ordered_ids(engine: Any) -> None:
    clock = ManualClock(T0)
    with engine.begin() as conn:
        th = create_thread(conn, actor_ref="alice", title="t", clock=clock)
        msgs = [append_message(conn, thread_id=th.id, role="user", content="hi", clock=clock)]
        clock.advance(1)
        msgs += [
            append_message(conn, thread_id=th.id, role="assistant", content="a", clock=clock)
            for _ in range(3)
        ]
        run = start_run(conn, thread_id=th.id, actor_ref="alice", clock=clock)
        usage = []
        for step in range(4):  # two rows in each of two milliseconds
            usage.append(
                record_usage(
                    conn,
                    thread_id=th.id,
                    actor_ref="alice",
                    model_id="m-ids",
                    purpose="chat",
                    input_tokens=10,
                    output_tokens=1,
                    clock=clock,
                )
            )
            clock.advance(step % 2)
        price = set_price(conn, "m-ids", input_per_1m=1.0, output_per_1m=2.0, clock=clock)
        clock.advance(1_000)
        repriced = set_price(conn, "m-ids", input_per_1m=3.0, output_per_1m=4.0, clock=clock)
        budget = set_budget(
            conn,
            scope_kind="actor",
            scope_ref="alice",
            period="day",
            created_by="test",
            limit_usd=5.0,
            clock=clock,
        )
        clock.advance(5)
        fork = fork_thread(conn, th.id, clock=clock)
        copies = conn.execute(
            select(schema.message.c.id)
            .where(schema.message.c.thread_id == fork.id)
            .order_by(schema.message.c.seq)
        ).scalars()
        copied = list(copies)

    # the textual form each column had: canonical UUIDs for threads, messages and runs ...
    for ident in [th.id, run.id, fork.id, *(m.id for m in msgs), *copied]:
        assert len(ident) == 36 and uuid.UUID(ident).version == 7
    # ... 32 hex digits for ledger rows, prices and budgets
    for ident in [*(r.id for r in usage), price.price.id, budget.budget.id]:
        assert len(ident) == 32 and uuid.UUID(ident).version == 7
    assert _is_v7(th.id, T0) and _is_v7(msgs[0].id, T0) and _is_v7(run.id, T0 + 1)
    assert all(_is_v7(r.id, r.created_at) for r in usage)
    assert _is_v7(price.price.id, price.price.effective_from)
    assert _is_v7(budget.budget.id, budget.budget.created_at)
    assert all(_is_v7(i, fork.created_at) for i in [fork.id, *copied])
    # written in order, they sort in order (within one millisecond and across ticks)
    assert [m.id for m in msgs] == sorted(m.id for m in msgs)
    assert [r.id for r in usage] == sorted(r.id for r in usage)
    assert copied == sorted(copied) and len(copied) == len(msgs)
    # the updated price keeps its id; its old content went into a history row stamped now
    assert repriced.price.id == price.price.id and repriced.previous is not None
    history_at = price.price.effective_from + 1_000
    assert _is_v7(repriced.previous.id, history_at) and repriced.previous.id > price.price.id


def test_ids_the_caller_supplies_stay(engine: Any) -> None:
    clock = ManualClock(T0)
    with engine.begin() as conn:
        th = create_thread(conn, actor_ref="bob", thread_id="my-thread", clock=clock)
        msg = append_message(
            conn, thread_id=th.id, role="user", content="x", message_id="my-msg", clock=clock
        )
        run = start_run(conn, thread_id=th.id, actor_ref="bob", run_id="my-run", clock=clock)
        fork = fork_thread(conn, th.id, new_thread_id="my-fork", clock=clock)
    assert (th.id, msg.id, run.id, fork.id) == ("my-thread", "my-msg", "my-run", "my-fork")


def test_demo_ledger_ids_carry_each_rows_own_time(empty_url: str) -> None:
    engine = open_engine(empty_url)
    try:
        write_demo_data(engine, seed=3, days=2, clock=ManualClock(T0 + 15 * 3_600_000))
        with engine.connect() as conn:
            rows = conn.execute(
                select(schema.token_usage.c.id, schema.token_usage.c.created_at)
            ).all()
            prices = conn.execute(
                select(schema.model_pricing.c.id, schema.model_pricing.c.effective_from)
            ).all()
    finally:
        engine.dispose()
    assert len(rows) > 20
    assert all(id_time_ms(i) == at for i, at in rows)
    assert all(id_time_ms(i) == at for i, at in prices)
    by_time = [i for i, _ in sorted(rows, key=lambda r: (r[1], r[0]))]
    assert by_time == sorted(by_time)  # id order is time order, across the whole demo


def test_the_module_is_the_one_helper() -> None:
    """No store module writes a random (v4) id any more."""
    import pathlib

    root = pathlib.Path(ids.__file__).parent
    offenders = [
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if "uuid4" in p.read_text(encoding="utf-8")
    ]
    assert offenders == []
