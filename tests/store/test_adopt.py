"""Adopting a database the upstream runtime made: one command path, on every dialect.

``create_upstream_schema`` reproduces the runtime's own migrations (INTEGER token columns,
``TEXT`` JSON, ``*_foreign`` keys, and on MariaDB ``utf8mb4_general_ci`` tables);
``write_upstream`` fills them as the runtime does. The documented path is
``agora db provision --convert-collation``; after it ``db check`` is clean and nothing was lost.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from helpers import exec_sql as _exec
from sqlalchemy import text
from upstream import MODEL_PRICED, create_upstream_schema, write_upstream

from agora_cli.store._engine import open_engine
from agora_cli.store._provision import check_agent_tables, ensure_agent_tables, read_catalog
from agora_cli.store._usage import record_usage

UPSTREAM_TABLES = (
    "agent_thread",
    "agent_message",
    "agent_tool_call",
    "agent_token_usage",
    "agent_model_pricing",
    "agent_run",
)
UPSTREAM_KEYS = {
    ("agent_message", ("thread_id",), "agent_thread"),
    ("agent_run", ("thread_id",), "agent_thread"),
    ("agent_token_usage", ("thread_id",), "agent_thread"),
    ("agent_tool_call", ("message_id",), "agent_message"),
}


def _now() -> int:
    return int(time.time() * 1000)


def _upstream(url: str) -> tuple[Any, Any]:
    engine = open_engine(url)
    create_upstream_schema(engine)
    return engine, write_upstream(engine, now=_now())


def _snapshot(engine: Any) -> dict[str, Any]:
    """Row counts of the runtime's tables and a few values that must survive adoption."""
    with engine.connect() as conn:
        counts = {
            t: conn.execute(text(f"SELECT COUNT(*) FROM {t}")).scalar_one() for t in UPSTREAM_TABLES
        }
        ledger = conn.execute(
            text(
                "SELECT input_tokens, output_tokens, cache_read_tokens, cost_usd "
                "FROM agent_token_usage ORDER BY created_at"
            )
        ).all()
        q = conn.dialect.identifier_preparer.quote  # usage is a reserved word on MySQL
        messages = conn.execute(
            text(f"SELECT id, content, {q('usage')} FROM agent_message ORDER BY created_at, id")
        ).all()
        calls = conn.execute(
            text("SELECT id, status, tool_type FROM agent_tool_call ORDER BY created_at")
        ).all()
        price = conn.execute(
            text("SELECT input_price_per_1m, output_price_per_1m FROM agent_model_pricing")
        ).all()
        conn.rollback()
    return {
        "counts": counts,
        "ledger": [tuple(r) for r in ledger],
        "messages": [tuple(r) for r in messages],
        "calls": [tuple(r) for r in calls],
        "price": [tuple(r) for r in price],
    }


def _keys(engine: Any) -> set[tuple[str, tuple[str, ...], str]]:
    with engine.connect() as conn:
        cat = read_catalog(conn)
        conn.rollback()
    return {
        (table, fk.columns, fk.target)
        for table, fks in cat.foreign_keys.items()
        for fk in fks
        if table in UPSTREAM_TABLES and fk.on_delete == "CASCADE"
    }


def _huge_turn(engine: Any, thread_id: str) -> None:
    with engine.begin() as conn:
        record_usage(
            conn,
            thread_id=thread_id,
            actor_ref="alice",
            model_id=MODEL_PRICED,
            purpose="chat",
            input_tokens=3_000_000_000,
            output_tokens=2_500_000_000,
        )
    with engine.connect() as conn:
        got = conn.execute(
            text("SELECT MAX(input_tokens), MAX(output_tokens) FROM agent_token_usage")
        ).one()
        conn.rollback()
    assert tuple(got) == (3_000_000_000, 2_500_000_000)


