"""Ledger reports on every dialect: windows at UTC edges, unpriced rows, quota, brute force.

The quota cases read an actor's windows through ``budgets.scope_quota``, the one quota API."""

from __future__ import annotations

import itertools
from datetime import date
from typing import Any, NamedTuple

import pytest
from helpers import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agora_cli.store._budgets import BudgetStatus, scope_quota
from agora_cli.store._clock import day_start_ms, parse_instant
from agora_cli.store._errors import InvalidInput
from agora_cli.store._ledger import SpendRow, list_unpriced_models, spend
from agora_cli.store._schema import thread, token_usage

JAN31_LAST = parse_instant("2026-01-31T23:59:59.999Z")
FEB01_FIRST = parse_instant("2026-02-01T00:00:00.000Z")
_ids = itertools.count()


@pytest.fixture
def ledger(engine: Any) -> Any:
    """A function that inserts ledger rows (one thread holds them all)."""
    with engine.begin() as conn:
        conn.execute(
            thread.insert().values(id="t1", actor_ref="alice", title="", created_at=0, updated_at=0)
        )

    def add(*rows: dict[str, Any]) -> None:
        with engine.begin() as conn:
            conn.execute(token_usage.insert(), [usage_row(**r) for r in rows])

    return add


class Windows(NamedTuple):
    day: BudgetStatus
    month: BudgetStatus

    @property
    def exhausted(self) -> bool:
        return "exhausted" in (self.day.state, self.month.state)


def quota(
    conn: Any, *, actor: str, at_ms: int, provider_cost_only: bool = False, **limits: Any
) -> Windows:
    """An actor's day and month at ``at_ms``, limits given as ``day_tokens=…``, ``month_usd=…``."""
    given: dict[str, tuple[Any, Any]] = {}
    for key, value in limits.items():
        period, unit = key.split("_")
        tokens, usd = given.get(period, (None, None))
        given[period] = (value, usd) if unit == "tokens" else (tokens, value)
    statuses = scope_quota(
        conn,
        scope_kind="actor",
        scope_ref=actor,
        at_ms=at_ms,
        limits=given,
        provider_cost_only=provider_cost_only,
    )
    by_period = {s.budget.period: s for s in statuses}
    return Windows(day=by_period["day"], month=by_period["month"])


def usage_row(
    *,
    at: int,
    model: str = "gpt-4o-mini",
    actor: str = "alice",
    tenant: str | None = "acme",
    inp: int = 100,
    out: int = 40,
    cache_read: int | None = None,
    cache_write: int | None = None,
    cost: float | None = 0.01,
    source: str | None = "estimate",
) -> dict[str, Any]:
    return {
        "id": f"u{next(_ids)}",
        "thread_id": "t1",
        "actor_ref": actor,
        "tenant_ref": tenant,
        "model_id": model,
        "purpose": "chat",
        "input_tokens": inp,
        "output_tokens": out,
        "cache_read_tokens": cache_read,
        "cache_write_tokens": cache_write,
        "cost_usd": cost,
        "cost_source": source if cost is not None else None,
        "created_at": at,
    }


def report(engine: Any, **kw: Any) -> Any:
    with engine.connect() as conn:
        return spend(conn, **kw)


def keys(rep: Any) -> list[str | None]:
    return [r.key for r in rep.rows]


D = date.fromisoformat


def test_day_and_month_windows_at_utc_edges(engine: Any, ledger: Any) -> None:
    ledger(
        {"at": JAN31_LAST - 1000 * 86400},  # 2026-01-30 23:59:59.999
        {"at": JAN31_LAST, "inp": 1},
        {"at": FEB01_FIRST, "inp": 2},
    )
    by_day = report(engine, by="day", from_day=D("2026-01-30"), to_day=D("2026-02-01"))
    assert keys(by_day) == ["2026-01-30", "2026-01-31", "2026-02-01"]
    by_month = report(engine, by="month", from_day=D("2026-01-01"), to_day=D("2026-02-28"))
    assert keys(by_month) == ["2026-01", "2026-02"]
    assert [r.turns for r in by_month.rows] == [2, 1]
    jan31 = report(engine, by="model", from_day=D("2026-01-31"), to_day=D("2026-01-31"))
    assert (jan31.total.turns, jan31.total.input_tokens) == (1, 1)
    assert (jan31.from_ms, jan31.to_ms) == (day_start_ms(D("2026-01-31")), JAN31_LAST)
    feb01 = report(engine, by="model", from_day=D("2026-02-01"), to_day=D("2026-02-01"))
    assert (feb01.total.turns, feb01.total.input_tokens) == (1, 2)
    empty = report(engine, by="day", from_day=D("2026-02-02"), to_day=D("2026-02-05"))
    assert empty.rows == [] and empty.total.turns == 0 and empty.total.cost_usd is None


