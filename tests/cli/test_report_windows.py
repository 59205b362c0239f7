"""Issue 28, windows and breakdowns, on every dialect: local days across DST changes, spend by
any two keys equal to a brute-force sum (folded and raw), and tool stats that add up."""

from __future__ import annotations

import csv
import io
from datetime import date, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from helpers import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agora_cli.store._clock import DAY_MS, ManualClock, iso_ms, parse_instant
from agora_cli.store._fold import fold, has_rollup
from agora_cli.store._ledger import spend
from agora_cli.store._schema import (
    message,
    thread,
    token_usage,
    tool_call,
    usage_daily,
    usage_fold,
    usage_model_daily,
)
from agora_cli.store._windows import GROUP_KEYS, TIME_KEYS

THREADS = {"t": None, "ta": "acme"}  # thread -> its tenant
BERLIN = "Europe/Berlin"


def reset(engine: Any) -> None:
    with engine.begin() as conn:
        rollup = (usage_model_daily,) if has_rollup(conn) else ()
        for table in (*rollup, usage_daily, usage_fold, tool_call, message, token_usage, thread):
            conn.execute(table.delete())
        conn.execute(
            thread.insert(),
            [
                {"id": tid, "actor_ref": "a0", "tenant_ref": tenant, "title": ""}
                | {"created_at": 0, "updated_at": 0}
                for tid, tenant in THREADS.items()
            ],
        )


def write(engine: Any, rows: list[dict[str, Any]]) -> None:
    if rows:
        with engine.begin() as conn:
            conn.execute(
                token_usage.insert(),
                [
                    {
                        "id": f"u{i}",
                        "thread_id": r.get("thread", "t"),
                        "actor_ref": r.get("actor", "a0"),
                        "tenant_ref": r.get("tenant"),
                        "model_id": r.get("model", "m1"),
                        "purpose": "chat",
                        "input_tokens": r.get("inp", 100),
                        "output_tokens": r.get("out", 10),
                        "cache_read_tokens": None,
                        "cache_write_tokens": None,
                        "cost_usd": r.get("cost", 0.5),
                        "cost_source": "estimate" if r.get("cost", 0.5) is not None else None,
                        "created_at": r["at"],
                    }
                    for i, r in enumerate(rows)
                ],
            )


# --- local days across DST ---------------------------------------------------------------------

# Instants at the edges of Berlin's days around both 2026 changes, and the local day of each.
EDGES = {
    "2026-03-28T22:59:59.999Z": "2026-03-28",  # 23:59:59.999 CET
    "2026-03-28T23:00:00.000Z": "2026-03-29",  # 00:00 CET: the 23-hour day begins
    "2026-03-29T00:59:59.999Z": "2026-03-29",  # 01:59:59.999 CET, just before the jump
    "2026-03-29T01:00:00.000Z": "2026-03-29",  # 03:00 CEST
    "2026-03-29T21:59:59.999Z": "2026-03-29",  # 23:59:59.999 CEST: the day's last instant
    "2026-03-29T22:00:00.000Z": "2026-03-30",
    "2026-10-24T21:59:59.999Z": "2026-10-24",
    "2026-10-24T22:00:00.000Z": "2026-10-25",  # 00:00 CEST: the 25-hour day begins
    "2026-10-25T00:30:00.000Z": "2026-10-25",  # 02:30 CEST, the first time
    "2026-10-25T01:30:00.000Z": "2026-10-25",  # 02:30 CET, the second time
    "2026-10-25T22:59:59.999Z": "2026-10-25",  # 23:59:59.999 CET
    "2026-10-25T23:00:00.000Z": "2026-10-26",
}


@pytest.fixture
def dst_ledger(engine: Any) -> dict[str, int]:
    reset(engine)
    write(engine, [{"at": parse_instant(at), "actor": f"a{i % 2}"} for i, at in enumerate(EDGES)])
    want: dict[str, int] = {}
    for day in EDGES.values():
        want[day] = want.get(day, 0) + 1
    return want


