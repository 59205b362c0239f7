"""`agora spend` and `agora quota` through the real Typer app, on every dialect."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from helpers import no_data, run_agora

from agora_cli.store._clock import SystemClock, parse_instant
from agora_cli.store._schema import thread, token_usage

ROW_KEYS = {
    "key",
    "turns",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cost_usd",
    "estimated_usd",
    "unpriced_turns",
}
WINDOW_KEYS = {"from", "to", "tokens", "usd", "limits", "exhausted"}
MAR10 = parse_instant("2026-03-10T08:00:00Z")


def insert(engine: Any, *rows: dict[str, Any]) -> None:
    with engine.begin() as conn:
        if not conn.execute(thread.select().where(thread.c.id == "t1")).first():
            conn.execute(
                thread.insert().values(
                    id="t1", actor_ref="alice", title="", created_at=0, updated_at=0
                )
            )
        conn.execute(
            token_usage.insert(),
            [
                {
                    "id": f"u{i}-{r['at']}",
                    "thread_id": "t1",
                    "actor_ref": r.get("actor", "alice"),
                    "tenant_ref": r.get("tenant", "acme"),
                    "model_id": r.get("model", "gpt-4o-mini"),
                    "purpose": "chat",
                    "input_tokens": r.get("inp", 100),
                    "output_tokens": r.get("out", 40),
                    "cache_read_tokens": r.get("cache_read"),
                    "cache_write_tokens": None,
                    "cost_usd": r.get("cost", 0.5),
                    "cost_source": r.get(
                        "source", "estimate" if r.get("cost", 0.5) is not None else None
                    ),
                    "created_at": r["at"],
                }
                for i, r in enumerate(rows)
            ],
        )


@pytest.fixture
def sample(engine: Any) -> None:
    insert(
        engine,
        {"at": MAR10, "model": "gpt-4o-mini", "cost": 0.5, "cache_read": 90},
        {"at": MAR10 + 1, "model": "gpt-4o-mini", "cost": 0.25, "source": "provider"},
        {"at": MAR10 + 2, "model": "mystery-0613", "cost": None, "actor": "bob"},
        {"at": parse_instant("2026-03-31T23:59:59.999Z"), "model": "claude", "cost": 2.0},
        {"at": parse_instant("2026-04-01T00:00:00Z"), "model": "claude", "cost": 4.0},
    )


def spend_json(cli: Any, db_url: str, *args: str) -> dict[str, Any]:
    r = cli("spend", *args, "--db", db_url, "--json")
    assert r.exit_code == 0, r.stderr
    assert r.stderr == ""
    doc = r.json()
    assert set(doc) == {"by", "from", "to", "rows", "total", "folded_days"} | {
        "from_at",
        "to_at",
        "tz",
        "window",
    }
    for row in doc["rows"]:
        assert set(row) == ROW_KEYS | {"keys"}
        assert row.pop("keys") == {doc["by"]: row["key"]}  # one level: its one key
    assert set(doc["total"]) == ROW_KEYS - {"key"}
    return doc


def test_spend_json_by_model(cli: Any, db_url: str, sample: None) -> None:
    doc = spend_json(cli, db_url, "--from", "2026-03-01", "--to", "2026-03-31")
    assert (doc["by"], doc["from"], doc["to"]) == ("model", "2026-03-01", "2026-03-31")
    assert doc["rows"] == [
        {
            "key": "claude",
            "turns": 1,
            "input_tokens": 100,
            "output_tokens": 40,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "cost_usd": 2.0,
            "estimated_usd": 2.0,
            "unpriced_turns": 0,
        },
        {
            "key": "gpt-4o-mini",
            "turns": 2,
            "input_tokens": 200,
            "output_tokens": 80,
            "cache_read_tokens": 90,
            "cache_write_tokens": 0,
            "cost_usd": 0.75,
            "estimated_usd": 0.5,
            "unpriced_turns": 0,
        },
        {
            "key": "mystery-0613",
            "turns": 1,
            "input_tokens": 100,
            "output_tokens": 40,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "cost_usd": None,
            "estimated_usd": 0.0,
            "unpriced_turns": 1,
        },
    ]
    assert doc["total"] == {
        "turns": 4,
        "input_tokens": 400,
        "output_tokens": 160,
        "cache_read_tokens": 90,
        "cache_write_tokens": 0,
        "cost_usd": 2.75,
        "estimated_usd": 2.5,
        "unpriced_turns": 1,
    }


def test_spend_by_day_and_month_across_a_month_boundary(
    cli: Any, db_url: str, sample: None
) -> None:
    days = spend_json(cli, db_url, "--by", "day", "--from", "2026-03-31", "--to", "2026-04-01")
    assert [(r["key"], r["cost_usd"]) for r in days["rows"]] == [
        ("2026-03-31", 2.0),
        ("2026-04-01", 4.0),
    ]
    months = spend_json(cli, db_url, "--by", "month", "--from", "2026-03-01", "--to", "2026-04-30")
    assert [(r["key"], r["turns"]) for r in months["rows"]] == [("2026-03", 4), ("2026-04", 1)]
    assert months["total"]["turns"] == 5


def test_spend_provider_cost_only(cli: Any, db_url: str, sample: None) -> None:
    doc = spend_json(
        cli, db_url, "--from", "2026-03-10", "--to", "2026-03-10", "--provider-cost-only"
    )
    rows = {r["key"]: r for r in doc["rows"]}
    assert (rows["gpt-4o-mini"]["cost_usd"], rows["gpt-4o-mini"]["estimated_usd"]) == (0.25, 0)
    assert rows["mystery-0613"]["unpriced_turns"] == 1
    assert doc["total"]["cost_usd"] == 0.25 and doc["total"]["estimated_usd"] == 0


def test_spend_filters(cli: Any, db_url: str, sample: None) -> None:
    window = ("--from", "2026-03-01", "--to", "2026-04-30")
    bob = spend_json(cli, db_url, "--by", "actor", "--actor", "bob", *window)
    assert [r["key"] for r in bob["rows"]] == ["bob"]
    claude = spend_json(cli, db_url, "--by", "day", "--model", "claude", *window)
    assert [r["key"] for r in claude["rows"]] == ["2026-03-31", "2026-04-01"]
    none = spend_json(cli, db_url, "--tenant", "globex", *window)
    assert none["rows"] == [] and none["total"]["turns"] == 0 and none["total"]["cost_usd"] is None


def test_spend_default_window_is_the_current_month_to_date(
    cli: Any, db_url: str, engine: Any
) -> None:
    now = SystemClock().now_ms()
    today = datetime.fromtimestamp(now / 1000, tz=UTC).date()
    insert(engine, {"at": now - 1000, "cost": 1.0}, {"at": now - 40 * 86_400_000, "cost": 9.0})
    doc = spend_json(cli, db_url)
    # month to date, at least 7 days (issue 28: on the 1st it was a one-day report)
    start = min(today.replace(day=1), today - timedelta(days=6))
    assert doc["from"] == start.isoformat()
    assert doc["to"] == today.isoformat()
    assert doc["window"] == ("month" if start.day == 1 else "7d")
    assert doc["total"]["cost_usd"] == 1.0


def test_spend_csv(cli: Any, db_url: str, sample: None) -> None:
    r = cli("spend", "--from", "2026-03-01", "--to", "2026-03-31", "--db", db_url, "--csv")
    assert r.exit_code == 0, r.stderr
    lines = list(csv.reader(io.StringIO(r.stdout)))
    assert lines[0] == [
        "key",
        "turns",
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "cost_usd",
        "estimated_usd",
        "unpriced_turns",
    ]
    assert [line[0] for line in lines[1:]] == ["claude", "gpt-4o-mini", "mystery-0613", "TOTAL"]
    assert lines[3][6] == ""  # unknown cost is empty, never 0
    assert lines[-1][1] == "4" and float(lines[-1][6]) == 2.75


def test_spend_table_highlights_unpriced_models(cli: Any, db_url: str, sample: None) -> None:
    r = cli("spend", "--by", "actor", "--from", "2026-03-01", "--to", "2026-03-31", "--db", db_url)
    assert r.exit_code == 0, r.stderr
    out = r.stdout
    assert "TOTAL" in out and "alice" in out and "bob" in out
    assert "$2.7500" in out
    notes = [line for line in out.splitlines() if line.startswith("unpriced:")]
    assert len(notes) == 1
    assert "mystery-0613" in notes[0] and "1 turn" in notes[0]
    assert "agora prices seed --missing" in notes[0]
    assert "agora prices set mystery-0613" in notes[0]


def test_spend_chart_is_a_time_series(cli: Any, db_url: str, sample: None) -> None:
    r = cli(
        "spend",
        "--by",
        "day",
        "--from",
        "2026-03-09",
        "--to",
        "2026-03-12",
        "--chart",
        "--db",
        db_url,
    )
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    days = [line.split()[0] for line in lines if line[:4] == "2026"]
    assert days == ["2026-03-09", "2026-03-10", "2026-03-11", "2026-03-12"]  # empty days too
    bar_line = next(line for line in lines if line.startswith("2026-03-10"))
    assert "█" in bar_line and "$0.7500" in bar_line and "+1 unpriced" in bar_line
    by_model = cli("spend", "--from", "2026-03-01", "--to", "2026-03-31", "--chart", "--db", db_url)
    assert by_model.exit_code == 0 and "claude" in by_model.stdout and "█" in by_model.stdout


@pytest.mark.parametrize(
    "args",
    [
        ("--from", "2026-02-30"),
        ("--from", "03/01/2026"),
        ("--to", "2026-3-1"),
        ("--from", "2026-03-05", "--to", "2026-03-01"),
        ("--by", "year"),
        ("--by", "model,model"),
        ("--by", "day,week"),
        ("--by", "model,actor,tenant"),
        ("--last", "7y"),
        ("--last", "0d"),
        ("--last", "7d", "--from", "2026-03-01"),
        ("--from", "2026-13"),
        ("--order", "random"),
        ("--json", "--csv"),
    ],
)
def test_spend_bad_input_is_exit_2(cli: Any, db_url: str, args: tuple[str, ...]) -> None:
    r = cli("spend", *args, "--db", db_url)
    assert r.exit_code == 2
    assert no_data(r)
    assert r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1


def test_quota_json_example_of_the_spec(cli: Any, db_url: str, engine: Any) -> None:
    insert(
        engine,
        {"at": MAR10, "inp": 100, "out": 40, "cache_read": 90, "cost": 0.5},
        {"at": MAR10 + 60_000, "inp": 10, "out": 5, "cost": None},
    )
    r = cli(
        "quota",
        "--actor",
        "alice",
        "--at",
        "2026-03-10T12:00:00",
        "--day-tokens",
        "1000",
        "--db",
        db_url,
        "--json",
    )
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    # cli.md's keys, exactly as before; budgets add keys beside them (state, remaining, …).
    assert set(doc) == {"actor", "at", "day", "month", "exhausted", "warning", "notes"}
    assert doc["notes"] == [] and doc["warning"] is False
    assert set(doc["day"]) >= WINDOW_KEYS and set(doc["month"]) >= WINDOW_KEYS
    assert doc["day"]["state"] == "ok" and doc["day"]["percent_used"] == 15.5
    assert doc["day"]["remaining"] == {"tokens": 845, "usd": None}
    assert doc["actor"] == "alice" and doc["at"] == "2026-03-10T12:00:00.000Z"
    assert {k: doc["day"][k] for k in WINDOW_KEYS} == {
        "from": "2026-03-10T00:00:00.000Z",
        "to": "2026-03-10T23:59:59.999Z",
        "tokens": 155,
        "usd": 0.5,
        "limits": {"tokens": 1000, "usd": None},
        "exhausted": False,
    }
    assert (doc["month"]["from"], doc["month"]["to"]) == (
        "2026-03-01T00:00:00.000Z",
        "2026-03-31T23:59:59.999Z",
    )
    assert doc["month"]["tokens"] == 155 and doc["exhausted"] is False
    other = cli(
        "quota", "--actor", "alice", "--at", "2026-03-11T00:00:00Z", "--db", db_url, "--json"
    )
    assert other.exit_code == 0 and other.json()["day"]["tokens"] == 0


def test_quota_exit_1_when_a_limit_is_reached(cli: Any, db_url: str, engine: Any) -> None:
    insert(engine, {"at": MAR10, "inp": 100, "out": 55, "cost": 0.5})
    base = ("quota", "--actor", "alice", "--at", "2026-03-10T12:00:00Z", "--db", db_url)
    hit = cli(*base, "--day-tokens", "155", "--json")
    assert hit.exit_code == 1
    doc = hit.json()
    assert doc["exhausted"] is True and doc["day"]["exhausted"] is True
    assert doc["month"]["exhausted"] is False
    assert cli(*base, "--day-tokens", "156", "--json").exit_code == 0
    assert cli(*base, "--month-usd", "0.5", "--json").json()["month"]["exhausted"] is True
    table = cli(*base, "--month-usd", "0.5")
    assert table.exit_code == 1 and "EXHAUSTED" in table.stdout
    ok = cli(*base, "--month-usd", "5")
    assert ok.exit_code == 0 and "EXHAUSTED" not in ok.stdout


def test_quota_provider_cost_only(cli: Any, db_url: str, engine: Any) -> None:
    insert(
        engine,
        {"at": MAR10, "cost": 0.5, "source": "estimate"},
        {"at": MAR10 + 1, "cost": 0.25, "source": "provider"},
    )
    base = ("quota", "--actor", "alice", "--at", "2026-03-10T12:00:00Z", "--db", db_url, "--json")
    assert cli(*base).json()["day"]["usd"] == 0.75
    assert cli(*base, "--provider-cost-only").json()["day"]["usd"] == 0.25


@pytest.mark.parametrize(
    "args",
    [
        ("--at", "yesterday"),
        ("--day-tokens", "-5"),
        ("--month-usd", "-1"),
    ],
)
def test_quota_bad_input_is_exit_2(cli: Any, db_url: str, args: tuple[str, ...]) -> None:
    r = cli("quota", "--actor", "alice", *args, "--db", db_url, "--json")
    assert r.exit_code == 2
    assert no_data(r)
    assert r.stderr.startswith("error: ")


def test_quota_needs_an_actor(cli: Any, db_url: str) -> None:
    r = cli("quota", "--db", db_url)
    assert r.exit_code == 2 and no_data(r)


@pytest.mark.slow
def test_spend_through_the_installed_command(db_url: str, sample: None) -> None:
    r = run_agora(
        "spend",
        "--by",
        "month",
        "--from",
        "2026-03-01",
        "--to",
        "2026-04-30",
        "--db",
        db_url,
        "--json",
    )
    assert r.exit_code == 0, r.stderr
    assert [row["key"] for row in r.json()["rows"]] == ["2026-03", "2026-04"]


# --- agora spend fold (issue 16) --------------------------------------------------------------


def fold_json(cli: Any, db_url: str, *args: str) -> dict[str, Any]:
    r = cli("spend", "fold", *args, "--db", db_url, "--json")
    assert r.exit_code == 0, r.stderr
    return dict(r.json())


def test_spend_fold_then_reports_read_the_fold_and_equal_raw(
    cli: Any, db_url: str, engine: Any, sample: None
) -> None:
    window = ("--from", "2026-03-01", "--to", "2026-04-30")

    def report(*args: str) -> dict[str, Any]:
        r = cli("spend", *window, *args, "--db", db_url, "--json")
        assert r.exit_code == 0, r.stderr
        return dict(r.json())

    assert report()["folded_days"] == 0
    doc = fold_json(cli, db_url, "--through", "2026-04-01")
    assert doc == {
        "folded_days": 23,  # 10 March (the ledger's first day) to 1 April, empty days too
        "refolded_days": 0,
        "skipped_days": 0,
        "unfoldable_days": 0,
        "rows": 5,
        "through": "2026-04-01",
    }
    for by in ("model", "actor", "tenant", "day,model", "month,actor", "week"):
        folded, raw = report("--by", by), report("--by", by, "--raw")
        assert (folded.pop("folded_days"), raw.pop("folded_days")) == (23, 0)
        assert folded == raw
    assert fold_json(cli, db_url, "--through", "2026-04-01")["folded_days"] == 0  # idempotent
    assert fold_json(cli, db_url, "--verify") == {"days_checked": 23, "mismatched": []}
    # A late row from another writer for a folded day: --verify finds it, fold mends it.
    insert(engine, {"at": MAR10 + 5, "model": "late", "cost": 1.0})
    stale = report()
    assert not any(r["key"] == "late" for r in stale["rows"])  # what --verify is for
    checked = fold_json(cli, db_url, "--verify", "2026-03-01..2026-03-31")
    assert checked == {"days_checked": 22, "mismatched": ["2026-03-10"]}
    assert report()["folded_days"] == 22  # the dirty day is read raw at once
    mended = fold_json(cli, db_url, "--through", "2026-04-01")
    assert (mended["folded_days"], mended["refolded_days"]) == (1, 1)
    assert (
        fold_json(cli, db_url, "--verify", "--days", "2026-03-01..2026-04-30")["mismatched"] == []
    )
    folded, raw = report(), report("--raw")
    assert (folded.pop("folded_days"), raw.pop("folded_days")) == (23, 0)
    assert folded == raw and any(r["key"] == "late" for r in folded["rows"])


@pytest.mark.parametrize(
    "args",
    [
        ("2026-03-01..2026-03-31",),  # a range without --verify
        ("--grace", "8d"),
        ("--grace", "soon"),
        ("--refold", "2026-03-31..2026-03-01"),
        ("--refold", "2026-03-01"),
        ("--verify", "--through", "2026-03-01"),
        ("--through", "2026-02-30"),
        ("--verify", "2026-03-01..2026-03-02", "--days", "2026-03-01..2026-03-05"),
    ],
)
def test_spend_fold_refuses_bad_input_before_writing(
    cli: Any, db_url: str, engine: Any, sample: None, args: tuple[str, ...]
) -> None:
    from agora_cli.store._schema import usage_fold

    r = cli("spend", "fold", *args, "--db", db_url)
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1
    with engine.connect() as conn:
        assert conn.execute(usage_fold.select()).first() is None


def test_the_optional_rollup_branch_through_the_cli(cli: Any, empty_url: str) -> None:
    """`db upgrade rollup@head` adds the per-model rollup beside the spec's schema (the main
    chain's head and `db status` tables stay the spec's); fold writes it, reports equal raw."""
    from agora_cli.store._engine import open_engine

    sql = cli("db", "upgrade", "rollup@head", "--sql", "--db", empty_url)
    assert sql.exit_code == 0, sql.stderr
    assert "CREATE TABLE agent_usage_model_daily" in sql.stdout
    early = cli("db", "upgrade", "rollup@head", "--db", empty_url)
    assert early.exit_code == 2 and "run agora db upgrade first" in early.stderr
    assert cli("db", "upgrade", "--db", empty_url).exit_code == 0
    up = cli("db", "upgrade", "rollup@head", "--db", empty_url)
    assert up.exit_code == 0, up.stderr
    assert up.stdout.strip() == "Applied the rollup branch (m001)."
    again = cli("db", "upgrade", "rollup@head", "--db", empty_url, "--json")
    assert again.json() == {"from": "m001", "to": "m001", "applied": []}
    status = cli("db", "status", "--db", empty_url, "--json").json()
    assert status["revision"] == status["head"] != "m001"
    assert status["branches"] == ["rollup"] and status["schema_current"] is True
    assert "agent_usage_model_daily" not in status["tables"]
    engine = open_engine(empty_url)
    insert(
        engine,
        {"at": MAR10, "model": "gpt-4o-mini", "cost": 0.5},
        {"at": MAR10 + 1, "model": "mystery-0613", "cost": None, "actor": "bob"},
        {"at": parse_instant("2026-03-31T23:59:59.999Z"), "model": "claude", "cost": 2.0},
        {"at": parse_instant("2026-04-01T00:00:00Z"), "model": "claude", "cost": 4.0},
    )
    assert fold_json(cli, empty_url, "--through", "2026-04-01")["rows"] == 4
    with engine.connect() as conn:
        rolled = conn.exec_driver_sql("SELECT SUM(turns) FROM agent_usage_model_daily").scalar()
    engine.dispose()
    assert rolled == 4
    for by in ("model", "day", "month,model", "actor"):
        args = ("spend", "--from", "2026-03-01", "--to", "2026-04-30", "--by", by)
        folded = cli(*args, "--db", empty_url, "--json").json()
        raw = cli(*args, "--raw", "--db", empty_url, "--json").json()
        assert (folded.pop("folded_days"), raw.pop("folded_days")) == (23, 0)
        assert folded == raw, by
