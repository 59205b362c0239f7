"""The daily ledger fold (issue 16) on every dialect: folded reports equal raw ones, exactly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import date, timedelta
from typing import Any

import pytest
from helpers import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select, text

from agora_cli.store._budgets import _window_sums, sum_scope_usage
from agora_cli.store._clock import DAY_MS, ManualClock, parse_instant
from agora_cli.store._fold import (
    create_rollup,
    fold,
    has_rollup,
    mark_days_dirty,
    verify,
    window_parts,
)
from agora_cli.store._ledger import spend
from agora_cli.store._pricing import set_price
from agora_cli.store._schema import (
    thread,
    token_usage,
    usage_daily,
    usage_fold,
    usage_model_daily,
)
from agora_cli.store._threads import delete_thread
from agora_cli.store._usage import recompute_estimates, reprice

# A report that reads the per-model rollup sums its tokens (its coverage check does not).
ROLLUP_READ = "sum(agent_usage_model_daily.input_tokens"
D0 = date(2026, 3, 1)
T0 = parse_instant("2026-03-01T00:00:00Z")
NOW = ManualClock(parse_instant("2026-04-15T12:00:00Z"))  # every March day is closed
THREADS = {"t": None, "ta": "acme", "tz": "zeta"}  # thread -> its tenant
BYS = (
    "model",
    "actor",
    "tenant",
    "day",
    "week",
    "month",
    "day,model",
    "week,tenant",
    "month,actor",
)


def set_rollup(engine: Any, on: bool) -> None:
    """Apply the optional rollup branch's table (``on``) or drop it, as an operator would."""
    with engine.begin() as conn:
        if on:
            create_rollup(conn)
        else:
            conn.execute(text("DROP TABLE IF EXISTS agent_usage_model_daily"))


def reset(engine: Any) -> None:
    with engine.begin() as conn:
        tables = (usage_model_daily,) if has_rollup(conn) else ()
        for table in (*tables, usage_daily, usage_fold, token_usage, thread):
            conn.execute(table.delete())
        conn.execute(
            thread.insert(),
            [  # "t" has no tenant; rows with none of their own on "ta" are acme's (issue 23)
                {"id": tid, "actor_ref": "a0", "tenant_ref": tenant, "title": ""}
                | {"created_at": 0, "updated_at": 0}
                for tid, tenant in THREADS.items()
            ],
        )