def test_spend_by_day_in_berlin_across_both_dst_changes(
    cli: Any, db_url: str, dst_ledger: dict[str, int]
) -> None:
    r = cli(
        "spend",
        "--by",
        "day",
        "--from",
        "2026-03-01",
        "--to",
        "2026-10-31",
        "--tz",
        BERLIN,
        "--db",
        db_url,
        "--json",
    )
    assert r.exit_code == 0 and r.stderr == "", r.stderr
    doc = r.json()
    assert {row["key"]: row["turns"] for row in doc["rows"]} == dst_ledger
    assert doc["tz"] == BERLIN and doc["from_at"] == "2026-02-28T23:00:00.000Z"
    assert doc["to_at"] == "2026-10-31T22:59:59.999Z"
    # UTC (the default) keys the same rows by their UTC days
    utc = cli(
        "spend",
        "--by",
        "day",
        "--from",
        "2026-03-01",
        "--to",
        "2026-10-31",
        "--db",
        db_url,
        "--json",
    ).json()
    assert utc["tz"] == "UTC" and "2026-03-28" in {row["key"] for row in utc["rows"]}
    assert {row["key"]: row["turns"] for row in utc["rows"]} != dst_ledger


@pytest.mark.parametrize(("day", "hours"), [("2026-03-29", 23), ("2026-10-25", 25)])
def test_a_dst_days_window_is_its_23_or_25_hours_folded_or_raw(
    cli: Any, db_url: str, engine: Any, dst_ledger: dict[str, int], day: str, hours: int
) -> None:
    fold(engine, clock=ManualClock(parse_instant("2026-11-15T00:00:00Z")))
    for raw in ([], ["--raw"]):
        for by in ("model", "day", "actor,day", "day,actor"):
            r = cli(
                "spend",
                "--by",
                by,
                "--from",
                day,
                "--to",
                day,
                "--tz",
                BERLIN,
                *raw,
                "--db",
                db_url,
                "--json",
            )
            assert r.exit_code == 0, r.stderr
            doc = r.json()
            span = parse_instant(doc["to_at"]) + 1 - parse_instant(doc["from_at"])
            assert span == hours * 3_600_000
            assert doc["total"]["turns"] == dst_ledger[day], (by, raw)
            if by == "day":
                assert [row["key"] for row in doc["rows"]] == [day]
                assert doc["folded_days"] == 0  # local days never come from UTC fold days
    # a UTC report of the folded days reads the fold
    utc = cli(
        "spend",
        "--by",
        "day",
        "--from",
        "2026-03-01",
        "--to",
        "2026-10-31",
        "--db",
        db_url,
        "--json",
    ).json()
    assert utc["folded_days"] > 0


def test_quota_day_in_berlin_counts_the_local_day(
    cli: Any, db_url: str, dst_ledger: dict[str, int]
) -> None:
    at = "2026-03-29T21:59:59.999Z"  # the last instant of Berlin's 23-hour day
    r = cli("quota", "--actor", "a0", "--at", at, "--tz", BERLIN, "--db", db_url, "--json")
    assert r.exit_code == 0, r.stderr
    day = r.json()["day"]
    assert (day["from"], day["to"]) == ("2026-03-28T23:00:00.000Z", "2026-03-29T21:59:59.999Z")
    mine = [i for i, (at_, d) in enumerate(EDGES.items()) if d == "2026-03-29" and i % 2 == 0]
    assert day["tokens"] == 110 * len(mine)


# --- two keys, exact -------------------------------------------------------------------------

T0 = parse_instant("2026-03-20T00:00:00Z")
row = st.fixed_dictionaries(
    {
        # around Berlin's spring change and a week either side, the edges weighted
        "at": st.one_of(
            st.sampled_from([parse_instant(at) for at in EDGES if at.startswith("2026-03")]),
            st.integers(T0, T0 + 20 * DAY_MS),
        ),
        "actor": st.sampled_from(["a0", "a1", "a2"]),
        "tenant": st.sampled_from([None, "acme", "zeta"]),
        "thread": st.sampled_from(list(THREADS)),
        "model": st.sampled_from(["m1", "m2"]),
        "inp": st.integers(0, 10_000),
        "out": st.integers(0, 5_000),
        "cost": st.one_of(st.none(), st.floats(0, 5, allow_nan=False).map(lambda c: round(c, 6))),
    }
)
pairs = st.sampled_from(
    [(a, b) for a in GROUP_KEYS for b in GROUP_KEYS if a != b and not {a, b} <= set(TIME_KEYS)]
)


