"""agora on a three-node Patroni cluster (tests/patroni/cluster.py): provisioning through the
multi-host URL, synchronous replication to the standby, a switchover.

A store keeps working across a switchover (its lost connections retried inside the store), and
libpq's multi-host URL is accepted (issue 27).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import patroni_cluster as cluster  # tests/patroni/cluster.py, loaded by this folder's conftest

if TYPE_CHECKING:
    from conftest import Patroni, PatroniDb
import pytest
from helpers import run_agora

pytestmark = [pytest.mark.patroni, pytest.mark.slow]

ALICE = ("alice", "t1")


def add_thread(engine: Any) -> None:
    from agora_cli.store import metadata

    with engine.begin() as conn:
        conn.execute(
            metadata.tables["agent_thread"]
            .insert()
            .values(id="t1", actor_ref="alice", tenant_ref=None, title="t", created_at=0,
                    updated_at=0)
        )  # fmt: skip


def approve(store: Any, i: int) -> str:
    from agora_cli.store import NewProposal, Scope

    scope = Scope(None, *ALICE)
    new = NewProposal(scope, "refund", {"order": i}, run_id="r", tool_call_id=f"c{i}")
    pid = str(store.create(new).proposal.id)
    assert store.decide(pid, scope, "approved", "bob").outcome == "applied"
    return pid


def proposal_ids(url: str) -> set[str]:
    from sqlalchemy import select

    from agora_cli.store import metadata, open_engine

    table = metadata.tables["agent_action_proposal"]
    engine = open_engine(url)
    try:
        with engine.connect() as conn:
            return set(conn.execute(select(table.c.id)).scalars())
    finally:
        engine.dispose()


def test_the_cluster_has_a_leader_and_two_streaming_replicas(patroni: Patroni) -> None:
    members = patroni.members()
    assert sorted(m["role"] for m in members) == ["leader", "replica", "sync_standby"]
    assert all(m["state"] == "streaming" for m in members if m["role"] != "leader")


def test_provision_write_replicate_switch_over_and_write_again(
    patroni: Patroni, patroni_db: PatroniDb
) -> None:
    """Provision through SQLAlchemy's multi-host form; a write on the leader, committed with
    ``remote_apply``, is read at once on the synchronous standby; after a switchover to that
    standby a new engine on the same URL writes again and nothing committed is gone."""
    from agora_cli.store import ActionProposalStore, open_engine

    url = patroni_db.sqlalchemy_url
    provisioned = run_agora("db", "provision", "--db", url)
    assert provisioned.exit_code == 0, provisioned.stdout + provisioned.stderr
    checked = run_agora("db", "check", "--db", url, "--json")
    assert checked.exit_code == 0, checked.stdout + checked.stderr
    assert checked.json()["ok"] is True

    # remote_apply: the commit returns once the synchronous standby has replayed it.
    engine = open_engine(url, connect_args={"options": "-c synchronous_commit=remote_apply"})
    try:
        add_thread(engine)
        first = approve(ActionProposalStore(engine), 0)
    finally:
        engine.dispose()
    standby = patroni.member_url("sync_standby", patroni_db.name)
    assert proposal_ids(standby) == {first}

    took, old, new = cluster.switchover()
    assert new != old and took < 120
    assert patroni.member_url("leader") == cluster.node_url(cluster.node_index(new))

    engine = open_engine(url)
    try:
        second = approve(ActionProposalStore(engine), 1)
    finally:
        engine.dispose()
    assert proposal_ids(url) == {first, second}
    cluster.wait_healthy(120)


def test_the_libpq_multi_host_url_is_accepted(patroni_db: PatroniDb) -> None:
    provisioned = run_agora("db", "provision", "--db", patroni_db.libpq_url)
    assert provisioned.exit_code == 0, provisioned.stdout + provisioned.stderr


def test_a_store_keeps_working_across_a_switchover(patroni: Patroni, patroni_db: PatroniDb) -> None:
    from agora_cli.store import ActionProposalStore, AgoraError, ensure_agent_tables, open_engine

    engine = open_engine(patroni_db.sqlalchemy_url)
    try:
        ensure_agent_tables(engine)
        add_thread(engine)
        store = ActionProposalStore(engine)
        ids = {approve(store, 0)}
        cluster.switchover()
        for i in range(1, 4):
            try:
                ids.add(approve(store, i))
            except AgoraError:
                time.sleep(0.5)  # agora's own error is allowed; a raw driver error is not
                ids.add(approve(store, i))
        assert proposal_ids(patroni_db.sqlalchemy_url) == ids
    finally:
        engine.dispose()
        cluster.wait_healthy(120)
