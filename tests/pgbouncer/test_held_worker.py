"""A worker's held connection through PgBouncer (issue 29): never a server-side prepare.

A store that holds its connection (``hold_connection=True``) prepares its statements on a direct
connection only: through either pooler the startup's backend pid is the pooler's, so the
connection keeps psycopg's "never prepare", and a queue drains through the transaction pooler
(where a prepared statement would fail on the next server connection) with every job settled
once.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from workload import queue_approved, states

from agora_cli.store import ActionProposalStore, open_engine
from agora_cli.store._proposals import Settlement

pytestmark = [pytest.mark.pgbouncer]

LEASE_MS = 600_000


@pytest.mark.parametrize("mode", ["transaction", "session"])
def test_a_held_worker_never_prepares_through_the_pooler(
    pooled_db: dict[str, str], mode: str
) -> None:
    ids = queue_approved(pooled_db["direct"], 30)
    engine = open_engine(pooled_db[mode])
    done: list[str] = []
    try:
        with ActionProposalStore(engine, hold_connection=True) as store:
            while True:
                got = store.claim_next("w1", LEASE_MS)
                if got.work is None or got.lease is None:
                    break
                held: Any = store._held
                assert held.connection.driver_connection.prepare_threshold is None
                lease = got.lease
                settled = store.settle(got.work.id, lease.token, lease.generation, "succeeded", {})
                assert settled.outcome == "settled"
                done.append(got.work.id)
                batch = store.claim_next("w1", LEASE_MS, limit=4)
                items = [
                    Settlement(c.work.id, c.lease.token, c.lease.generation, "succeeded")
                    for c in batch
                    if c.work and c.lease
                ]
                if items:
                    assert {r.outcome for r in store.settle_many(items)} == {"settled"}
                    done += [s.proposal_id for s in items]
    finally:
        engine.dispose()
    assert sorted(done) == sorted(ids)
    assert states(pooled_db["direct"]) == Counter({"succeeded": len(ids)})