def _period(key: str, day: date) -> str:
    if key == "week":
        day -= timedelta(days=day.weekday())
    return day.isoformat()[:7] if key == "month" else day.isoformat()


def brute(rows: list[dict[str, Any]], keys: tuple[str, ...], lo: int, hi: int, tz: str) -> dict:
    """Each (outer, inner) key's turns, tokens and cost, one row at a time in Python."""
    zone = ZoneInfo(tz)
    out: dict[tuple[Any, ...], list[Any]] = {}
    for r in rows:
        if not lo <= r["at"] <= hi:
            continue
        from datetime import UTC, datetime

        local = datetime.fromtimestamp(r["at"] / 1000, tz=UTC).astimezone(zone).date()
        values = {
            "model": r["model"],
            "actor": r["actor"],
            "tenant": r["tenant"] or THREADS[r["thread"]],
            "thread": r["thread"],
        }
        key = tuple(_period(k, local) if k in TIME_KEYS else values[k] for k in keys)
        acc = out.setdefault(key, [0, 0, None])
        acc[0] += 1
        acc[1] += r["inp"] + r["out"]
        if r["cost"] is not None:
            acc[2] = (acc[2] or 0.0) + r["cost"]
    return out


def flat(report: Any) -> dict[tuple[Any, ...], list[Any]]:
    got: dict[tuple[Any, ...], list[Any]] = {}
    for period in report.periods:
        for r in period.rows:
            got[(period.key, r.key)] = [r.turns, r.input_tokens + r.output_tokens, r.cost_usd]
    return got


@settings(
    max_examples=examples(15),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    rows=st.lists(row, max_size=30),
    keys=pairs,
    tz=st.sampled_from(["UTC", BERLIN, "America/St_Johns"]),
    start=st.integers(0, 12),
    days=st.integers(0, 9),
)
def test_two_keys_equal_a_brute_force_sum_folded_or_raw(
    engine: Any, rows: list[dict[str, Any]], keys: tuple[str, str], tz: str, start: int, days: int
) -> None:
    reset(engine)
    write(engine, rows)
    fold(engine, clock=ManualClock(parse_instant("2026-04-20T00:00:00Z")))
    first = date(2026, 3, 20) + timedelta(days=start)
    last = first + timedelta(days=days)
    with engine.connect() as conn:
        folded = spend(conn, by=",".join(keys), from_day=first, to_day=last, tz=tz)
        raw = spend(conn, by=",".join(keys), from_day=first, to_day=last, tz=tz, raw=True)
    want = brute(rows, keys, folded.from_ms, folded.to_ms, tz)
    for report in (folded, raw):
        got = flat(report)
        assert set(got) == set(want)
        for key, (turns, tokens, cost) in want.items():
            assert got[key][:2] == [turns, tokens], key
            assert (got[key][2] is None) == (cost is None), key
            if cost is not None:
                assert got[key][2] == pytest.approx(cost, rel=1e-9, abs=1e-9)
        assert report.total.turns == sum(w[0] for w in want.values())
        # each outer group's total is the sum of its rows
        for period in report.periods:
            assert period.total.turns == sum(r.turns for r in period.rows)
    # folded and raw list the same groups in the same order
    assert [(p.key, [r.key for r in p.rows]) for p in folded.periods] == [
        (p.key, [r.key for r in p.rows]) for p in raw.periods
    ]
    if tz == "UTC" and "thread" not in keys and want:  # a row in the window: its day folded
        assert folded.folded_days > 0


# --- the command line --------------------------------------------------------------------------


@pytest.fixture
def two_actors(engine: Any) -> None:
    reset(engine)
    write(
        engine,
        [
            {"at": parse_instant("2026-03-10T08:00:00Z"), "actor": "alice", "model": "m1"},
            {"at": parse_instant("2026-03-10T09:00:00Z"), "actor": "bob", "model": "m1"},
            {
                "at": parse_instant("2026-03-11T09:00:00Z"),
                "actor": "bob",
                "model": "m2",
                "cost": None,
            },
        ],
    )