def test_the_documented_path_adopts_an_upstream_database(
    empty_url: str, dialect: str, cli: Any
) -> None:
    engine, up = _upstream(empty_url)
    before = _snapshot(engine)
    assert cli("db", "check", "--db", empty_url).exit_code == 1

    first = cli("db", "provision", "--convert-collation", "--db", empty_url, "--json")
    assert first.exit_code == 0, first.stderr
    doc = first.json()
    assert doc["already_current"] is False
    if dialect == "mysql":
        assert sorted(doc["converted_tables"]) == sorted(UPSTREAM_TABLES)
        # the runtime's keys, dropped around the conversion, come back under their names
        assert sorted(doc["added_foreign_keys"]) == sorted(
            f"{t}_{c[0]}_foreign" for t, c, _ in UPSTREAM_KEYS
        )
        assert "agent_message.usage" in doc["widened_columns"]  # TEXT -> LONGTEXT
    else:
        assert doc["converted_tables"] == [] and doc["added_foreign_keys"] == []
    if dialect != "sqlite":  # SQLite's INTEGER is already 64-bit: nothing to widen
        assert {"agent_token_usage.input_tokens", "agent_run.input_tokens"} <= set(
            doc["widened_columns"]
        )
    else:
        assert doc["widened_columns"] == []

    check = cli("db", "check", "--db", empty_url, "--json")
    assert check.exit_code == 0, check.stdout
    assert check.json() == {"dialect": dialect, "ok": True, "problems": []}
    assert _snapshot(engine) == before
    assert _keys(engine) == UPSTREAM_KEYS  # the runtime's *_foreign keys count by shape

    _huge_turn(engine, up.threads["acme"])

    again = cli("db", "provision", "--convert-collation", "--db", empty_url, "--json").json()
    assert again["already_current"] is True and again["sql"] == []
    plain = cli("db", "provision", "--db", empty_url)
    assert plain.exit_code == 0 and "is current: nothing to do" in plain.stdout
    # and the migrations take it from there (they find everything present)
    upgraded = cli("db", "upgrade", "--db", empty_url)
    assert upgraded.exit_code == 0, upgraded.stderr
    assert cli("db", "check", "--db", empty_url).exit_code == 0
    engine.dispose()


def test_dry_run_prints_the_sequence_and_changes_nothing(
    empty_url: str, dialect: str, cli: Any
) -> None:
    engine, _ = _upstream(empty_url)
    before = _snapshot(engine)
    dry = cli("db", "provision", "--convert-collation", "--dry-run", "--db", empty_url)
    assert dry.exit_code == 0, dry.stderr
    if dialect == "mysql":  # the migrations refuse the same way, pointing to the flag
        upgrade = cli("db", "upgrade", "--db", empty_url)
        assert upgrade.exit_code == 1
        assert "agora db provision --convert-collation" in upgrade.stderr
    lines = [ln for ln in dry.stdout.splitlines() if ln.startswith("ALTER TABLE")]
    if dialect == "mysql":
        drops = [i for i, ln in enumerate(lines) if "DROP FOREIGN KEY" in ln]
        converts = [i for i, ln in enumerate(lines) if "CONVERT TO CHARACTER SET" in ln]
        adds = [i for i, ln in enumerate(lines) if "ADD CONSTRAINT" in ln]
        assert len(drops) == len(adds) == 4 and len(converts) == 6
        assert max(drops) < min(converts) and max(converts) < min(adds)
    if dialect != "sqlite":
        assert any("agent_token_usage" in ln and "BIGINT" in ln for ln in lines)
    assert _snapshot(engine) == before
    assert cli("db", "check", "--db", empty_url).exit_code == 1
    engine.dispose()


def test_without_the_flag_mariadb_is_refused_with_a_sequence_that_works(
    empty_url: str, dialect: str, cli: Any
) -> None:
    if dialect != "mysql":
        pytest.skip("collations are MySQL/MariaDB's")
    engine, up = _upstream(empty_url)
    before = _snapshot(engine)
    refused = cli("db", "provision", "--db", empty_url)
    assert refused.exit_code == 1
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("error: cannot provision: ") and "nothing was changed" in line
    assert "agora db provision --convert-collation" in line
    sequence = re.search(r"convert first with (.*?) \(each rewrites its table\)", line)
    assert sequence is not None, line
    statements = sequence.group(1).split("; ")
    drop = "ALTER TABLE agent_message DROP FOREIGN KEY agent_message_thread_id_foreign"
    assert statements[0] == drop
    # what it prints works when run by hand; then a plain provision does the rest
    _exec(engine, *statements)
    done = cli("db", "provision", "--db", empty_url, "--json")
    assert done.exit_code == 0, done.stderr
    assert done.json()["added_foreign_keys"] == []  # the sequence put the keys back itself
    assert cli("db", "check", "--db", empty_url).exit_code == 0
    assert _snapshot(engine) == before
    _huge_turn(engine, up.threads["globex"])
    engine.dispose()


