from __future__ import annotations

from agora_cli.store._provision import check_agent_tables


def test_provisioned_database_is_current(engine) -> None:
    assert check_agent_tables(engine) == []


def test_cli_check_ok(db_url, cli) -> None:
    result = cli("db", "check", "--db", db_url, "--json")
    assert result.exit_code == 0, result.stderr
    assert result.json()["ok"] is True
