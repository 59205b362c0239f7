"""Issue 27's cluster workload: 6 workers claiming and settling 5,000 approved proposals through
libpq's multi-host URL while the test runs ``patronictl switchover`` and then kills the primary's
postmaster (``kill -9``; its Patroni restarts it in place).

What must hold: every proposal ends ``succeeded`` and was settled exactly once (one ``settled``
answer over all workers); no exception other than agora's reaches a worker; nothing stays
``running`` when the test ends. ``AGORA_TEST_FAILOVER_N`` (default 5,000) sets the count.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import TYPE_CHECKING, Any

import patroni_cluster as cluster  # tests/patroni/cluster.py, loaded by this folder's conftest
import pytest
from workload import Workload, queue_approved, start_workers, states, stop_workers, wait_for

if TYPE_CHECKING:
    from conftest import PatroniDb

pytestmark = [pytest.mark.patroni, pytest.mark.slow]

N = int(os.environ.get("AGORA_TEST_FAILOVER_N", "5000"))
WORKERS = 6
DEADLINE_S = 600


def test_six_workers_through_a_switchover_and_a_primary_kill(patroni_db: PatroniDb) -> None:
    url = patroni_db.libpq_url  # libpq's multi-host form, target_session_attrs=read-write
    queue_approved(url, N)
    w = Workload()
    threads = start_workers(url, w, WORKERS)
    events: dict[str, Any] = {}
    try:
        wait_for(w, N // 4, DEADLINE_S)
        events["switchover"] = cluster.switchover()
        wait_for(w, min(N, w.done() + N // 4), DEADLINE_S)
        events["kill"] = cluster.kill_primary()
        wait_for(w, N, DEADLINE_S)
    finally:
        stop_workers(w, threads)
    assert w.foreign == [], "\n".join(w.foreign[:3])
    twice = {pid: n for pid, n in w.settled.items() if n != 1}
    assert twice == {}, f"settled more than once: {list(twice.items())[:5]}"
    assert len(w.settled) == N
    assert states(url) == Counter({"succeeded": N})  # none left running
    assert events["switchover"][1] != events["switchover"][2]
    cluster.wait_healthy(120)
