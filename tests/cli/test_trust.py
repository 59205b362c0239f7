"""The trust fixes, from outside: secrets, stranded work, hostile bytes, one way to fail.

Each test here failed before its fix (issue "Trust"), on every dialect where it applies.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import insert_legacy, no_data, run_agora, unique_name
from sqlalchemy import select
from sqlalchemy.engine import make_url

from agora_cli.store._clock import parse_instant
from agora_cli.store._engine import open_engine
from agora_cli.store._proposals import (
    NewProposal,
    Scope,
    create_proposal,
    decide_proposal,
)
from agora_cli.store._schema import (
    action_proposal,
    model_pricing,
    stream_frame,
    thread,
    token_usage,
)
from agora_cli.store._threads import append_message, create_thread

AGORA = str(Path(sys.executable).with_name("agora"))
OSC52 = "\x1b]52;c;cm0gLXJmIH4=\x07"
CLEAR = "\x1b[2J"
MAR10 = parse_instant("2026-03-10T08:00:00Z")


def ledger_row(i: int, **over: Any) -> dict[str, Any]:
    row = {
        "id": f"u{i}",
        "thread_id": "t1",
        "actor_ref": "alice",
        "tenant_ref": "acme",
        "model_id": "gpt-4o-mini",
        "purpose": "chat",
        "input_tokens": 100,
        "output_tokens": 40,
        "cache_read_tokens": None,
        "cache_write_tokens": None,
        "cost_usd": 0.5,
        "cost_source": "estimate",
        "created_at": MAR10 + i,
    }
    row.update(over)
    return row


def seed_thread(engine: Any, thread_id: str = "t1", **over: Any) -> None:
    values = {"id": thread_id, "actor_ref": "alice", "title": "", "created_at": 0, "updated_at": 0}
    values.update(over)
    with engine.begin() as conn:
        conn.execute(thread.insert().values(**values))


# --- 1. secrets --------------------------------------------------------------------------------


@pytest.fixture
def url_with_password(dialect: str, db_url: str) -> Any:
    """The test database's URL with a password in it (PostgreSQL: trust auth ignores it;
    MariaDB: a user of its own with that password)."""
    if dialect == "sqlite":
        pytest.skip("SQLite URLs carry no password")
    password = "s3cret PW-" + unique_name("x")[-8:]
    url = make_url(db_url)
    if dialect == "postgresql":
        yield url.set(password=password).render_as_string(hide_password=False), password
        return
    user = unique_name("pw")[:30]
    admin = open_engine(db_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE USER '{user}'@'%%' IDENTIFIED BY '{password}'")
        conn.exec_driver_sql(f"GRANT ALL ON `{url.database}`.* TO '{user}'@'%%'")
    try:
        yield (
            url.set(username=user, password=password).render_as_string(hide_password=False),
            (password),
        )
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP USER IF EXISTS '{user}'@'%%'")
        admin.dispose()


def test_demo_never_prints_the_password(url_with_password: Any, cli: Any) -> None:
    url, password = url_with_password
    human = cli("demo", "--db", url, "--force")
    assert human.exit_code == 0, human.stderr
    machine = cli("demo", "--db", url, "--force", "--json")
    assert machine.exit_code == 0, machine.stderr
    for result in (human, machine):
        assert password not in result.stdout + result.stderr
        assert "s3cret" not in result.stdout + result.stderr
    assert all(":***@" in line for line in machine.json()["try_next"])


def test_a_url_from_the_environment_is_left_out_of_try_next(db_url: str, cli: Any) -> None:
    result = cli("demo", "--force", "--json", env={"AGORA_DATABASE_URL": db_url})
    assert result.exit_code == 0, result.stderr
    assert not any("--db" in line for line in result.json()["try_next"])


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:s3cret PW@127.0.0.1:1/x",
        "postgresql://u:s3cret\tPW@127.0.0.1:1/x",
        "mysql://u:s3cretPW%40x@127.0.0.1:1/x",
        "postgresql://u@127.0.0.1:1/x?password=s3cretPW",
        "mysql://u@127.0.0.1:1/x?password=s3cretPW",
    ],
)
def test_unreachable_urls_never_show_the_password(url: str, cli: Any) -> None:
    for args in (("db", "status"), ("spend",)):
        result = cli(*args, "--db", url, "--json")
        assert result.exit_code == 3, result.stderr
        assert "s3cret" not in result.stdout + result.stderr
        assert result.json()["error"]["kind"] == "database_unreachable"


def test_an_unencoded_at_sign_is_exit_2_and_leaks_nothing(cli: Any) -> None:
    result = cli("spend", "--db", "postgresql://u:p@ss@127.0.0.1:1/x")
    assert result.exit_code == 2
    assert "ss@" not in result.stderr and "p@ss" not in result.stderr


def test_a_one_letter_password_is_not_over_masked(cli: Any) -> None:
    result = cli("spend", "--db", "postgresql://u:o@127.0.0.1:1/x")
    assert result.exit_code == 3
    assert "connect" in result.stderr and "c***nn" not in result.stderr


@pytest.mark.slow
def test_debug_traceback_scrubs_a_long_password() -> None:
    result = run_agora("--debug", "spend", "--db", "postgresql://u:Zq7-s3cretPW@127.0.0.1:1/x")
    assert result.exit_code == 3
    assert "Traceback" in result.stderr and "Zq7-s3cretPW" not in result.stderr


# --- 2. nothing stranded: every number and instant bounded before anything is written ----------


def _queued(engine: Any) -> str:
    seed_thread(engine)
    scope = Scope(None, "alice", "t1")
    with engine.begin() as conn:
        made = create_proposal(
            conn,
            NewProposal(scope=scope, tool_name="refund", input={}, run_id="r", tool_call_id="c"),
        )
        decide_proposal(conn, made.proposal.id, scope=scope, decision="approved", decided_by="bob")
    return made.proposal.id


def test_a_huge_lease_is_exit_2_and_claims_nothing(engine: Any, db_url: str, cli: Any) -> None:
    pid = _queued(engine)
    scope = ["--actor", "alice", "--thread", "t1", "--no-tenant"]
    huge = "100000000000000000"
    for args in (
        ["claim-next", "--worker", "w"],
        ["claim", pid, *scope, "--worker", "w"],
        ["renew", pid, "--token", "x", "--generation", "1"],
    ):
        result = cli("proposals", *args, "--lease-ms", huge, "--db", db_url, "--json")
        assert result.exit_code == 2, result.stdout
        assert no_data(result)
    with engine.connect() as conn:
        state = conn.execute(select(action_proposal.c.execution_state)).scalar()
    assert state == "queued"
    listed = cli("proposals", "list", *scope, "--db", db_url, "--json")
    assert listed.exit_code == 0


@pytest.mark.parametrize(
    "args",
    [
        [
            "proposals",
            "settle",
            "x",
            "--token",
            "t",
            "--generation",
            "99999999999999999999",
            "--succeeded",
        ],
        ["spend", "--by", "day", "--from", "2026-01-01", "--to", "9999-12-31", "--chart"],
        ["quota", "--actor", "a", "--day-usd", "nan"],
        ["quota", "--actor", "a", "--month-usd", "inf"],
        ["quota", "--actor", "a", "--day-usd", "-1"],
        ["quota", "--actor", "a", "--day-tokens", "99999999999999999999"],
        ["quota", "--actor", "a", "--at", "10000-01-01T00:00:00Z"],
    ],
)
def test_out_of_range_numbers_are_exit_2(args: list[str], db_url: str, cli: Any) -> None:
    result = cli(*args, "--db", db_url)
    assert result.exit_code == 2, result.stdout + result.stderr
    assert result.stderr.startswith("error: ") and "unexpected" not in result.stderr


def test_the_edges_of_time_are_printed_with_four_digit_years(db_url: str, cli: Any) -> None:
    first = cli(
        "quota", "--actor", "alice", "--at", "0001-01-01T00:00:00Z", "--db", db_url, "--json"
    )
    assert first.exit_code == 0, first.stderr
    assert first.json()["at"] == "0001-01-01T00:00:00.000Z"
    assert first.json()["month"]["to"] == "0001-01-31T23:59:59.999Z"
    last = cli(
        "quota", "--actor", "alice", "--at", "9999-12-31T23:59:59Z", "--db", db_url, "--json"
    )
    assert last.exit_code == 0, last.stderr
    assert last.json()["month"]["to"] == "9999-12-31T23:59:59.999Z"


# --- 3. db backfill from several processes at once ----------------------------------------------


@pytest.mark.slow
def test_backfill_from_three_processes_leaves_nothing(engine: Any, db_url: str) -> None:
    insert_legacy(engine, 3_000)
    procs = [
        subprocess.Popen(
            [AGORA, "db", "backfill", "--limit", "100", "--db", db_url, "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    docs = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        docs.append(json.loads(out))
    assert [d["remaining"] for d in docs] == [0, 0, 0]
    assert sum(d["backfilled"] for d in docs) == 3_000


# --- 4. demo --force keeps an operator's prices ------------------------------------------------


def test_demo_force_never_retires_a_manual_price(db_url: str, engine: Any, cli: Any) -> None:
    assert cli("demo", "--db", db_url).exit_code == 0
    manual = cli("prices", "set", "gpt-4o-mini", "--input", "9", "--output", "9", "--db", db_url)
    assert manual.exit_code == 0, manual.stderr
    assert cli("demo", "--db", db_url, "--force").exit_code == 0
    with engine.connect() as conn:
        current = conn.execute(
            select(model_pricing.c.source, model_pricing.c.input_price_per_1m).where(
                model_pricing.c.model_id == "gpt-4o-mini", model_pricing.c.is_current == 1
            )
        ).all()
    assert [tuple(r) for r in current] == [("manual", 9.0)]


# --- 5./6. hostile text reaches no terminal; CSV cells are not formulas -------------------------


def test_frames_tail_shows_control_sequences_as_escapes(engine: Any, db_url: str, cli: Any) -> None:
    frames = [
        {"type": "text-delta", "id": "t", "delta": f"hi {OSC52}there{CLEAR}\nline two\tend"},
    ]
    with engine.begin() as conn:
        conn.execute(
            stream_frame.insert(),
            [
                {"run_id": "r1", "seq": i + 1, "frame": json.dumps(f), "created_at": 1}
                for i, f in enumerate(frames)
            ]
            + [{"run_id": "r1", "seq": 2, "frame": None, "created_at": 1}],
        )
    result = cli("frames", "tail", "r1", "--db", db_url)
    assert result.exit_code == 0, result.stderr
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "\\x1b]52;c;" in result.stdout and "\\x1b[2J" in result.stdout
    assert "\nline two" in result.stdout and "end" in result.stdout  # newlines stay
    raw = cli("frames", "tail", "r1", "--db", db_url, "--json")
    assert json.loads(raw.stdout.splitlines()[0])["frame"]["delta"] == frames[0]["delta"]


def test_threads_and_spend_escape_hostile_text(engine: Any, db_url: str, cli: Any) -> None:
    seed_thread(engine, title=f"evil{OSC52}", actor_ref=f"al{CLEAR}ice")
    with engine.begin() as conn:
        append_message(conn, thread_id="t1", role="user", content=f"hello{OSC52}\nworld")
        conn.execute(
            token_usage.insert().values(
                **ledger_row(1, model_id=f"m{CLEAR}x", cost_usd=None, cost_source=None)
            )
        )
    outputs = [
        cli("threads", "list", "--db", db_url),
        cli("threads", "show", "t1", "--db", db_url),
        cli("spend", "--by", "model", "--from", "2026-03-01", "--to", "2026-03-31", "--db", db_url),
        cli("spend", "--by", "actor", "--from", "2026-03-01", "--to", "2026-03-31", "--db", db_url),
    ]
    for result in outputs:
        assert result.exit_code == 0, result.stderr
        assert "\x1b" not in result.stdout + result.stderr and "\x07" not in result.stdout
        assert "\\x1b" in result.stdout
    assert "hello\\x1b]52;c;" in outputs[1].stdout and "\nworld" in outputs[1].stdout
    shown = cli("threads", "show", "t1", "--db", db_url, "--json").json()
    assert shown["thread"]["title"] == f"evil{OSC52}"  # --json stays byte-exact


def test_csv_cells_that_look_like_formulas_are_neutralised(
    engine: Any, db_url: str, cli: Any
) -> None:
    seed_thread(engine)
    with engine.begin() as conn:
        conn.execute(
            token_usage.insert(),
            [
                ledger_row(1, model_id='=HYPERLINK("http://x")'),
                ledger_row(2, model_id="@SUM(A1)"),
                ledger_row(3, model_id="+1", cost_usd=0.25),
            ],
        )
    result = cli("spend", "--from", "2026-03-01", "--to", "2026-03-31", "--db", db_url, "--csv")
    assert result.exit_code == 0, result.stderr
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    keys = {r["key"] for r in rows}
    assert {'\'=HYPERLINK("http://x")', "'@SUM(A1)", "'+1", "TOTAL"} == keys
    assert {r["cost_usd"] for r in rows} >= {"0.5", "0.25"}  # numbers untouched


# --- 7./18. strict JSON, finite money without float noise ---------------------------------------


def test_library_json_payloads_are_strict_and_identities_have_one_verdict(engine: Any) -> None:
    from agora_cli.store._errors import InvalidInput

    seed_thread(engine)
    with engine.begin() as conn, pytest.raises(InvalidInput):
        append_message(conn, thread_id="t1", role="user", content="x", usage={"x": float("nan")})
    with engine.begin() as conn, pytest.raises(InvalidInput):
        create_thread(conn, actor_ref="😀" * 200)  # 400 UTF-16 units, as proposal scopes say
    with pytest.raises(InvalidInput):
        Scope(None, "😀" * 200, "t1")


def test_money_in_json_and_csv_has_no_float_noise(engine: Any, db_url: str, cli: Any) -> None:
    seed_thread(engine)
    with engine.begin() as conn:
        conn.execute(
            token_usage.insert(),
            [ledger_row(1, cost_usd=0.1), ledger_row(2, cost_usd=0.2)],
        )
    window = ["--from", "2026-03-01", "--to", "2026-03-31", "--db", db_url]
    doc = cli("spend", *window, "--json").json()
    assert doc["total"]["cost_usd"] == 0.3
    assert "0.30000000000000004" not in cli("spend", *window, "--csv").stdout


# --- 8. exact identities on MySQL's PAD SPACE collation too -------------------------------------


def test_trailing_spaces_never_match(engine: Any, db_url: str, cli: Any) -> None:
    seed_thread(engine, "demo-thread-12")
    with engine.begin() as conn:
        conn.execute(token_usage.insert().values(**ledger_row(1, thread_id="demo-thread-12")))
    gone = cli("threads", "delete", "demo-thread-12 ", "--yes", "--db", db_url)
    assert gone.exit_code == 1 and "no thread" in gone.stderr
    assert cli("threads", "show", "demo-thread-12 ", "--db", db_url).exit_code == 1
    with engine.connect() as conn:
        assert conn.execute(select(thread.c.id)).scalars().all() == ["demo-thread-12"]
    window = ["--from", "2026-03-01", "--to", "2026-03-31", "--db", db_url, "--json"]
    assert cli("spend", "--actor", "alice ", *window).json()["total"]["turns"] == 0
    assert cli("spend", "--actor", "alice", *window).json()["total"]["turns"] == 1
    q = cli("quota", "--actor", "alice  ", "--at", "2026-03-10T12:00:00Z", "--db", db_url, "--json")
    assert q.json()["day"]["tokens"] == 0


# --- 13./14. SQLite: readers never take the write lock, and never create a file -----------------


@pytest.mark.slow
def test_sqlite_reports_read_while_a_writer_holds_the_lock(tmp_path: Path, cli: Any) -> None:
    url = f"sqlite:///{tmp_path / 'busy.db'}"
    assert cli("demo", "--db", url).exit_code == 0
    writer = sqlite3.connect(tmp_path / "busy.db", isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("UPDATE agent_thread SET title = 'busy'")
    try:
        for args in (
            ("spend",),
            ("quota", "--actor", "alice"),
            ("threads", "list"),
            ("prices", "list"),
            ("db", "status"),
            ("db", "check"),
        ):
            started = time.monotonic()
            result = run_agora(*args, "--db", url, "--json", timeout=60)
            # quota exits 1 when the demo's exhausted budget applies: a verdict, read in full
            expected = 1 if args[0] == "quota" and json.loads(result.stdout)["exhausted"] else 0
            assert result.exit_code == expected, (args, result.stderr)
            assert time.monotonic() - started < 20, args
    finally:
        writer.execute("ROLLBACK")
        writer.close()


@pytest.mark.slow
def test_read_only_commands_never_create_a_sqlite_file(tmp_path: Path, cli: Any) -> None:
    missing = tmp_path / "typo.db"
    for args in (
        ("spend",),
        ("threads", "list"),
        ("db", "status"),
        ("db", "check"),
        ("prices", "list"),
    ):
        result = cli(*args, "--db", f"sqlite:///{missing}", "--json")
        assert result.exit_code == 3, (args, result.stdout)
        assert f"no database at {missing}" in result.stderr
        assert not missing.exists()
    proc = subprocess.run(
        [AGORA, "spend"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "AGORA_DATABASE_URL": ""},
    )
    assert proc.returncode == 3 and f"no database at {tmp_path / 'agora.db'}" in proc.stderr
    assert not (tmp_path / "agora.db").exists()


@pytest.mark.slow
def test_db_status_names_the_absolute_sqlite_path(tmp_path: Path) -> None:
    assert run_agora("demo", "--db", f"sqlite:///{tmp_path / 'a.db'}").exit_code == 0
    proc = subprocess.run(
        [AGORA, "db", "status", "--db", "sqlite:///a.db", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["database"] == str(tmp_path / "a.db")


# --- 16./17. one way to fail ----------------------------------------------------------------------


@pytest.mark.slow
def test_invalid_utf8_argument_is_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run(
        [AGORA.encode(), b"spend", b"--actor", b"\xff", b"--json"],
        capture_output=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["error"]["kind"] == "invalid_input"
    assert proc.stderr.decode().startswith("error: ") and proc.stderr.count(b"\n") == 1


def test_a_deep_json_document_is_exit_2(tmp_path: Path, db_url: str, cli: Any) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    result = cli("proposals", "create", "--file", str(deep), "--db", db_url)
    assert result.exit_code == 2 and "nested too deeply" in result.stderr


@pytest.mark.slow
def test_a_closed_stdout_is_a_quiet_exit(tmp_path: Path) -> None:
    assert run_agora("demo", "--db", f"sqlite:///{tmp_path / 'a.db'}").exit_code == 0
    proc = subprocess.run(
        f"{AGORA} spend --json --db sqlite:///{tmp_path / 'a.db'} >&-",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stderr == ""


@pytest.mark.slow
def test_a_table_into_a_closed_pipe_exits_141(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    assert run_agora("demo", "--db", url).exit_code == 0
    for command in ("spend --by tenant", "spend --by day --chart", "threads list", "prices list"):
        proc = subprocess.run(
            [
                "bash",
                "-c",
                f"{AGORA} {command} --db {url} | head -c 1 >/dev/null; echo ${{PIPESTATUS[0]}}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "COLUMNS": "40"},
        )
        # A short table may fit in the pipe before head leaves: then it is simply 0.
        assert proc.stdout.strip() in ("141", "0"), (command, proc.stdout, proc.stderr)
        # nothing but the note naming the columns 40 columns hid, when the table got that far
        assert all(line.startswith("note: ") for line in proc.stderr.splitlines()), command
    big = subprocess.run(
        [
            "bash",
            "-c",
            f"yes | head -c 300000 > /dev/null; {AGORA} spend --by day --chart "
            f"--from 2026-01-01 --to 2026-12-31 --db {url} | head -1 >/dev/null; "
            "echo ${PIPESTATUS[0]}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "400"},
    )
    assert big.stdout.strip() == "141" and big.stderr == ""


def test_errors_with_json_are_also_a_json_document(db_url: str, cli: Any) -> None:
    result = cli("threads", "show", "nope", "--db", db_url, "--json")
    assert result.exit_code == 1
    message = "no thread 'nope' (a short id needs at least 8 characters)"
    assert result.json() == {"error": {"exit_code": 1, "kind": "not_found", "message": message}}
    assert result.stderr == f"error: {message}\n"


def test_usage_errors_are_one_line_and_options_before_the_command_are_explained(cli: Any) -> None:
    bogus = cli("spend", "--bogus")
    assert bogus.exit_code == 2 and bogus.stderr.count("\n") == 1
    assert bogus.stderr.startswith("error: No such option: --bogus") and "╭" not in bogus.stderr
    early = cli("--db", "sqlite:///x.db", "spend", "--by", "model")
    assert early.exit_code == 2
    assert early.stderr == "error: options go after the command: agora spend --db URL\n"
    early_json = cli("--json", "threads", "list")
    assert early_json.exit_code == 2 and "agora threads list --json" in early_json.stderr
    assert early_json.json()["error"]["kind"] == "usage"


# --- 19. quota on an actor the ledger has never seen ----------------------------------------------


def test_quota_of_an_unknown_actor_says_so(engine: Any, db_url: str, cli: Any) -> None:
    seed_thread(engine)
    with engine.begin() as conn:
        conn.execute(token_usage.insert().values(**ledger_row(1)))
    typo = cli("quota", "--actor", "alcie", "--db", db_url, "--json")
    assert typo.exit_code == 0
    assert "no usage of actor 'alcie'" in typo.json()["notes"][0]
    assert "no usage of actor" in typo.stderr
    known = cli("quota", "--actor", "alice", "--db", db_url, "--json")
    assert known.json()["notes"] == [] and known.stderr == ""


# --- issue 25, finding 6: leaks and escapes ------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u@127.0.0.1:1/x?pass%77ord=S3cretZZ9",
        "postgresql://u@127.0.0.1:1/x?%70assword=S3cretZZ9&sslmode=disable",
        "mysql://u@127.0.0.1:1/x?PASS%57ORD=S3cretZZ9",
    ],
)
def test_a_percent_encoded_password_key_is_masked_everywhere(url: str, cli: Any) -> None:
    status = cli("db", "status", "--db", url, "--json")
    assert status.exit_code == 3 and status.json()["error"]["kind"] == "database_unreachable"
    shown = cli("config", "show", "--json", env={"AGORA_DATABASE_URL": url})
    assert shown.exit_code == 0 and "=***" in shown.json()["settings"]["db"]["value"]
    debug = cli("--debug", "spend", "--db", url)
    assert debug.exit_code == 3 and "Traceback" in debug.stderr
    for result in (status, shown, debug, cli("config", "show", env={"AGORA_DATABASE_URL": url})):
        assert "S3cret" not in result.stdout + result.stderr


def test_catalog_credentials_in_the_query_are_masked(cli: Any, tmp_path: Path) -> None:
    url = (
        "http://127.0.0.1:1/api.json?token=T0kenVALUE1&api_key=K3yVALUE2&key=K3yVALUE3"
        "&secret=S3cVALUE4&Api-Key=K3yVALUE5&x=1"
    )
    db = f"sqlite:///{tmp_path / 'a.db'}"
    assert cli("db", "provision", "--db", db).exit_code == 0
    env = {"AGORA_CACHE_DIR": str(tmp_path / "cache")}
    result = cli("prices", "seed", "--missing", "--catalog", url, "--timeout", "1", "--db", db)
    shown = cli("config", "show", env={**env, "AGORA_MODELS_DEV_URL": url})
    assert result.exit_code == 3 and "x=1" in result.stderr
    for out in (result, shown):
        assert "VALUE" not in out.stdout + out.stderr
    assert "token=***&api_key=***&key=***&secret=***&Api-Key=***&x=1" in result.stderr


def test_an_empty_password_parameter_keeps_the_drivers_reason(cli: Any) -> None:
    result = cli("db", "status", "--db", "postgresql://u@127.0.0.1:1/x?password=")
    assert result.exit_code == 3
    assert "?password=***: connection failed" in result.stderr
    assert "refused" in result.stderr.lower()


def test_a_bare_cr_in_a_csv_cell_is_quoted_and_its_formula_neutralised(
    engine: Any, db_url: str, cli: Any
) -> None:
    import csv
    import io

    seed_thread(engine)
    with engine.begin() as conn:
        conn.execute(token_usage.insert().values(**ledger_row(1, model_id="model\r=6")))
    result = cli("spend", "--from", "2026-03-01", "--to", "2026-03-31", "--db", db_url, "--csv")
    assert result.exit_code == 0, result.stderr
    assert '"model\r\'=6"' in result.stdout
    assert not any(line.startswith("=") for line in result.stdout.replace("\r", "\n").split("\n"))
    rows = list(csv.DictReader(io.StringIO(result.stdout, newline="")))
    assert [r["key"] for r in rows] == ["model\r'=6", "TOTAL"]


def _on_a_terminal(*args: str, env: dict[str, str] | None = None) -> str:
    """What ``agora ARGS`` writes to a terminal (a real pseudo-terminal as its stdout)."""
    import pty

    main_fd, child_fd = pty.openpty()
    proc = subprocess.Popen(
        [AGORA, *args], stdout=child_fd, stderr=subprocess.PIPE, env={**os.environ, **(env or {})}
    )
    os.close(child_fd)
    chunks = []
    while True:
        try:
            chunk = os.read(main_fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    proc.wait(timeout=60)
    os.close(main_fd)
    return b"".join(chunks).decode()


@pytest.mark.slow
def test_csv_escapes_controls_on_a_terminal_and_is_exact_into_a_pipe(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    assert run_agora("db", "provision", "--db", url).exit_code == 0
    model = f"m{OSC52}\x9b31m\u202eevil"
    engine = open_engine(url)
    seed_thread(engine)
    with engine.begin() as conn:
        conn.execute(token_usage.insert().values(**ledger_row(1, model_id=model)))
    engine.dispose()
    args = ("spend", "--from", "2026-03-01", "--to", "2026-03-31", "--db", url, "--csv")
    shown = _on_a_terminal(*args)
    assert "m\\x1b]52;c;" in shown and "\\x9b31m\\u202eevil" in shown
    assert "\x1b" not in shown and "\x9b" not in shown and "\u202e" not in shown
    piped = run_agora(*args)
    assert piped.exit_code == 0 and f"{model}," in piped.stdout


def test_titles_and_notes_built_from_input_are_escaped(engine: Any, db_url: str, cli: Any) -> None:
    hostile = f"ac{CLEAR}{OSC52}me"
    seed_thread(engine, tenant_ref=hostile)
    with engine.begin() as conn:
        conn.execute(token_usage.insert().values(**ledger_row(1, tenant_ref=hostile)))
    window = ("--from", "2026-03-01", "--to", "2026-03-31")
    db = ("--db", db_url, "--no-color")  # any \x1b left is the input's, not a colour
    outputs = [
        cli("tools", "stats", "--tenant", hostile, *db),
        cli("tools", "stats", "--tenant", hostile, *window, *db),
        cli("spend", "--by", "tenant", "--tenant", hostile, *window, *db),
        cli("spend", "--by", "tenant", "--tenant", hostile, *db),
        cli("quota", "--tenant", hostile, "--day-usd", "0.1", *db),
    ]
    for result in outputs:
        assert result.exit_code in (0, 1), result.stderr
        assert "\x1b" not in result.stdout + result.stderr, result.stdout
        assert "\x07" not in result.stdout + result.stderr
    assert "ac\\x1b[2J" in outputs[0].stdout


# --- issue 25, finding 7: exits a script can read ------------------------------------------------


@pytest.mark.slow
def test_help_into_a_pipe_that_closes_exits_141_quietly() -> None:
    for command in ("--help", "spend --help", "db --help"):
        proc = subprocess.run(
            ["bash", "-c", f"{AGORA} {command} | head -1 >/dev/null; echo ${{PIPESTATUS[0]}}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.stdout.strip() in ("141", "0"), (command, proc.stdout, proc.stderr)
        # nothing but the note naming the columns 40 columns hid, when the table got that far
        assert all(line.startswith("note: ") for line in proc.stderr.splitlines()), command


@pytest.mark.slow
@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_output_that_cannot_be_written_is_exit_4(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    assert run_agora("demo", "--db", url).exit_code == 0
    for command in ("spend", "spend --json", "spend --csv", "threads list", "--help"):
        proc = subprocess.run(
            f"{AGORA} {command} {'' if command == '--help' else '--db ' + url} >/dev/full",
            shell=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 4, (command, proc.stderr)
        assert proc.stderr == "error: the output could not be written: No space left on device\n"


def test_a_deeply_nested_config_file_is_exit_2_in_one_line(tmp_path: Path, cli: Any) -> None:
    deep = tmp_path / "config.toml"
    deep.write_text("[profiles.p]\nx = " + "[" * 10_000 + "]" * 10_000 + "\n")
    result = cli("--profile", "p", "config", "show", env={"AGORA_CONFIG": str(deep)})
    assert result.exit_code == 2
    assert result.stderr == f"error: {deep}: nested too deeply to be a config file\n"


@pytest.mark.slow
def test_a_failing_pager_never_loses_the_transcript(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    assert run_agora("db", "provision", "--db", url).exit_code == 0
    engine = open_engine(url)
    seed_thread(engine, title="the transcript")
    with engine.begin() as conn:
        append_message(conn, thread_id="t1", role="user", content="hello pager")
    engine.dispose()
    shown = _on_a_terminal("threads", "show", "t1", "--db", url, env={"AGORA_PAGER": "false"})
    assert "hello pager" in shown and "the transcript" in shown


# --- issue 25, finding 8: small lies -------------------------------------------------------------


def test_a_budget_update_keeps_who_created_it(db_url: str, cli: Any) -> None:
    base = ("budgets", "set", "--tenant", "acme", "--period", "month", "--db", db_url)
    assert cli(*base, "--usd", "5", "--by", "alice").exit_code == 0
    updated = cli(*base, "--usd", "7", "--by", "mallory", "--json")
    assert updated.exit_code == 0, updated.stderr
    listed = cli("budgets", "list", "--db", db_url, "--json").json()
    budgets = listed["budgets"] if isinstance(listed, dict) else listed
    assert [(b["limit_usd"], b["created_by"]) for b in budgets] == [(7.0, "alice")]


def test_the_last_week_of_9999_ends_in_9999(db_url: str, cli: Any) -> None:
    set_week = ("budgets", "set", "--actor", "alice", "--period", "week", "--usd", "5")
    assert cli(*set_week, "--by", "ops", "--db", db_url).exit_code == 0
    result = cli("quota", "--all", "--at", "9999-12-31T12:00:00Z", "--db", db_url, "--json")
    assert result.exit_code in (0, 1), result.stderr
    text = result.stdout
    assert "out of range" not in text and "since 1970" not in text
    assert '"to": "9999-12-31T23:59:59.999Z"' in text


@pytest.mark.parametrize(
    ("args", "shown", "hidden"),
    [
        (["spend", "--last", "foo"], "error: --last 'foo'", "----last"),
        (["spend", "--last", "0d"], "error: --last '0d'", "----last"),
        (
            ["db", "redact", "--tool-io", "--older-than", "x", "--yes"],
            "--older-than 'x'",
            "older_than",
        ),
        (["threads", "list", "--actor", " "], "error: --actor must be", "actor_ref"),
        (["tools", "stats", "--tenant", " "], "error: --tenant must be", "tenant_ref"),
        (
            ["budgets", "set", "--tenant", "acme", "--period", "month", "--by", "o"],
            "limit",
            "limit_usd",
        ),
    ],
)
def test_errors_name_the_flag_typed_never_an_internal_name(
    args: list[str], shown: str, hidden: str, tmp_path: Path, cli: Any
) -> None:
    db = f"sqlite:///{tmp_path / 'a.db'}"
    assert cli("db", "provision", "--db", db).exit_code == 0
    result = cli(*args, "--db", db)
    assert result.exit_code == 2
    assert shown in result.stderr and hidden not in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["spend", "--last", "\u0663d"],
        ["spend", "--from", "\u0662\u0660\u0662\u0666-01-01"],
        ["runs", "list", "--limit", "\u0661\u0662"],
        ["runs", "list", "--limit", "\uff11\uff12"],
        ["proposals", "inbox", "--expiring-within", "1M"],
    ],
)
def test_unicode_digits_and_a_capital_m_are_refused(
    args: list[str], tmp_path: Path, cli: Any
) -> None:
    db = f"sqlite:///{tmp_path / 'a.db'}"
    assert cli("db", "provision", "--db", db).exit_code == 0
    result = cli(*args, "--db", db)
    assert result.exit_code == 2 and result.stderr.startswith("error: ")


def test_minutes_are_m_or_min(tmp_path: Path, cli: Any) -> None:
    db = f"sqlite:///{tmp_path / 'a.db'}"
    assert cli("db", "provision", "--db", db).exit_code == 0
    for spelled in ("1min", "90min", "1h30min", "30m"):
        result = cli("proposals", "inbox", "--expiring-within", spelled, "--db", db)
        assert result.exit_code == 0, (spelled, result.stderr)


def test_minus_zero_dollars_is_zero(db_url: str, cli: Any) -> None:
    base = ("budgets", "set", "--tenant", "acme", "--period", "month", "--by", "ops")
    shown = cli(*base, "--usd", "-0.0", "--db", db_url)
    assert shown.exit_code == 0 and "$0.0000" in shown.stdout and "-0" not in shown.stdout
    doc = cli("budgets", "list", "--db", db_url, "--json")
    assert '"limit_usd": 0.0' in doc.stdout and "-0.0" not in doc.stdout


def test_a_value_under_profiles_says_what_is_wrong(tmp_path: Path, cli: Any) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[profiles]\nx = 5\n")
    result = cli("--profile", "x", "config", "show", env={"AGORA_CONFIG": str(config)})
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {config}:2: x = … under [profiles] is a value, not a profile; "
        'write [profiles.x] and its keys (db = "…") under it\n'
    )


def test_equal_costs_sort_the_same_folded_and_raw(engine: Any, db_url: str, cli: Any) -> None:
    seed_thread(engine)
    with engine.begin() as conn:
        conn.execute(
            token_usage.insert(),
            [  # a: 0.1 + 0.2 (0.30000000000000004 summed), fewer tokens; b: 0.3, more tokens
                ledger_row(1, model_id="a", cost_usd=0.1),
                ledger_row(2, model_id="a", cost_usd=0.2),
                ledger_row(3, model_id="b", cost_usd=0.3, input_tokens=1000),
            ],
        )
    window = ("--from", "2026-03-01", "--to", "2026-03-31", "--db", db_url, "--json")
    raw = cli("spend", *window, "--raw")
    assert cli("spend", "fold", "--through", "2026-03-31", "--db", db_url).exit_code == 0
    folded = cli("spend", *window)
    assert folded.json()["folded_days"] > 0
    for result in (raw, folded):
        assert result.exit_code == 0, result.stderr
        assert [r["key"] for r in result.json()["rows"]] == ["b", "a"]


def test_db_upgrade_sql_never_creates_the_sqlite_file(tmp_path: Path, cli: Any) -> None:
    path = tmp_path / "new.db"
    result = cli("db", "upgrade", "--sql", "--db", f"sqlite:///{path}")
    assert result.exit_code == 0, result.stderr
    assert "CREATE TABLE agent_alembic_version" in result.stdout
    assert not path.exists()
    assert f"no database at {path} yet" in result.stderr


def test_a_readable_config_with_a_password_and_an_open_kek_file_are_warned(
    tmp_path: Path, cli: Any
) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[profiles.p]\ndb = "postgresql://u:Pw-s3cret@127.0.0.1:1/x"\n')
    config.chmod(0o644)
    env = {"AGORA_CONFIG": str(config)}
    shown = cli("--profile", "p", "config", "show", "--json", env=env)
    assert shown.exit_code == 0 and shown.json()["profile"] == "p"
    assert f"warning: {config} holds a password and others can read it (mode 0644)" in shown.stderr
    assert "s3cret" not in shown.stderr + shown.stdout
    config.chmod(0o600)
    assert cli("--profile", "p", "config", "show", env=env).stderr == ""
    kek = tmp_path / "kek"
    kek.write_bytes(os.urandom(32))
    kek.chmod(0o666)
    db = f"sqlite:///{tmp_path / 'a.db'}"
    assert cli("db", "provision", "--db", db).exit_code == 0
    listed = cli("keys", "list", "--db", db, env={"AGORA_KEK_FILE": str(kek)})
    assert listed.exit_code == 0, listed.stderr
    assert f"warning: AGORA_KEK_FILE {kek} is open to others (mode 0666)" in listed.stderr
    kek.chmod(0o600)
    assert cli("keys", "list", "--db", db, env={"AGORA_KEK_FILE": str(kek)}).stderr == ""


@pytest.mark.slow
def test_four_rotations_at_once_all_succeed(db_url: str, cli: Any) -> None:
    from agora_cli.store._sealing import generate_kek

    env = {"AGORA_KEK": generate_kek(), "AGORA_KEK_FILE": ""}
    made = cli("keys", "create", "--tenant", "acme", "--db", db_url, env=env)
    assert made.exit_code == 0, made.stderr
    procs = [
        subprocess.Popen(
            [AGORA, "keys", "rotate", "--tenant", "acme", "--db", db_url, "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **env},
        )
        for _ in range(4)
    ]
    results = [(p.wait(timeout=120), *p.communicate()) for p in procs]
    assert [code for code, _, _ in results] == [0, 0, 0, 0], [err for _, _, err in results]
    keys = cli("keys", "list", "--tenant", "acme", "--db", db_url, "--json", env=env)
    assert keys.exit_code == 0, keys.stderr
    doc = keys.json()
    rows = doc["keys"] if isinstance(doc, dict) else doc
    assert len(rows) == 5 and sum(1 for r in rows if r.get("retired_at") is None) == 1