def test_a_crash_midway_is_finished_by_running_it_again(
    empty_url: str, dialect: str, cli: Any
) -> None:
    if dialect != "mysql":
        pytest.skip("the conversion is MySQL/MariaDB's")
    engine, _ = _upstream(empty_url)
    before = _snapshot(engine)
    # As if the process died after dropping every key and converting two tables of six.
    _exec(
        engine,
        "ALTER TABLE agent_message DROP FOREIGN KEY agent_message_thread_id_foreign",
        "ALTER TABLE agent_run DROP FOREIGN KEY agent_run_thread_id_foreign",
        "ALTER TABLE agent_token_usage DROP FOREIGN KEY agent_token_usage_thread_id_foreign",
        "ALTER TABLE agent_tool_call DROP FOREIGN KEY agent_tool_call_message_id_foreign",
        "ALTER TABLE agent_thread CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
        "ALTER TABLE agent_message CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
    )
    kinds = {p.kind for p in check_agent_tables(engine)}
    assert {"missing_foreign_key", "wrong_collation"} <= kinds

    result = cli("db", "provision", "--convert-collation", "--db", empty_url, "--json")
    assert result.exit_code == 0, result.stderr
    doc = result.json()
    assert sorted(doc["converted_tables"]) == sorted(
        set(UPSTREAM_TABLES) - {"agent_thread", "agent_message"}
    )
    # the keys lost with the crash are added back as agora's, by shape
    assert sorted(doc["added_foreign_keys"]) == sorted(
        f"{t}_{c[0]}_fk" for t, c, _ in UPSTREAM_KEYS
    )
    assert check_agent_tables(engine) == []
    assert _keys(engine) == UPSTREAM_KEYS
    assert _snapshot(engine) == before
    assert ensure_agent_tables(engine, convert_collation=True).already_current
    engine.dispose()


def test_provision_re_adds_a_lost_foreign_key(empty_url: str, dialect: str, cli: Any) -> None:
    if dialect == "sqlite":
        pytest.skip("SQLite cannot add a foreign key to an existing table")
    engine = open_engine(empty_url)
    ensure_agent_tables(engine)
    drop = "DROP FOREIGN KEY" if dialect == "mysql" else "DROP CONSTRAINT"
    _exec(engine, f"ALTER TABLE agent_run {drop} agent_run_thread_id_fk")
    problems = cli("db", "check", "--db", empty_url, "--json").json()["problems"]
    assert [(p["kind"], p["table"]) for p in problems] == [("missing_foreign_key", "agent_run")]
    doc = cli("db", "provision", "--db", empty_url, "--json").json()
    assert doc["added_foreign_keys"] == ["agent_run_thread_id_fk"]
    assert cli("db", "check", "--db", empty_url).exit_code == 0
    engine.dispose()


def test_orphan_rows_are_named_instead_of_a_driver_error(
    empty_url: str, dialect: str, cli: Any
) -> None:
    if dialect == "sqlite":
        pytest.skip("SQLite cannot add a foreign key to an existing table")
    engine, up = _upstream(empty_url)
    drop = "DROP FOREIGN KEY" if dialect == "mysql" else "DROP CONSTRAINT"
    _exec(engine, f"ALTER TABLE agent_token_usage {drop} agent_token_usage_thread_id_foreign")
    # a ledger row whose thread is gone; on MariaDB a case-insensitive collation would let
    # the upper-cased id find its thread, the binary one after adoption does not
    ghost = up.threads["acme"].upper() if dialect == "mysql" else "ghost-thread"
    _exec(
        engine,
        "INSERT INTO agent_token_usage (id, thread_id, actor_ref, model_id, purpose,"
        f" input_tokens, output_tokens, created_at) VALUES ('u-ghost', '{ghost}', 'alice',"
        " 'gpt-4o-mini', 'chat', 1, 1, 1)",
    )
    before = _snapshot(engine)
    for args in ((), ("--dry-run",)):
        result = cli("db", "provision", "--convert-collation", *args, "--db", empty_url)
        assert result.exit_code == 1, result.stdout
        (line,) = result.stderr.strip().splitlines()
        assert "1 row(s) of agent_token_usage have a thread_id that no agent_thread row has" in line
        assert repr(ghost) in line and "nothing was changed" in line
    assert _snapshot(engine) == before  # refused before any DDL
    _exec(engine, "DELETE FROM agent_token_usage WHERE id = 'u-ghost'")
    assert cli("db", "provision", "--convert-collation", "--db", empty_url).exit_code == 0
    assert cli("db", "check", "--db", empty_url).exit_code == 0
    engine.dispose()


