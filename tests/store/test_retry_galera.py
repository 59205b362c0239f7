"""Transient-error retries (counted), and Galera detection off a cluster (tests/galera has the
cluster itself)."""

from __future__ import annotations

from typing import Any

import pymysql
import pytest

from agora_cli.store._engine import (
    galera_slot,
    is_galera,
    is_retryable,
    retry_stats,
    retry_transient,
)
from agora_cli.store._galera import galera_problems, galera_status


def test_retry_transient_counts_its_retries_and_gives_up_boundedly() -> None:
    stats = retry_stats()
    stats.reset()
    calls = []

    def twice_then_ok() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise pymysql.err.OperationalError(1213, "Deadlock found when trying to get lock")
        return "ok"

    assert retry_transient(twice_then_ok, base_delay=0.0001) == "ok"
    assert (stats.retried, stats.gave_up, stats.by_code) == (2, 0, {"1213": 2})

    def always() -> None:
        raise pymysql.err.OperationalError(1213, "Deadlock found when trying to get lock")

    with pytest.raises(pymysql.err.OperationalError):
        retry_transient(always, attempts=3, base_delay=0.0001)
    assert (stats.retried, stats.gave_up) == (4, 1)
    stats.reset()
    assert (stats.retried, stats.gave_up, stats.by_code) == (0, 0, {})


def test_a_first_try_made_by_the_caller_counts_as_the_first_try() -> None:
    """``first_error`` (a worker's step tries once itself): a retryable error is retried within
    the same bound, any other is raised without calling ``fn``."""
    deadlock = pymysql.err.OperationalError(1213, "Deadlock found when trying to get lock")
    calls: list[int] = []

    def deadlocks() -> str:
        calls.append(1)
        raise pymysql.err.OperationalError(1213, "Deadlock found when trying to get lock")

    with pytest.raises(pymysql.err.OperationalError):
        retry_transient(deadlocks, attempts=3, base_delay=0.0001, first_error=deadlock)
    assert len(calls) == 2  # the caller's try, then two of fn's: three in all
    calls.clear()
    with pytest.raises(ValueError, match="not transient"):
        retry_transient(deadlocks, first_error=ValueError("not transient"))
    assert calls == []
    assert retry_transient(lambda: "ok", base_delay=0.0001, first_error=deadlock) == "ok"


def test_galera_not_ready_is_retryable_but_an_unknown_command_is_not() -> None:
    not_ready = pymysql.err.OperationalError(
        1047, "WSREP has not yet prepared node for application use"
    )
    assert is_retryable(not_ready)
    assert not is_retryable(pymysql.err.OperationalError(1047, "Unknown command"))
    assert not is_retryable(pymysql.err.IntegrityError(1062, "Duplicate entry"))


def test_a_server_that_is_not_a_cluster_node_is_left_alone(
    engine: Any, cli: Any, db_url: str
) -> None:
    assert is_galera(engine) is False
    with engine.connect() as conn:
        assert is_galera(conn) is False
        assert galera_status(conn) is None
        assert galera_problems(conn, set()) == []
        assert galera_slot(conn) == (0, 1)
        if engine.dialect.name == "mysql":  # causal reads are not turned on off a cluster
            assert conn.exec_driver_sql("SHOW VARIABLES LIKE 'wsrep_sync_wait'").all() in (
                [],
                [("wsrep_sync_wait", "0")],
            )
    status = cli("db", "status", "--db", db_url, "--json")
    assert status.exit_code == 0, status.stderr
    assert status.json()["cluster"] is None
    assert "Galera" not in cli("db", "status", "--db", db_url).stdout
