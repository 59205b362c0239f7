"""Benchmark `seal`: what sealed message content costs to read and to seal, side by side.

For each dialect (local PostgreSQL and MariaDB, and a SQLite file):

1. ``threads show`` of a 500-message thread whose messages are sealed (opened with the KEK) vs
   the same thread in plaintext — every sealed column filled: the thread's title and summary,
   each message's content and (assistant) tool calls and outcome or (user) attachments, and a
   tool call record with input and output per assistant message (issue 24) — both in one
   database and measured interleaved — the median (and range) of
   ``BENCH_SEAL_REPEAT`` runs (default 15) of the library read (``get_transcript``; also timed
   with the garbage collector off, as ``timeit`` does) and of the whole command in-process
   (``agora threads show ID --json``: engine, read, JSON). Goal: sealed/plaintext <= 1.5.
2. ``db seal`` of ``BENCH_SEAL_ROWS`` plaintext messages (default 200,000; 200 threads of one
   tenant, ~400 characters each) with ``seal_tenant`` in batches of 1,000, vs a bare
   ``UPDATE agent_message SET content = :c WHERE id = :id`` of the same rows in the same batches
   (one transaction each) with ciphertext computed beforehand (untimed). Both start from the
   same plaintext table (restored, and on PostgreSQL vacuumed, before each pass). Reports rows/s
   and bare/seal (goal >= 0.3).

Run: ``python tests/bench/bench_seal.py`` (``BENCH_SEAL_ROWS=20000`` for a quick run;
``AGORA_BENCH_DIALECTS=postgresql`` for one server; ``BENCH_SEAL_PARTS=show`` or ``seal`` for
one part). One line per figure on stdout; the
databases are dropped at the end.
"""

from __future__ import annotations

import gc
import os
import random
import statistics
import time
from typing import Any

from _common import dialects, scratch_database
from sqlalchemy import bindparam, insert, select, update

from agora_cli.store._engine import open_engine
from agora_cli.store._provision import ensure_agent_tables
from agora_cli.store._schema import message, thread
from agora_cli.store._seal_rows import seal_tenant
from agora_cli.store._sealing import (
    KEK_ENV,
    Kek,
    create_tenant_key,
    generate_kek,
    sealer_for,
    using_kek,
)
from agora_cli.store._steps import complete_tool_call, record_tool_call
from agora_cli.store._threads import append_message, create_thread, get_transcript, update_thread

ROWS = int(os.environ.get("BENCH_SEAL_ROWS", "200000"))
REPEAT = int(os.environ.get("BENCH_SEAL_REPEAT", "15"))
SHOW_MESSAGES = 500
BATCH = 1000
THREADS = 200
WORDS = "the refund for order seven was approved and will arrive within three working days".split()


def _text(rng: random.Random, chars: int = 400) -> str:
    out: list[str] = []
    while sum(len(w) + 1 for w in out) < chars:
        out.append(rng.choice(WORDS))
    return " ".join(out)


Span = tuple[float, float, float]  # median, min, max (seconds)


def _interleaved(a: Any, b: Any, repeat: int, *, no_gc: bool = False) -> tuple[Span, Span]:
    """The median, min and max of ``a`` and ``b``, run alternately; ``no_gc`` times them as
    ``timeit`` does, with the cyclic garbage collector off (a collection triggered by one side's
    allocations otherwise lands, 20 ms at a time, on whichever call is running)."""
    a(), b()  # warm up
    ta, tb = [], []
    for _ in range(repeat):
        for fn, times in ((a, ta), (b, tb)):
            if no_gc:
                gc.collect()
                gc.disable()
            start = time.perf_counter()
            try:
                fn()
            finally:
                times.append(time.perf_counter() - start)
                gc.enable()
    return (
        (statistics.median(ta), min(ta), max(ta)),
        (statistics.median(tb), min(tb), max(tb)),
    )


def _ms(span: Span) -> str:
    return f"{span[0] * 1000:.1f} ms ({span[1] * 1000:.1f}–{span[2] * 1000:.1f})"


