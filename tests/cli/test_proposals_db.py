"""Legacy proposals seen from `agora db`: `db backfill`, `db status`, and migration 0002."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import EXPECTED, STATES, insert_legacy, no_data
from sqlalchemy import select

from agora_cli.store._engine import open_engine
from agora_cli.store._migrate import current_revision, head_revision, upgrade
from agora_cli.store._proposals import count_legacy_proposals
from agora_cli.store._schema import action_proposal

HEAD = head_revision()  # the main chain's head
CHAIN = [f"{n:04d}" for n in range(1, int(HEAD) + 1)]


def discovery(engine: Any) -> list[tuple[str, str | None, int | None, int]]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(
                action_proposal.c.id,
                action_proposal.c.discovery_state,
                action_proposal.c.discovery_at,
                action_proposal.c.version,
            ).order_by(action_proposal.c.id)
        ).all()
    return [tuple(r) for r in rows]  # type: ignore[misc]


def test_db_backfill_in_batches(cli: Any, db_url: str, engine: Any) -> None:
    insert_legacy(engine, 10)
    status = cli("db", "status", "--db", db_url, "--json")
    assert status.exit_code == 0, status.stderr
    assert status.json()["legacy_proposals"] == 10

    first = cli("db", "backfill", "--limit", "3", "--max-batches", "2", "--db", db_url, "--json")
    assert first.exit_code == 0, first.stderr
    assert first.json() == {"batches": 2, "backfilled": 6, "remaining": 4}
    assert cli("db", "status", "--db", db_url, "--json").json()["legacy_proposals"] == 4

    rest = cli("db", "backfill", "--limit", "3", "--db", db_url, "--json")
    assert rest.json() == {"batches": 2, "backfilled": 4, "remaining": 0}
    again = cli("db", "backfill", "--db", db_url, "--json")
    assert again.json() == {"batches": 0, "backfilled": 0, "remaining": 0}
    assert cli("db", "status", "--db", db_url, "--json").json()["legacy_proposals"] == 0

    rows = discovery(engine)
    assert [(r[1], r[2]) for r in rows] == [EXPECTED[i % len(STATES)] for i in range(10)]
    assert {r[3] for r in rows} == {3}


@pytest.mark.parametrize("limit", ["0", "10001"])
def test_db_backfill_limit_out_of_range(cli: Any, db_url: str, limit: str) -> None:
    result = cli("db", "backfill", "--limit", limit, "--db", db_url, "--json")
    assert result.exit_code == 2
    assert no_data(result)


def test_migration_0002_backfills_legacy_rows(empty_url: str) -> None:
    engine = open_engine(empty_url)
    try:
        assert upgrade(engine, "0001").to_revision == "0001"
        insert_legacy(engine, 1203)  # more than two batches of 500
        with engine.connect() as conn:
            assert count_legacy_proposals(conn) == 1203
        result = upgrade(engine)
        assert result.applied[:1] == ["0002"]
        with engine.connect() as conn:
            assert count_legacy_proposals(conn) == 0
            assert current_revision(conn) == HEAD
        rows = discovery(engine)
        assert len(rows) == 1203
        assert [(r[1], r[2]) for r in rows] == [EXPECTED[i % len(STATES)] for i in range(1203)]
        assert {r[3] for r in rows} == {3}
        assert upgrade(engine).applied == []  # re-running is a no-op
        assert {r[3] for r in discovery(engine)} == {3}
    finally:
        engine.dispose()
