"""`agora db …` through the real command line: JSON documents, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import no_data, run_agora

from agora_cli.store._migrate import head_revision
from agora_cli.store._schema import AGENT_TABLES

HEAD = head_revision()  # the main chain's head
CHAIN = [f"{n:04d}" for n in range(1, int(HEAD) + 1)]


def _one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def test_provision_json_document(empty_url: str, dialect: str, cli: Any) -> None:
    dry = cli("db", "provision", "--dry-run", "--db", empty_url, "--json")
    assert dry.exit_code == 0, dry.stderr
    dry_doc = dry.json()
    assert dry_doc["already_current"] is False and dry_doc["statements"] == len(dry_doc["sql"])
    check = cli("db", "check", "--db", empty_url, "--json")
    assert check.exit_code == 1  # the dry run created nothing
    assert {p["kind"] for p in check.json()["problems"]} == {"missing_table"}

    first = cli("db", "provision", "--db", empty_url, "--json")
    assert first.exit_code == 0, first.stderr
    doc = first.json()
    assert {
        "dialect",
        "created_tables",
        "added_columns",
        "created_indexes",
        "statements",
        "already_current",
        "sql",
    } <= set(doc)
    assert doc["dialect"] == dialect
    assert sorted(doc["created_tables"]) == sorted(AGENT_TABLES.values())
    assert doc["sql"] == dry_doc["sql"]
    second = cli("db", "provision", "--db", empty_url, "--json").json()
    assert second["already_current"] is True and second["statements"] == 0 and second["sql"] == []


def test_status_and_upgrade_documents(empty_url: str, dialect: str, cli: Any) -> None:
    status = cli("db", "status", "--db", empty_url, "--json")
    assert status.exit_code == 0, status.stderr
    doc = status.json()
    assert doc["revision"] is None and doc["head"] == HEAD
    assert doc["schema_current"] is False and doc["tables"] == {}

    up = cli("db", "upgrade", "--db", empty_url, "--json")
    assert up.exit_code == 0, up.stderr
    assert up.json() == {"from": None, "to": HEAD, "applied": CHAIN}
    assert "forward-only" in up.stderr

    doc = cli("db", "status", "--db", empty_url, "--json").json()
    assert {
        "dialect",
        "server_version",
        "revision",
        "head",
        "branches",
        "schema_current",
        "legacy_proposals",
        "tables",
    } <= set(doc)
    assert doc["dialect"] == dialect and doc["revision"] == HEAD
    assert doc["schema_current"] is True and doc["branches"] == []
    assert doc["legacy_proposals"] == 0
    assert doc["tables"] == {name: 0 for name in AGENT_TABLES.values()}


def test_upgrade_sql_prints_and_runs_nothing(empty_url: str, cli: Any) -> None:
    result = cli("db", "upgrade", "--sql", "--db", empty_url)
    assert result.exit_code == 0, result.stderr
    assert "CREATE TABLE" in result.stdout and "agent_alembic_version" in result.stdout
    assert cli("db", "status", "--db", empty_url, "--json").json()["tables"] == {}


def test_unknown_revision_is_usage_error(db_url: str, cli: Any) -> None:
    result = cli("db", "upgrade", "nonsense@head", "--db", db_url)
    assert result.exit_code == 2
    _one_error_line(result.stderr)


@pytest.mark.parametrize("name", ["postgresql", "mysql", "sqlite"])
def test_sql_needs_no_database(name: str, cli: Any) -> None:
    result = cli("db", "sql", "--dialect", name)
    assert result.exit_code == 0
    assert result.stdout.count("CREATE TABLE") == len(AGENT_TABLES)
    statements = [s for s in result.stdout.split(";\n") if s.strip()]
    assert all(s.lstrip().startswith("CREATE") for s in statements)
    doc = cli("db", "sql", "--dialect", name, "--json").json()
    assert doc["dialect"] == name and len(doc["statements"]) == len(statements)


def test_sql_unknown_dialect_is_exit_2(cli: Any) -> None:
    result = cli("db", "sql", "--dialect", "oracle")
    assert result.exit_code == 2 and no_data(result)
    assert "oracle" in _one_error_line(result.stderr)


@pytest.mark.parametrize(
    "url, code",
    [
        ("not a url", 2),
        ("oracle://scott:tiger@localhost/x", 2),
        ("postgresql://agora:s3cret-pw@127.0.0.1:1/agora", 3),
        ("mysql://agora:s3cret-pw@127.0.0.1:1/agora", 3),
        ("sqlite:////nonexistent-folder/deeper/agora.db", 3),
    ],
)
def test_bad_and_unreachable_urls(url: str, code: int, cli: Any) -> None:
    result = cli("db", "check", "--db", url, "--json")
    assert result.exit_code == code
    assert no_data(result)
    line = _one_error_line(result.stderr)
    assert "s3cret-pw" not in line and "tiger" not in line


def test_wrong_credentials_are_exit_3_and_masked(cli: Any) -> None:
    url = "mysql://nosuchuser:s3cret-pw@127.0.0.1:3306/agora"
    result = cli("db", "status", "--db", url)
    assert result.exit_code == 3
    line = _one_error_line(result.stderr)
    assert "s3cret-pw" not in line and "***" in line


@pytest.mark.slow
def test_debug_shows_traceback_without_password() -> None:
    result = run_agora("--debug", "db", "check", "--db", "postgresql://u:s3cret-pw@127.0.0.1:1/x")
    assert result.exit_code != 0
    assert "Traceback" in result.stderr and "DatabaseUnreachable" in result.stderr
    assert "s3cret-pw" not in result.stdout + result.stderr


def test_environment_url_is_used(db_url: str, cli: Any) -> None:
    result = cli("db", "check", "--json", env={"AGORA_DATABASE_URL": db_url})
    assert result.exit_code == 0 and result.json()["ok"] is True


@pytest.mark.slow
def test_default_is_sqlite_file_in_current_folder(tmp_path: Path) -> None:
    agora = str(Path(sys.executable).with_name("agora"))
    env = {"PATH": str(Path(sys.executable).parent), "HOME": str(tmp_path)}
    proc = subprocess.run(
        [agora, "db", "provision", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["dialect"] == "sqlite"
    assert (tmp_path / "agora.db").exists()


def test_version_and_usage_errors(cli: Any) -> None:
    from agora_cli import __version__

    assert cli("--version").stdout.strip() == f"agora {__version__}"
    assert cli("db", "nosuchcommand").exit_code == 2
    assert cli("db", "backfill", "--limit", "0").exit_code == 2


# --------------------------------------------------------------------------- defects 9, 10, 11


def _exec(url: str, *statements: str) -> None:
    from agora_cli.store._engine import open_engine

    engine = open_engine(url)
    with engine.begin() as conn:
        for statement in statements:
            conn.exec_driver_sql(statement)
    engine.dispose()


def _agent_tables(url: str) -> set[str]:
    from agora_cli.store._engine import open_engine
    from agora_cli.store._provision import read_catalog

    engine = open_engine(url)
    with engine.connect() as conn:
        tables = set(read_catalog(conn).columns)
        conn.rollback()
    engine.dispose()
    return tables


def test_index_name_taken_by_another_table_is_a_conflict(
    empty_url: str, dialect: str, cli: Any
) -> None:
    assert cli("db", "provision", "--db", empty_url).exit_code == 0
    drop = "DROP INDEX agent_thread_actor_updated_idx"
    _exec(
        empty_url,
        drop + (" ON agent_thread" if dialect == "mysql" else ""),
        "CREATE TABLE other (x INTEGER)",
        "CREATE INDEX agent_thread_actor_updated_idx ON other (x)",
    )
    if dialect == "mysql":
        # Index names are per table on MySQL/MariaDB: another table's index takes nothing.
        doc = cli("db", "provision", "--db", empty_url, "--json").json()
        assert doc["created_indexes"] == ["agent_thread_actor_updated_idx"]
        assert cli("db", "check", "--db", empty_url).exit_code == 0
        return
    for args in ((), ("--dry-run",), ()):  # every run says so, none counts it as created
        result = cli("db", "provision", *args, "--db", empty_url, "--json")
        assert result.exit_code == 1, result.stdout
        assert no_data(result)
        line = _one_error_line(result.stderr)
        assert "agent_thread_actor_updated_idx" in line and "table other" in line
        assert "rename or drop" in line
    check = cli("db", "check", "--db", empty_url, "--json")
    assert check.exit_code == 1
    [problem] = check.json()["problems"]
    assert (problem["kind"], problem["table"]) == ("missing_index", "agent_thread")
    assert "agent_thread_actor_updated_idx" in problem["detail"]
    assert "table other" in problem["detail"]


def test_index_conflict_on_an_empty_database_creates_nothing(
    empty_url: str, dialect: str, cli: Any
) -> None:
    if dialect == "mysql":
        pytest.skip("index names are per table on MySQL/MariaDB: another table cannot take one")
    _exec(
        empty_url,
        "CREATE TABLE other (x INTEGER)",
        "CREATE INDEX agent_run_started_idx ON other (x)",
    )
    result = cli("db", "provision", "--db", empty_url)
    assert result.exit_code == 1
    assert "agent_run_started_idx" in _one_error_line(result.stderr)
    assert _agent_tables(empty_url) == set()


@pytest.mark.parametrize(
    "options",
    [
        "ENGINE=MyISAM DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
        "ENGINE=InnoDB DEFAULT CHARSET=latin1",
    ],
    ids=["myisam", "latin1"],
)
def test_non_innodb_or_latin1_table_is_refused_before_any_ddl(
    empty_url: str, dialect: str, options: str, cli: Any
) -> None:
    if dialect != "mysql":
        pytest.skip("storage engines and table character sets are MySQL/MariaDB's")
    _exec(
        empty_url,
        # VARCHAR(191): MyISAM keys stop at 1000 bytes, as older writers on MyISAM found
        "CREATE TABLE agent_thread (id VARCHAR(191) PRIMARY KEY, actor_ref VARCHAR(191) NOT NULL,"
        " title LONGTEXT NOT NULL, created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL) "
        + options,
    )
    for args in ((), ("--dry-run",)):
        result = cli("db", "provision", *args, "--db", empty_url, "--json")
        assert result.exit_code == 1, result.stderr
        assert no_data(result)
        line = _one_error_line(result.stderr)
        assert "agent_thread" in line and "nothing was changed" in line
        assert (
            "ALTER TABLE agent_thread ENGINE=InnoDB, CONVERT TO CHARACTER SET utf8mb4 "
            "COLLATE utf8mb4_bin" in line
        )
    assert _agent_tables(empty_url) == {"agent_thread"}  # nothing else was created
    problems = cli("db", "check", "--db", empty_url, "--json").json()["problems"]
    kinds = {(p["kind"], p["table"]) for p in problems}
    expected = "wrong_engine" if "MyISAM" in options else "wrong_collation"
    assert (expected, "agent_thread") in kinds
    # the conversion the message names is enough
    _exec(
        empty_url,
        "ALTER TABLE agent_thread ENGINE=InnoDB, CONVERT TO CHARACTER SET utf8mb4 "
        "COLLATE utf8mb4_bin",
    )
    assert cli("db", "provision", "--db", empty_url).exit_code == 0
    assert cli("db", "check", "--db", empty_url).exit_code == 0


class _Blocker:
    """Another session's open transaction that has read ``agent_thread`` (and so holds a lock on
    it); released by ``close`` or, so that no test can hang, by a watchdog after 60 s."""

    def __init__(self, url: str, dialect: str) -> None:
        import threading

        from agora_cli.store._engine import open_engine

        self.engine = open_engine(url)
        self.conn = self.engine.connect()  # SQLite: our engine begins with BEGIN IMMEDIATE
        self.conn.exec_driver_sql("SELECT * FROM agent_thread").all()
        who = {"postgresql": "SELECT pg_backend_pid()", "mysql": "SELECT CONNECTION_ID()"}
        self.pid = self.conn.exec_driver_sql(who[dialect]).scalar() if dialect in who else None
        self._lock = threading.Lock()
        self._timer = threading.Timer(60, self.close)
        self._timer.start()

    def close(self) -> None:
        with self._lock:
            self._timer.cancel()
            if not self.conn.closed:
                self.conn.rollback()
                self.conn.close()
                self.engine.dispose()


def _missing_summary(url: str, dialect: str, cli: Any) -> None:
    assert cli("db", "provision", "--db", url).exit_code == 0
    _exec(url, "ALTER TABLE agent_thread DROP COLUMN summary")


def _error_line_after_notes(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert all(line.startswith("note: ") for line in lines[:-1]), stderr
    return _one_error_line(lines[-1])


def _assert_lock_timeout_line(line: str, dialect: str, blocker: _Blocker) -> None:
    assert "gave up after 1 s" in line and "nothing was changed" in line
    if dialect != "sqlite":
        assert "waiting for a lock on agent_thread" in line
    if dialect == "postgresql":
        assert f"pid {blocker.pid}" in line and "idle in transaction" in line
        assert "transaction open" in line
    elif dialect == "mysql":
        assert f"thread {blocker.pid}" in line and "transaction open" in line
    else:
        assert "write lock" in line


@pytest.mark.slow
@pytest.mark.parametrize("command", ["provision", "upgrade"])
def test_ddl_behind_an_open_transaction_gives_up_after_lock_timeout(
    empty_url: str, dialect: str, command: str, cli: Any
) -> None:
    import time

    _missing_summary(empty_url, dialect, cli)
    blocker = _Blocker(empty_url, dialect)
    try:
        started = time.monotonic()
        result = cli("db", command, "--lock-timeout", "1", "--db", empty_url, "--json")
        elapsed = time.monotonic() - started
        assert result.exit_code == 3, (result.stdout, result.stderr)
        assert elapsed < 8, elapsed
        assert no_data(result)
        # (upgrade's forward-only note comes first, as on every upgrade)
        _assert_lock_timeout_line(_error_line_after_notes(result.stderr), dialect, blocker)
    finally:
        blocker.close()
    # nothing is half-done: the column is still the only difference, no revision recorded
    check = cli("db", "check", "--db", empty_url, "--json").json()
    assert [(p["kind"], p["detail"]) for p in check["problems"]] == [
        ("missing_column", "column agent_thread.summary is missing")
    ]
    assert cli("db", "status", "--db", empty_url, "--json").json()["revision"] is None
    # and once the transaction has ended, the same command does the work
    again = cli("db", command, "--lock-timeout", "1", "--db", empty_url)
    assert again.exit_code == 0, again.stderr
    assert cli("db", "check", "--db", empty_url).exit_code == 0


@pytest.mark.parametrize("command", ["provision", "upgrade"])
@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "3601"])
def test_lock_timeout_out_of_bounds_is_exit_2_before_connecting(
    command: str, value: str, cli: Any
) -> None:
    # an unreachable server: a command that connected first would exit 3
    result = cli("db", command, "--lock-timeout", value, "--db", "postgresql://u@127.0.0.1:1/x")
    assert result.exit_code == 2, result.stderr
    assert no_data(result)
    assert "--lock-timeout" in _one_error_line(result.stderr)


# --- what an alembic user expects of the schema commands (issue 28, item 6) -------------------


def test_the_forward_only_note_is_said_only_when_a_main_revision_is_applied(
    empty_url: str, cli: Any
) -> None:
    first = cli("db", "upgrade", "--db", empty_url)
    assert first.exit_code == 0, first.stderr
    assert "forward-only" in first.stderr
    again = cli("db", "upgrade", "--db", empty_url)
    assert again.exit_code == 0, again.stderr
    assert "Already at" in again.stdout and "note:" not in again.stderr
    branch = cli("db", "upgrade", "rollup@head", "--db", empty_url)
    assert branch.exit_code == 0, branch.stderr
    assert "forward-only" not in branch.stderr


def test_upgrade_reports_drift_the_version_table_cannot_see(
    empty_url: str, dialect: str, cli: Any
) -> None:
    """A column dropped by hand at head: `db upgrade` has nothing to apply, and says the schema
    differs (exit 1, naming `db provision`) instead of "nothing to apply"."""
    assert cli("db", "upgrade", "--db", empty_url).exit_code == 0
    _exec(empty_url, "ALTER TABLE agent_thread DROP COLUMN summary")
    drifted = cli("db", "upgrade", "--db", empty_url, "--json")
    assert drifted.exit_code == 1, drifted.stdout + drifted.stderr
    assert drifted.json()["error"]["kind"] == "schema_drift"
    assert "agora db provision" in drifted.stderr and "summary" in drifted.stderr
    assert cli("db", "provision", "--db", empty_url).exit_code == 0
    repaired = cli("db", "upgrade", "--db", empty_url)
    assert repaired.exit_code == 0, repaired.stderr


def test_status_never_says_current_below_head(empty_url: str, cli: Any) -> None:
    """Tables that match head under a version table at 0001 are not "current"."""
    assert cli("db", "upgrade", "--db", empty_url).exit_code == 0
    _exec(empty_url, "UPDATE agent_alembic_version SET version_num = '0001'")
    shown = cli("db", "status", "--db", empty_url)
    assert shown.exit_code == 0, shown.stderr
    line = next(x for x in shown.stdout.splitlines() if x.startswith("schema current"))
    assert "yes" not in line and "0001" in line and "agora db upgrade" in line
    at_head = cli("db", "upgrade", "--db", empty_url)
    assert at_head.exit_code == 0, at_head.stderr
    line = next(
        x for x in cli("db", "status", "--db", empty_url).stdout.splitlines()
        if x.startswith("schema current")
    )  # fmt: skip
    assert line.split()[-1] == "yes"