def bench_show(dialect: str, url: str, kek: Kek) -> None:
    from helpers import run_cli

    engine = open_engine(url)
    ensure_agent_tables(engine)
    rng = random.Random(18)
    with using_kek(kek), engine.begin() as conn:
        create_tenant_key(conn, tenant="sealed-co")
        for tenant in ("plain-co", "sealed-co"):
            create_thread(
                conn,
                actor_ref="alice",
                tenant_ref=tenant,
                thread_id=f"show-{tenant}",
                title="Refund for order 7 and the card ending 4111",
            )
            update_thread(conn, f"show-{tenant}", summary=_text(rng, 600))
        for n in range(SHOW_MESSAGES):
            text = _text(rng)
            user = bool(n % 2)
            args = {"order_id": n, "note": _text(rng, 80)}
            for tenant in ("plain-co", "sealed-co"):
                m = append_message(
                    conn,
                    thread_id=f"show-{tenant}",
                    role="user" if user else "assistant",
                    content=text,
                    tool_calls=None if user else [{"id": f"c{n}", "name": "lookup", "args": args}],
                    attachments=[{"name": f"scan-{n}.pdf", "size": 1024}] if user else None,
                    outcome=None if user else {"result": args},
                )
                if not user:
                    record_tool_call(
                        conn,
                        message_id=m.id,
                        tool_call_id=f"{tenant}-c{n}",
                        tool_name="lookup",
                        input=args,
                    )
                    complete_tool_call(conn, f"{tenant}-c{n}", output={"found": args})

    def read(tenant: str) -> Any:
        def go() -> None:
            with using_kek(kek), engine.connect() as conn:
                transcript = get_transcript(conn, f"show-{tenant}")
                conn.rollback()
            assert len(transcript.messages) == SHOW_MESSAGES

        return go

    def command(tenant: str) -> Any:
        def go() -> None:
            result = run_cli("threads", "show", f"show-{tenant}", "--db", url, "--json")
            assert result.exit_code == 0, result.stderr
            assert '"[sealed]"' not in result.stdout

        return go

    for no_gc in (False, True):
        plain, sealed = _interleaved(read("plain-co"), read("sealed-co"), REPEAT, no_gc=no_gc)
        print(
            f"{dialect}: get_transcript of {SHOW_MESSAGES} messages"
            f"{' (GC off, as timeit)' if no_gc else ''}: plaintext {_ms(plain)}, "
            f"sealed {_ms(sealed)}, ratio {sealed[0] / plain[0]:.2f} (goal <= 1.5)"
        )
    os.environ[KEK_ENV] = _KEK_TEXT
    try:
        plain, sealed = _interleaved(command("plain-co"), command("sealed-co"), REPEAT)
    finally:
        del os.environ[KEK_ENV]
    print(
        f"{dialect}: threads show --json of {SHOW_MESSAGES} messages: plaintext "
        f"{_ms(plain)}, sealed {_ms(sealed)}, ratio {sealed[0] / plain[0]:.2f} (goal <= 1.5)"
    )
    engine.dispose()


def _load(engine: Any, rng: random.Random) -> dict[str, str]:
    texts: dict[str, str] = {}
    with engine.begin() as conn:
        conn.execute(
            insert(thread),
            [
                {
                    "id": f"t{t:03d}",
                    "actor_ref": "alice",
                    "tenant_ref": "acme",
                    "title": "",
                    "created_at": 1,
                    "updated_at": 1,
                }
                for t in range(THREADS)
            ],
        )
    pool = [_text(rng) for _ in range(997)]
    chunk: list[dict[str, Any]] = []
    for n in range(ROWS):
        mid = f"m{n:07d}"
        texts[mid] = pool[n % len(pool)]
        chunk.append(
            {
                "id": mid,
                "thread_id": f"t{n % THREADS:03d}",
                "seq": n // THREADS + 1,
                "role": "user",
                "content": texts[mid],
                "created_at": 1,
            }
        )
        if len(chunk) == 10_000 or n == ROWS - 1:
            with engine.begin() as conn:
                conn.execute(insert(message), chunk)
            chunk = []
    return texts


