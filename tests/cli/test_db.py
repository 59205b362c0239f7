"""`agora db …` through the real command line: JSON documents, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import no_data, run_agora

from agora_cli.store.schema import AGENT_TABLES


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
    assert doc["revision"] is None and doc["head"] == "0003"
    assert doc["schema_current"] is False and doc["tables"] == {}

    up = cli("db", "upgrade", "--db", empty_url, "--json")
    assert up.exit_code == 0, up.stderr
    assert up.json() == {"from": None, "to": "0003", "applied": ["0001", "0002", "0003"]}
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
    assert doc["dialect"] == dialect and doc["revision"] == "0003"
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


def test_debug_shows_traceback_without_password() -> None:
    result = run_agora("--debug", "db", "check", "--db", "postgresql://u:s3cret-pw@127.0.0.1:1/x")
    assert result.exit_code != 0
    assert "Traceback" in result.stderr and "DatabaseUnreachable" in result.stderr
    assert "s3cret-pw" not in result.stdout + result.stderr


def test_environment_url_is_used(db_url: str, cli: Any) -> None:
    result = cli("db", "check", "--json", env={"AGORA_DATABASE_URL": db_url})
    assert result.exit_code == 0 and result.json()["ok"] is True


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
