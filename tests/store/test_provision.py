"""Provisioning and drift checks, on SQLite, PostgreSQL and MySQL/MariaDB."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import exec_sql as _exec
from sqlalchemy import event, insert, select, text

from agora_cli.store._engine import open_engine, server_version
from agora_cli.store._errors import InvalidInput, LockTimeout, SchemaDrift
from agora_cli.store._provision import (
    check_agent_tables,
    create_table_statements,
    ensure_agent_tables,
    read_catalog,
)
from agora_cli.store._schema import AGENT_TABLES, message, metadata, thread

DDL_WORDS = ("CREATE", "ALTER", "DROP")
LOCK_WORDS = ("pg_advisory_lock", "pg_try_advisory_lock", "GET_LOCK")


def _capture(engine: Any) -> list[str]:
    seen: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda c, cur, stmt, *a: seen.append(stmt))
    return seen


def _drop_index_sql(dialect: str, table: str, index: str) -> str:
    return f"DROP INDEX {index} ON {table}" if dialect == "mysql" else f"DROP INDEX {index}"


def _add_thread(conn: Any, thread_id: str = "t1", actor: str = "alice") -> None:
    conn.execute(
        insert(thread).values(
            id=thread_id, actor_ref=actor, title="hello", created_at=1, updated_at=1
        )
    )


def test_provision_from_empty_creates_exact_schema(empty_url: str) -> None:
    engine = open_engine(empty_url)
    report = ensure_agent_tables(engine)
    assert sorted(report.created_tables) == sorted(AGENT_TABLES.values())
    assert report.added_columns == []
    expected_indexes = {i.name for t in metadata.tables.values() for i in t.indexes}
    assert set(report.created_indexes) == expected_indexes
    assert report.statements == len(report.sql) == len(metadata.tables) + len(expected_indexes)
    assert check_agent_tables(engine) == []
    engine.dispose()


def test_second_run_issues_no_ddl_and_takes_no_lock(engine: Any) -> None:
    seen = _capture(engine)
    report = ensure_agent_tables(engine)
    assert report.already_current and report.sql == []
    assert not [s for s in seen if s.lstrip().upper().startswith(DDL_WORDS)]
    assert not [s for s in seen if any(w in s for w in LOCK_WORDS)]
    assert not [s for s in seen if "lock_timeout" in s or "lock_wait_timeout" in s]
    catalog_queries = [s for s in seen if "SELECT" in s.upper()]
    # columns (with their types, and MySQL's engine and collation), indexes, foreign keys
    assert len(catalog_queries) == 3


def test_repairs_missing_columns_and_indexes_and_keeps_data(empty_url: str, dialect: str) -> None:
    engine = open_engine(empty_url)
    ensure_agent_tables(engine)
    with engine.begin() as conn:
        _add_thread(conn)
    _exec(
        engine,
        "ALTER TABLE agent_thread DROP COLUMN summary",
        _drop_index_sql(dialect, "agent_run", "agent_run_started_idx"),
        _drop_index_sql(dialect, "agent_message", "agent_message_run_idx"),
    )
    kinds = {(p.kind, p.detail) for p in check_agent_tables(engine)}
    assert ("missing_column", "column agent_thread.summary is missing") in kinds
    assert ("missing_index", "index agent_run_started_idx is missing") in kinds

    report = ensure_agent_tables(engine)
    assert report.added_columns == ["agent_thread.summary"]
    assert sorted(report.created_indexes) == ["agent_message_run_idx", "agent_run_started_idx"]
    assert report.created_tables == []
    assert check_agent_tables(engine) == []
    with engine.connect() as conn:
        row = conn.execute(select(thread.c.id, thread.c.title, thread.c.summary)).one()
    assert tuple(row) == ("t1", "hello", None)
    engine.dispose()


def test_hand_made_index_under_expected_name_is_left_alone(empty_url: str, dialect: str) -> None:
    engine = open_engine(empty_url)
    ensure_agent_tables(engine)
    _exec(
        engine,
        _drop_index_sql(dialect, "agent_run", "agent_run_started_idx"),
        # a DBA's own definition under the expected name (other columns)
        "CREATE INDEX agent_run_started_idx ON agent_run (status)",
    )
    seen = _capture(engine)
    report = ensure_agent_tables(engine)
    assert report.already_current
    assert not [s for s in seen if s.lstrip().upper().startswith(DDL_WORDS)]
    assert check_agent_tables(engine) == []
    engine.dispose()


def _older_writer_ddl(dialect: str) -> list[str]:
    """Tables as an earlier TypeScript store wrote them: fewer columns, no seq, unnamed FKs."""
    opts = (
        " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin" if dialect == "mysql" else ""
    )
    text_type = "LONGTEXT" if dialect == "mysql" else "TEXT"
    if dialect == "mysql":
        # MySQL ignores inline REFERENCES; older writers used unnamed table-level keys.
        fk = ", FOREIGN KEY (thread_id) REFERENCES agent_thread(id) ON DELETE CASCADE"
        inline = ""
    else:
        fk = ""
        inline = " REFERENCES agent_thread(id) ON DELETE CASCADE"
    return [
        "CREATE TABLE agent_thread (id VARCHAR(255) PRIMARY KEY, actor_ref VARCHAR(255) NOT NULL,"
        f" title {text_type} NOT NULL, created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL)"
        + opts,
        "CREATE TABLE agent_message (id VARCHAR(255) PRIMARY KEY,"
        f" thread_id VARCHAR(255) NOT NULL{inline}, role VARCHAR(255) NOT NULL,"
        f" content {text_type} NOT NULL, created_at BIGINT NOT NULL{fk})" + opts,
        "CREATE INDEX agent_message_thread_created_idx ON agent_message (thread_id, created_at)",
        "INSERT INTO agent_thread (id, actor_ref, title, created_at, updated_at)"
        " VALUES ('old', 'alice', 'from before', 5, 5)",
        "INSERT INTO agent_message (id, thread_id, role, content, created_at)"
        " VALUES ('m-old', 'old', 'user', 'hi', 6)",
    ]


def test_adopts_a_database_an_older_writer_created(empty_url: str, dialect: str) -> None:
    engine = open_engine(empty_url)
    _exec(engine, *_older_writer_ddl(dialect))
    before = {p.kind for p in check_agent_tables(engine)}
    assert {"missing_table", "missing_column", "missing_index"} <= before
    report = ensure_agent_tables(engine)
    assert "agent_message.seq" in report.added_columns
    assert "agent_thread" not in report.created_tables
    assert check_agent_tables(engine) == []  # unnamed FKs match by shape
    with engine.connect() as conn:
        seq, content = conn.execute(select(message.c.seq, message.c.content)).one()
        persona = conn.execute(select(thread.c.persona)).scalar_one()
    assert (seq, content, persona) == (0, "hi", "default")
    # and deleting the adopted thread still cascades through the unnamed key
    _exec(engine, "DELETE FROM agent_thread WHERE id = 'old'")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM agent_message")).scalar() == 0
    engine.dispose()


@pytest.mark.slow
def test_eight_processes_provision_one_empty_database(empty_url: str) -> None:
    agora = str(Path(sys.executable).with_name("agora"))
    procs = [
        subprocess.Popen(
            [agora, "db", "provision", "--db", empty_url, "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    outputs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, [err for _, err in outputs]
    import json

    docs = [json.loads(out) for out, _ in outputs]
    created = [t for d in docs for t in d["created_tables"]]
    assert sorted(created) == sorted(AGENT_TABLES.values())  # each table created exactly once
    engine = open_engine(empty_url)
    assert check_agent_tables(engine) == []
    engine.dispose()


def test_db_sql_output_runs_on_a_real_server_and_checks_clean(empty_url: str, dialect: str) -> None:
    engine = open_engine(empty_url)
    _exec(engine, *create_table_statements(dialect))
    assert check_agent_tables(engine) == []
    assert ensure_agent_tables(engine).already_current
    engine.dispose()


def _drift_statements(dialect: str, mariadb: bool = True) -> list[str]:
    statements = [
        "DROP TABLE agent_channel_state",
        "ALTER TABLE agent_thread DROP COLUMN summary",
        _drop_index_sql(dialect, "agent_tool_call", "agent_tool_call_run_idx"),
        # genui calls re-created by hand without its foreign key
        "DROP TABLE agent_genui_call",
        "CREATE TABLE agent_genui_call (id VARCHAR(255) PRIMARY KEY,"
        " thread_id VARCHAR(255) NOT NULL, message_id VARCHAR(255), run_id VARCHAR(255),"
        " component VARCHAR(255) NOT NULL, props TEXT NOT NULL, status VARCHAR(255) NOT NULL,"
        " created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL)"
        + (
            " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
            if dialect == "mysql"
            else ""
        ),
        "CREATE INDEX agent_genui_call_thread_created_idx"
        " ON agent_genui_call (thread_id, created_at)",
    ]
    if dialect == "mysql":
        statements += [
            # MyISAM keys stop at 1000 bytes (a utf8mb4 VARCHAR(255) is 1020); Aria takes them
            "ALTER TABLE agent_stream_frame ENGINE=" + ("Aria" if mariadb else "MyISAM"),
            "ALTER TABLE agent_model_pricing CONVERT TO CHARACTER SET utf8mb4"
            " COLLATE utf8mb4_general_ci",
        ]
    return statements


def test_check_names_every_kind_of_drift(empty_url: str, dialect: str, cli: Any) -> None:
    engine = open_engine(empty_url)
    ensure_agent_tables(engine)
    with engine.connect() as conn:
        mariadb = "mariadb" in server_version(conn).lower()
    _exec(engine, *_drift_statements(dialect, mariadb))
    result = cli("db", "check", "--db", empty_url, "--json")
    assert result.exit_code == 1
    doc = result.json()
    assert doc["ok"] is False and doc["dialect"] == dialect
    found = {(p["kind"], p["table"]) for p in doc["problems"]}
    expected = {
        ("missing_table", "agent_channel_state"),
        ("missing_column", "agent_thread"),
        ("missing_index", "agent_tool_call"),
        ("missing_foreign_key", "agent_genui_call"),
    }
    if dialect == "mysql":
        expected |= {
            ("wrong_engine", "agent_stream_frame"),
            ("wrong_collation", "agent_model_pricing"),
            ("wrong_type", "agent_genui_call"),  # props re-created as TEXT, not LONGTEXT
        }
    assert found == expected
    # the table view says the same, on stdout, and still exits 1
    human = cli("db", "check", "--db", empty_url)
    assert human.exit_code == 1 and "missing_foreign_key" in human.stdout
    engine.dispose()


def test_foreign_key_without_cascade_is_drift(empty_url: str, dialect: str) -> None:
    engine = open_engine(empty_url)
    ensure_agent_tables(engine)
    opts = (
        " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin" if dialect == "mysql" else ""
    )
    _exec(
        engine,
        "DROP TABLE agent_confirm_token",
        "CREATE TABLE agent_confirm_token (token_hash VARCHAR(255) PRIMARY KEY,"
        " thread_id VARCHAR(255) NOT NULL, actor_ref VARCHAR(255) NOT NULL,"
        " tool_call_id VARCHAR(255), expires_at BIGINT NOT NULL, used_at BIGINT,"
        " created_at BIGINT NOT NULL,"
        " CONSTRAINT agent_confirm_token_thread_id_fk FOREIGN KEY (thread_id)"
        " REFERENCES agent_thread (id))" + opts,
        "CREATE INDEX agent_confirm_token_thread_idx ON agent_confirm_token (thread_id)",
        "CREATE INDEX agent_confirm_token_expires_idx ON agent_confirm_token (expires_at)",
    )
    problems = check_agent_tables(engine)
    assert [(p.kind, p.table) for p in problems] == [("missing_foreign_key", "agent_confirm_token")]
    assert "without ON DELETE CASCADE" in problems[0].detail
    engine.dispose()


def test_catalog_read_is_a_few_queries_whatever_the_table_count(engine: Any) -> None:
    seen = _capture(engine)
    with engine.connect() as conn:
        catalog = read_catalog(conn, full=True)
        conn.rollback()
    assert set(catalog.columns) == set(AGENT_TABLES.values())
    assert len([s for s in seen if "SELECT" in s.upper()]) <= 4


def test_cascade_delete_removes_children(engine: Any) -> None:
    from agora_cli.store import _schema as s

    with engine.begin() as conn:
        _add_thread(conn, "t-c")
        conn.execute(
            insert(s.message).values(
                id="m1", thread_id="t-c", seq=1, role="user", content="x", created_at=1
            )
        )
        conn.execute(
            insert(s.tool_call).values(
                id="tc1",
                message_id="m1",
                tool_name="refund",
                tool_type="function",
                status="done",
                created_at=1,
            )
        )
        conn.execute(
            insert(s.token_usage).values(
                id="u1",
                thread_id="t-c",
                actor_ref="alice",
                model_id="m",
                purpose="turn",
                input_tokens=1,
                output_tokens=1,
                created_at=1,
            )
        )
        conn.execute(
            insert(s.run).values(
                id="r1", thread_id="t-c", actor_ref="alice", status="running", started_at=1
            )
        )
        conn.execute(
            insert(s.action_proposal).values(
                id="p1",
                idempotency_key="k1",
                actor_ref="alice",
                thread_id="t-c",
                tool_name="refund",
                input="{}",
                created_at=1,
                updated_at=1,
            )
        )
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM agent_thread WHERE id = 't-c'"))
    with engine.connect() as conn:
        for table in (
            "agent_message",
            "agent_tool_call",
            "agent_token_usage",
            "agent_run",
            "agent_action_proposal",
        ):
            assert conn.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar() == 0, table


def test_long_text_round_trips_and_identity_is_case_sensitive(engine: Any) -> None:
    body = ("0123456789abcdef" * 6400) + "é😀"  # > 100 KB, past MySQL's 64 KB TEXT
    with engine.begin() as conn:
        _add_thread(conn, "t-long", actor="ALICE")
        conn.execute(
            insert(message).values(
                id="m-long",
                thread_id="t-long",
                seq=1,
                role="assistant",
                content=body,
                created_at=1,
            )
        )
    with engine.connect() as conn:
        assert conn.execute(select(message.c.content)).scalar_one() == body
        assert conn.execute(select(thread.c.id).where(thread.c.actor_ref == "alice")).all() == []
        assert conn.execute(select(thread.c.id).where(thread.c.actor_ref == "ALICE")).all() == [
            ("t-long",)
        ]


@pytest.mark.parametrize("name", ["postgresql", "mysql", "sqlite"])
def test_create_table_statements_cover_every_table_and_index(name: str) -> None:
    statements = create_table_statements(name)
    creates = [s for s in statements if s.startswith("CREATE TABLE")]
    assert len(creates) == len(AGENT_TABLES)
    for fk_line in ("agent_message_thread_id_fk", "ON DELETE CASCADE"):
        assert any(fk_line in s for s in creates)
    if name == "mysql":
        assert all("ENGINE=InnoDB" in s and "utf8mb4_bin" in s for s in creates)
        assert any("LONGTEXT" in s for s in creates)
    assert all(not s.endswith(";") for s in statements)


# --------------------------------------------------------------------------- lock waits

_SESSION_BOUND = {
    "postgresql": "SHOW lock_timeout",
    "mysql": "SELECT @@SESSION.lock_wait_timeout, @@SESSION.innodb_lock_wait_timeout",
    "sqlite": "PRAGMA busy_timeout",
}


def _session_bound(engine: Any, dialect: str) -> tuple[Any, ...]:
    with engine.connect() as conn:
        value = tuple(conn.exec_driver_sql(_SESSION_BOUND[dialect]).one())
        conn.rollback()
    return value


def test_lock_timeout_trips_fast_and_the_pooled_session_gets_its_setting_back(
    empty_url: str, dialect: str
) -> None:
    # one pooled connection: whatever provisioning leaves on its session, the next user gets
    engine = open_engine(empty_url, pool_size=1, max_overflow=0)
    ensure_agent_tables(engine)
    before = _session_bound(engine, dialect)
    _exec(engine, "ALTER TABLE agent_thread DROP COLUMN summary")
    other = open_engine(empty_url)
    blocker = other.connect()
    blocker.exec_driver_sql("SELECT * FROM agent_thread").all()
    release = threading.Timer(60, blocker.close)  # never hang the suite
    release.start()
    try:
        started = time.monotonic()
        with pytest.raises(LockTimeout, match="nothing was changed"):
            ensure_agent_tables(engine, table_lock_timeout_s=0.5)
        assert time.monotonic() - started < 5
    finally:
        release.cancel()
        blocker.rollback()
        blocker.close()
        other.dispose()
    assert _session_bound(engine, dialect) == before
    assert [p.kind for p in check_agent_tables(engine)] == ["missing_column"]
    assert ensure_agent_tables(engine, table_lock_timeout_s=0.5).added_columns == [
        "agent_thread.summary"
    ]
    assert _session_bound(engine, dialect) == before
    engine.dispose()


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), 3600.5])
def test_table_lock_timeout_out_of_bounds_is_refused_before_any_query(
    empty_url: str, bad: float
) -> None:
    engine = open_engine(empty_url)
    seen = _capture(engine)
    with pytest.raises(InvalidInput, match="table_lock_timeout_s"):
        ensure_agent_tables(engine, table_lock_timeout_s=bad)
    assert seen == []
    engine.dispose()


def test_index_name_taken_elsewhere_refuses_dry_run_and_real_run_alike(
    empty_url: str, dialect: str
) -> None:
    if dialect == "mysql":
        pytest.skip("index names are per table on MySQL/MariaDB: another table cannot take one")
    engine = open_engine(empty_url)
    # taken by another *agent* table's index: a name is recognised on its own table only
    ensure_agent_tables(engine)
    _exec(
        engine,
        "DROP INDEX agent_run_started_idx",
        "CREATE INDEX agent_run_started_idx ON agent_message (created_at)",
    )
    for dry_run in (True, False):
        with pytest.raises(SchemaDrift, match="an index on table agent_message"):
            ensure_agent_tables(engine, dry_run=dry_run)
    [problem] = check_agent_tables(engine)
    assert problem.kind == "missing_index" and "agent_message" in problem.detail
    engine.dispose()
