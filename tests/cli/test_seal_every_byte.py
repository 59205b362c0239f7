"""Issue 24 finding 2 and issue 25 finding 1: every tenant byte sealed, no forged sealed value,
values that do not open shown in place, crypto-shredding, removing old row versions."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select

from agora_cli.store._schema import message, thread
from agora_cli.store._sealing import SEALED_PREFIX, Kek, generate_kek, using_kek
from agora_cli.store._threads import append_message, create_thread

KEK_TEXT = generate_kek()
WITH = {"AGORA_KEK": KEK_TEXT, "AGORA_KEK_FILE": None}
WITHOUT = {"AGORA_KEK": None, "AGORA_KEK_FILE": None}
SSN = "123-45-6789"


def _raw(engine: Any) -> list[Any]:
    with engine.connect() as conn:
        cols = [message.c.id, message.c.content, message.c.tool_calls, message.c.tool_results]
        rows = list(conn.execute(select(*cols).order_by(message.c.id)).all())
        rows += list(conn.execute(select(thread.c.id, thread.c.title)).all())
        return rows


def _chat(engine: Any, tenant: str, texts: list[str], **payload: Any) -> str:
    with engine.begin() as conn, using_kek(Kek.from_text(KEK_TEXT)):
        t = create_thread(conn, actor_ref="alice", tenant_ref=tenant, title=f"{tenant} {SSN}")
        for n, text in enumerate(texts):
            append_message(
                conn, thread_id=t.id, role="user", content=text, message_id=f"{t.id}-{n}", **payload
            )
    return t.id


def test_a_forged_sealed_prefix_is_text_and_db_seal_seals_it(
    engine: Any, db_url: str, cli: Any
) -> None:
    forged = f"{SEALED_PREFIX}tk_made_up:QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo wants a refund"
    thread_id = _chat(engine, "acme", [forged, "plain text"])
    assert cli("keys", "create", "--tenant", "acme", "--db", db_url, env=WITH).exit_code == 0
    shown = cli("threads", "show", thread_id, "--db", db_url, "--json", env=WITH)
    assert shown.exit_code == 0, shown.stderr
    doc = shown.json()
    assert [m["content"] for m in doc["messages"]] == [forged, "plain text"]
    assert doc["seal_broken"] == [] and not doc["messages"][0]["sealed"]
    sealed = cli("db", "seal", "--tenant", "acme", "--db", db_url, "--json", env=WITH)
    assert sealed.exit_code == 0, sealed.stderr
    # both messages and the title: what it counts is what it changed
    assert sealed.json()["sealed"]["agent_message"] == 2
    assert set(sealed.json()["remaining"].values()) == {0}
    assert not any(forged in str(row) or SSN in str(row) for row in _raw(engine))
    again = cli("threads", "show", thread_id, "--db", db_url, "--json", env=WITH).json()
    assert [m["content"] for m in again["messages"]] == [forged, "plain text"]
    assert all(m["sealed"] for m in again["messages"])


def test_tool_parts_and_title_are_sealed_on_write(engine: Any, db_url: str, cli: Any) -> None:
    assert cli("keys", "create", "--tenant", "acme", "--db", db_url, env=WITH).exit_code == 0
    thread_id = _chat(
        engine,
        "acme",
        ["look it up"],
        tool_calls=[{"id": "c1", "name": "lookup", "input": {"ssn": SSN}}],
        tool_results=[{"id": "c1", "name": "lookup", "output": {"ssn": SSN}}],
        outcome={"ok": SSN},
        attachments=[{"name": SSN}],
    )
    raw = json.dumps([list(map(str, r)) for r in _raw(engine)])
    assert SSN not in raw and "lookup" not in raw  # tool names live in agent_tool_call
    shown = cli("threads", "show", thread_id, "--db", db_url, "--json", env=WITH).json()
    payload = shown["messages"][0]["payload"]
    assert payload["tool_calls"][0]["input"] == {"ssn": SSN}
    assert payload["outcome"] == {"ok": SSN} and shown["thread"]["title"] == f"acme {SSN}"
    hidden = cli("threads", "show", thread_id, "--db", db_url, "--json", env=WITHOUT)
    assert hidden.exit_code == 0 and SSN not in hidden.stdout
    listed = cli("threads", "list", "--db", db_url, "--json", env=WITH)
    assert f"acme {SSN}" in listed.stdout


def test_destroyed_keys_read_as_shredded(engine: Any, db_url: str, cli: Any) -> None:
    assert cli("keys", "create", "--tenant", "acme", "--db", db_url, env=WITH).exit_code == 0
    thread_id = _chat(engine, "acme", ["secret plan"])
    refused = cli("keys", "destroy", "--tenant", "acme", "--db", db_url, env=WITH)
    assert refused.exit_code == 2 and "--yes" in refused.stderr
    done = cli("keys", "destroy", "--tenant", "acme", "--yes", "--db", db_url, "--json", env=WITH)
    assert done.exit_code == 0 and len(done.json()["destroyed"]) == 1
    shown = cli("threads", "show", thread_id, "--db", db_url, "--json", env=WITH)
    assert shown.exit_code == 0 and "secret plan" not in shown.stdout
    doc = shown.json()
    assert doc["messages"][0]["content"] == "[shredded]" and doc["messages"][0]["shredded"]
    assert doc["thread"]["title"] == "[shredded]"
    status = cli("keys", "status", "--tenant", "acme", "--db", db_url, "--json", env=WITH)
    assert status.json()["state"] == "shredded"
    # never written in plaintext afterwards
    from agora_cli.store._errors import KeyUnavailable

    with engine.begin() as conn, using_kek(Kek.from_text(KEK_TEXT)):
        try:
            append_message(conn, thread_id=thread_id, role="user", content="after")
            raise AssertionError("written after the keys were destroyed")
        except KeyUnavailable as exc:
            assert "destroyed" in str(exc)
    listed = cli("keys", "list", "--tenant", "acme", "--db", db_url, "--json", env=WITH)
    assert listed.json()["keys"][0]["state"] == "destroyed"


def test_db_seal_vacuum(engine: Any, db_url: str, cli: Any) -> None:
    _chat(engine, "acme", ["old plaintext"])
    assert cli("keys", "create", "--tenant", "acme", "--db", db_url, env=WITH).exit_code == 0
    result = cli("db", "seal", "--tenant", "acme", "--vacuum", "--db", db_url, "--json", env=WITH)
    assert result.exit_code == 0, result.stderr
    assert result.json()["vacuumed"] and result.json()["sealed"]["agent_message"] == 1


def test_frames_tail_proposals_show_and_runs_show_open_with_the_kek_only(
    engine: Any, db_url: str, cli: Any
) -> None:
    from agora_cli.store._frames import FrameWriter
    from agora_cli.store._proposals import ActionProposalStore, NewProposal, Scope
    from agora_cli.store._sealing import create_tenant_key
    from agora_cli.store._steps import record_tool_call, start_run

    kek = Kek.from_text(KEK_TEXT)
    with using_kek(kek), engine.begin() as conn:
        create_tenant_key(conn, tenant="acme")
        create_thread(conn, actor_ref="alice", tenant_ref="acme", thread_id="t-acme")
        m = append_message(conn, thread_id="t-acme", role="assistant", content="ok", run_id="r1")
        start_run(conn, thread_id="t-acme", actor_ref="alice", tenant_ref="acme", run_id="r1")
        record_tool_call(
            conn, message_id=m.id, tool_call_id="c1", tool_name="lookup", input=SSN, run_id="r1"
        )
    with using_kek(kek):
        with FrameWriter(engine, "r1", autoflush=False, auto_purge=False) as w:
            w.append({"type": "text-delta", "delta": SSN})
            w.end()
        pid = (
            ActionProposalStore(engine)
            .create(
                NewProposal(
                    scope=Scope("acme", "alice", "t-acme"),
                    tool_name="refund",
                    run_id="r1",
                    tool_call_id="c2",
                    input={"ssn": SSN},
                )
            )
            .proposal.id
        )
    scope = ["--tenant", "acme", "--actor", "alice", "--thread", "t-acme"]
    commands = [
        ["frames", "tail", "r1", "--json"],
        ["proposals", "show", pid, *scope, "--json"],
        ["runs", "show", "r1", "--json"],
    ]
    for command in commands:
        opened = cli(*command, "--db", db_url, env=WITH)
        assert opened.exit_code == 0, (command, opened.stderr)
        assert SSN in opened.stdout, command
        locked = cli(*command, "--db", db_url, env=WITHOUT)
        assert locked.exit_code == 0, (command, locked.stderr)
        assert SSN not in locked.stdout + locked.stderr and "[sealed]" in locked.stdout, command
