"""`agora budgets`, budget-aware `agora quota` and the spend slices, through the real CLI."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from helpers import no_data
from sqlalchemy import inspect as sa_inspect
from sqlalchemy import text

from agora_cli.store._clock import parse_instant
from agora_cli.store._ddl import revision_statements
from agora_cli.store._engine import open_engine
from agora_cli.store._migrate import VERSION_TABLE, upgrade
from agora_cli.store._provision import check_agent_tables
from agora_cli.store._schema import thread, token_usage

AT = "2026-11-15T12:00:00Z"
T = parse_instant(AT)


def ledger(engine: Any, *rows: dict[str, Any]) -> None:
    with engine.begin() as conn:
        for tid in {r.get("thread", "t1") for r in rows}:
            conn.execute(
                thread.insert().values(
                    id=tid, actor_ref="alice", title="", created_at=0, updated_at=0
                )
            )
        conn.execute(
            token_usage.insert(),
            [
                {
                    "id": f"u{i}",
                    "thread_id": r.get("thread", "t1"),
                    "actor_ref": r.get("actor", "alice"),
                    "tenant_ref": r.get("tenant", "acme"),
                    "model_id": r.get("model", "m1"),
                    "purpose": "chat",
                    "input_tokens": r.get("inp", 100),
                    "output_tokens": r.get("out", 0),
                    "cache_read_tokens": None,
                    "cache_write_tokens": None,
                    "cost_usd": r.get("cost", 1.0),
                    "cost_source": None if r.get("cost", 1.0) is None else "estimate",
                    "created_at": r.get("at", T),
                }
                for i, r in enumerate(rows)
            ],
        )


def test_budgets_set_list_remove(cli: Any, db_url: str) -> None:
    db = ["--db", db_url, "--json"]
    made = cli(
        "budgets",
        "set",
        "--tenant",
        "acme",
        "--period",
        "month",
        "--usd",
        "500",
        "--warn-at",
        "0.8",
        "--note",
        "Q4",
        "--by",
        "ops",
        *db,
    )
    assert made.exit_code == 0, made.stderr
    doc = made.json()
    assert doc["action"] == "inserted"
    assert {k: doc["budget"][k] for k in ("scope_kind", "scope_ref", "period", "limit_usd")} == {
        "scope_kind": "tenant",
        "scope_ref": "acme",
        "period": "month",
        "limit_usd": 500.0,
    }
    again = cli(
        "budgets",
        "set",
        "--tenant",
        "acme",
        "--period",
        "month",
        "--usd",
        "600",
        "--by",
        "ops",
        *db,
    )
    assert again.json()["action"] == "updated"
    cli("budgets", "set", "--global", "--period", "day", "--tokens", "1000", "--by", "ops", *db)
    listed = cli("budgets", "list", *db).json()["budgets"]
    assert [(b["scope_kind"], b["period"], b["limit_usd"]) for b in listed] == [
        ("tenant", "month", 600.0),
        ("global", "day", None),
    ]
    table = cli("budgets", "list", "--db", db_url)
    assert table.exit_code == 0 and "tenant acme" in table.stdout
    rows = list(csv.DictReader(io.StringIO(cli("budgets", "list", "--db", db_url, "--csv").stdout)))
    assert len(rows) == 2 and rows[0]["scope_ref"] == "acme"
    gone = cli("budgets", "remove", "--tenant", "acme", *db)
    assert gone.exit_code == 0 and gone.json() == {"removed": 1}
    none = cli("budgets", "remove", "--tenant", "acme", *db)
    assert none.exit_code == 1 and none.json() == {"removed": 0}


@pytest.mark.parametrize(
    "args",
    [
        ("--tenant", "acme", "--period", "month", "--by", "ops"),  # no limit
        ("--tenant", "acme", "--period", "month", "--usd", "nan", "--by", "ops"),
        ("--tenant", "acme", "--period", "month", "--usd", "-1", "--by", "ops"),
        ("--tenant", "acme", "--period", "month", "--tokens", "-1", "--by", "ops"),
        ("--tenant", "acme", "--period", "month", "--usd", "1", "--warn-at", "0", "--by", "ops"),
        ("--tenant", "acme", "--period", "month", "--usd", "1", "--warn-at", "1.5", "--by", "o"),
        ("--tenant", "acme", "--period", "year", "--usd", "1", "--by", "ops"),
        ("--tenant", "acme", "--actor", "a", "--period", "day", "--usd", "1", "--by", "ops"),
        ("--period", "day", "--usd", "1", "--by", "ops"),  # no scope
    ],
)
def test_bad_budgets_are_exit_2(cli: Any, db_url: str, args: tuple[str, ...]) -> None:
    result = cli("budgets", "set", *args, "--db", db_url, "--json")
    assert result.exit_code == 2, result.stdout
    assert no_data(result)
    assert cli("budgets", "list", "--db", db_url, "--json").json() == {"budgets": []}


def test_quota_exits_1_when_a_tenant_budget_is_exhausted(
    cli: Any, db_url: str, engine: Any
) -> None:
    ledger(engine, {"tenant": "acme", "cost": 3.0}, {"tenant": "acme", "cost": 2.0})
    base = ["--at", AT, "--db", db_url]
    cli(
        "budgets",
        "set",
        "--tenant",
        "acme",
        "--period",
        "month",
        "--usd",
        "5",
        "--by",
        "o",
        "--db",
        db_url,
    )
    result = cli("quota", "--tenant", "acme", *base, "--json")
    assert result.exit_code == 1
    doc = result.json()
    assert doc["tenant"] == "acme" and doc["exhausted"] is True
    month = doc["month"]
    assert (month["usd"], month["limits"]["usd"], month["state"]) == (5.0, 5.0, "exhausted")
    assert month["percent_used"] == 100.0 and month["remaining"]["usd"] == 0.0
    assert doc["day"]["state"] == "ok" and doc["day"]["limits"] == {"tokens": None, "usd": None}
    human = cli("quota", "--tenant", "acme", *base)
    assert human.exit_code == 1 and "EXHAUSTED" in human.stdout and "█" in human.stdout


def test_warnings_fail_only_when_asked(cli: Any, db_url: str, engine: Any) -> None:
    ledger(engine, {"actor": "alice", "inp": 85})
    base = ["--at", AT, "--db", db_url]
    cli(
        "budgets",
        "set",
        "--actor",
        "alice",
        "--period",
        "week",
        "--tokens",
        "100",
        "--by",
        "o",
        "--db",
        db_url,
    )
    calm = cli("quota", "--actor", "alice", *base, "--json")
    assert calm.exit_code == 0 and calm.json()["week"]["state"] == "warning"
    assert calm.json()["warning"] is True
    strict = cli("quota", "--actor", "alice", *base, "--fail-on-warning")
    assert strict.exit_code == 1 and "WARNING" in strict.stdout
    # A limit given on the command line overrides the saved one, for this run only.
    override = cli("quota", "--actor", "alice", "--week-tokens", "1000", *base, "--json")
    assert override.json()["week"]["state"] == "ok"
    assert override.json()["week"]["limits"]["tokens"] == 1000


def test_quota_all_checks_every_saved_budget(cli: Any, db_url: str, engine: Any) -> None:
    ledger(engine, {"actor": "alice", "tenant": "acme", "cost": 1.0})
    for args in (
        ("--actor", "alice", "--period", "day", "--usd", "10"),
        ("--tenant", "acme", "--period", "month", "--usd", "1"),
        ("--global", "--period", "week", "--tokens", "1000000"),
    ):
        assert cli("budgets", "set", *args, "--by", "o", "--db", db_url).exit_code == 0
    result = cli("quota", "--all", "--at", AT, "--db", db_url, "--json")
    assert result.exit_code == 1
    doc = result.json()
    states = {(b["scope_kind"], b["period"]): b["state"] for b in doc["budgets"]}
    assert states == {
        ("actor", "day"): "ok",
        ("tenant", "month"): "exhausted",
        ("global", "week"): "ok",
    }
    lines = list(
        csv.DictReader(
            io.StringIO(cli("quota", "--all", "--at", AT, "--db", db_url, "--csv").stdout)
        )
    )
    assert [line["state"] for line in lines] == ["ok", "exhausted", "ok"]
    mixed = cli("quota", "--all", "--day-usd", "1", "--db", db_url)
    assert mixed.exit_code == 2
    both = cli("quota", "--actor", "a", "--tenant", "t", "--db", db_url)
    assert both.exit_code == 2


def test_spend_two_level_nests_cells_under_periods(cli: Any, db_url: str, engine: Any) -> None:
    day = 86_400_000
    ledger(
        engine,
        {"at": T, "model": "m1", "cost": 1.0},
        {"at": T + 1, "model": "m2", "cost": None},
        {"at": T + day, "model": "m1", "cost": 2.0, "thread": "t2"},
    )
    window = ["--from", "2026-11", "--to", "2026-11", "--db", db_url]
    doc = cli("spend", "--by", "day,model", *window, "--json").json()
    assert doc["by"] == "day,model" and doc["from"] == "2026-11-01" and doc["to"] == "2026-11-30"
    assert [p["key"] for p in doc["rows"]] == ["2026-11-15", "2026-11-16"]
    first = doc["rows"][0]
    assert [r["key"] for r in first["rows"]] == ["m1", "m2"]
    assert first["total"]["turns"] == 2 and first["total"]["unpriced_turns"] == 1
    assert first["rows"][1]["cost_usd"] is None
    assert doc["total"]["cost_usd"] == 3.0 and doc["total"]["turns"] == 3
    flat = cli("spend", "--by", "model", *window, "--json").json()
    assert flat["total"] == doc["total"]
    weeks = cli("spend", "--by", "week", *window, "--json").json()
    assert [r["key"] for r in weeks["rows"]] == ["2026-11-09", "2026-11-16"]  # Mondays
    threads = cli("spend", "--by", "thread", "--order", "key", *window, "--json").json()
    assert [r["key"] for r in threads["rows"]] == ["t1", "t2"]
    by_tokens = cli("spend", "--by", "model", "--order", "tokens", *window, "--json").json()
    assert [r["key"] for r in by_tokens["rows"]] == ["m1", "m2"]
    lines = list(
        csv.DictReader(io.StringIO(cli("spend", "--by", "week,model", *window, "--csv").stdout))
    )
    assert [(line["week"], line["model"]) for line in lines] == [
        ("2026-11-09", "m1"),
        ("2026-11-09", "m2"),
        ("2026-11-09", "TOTAL"),
        ("2026-11-16", "m1"),
        ("2026-11-16", "TOTAL"),
        ("TOTAL", "TOTAL"),
    ]
    chart = cli("spend", "--by", "day,model", *window, "--chart")
    assert chart.exit_code == 0 and "legend:" in chart.stdout and "█" in chart.stdout
    table = cli("spend", "--by", "day,model", *window)
    assert table.exit_code == 0 and "2026-11-15 total" in table.stdout


def test_costs_show_four_decimals_or_what_a_tiny_amount_needs() -> None:
    from agora_cli.cli.output import money_text

    assert money_text(1234.5) == "$1,234.5000"
    assert money_text(0.00012) == "$0.0001"
    assert money_text(0.0000321) == "$0.000032"
    assert money_text(0.0) == "$0.0000" and money_text(-0.0) == "$0.0000"
    assert money_text(None) == "unknown" and money_text(float("nan")) == "unknown"


def test_upgrade_from_0003_adds_the_budget_table_and_the_tenant_index(
    empty_url: str, dialect: str
) -> None:
    engine = open_engine(empty_url)
    with engine.begin() as conn:  # a database as agora 0.1 left it at revision 0003
        for revision in ("0001", "0002", "0003"):
            for statement in revision_statements(revision, dialect):
                conn.exec_driver_sql(statement)
        conn.exec_driver_sql(f"CREATE TABLE {VERSION_TABLE} (version_num VARCHAR(32) NOT NULL)")
        conn.execute(text(f"INSERT INTO {VERSION_TABLE} VALUES ('0003')"))
    assert "agent_budget" not in sa_inspect(engine).get_table_names()
    result = upgrade(engine)
    assert result.applied[0] == "0004"
    inspector = sa_inspect(engine)
    assert "agent_budget" in inspector.get_table_names()
    assert "agent_token_usage_tenant_created_idx" in {
        i["name"] for i in inspector.get_indexes("agent_token_usage")
    }
    assert check_agent_tables(engine) == []
    engine.dispose()
