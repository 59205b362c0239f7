"""Issue 25, findings 2-4: money is finite, ``--verify`` sees swaps, identities stay apart.

Through the real CLI on every dialect. A non-finite cost can only be written around agora
(PostgreSQL takes ``'NaN'``/``'Infinity'``, SQLite ``1e999``; MariaDB's DOUBLE refuses both, so
there it is shown that agora's own writes refuse them). Identities that differ only by trailing
spaces merge under MySQL/MariaDB's PAD SPACE; elsewhere the same test shows nothing regressed.
Each test failed on main before its fix.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from helpers import run_cli
from sqlalchemy import text

from agora_cli.store._clock import parse_instant
from agora_cli.store._errors import InvalidInput
from agora_cli.store._pricing import set_price
from agora_cli.store._schema import thread, token_usage
from agora_cli.store._usage import record_usage

NOW = parse_instant("2026-03-10T12:00:00Z")
DAY = "2026-03-10"
AT = "2026-03-10T20:00:00Z"
NON_FINITE = re.compile(r"\bnan\b|\binf", re.IGNORECASE)
WINDOW = ("--from", DAY, "--to", DAY)


def _json(*args: str, code: int = 0) -> Any:
    result = run_cli(*args, "--json")
    assert result.exit_code == code, result.stdout + result.stderr
    return json.loads(result.stdout)


def _thread(engine: Any, thread_id: str, tenant: str | None) -> None:
    with engine.begin() as conn:
        conn.execute(
            thread.insert().values(
                id=thread_id,
                actor_ref="alice",
                tenant_ref=tenant,
                title="",
                created_at=0,
                updated_at=0,
            )
        )


def _row(engine: Any, row_id: str, **over: Any) -> None:
    values: dict[str, Any] = {
        "id": row_id,
        "thread_id": "t1",
        "actor_ref": "alice",
        "tenant_ref": "acme",
        "model_id": "gpt-4o-mini",
        "purpose": "chat",
        "input_tokens": 100,
        "output_tokens": 40,
        "cache_read_tokens": 10,
        "cache_write_tokens": 5,
        "cost_usd": 0.5,
        "cost_source": "estimate",
        "created_at": NOW,
    }
    values.update(over)
    with engine.begin() as conn:
        conn.execute(token_usage.insert().values(**values))


def _poison(engine: Any, dialect: str, row_id: str, value: str) -> None:
    """Write a non-finite cost as another writer can: ``nan``, ``inf`` or ``-inf``."""
    literal = {
        "postgresql": {"nan": "'NaN'", "inf": "'Infinity'", "-inf": "'-Infinity'"},
        "sqlite": {"nan": "1e999", "inf": "1e999", "-inf": "-1e999"},  # SQLite keeps no NaN
    }[dialect][value]
    with engine.begin() as conn:
        conn.execute(
            text(f"UPDATE agent_token_usage SET cost_usd = {literal} WHERE id = :id"),
            {"id": row_id},
        )


# --- 2. non-finite money ---------------------------------------------------------------------


def test_a_non_finite_cost_is_unpriced_and_never_keeps_a_budget_ok(
    engine: Any, db_url: str, dialect: str
) -> None:
    if dialect == "mysql":
        pytest.skip("MySQL/MariaDB's DOUBLE refuses non-finite values (the write test covers it)")
    _thread(engine, "t1", "acme")
    _row(engine, "u1", cost_usd=2.0)
    _row(engine, "u2", created_at=NOW + 1)
    _row(engine, "u3", created_at=NOW + 2)
    _poison(engine, dialect, "u2", "nan")
    _poison(engine, dialect, "u3", "inf")
    args = ("budgets", "set", "--tenant", "acme", "--period", "day", "--usd", "1", "--by", "ops")
    assert run_cli(*args, "--db", db_url).exit_code == 0

    def check() -> None:
        doc = _json("quota", "--tenant", "acme", "--at", AT, "--db", db_url, code=1)
        day = doc["day"]
        assert (day["state"], day["usd"], day["unpriced_turns"]) == ("exhausted", 2.0, 2)
        quota = run_cli("quota", "--all", "--at", AT, "--db", db_url)
        assert quota.exit_code == 1 and "EXHAUSTED" in quota.stdout, quota.stderr
        assert "2 turn(s) in these windows have no known cost" in quota.stderr
        assert not NON_FINITE.search(quota.stdout)
        for by in ("tenant", "actor", "model", "day"):
            table = run_cli("spend", "--by", by, *WINDOW, "--db", db_url)
            assert table.exit_code == 0, table.stderr
            assert not NON_FINITE.search(table.stdout)
            assert "unpriced" in table.stdout + table.stderr
            total = _json("spend", "--by", by, *WINDOW, "--db", db_url)["total"]
            assert (total["cost_usd"], total["unpriced_turns"]) == (2.0, 2)

    check()
    assert run_cli("spend", "fold", "--through", DAY, "--db", db_url).exit_code == 0
    check()  # the fold agrees: the day is read from agent_usage_daily
    assert _json("spend", "--by", "tenant", *WINDOW, "--db", db_url)["folded_days"] == 1
    assert _json("spend", "fold", "--verify", "--db", db_url)["mismatched"] == []

    for command in (("threads", "list"), ("threads", "show", "t1")):
        shown = run_cli(*command, "--db", db_url)
        assert shown.exit_code == 0, shown.stderr
        assert "$2.0000" in shown.stdout and not NON_FINITE.search(shown.stdout)


def test_a_run_with_a_non_finite_cost_shows_no_nan(engine: Any, db_url: str, dialect: str) -> None:
    if dialect == "mysql":
        pytest.skip("MySQL/MariaDB's DOUBLE refuses non-finite values")
    _thread(engine, "t1", "acme")
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO agent_run (id, thread_id, actor_ref, status, started_at, "
                "finished_at, step_count, input_tokens, output_tokens, durable) "
                "VALUES ('r1', 't1', 'alice', 'completed', :at, :at, 1, 100, 40, 0)"
            ),
            {"at": NOW},
        )
    _row(engine, "u1", run_id="r1", cost_usd=2.0)
    _row(engine, "u2", run_id="r1", created_at=NOW + 1)
    _poison(engine, dialect, "u2", "inf")
    with engine.begin() as conn:
        bad = "'NaN'" if dialect == "postgresql" else "1e999"
        conn.execute(text(f"UPDATE agent_run SET cost_usd = {bad} WHERE id = 'r1'"))
    for command in (("runs", "list"), ("runs", "show", "r1")):
        shown = run_cli(*command, "--db", db_url)
        assert shown.exit_code == 0, shown.stderr
        assert "$2.0000 +1 unpriced" in shown.stdout, shown.stdout
        assert not NON_FINITE.search(shown.stdout)
    doc = _json("runs", "show", "r1", "--db", db_url)
    assert (doc["run"]["cost_usd"], doc["run"]["unpriced_turns"]) == (2.0, 1)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999"])
def test_agora_refuses_to_write_a_non_finite_cost_or_price(
    engine: Any, db_url: str, value: str
) -> None:
    result = run_cli(
        "prices", "set", "gpt-4o-mini", "--input", value, "--output", "1", "--db", db_url
    )
    assert result.exit_code == 2, result.stdout + result.stderr
    assert result.stderr.startswith("error:") and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_the_store_refuses_non_finite_costs_and_prices(engine: Any, value: float) -> None:
    _thread(engine, "t1", "acme")
    writes = {
        "provider_cost_usd": lambda conn: record_usage(
            conn,
            thread_id="t1",
            actor_ref="alice",
            model_id="gpt-4o-mini",
            purpose="chat",
            input_tokens=1,
            output_tokens=1,
            provider_cost_usd=value,
        ),
        "input_per_1m": lambda conn: set_price(
            conn, "gpt-4o-mini", input_per_1m=value, output_per_1m=1.0
        ),
    }
    for param, write in writes.items():
        with engine.begin() as conn, pytest.raises(InvalidInput) as raised:
            write(conn)
        assert raised.value.exit_code == 2 and raised.value.param == param
    with engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM agent_token_usage")).scalar() == 0
        assert conn.execute(text("SELECT COUNT(*) FROM agent_model_pricing")).scalar() == 0


# --- 3. --verify compares every group and measure --------------------------------------------


_EDITS = {
    "a row moved to another actor and tenant": (
        "UPDATE agent_token_usage SET actor_ref = 'mallory', tenant_ref = 'globex' WHERE id = 'u1'"
    ),
    "input and output swapped": (
        "UPDATE agent_token_usage SET input_tokens = 40, output_tokens = 100 WHERE id = 'u1'"
    ),
    "cache tokens edited": "UPDATE agent_token_usage SET cache_read_tokens = 90 WHERE id = 'u1'",
    "a row moved to another actor": (
        "UPDATE agent_token_usage SET actor_ref = 'mallory' WHERE id = 'u1'"
    ),
    "a row's cost source changed": (
        "UPDATE agent_token_usage SET cost_source = 'provider' WHERE id = 'u1'"
    ),
}


@pytest.mark.parametrize("edit", list(_EDITS))
def test_verify_finds_a_change_that_keeps_the_days_totals(
    engine: Any, db_url: str, edit: str
) -> None:
    _thread(engine, "t1", "acme")
    _row(engine, "u1")
    _row(engine, "u2", created_at=NOW + 1)
    assert run_cli("spend", "fold", "--through", DAY, "--db", db_url).exit_code == 0
    assert _json("spend", "fold", "--verify", "--db", db_url)["mismatched"] == []
    with engine.begin() as conn:  # another writer, behind agora's back: the fold is not told
        conn.execute(text(_EDITS[edit]))
    raw = {by: _json("spend", "--by", by, *WINDOW, "--raw", "--db", db_url) for by in BYS}
    assert _json("spend", "fold", "--verify", "--db", db_url)["mismatched"] == [DAY]
    for by in BYS:  # dirty: read raw now, then refolded to the same figures
        assert _json("spend", "--by", by, *WINDOW, "--db", db_url)["rows"] == raw[by]["rows"]
    assert run_cli("spend", "fold", "--through", DAY, "--db", db_url).exit_code == 0
    for by in BYS:
        folded = _json("spend", "--by", by, *WINDOW, "--db", db_url)
        assert folded["folded_days"] == 1 and folded["rows"] == raw[by]["rows"]
    assert _json("spend", "fold", "--verify", "--db", db_url)["mismatched"] == []


BYS = ("actor", "tenant", "model")


# --- 4. identities that differ only by trailing spaces stay apart ----------------------------


def _padded_ledger(engine: Any) -> None:
    """Rows of ``alice``/``acme``/``gpt-4o-mini`` and of each with a trailing space, and tool
    calls of ``lookup_order`` and ``lookup_order ``."""
    _thread(engine, "t1", "acme")
    _thread(engine, "t2", "acme ")
    _row(engine, "u1", input_tokens=100, cost_usd=1.0)
    _row(engine, "u2", actor_ref="alice ", input_tokens=200, cost_usd=2.0, created_at=NOW + 1)
    _row(engine, "u3", tenant_ref="acme ", input_tokens=300, cost_usd=4.0, created_at=NOW + 2)
    _row(engine, "u4", model_id="gpt-4o-mini ", input_tokens=400, cost_usd=8.0, created_at=NOW + 3)
    # upstream's row: no tenant of its own, its thread's is "acme "
    _row(engine, "u5", thread_id="t2", tenant_ref=None, input_tokens=500, cost_usd=16.0,
         created_at=NOW + 4)  # fmt: skip
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO agent_message (id, thread_id, seq, role, content, created_at) "
                "VALUES ('m1', 't1', 1, 'assistant', '', :at)"
            ),
            {"at": NOW},
        )
        for i, (name, status) in enumerate(
            [("lookup_order", "executed"), ("lookup_order ", "failed"), ("lookup_order ", "failed")]
        ):
            conn.execute(
                text(
                    "INSERT INTO agent_tool_call (id, message_id, tool_name, tool_type, status, "
                    "created_at, executed_at) VALUES (:id, 'm1', :name, 'read', :status, :at, :at)"
                ),
                {"id": f"c{i}", "name": name, "status": status, "at": NOW + i},
            )


PADDED = {
    "actor": {"alice": 100 + 300 + 400 + 500, "alice ": 200},
    "tenant": {"acme": 100 + 200 + 400, "acme ": 300 + 500},
    "model": {"gpt-4o-mini": 100 + 200 + 300 + 500, "gpt-4o-mini ": 400},
}


def test_identities_differing_by_trailing_spaces_are_reported_apart(
    engine: Any, db_url: str
) -> None:
    _padded_ledger(engine)

    def check(*extra: str) -> None:
        for by, expected in PADDED.items():
            doc = _json("spend", "--by", by, *WINDOW, "--db", db_url, *extra)
            assert {r["key"]: r["input_tokens"] for r in doc["rows"]} == expected, by
            cells = _json("spend", "--by", f"day,{by}", *WINDOW, "--db", db_url, *extra)
            [period] = cells["rows"]
            assert {r["key"]: r["input_tokens"] for r in period["rows"]} == expected, by
        doc = _json("quota", "--actor", "alice", "--at", AT, "--db", db_url)
        assert doc["day"]["usd"] == 1.0 + 4.0 + 8.0 + 16.0
        doc = _json("quota", "--tenant", "acme ", "--at", AT, "--db", db_url)
        assert doc["day"]["usd"] == 4.0 + 16.0

    check("--raw")
    check()
    fold = _json("spend", "fold", "--through", DAY, "--db", db_url)
    assert fold["folded_days"] + fold["unfoldable_days"] == 1
    check()
    assert _json("spend", "fold", "--verify", "--db", db_url)["mismatched"] == []

    tools = _json("tools", "stats", *WINDOW, "--db", db_url)["tools"]
    got = {t["tool_name"]: (t["calls"], t["succeeded"], t["failed"]) for t in tools}
    assert got == {"lookup_order": (1, 1, 0), "lookup_order ": (2, 0, 2)}
    failures = {t["tool_name"]: t["last_failure"] for t in tools}
    assert failures["lookup_order"] is None and failures["lookup_order "] is not None