def _batches(items: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    return [items[i : i + BATCH] for i in range(0, len(items), BATCH)]


def _restore(engine: Any, dialect: str, texts: dict[str, str]) -> None:
    stmt = (
        update(message)
        .where(message.c.id == bindparam("b_id"))
        .values(content=bindparam("b_content"))
    )
    rows = [{"b_id": k, "b_content": v} for k, v in texts.items()]
    for batch in _batches(rows):
        with engine.begin() as conn:
            conn.execute(stmt, batch)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        if dialect == "postgresql":
            conn.exec_driver_sql("VACUUM ANALYZE agent_message")
        elif dialect == "mysql":
            conn.exec_driver_sql("ANALYZE TABLE agent_message, agent_thread").all()


def _print_batch_plan(conn: Any, dialect: str, key_id: str) -> None:
    """The plan of one ``db seal`` batch read (a middle one: ``id >`` the halfway row)."""
    from agora_cli.store._seal_rows import _needs_sealing, _sealed_tables

    table, of = _sealed_tables()[0]
    q = (
        select(table.c.id, table.c.content)
        .where(
            of("acme"),
            _needs_sealing(conn, table, "content", "acme", key_id, False),
            table.c.id > f"m{ROWS // 2:07d}",
        )
        .order_by(table.c.id)
        .limit(BATCH)
    )
    sql = str(q.compile(conn, compile_kwargs={"literal_binds": True}))
    explain = {"sqlite": "EXPLAIN QUERY PLAN ", "postgresql": "EXPLAIN ", "mysql": "EXPLAIN "}
    rows = conn.exec_driver_sql(explain[dialect] + sql).all()
    plan = [" ".join(str(v) for v in row if v is not None) for row in rows]
    print(f"{dialect}: plan of a db seal batch: " + " | ".join(plan))


def bench_seal(dialect: str, url: str, kek: Kek) -> None:
    engine = open_engine(url)
    ensure_agent_tables(engine)
    rng = random.Random(18)
    start = time.perf_counter()
    texts = _load(engine, rng)
    print(f"{dialect}: loaded {ROWS:,} messages in {time.perf_counter() - start:.1f} s")
    with using_kek(kek), engine.begin() as conn:
        create_tenant_key(conn, tenant="acme")
        sealer = sealer_for(conn, "acme")
    assert sealer is not None
    sealed_text = [
        {"b_id": k, "b_content": sealer.seal("agent_message", "content", k, v)}
        for k, v in texts.items()
    ]
    bare_stmt = (
        update(message)
        .where(message.c.id == bindparam("b_id"))
        .values(content=bindparam("b_content"))
    )
    bare_times, seal_times = [], []
    for n in range(int(os.environ.get("BENCH_SEAL_ROUNDS", "1"))):
        _restore(engine, dialect, texts)
        if n == 0:  # with the statistics of the loaded table
            with engine.connect() as conn:
                _print_batch_plan(conn, dialect, sealer.key_id)
        start = time.perf_counter()
        for batch in _batches(sealed_text):
            with engine.begin() as conn:
                conn.execute(bare_stmt, batch)
        bare_times.append(time.perf_counter() - start)
        _restore(engine, dialect, texts)
        start = time.perf_counter()
        result = seal_tenant(engine, tenant="acme", batch=BATCH, kek=kek)
        seal_times.append(time.perf_counter() - start)
        assert result.sealed["agent_message"] == ROWS, result
        assert result.remaining["agent_message"] == 0
    bare, seal = statistics.median(bare_times), statistics.median(seal_times)
    with engine.connect() as conn:
        sample = conn.execute(select(message.c.content).limit(1)).scalar()
    assert str(sample).startswith("agora:sealed:v1:")
    print(
        f"{dialect}: db seal of {ROWS:,} messages (batches of {BATCH}): {seal:.1f} s, "
        f"{ROWS / seal:,.0f} rows/s; bare UPDATE of the same rows with precomputed ciphertext: "
        f"{bare:.1f} s, {ROWS / bare:,.0f} rows/s; bare/seal {bare / seal:.2f} (goal >= 0.3)"
    )
    engine.dispose()


_KEK_TEXT = generate_kek()


def main() -> None:
    kek = Kek.from_text(_KEK_TEXT)
    os.environ.pop(KEK_ENV, None)
    os.environ.pop("AGORA_KEK_FILE", None)
    parts = os.environ.get("BENCH_SEAL_PARTS", "show,seal").split(",")
    for dialect in dialects():
        if "show" in parts:
            with scratch_database(dialect, "agora_bench_seal") as url:
                bench_show(dialect, url, kek)
        if "seal" in parts:
            with scratch_database(dialect, "agora_bench_seal") as url:
                bench_seal(dialect, url, kek)


if __name__ == "__main__":
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ for helpers
    main()