def test_quota_windows_at_utc_edges(engine: Any, ledger: Any) -> None:
    ledger({"at": JAN31_LAST, "inp": 1, "out": 0}, {"at": FEB01_FIRST, "inp": 2, "out": 0})
    with engine.connect() as conn:
        jan = quota(conn, actor="alice", at_ms=parse_instant("2026-01-31T12:00:00Z"))
        feb = quota(conn, actor="alice", at_ms=FEB01_FIRST)
        end = quota(conn, actor="alice", at_ms=JAN31_LAST)
    # The row at 23:59:59.999 is after noon: "as of" noon it had not happened yet.
    assert (jan.day.tokens, jan.month.tokens) == (0, 0)
    assert (jan.day.from_ms, jan.day.to_ms) == (day_start_ms(D("2026-01-31")), JAN31_LAST)
    assert (jan.month.from_ms, jan.month.to_ms) == (day_start_ms(D("2026-01-01")), JAN31_LAST)
    assert (feb.day.tokens, feb.month.tokens) == (2, 2)
    assert feb.month.to_ms == parse_instant("2026-02-28T23:59:59.999Z")
    assert (end.day.tokens, end.month.tokens) == (1, 1)


def test_quota_example_of_the_spec(engine: Any, ledger: Any) -> None:
    day = parse_instant("2026-03-10T08:00:00Z")
    ledger(
        {"at": day, "inp": 100, "out": 40, "cache_read": 90},
        {"at": day + 3_600_000, "inp": 10, "out": 5},
    )
    with engine.connect() as conn:
        same = quota(conn, actor="alice", at_ms=day + 7_200_000)
        other = quota(conn, actor="alice", at_ms=parse_instant("2026-03-11T08:00:00Z"))
        nobody = quota(conn, actor="ALICE", at_ms=day)  # binary collation everywhere
    assert same.day.tokens == 155 and same.month.tokens == 155
    assert other.day.tokens == 0 and other.day.usd == 0.0
    assert other.month.tokens == 155
    assert nobody.day.tokens == 0
    rep = report(engine, by="actor", from_day=D("2026-03-10"), to_day=D("2026-03-10"))
    # cache tokens are a subset of input and never re-added
    assert (rep.total.input_tokens, rep.total.cache_read_tokens) == (110, 90)
    assert rep.total.input_tokens + rep.total.output_tokens == 155


def test_quota_limits_exhaust_at_used_equal_limit(engine: Any, ledger: Any) -> None:
    at = parse_instant("2026-03-10T08:00:00Z")
    ledger({"at": at, "inp": 100, "out": 55, "cost": 0.5}, {"at": at, "cost": None})
    with engine.connect() as conn:

        def q(**limits: Any) -> Any:
            return quota(conn, actor="alice", at_ms=at, **limits)

        none = q()
        assert (none.day.tokens, none.day.usd, none.day.unpriced_turns) == (295, 0.5, 1)
        assert not none.exhausted and none.day.budget.limit_tokens is None
        assert none.day.state == "ok"  # no limit at all
        assert q(day_tokens=295).day.state == "exhausted" and q(day_tokens=295).exhausted
        assert not q(day_tokens=296).exhausted
        assert q(day_usd=0.5).exhausted and not q(day_usd=0.51).exhausted
        month = q(month_tokens=295)
        assert month.month.state == "exhausted" and month.day.state == "ok" and month.exhausted
        assert q(month_usd=0.0).exhausted  # a zero budget is spent by any known cost
        with pytest.raises(InvalidInput):
            q(day_tokens=-1)
        with pytest.raises(InvalidInput):
            q(month_usd=float("nan"))
        with pytest.raises(InvalidInput):
            q(day_usd=-0.01)
        with pytest.raises(InvalidInput):
            quota(conn, actor="", at_ms=at)


def test_unpriced_rows_are_counted_never_summed_as_free(engine: Any, ledger: Any) -> None:
    at = parse_instant("2026-03-10T08:00:00Z")
    ledger(
        {"at": at, "model": "priced", "cost": 0.25},
        {"at": at, "model": "priced", "cost": None},
        {"at": at, "model": "mystery", "cost": None},
        {"at": at, "model": "mystery", "cost": None},
        {"at": at, "model": "free", "cost": 0.0},
    )
    rep = report(engine, by="model", from_day=D("2026-03-01"), to_day=D("2026-03-31"))
    rows = {r.key: r for r in rep.rows}
    assert (rows["priced"].cost_usd, rows["priced"].unpriced_turns) == (0.25, 1)
    assert rows["mystery"].cost_usd is None and rows["mystery"].unpriced_turns == 2
    assert rows["free"].cost_usd == 0.0 and rows["free"].unpriced_turns == 0
    assert (rep.total.turns, rep.total.unpriced_turns, rep.total.cost_usd) == (5, 3, 0.25)
    with engine.connect() as conn:
        unpriced = list_unpriced_models(conn, from_day=D("2026-03-01"), to_day=D("2026-03-31"))
    assert [(m.model_id, m.turns) for m in unpriced] == [("mystery", 2), ("priced", 1)]


