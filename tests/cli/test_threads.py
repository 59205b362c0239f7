"""`agora threads list | show | delete` through the real Typer app, on every dialect."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import no_data
from sqlalchemy import func, select

from agora_cli.store._clock import ManualClock
from agora_cli.store._schema import action_proposal, message, token_usage, tool_call
from agora_cli.store._steps import complete_tool_call, record_tool_call, start_run
from agora_cli.store._threads import append_message, create_thread

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00.000Z
SUMMARY_KEYS = {
    "id",
    "actor_ref",
    "tenant_ref",
    "title",
    "messages",
    "usage",
    "updated_at",
    "deleted_at",
    "transient",
}
ALICE_USAGE = {
    "turns": 2,
    "input_tokens": 110,
    "output_tokens": 45,
    "cost_usd": 0.5,
    "unpriced_turns": 1,
}


@pytest.fixture
def convo(engine: Any) -> dict[str, str]:
    """Two threads: alice's with a transcript, tool call, usage and a proposal; bob's empty."""
    clock = ManualClock(T0)
    with engine.begin() as conn:
        bob = create_thread(conn, actor_ref="bob", title="empty", clock=clock)
        clock.advance(1000)
        t = create_thread(conn, actor_ref="alice", tenant_ref="acme", title="Refund", clock=clock)
        clock.advance(1000)
        append_message(conn, thread_id=t.id, role="user", content="refund 7", clock=clock)
        reply = append_message(
            conn,
            thread_id=t.id,
            role="assistant",
            content="on it",
            tool_calls=[{"id": "call_1", "name": "refund"}],
            clock=clock,
        )
        record_tool_call(
            conn,
            message_id=reply.id,
            tool_call_id="call_1",
            tool_name="refund",
            input={"order": 7},
            clock=clock,
        )
        clock.advance(40)
        complete_tool_call(conn, "call_1", output={"ok": True}, clock=clock)
        start_run(conn, thread_id=t.id, actor_ref="alice", run_id="run-1", clock=clock)
        conn.execute(
            token_usage.insert(),
            [
                {
                    "id": "u1",
                    "thread_id": t.id,
                    "actor_ref": "alice",
                    "message_id": reply.id,
                    "model_id": "gpt-4o-mini",
                    "purpose": "chat",
                    "input_tokens": 100,
                    "output_tokens": 40,
                    "cost_usd": 0.5,
                    "cost_source": "estimate",
                    "created_at": T0,
                },
                {
                    "id": "u2",
                    "thread_id": t.id,
                    "actor_ref": "alice",
                    "message_id": None,
                    "model_id": "mystery",
                    "purpose": "title",
                    "input_tokens": 10,
                    "output_tokens": 5,
                    "cost_usd": None,
                    "cost_source": None,
                    "created_at": T0,
                },
            ],
        )
        conn.execute(
            action_proposal.insert().values(
                id="p1",
                idempotency_key="run-1:call_1",
                actor_ref="alice",
                thread_id=t.id,
                tool_name="refund",
                input="{}",
                created_at=T0,
                updated_at=T0,
            )
        )
    return {"alice": t.id, "bob": bob.id, "reply": reply.id}


def test_list_json_newest_activity_first(cli: Any, db_url: str, convo: dict[str, str]) -> None:
    r = cli("threads", "list", "--db", db_url, "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert set(doc) == {"threads"}
    assert all(set(t) == SUMMARY_KEYS for t in doc["threads"])
    assert doc["threads"][0] == {
        "id": convo["alice"],
        "actor_ref": "alice",
        "tenant_ref": "acme",
        "title": "Refund",
        "messages": 2,
        "usage": ALICE_USAGE,
        "updated_at": "2026-01-01T00:00:02.000Z",
        "deleted_at": None,
        "transient": False,
    }
    assert doc["threads"][1]["usage"] == {
        "turns": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "cost_usd": None,
        "unpriced_turns": 0,
    }
    assert [t["id"] for t in doc["threads"]] == [convo["alice"], convo["bob"]]
    bob = cli("threads", "list", "--actor", "bob", "--db", db_url, "--json").json()
    assert [t["id"] for t in bob["threads"]] == [convo["bob"]]
    one = cli("threads", "list", "--limit", "1", "--db", db_url, "--json").json()
    assert len(one["threads"]) == 1


def test_list_table_shows_short_ids_that_commands_take(
    cli: Any, db_url: str, convo: dict[str, str]
) -> None:
    r = cli("threads", "list", "--db", db_url)
    assert r.exit_code == 0, r.stderr
    assert convo["alice"] not in r.stdout and "Refund" in r.stdout
    short = convo["alice"][:12]
    assert short in r.stdout and convo["bob"][:12] in r.stdout
    assert "$0.5000 +1 unpriced" in r.stdout
    shown = cli("threads", "show", short, "--db", db_url, "--json")
    assert shown.exit_code == 0, shown.stderr
    assert shown.json()["thread"]["id"] == convo["alice"]


def test_threads_made_in_one_millisecond_show_short_ids_that_commands_take(
    cli: Any, engine: Any, db_url: str
) -> None:
    """Time-ordered ids of one millisecond share their first 13 characters and differ only
    in the counter after them: the table shows each one's shortest unique prefix, not the whole
    id, and `threads show` takes it."""
    clock = ManualClock(T0 + 5)
    with engine.begin() as conn:
        made = [
            create_thread(conn, actor_ref="carol", title=f"burst {n}", clock=clock).id
            for n in range(6)
        ]
    assert len({m[:13] for m in made}) == 1  # one millisecond: one time prefix
    listed = cli("threads", "list", "--actor", "carol", "--db", db_url)
    assert listed.exit_code == 0, listed.stderr
    assert not any(m in listed.stdout for m in made)  # none shown whole
    for ident in made:
        shown = [w for w in listed.stdout.split() if ident.startswith(w) and len(w) >= 12]
        assert len(shown) == 1, (ident, listed.stdout)
        assert not any(o.startswith(shown[0]) for o in made if o != ident)
        resolved = cli("threads", "show", shown[0], "--db", db_url, "--json")
        assert resolved.exit_code == 0, resolved.stderr
        assert resolved.json()["thread"]["id"] == ident


def test_list_limit_out_of_range_is_exit_2(cli: Any, db_url: str) -> None:
    r = cli("threads", "list", "--limit", "0", "--db", db_url)
    assert r.exit_code == 2 and no_data(r) and r.stderr.startswith("error: ")


def test_show_json_transcript(cli: Any, db_url: str, convo: dict[str, str]) -> None:
    r = cli("threads", "show", convo["alice"], "--db", db_url, "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert set(doc) == {"thread", "messages", "seal_broken"} and doc["seal_broken"] == []
    t = doc["thread"]
    assert (t["id"], t["actor_ref"], t["tenant_ref"], t["title"]) == (
        convo["alice"],
        "alice",
        "acme",
        "Refund",
    )
    assert t["created_at"] == "2026-01-01T00:00:01.000Z"
    assert t["usage"] == ALICE_USAGE
    assert (t["deleted_at"], t["transient"]) == (None, False)
    assert [(m["seq"], m["role"], m["content"]) for m in doc["messages"]] == [
        (1, "user", "refund 7"),
        (2, "assistant", "on it"),
    ]
    reply = doc["messages"][1]
    assert reply["id"] == convo["reply"]
    assert reply["payload"]["tool_calls"] == [{"id": "call_1", "name": "refund"}]
    [call] = reply["tool_calls"]
    assert (call["id"], call["status"], call["input"], call["output"]) == (
        "call_1",
        "executed",
        {"order": 7},
        {"ok": True},
    )
    assert call["execution_ms"] == 40
    [usage] = reply["usage"]
    assert (usage["model_id"], usage["cost_usd"], usage["input_tokens"]) == (
        "gpt-4o-mini",
        0.5,
        100,
    )
    assert doc["messages"][0]["tool_calls"] == [] and doc["messages"][0]["usage"] == []


def test_show_table(cli: Any, db_url: str, convo: dict[str, str]) -> None:
    r = cli("threads", "show", convo["alice"], "--db", db_url)
    assert r.exit_code == 0, r.stderr
    out = r.stdout
    assert out.index("refund 7") < out.index("on it")
    assert "tool refund [executed, 40 ms]" in out
    assert "1 unpriced" in out


def test_show_missing_is_exit_1(cli: Any, db_url: str) -> None:
    r = cli("threads", "show", "nope", "--db", db_url, "--json")
    assert r.exit_code == 1 and no_data(r)
    assert r.stderr.startswith("error: ") and "nope" in r.stderr


def rows(engine: Any, table: Any) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def test_delete_without_a_terminal_needs_yes(
    cli: Any, db_url: str, engine: Any, convo: dict[str, str]
) -> None:
    r = cli("threads", "delete", convo["alice"], "--db", db_url, "--json")
    assert r.exit_code == 2 and no_data(r)
    assert r.stderr.startswith("error: ") and "--yes" in r.stderr
    assert rows(engine, message) == 2  # nothing deleted


def test_delete_yes_cascades_and_reports(
    cli: Any, db_url: str, engine: Any, convo: dict[str, str]
) -> None:
    r = cli("threads", "delete", convo["alice"], "--yes", "--db", db_url, "--json")
    assert r.exit_code == 0, r.stderr
    assert r.json() == {
        "id": convo["alice"],
        "deleted": {
            "agent_tool_call": 1,
            "agent_stream_frame": 0,
            "agent_action_proposal_event": 0,
            "agent_message": 2,
            "agent_token_usage": 2,
            "agent_run": 1,
            "agent_action_proposal": 1,
            "agent_queued_message": 0,
            "agent_confirm_token": 0,
            "agent_genui_call": 0,
            "agent_thread": 1,
        },
        "ledger": ALICE_USAGE,
    }
    for table in (message, tool_call, token_usage, action_proposal):
        assert rows(engine, table) == 0, table.name
    assert cli("threads", "show", convo["alice"], "--db", db_url).exit_code == 1
    listed = cli("threads", "list", "--db", db_url, "--json").json()["threads"]
    assert [t["id"] for t in listed] == [convo["bob"]]
    again = cli("threads", "delete", convo["alice"], "--yes", "--db", db_url)
    assert again.exit_code == 1 and again.stderr.startswith("error: ")


def test_delete_asks_on_a_terminal(
    cli: Any, db_url: str, engine: Any, convo: dict[str, str], monkeypatch: Any
) -> None:
    monkeypatch.setattr("agora_cli.cli.threads._stdin_is_terminal", lambda: True)
    declined = cli("threads", "delete", convo["alice"], "--db", db_url, input="n\n")
    assert declined.exit_code == 1
    assert "Delete it and everything in it" in declined.stderr
    assert "has 2 ledger row(s) ($0.5000 recorded spend, 1 unpriced; 155 tokens)" in " ".join(
        declined.stderr.split()
    )
    assert "nothing deleted" in declined.stderr
    assert rows(engine, message) == 2
    accepted = cli("threads", "delete", convo["alice"], "--db", db_url, input="y\n")
    assert accepted.exit_code == 0, accepted.stderr
    assert f"Deleted thread {convo['alice']}" in accepted.stdout
    assert "2 ledger row(s)" in accepted.stdout
    assert rows(engine, message) == 0