def test_spend_by_model_and_actor_in_every_format(cli: Any, db_url: str, two_actors: None) -> None:
    window = ("--from", "20260301", "--to", "2026-03")
    r = cli("spend", "--by", "model,actor", *window, "--db", db_url, "--json")
    assert r.exit_code == 0 and r.stderr == "", r.stderr
    doc = r.json()
    assert doc["by"] == "model,actor" and (doc["from"], doc["to"]) == ("2026-03-01", "2026-03-31")
    m1 = next(g for g in doc["rows"] if g["key"] == "m1")
    assert m1["keys"] == {"model": "m1"}
    assert [(x["key"], x["keys"]) for x in m1["rows"]] == [
        ("alice", {"model": "m1", "actor": "alice"}),
        ("bob", {"model": "m1", "actor": "bob"}),
    ]
    assert m1["total"]["turns"] == 2 and doc["total"]["turns"] == 3
    lines = list(
        csv.DictReader(
            io.StringIO(
                cli("spend", "--by", "model,actor", *window, "--db", db_url, "--csv").stdout
            )
        )
    )
    assert [(x["model"], x["actor"], x["turns"]) for x in lines] == [
        ("m1", "alice", "1"),
        ("m1", "bob", "1"),
        ("m1", "TOTAL", "2"),
        ("m2", "bob", "1"),
        ("m2", "TOTAL", "1"),
        ("TOTAL", "TOTAL", "3"),
    ]
    table = cli("spend", "--by", "model,actor", *window, "--db", db_url)
    assert table.exit_code == 0
    header = next(line for line in table.stdout.splitlines() if "turns" in line)
    assert header.split("┃")[1].strip() == "model" and header.split("┃")[2].strip() == "actor"
    chart = cli("spend", "--by", "model,actor", *window, "--chart", "--db", db_url)
    assert chart.exit_code == 2 and chart.stdout == ""
    assert chart.stderr.startswith("error: --chart stacks") and chart.stderr.count("\n") == 1
    stacked = cli("spend", "--by", "day,actor", *window, "--chart", "--db", db_url)
    assert stacked.exit_code == 0 and "legend:" in stacked.stdout


def test_spend_relative_windows_and_a_bad_zone(cli: Any, db_url: str, two_actors: None) -> None:
    for args in (
        ["--from", "yesterday"],
        ["--from", "-7d", "--to", "today"],
        ["--last", "24h"],
        ["--from", "-24h"],
        ["--last", "2w", "--tz", "Asia/Kathmandu"],
    ):
        r = cli("spend", *args, "--db", db_url, "--json")
        assert r.exit_code == 0, (args, r.stderr)
        assert r.json()["window"] == "given"
    hours = cli("spend", "--last", "24h", "--db", db_url, "--json").json()
    span = parse_instant(hours["to_at"]) - parse_instant(hours["from_at"])
    assert span == 24 * 3_600_000
    for args in (["--tz", "Mars/Olympus"], ["--last", "24x"], ["--from", "tomorrow"]):
        bad = cli("spend", *args, "--db", db_url)
        assert bad.exit_code == 2 and bad.stdout == "", args
        assert bad.stderr.startswith("error: ") and bad.stderr.count("\n") == 1
        assert "----" not in bad.stderr
    env = cli("spend", "--db", db_url, "--json", env={"AGORA_TZ": "Europe/Berlin"})
    assert env.exit_code == 0 and env.json()["tz"] == "Europe/Berlin"
    flag = cli("spend", "--tz", "UTC", "--db", db_url, "--json", env={"AGORA_TZ": BERLIN})
    assert flag.json()["tz"] == "UTC"


