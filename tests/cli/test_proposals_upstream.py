"""`agora proposals inbox|show|decide` on a database the upstream runtime wrote (its approvals are
tool calls left pending_approval), beside a proposal made with agora's own command, on every
dialect."""

from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import no_data
from sqlalchemy import select
from upstream import write_upstream

from agora_cli.store._schema import action_proposal, tool_call

ITEM_KEYS = {
    "id",
    "tenant_ref",
    "actor_ref",
    "thread_id",
    "run_id",
    "tool_name",
    "decision",
    "execution_state",
    "created_at",
    "expires_at",
    "decided_by",
    "decided_at",
    "lease_owner",
    "lease_expires_at",
    "attempts",
    "settled_at",
    "error",
    "stuck",
    "kind",
}
T_KEYS = [
    "kind",
    "id",
    "tool_name",
    "tool_type",
    "input",
    "status",
    "thread_id",
    "run_id",
    "message_id",
    "actor_ref",
    "tenant_ref",
    "requested_at",
    "executed_at",
    "executed_by_ref",
    "error",
]


def _iso(ms: int) -> str:
    from agora_cli.store._clock import iso_ms

    return str(iso_ms(ms))


@pytest.fixture
def up(engine: Any, db_url: str, cli: Any, tmp_path: Path) -> Any:
    """Upstream's rows, and one pending proposal agora made in acme's thread (expires in 1h)."""
    now = int(time.time() * 1000)
    written = write_upstream(engine, now=now)
    doc = {
        "run_id": written.runs["acme"],
        "tool_call_id": "agora-call-1",
        "tenant_ref": "acme",
        "actor_ref": "alice",
        "thread_id": written.threads["acme"],
        "tool_name": "refund_order",
        "input": {"order_id": 8},
        "expires_at": _iso(now + 3_600_000),
    }
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    created = cli("proposals", "create", "--file", str(path), "--db", db_url, "--json")
    assert created.exit_code == 0, created.stderr
    written.proposal = created.json()["proposal"]["id"]
    return written


def _globex(up: Any) -> tuple[str, ...]:
    return ("--actor", "bob", "--thread", up.threads["globex"], "--tenant", "globex")


def _inbox(cli: Any, db: str, *args: str) -> list[dict[str, Any]]:
    r = cli("proposals", "inbox", *args, "--db", db, "--json")
    assert r.exit_code == 0, r.stderr
    return list(r.json()["proposals"])


def _tool_call_row(engine: Any, cid: str) -> dict[str, Any]:
    with engine.connect() as conn:
        return dict(conn.execute(select(tool_call).where(tool_call.c.id == cid)).mappings().one())


