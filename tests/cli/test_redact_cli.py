"""`agora db redact --tool-io` through the real CLI: keyed hashes, exact counts, the KEK required.

On every dialect; on PostgreSQL also as an attacker would run it: a login that is a member of the
app role, under row-level security, holding the other tenant's ids.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import no_data
from sqlalchemy import select, text, update

from agora_cli.store._clock import DAY_MS, ManualClock, SystemClock
from agora_cli.store._engine import open_engine
from agora_cli.store._provision import ensure_agent_tables
from agora_cli.store._redact import redaction_marker
from agora_cli.store._redaction_form import is_redacted
from agora_cli.store._rls import enable_rls
from agora_cli.store._schema import tool_call
from agora_cli.store._sealing import Kek, generate_kek
from agora_cli.store._steps import record_tool_call
from agora_cli.store._threads import append_message, create_thread

KEK_TEXT = generate_kek()
WITH = {"AGORA_KEK": KEK_TEXT, "AGORA_KEK_FILE": None, "AGORA_TENANT": None}
WITHOUT = {"AGORA_KEK": None, "AGORA_KEK_FILE": None, "AGORA_TENANT": None}
ORDER = {"order_id": 7, "amount_usd": 42.5}
FORGED = "sha256:deadbeef SSN 123-45-6789 card 4111111111111111"
OLD = SystemClock().now_ms() - 60 * DAY_MS
KEYS = [
    "kind",
    "older_than",
    "cutoff",
    "tenant",
    "dry_run",
    "matched",
    "redacted",
    "inputs",
    "outputs",
    "errors_trimmed",
    "batches",
    "remaining",
    "tables",
    "values",
]


def seed(engine: Any, tenant: str | None, prefix: str) -> str:
    """One old tool call of ``tenant`` (input ``ORDER``), with a message holding it too."""
    old = ManualClock(OLD)
    with engine.begin() as conn:
        t = create_thread(
            conn, actor_ref="al", tenant_ref=tenant, thread_id=f"{prefix}t", clock=old
        )
        m = append_message(
            conn,
            thread_id=t.id,
            role="assistant",
            content="",
            message_id=f"{prefix}m",
            tool_calls=[{"id": f"{prefix}c", "name": "refund_order", "input": ORDER}],
            clock=old,
        )
        record_tool_call(
            conn,
            message_id=m.id,
            tool_call_id=f"{prefix}c",
            tool_name="refund_order",
            input=ORDER,
            clock=old,
        )
    return f"{prefix}c"


def calls(engine: Any) -> dict[str, dict[str, Any]]:
    with engine.connect() as conn:
        found = conn.execute(select(tool_call)).mappings().all()
        conn.rollback()
    return {r["id"]: dict(r) for r in found}


def test_counts_are_exact_forged_values_are_hashed_and_a_rerun_is_a_no_op(
    cli: Any, engine: Any, db_url: str
) -> None:
    acme = seed(engine, "acme", "a-")
    seed(engine, "globex", "g-")
    with engine.begin() as conn:
        conn.execute(update(tool_call).where(tool_call.c.id == acme).values(output=FORGED))
    before = calls(engine)
    args = ("db", "redact", "--tool-io", "--older-than", "30d", "--db", db_url, "--json")
    dry = cli(*args, "--dry-run", env=WITHOUT)
    assert dry.exit_code == 0, dry.stderr
    assert list(dry.json()) == KEYS
    assert dry.json()["tables"] == {
        "agent_tool_call": {"matched": 2, "redacted": 0, "remaining": 2},
        "agent_message": {"matched": 2, "redacted": 0, "remaining": 2},
        "agent_action_proposal": {"matched": 0, "redacted": 0, "remaining": 0},
        "agent_action_proposal_event": {"matched": 0, "redacted": 0, "remaining": 0},
        "agent_stream_frame": {"matched": 0, "redacted": 0, "remaining": 0},
    }
    done = cli(*args, "--yes", env=WITH)
    assert done.exit_code == 0, done.stderr
    doc = done.json()
    assert (doc["matched"], doc["redacted"], doc["remaining"]) == (4, 4, 0)
    assert (doc["inputs"], doc["outputs"]) == (2, 1)  # the forged "sha256:" output counted
    assert doc["values"] == {
        "agent_tool_call.input": 2,
        "agent_tool_call.output": 1,
        "agent_message.tool_calls": 2,
        "agent_message.tool_results": 0,
        "agent_message.outcome": 0,
        "agent_action_proposal.input": 0,
        "agent_action_proposal.card": 0,
        "agent_action_proposal.result": 0,
        "agent_action_proposal_event.prior_result": 0,
        "agent_stream_frame.frame": 0,
    }
    after = calls(engine)
    kek = Kek.from_text(KEK_TEXT)
    assert after[acme]["output"] == redaction_marker(FORGED, tenant="acme", kek=kek)
    assert after[acme]["input"] == redaction_marker(before[acme]["input"], tenant="acme", kek=kek)
    assert after[acme]["input"] != after["g-c"]["input"]  # equal inputs, two tenants
    again = cli(*args, "--yes", env=WITH).json()
    assert (again["matched"], again["redacted"], again["batches"]) == (0, 0, 0)
    assert calls(engine) == after
    # readers keep working: the tool parts read as the marker string, names and states stay
    shown = cli("threads", "show", "a-t", "--json", "--db", db_url, env=WITHOUT)
    assert shown.exit_code == 0, shown.stderr
    message = shown.json()["messages"][0]
    assert is_redacted(json.dumps(message["payload"]["tool_calls"]))
    assert [c["tool_name"] for c in message["tool_calls"]] == ["refund_order"]
    assert "order_id" not in shown.stdout and "123-45-6789" not in shown.stdout


def test_without_the_kek_it_is_exit_3_and_changes_nothing(
    cli: Any, engine: Any, db_url: str
) -> None:
    seed(engine, "acme", "a-")
    before = calls(engine)
    result = cli(
        "db", "redact", "--tool-io", "--older-than", "30d", "--yes", "--db", db_url, env=WITHOUT
    )
    assert result.exit_code == 3 and no_data(result)
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert "AGORA_KEK" in result.stderr
    assert calls(engine) == before


def test_help_says_keyed_and_has_an_example(cli: Any) -> None:
    result = cli("db", "redact", "--help")
    assert result.exit_code == 0
    assert "HMAC-SHA-256" in result.stdout and "Example: agora db redact" in result.stdout


# --- as the attacker: a login that is a member of the app role, on PostgreSQL -----------------


@pytest.fixture
def pg_member(databases: Any) -> Iterator[tuple[str, str]]:
    """(owner URL, member login URL) of a fresh database under row-level security."""
    databases.require("postgresql")
    url = str(databases.new("postgresql"))
    owner = open_engine(url)
    ensure_agent_tables(owner)
    role = f"agora_app_r_{secrets.token_hex(5)}"
    login = f"agora_login_r_{secrets.token_hex(5)}"
    enable_rls(owner, app_role=role)
    with owner.begin() as conn:
        conn.exec_driver_sql(f'CREATE ROLE "{login}" LOGIN NOSUPERUSER NOBYPASSRLS')
        conn.exec_driver_sql(f'GRANT "{role}" TO "{login}"')
    member = owner.url.set(username=login, password=None)
    try:
        yield url, member.render_as_string(hide_password=False)
    finally:
        with owner.begin() as conn:
            for name in (login, role):
                found = conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": name})
                if found.first():
                    conn.exec_driver_sql(f'DROP OWNED BY "{name}"')
                    conn.exec_driver_sql(f'DROP ROLE "{name}"')
        owner.dispose()


def test_a_tenant_login_redacts_its_own_rows_only(cli: Any, pg_member: tuple[str, str]) -> None:
    owner_url, member_url = pg_member
    owner = open_engine(owner_url)
    try:
        acme, globex = seed(owner, "acme", "a-"), seed(owner, "globex", "g-")
        before = calls(owner)
        args = ("db", "redact", "--tool-io", "--older-than", "30d", "--yes", "--json")
        # The session's tenant alone (no --tenant filter in the SQL): the policies scope it.
        result = cli(*args, "--db", member_url, env={**WITH, "AGORA_TENANT": "acme"})
        assert result.exit_code == 0, result.stderr
        doc = result.json()
        assert (doc["matched"], doc["redacted"], doc["remaining"]) == (2, 2, 0)
        after = calls(owner)
        assert is_redacted(after[acme]["input"]) and after[globex] == before[globex]
        # a rerun in the same session finds nothing: globex's rows are not its to redact
        again = cli(*args, "--db", member_url, env={**WITH, "AGORA_TENANT": "acme"}).json()
        assert (again["matched"], again["redacted"]) == (0, 0)
        assert calls(owner)[globex] == before[globex]
        # a bare SHA-256 of the input is nowhere; the marker depends on the KEK and the tenant
        assert json.dumps(ORDER) not in json.dumps(after[acme])
        wrong = Kek.from_text(generate_kek())
        assert after[acme]["input"] != redaction_marker(
            before[acme]["input"], tenant="acme", kek=wrong
        )
        assert after[acme]["input"] != redaction_marker(
            before[acme]["input"], tenant="globex", kek=Kek.from_text(KEK_TEXT)
        )
    finally:
        owner.dispose()
