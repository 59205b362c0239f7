"""Schema commands an Alembic user can trust (issue 28, item 6): `db history`, `db stamp`,
`db downgrade BRANCH@base`, `db upgrade --sql` on a provisioned database, and the status words
and notes of `db upgrade`/`db status` with the optional branches applied; through the real
command line, on every dialect."""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
from helpers import no_data
from sqlalchemy import inspect as sa_inspect
from sqlalchemy import text
from sqlalchemy.engine import make_url

from agora_cli.store._engine import open_engine
from agora_cli.store._migrate import VERSION_TABLE, head_revision

HEAD = head_revision()  # the main chain's head, whatever it is when this runs
VERSIONS = Path(__file__).resolve().parents[2] / "migrations" / "versions"


def _shipped() -> dict[str, str | None]:
    """Every revision in migrations/versions and the one it revises, read from the files (not
    from Alembic, which `db history` reads)."""
    found: dict[str, str | None] = {}
    for path in sorted(VERSIONS.glob("*.py")):
        source = path.read_text()
        rev = re.search(r'^revision = "([^"]+)"', source, re.M)
        if rev is None:
            continue
        down = re.search(r'^down_revision = (None|"([^"]+)")', source, re.M)
        assert down is not None, path
        found[rev.group(1)] = down.group(2)
    return found


def _one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def _versions(url: str) -> list[str]:
    engine = open_engine(url)
    try:
        with engine.connect() as conn:
            if not sa_inspect(conn).has_table(VERSION_TABLE):
                return []
            rows = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}"))
            return sorted(r[0] for r in rows)
    finally:
        engine.dispose()


def _exec(url: str, *statements: str) -> None:
    engine = open_engine(url)
    try:
        with engine.begin() as conn:
            for statement in statements:
                conn.exec_driver_sql(statement)
    finally:
        engine.dispose()


def _tables(url: str) -> set[str]:
    engine = open_engine(url)
    try:
        return set(sa_inspect(engine).get_table_names())
    finally:
        engine.dispose()


