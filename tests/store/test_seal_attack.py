"""Issue 24, sealed columns attacked on PostgreSQL as a tenant's runtime would: a LOGIN role that
is a member of the app role (never the superuser), with globex's tenant set, the KEK in hand and
acme's ids known.

acme's rows are written through the library with acme's key: its thread's title, a message's
content and tool parts, a tool call, a proposal and its result, a run's frames. globex's session
reads every sealed column of every table, and asks for acme's rows by id through the library:
no byte of acme's plaintext comes back. A sealed value of acme copied (from a backup, say) onto a
globex row reads as ``[seal broken]`` in globex's session and the rest of its thread still reads.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select, text, update
from sqlalchemy.engine import make_url

from agora_cli.store._clock import ManualClock
from agora_cli.store._engine import open_engine
from agora_cli.store._frames import FrameWriter, read_frames
from agora_cli.store._proposals import ActionProposalStore, NewProposal, Scope
from agora_cli.store._provision import ensure_agent_tables
from agora_cli.store._rls import enable_rls
from agora_cli.store._schema import message, metadata
from agora_cli.store._sealing import (
    SEAL_BROKEN_MARKER,
    SEALED_COLUMNS,
    Kek,
    create_tenant_key,
    generate_kek,
    using_kek,
)
from agora_cli.store._steps import complete_tool_call, record_tool_call, start_run
from agora_cli.store._threads import append_message, create_thread, find_thread, get_transcript

KEK = Kek.from_text(generate_kek())
SECRET = "ACME CONFIDENTIAL 123-45-6789"
ACME = Scope("acme", "alice", "t-acme")
TABLES = {t.name: t for t in metadata.sorted_tables}


@pytest.fixture
def attack(databases: Any) -> Iterator[tuple[Any, Any]]:
    """(the owner's engine, a globex engine logged in as a member of the app role)."""
    databases.require("postgresql")
    url = str(databases.new("postgresql"))
    owner = open_engine(url)
    ensure_agent_tables(owner)
    app, login = f"agora_app_s_{secrets.token_hex(4)}", f"agora_rt_s_{secrets.token_hex(4)}"
    enable_rls(owner, app_role=app)
    with owner.begin() as conn:
        conn.exec_driver_sql(f'CREATE ROLE "{login}" LOGIN NOSUPERUSER NOBYPASSRLS IN ROLE "{app}"')
    as_login = make_url(url).set(username=login, password=None)
    globex = open_engine(as_login.render_as_string(hide_password=False), tenant="globex")
    try:
        yield owner, globex
    finally:
        globex.dispose()
        with owner.begin() as conn:
            for role in (login, app):
                conn.exec_driver_sql(f'DROP OWNED BY "{role}"')
                conn.exec_driver_sql(f'DROP ROLE "{role}"')
        owner.dispose()


def _acme_everywhere(owner: Any) -> None:
    with using_kek(KEK), owner.begin() as conn:
        create_tenant_key(conn, tenant="acme")
        create_tenant_key(conn, tenant="globex")
        create_thread(conn, actor_ref="alice", tenant_ref="acme", thread_id="t-acme", title=SECRET)
        append_message(
            conn,
            thread_id="t-acme",
            role="assistant",
            content=SECRET,
            tool_calls=[{"args": {"ssn": SECRET}}],
            message_id="m-acme",
        )
        record_tool_call(
            conn, message_id="m-acme", tool_call_id="c-acme", tool_name="lookup", input=SECRET
        )
        complete_tool_call(conn, "c-acme", output=SECRET)
        start_run(conn, thread_id="t-acme", actor_ref="alice", tenant_ref="acme", run_id="r-acme")
        create_thread(conn, actor_ref="gina", tenant_ref="globex", thread_id="t-globex")
        append_message(conn, thread_id="t-globex", role="user", content="hi", message_id="m-g1")
        append_message(conn, thread_id="t-globex", role="user", content="yo", message_id="m-g2")
    with using_kek(KEK):
        with FrameWriter(owner, "r-acme", autoflush=False, auto_purge=False) as w:
            w.append({"type": "text-delta", "delta": SECRET})
            w.end()
        store = ActionProposalStore(owner, ManualClock(1_767_225_600_000))
        pid = store.create(
            NewProposal(
                scope=ACME, tool_name="refund", id="ap-acme", input={"n": SECRET}, card=SECRET
            )
        ).proposal.id
        store.decide(pid, ACME, "approved", "bob")


def test_globex_reads_no_byte_of_acmes_plaintext_and_a_copied_seal_is_broken(
    attack: tuple[Any, Any],
) -> None:
    owner, globex = attack
    _acme_everywhere(owner)
    with globex.connect() as conn:
        user = conn.execute(text("SELECT current_user, current_setting('agora.tenant', true)"))
        assert user.one()[1] == "globex"
        superuser = "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
        assert conn.execute(text(superuser)).scalar() is False
    with using_kek(KEK), globex.connect() as conn:
        # every column of every table, whatever the session can see
        assert set(SEALED_COLUMNS) <= set(TABLES)
        for name, table in TABLES.items():
            for row in conn.execute(select(table)).all():
                assert not any(SECRET in str(v) for v in row), (name, row)
        # acme's ids in hand, through the library
        assert find_thread(conn, "t-acme") is None
        assert read_frames(conn, "r-acme") == []
        assert ActionProposalStore(globex).find("ap-acme", ACME) is None
        conn.rollback()
    # acme's sealed content, copied (say, from a backup) onto globex's own message
    with owner.begin() as conn:
        stolen = conn.execute(select(message.c.content).where(message.c.id == "m-acme")).scalar()
        conn.execute(update(message).where(message.c.id == "m-g2").values(content=stolen))
    with using_kek(KEK), globex.connect() as conn:
        shown = get_transcript(conn, "t-globex")
        conn.rollback()
    got = [(m.message.content, m.message.seal_state) for m in shown.messages]
    assert got == [("hi", "opened"), (SEAL_BROKEN_MARKER, "broken")]


def test_frames_left_behind_by_a_deleted_run_hold_no_plaintext(attack: tuple[Any, Any]) -> None:
    """Finding 5's path: frames have no foreign key, so deleting the run leaves them; whatever
    session can still see them (row-level security permitting), their payload is sealed and
    opens for nobody — the run's tenant is gone with it."""
    owner, globex = attack
    _acme_everywhere(owner)
    with owner.begin() as conn:
        conn.execute(TABLES["agent_action_proposal"].delete())
        conn.execute(TABLES["agent_run"].delete().where(TABLES["agent_run"].c.id == "r-acme"))
    untenanted = open_engine(globex.url.render_as_string(hide_password=False))
    try:
        for engine in (owner, globex, untenanted):
            with using_kek(KEK), engine.connect() as conn:
                raw = conn.execute(select(TABLES["agent_stream_frame"].c.frame)).scalars().all()
                frames = read_frames(conn, "r-acme")
                conn.rollback()
            assert not any(SECRET in str(v) for v in raw)
            assert all(f.frame is None or f.seal_state == "broken" for f in frames)
    finally:
        untenanted.dispose()