def test_times_in_tables_follow_the_zone_and_json_stays_utc(
    cli: Any, db_url: str, engine: Any
) -> None:
    reset(engine)
    at = parse_instant("2026-11-02T13:00:05Z")
    with engine.begin() as conn:
        conn.execute(thread.update().values(created_at=at, updated_at=at))
    doc = cli("threads", "list", "--tz", BERLIN, "--db", db_url, "--json").json()
    assert {t["updated_at"] for t in doc["threads"]} == {iso_ms(at)}  # JSON stays UTC
    table = cli("threads", "list", "--tz", BERLIN, "--db", db_url, env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.stderr
    assert "2026-11-02 14:00:05 +01:00" in table.stdout and f"({BERLIN})" in table.stdout
    utc = cli("threads", "list", "--db", db_url, env={"COLUMNS": "200"})
    assert "2026-11-02 13:00:05" in utc.stdout and "+01:00" not in utc.stdout
    bad = cli("threads", "list", "--tz", "Mars/Olympus", "--db", db_url)
    assert bad.exit_code == 2 and bad.stderr.startswith("error: ") and bad.stdout == ""


# --- tools stats -------------------------------------------------------------------------------


def test_tool_calls_add_up_and_the_default_window_finds_a_failure_weeks_ago(
    cli: Any, db_url: str, engine: Any
) -> None:
    from agora_cli.store._clock import SystemClock

    reset(engine)
    now = SystemClock().now_ms()
    day = DAY_MS
    calls = [
        ("flaky", "executed", now - 2 * day),
        ("flaky", "executed", now - 3 * day),
        ("flaky", "failed", now - 20 * day),  # outside the old 7-day default
        ("flaky", "failed", now - 21 * day),
        ("flaky", "executed", now - 22 * day),
        ("approve_me", "pending_approval", now - day),
        ("approve_me", "cancelled", now - day),  # a word no group knows: other
        ("approve_me", "rejected", now - day),
        ("approve_me", "auto_executed", now - day),
    ]
    with engine.begin() as conn:
        conn.execute(
            message.insert().values(
                id="m", thread_id="t", role="assistant", content="", created_at=0
            )
        )
        conn.execute(
            tool_call.insert(),
            [
                {
                    "id": f"c{i}",
                    "message_id": "m",
                    "tool_name": name,
                    "tool_type": "read",
                    "status": status,
                    "created_at": at,
                    "executed_at": at + 10,
                    "error": "boom" if status == "failed" else None,
                }
                for i, (name, status, at) in enumerate(calls)
            ],
        )
    doc = cli("tools", "stats", "--db", db_url, "--json").json()
    assert doc["window"] == "30d"
    tools = {t["tool_name"]: t for t in doc["tools"]}
    assert (tools["flaky"]["failed"], tools["flaky"]["fail_rate"]) == (2, pytest.approx(0.4))
    outcomes = ("succeeded", "failed", "rejected", "pending_approval", "running", "other")
    approve = tools["approve_me"]
    assert [approve[k] for k in outcomes] == [0, 0, 1, 1, 1, 1] and approve["calls"] == 4
    assert approve["fail_rate"] is None and approve["settled"] == 0
    week = cli("tools", "stats", "--last", "7d", "--db", db_url, "--json").json()
    assert {t["tool_name"]: t["failed"] for t in week["tools"]}["flaky"] == 0
    by_rate = cli("tools", "stats", "--sort", "fail_rate", "--db", db_url, "--json").json()
    assert [t["tool_name"] for t in by_rate["tools"]] == ["flaky", "approve_me"]
    by_calls = cli("tools", "stats", "--sort", "calls", "--db", db_url, "--json").json()
    assert [t["tool_name"] for t in by_calls["tools"]] == ["flaky", "approve_me"]
    table = cli("tools", "stats", "--db", db_url, env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.stderr
    assert "the last 30 days (the default)" in table.stdout
    total = next(line for line in table.stdout.splitlines() if "TOTAL" in line)
    cells = [c.strip() for c in total.split("│")[1:-1]]
    assert cells[2:10] == ["9", "3", "2", "40%", "1", "1", "1", "1"]  # calls = 3+2+1+1+1+1
    assert "4 call(s) awaiting approval, running, rejected or other are not in it" in " ".join(
        table.stdout.split()
    )
    bad = cli("tools", "stats", "--sort", "slowest", "--db", db_url)
    assert bad.exit_code == 2 and "fail_rate" in bad.stderr