def test_provider_cost_only(engine: Any, ledger: Any) -> None:
    at = parse_instant("2026-03-10T08:00:00Z")
    ledger(
        {"at": at, "model": "m", "cost": 1.0, "source": "provider"},
        {"at": at, "model": "m", "cost": 0.5, "source": "estimate"},
        {"at": at, "model": "m", "cost": None},
        {"at": at, "model": "est-only", "cost": 0.25, "source": "estimate"},
    )
    window = {"from_day": D("2026-03-10"), "to_day": D("2026-03-10")}
    full = {r.key: r for r in report(engine, by="model", **window).rows}
    assert (full["m"].cost_usd, full["m"].estimated_usd, full["m"].unpriced_turns) == (1.5, 0.5, 1)
    only = report(engine, by="model", provider_cost_only=True, **window)
    rows = {r.key: r for r in only.rows}
    assert (rows["m"].cost_usd, rows["m"].estimated_usd, rows["m"].unpriced_turns) == (1.0, 0, 1)
    assert rows["est-only"].cost_usd is None and rows["est-only"].unpriced_turns == 0
    assert only.total.cost_usd == 1.0 and only.total.estimated_usd == 0
    with engine.connect() as conn:
        q = quota(conn, actor="alice", at_ms=at, provider_cost_only=True)
        assert q.day.usd == 1.0
        assert quota(conn, actor="alice", at_ms=at).day.usd == 1.75


def test_order_by_cost_then_tokens_then_key(engine: Any, ledger: Any) -> None:
    at = parse_instant("2026-03-10T08:00:00Z")
    ledger(
        {"at": at, "model": "b-cheap", "cost": 0.1},
        {"at": at, "model": "a-cheap", "cost": 0.1},
        {"at": at, "model": "c-cheap-big", "cost": 0.1, "inp": 1000},
        {"at": at, "model": "dear", "cost": 5.0},
        {"at": at, "model": "unknown", "cost": None, "inp": 10**6},
    )
    rep = report(engine, by="model", from_day=D("2026-03-10"), to_day=D("2026-03-10"))
    assert keys(rep) == ["dear", "c-cheap-big", "a-cheap", "b-cheap", "unknown"]


def test_filters_and_tenant_groups(engine: Any, ledger: Any) -> None:
    at = parse_instant("2026-03-10T08:00:00Z")
    ledger(
        {"at": at, "actor": "alice", "tenant": "acme", "model": "x", "cost": 1.0},
        {"at": at, "actor": "bob", "tenant": None, "model": "x", "cost": 2.0},
        {"at": at, "actor": "bob", "tenant": "acme", "model": "y", "cost": 4.0},
    )
    w = {"from_day": D("2026-03-10"), "to_day": D("2026-03-10")}
    tenants = report(engine, by="tenant", **w)
    assert [(r.key, r.cost_usd) for r in tenants.rows] == [("acme", 5.0), (None, 2.0)]
    assert report(engine, by="model", actor="bob", **w).total.cost_usd == 6.0
    assert report(engine, by="model", tenant="acme", **w).total.cost_usd == 5.0
    assert keys(report(engine, by="actor", model="x", **w)) == ["bob", "alice"]
    assert report(engine, by="actor", actor="carol", **w).rows == []


def test_bad_arguments(engine: Any) -> None:
    with pytest.raises(InvalidInput):
        report(engine, by="year", from_day=D("2026-03-01"), to_day=D("2026-03-02"))
    with pytest.raises(InvalidInput):
        report(engine, by="day", from_day=D("2026-03-02"), to_day=D("2026-03-01"))


# --- brute force -----------------------------------------------------------------------------

BASE = parse_instant("2026-01-15T00:00:00Z")
SPAN = 50 * 86_400_000  # mid-January to early March: two month boundaries

row_strategy = st.fixed_dictionaries(
    {
        "at": st.integers(0, SPAN).map(lambda x: BASE + x),
        "model": st.sampled_from(["m1", "m2", "m3"]),
        "actor": st.sampled_from(["alice", "bob"]),
        "tenant": st.sampled_from(["acme", "globex", None]),
        "inp": st.integers(0, 10_000),
        "out": st.integers(0, 5_000),
        "cache_read": st.none() | st.integers(0, 100),
        "cache_write": st.none() | st.integers(0, 100),
        "cost": st.none() | st.floats(0, 5, allow_nan=False).map(lambda c: round(c, 6)),
        "source": st.sampled_from(["estimate", "provider"]),
    }
)


