"""`agora keys` and `agora db seal`, through the real CLI on every dialect."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import no_data
from sqlalchemy import func, insert, select

from agora_cli.store._engine import open_engine
from agora_cli.store._schema import message, tenant_key, thread
from agora_cli.store._sealing import SEALED_PREFIX, Kek, generate_kek, open_values, using_kek
from agora_cli.store._threads import append_message, create_thread

KEK_TEXT = generate_kek()
OTHER_TEXT = generate_kek()
WITH = {"AGORA_KEK": KEK_TEXT, "AGORA_KEK_FILE": None}
WITHOUT = {"AGORA_KEK": None, "AGORA_KEK_FILE": None}
WRONG = {"AGORA_KEK": OTHER_TEXT, "AGORA_KEK_FILE": None}


def _messages(engine: Any, tenant: str, texts: list[str], thread_id: str | None = None) -> str:
    """A thread of the tenant with plaintext messages, written before the tenant had a key."""
    tid = thread_id or f"t-{tenant}"
    with engine.begin() as conn:
        create_thread(conn, actor_ref="alice", tenant_ref=tenant, thread_id=tid)
        for n, text in enumerate(texts):
            append_message(conn, thread_id=tid, role="user", content=text, message_id=f"{tid}-{n}")
    return tid


def _raw(engine: Any) -> dict[str, str]:
    with engine.connect() as conn:
        return dict(conn.execute(select(message.c.id, message.c.content)).all())


def test_from_plaintext_to_a_sealed_tenant(engine: Any, db_url: str, cli: Any) -> None:
    tid = _messages(engine, "acme", ["old one", "old two"])
    _messages(engine, "globex", ["globex stays plain"])
    created = cli("keys", "create", "--tenant", "acme", "--db", db_url, "--json", env=WITH)
    assert created.exit_code == 0, created.stderr
    key = created.json()
    assert key["state"] == "active" and key["id"].startswith("tk_")
    assert cli("keys", "create", "--tenant", "acme", "--db", db_url, env=WITH).exit_code == 1
    # new messages are sealed at once; old ones wait for `db seal`
    with using_kek(Kek.from_text(KEK_TEXT)), engine.begin() as conn:
        append_message(conn, thread_id=tid, role="assistant", content="new", message_id="new")
    raw = _raw(engine)
    assert raw["new"].startswith(f"{SEALED_PREFIX}{key['id']}:") and raw[f"{tid}-0"] == "old one"
    dry = cli("db", "seal", "--tenant", "acme", "--dry-run", "--db", db_url, "--json", env=WITH)
    assert dry.json()["to_seal"] == {
        "agent_message": 2,
        "agent_queued_message": 0,
        "agent_thread": 1,
        "agent_tool_call": 0,
        "agent_action_proposal": 0,
        "agent_stream_frame": 0,
    }
    sealed = cli("db", "seal", "--tenant", "acme", "--batch", "1", "--db", db_url, env=WITH)
    assert sealed.exit_code == 0, sealed.stderr
    # the two messages and the thread's title
    assert "sealed 3 value(s)" in sealed.stdout and "0 plaintext value(s) remain" in sealed.stdout
    raw = _raw(engine)
    assert all(raw[i].startswith(SEALED_PREFIX) for i in (f"{tid}-0", f"{tid}-1", "new"))
    assert raw["t-globex-0"] == "globex stays plain"
    # read with the KEK: opened; without: [sealed]; both kinds side by side in one database
    shown = cli("threads", "show", tid, "--db", db_url, "--json", env=WITH).json()
    assert [m["content"] for m in shown["messages"]] == ["old one", "old two", "new"]
    assert all(m["sealed"] for m in shown["messages"])
    hidden = cli("threads", "show", tid, "--db", db_url, env=WITHOUT)
    assert hidden.exit_code == 0 and hidden.stdout.count("[sealed]") == 4  # the title too
    assert "old one" not in hidden.stdout and "(sealed)" in hidden.stdout
    plain = cli("threads", "show", "t-globex", "--db", db_url, "--json", env=WITHOUT).json()
    assert plain["messages"][0]["content"] == "globex stays plain"
    assert plain["messages"][0]["sealed"] is False
    # rotation: old rows stay readable; --rotate re-seals them under the new key
    rotated = cli("keys", "rotate", "--tenant", "acme", "--db", db_url, "--json", env=WITH)
    assert rotated.exit_code == 0, rotated.stderr
    new_key = rotated.json()
    assert new_key["retired"] == [key["id"]]
    again = cli("threads", "show", tid, "--db", db_url, "--json", env=WITH).json()
    assert [m["content"] for m in again["messages"]] == ["old one", "old two", "new"]
    resealed = cli("db", "seal", "--tenant", "acme", "--rotate", "--db", db_url, "--json", env=WITH)
    assert resealed.json()["sealed"]["agent_message"] == 3
    assert all(
        v.startswith(f"{SEALED_PREFIX}{new_key['id']}:")
        for k, v in _raw(engine).items()
        if k != "t-globex-0"
    )
    listed = cli("keys", "list", "--db", db_url, "--json", env=WITHOUT)
    assert [(k["id"], k["state"]) for k in listed.json()["keys"]] == [
        (new_key["id"], "active"),
        (key["id"], "retired"),
    ]
    table = cli("keys", "list", "--tenant", "acme", "--db", db_url, env=WITHOUT)
    assert new_key["id"] in table.stdout and "retired" in table.stdout
    with engine.connect() as conn:
        wrapped = list(conn.execute(select(tenant_key.c.wrapped_key)).scalars())
    everything = listed.stdout + table.stdout + created.stdout + rotated.stdout
    assert KEK_TEXT not in everything and not any(w in everything for w in wrapped)


def test_a_wrong_or_missing_kek_is_exit_3_and_writes_nothing(
    engine: Any, db_url: str, cli: Any
) -> None:
    tid = _messages(engine, "acme", ["secret", "also secret"])
    assert cli("keys", "create", "--tenant", "acme", "--db", db_url, env=WITH).exit_code == 0
    before = _raw(engine)
    with engine.connect() as conn:
        keys_before = conn.execute(select(tenant_key)).all()
        wrapped = [r.wrapped_key for r in keys_before]
    for env in (WRONG, WITHOUT):
        for argv in (
            ("db", "seal", "--tenant", "acme"),
            ("keys", "rotate", "--tenant", "acme"),
            ("keys", "create", "--tenant", "globex"),
        ):
            result = cli(*argv, "--db", db_url, env=env)
            assert result.exit_code == 3, (argv, result.stderr)
            assert result.stderr.startswith("error: ") and no_data(result)
            assert "AGORA_KEK" in result.stderr or "fingerprint" in result.stderr
    assert _raw(engine) == before
    with engine.connect() as conn:
        assert conn.execute(select(tenant_key)).all() == keys_before
    # a sealed thread read with the wrong KEK: exit 3; the traceback under --debug shows no key
    cli("db", "seal", "--tenant", "acme", "--db", db_url, env=WITH)
    wrong = cli("threads", "show", tid, "--db", db_url, env=WRONG)
    assert wrong.exit_code == 3 and "fingerprint" in wrong.stderr
    debug = cli("--debug", "db", "seal", "--tenant", "acme", "--rotate", "--db", db_url, env=WRONG)
    assert debug.exit_code == 3 and "Traceback" in debug.stderr
    shown = debug.stdout + debug.stderr + wrong.stdout + wrong.stderr
    for secret in (KEK_TEXT, OTHER_TEXT, *wrapped):
        assert secret not in shown
    bad = cli("keys", "list", "--db", db_url, env={"AGORA_KEK": "x", "AGORA_KEK_FILE": None})
    assert bad.exit_code == 0  # listing needs no KEK
    malformed = cli("db", "seal", "--tenant", "acme", "--db", db_url, env={"AGORA_KEK": "c2VjcmV0"})
    assert malformed.exit_code == 3 and "32 bytes" in malformed.stderr
    assert "c2VjcmV0" not in malformed.stderr
    unknown = cli("db", "seal", "--tenant", "initech", "--db", db_url, env=WITH)
    assert unknown.exit_code == 1 and "keys create" in unknown.stderr
    assert cli("db", "seal", "--tenant", "acme", "--batch", "0", "--db", db_url).exit_code == 2


def test_a_copied_sealed_value_shows_in_place_and_is_exit_1_naming_the_row(
    engine: Any, db_url: str, cli: Any
) -> None:
    a = _messages(engine, "acme", ["acme's"])
    b = _messages(engine, "globex", ["globex's"])
    for tenant in ("acme", "globex"):
        assert cli("keys", "create", "--tenant", tenant, "--db", db_url, env=WITH).exit_code == 0
        assert cli("db", "seal", "--tenant", tenant, "--db", db_url, env=WITH).exit_code == 0
    from sqlalchemy import update

    with engine.begin() as conn:
        value = conn.execute(select(message.c.content).where(message.c.id == f"{a}-0")).scalar()
        conn.execute(update(message).where(message.c.id == f"{b}-0").values(content=value))
    result = cli("threads", "show", b, "--db", db_url, env=WITH)
    assert result.exit_code == 1 and f"{b}-0" in result.stderr
    assert "[seal broken]" in result.stdout and "acme's" not in result.stdout
    doc = cli("threads", "show", b, "--db", db_url, "--json", env=WITH)
    assert doc.exit_code == 1 and doc.json()["seal_broken"] == [f"{b}-0"]
    assert doc.json()["messages"][0]["seal_broken"] is True


@pytest.mark.slow
def test_db_seal_killed_mid_run_resumes_and_seals_every_row_once(
    engine: Any, db_url: str, tmp_path: Path
) -> None:
    # Enough batches that the kill lands mid-run: SQLite on /dev/shm seals 6,000 rows in batches
    # of 10 faster than the poll below sees the 200th (CI once found all 6,000 sealed).
    n = 30_000 if db_url.startswith("sqlite") else 6000
    texts = {f"m{i:05d}": f"message number {i}" for i in range(n)}
    with engine.begin() as conn:
        conn.execute(
            insert(thread).values(
                id="big", actor_ref="a", tenant_ref="acme", title="", created_at=1, updated_at=1
            )
        )
        conn.execute(
            insert(message),
            [
                {"id": i, "thread_id": "big", "role": "user", "content": t, "created_at": 1}
                for i, t in texts.items()
            ],
        )
    kek_file = tmp_path / "kek"
    kek_file.write_text(KEK_TEXT)
    env = {**os.environ, "AGORA_KEK_FILE": str(kek_file)}
    env.pop("AGORA_KEK", None)
    agora = str(Path(sys.executable).with_name("agora"))
    create = subprocess.run(
        [agora, "keys", "create", "--tenant", "acme", "--db", db_url], env=env, capture_output=True
    )
    assert create.returncode == 0, create.stderr

    def sealed_count() -> int:
        prefix = func.substr(message.c.content, 1, len(SEALED_PREFIX)) == SEALED_PREFIX
        check = open_engine(db_url)
        with check.connect() as conn:
            count = int(conn.execute(select(func.count()).where(prefix)).scalar_one())
        check.dispose()
        return count

    argv = [agora, "db", "seal", "--tenant", "acme", "--batch", "10", "--db", db_url]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while sealed_count() < 200 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    proc.kill()  # SIGKILL: no handler, no rollback of its own
    proc.communicate()
    partial = sealed_count()
    assert 0 < partial < n, partial
    resumed = subprocess.run([*argv, "--json"], env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    doc = json.loads(resumed.stdout)
    assert doc["remaining"]["agent_message"] == 0
    assert doc["sealed"]["agent_message"] == n - partial  # none sealed twice, none skipped
    raw = _raw(engine)
    assert len(raw) == n
    with engine.connect() as conn:
        opened = open_values(
            conn,
            table="agent_message",
            column="content",
            cells=[(i, "acme", raw[i]) for i in texts],
            kek=Kek.from_text(KEK_TEXT),
        )
    assert opened == list(texts.values())  # one layer each: opens straight to the plaintext


def test_the_demo_seals_one_tenant(engine: Any, db_url: str, cli: Any) -> None:
    doc = cli("demo", "--db", db_url, "--json", env=WITH).json()
    assert doc["sealed"] == {
        "tenant": "globex",
        "thread": "demo-thread-07",
        "messages": doc["sealed"]["messages"],
        "kek_file": None,
    }
    assert doc["sealed"]["messages"] > 0
    with engine.connect() as conn:
        rows = conn.execute(
            select(thread.c.tenant_ref, message.c.content).join(
                thread, thread.c.id == message.c.thread_id
            )
        ).all()
    sealed = [tenant for tenant, content in rows if content.startswith(SEALED_PREFIX)]
    assert set(sealed) == {"globex"} and len(sealed) == doc["sealed"]["messages"]
    assert all(c.startswith(SEALED_PREFIX) for t, c in rows if t == "globex")
    opened = cli("threads", "show", "demo-thread-07", "--db", db_url, "--json", env=WITH).json()
    assert all(m["sealed"] and m["content"] != "[sealed]" for m in opened["messages"])
    hidden = cli("threads", "show", "demo-thread-07", "--db", db_url, "--json", env=WITHOUT).json()
    assert {m["content"] for m in hidden["messages"]} == {"[sealed]"}
    plain = cli("threads", "show", "demo-thread-01", "--db", db_url, "--json", env=WITHOUT).json()
    assert not any(m["sealed"] for m in plain["messages"])
    forced = cli("demo", "--force", "--db", db_url, "--json", env=WITH)
    assert forced.exit_code == 0 and forced.json()["sealed"] == doc["sealed"]


def test_the_demo_without_a_kek(
    dialect: str, db_url: str, cli: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    if dialect == "sqlite":  # a file of its own, next to which the demo keeps its KEK
        monkeypatch.chdir(tmp_path)
        db_url = "sqlite:///demo.db"
    doc = cli("demo", "--db", db_url, "--json", env=WITHOUT).json()
    if dialect != "sqlite":
        assert doc["sealed"]["tenant"] is None and doc["sealed"]["messages"] == 0
        human = cli("demo", "--force", "--db", db_url, env=WITHOUT)
        assert "set AGORA_KEK" in human.stdout
        return
    assert doc["sealed"]["kek_file"] == "demo.db.kek" and doc["sealed"]["tenant"] == "globex"
    kek_file = tmp_path / "demo.db.kek"
    assert kek_file.stat().st_mode & 0o777 == 0o600
    kek_text = kek_file.read_text().strip()
    human = cli("demo", "--force", "--db", db_url, env=WITHOUT)  # reuses the file
    assert kek_file.read_text().strip() == kek_text and kek_text not in human.stdout
    assert "AGORA_KEK_FILE=demo.db.kek agora threads show demo-thread-07" in human.stdout
    env = {"AGORA_KEK_FILE": str(kek_file), "AGORA_KEK": None}
    shown = cli("threads", "show", "demo-thread-07", "--db", db_url, "--json", env=env).json()
    assert all(m["sealed"] and m["content"] != "[sealed]" for m in shown["messages"])