def write(engine: Any, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    with engine.begin() as conn:
        conn.execute(
            token_usage.insert(),
            [
                {
                    "id": f"u{len(r)}-{i}-{r['at']}",
                    "thread_id": r.get("thread", "t"),
                    "actor_ref": r["actor"],
                    "tenant_ref": r["tenant"],
                    "model_id": r["model"],
                    "purpose": "chat",
                    "input_tokens": r["inp"],
                    "output_tokens": r["out"],
                    "cache_read_tokens": r["cache"],
                    "cache_write_tokens": None,
                    "cost_usd": r["cost"],
                    "cost_source": r["source"] if r["cost"] is not None else None,
                    "created_at": r["at"],
                }
                for i, r in enumerate(rows)
            ],
        )


# Rows anywhere in March, with a weight on the instants that decide a day or a week.
edges = st.sampled_from([0, DAY_MS - 1, DAY_MS, 7 * DAY_MS - 1, 14 * DAY_MS, 30 * DAY_MS - 1])
row = st.fixed_dictionaries(
    {
        "at": st.one_of(edges, st.integers(0, 31 * DAY_MS - 1)).map(lambda x: T0 + x),
        "actor": st.sampled_from(["a0", "a1", "a2"]),
        "tenant": st.sampled_from([None, "acme", "zeta"]),
        "thread": st.sampled_from(list(THREADS)),
        "model": st.sampled_from(["m1", "m2", "m3"]),
        "inp": st.integers(0, 10_000),
        "out": st.integers(0, 5_000),
        "cache": st.one_of(st.none(), st.integers(0, 100)),
        "cost": st.one_of(st.none(), st.floats(0, 5, allow_nan=False).map(lambda c: round(c, 6))),
        "source": st.sampled_from(["estimate", "provider"]),
    }
)
window = st.tuples(st.integers(-3, 33), st.integers(0, 12)).map(
    lambda t: (D0 + timedelta(days=t[0]), D0 + timedelta(days=t[0] + t[1]))
)


def same(a: Any, b: Any) -> None:
    assert a.by == b.by and [r.key for r in a.rows] == [r.key for r in b.rows]
    pairs = [(a.total, b.total), *zip(a.rows, b.rows, strict=True)]
    for p in [*a.periods, *b.periods]:
        assert p.key in {q.key for q in [*a.periods, *b.periods]}
    for x, y in pairs:
        for name in (
            "turns",
            "input_tokens",
            "output_tokens",
            "cache_read_tokens",
            "cache_write_tokens",
            "unpriced_turns",
        ):
            assert getattr(x, name) == getattr(y, name), name
        for name in ("cost_usd", "estimated_usd"):
            u, v = getattr(x, name), getattr(y, name)
            assert (u is None) == (v is None), name
            if u is not None:
                assert u == pytest.approx(v, rel=1e-9, abs=1e-9), name
    for p, q in zip(a.periods, b.periods, strict=True):
        assert p.key == q.key and [r.key for r in p.rows] == [r.key for r in q.rows]


@settings(
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(rows=st.lists(row, max_size=40), windows=st.lists(window, min_size=1, max_size=3))
@pytest.mark.parametrize("rollup", [False, True], ids=["spec-schema", "rollup-branch"])
def test_folded_reports_equal_raw_ones(
    engine: Any, rollup: bool, rows: list[dict[str, Any]], windows: list[tuple[date, date]]
) -> None:
    set_rollup(engine, rollup)
    reset(engine)
    write(engine, rows)
    result = fold(engine, clock=NOW)
    last_closed = date(2026, 4, 14)  # NOW is 2026-04-15 12:00, the grace two hours
    first_row = D0 + timedelta(days=min((r["at"] - T0 for r in rows), default=0) // DAY_MS)
    assert result.folded == ((last_closed - first_row).days + 1 if rows else 0)
    assert verify(engine).mismatched == []
    with engine.connect() as conn:
        for first, last in windows:
            # a row's tenant is its own, else its thread's: the report by tenant, exactly
            lo = parse_instant(f"{first.isoformat()}T00:00:00Z")
            hi = parse_instant(f"{last.isoformat()}T23:59:59.999Z")
            expected: dict[str | None, int] = {}
            for r in rows:
                if lo <= r["at"] <= hi:
                    tenant = r["tenant"] or THREADS[r["thread"]]
                    expected[tenant] = expected.get(tenant, 0) + r["inp"] + r["out"]
            for raw in (False, True):
                report = spend(conn, by="tenant", from_day=first, to_day=last, raw=raw)
                got = {g.key: g.input_tokens + g.output_tokens for g in report.rows}
                assert got == expected
                # several tenants' budgets at once: one grouped statement (quota --all)
                sums = _window_sums(
                    conn,
                    kind="tenant",
                    refs=["acme", "zeta"],
                    from_ms=lo,
                    to_ms=hi,
                    provider_cost_only=False,
                    raw=raw,
                )
                for tenant in ("acme", "zeta"):
                    assert sums.get(tenant, (0, 0.0, 0))[0] == expected.get(tenant, 0)
            for by in BYS:
                folded = spend(conn, by=by, from_day=first, to_day=last)
                raw = spend(conn, by=by, from_day=first, to_day=last, raw=True)
                same(folded, raw)
            # a model filter (the rollup) and an actor or tenant filter (the daily fold)
            for filters in ({"model": "m2"}, {"actor": "a1"}, {"tenant": "acme", "model": "m1"}):
                for by in ("model", "day", "week,model"):
                    args = {"by": by, "from_day": first, "to_day": last, **filters}
                    same(spend(conn, **args), spend(conn, **args, raw=True))
                if rows:  # folded from the ledger's first day on, through the last closed one
                    start = max(
                        first, D0 + timedelta(days=min(r["at"] - T0 for r in rows) // DAY_MS)
                    )
                    days = (last - start).days + 1 if last <= last_closed else None
                    if days is not None:
                        assert folded.folded_days == max(0, days)
            for kind, ref in (("actor", "a1"), ("tenant", "acme"), ("global", None)):
                lo = parse_instant(f"{first.isoformat()}T00:00:00Z")
                hi = parse_instant(f"{last.isoformat()}T13:14:15.999Z")  # a partial last day
                a = sum_scope_usage(conn, scope_kind=kind, scope_ref=ref, from_ms=lo, to_ms=hi)
                b = sum_scope_usage(
                    conn, scope_kind=kind, scope_ref=ref, from_ms=lo, to_ms=hi, raw=True
                )
                assert a[0] == b[0] and a[2] == b[2] and a[1] == pytest.approx(b[1], abs=1e-9)


def test_folding_is_idempotent_and_skips_the_open_days(engine: Any) -> None:
    reset(engine)
    write(engine, [_row(at=T0 + n * DAY_MS) for n in range(5)])
    clock = ManualClock(T0 + 4 * DAY_MS + 3_600_000)  # day 4 ended? no: it is 01:00 on day 4
    first = fold(engine, clock=clock)
    assert (first.folded, first.rows) == (3, 3)  # days 0-2; day 3 ended an hour ago (grace 2h)
    assert fold(engine, clock=clock).folded == 0
    clock.advance(2 * 3_600_000)
    assert fold(engine, clock=clock).folded == 1
    with engine.connect() as conn:
        parts = window_parts(conn, T0, T0 + 5 * DAY_MS - 1)
    assert parts.fold_days == [(T0 // DAY_MS, T0 // DAY_MS + 3)]
    assert parts.raw == [(T0 + 4 * DAY_MS, T0 + 5 * DAY_MS - 1)]


def test_late_rows_are_caught_by_verify_and_a_refold_converges(engine: Any) -> None:
    reset(engine)
    write(engine, [_row(at=T0 + n * DAY_MS, inp=10) for n in range(3)])
    fold(engine, clock=NOW)
    write(engine, [_row(at=T0 + DAY_MS + 5, inp=1_000)])  # a late row for a folded day
    with engine.connect() as conn:
        stale = spend(conn, by="day", from_day=D0, to_day=D0 + timedelta(days=2))
    assert stale.total.input_tokens == 30  # the fold does not know yet: what verify is for
    checked = verify(engine)
    assert checked.days_checked >= 3 and checked.mismatched == [D0 + timedelta(days=1)]
    with engine.connect() as conn:
        mended = spend(conn, by="day", from_day=D0, to_day=D0 + timedelta(days=2))
    assert mended.total.input_tokens == 1_030 and mended.folded_days == 2  # the dirty day raw
    again = fold(engine, clock=NOW)
    assert (again.folded, again.refolded) == (1, 1)
    assert verify(engine).mismatched == []


def test_marking_days_dirty_in_the_writers_transaction(engine: Any) -> None:
    reset(engine)
    write(engine, [_row(at=T0 + n * DAY_MS, inp=10, actor=f"a{n}") for n in range(3)])
    fold(engine, clock=NOW)
    with engine.begin() as conn:
        where = token_usage.c.actor_ref == "a1"
        assert mark_days_dirty(conn, where) == 1
        conn.execute(token_usage.delete().where(where))
    with engine.connect() as conn:
        report = spend(conn, by="actor", from_day=D0, to_day=D0 + timedelta(days=2))
    assert [r.key for r in report.rows] == ["a2", "a0"] or {r.key for r in report.rows} == {
        "a0",
        "a2",
    }
    assert report.total.turns == 2 and report.folded_days == 2


def test_refold_replaces_a_days_rows(engine: Any) -> None:
    reset(engine)
    write(engine, [_row(at=T0, inp=10)])
    fold(engine, clock=NOW)
    with engine.begin() as conn:
        conn.execute(token_usage.update().values(input_tokens=99))  # as a bulk edit would
    result = fold(engine, clock=NOW, refold=(D0, D0))
    assert result.refolded == 1
    with engine.connect() as conn:
        assert conn.execute(select(func.sum(usage_daily.c.input_tokens))).scalar() == 99


def _raw_equals_folded(engine: Any, last: int) -> Any:
    with engine.connect() as conn:
        args = {"by": "day,model", "from_day": D0, "to_day": D0 + timedelta(days=last)}
        folded = spend(conn, **args)
        raw = spend(conn, **args, raw=True)
    same(folded, raw)
    return folded


def test_reprice_marks_the_days_it_prices_dirty(engine: Any) -> None:
    reset(engine)
    write(engine, [_row(at=T0 + n * DAY_MS, cost=None, model=f"m{n % 2}") for n in range(4)])
    fold(engine, clock=NOW)
    with engine.begin() as conn:
        set_price(conn, "m1", input_per_1m=1_000.0, output_per_1m=0.0, clock=NOW)
        assert reprice(conn).repriced == 2
    report = _raw_equals_folded(engine, 3)
    assert report.total.cost_usd == pytest.approx(0.2) and report.folded_days == 2
    assert verify(engine).mismatched == []
    assert fold(engine, clock=NOW).refolded == 2
    assert _raw_equals_folded(engine, 3).folded_days == 4


def test_recomputed_estimates_and_deleted_threads_mark_their_days_dirty(engine: Any) -> None:
    reset(engine)
    write(engine, [_row(at=T0 + n * DAY_MS, model=f"m{n % 2}") for n in range(4)])
    fold(engine, clock=NOW)
    with engine.begin() as conn:
        set_price(conn, "m0", input_per_1m=1_000.0, output_per_1m=0.0, clock=NOW)
        assert recompute_estimates(conn).recomputed == 2
    report = _raw_equals_folded(engine, 3)
    assert report.total.cost_usd == pytest.approx(0.2 + 2 * 0.25) and report.folded_days == 2
    assert fold(engine, clock=NOW).refolded == 2
    with engine.begin() as conn:
        delete_thread(conn, "t")
    report = _raw_equals_folded(engine, 3)
    assert report.total.turns == 0 and report.folded_days == 0
    assert verify(engine).mismatched == []


FOLDER = r"""
import sys
from agora_cli.store._clock import ManualClock
from agora_cli.store._engine import open_engine
from agora_cli.store._fold import fold
fold(open_engine(sys.argv[1]), clock=ManualClock(int(sys.argv[2])))
print("done", flush=True)
"""


@pytest.mark.slow
def test_a_fold_killed_mid_run_leaves_no_half_folded_day(engine: Any, db_url: str) -> None:
    reset(engine)
    rows = [
        _row(at=T0 + n * DAY_MS + k, model=f"m{k % 40}", actor=f"a{k % 25}")
        for n in range(120)
        for k in range(60)
    ]
    for i in range(0, len(rows), 2_000):
        write(engine, rows[i : i + 2_000])
    later = T0 + 200 * DAY_MS
    proc = subprocess.Popen(
        [sys.executable, "-c", FOLDER, db_url, str(later)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    time.sleep(1.5)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    with engine.connect() as conn:
        clean = conn.execute(
            select(usage_fold.c.day, usage_fold.c.rows).where(usage_fold.c.dirty == 0)
        ).all()
        for day, count in clean:  # every day marked folded holds exactly its rows
            folded = conn.execute(
                select(func.sum(usage_daily.c.turns)).where(usage_daily.c.day == day)
            ).scalar()
            raw = conn.execute(
                select(func.count()).where(
                    token_usage.c.created_at.between(day * DAY_MS, (day + 1) * DAY_MS - 1)
                )
            ).scalar()
            assert int(folded or 0) == count == raw
    result = fold(engine, clock=ManualClock(later))  # resumes
    assert result.folded + len(clean) == 120 or result.folded + len(clean) >= 120
    assert verify(engine).mismatched == []
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(usage_fold)).scalar() >= 120


def _row(**over: Any) -> dict[str, Any]:
    base = {
        "at": T0,
        "actor": "a0",
        "tenant": "acme",
        "model": "m1",
        "inp": 100,
        "out": 10,
        "cache": None,
        "cost": 0.25,
        "source": "estimate",
    }
    base.update(over)
    return base


def test_identities_differing_by_trailing_spaces_stay_exact(engine: Any, dialect: str) -> None:
    # MySQL/MariaDB's utf8mb4_bin is PAD SPACE: 'm1' and 'm1 ' are one key there, so a day holding
    # both is left unfolded (read raw); elsewhere they are two groups of the fold.
    reset(engine)
    write(
        engine,
        [
            _row(at=T0, model="m1", inp=1),
            _row(at=T0 + 1, model="m1 ", inp=20),
            _row(at=T0 + DAY_MS, actor="a1", inp=300),
            _row(at=T0 + DAY_MS + 1, actor="a1 ", tenant="acme ", inp=4_000),
        ],
    )
    result = fold(engine, clock=NOW)
    # (every closed day from the first row's on is folded, the empty ones too)
    if dialect == "mysql":
        assert (result.unfoldable, result.rows) == (2, 0)
    else:
        assert (result.unfoldable, result.rows) == (0, 4)
    with engine.connect() as conn:
        for by in ("model", "actor", "tenant", "day,model"):
            args = {"by": by, "from_day": D0, "to_day": D0 + timedelta(days=1)}
            same(spend(conn, **args), spend(conn, **args, raw=True))
        for kind, ref in (("actor", "a1 "), ("actor", "a1"), ("tenant", "acme ")):
            args = {"scope_kind": kind, "scope_ref": ref, "from_ms": T0, "to_ms": T0 + 2 * DAY_MS}
            assert sum_scope_usage(conn, **args) == sum_scope_usage(conn, **args, raw=True)


def test_a_folded_day_holds_each_groups_sums(engine: Any) -> None:
    reset(engine)
    write(
        engine,
        [
            _row(at=T0, inp=1, out=2, cache=3, cost=0.5, source="provider"),
            _row(at=T0 + 5, inp=10, out=20, cache=None, cost=0.25),
            _row(at=T0 + 6, inp=100, out=200, cache=7, cost=None),
            _row(at=T0 + 7, tenant=None, inp=1_000, cost=None),
            _row(at=T0 + DAY_MS - 1, model="m2", inp=5),
        ],
    )
    assert fold(engine, clock=NOW).rows == 5
    with engine.connect() as conn:
        got = {
            (r.model_id, r.actor_ref, r.tenant_key): tuple(r)[4:13]
            for r in conn.execute(select(usage_daily))
        }
    assert got == {
        ("m1", "a0", "acme"): (3, 111, 222, 10, 0, 0.75, 0.25, 0.5, 1),
        ("m1", "a0", ""): (1, 1_000, 10, 0, 0, None, 0.0, 0.0, 1),
        ("m2", "a0", "acme"): (1, 5, 10, 0, 0, 0.25, 0.25, 0.0, 0),
    }


# --- the per-model rollup (agent_usage_model_daily, the optional rollup branch) ---------------


def _reads(engine: Any, fn: Any) -> str:
    """The SQL ``fn(conn)`` ran, joined."""
    from sqlalchemy import event

    seen: list[str] = []
    with engine.connect() as conn:

        def listen(*args: Any) -> None:
            seen.append(args[2])

        event.listen(conn, "before_cursor_execute", listen)
        fn(conn)
        conn.rollback()
    return "\n".join(seen)


def _rollup_is_true(engine: Any) -> None:
    """The rollup of every clean folded day equals the raw ledger's day, model by model."""
    from agora_cli.store._fold import day_bucket

    u = token_usage.c
    with engine.connect() as conn:
        clean = {
            int(d) for (d,) in conn.execute(select(usage_fold.c.day).where(usage_fold.c.dirty == 0))
        }
        bucket = day_bucket(conn)
        raw = {
            (int(r[0]), r[1]): (int(r[2]), int(r[3]), int(r[4]), int(r[5]), r[6], int(r[7]))
            for r in conn.execute(
                select(
                    bucket,
                    u.model_id,
                    func.count(),
                    func.sum(u.input_tokens),
                    func.sum(u.output_tokens),
                    func.coalesce(func.sum(u.cache_read_tokens), 0),
                    func.sum(u.cost_usd),
                    func.count() - func.count(u.cost_usd),
                ).group_by(bucket, u.model_id)
            )
            if int(r[0]) in clean
        }
        m = usage_model_daily.c
        rolled = {
            (int(r.day), r.model_id): (
                int(r.turns),
                int(r.input_tokens),
                int(r.output_tokens),
                int(r.cache_read_tokens),
                r.cost_usd,
                int(r.unpriced_turns),
            )
            for r in conn.execute(select(usage_model_daily).where(m.day.in_(sorted(clean) or [-1])))
        }
        conn.rollback()
    assert set(rolled) == set(raw)
    for key, want in raw.items():
        got = rolled[key]
        assert got[:4] == want[:4] and got[5] == want[5], key
        assert (got[4] is None) == (want[4] is None), key
        if want[4] is not None:
            assert float(got[4]) == pytest.approx(float(want[4]), rel=1e-9, abs=1e-12), key


def test_reports_by_model_or_time_read_the_rollup_and_the_rest_the_daily_fold(
    engine: Any,
) -> None:
    set_rollup(engine, True)
    reset(engine)
    write(
        engine, [_row(at=T0 + n * DAY_MS, model=f"m{n % 3}", actor=f"a{n % 2}") for n in range(6)]
    )
    fold(engine, clock=NOW)
    last = D0 + timedelta(days=5)
    for args, rollup in (
        ({"by": "model"}, True),
        ({"by": "day"}, True),
        ({"by": "month,model"}, True),
        ({"by": "model", "model": "m1"}, True),
        ({"by": "actor"}, False),
        ({"by": "day,tenant"}, False),
        ({"by": "model", "actor": "a1"}, False),
        ({"by": "model", "tenant": "acme"}, False),
    ):
        sql = _reads(engine, lambda c, a=args: spend(c, from_day=D0, to_day=last, **a))
        assert (ROLLUP_READ in sql) == rollup, args
        assert ("FROM agent_usage_daily" in sql) == (not rollup), args
        with engine.connect() as conn:
            folded = spend(conn, from_day=D0, to_day=last, **args)
            same(folded, spend(conn, from_day=D0, to_day=last, raw=True, **args))
        assert folded.folded_days == 6
    lo, hi = T0, T0 + 6 * DAY_MS - 1
    sql = _reads(
        engine,
        lambda c: sum_scope_usage(c, scope_kind="global", scope_ref=None, from_ms=lo, to_ms=hi),
    )
    assert ROLLUP_READ in sql and "FROM agent_usage_daily" not in sql
    with engine.connect() as conn:
        args = {"scope_kind": "global", "scope_ref": None, "from_ms": lo, "to_ms": hi}
        a, b = sum_scope_usage(conn, **args), sum_scope_usage(conn, **args, raw=True)
    assert a[0] == b[0] and a[2] == b[2] and a[1] == pytest.approx(b[1])


def test_refold_dirty_days_reprice_and_thread_delete_keep_the_rollup_true(engine: Any) -> None:
    set_rollup(engine, True)
    reset(engine)
    with engine.begin() as conn:
        conn.execute(
            thread.insert().values(id="t2", actor_ref="a0", title="", created_at=0, updated_at=0)
        )
    rows = [
        _row(at=T0 + n * DAY_MS + k, model=f"m{k % 3}", cost=None if k % 4 == 0 else 0.5)
        for n in range(4)
        for k in range(6)
    ]
    write(engine, rows)
    with engine.begin() as conn:  # some rows of a second thread, to delete later
        conn.execute(
            token_usage.update()
            .where(token_usage.c.created_at.in_([T0 + 1, T0 + 2 * DAY_MS + 2]))
            .values(thread_id="t2")
        )
    fold(engine, clock=NOW)
    _rollup_is_true(engine)
    with engine.begin() as conn:  # a bulk edit, then an explicit refold of that day
        conn.execute(
            token_usage.update()
            .where(token_usage.c.created_at == T0 + DAY_MS + 3)
            .values(input_tokens=7_777, model_id="m9")
        )
    assert (
        fold(engine, clock=NOW, refold=(D0 + timedelta(days=1), D0 + timedelta(days=1))).refolded
        == 1
    )
    _rollup_is_true(engine)
    with engine.begin() as conn:  # reprice: the unpriced rows of m0 get an estimate
        set_price(conn, "m0", input_per_1m=1_000.0, output_per_1m=0.0, clock=NOW)
        assert reprice(conn).repriced > 0
    _raw_equals_folded(engine, 3)  # dirty days read raw meanwhile
    assert fold(engine, clock=NOW).refolded > 0
    _rollup_is_true(engine)
    with engine.begin() as conn:
        set_price(conn, "m0", input_per_1m=2_000.0, output_per_1m=0.0, clock=NOW)
        assert recompute_estimates(conn).recomputed > 0
    fold(engine, clock=NOW)
    _rollup_is_true(engine)
    with engine.begin() as conn:
        delete_thread(conn, "t2")
    assert fold(engine, clock=NOW).refolded == 2
    _rollup_is_true(engine)
    assert _raw_equals_folded(engine, 3).folded_days == 4
    assert verify(engine).mismatched == []


def test_days_folded_before_the_rollup_are_read_from_the_daily_fold_then_refolded(
    engine: Any,
) -> None:
    set_rollup(engine, True)
    reset(engine)
    write(engine, [_row(at=T0 + n * DAY_MS, model=f"m{n % 2}") for n in range(4)])
    fold(engine, clock=NOW)
    with engine.begin() as conn:  # as days folded before the branch was applied
        conn.execute(usage_model_daily.delete().where(usage_model_daily.c.day <= T0 // DAY_MS + 1))
    by_model = {"by": "model", "from_day": D0, "to_day": D0 + timedelta(days=3)}
    sql = _reads(engine, lambda c: spend(c, **by_model))
    assert "FROM agent_usage_daily" in sql  # the rollup does not cover days 0-1
    with engine.connect() as conn:
        folded = spend(conn, **by_model)
        same(folded, spend(conn, **by_model, raw=True))
    assert folded.folded_days == 4
    assert [d.isoformat() for d in verify(engine).mismatched] == ["2026-03-01", "2026-03-02"]
    with engine.begin() as conn:  # undo verify's marks: fold finds the days by itself
        conn.execute(usage_fold.update().values(dirty=0))
    assert fold(engine, clock=NOW).refolded == 2  # the uncovered days
    _rollup_is_true(engine)
    assert ROLLUP_READ in _reads(engine, lambda c: spend(c, **by_model))


def test_a_day_refolded_without_the_rollup_is_never_read_from_its_stale_rollup(
    engine: Any,
) -> None:
    """An agora that does not know the rollup branch refolds a day (same rows, new costs): the
    day's rollup rows keep the old fold's stamp, so reports read ``agent_usage_daily`` for it,
    and the next ``fold`` that knows the branch refolds the day and its rollup."""
    from agora_cli.store._fold import fold_day

    set_rollup(engine, True)
    reset(engine)
    write(
        engine,
        [_row(at=T0 + n * DAY_MS + k, model=f"m{k % 2}") for n in range(3) for k in range(4)],
    )
    fold(engine, clock=NOW)
    day = T0 // DAY_MS + 1
    with engine.begin() as conn:  # the same row count, other costs and tokens
        conn.execute(
            token_usage.update()
            .where(token_usage.c.created_at.between(day * DAY_MS, (day + 1) * DAY_MS - 1))
            .values(cost_usd=9.0, input_tokens=5_000)
        )
        mark_days_dirty(conn, token_usage.c.created_at == day * DAY_MS)
    with engine.begin() as conn:
        assert fold_day(conn, day, NOW.now_ms() + 1, rollup=False) == ("folded", 4)
    by_model = {"by": "model", "from_day": D0, "to_day": D0 + timedelta(days=2)}
    sql = _reads(engine, lambda c: spend(c, **by_model))
    assert "FROM agent_usage_daily" in sql and ROLLUP_READ not in sql
    with engine.connect() as conn:
        folded = spend(conn, **by_model)
        same(folded, spend(conn, **by_model, raw=True))
    assert folded.folded_days == 3
    assert fold(engine, clock=NOW).refolded == 1
    _rollup_is_true(engine)
    assert ROLLUP_READ in _reads(engine, lambda c: spend(c, **by_model))


def test_without_the_rollup_branch_reports_and_verify_never_touch_it(engine: Any) -> None:
    set_rollup(engine, False)
    reset(engine)
    write(engine, [_row(at=T0 + n * DAY_MS, model=f"m{n % 2}") for n in range(3)])
    assert fold(engine, clock=NOW).folded > 0
    by_model = {"by": "model", "from_day": D0, "to_day": D0 + timedelta(days=2)}
    sql = _reads(engine, lambda c: spend(c, **by_model))
    assert ROLLUP_READ not in sql and "FROM agent_usage_daily" in sql
    with engine.connect() as conn:
        same(spend(conn, **by_model), spend(conn, **by_model, raw=True))
    assert verify(engine).mismatched == []