def _run_script(url: str, dialect: str, script: str) -> None:
    """Run an SQL script as an operator would: psql or mysql against the server (stopping at
    the first error), Python's sqlite3 ``executescript`` for SQLite."""
    parsed = make_url(url)
    if dialect == "sqlite":
        conn = sqlite3.connect(str(parsed.database))
        try:
            conn.executescript(script)
        finally:
            conn.close()
        return
    client = "psql" if dialect == "postgresql" else "mysql"
    if shutil.which(client) is None:
        pytest.skip(f"the {client} client is not installed")
    host, port, user = parsed.host or "127.0.0.1", str(parsed.port or ""), parsed.username or ""
    if dialect == "postgresql":
        args = ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", host, "-U", user]
        args += ["-p", port] if port else []
        args += ["-d", str(parsed.database)]
    else:
        args = ["mysql", "--batch", "-h", host, "-u", user]
        args += ["-P", port] if port else []
        args += [str(parsed.database)]
    proc = subprocess.run(args, input=script, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


# --- db history ------------------------------------------------------------------------------


def test_history_lists_every_branch_in_order_with_what_is_applied(empty_url: str, cli: Any) -> None:
    shipped = _shipped()
    before = cli("db", "history", "--db", empty_url, "--json")
    assert before.exit_code == 0, before.stderr
    doc = before.json()
    assert set(doc) == {"database", "revisions", "current"}
    assert doc["current"] == []
    revisions = doc["revisions"]
    assert {r["revision"]: r["down_revision"] for r in revisions} == shipped
    for r in revisions:
        assert set(r) == {"revision", "down_revision", "branch", "message", "applied", "head"}
        assert r["applied"] is False and r["message"]
    # the main chain first, base to head, each revision after the one it revises
    main = [r for r in revisions if r["branch"] == "agent"]
    assert revisions[: len(main)] == main
    assert main[0]["down_revision"] is None and main[-1]["revision"] == HEAD
    assert [r["down_revision"] for r in main[1:]] == [r["revision"] for r in main[:-1]]
    branches = {r["branch"] for r in revisions}
    assert branches >= {"agent", "documents", "rag", "rollup"}
    for branch in branches:  # each branch's last revision, and it alone, is its head
        chain = [r for r in revisions if r["branch"] == branch]
        assert [r["head"] for r in chain] == [False] * (len(chain) - 1) + [True]
        assert chain[0]["down_revision"] is None

    assert cli("db", "upgrade", "--db", empty_url).exit_code == 0
    assert cli("db", "upgrade", "rollup@head", "--db", empty_url).exit_code == 0
    after = cli("db", "history", "--db", empty_url, "--json").json()
    rollup = [r["revision"] for r in after["revisions"] if r["branch"] == "rollup"]
    assert sorted(after["current"]) == sorted([HEAD, rollup[-1]])
    applied = {r["revision"] for r in after["revisions"] if r["applied"]}
    assert applied == {r["revision"] for r in main} | set(rollup)

    shown = cli("db", "history", "--db", empty_url)
    assert shown.exit_code == 0, shown.stderr
    line = next(x for x in shown.stdout.splitlines() if re.search(rf"\b{HEAD}\b.*\bhead\b", x))
    assert "yes" in line and main[-1]["message"][:20] in line
    assert shown.stderr.strip() == f"recorded: {', '.join(sorted(after['current']))}"


def test_history_needs_no_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Any
) -> None:
    """No --db, no AGORA_DATABASE_URL and no ./agora.db: the revisions alone, nothing created."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGORA_DATABASE_URL", raising=False)
    result = cli("db", "history", "--json")
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    assert doc["database"] is None and doc["current"] is None
    assert {r["revision"] for r in doc["revisions"]} == set(_shipped())
    assert all(r["applied"] is None for r in doc["revisions"])
    people = cli("db", "history")
    assert people.exit_code == 0 and "applied is unknown" in people.stderr
    assert not (tmp_path / "agora.db").exists()


# --- db stamp --------------------------------------------------------------------------------


def test_stamp_records_head_on_a_provisioned_database(empty_url: str, cli: Any) -> None:
    assert cli("db", "provision", "--db", empty_url).exit_code == 0
    stamped = cli("db", "stamp", "agent@head", "--db", empty_url, "--json")
    assert stamped.exit_code == 0, stamped.stderr
    assert stamped.json() == {
        "branch": "agent",
        "from": None,
        "to": HEAD,
        "stamped": True,
        "forced": False,
        "differences": [],
        "notes": [],
    }
    assert _versions(empty_url) == [HEAD]
    again = cli("db", "stamp", HEAD, "--db", empty_url)
    assert again.exit_code == 0 and "Already recorded" in again.stdout
    upgraded = cli("db", "upgrade", "--db", empty_url)
    assert upgraded.exit_code == 0 and "Already at" in upgraded.stdout
    assert "note:" not in upgraded.stderr


def test_stamp_refuses_a_revision_the_live_schema_is_not(
    empty_url: str, dialect: str, cli: Any
) -> None:
    """A database as the revision before head left it (its own offline SQL, run for real):
    stamping head is refused, naming what differs and the revision the schema is."""
    previous = _shipped()[HEAD]
    assert previous is not None
    script = cli("db", "upgrade", previous, "--sql", "--db", empty_url)
    assert script.exit_code == 0, script.stderr
    _run_script(empty_url, dialect, script.stdout)
    assert _versions(empty_url) == [previous]

    refused = cli("db", "stamp", "agent@head", "--db", empty_url, "--json")
    assert refused.exit_code == 1, refused.stdout
    assert no_data(refused)
    line = _one_error_line(refused.stderr)
    assert f"not what revision {HEAD} leaves" in line
    assert f"`agora db stamp {previous}`" in line and "--force" in line
    assert _versions(empty_url) == [previous]  # nothing recorded

    assert cli("db", "stamp", previous, "--db", empty_url).exit_code == 0  # it is that one

    forced = cli("db", "stamp", "agent@head", "--force", "--db", empty_url, "--json")
    assert forced.exit_code == 0, forced.stderr
    doc = forced.json()
    assert doc["forced"] is True and doc["to"] == HEAD and doc["differences"]
    assert {d["kind"] for d in doc["differences"]} <= {
        "missing_table",
        "missing_column",
        "missing_index",
        "retired_index",
    }
    assert "although the live schema differs" in forced.stderr
    assert _versions(empty_url) == [HEAD]
    # what the refusal prevents: the version table at head hides the drift from the upgrade
    drifted = cli("db", "upgrade", "--db", empty_url)
    assert drifted.exit_code == 1 and "agora db provision" in drifted.stderr
    assert cli("db", "provision", "--db", empty_url).exit_code == 0
    assert cli("db", "upgrade", "--db", empty_url).exit_code == 0


def test_stamp_refuses_a_schema_no_revision_matches(empty_url: str, cli: Any) -> None:
    assert cli("db", "provision", "--db", empty_url).exit_code == 0
    _exec(empty_url, "ALTER TABLE agent_thread DROP COLUMN summary")
    for target in ("agent@head", "0001"):
        refused = cli("db", "stamp", target, "--db", empty_url)
        assert refused.exit_code == 1
        line = _one_error_line(refused.stderr)
        assert "agent_thread.summary is missing" in line
        assert "no revision's schema matches it" in line and "agora db check" in line
    assert _versions(empty_url) == []
    empty = cli("db", "stamp", "agent@head", "--db", empty_url)  # nothing at all: refused too
    assert empty.exit_code == 1


def test_stamp_behind_the_schema_says_what_upgrade_will_do(empty_url: str, cli: Any) -> None:
    assert cli("db", "upgrade", "--db", empty_url).exit_code == 0
    result = cli("db", "stamp", "0001", "--db", empty_url, "--json")
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    assert (doc["from"], doc["to"], doc["stamped"]) == (HEAD, "0001", True)
    assert any(f"also what revision {HEAD} leaves" in n for n in doc["notes"])
    assert _versions(empty_url) == ["0001"]
    status = cli("db", "status", "--db", empty_url)
    line = next(x for x in status.stdout.splitlines() if x.startswith("schema current"))
    assert "yes" not in line and "0001" in line
    up = cli("db", "upgrade", "--db", empty_url, "--json")
    assert up.exit_code == 0, up.stderr
    assert up.json()["from"] == "0001" and up.json()["to"] == HEAD


def test_stamp_an_optional_branch_and_its_base(empty_url: str, dialect: str, cli: Any) -> None:
    assert cli("db", "upgrade", "--db", empty_url).exit_code == 0
    missing = cli("db", "stamp", "rollup@head", "--db", empty_url)
    assert missing.exit_code == 1
    line = _one_error_line(missing.stderr)
    assert "agent_usage_model_daily does not exist" in line
    assert "agora db upgrade rollup@head" in line
    assert _versions(empty_url) == [HEAD]

    assert cli("db", "upgrade", "rollup@head", "--db", empty_url).exit_code == 0
    (rollup,) = [v for v in _versions(empty_url) if v != HEAD]
    base = cli("db", "stamp", "rollup@base", "--db", empty_url, "--json")
    assert base.exit_code == 0, base.stderr
    assert (base.json()["from"], base.json()["to"]) == (rollup, None)
    assert _versions(empty_url) == [HEAD]  # the main chain's row is kept
    assert "agent_usage_model_daily" in _tables(empty_url)  # the schema is not touched
    back = cli("db", "stamp", "rollup@head", "--db", empty_url)
    assert back.exit_code == 0, back.stderr
    assert sorted(_versions(empty_url)) == sorted([HEAD, rollup])

    documents = cli("db", "stamp", "documents@head", "--db", empty_url)
    if dialect == "postgresql":  # its tables do not exist
        assert documents.exit_code == 1 and "agent_document" in documents.stderr
    else:  # the branch creates nothing here
        assert documents.exit_code == 0, documents.stderr


@pytest.mark.parametrize("bad", ["nonsense", "nonsense@head", "head"])
def test_stamp_an_unknown_revision_is_exit_2(bad: str, db_url: str, cli: Any) -> None:
    result = cli("db", "stamp", bad, "--db", db_url)
    assert result.exit_code == 2
    _one_error_line(result.stderr)


# --- db downgrade ----------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["agent@base", "0001", HEAD, "base"])
def test_downgrade_of_the_main_chain_is_refused_before_connecting(target: str, cli: Any) -> None:
    # an unreachable server: a command that connected first would exit 3
    result = cli("db", "downgrade", target, "--db", "postgresql://u@127.0.0.1:1/x", "--json")
    assert result.exit_code == 2, result.stderr
    assert no_data(result)
    line = _one_error_line(result.stderr)
    assert "rollup@base" in line
    if target != "base":
        assert "forward-only" in line and "restore a backup" in line


def test_downgrade_of_the_main_chain_changes_nothing(empty_url: str, cli: Any) -> None:
    assert cli("db", "upgrade", "--db", empty_url).exit_code == 0
    before = _tables(empty_url)
    assert cli("db", "downgrade", "agent@base", "--yes", "--db", empty_url).exit_code == 2
    assert _tables(empty_url) == before and _versions(empty_url) == [HEAD]
    assert cli("db", "check", "--db", empty_url).exit_code == 0


def test_downgrade_an_optional_branch_to_its_base(empty_url: str, cli: Any) -> None:
    assert cli("db", "upgrade", "--db", empty_url).exit_code == 0
    assert cli("db", "upgrade", "rollup@head", "--db", empty_url).exit_code == 0
    (rollup,) = [v for v in _versions(empty_url) if v != HEAD]

    offline = cli("db", "downgrade", "rollup@base", "--sql", "--db", empty_url)
    assert offline.exit_code == 0, offline.stderr
    assert "DROP TABLE IF EXISTS agent_usage_model_daily;" in offline.stdout
    assert f"'{rollup}'" in offline.stdout and "DELETE FROM agent_alembic_version" in offline.stdout
    assert "agent_usage_model_daily" in _tables(empty_url)  # --sql ran nothing

    _exec(
        empty_url,
        "INSERT INTO agent_usage_model_daily (day, model_id, turns, input_tokens, "
        "output_tokens, cache_read_tokens, cache_write_tokens, estimated_usd, provider_usd, "
        "unpriced_turns, folded_at) VALUES (1, 'm', 1, 1, 1, 0, 0, 0, 0, 0, 1)",
    )
    asked = cli("db", "downgrade", "rollup@base", "--db", empty_url)  # no terminal to ask on
    assert asked.exit_code == 2
    line = _one_error_line(asked.stderr)
    assert "agent_usage_model_daily (1 rows)" in line and "--yes" in line
    assert "agent_usage_model_daily" in _tables(empty_url)

    done = cli("db", "downgrade", "rollup@base", "--yes", "--db", empty_url, "--json")
    assert done.exit_code == 0, done.stderr
    assert done.json() == {
        "branch": "rollup",
        "from": rollup,
        "to": None,
        "undone": [rollup],
        "tables": [{"table": "agent_usage_model_daily", "rows": 1, "rows_exact": True}],
    }
    assert "agent_usage_model_daily" not in _tables(empty_url)
    assert _versions(empty_url) == [HEAD]
    assert cli("db", "check", "--db", empty_url).exit_code == 0

    again = cli("db", "downgrade", "rollup@base", "--db", empty_url)
    assert again.exit_code == 0 and "not applied here: nothing to undo" in again.stdout


def test_downgrade_asks_on_a_terminal_before_dropping_rows(
    empty_url: str, monkeypatch: pytest.MonkeyPatch, cli: Any
) -> None:
    monkeypatch.setattr("agora_cli.cli.db.history._stdin_is_terminal", lambda: True)
    assert cli("db", "upgrade", "--db", empty_url).exit_code == 0
    assert cli("db", "upgrade", "rollup@head", "--db", empty_url).exit_code == 0
    _exec(
        empty_url,
        "INSERT INTO agent_usage_model_daily (day, model_id, turns, input_tokens, "
        "output_tokens, cache_read_tokens, cache_write_tokens, unpriced_turns, folded_at) "
        "VALUES (1, 'm', 1, 1, 1, 0, 0, 0, 1), (2, 'm', 1, 1, 1, 0, 0, 0, 1)",
    )
    kept = cli("db", "downgrade", "rollup@base", "--db", empty_url, input="n\n")
    assert kept.exit_code == 1
    assert "agent_usage_model_daily (2 rows)" in kept.stderr and "nothing dropped" in kept.stderr
    assert "agent_usage_model_daily" in _tables(empty_url) and len(_versions(empty_url)) == 2
    dropped = cli("db", "downgrade", "rollup@base", "--db", empty_url, input="y\n")
    assert dropped.exit_code == 0, dropped.stderr
    assert "dropped agent_usage_model_daily (2 rows)" in dropped.stdout
    assert "agent_usage_model_daily" not in _tables(empty_url)
    assert _versions(empty_url) == [HEAD]


def test_downgrade_documents_where_it_did_nothing_removes_its_row(
    empty_url: str, dialect: str, cli: Any
) -> None:
    assert cli("db", "upgrade", "--db", empty_url).exit_code == 0
    assert cli("db", "upgrade", "documents@head", "--db", empty_url).exit_code == 0
    tables = _tables(empty_url)
    result = cli("db", "downgrade", "documents@base", "--db", empty_url, "--json")
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    assert doc["branch"] == "documents" and doc["to"] is None and len(doc["undone"]) == 1
    assert _versions(empty_url) == [HEAD]
    if dialect == "postgresql":
        assert {t["table"] for t in doc["tables"]} == {"agent_document", "agent_document_node"}
        assert not {"agent_document", "agent_document_node"} & _tables(empty_url)
    else:
        assert doc["tables"] == [] and _tables(empty_url) == tables


# --- db upgrade --sql on a database that is not empty ----------------------------------------


def _offline_then_run(url: str, dialect: str, cli: Any) -> str:
    result = cli("db", "upgrade", "--sql", "--db", url)
    assert result.exit_code == 0, result.stderr
    _run_script(url, dialect, result.stdout)
    check = cli("db", "check", "--db", url)
    assert check.exit_code == 0, check.stdout
    assert cli("db", "status", "--db", url, "--json").json()["revision"] == HEAD
    return str(result.stdout)


def test_upgrade_sql_on_a_provisioned_database_runs_on_the_server(
    empty_url: str, dialect: str, cli: Any
) -> None:
    """`db provision` made the schema, no revision is recorded: the script holds the version
    table's rows and no DDL that fails (it printed 0001's CREATE TABLEs, then `ADD COLUMN
    discovery_state`: duplicate column)."""
    assert cli("db", "provision", "--db", empty_url).exit_code == 0
    script = _offline_then_run(empty_url, dialect, cli)
    assert "discovery_state" not in script and "CREATE INDEX" not in script
    assert "INSERT INTO agent_alembic_version" in script


def test_upgrade_sql_from_a_revision_upgraded_online_runs_on_the_server(
    empty_url: str, dialect: str, cli: Any
) -> None:
    """Online, every revision provisions head's schema: a database upgraded to 0002 already has
    what 0003 onwards add, and the script must not add it again."""
    assert cli("db", "upgrade", "0002", "--db", empty_url).exit_code == 0
    assert cli("db", "upgrade", "rollup@head", "--db", empty_url).exit_code == 0
    script = _offline_then_run(empty_url, dialect, cli)
    assert "ui_capabilities" not in script and "0002 -> 0003" in script
    assert len(_versions(empty_url)) == 2  # the rollup branch's row is kept


def test_upgrade_sql_from_an_older_schema_adds_what_each_revision_added(
    empty_url: str, dialect: str, cli: Any
) -> None:
    """A database exactly as 0001 left it (0001's own script), with a column dropped by hand:
    the script adds each revision's objects and repairs the column, as the online upgrade
    would."""
    first = cli("db", "upgrade", "0001", "--sql", "--db", empty_url)
    _run_script(empty_url, dialect, first.stdout)
    _exec(empty_url, "ALTER TABLE agent_thread DROP COLUMN summary")
    script = _offline_then_run(empty_url, dialect, cli)
    assert "discovery_state" in script and "ui_capabilities" in script and "summary" in script


def test_upgrade_sql_of_an_optional_branch_beside_the_main_chain(
    empty_url: str, dialect: str, cli: Any
) -> None:
    """The version table exists (the main chain's row): the branch's script must not create it
    again, and a table that is already there is not created twice."""
    assert cli("db", "upgrade", "--db", empty_url).exit_code == 0
    result = cli("db", "upgrade", "rollup@head", "--sql", "--db", empty_url)
    assert result.exit_code == 0, result.stderr
    assert "CREATE TABLE agent_alembic_version" not in result.stdout
    _run_script(empty_url, dialect, result.stdout)
    assert "agent_usage_model_daily" in _tables(empty_url) and len(_versions(empty_url)) == 2
    _exec(empty_url, f"DELETE FROM {VERSION_TABLE} WHERE version_num <> '{HEAD}'")
    again = cli("db", "upgrade", "rollup@head", "--sql", "--db", empty_url)
    assert "CREATE TABLE agent_usage_model_daily" not in again.stdout
    _run_script(empty_url, dialect, again.stdout)
    assert len(_versions(empty_url)) == 2


@pytest.mark.parametrize("dialect", ["mysql"], indirect=True)
def test_upgrade_sql_on_mysql_names_innodb_and_the_binary_collation_for_every_table(
    empty_url: str, dialect: str, cli: Any
) -> None:
    """A database whose default collation is not utf8mb4_bin: every table the script creates
    says its engine and collation (0001's tables did not: `db check` then found them
    utf8mb4_general_ci)."""
    name = make_url(empty_url).database
    _exec(empty_url, f"ALTER DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci")
    script = _offline_then_run(empty_url, dialect, cli)
    created = script.count("CREATE TABLE IF NOT EXISTS")
    assert created >= 16 and script.count("COLLATE utf8mb4_bin") == created


# --- the notes and status words, with the optional branches applied ------------------------


def test_a_branch_upgrade_answers_for_its_own_tables(empty_url: str, cli: Any) -> None:
    """On a database without the agent tables, `db upgrade documents@head` applies the branch
    and exits 0 (it said the main chain's schema differed, exit 1)."""
    result = cli("db", "upgrade", "documents@head", "--db", empty_url, "--json")
    assert result.exit_code == 0, result.stderr
    assert result.json()["to"] == "d001" and "forward-only" not in result.stderr


def test_no_forward_only_note_for_a_revision_already_passed(empty_url: str, cli: Any) -> None:
    assert cli("db", "upgrade", "--db", empty_url).exit_code == 0
    result = cli("db", "upgrade", "0003", "--db", empty_url)
    assert result.exit_code == 0, result.stderr
    assert "note:" not in result.stderr


def test_notes_and_status_words_with_the_optional_branches_applied(
    empty_url: str, dialect: str, cli: Any
) -> None:
    assert cli("db", "upgrade", "--db", empty_url).exit_code == 0
    for branch in ("rollup@head", "documents@head"):
        applied = cli("db", "upgrade", branch, "--db", empty_url)
        assert applied.exit_code == 0, applied.stderr
        assert "forward-only" not in applied.stderr
    assert cli("db", "stamp", "0001", "--db", empty_url).exit_code == 0
    status = cli("db", "status", "--db", empty_url)
    line = next(x for x in status.stdout.splitlines() if x.startswith("schema current"))
    assert "yes" not in line and "0001" in line and HEAD in line
    branches = next(x for x in status.stdout.splitlines() if x.startswith("branches"))
    assert "documents" in branches and "rollup" in branches
    up = cli("db", "upgrade", "--db", empty_url)
    assert up.exit_code == 0 and "forward-only" in up.stderr  # 0002 onwards were applied
    for branch in ("agent@head", "rollup@head", "documents@head"):
        noop = cli("db", "upgrade", branch, "--db", empty_url)
        assert noop.exit_code == 0 and "Already at" in noop.stdout
        assert "note:" not in noop.stderr
    _exec(empty_url, "ALTER TABLE agent_thread DROP COLUMN summary")
    drifted = cli("db", "upgrade", "--db", empty_url)
    assert drifted.exit_code == 1
    assert "agora db provision" in _one_error_line(drifted.stderr)
    status = cli("db", "status", "--db", empty_url)
    line = next(x for x in status.stdout.splitlines() if x.startswith("schema current"))
    assert line.split()[2] == "no"
    assert cli("db", "provision", "--db", empty_url).exit_code == 0
    status = cli("db", "status", "--db", empty_url)
    line = next(x for x in status.stdout.splitlines() if x.startswith("schema current"))
    assert line.split()[-1] == "yes"
