"""Legacy proposals seen from `agora db`: `db backfill`, `db status`, and migration 0002."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import no_data
from sqlalchemy import select

from agora_cli.store.engine import open_engine
from agora_cli.store.migrate import current_revision, upgrade
from agora_cli.store.proposals import count_legacy_proposals
from agora_cli.store.schema import action_proposal, thread

STATES: list[dict[str, Any]] = [
    {"decision": "pending", "expires_at": 50},
    {"decision": "approved", "decided_at": 20, "execution_state": "queued"},
    {
        "decision": "approved",
        "decided_at": 21,
        "execution_state": "running",
        "lease_expires_at": 60,
    },
    {"decision": "rejected", "decided_at": 22},
    {"decision": "approved", "decided_at": 23, "execution_state": "succeeded", "settled_at": 30},
]
EXPECTED = [("pending", 50), ("queued", 20), ("running", 60), ("done", None), ("done", None)]


def insert_legacy(engine: Any, n: int) -> None:
    """Write ``n`` proposals as an older writer would: no discovery columns."""
    with engine.begin() as conn:
        if not conn.execute(select(thread.c.id).where(thread.c.id == "t1")).first():
            conn.execute(
                thread.insert().values(
                    id="t1",
                    actor_ref="alice",
                    tenant_ref=None,
                    title="",
                    created_at=0,
                    updated_at=0,
                )
            )
        rows = []
        for i in range(n):
            # Only the columns an older writer knew: no discovery or outcome columns.
            row = {
                c.name: None
                for c in action_proposal.columns
                if not c.name.startswith(("discovery", "outcome"))
            }
            row.update(
                id=f"legacy-{i:05d}",
                idempotency_key=f"key-{i:05d}",
                actor_ref="alice",
                thread_id="t1",
                tool_name="refund",
                input=f'{{"order": {i}}}',
                decided_by="bob" if STATES[i % len(STATES)].get("decided_at") else None,
                generation=0,
                attempts=0,
                version=2,
                created_at=i,
                updated_at=i + 1,
                **STATES[i % len(STATES)],
            )
            rows.append(row)
        conn.execute(action_proposal.insert(), rows)


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
            assert current_revision(conn) == "0003"
        rows = discovery(engine)
        assert len(rows) == 1203
        assert [(r[1], r[2]) for r in rows] == [EXPECTED[i % len(STATES)] for i in range(1203)]
        assert {r[3] for r in rows} == {3}
        assert upgrade(engine).applied == []  # re-running is a no-op
        assert {r[3] for r in discovery(engine)} == {3}
    finally:
        engine.dispose()