def brute(rows: list[dict[str, Any]], by: str, lo: int, hi: int, provider_only: bool) -> Any:
    """The spend report computed row by row in Python."""
    from agora_cli.store._clock import ms_to_date

    groups: dict[Any, list[dict[str, Any]]] = {}
    for r in rows:
        if not lo <= r["at"] <= hi:
            continue
        key = {
            "model": r["model"],
            "actor": r["actor"],
            "tenant": r["tenant"],
            "day": ms_to_date(r["at"]).isoformat(),
            "month": ms_to_date(r["at"]).isoformat()[:7],
        }[by]
        groups.setdefault(key, []).append(r)

    def cost_of(r: dict[str, Any]) -> float | None:
        if r["cost"] is None or (provider_only and r["source"] != "provider"):
            return None
        return float(r["cost"])

    out = {}
    for key, rs in groups.items():
        costs = [c for c in map(cost_of, rs) if c is not None]
        out[key] = {
            "turns": len(rs),
            "input_tokens": sum(r["inp"] for r in rs),
            "output_tokens": sum(r["out"] for r in rs),
            "cache_read_tokens": sum(r["cache_read"] or 0 for r in rs),
            "cache_write_tokens": sum(r["cache_write"] or 0 for r in rs),
            "cost_usd": sum(costs) if costs else None,
            "estimated_usd": 0.0
            if provider_only
            else sum(r["cost"] for r in rs if r["cost"] is not None and r["source"] == "estimate"),
            "unpriced_turns": sum(1 for r in rs if r["cost"] is None),
        }
    return out


def as_dict(row: SpendRow) -> dict[str, Any]:
    return {k: v for k, v in vars(row).items() if k != "key"}


def approx_equal(got: dict[str, Any], want: dict[str, Any]) -> None:
    for field, value in want.items():
        if isinstance(value, float):
            assert got[field] == pytest.approx(value, rel=1e-9, abs=1e-9), field
        else:
            assert got[field] == value, field


@settings(
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    rows=st.lists(row_strategy, max_size=40),
    window=st.tuples(st.integers(0, 49), st.integers(0, 49)).map(sorted),
    provider_only=st.booleans(),
)
def test_totals_equal_a_brute_force_sum(
    engine: Any, rows: list[dict[str, Any]], window: list[int], provider_only: bool
) -> None:
    from datetime import timedelta

    with engine.begin() as conn:
        conn.execute(token_usage.delete())
        conn.execute(thread.delete())
        conn.execute(
            thread.insert().values(id="t1", actor_ref="a", title="", created_at=0, updated_at=0)
        )
        if rows:
            conn.execute(token_usage.insert(), [usage_row(**r) for r in rows])
    start = D("2026-01-15") + timedelta(days=window[0])
    end = D("2026-01-15") + timedelta(days=window[1])
    lo, hi = day_start_ms(start), day_start_ms(end) + 86_400_000 - 1
    for by in ("model", "actor", "tenant", "day", "month"):
        rep = report(engine, by=by, from_day=start, to_day=end, provider_cost_only=provider_only)
        want = brute(rows, by, lo, hi, provider_only)
        assert sorted(keys(rep), key=lambda k: (k is None, k or "")) == sorted(
            want, key=lambda k: (k is None, k or "")
        )
        for row in rep.rows:
            approx_equal(as_dict(row), want[row.key])
        if by in ("day", "month"):
            assert keys(rep) == sorted(want)
        total_costs = [w["cost_usd"] for w in want.values() if w["cost_usd"] is not None]
        assert rep.total.turns == sum(w["turns"] for w in want.values())
        assert rep.total.unpriced_turns == sum(w["unpriced_turns"] for w in want.values())
        if total_costs:
            assert rep.total.cost_usd == pytest.approx(sum(total_costs), rel=1e-9, abs=1e-9)
        else:
            assert rep.total.cost_usd is None
    with engine.connect() as conn:
        at = day_start_ms(end) + 43_200_000
        q = quota(conn, actor="alice", at_ms=at, provider_cost_only=provider_only)
    day_lo, day_hi = day_start_ms(end), day_start_ms(end) + 86_400_000 - 1
    mine = [r for r in rows if r["actor"] == "alice" and day_lo <= r["at"] <= min(day_hi, at)]
    assert q.day.tokens == sum(r["inp"] + r["out"] for r in mine)
    want_usd = sum(
        r["cost"]
        for r in mine
        if r["cost"] is not None and (not provider_only or r["source"] == "provider")
    )
    assert q.day.usd == pytest.approx(want_usd, rel=1e-9, abs=1e-9)
