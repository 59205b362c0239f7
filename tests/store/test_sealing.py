"""Sealed message content on every dialect: bound to tenant, row and column; rotation; KEKs."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import insert, select, update

from agora_cli.store._errors import Conflict, KeyUnavailable, NotFound, SealBroken, WrongKek
from agora_cli.store._schema import message, queued_message, tenant_key
from agora_cli.store._seal_rows import count_to_seal, seal_tenant
from agora_cli.store._sealing import (
    SEAL_BROKEN_MARKER,
    SEALED_MARKER,
    SEALED_PREFIX,
    Kek,
    create_tenant_key,
    current_kek,
    generate_kek,
    list_tenant_keys,
    open_values,
    rotate_tenant_key,
    using_kek,
)
from agora_cli.store._threads import (
    append_message,
    create_thread,
    fork_thread,
    get_transcript,
    list_messages,
    load_thread_for_turn,
)

pytestmark = pytest.mark.usefixtures("no_kek_in_env")

KEK_TEXT = generate_kek()
KEK = Kek.from_text(KEK_TEXT)
OTHER = Kek.from_text(generate_kek())


@pytest.fixture
def kek() -> Iterator[Kek]:
    with using_kek(KEK) as k:
        yield k


def _raw(engine: Any, table: Any = message) -> dict[str, str]:
    with engine.connect() as conn:
        return dict(conn.execute(select(table.c.id, table.c.content)).all())


def _sealed_thread(engine: Any, tenant: str, texts: list[str], *, key: bool = True) -> str:
    with engine.begin() as conn:
        if key:
            create_tenant_key(conn, tenant=tenant)
        t = create_thread(conn, actor_ref="alice", tenant_ref=tenant, thread_id=f"t-{tenant}")
        for n, text in enumerate(texts):
            append_message(
                conn, thread_id=t.id, role="user", content=text, message_id=f"m-{tenant}-{n}"
            )
    return t.id


def test_a_sealed_message_opens_for_its_tenant(engine: Any, kek: Kek) -> None:
    thread_id = _sealed_thread(engine, "acme", ["refund order 7", "naïve ☃ text"])
    raw = _raw(engine)
    assert all(v.startswith(SEALED_PREFIX) for v in raw.values())
    assert not any("refund" in v for v in raw.values())
    assert len(set(raw.values())) == 2  # fresh nonces
    with engine.connect() as conn:
        listed = list_messages(conn, thread_id)
        assert [m.content for m in listed] == ["refund order 7", "naïve ☃ text"]
        assert all(m.sealed for m in listed)
        turn = load_thread_for_turn(conn, thread_id)
        assert [m.content for m in turn.messages] == ["refund order 7", "naïve ☃ text"]
        transcript = get_transcript(conn, thread_id)
        assert transcript.messages[0].message.content == "refund order 7"
        # the untenanted and keyless threads stay plain
        plain = create_thread(conn, actor_ref="bob", tenant_ref="globex")
        m = append_message(conn, thread_id=plain.id, role="user", content="hello")
        assert not m.sealed and _raw_one(conn, m.id) == "hello"
        conn.rollback()


def _raw_one(conn: Any, message_id: str) -> str:
    return str(conn.execute(select(message.c.content).where(message.c.id == message_id)).scalar())


def _copy(engine: Any, source: str, target: str) -> None:
    with engine.begin() as conn:
        value = _raw_one(conn, source)
        conn.execute(update(message).where(message.c.id == target).values(content=value))


def _assert_broken(messages: list[Any], index: int) -> None:
    """The message at ``index`` reads as a marker in its place; the others as their text."""
    assert messages[index].content == SEAL_BROKEN_MARKER
    assert messages[index].seal_broken and messages[index].sealed
    assert all(not m.seal_broken for i, m in enumerate(messages) if i != index)


def test_a_copy_into_another_tenants_row_does_not_open(engine: Any, kek: Kek) -> None:
    _sealed_thread(engine, "acme", ["acme's secret"])
    other = _sealed_thread(engine, "globex", ["globex text"])
    _copy(engine, "m-acme-0", "m-globex-0")
    with engine.connect() as conn:
        _assert_broken(list_messages(conn, other), 0)
    # a tenant without a key, and no tenant at all, do not open it either
    keyless = _sealed_thread(engine, "initech", ["plain"], key=False)
    _copy(engine, "m-acme-0", "m-initech-0")
    with engine.connect() as conn:
        _assert_broken(list_messages(conn, keyless), 0)
    with engine.connect() as conn:
        value = _raw_one(conn, "m-acme-0")
        with pytest.raises(SealBroken):
            open_values(
                conn, table="agent_message", column="content", cells=[("m-acme-0", None, value)]
            )


def test_a_copy_into_another_row_of_the_same_tenant_does_not_open(engine: Any, kek: Kek) -> None:
    thread_id = _sealed_thread(engine, "acme", ["first", "second"])
    _copy(engine, "m-acme-0", "m-acme-1")
    with engine.connect() as conn:
        messages = list_messages(conn, thread_id)
    _assert_broken(messages, 1)
    assert messages[0].content == "first"  # the rest of the thread still reads


def test_a_copy_into_another_column_does_not_open(engine: Any, kek: Kek) -> None:
    thread_id = _sealed_thread(engine, "acme", ["queued secret"])
    with engine.begin() as conn:
        value = _raw_one(conn, "m-acme-0")
        # the same row id and tenant, another table's content column
        conn.execute(
            insert(queued_message).values(
                id="m-acme-0",
                thread_id=thread_id,
                actor_ref="alice",
                tenant_ref="acme",
                content=value,
                created_at=1,
            )
        )
        stored = conn.execute(select(queued_message.c.content)).scalar_one()
        with pytest.raises(SealBroken):
            open_values(
                conn,
                table="agent_queued_message",
                column="content",
                cells=[("m-acme-0", "acme", stored)],
            )
        assert open_values(
            conn, table="agent_message", column="content", cells=[("m-acme-0", "acme", stored)]
        ) == ["queued secret"]


def test_an_altered_value_does_not_open(engine: Any, kek: Kek) -> None:
    thread_id = _sealed_thread(engine, "acme", ["abc"])
    with engine.begin() as conn:
        value = _raw_one(conn, "m-acme-0")
        flipped = value[:-2] + ("A" if value[-2] != "A" else "B") + value[-1]
        conn.execute(update(message).values(content=flipped))
    with engine.connect() as conn:
        _assert_broken(list_messages(conn, thread_id), 0)
        with pytest.raises(SealBroken):  # the strict reader names the row
            open_values(
                conn, table="agent_message", column="content", cells=[("m-acme-0", "acme", flipped)]
            )


def test_without_the_kek_reads_show_the_marker_and_writes_refuse(engine: Any) -> None:
    with using_kek(KEK):
        thread_id = _sealed_thread(engine, "acme", ["secret"])
    assert current_kek() is None
    before = _raw(engine)
    with engine.connect() as conn:
        assert [m.content for m in list_messages(conn, thread_id)] == [SEALED_MARKER]
        conn.rollback()
    with engine.begin() as conn, pytest.raises(KeyUnavailable, match="AGORA_KEK"):
        append_message(conn, thread_id=thread_id, role="user", content="never in plaintext")
    with engine.begin() as conn, pytest.raises(KeyUnavailable):
        fork_thread(conn, thread_id)
    assert _raw(engine) == before


def test_a_wrong_kek_is_refused_and_writes_nothing(engine: Any) -> None:
    with using_kek(KEK):
        thread_id = _sealed_thread(engine, "acme", ["secret"])
        with engine.begin() as conn:
            create_thread(conn, actor_ref="a", tenant_ref="acme", thread_id="t-plain-later")
            conn.execute(
                insert(message).values(
                    id="m-plain",
                    thread_id="t-plain-later",
                    role="user",
                    content="written by another writer",
                    created_at=1,
                )
            )
    before = _raw(engine)
    with engine.connect() as conn:
        keys_before = conn.execute(select(tenant_key)).all()
    with using_kek(OTHER):
        with engine.connect() as conn, pytest.raises(WrongKek, match="fingerprint"):
            list_messages(conn, thread_id)
        with engine.begin() as conn, pytest.raises(WrongKek):
            append_message(conn, thread_id=thread_id, role="user", content="x")
        with pytest.raises(WrongKek):
            seal_tenant(engine, tenant="acme")
        with engine.begin() as conn, pytest.raises(WrongKek):
            rotate_tenant_key(conn, tenant="acme")
        with engine.begin() as conn, pytest.raises(WrongKek, match="this database"):
            create_tenant_key(conn, tenant="globex")
    assert _raw(engine) == before
    with engine.connect() as conn:
        assert conn.execute(select(tenant_key)).all() == keys_before


def test_keys_create_list_rotate(engine: Any, kek: Kek) -> None:
    with engine.begin() as conn:
        first = create_tenant_key(conn, tenant="acme")
        with pytest.raises(Conflict, match="rotate"):
            create_tenant_key(conn, tenant="acme")
        with pytest.raises(NotFound):
            rotate_tenant_key(conn, tenant="globex")
    with engine.begin() as conn:
        rotation = rotate_tenant_key(conn, tenant="acme")
    assert rotation.retired == [first.id] and rotation.key.active
    with engine.connect() as conn:
        keys = list_tenant_keys(conn, tenant="acme")
    assert [k.id for k in keys] == [rotation.key.id, first.id]
    assert keys[1].retired_at is not None and keys[0].kek_fingerprint == KEK.fingerprint
    assert "wrapped" not in repr(keys) and KEK_TEXT not in repr(keys)


def test_rotation_keeps_old_rows_readable_and_rotate_reseals_them(engine: Any, kek: Kek) -> None:
    thread_id = _sealed_thread(engine, "acme", ["one", "two"])
    with engine.begin() as conn:
        old = list_tenant_keys(conn, tenant="acme")[0].id
        new = rotate_tenant_key(conn, tenant="acme").key.id
        append_message(conn, thread_id=thread_id, role="user", content="three", message_id="m3")
    raw = _raw(engine)
    assert raw["m-acme-0"].startswith(f"{SEALED_PREFIX}{old}:")
    assert raw["m3"].startswith(f"{SEALED_PREFIX}{new}:")
    with engine.connect() as conn:
        assert [m.content for m in list_messages(conn, thread_id)] == ["one", "two", "three"]
        assert set(count_to_seal(conn, tenant="acme").values()) == {0}
        assert count_to_seal(conn, tenant="acme", rotate=True)["agent_message"] == 2
    result = seal_tenant(engine, tenant="acme", rotate=True, batch=1)
    assert result.sealed["agent_message"] == 2 and result.batches == 3  # and the title
    assert result.remaining["agent_message"] == 0
    after = _raw(engine)
    assert all(v.startswith(f"{SEALED_PREFIX}{new}:") for v in after.values())
    assert after["m3"] == raw["m3"]  # already under the active key: untouched
    with engine.connect() as conn:
        assert [m.content for m in list_messages(conn, thread_id)] == ["one", "two", "three"]


def test_seal_tenant_seals_plaintext_in_resumable_batches(engine: Any, kek: Kek) -> None:
    texts = [f"message {n}" for n in range(7)]
    thread_id = _sealed_thread(engine, "acme", texts, key=False)
    _sealed_thread(engine, "globex", ["not acme's"], key=False)
    with engine.begin() as conn:
        conn.execute(
            insert(queued_message).values(
                id="q1",
                thread_id=thread_id,
                actor_ref="alice",
                tenant_ref="acme",
                content="queued",
                created_at=1,
            )
        )
    with pytest.raises(NotFound, match="keys create"):
        seal_tenant(engine, tenant="acme")
    with engine.begin() as conn:
        create_tenant_key(conn, tenant="acme")
    dry = seal_tenant(engine, tenant="acme", dry_run=True)
    # the thread's title is the tenant's too
    assert dry.to_seal == {
        "agent_message": 7,
        "agent_queued_message": 1,
        "agent_thread": 1,
        "agent_tool_call": 0,
        "agent_action_proposal": 0,
        "agent_stream_frame": 0,
    }
    assert dry.sealed == {
        "agent_message": 0,
        "agent_queued_message": 0,
        "agent_thread": 0,
        "agent_tool_call": 0,
        "agent_action_proposal": 0,
        "agent_stream_frame": 0,
    }
    assert _raw(engine)["m-acme-0"] == "message 0"
    part = seal_tenant(engine, tenant="acme", batch=3, max_batches=1)
    assert part.sealed["agent_message"] == 3 and part.remaining["agent_message"] == 4
    rest = seal_tenant(engine, tenant="acme", batch=3)
    assert rest.sealed == {
        "agent_message": 4,
        "agent_queued_message": 1,
        "agent_thread": 1,
        "agent_tool_call": 0,
        "agent_action_proposal": 0,
        "agent_stream_frame": 0,
    }
    assert rest.remaining == {
        "agent_message": 0,
        "agent_queued_message": 0,
        "agent_thread": 0,
        "agent_tool_call": 0,
        "agent_action_proposal": 0,
        "agent_stream_frame": 0,
    }
    raw = _raw(engine)
    assert raw["m-globex-0"] == "not acme's"
    assert all(raw[f"m-acme-{n}"].startswith(SEALED_PREFIX) for n in range(7))
    q = _raw(engine, queued_message)["q1"]
    with engine.connect() as conn:
        assert [m.content for m in list_messages(conn, thread_id)] == texts
        assert open_values(
            conn, table="agent_queued_message", column="content", cells=[("q1", "acme", q)]
        ) == ["queued"]
    again = seal_tenant(engine, tenant="acme")
    assert again.batches == 0 and _raw(engine) == raw


def test_fork_of_a_sealed_thread_reseals_the_copies(engine: Any, kek: Kek) -> None:
    thread_id = _sealed_thread(engine, "acme", ["a", "b"])
    with engine.begin() as conn:
        copy = fork_thread(conn, thread_id)
        copies = list_messages(conn, copy.id)
    assert [m.content for m in copies] == ["a", "b"] and all(m.sealed for m in copies)


def test_the_kek_comes_from_the_environment_and_never_shows(
    tmp_path: Any, monkeypatch: Any
) -> None:
    assert current_kek() is None
    monkeypatch.setenv("AGORA_KEK", KEK_TEXT)
    found = current_kek()
    assert found is not None and found.fingerprint == KEK.fingerprint
    assert KEK_TEXT not in repr(found) + str(found)
    raw = base64.b64decode(KEK_TEXT)
    assert raw.hex() not in repr(found)
    monkeypatch.setenv("AGORA_KEK", "c2VjcmV0LXZhbHVl")
    with pytest.raises(WrongKek, match="32 bytes") as info:
        current_kek()
    assert "c2VjcmV0LXZhbHVl" not in str(info.value)
    monkeypatch.delenv("AGORA_KEK")
    path = tmp_path / "kek"
    path.write_text(KEK_TEXT + "\n")
    monkeypatch.setenv("AGORA_KEK_FILE", str(path))
    assert current_kek().fingerprint == KEK.fingerprint  # type: ignore[union-attr]
    path.write_bytes(raw)  # 32 raw bytes
    os.utime(path, ns=(1, 1))
    assert current_kek().fingerprint == KEK.fingerprint  # type: ignore[union-attr]
    monkeypatch.setenv("AGORA_KEK_FILE", str(tmp_path / "missing"))
    with pytest.raises(KeyUnavailable, match="missing"):
        current_kek()
    monkeypatch.setenv("AGORA_KEK", KEK_TEXT)
    with pytest.raises(WrongKek, match="not both"):
        current_kek()
