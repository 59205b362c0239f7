"""Wake-ups behind a transaction pooler (issue 30): NOTIFY goes through, LISTEN needs a direct URL.

A ``WorkWaiter`` on an engine that goes through PgBouncer, given no listen URL, polls and says
why once; given the direct URL it listens there, and an approval written through the pooler
(its NOTIFY sent in the approval's transaction) wakes it.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

pytestmark = [pytest.mark.pgbouncer]


def test_a_pooled_waiter_polls_unless_given_a_direct_listen_url(
    pooled_db: dict[str, str], caplog: Any
) -> None:
    from agora_cli.store import (
        ActionProposalStore,
        NewProposal,
        Scope,
        WorkWaiter,
        ensure_agent_tables,
        open_engine,
    )
    from agora_cli.store._schema import thread

    direct = open_engine(pooled_db["direct"])
    ensure_agent_tables(direct)
    direct.dispose()
    engine = open_engine(pooled_db["transaction"])
    try:
        with caplog.at_level(logging.WARNING, logger="agora.wakeups"):
            with WorkWaiter(engine, poll_interval=30) as polling:
                assert polling.mode == "polling"
        assert polling.notice is not None and "--listen-db" in polling.notice
        assert caplog.text.count("cannot carry LISTEN") == 1
        with engine.begin() as conn:
            conn.execute(
                thread.insert().values(
                    id="t1", actor_ref="alice", title="t", created_at=0, updated_at=0
                )
            )
        store = ActionProposalStore(engine)
        scope = Scope(None, "alice", "t1")
        new = NewProposal(scope=scope, tool_name="refund", run_id="r1", tool_call_id="c1", input={})
        pid = store.create(new).proposal.id
        with WorkWaiter(engine, poll_interval=30, listen_url=pooled_db["direct"]) as listening:
            assert listening.mode == "listening" and listening.notice is None
            assert store.decide(pid, scope, "approved", "bob").outcome == "applied"
            assert listening.wait_for_work(timeout=30) is True
    finally:
        engine.dispose()
