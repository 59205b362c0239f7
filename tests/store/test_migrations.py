"""Alembic migrations shipped in the package: main chain, forward-only refusals, branches."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from agora_cli.store._engine import open_engine
from agora_cli.store._errors import ForwardOnlyMigration, InvalidInput, MissingExtension
from agora_cli.store._migrate import (
    applied_branches,
    current_revision,
    downgrade,
    head_revision,
    upgrade,
)
from agora_cli.store._provision import check_agent_tables, ensure_agent_tables

# A report that reads the per-model rollup sums its tokens (its coverage check does not).
ROLLUP_READ = "sum(agent_usage_model_daily.input_tokens"
HEAD = head_revision()  # the main chain's head
CHAIN = [f"{n:04d}" for n in range(1, int(HEAD) + 1)]


def _versions(engine: Any, table: str = "agent_alembic_version") -> list[str]:
    with engine.connect() as conn:
        return sorted(r[0] for r in conn.execute(text(f"SELECT version_num FROM {table}")))


def test_upgrade_empty_database_to_head(empty_url: str) -> None:
    engine = open_engine(empty_url)
    result = upgrade(engine)
    assert (result.from_revision, result.to_revision) == (None, head_revision())
    assert result.applied == CHAIN
    assert check_agent_tables(engine) == []
    assert _versions(engine) == [HEAD]
    again = upgrade(engine)
    assert again.applied == [] and again.from_revision == again.to_revision == HEAD
    engine.dispose()


def test_upgrade_refuses_an_unbounded_lock_timeout_before_touching_anything(
    empty_url: str,
) -> None:
    engine = open_engine(empty_url)
    for bad in (0, float("nan"), 3601):
        with pytest.raises(InvalidInput, match="table_lock_timeout_s"):
            upgrade(engine, table_lock_timeout_s=bad)
    with engine.connect() as conn:
        assert current_revision(conn) is None
    assert {p.kind for p in check_agent_tables(engine)} == {"missing_table"}
    engine.dispose()


def test_provisioned_database_upgrades_cleanly(empty_url: str) -> None:
    engine = open_engine(empty_url)
    ensure_agent_tables(engine)
    result = upgrade(engine)
    assert result.applied == CHAIN
    assert check_agent_tables(engine) == []
    with engine.connect() as conn:
        assert current_revision(conn) == HEAD
    engine.dispose()


def test_forward_only_downgrades_refuse_and_change_nothing(empty_url: str) -> None:
    engine = open_engine(empty_url)
    upgrade(engine)
    with pytest.raises(ForwardOnlyMigration, match=rf"{HEAD} .*forward-only"):
        downgrade(engine, "0002")
    with pytest.raises(ForwardOnlyMigration):
        downgrade(engine, "0001")
    assert _versions(engine) == [HEAD]
    assert check_agent_tables(engine) == []
    engine.dispose()


def test_existing_alembic_version_table_is_untouched(empty_url: str) -> None:
    engine = open_engine(empty_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        conn.exec_driver_sql("INSERT INTO alembic_version VALUES ('app_rev_42')")
    upgrade(engine)
    assert _versions(engine, "alembic_version") == ["app_rev_42"]
    assert _versions(engine) == [HEAD]
    engine.dispose()


def _run_script(engine: Any, statements: list[str]) -> None:
    with engine.begin() as conn:
        for statement in statements:
            body = "\n".join(
                line for line in statement.splitlines() if not line.lstrip().startswith("--")
            ).strip()
            if body and body.upper() not in ("BEGIN", "COMMIT"):
                conn.exec_driver_sql(body)


def test_upgrade_step_by_step_and_offline_sql(empty_url: str, dialect: str) -> None:
    engine = open_engine(empty_url)
    _run_script(engine, upgrade(engine, "0001", sql=True).sql)  # 0001's schema, recorded
    assert _versions(engine) == ["0001"]
    offline = upgrade(engine, sql=True)
    joined = "\n".join(offline.sql)
    assert "0001 -> 0002" in joined and "0002 -> 0003" in joined
    assert "discovery_state" in joined and "ui_capabilities" in joined
    assert _versions(engine) == ["0001"]  # --sql ran nothing
    rest = upgrade(engine)
    assert rest.applied == CHAIN[1:] and rest.from_revision == "0001"
    engine.dispose()


def test_offline_sql_from_empty_builds_the_exact_schema(empty_url: str, dialect: str) -> None:
    engine = open_engine(empty_url)
    offline = upgrade(engine, sql=True)
    _run_script(engine, offline.sql)
    assert check_agent_tables(engine) == []
    assert _versions(engine) == [HEAD]
    engine.dispose()


@pytest.mark.parametrize("dialect", ["sqlite", "mysql"], indirect=True)
def test_optional_branches_do_nothing_off_postgresql(empty_url: str) -> None:
    engine = open_engine(empty_url)
    upgrade(engine)
    result = upgrade(engine, "documents@head")
    assert result.applied == ["d001"]
    with engine.connect() as conn:
        tables = {p.table for p in check_agent_tables(conn)}
        assert tables == set()
        assert applied_branches(conn) == ["documents"]
    engine.dispose()


@pytest.mark.parametrize("dialect", ["postgresql"], indirect=True)
def test_documents_branch_on_postgresql(empty_url: str) -> None:
    engine = open_engine(empty_url)
    upgrade(engine)
    assert upgrade(engine, "documents@head").applied == ["d001"]
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO agent_document (id, title, created_at) VALUES ('d', 'Doc', 1)"
        )
        conn.exec_driver_sql(
            "INSERT INTO agent_document_node (id, document_id, path, title, content, created_at)"
            " VALUES ('n', 'd', '/', 'Root', 'text', 1)"
        )
        conn.exec_driver_sql("DELETE FROM agent_document")
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM agent_document_node").scalar() == 0
        assert current_revision(conn) == HEAD
        assert applied_branches(conn) == ["documents"]
    engine.dispose()


@pytest.mark.parametrize("dialect", ["postgresql"], indirect=True)
def test_rag_branch_without_pgvector_is_a_clear_error(empty_url: str, cli: Any) -> None:
    engine = open_engine(empty_url)
    with engine.connect() as conn:
        has_vector = conn.exec_driver_sql(
            "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
        ).first()
    if has_vector:
        pytest.skip("this server has pgvector")
    with pytest.raises(MissingExtension, match="pgvector"):
        upgrade(engine, "rag@head")
    result = cli("db", "upgrade", "rag@head", "--db", empty_url)
    assert result.exit_code == 3
    assert result.stderr.startswith("error: ") and "pgvector" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT to_regclass('agent_rag_chunk')").scalar() is None
        assert applied_branches(conn) == []
    engine.dispose()


@pytest.fixture(scope="module")
def pgvector_url() -> Iterator[str]:
    """A PostgreSQL with pgvector, from the ``pgserver`` package, on a local socket."""
    folder = tempfile.mkdtemp(prefix="agora-pgserver-")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        pgserver = pytest.importorskip("pgserver")
        server = pgserver.get_server(folder, cleanup_mode="stop")
    try:
        yield str(server.get_uri())
    finally:
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_rag_branch_with_pgvector(pgvector_url: str) -> None:
    engine = open_engine(pgvector_url)
    os.environ["AGORA_RAG_DIMENSIONS"] = "3"
    try:
        result = upgrade(engine, "rag@head")
    finally:
        del os.environ["AGORA_RAG_DIMENSIONS"]
    assert result.applied == ["r001"]
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO agent_rag_chunk (id, source_id, chunk_index, content, embedding,"
            " created_at) VALUES ('c1', 's', 0, 'hello', '[1,0,0]', 1),"
            " ('c2', 's', 1, 'world', '[0,1,0]', 1)"
        )
        nearest = conn.exec_driver_sql(
            "SELECT id FROM agent_rag_chunk ORDER BY embedding <=> '[0.9,0.1,0]' LIMIT 1"
        ).scalar()
        indexes = {
            r[0]
            for r in conn.exec_driver_sql(
                "SELECT indexdef FROM pg_indexes WHERE tablename = 'agent_rag_chunk'"
            )
        }
        assert applied_branches(conn) == ["rag"]
        assert current_revision(conn) is None  # the main chain was not run
    assert nearest == "c1"
    assert any("hnsw" in d for d in indexes)
    engine.dispose()


@pytest.mark.slow
def test_migrations_run_from_any_folder_without_alembic_ini(empty_url: str, tmp_path: Path) -> None:
    agora = str(Path(sys.executable).with_name("agora"))
    proc = subprocess.run(
        [agora, "db", "upgrade", "--db", empty_url, "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert '"applied"' in proc.stdout
    assert not (tmp_path / "alembic.ini").exists()


def _sums(report: Any) -> dict[str, tuple[int, ...]]:
    return {r.key: (r.turns, r.input_tokens, r.unpriced_turns) for r in report.rows}


def test_the_rollup_branch_on_a_folded_database_stays_exact_and_leaves_the_head_alone(
    empty_url: str,
) -> None:
    from datetime import date

    from sqlalchemy import event, func, select

    from agora_cli.store._clock import DAY_MS, ManualClock, parse_instant
    from agora_cli.store._fold import fold, has_rollup
    from agora_cli.store._ledger import spend
    from agora_cli.store._schema import thread, token_usage, usage_model_daily

    engine = open_engine(empty_url)
    with pytest.raises(InvalidInput, match="run agora db upgrade first"):
        upgrade(engine, "rollup@head")  # the fold tables come first
    assert upgrade(engine).applied == CHAIN
    t0 = parse_instant("2026-03-01T00:00:00Z")
    with engine.begin() as conn:
        assert not has_rollup(conn)  # agent@head is the spec's schema: no rollup table
        conn.execute(
            thread.insert().values(id="t", actor_ref="a", title="", created_at=0, updated_at=0)
        )
        conn.execute(
            token_usage.insert(),
            [
                {
                    "id": f"u{n}",
                    "thread_id": "t",
                    "actor_ref": f"a{n % 3}",
                    "tenant_ref": None if n % 2 else "acme",
                    "model_id": f"m{n % 4}",
                    "purpose": "chat",
                    "input_tokens": 100 + n,
                    "output_tokens": 10,
                    "cost_usd": None if n % 5 == 0 else 0.01 * n,
                    "cost_source": None if n % 5 == 0 else "estimate",
                    "created_at": t0 + n * DAY_MS // 4,
                }
                for n in range(40)
            ],
        )
    clock = ManualClock(t0 + 20 * DAY_MS)
    fold(engine, clock=clock)
    result = upgrade(engine, "rollup@head")
    assert result.applied == ["m001"] and result.to_revision == "m001"
    with engine.connect() as conn:
        assert current_revision(conn) == HEAD  # the main chain's head is untouched
        assert applied_branches(conn) == ["rollup"]
        assert has_rollup(conn)
    assert check_agent_tables(engine) == []
    assert upgrade(engine, "rollup@head").applied == []
    window = {"by": "model", "from_day": date(2026, 3, 1), "to_day": date(2026, 3, 10)}

    def report() -> tuple[Any, Any, str]:
        seen: list[str] = []
        with engine.connect() as conn:
            event.listen(conn, "before_cursor_execute", lambda *a: seen.append(a[2]))
            folded, raw = spend(conn, **window), spend(conn, **window, raw=True)
            conn.rollback()
        return folded, raw, "\n".join(seen)

    folded, raw, sql = report()  # the days are folded, the rollup empty: the daily fold is read
    assert folded.folded_days == 10 and "FROM agent_usage_daily" in sql
    assert _sums(folded) == _sums(raw)
    refolded = fold(engine, clock=clock)
    assert refolded.refolded == 10  # every day with ledger rows, refolded with its rollup
    folded, raw, sql = report()
    assert folded.folded_days == 10 and ROLLUP_READ in sql
    assert _sums(folded) == _sums(raw)
    assert folded.total.cost_usd == pytest.approx(raw.total.cost_usd)
    with engine.connect() as conn:
        assert conn.execute(select(func.sum(usage_model_daily.c.turns))).scalar() == 40
    assert downgrade(engine, "rollup@base") == ["m001"]  # derived data: it may be dropped
    with engine.connect() as conn:
        assert not has_rollup(conn) and applied_branches(conn) == []
        assert current_revision(conn) == HEAD
    folded, raw, sql = report()
    assert ROLLUP_READ not in sql and _sums(folded) == _sums(raw)
    assert fold(engine, clock=clock).refolded == 0
    engine.dispose()