def test_wider_columns_are_left_alone_and_other_types_refused(
    empty_url: str, dialect: str, cli: Any
) -> None:
    if dialect == "sqlite":
        pytest.skip("SQLite cannot change a column's type")
    engine = open_engine(empty_url)
    ensure_agent_tables(engine)
    if dialect == "mysql":
        _exec(engine, "ALTER TABLE agent_message MODIFY COLUMN seq BIGINT NOT NULL DEFAULT 0")
    else:
        _exec(engine, "ALTER TABLE agent_message ALTER COLUMN seq TYPE BIGINT")
    assert check_agent_tables(engine) == []  # wider than INTEGER: never narrowed
    assert ensure_agent_tables(engine).already_current
    if dialect == "mysql":
        _exec(engine, "ALTER TABLE agent_run MODIFY COLUMN cost_usd DECIMAL(12, 4)")
    else:
        _exec(engine, "ALTER TABLE agent_run ALTER COLUMN cost_usd TYPE NUMERIC(12, 4)")
    problems = cli("db", "check", "--db", empty_url, "--json").json()["problems"]
    assert [(p["kind"], p["table"]) for p in problems] == [("wrong_type", "agent_run")]
    assert "change it by hand" in problems[0]["detail"]
    refused = cli("db", "provision", "--db", empty_url)
    assert refused.exit_code == 1
    (line,) = refused.stderr.strip().splitlines()
    assert "column agent_run.cost_usd is" in line and "nothing was changed" in line
    engine.dispose()


@pytest.mark.parametrize("command", [("threads", "show", "THREAD"), ("prices", "list")])
def test_commands_on_an_unadopted_database_point_to_provision(
    empty_url: str, dialect: str, command: tuple[str, ...], cli: Any
) -> None:
    engine, up = _upstream(empty_url)
    args = [up.threads["acme"] if a == "THREAD" else a for a in command]
    result = cli(*args, "--db", empty_url)
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert re.match(r"error: column \S+ does not exist: ", line), line
    assert "run `agora db provision`" in line
    as_json = cli(*args, "--db", empty_url, "--json")
    assert as_json.json()["error"]["kind"] == "schema_drift"
    engine.dispose()


def test_a_missing_table_points_to_provision_too(empty_url: str, dialect: str, cli: Any) -> None:
    open_engine(empty_url).dispose()  # the database exists (a SQLite file too), with no tables
    result = cli("prices", "list", "--db", empty_url)
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()
    assert re.match(r"error: table \S*agent_model_pricing does not exist: ", line), line
    assert "run `agora db provision`" in line


@pytest.mark.parametrize(
    "options",
    [
        "ENGINE=MyISAM DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
        "ENGINE=InnoDB DEFAULT CHARSET=latin1",
    ],
    ids=["myisam", "latin1"],
)
def test_convert_collation_fixes_engine_and_character_set_too(
    empty_url: str, dialect: str, options: str, cli: Any
) -> None:
    if dialect != "mysql":
        pytest.skip("storage engines and table character sets are MySQL/MariaDB's")
    engine = open_engine(empty_url)
    _exec(
        engine,
        "CREATE TABLE agent_thread (id VARCHAR(191) PRIMARY KEY, actor_ref VARCHAR(191) NOT NULL,"
        " title LONGTEXT NOT NULL, created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL) "
        + options,
        "INSERT INTO agent_thread (id, actor_ref, title, created_at, updated_at)"
        " VALUES ('t-old', 'alice', 'caf\u00e9', 1, 1)",
    )
    result = cli("db", "provision", "--convert-collation", "--db", empty_url, "--json")
    assert result.exit_code == 0, result.stderr
    assert result.json()["converted_tables"] == ["agent_thread"]
    assert cli("db", "check", "--db", empty_url).exit_code == 0
    with engine.connect() as conn:
        title = conn.execute(text("SELECT title FROM agent_thread")).scalar_one()
        conn.rollback()
    assert title == "caf\u00e9"
    engine.dispose()


def test_a_key_from_an_application_table_is_refused_before_any_change(
    empty_url: str, dialect: str, cli: Any
) -> None:
    if dialect != "mysql":
        pytest.skip("the conversion is MySQL/MariaDB's")
    engine, _ = _upstream(empty_url)
    _exec(
        engine,
        "CREATE TABLE app_note (id VARCHAR(255) PRIMARY KEY, thread_id VARCHAR(255),"
        " CONSTRAINT app_note_thread_fk FOREIGN KEY (thread_id) REFERENCES agent_thread (id))"
        " DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci",
    )
    before = _snapshot(engine)
    result = cli("db", "provision", "--convert-collation", "--db", empty_url)
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()
    assert "foreign key app_note_thread_fk of app_note" in line and "nothing was changed" in line
    assert _snapshot(engine) == before
    assert _keys(engine) == UPSTREAM_KEYS  # no key was dropped
    engine.dispose()