def test_the_inbox_lists_the_runtimes_approval_beside_the_proposal(
    up: Any, db_url: str, cli: Any
) -> None:
    r = cli("proposals", "inbox", "--db", db_url, "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert set(doc) == {"state", "now", "proposals", "more", "past_expiry", "legacy"}
    assert (doc["more"], doc["past_expiry"], doc["legacy"]) == (False, 0, 0)
    proposal, call = doc["proposals"]
    assert all(set(item) == ITEM_KEYS for item in doc["proposals"])
    assert (proposal["kind"], proposal["id"], proposal["actor_ref"]) == (
        "proposal",
        up.proposal,
        "alice",
    )
    pending = up.tool_calls["pending"]
    assert call == {
        "id": pending,
        "tenant_ref": "globex",
        "actor_ref": "bob",
        "thread_id": up.threads["globex"],
        "run_id": up.runs["globex"],
        "tool_name": "cancel_invoice",
        "decision": "pending",
        "execution_state": None,
        "created_at": _iso(up.now - 600_000 + 6_030),
        "expires_at": None,
        "decided_by": None,
        "decided_at": None,
        "lease_owner": None,
        "lease_expires_at": None,
        "attempts": None,
        "settled_at": None,
        "error": None,
        "stuck": False,
        "kind": "tool_call",
    }
    table = cli("proposals", "inbox", "--db", db_url)
    assert table.exit_code == 0, table.stderr
    lines = table.stdout.splitlines()
    [call_line] = [line for line in lines if "cancel_invoice" in line]
    assert "tool_call" in call_line and "bob" in call_line and "globex" in call_line
    assert "never" in call_line and pending[:12] in call_line
    assert any("proposal" in line and "refund_order" in line for line in lines)
    said = " ".join(table.stderr.split())
    assert "1 of these (kind tool_call) are the runtime's own approvals" in said
    assert "AgentService.approve(runId, toolCallId)" in said and "decide refuses it" in said
    rows = list(
        csv.DictReader(io.StringIO(cli("proposals", "inbox", "--db", db_url, "--csv").stdout))
    )
    assert [(row["id"], row["kind"]) for row in rows] == [
        (up.proposal, "proposal"),
        (pending, "tool_call"),
    ]
    assert set(rows[1]) == ITEM_KEYS and rows[1]["expires_at"] == ""


def test_the_inbox_filters_and_pages_both_kinds(up: Any, db_url: str, cli: Any) -> None:
    def ids(*args: str) -> list[str]:
        return [item["id"] for item in _inbox(cli, db_url, *args)]

    pending = up.tool_calls["pending"]
    assert ids("--tenant", "globex") == [pending]
    assert ids("--tenant", "acme") == [up.proposal]
    assert ids("--actor", "bob") == [pending]
    assert ids("--actor", "alice") == [up.proposal]
    assert ids("--tool", "cancel_invoice") == [pending]
    assert ids("--tool", "update_invoice") == []  # the rejected one is decided
    assert ids("--expiring-within", "2h") == [up.proposal]  # a tool call never expires
    assert ids("--state", "queued") == []
    page = cli("proposals", "inbox", "--limit", "1", "--db", db_url, "--json").json()
    assert [item["kind"] for item in page["proposals"]] == ["proposal"] and page["more"] is True
    cut = cli("proposals", "inbox", "--limit", "1", "--db", db_url)
    assert "showing the first 1" in cut.stderr and "tool_call" not in cut.stdout
    empty = cli("proposals", "inbox", "--tenant", "nobody", "--db", db_url)
    assert empty.exit_code == 0 and "nothing waiting for a decision" in empty.stdout
    assert "tool_call" not in empty.stderr


def test_show_a_tool_call_by_id_and_by_prefix(up: Any, db_url: str, cli: Any) -> None:
    pending = up.tool_calls["pending"]
    for given in (pending, pending[:8], pending[:14]):
        r = cli("proposals", "show", given, *_globex(up), "--db", db_url, "--json")
        assert r.exit_code == 0, r.stderr
        doc = r.json()
        assert list(doc) == T_KEYS
        assert doc == {
            "kind": "tool_call",
            "id": pending,
            "tool_name": "cancel_invoice",
            "tool_type": "action",
            "input": {"order_id": 7},
            "status": "pending_approval",
            "thread_id": up.threads["globex"],
            "run_id": up.runs["globex"],
            "message_id": up.messages["globex"][1],
            "actor_ref": "bob",
            "tenant_ref": "globex",
            "requested_at": _iso(up.now - 600_000 + 6_030),
            "executed_at": None,
            "executed_by_ref": None,
            "error": None,
        }
    table = cli("proposals", "show", pending[:8], *_globex(up), "--db", db_url)
    assert table.exit_code == 0, table.stderr
    assert f"tool call {pending}" in table.stdout and "pending_approval" in table.stdout
    assert '"order_id": 7' in table.stdout and up.runs["globex"] in table.stdout
    assert "AgentService.approve" in " ".join(table.stderr.split())
    rejected = cli(
        "proposals", "show", up.tool_calls["rejected"], *_globex(up), "--db", db_url, "--json"
    ).json()
    assert (rejected["status"], rejected["error"]) == ("rejected", "not allowed")
    # a wrong scope looks exactly like a missing id, as for proposals
    wrong = ("--actor", "alice", "--thread", up.threads["globex"], "--tenant", "globex")
    missing = cli("proposals", "show", pending, *wrong, "--db", db_url)
    assert missing.exit_code == 1 and no_data(missing)
    assert missing.stderr == f"error: no proposal '{pending}' in that scope\n"
    # the proposal is still shown as P
    acme = ("--actor", "alice", "--thread", up.threads["acme"], "--tenant", "acme")
    shown = cli("proposals", "show", up.proposal[:10], *acme, "--db", db_url, "--json").json()
    assert shown["id"] == up.proposal and "kind" not in shown


def test_decide_on_a_tool_call_is_refused_and_writes_nothing(
    up: Any, db_url: str, cli: Any, engine: Any
) -> None:
    pending = up.tool_calls["pending"]
    before = _tool_call_row(engine, pending)
    for flag in ("--approve", "--reject"):
        r = cli(
            "proposals", "decide", pending[:9], *_globex(up), flag, "--by", "ops", "--db", db_url
        )
        assert r.exit_code == 2 and no_data(r), (r.stdout, r.stderr)
        [line] = r.stderr.splitlines()
        assert line.startswith(f"error: tool call {pending} (run {up.runs['globex']}) is the ")
        assert "decide it in the app, AgentService.approve(runId, toolCallId) or reject(" in line
        assert line.endswith("nothing was written")
    as_json = cli(
        "proposals", "decide", pending, *_globex(up), "--approve", "--by", "ops",
        "--db", db_url, "--json",
    )  # fmt: skip
    assert as_json.exit_code == 2
    assert as_json.json()["error"]["kind"] == "invalid_input"
    done = cli(
        "proposals", "decide", up.tool_calls["rejected"], *_globex(up), "--approve",
        "--by", "ops", "--db", db_url,
    )  # fmt: skip
    assert done.exit_code == 2 and "is already rejected" in done.stderr
    assert _tool_call_row(engine, pending) == before
    with engine.connect() as conn:  # nothing became a proposal either
        assert conn.execute(select(action_proposal.c.id)).scalars().all() == [up.proposal]
    # the proposal beside it is decided as ever
    acme = ("--actor", "alice", "--thread", up.threads["acme"], "--tenant", "acme")
    decided = cli(
        "proposals", "decide", up.proposal[:10], *acme, "--reject", "--by", "ops", "--db", db_url
    )
    assert decided.exit_code == 0 and decided.stdout.startswith(f"applied: {up.proposal}")
    assert [item["id"] for item in _inbox(cli, db_url)] == [pending]
