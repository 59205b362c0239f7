"""Reports from a standby of the Patroni cluster: `--read-db` names the replica's replay lag when
it passes a second, on stderr only, and says nothing once the replica has caught up.

The lag is made for real: a transaction on the asynchronous replica holds a lock that the
primary's next ``ALTER TABLE`` needs there, so replay waits (up to ``max_standby_streaming_delay``,
30 s) while the primary commits on, and a second passes. (``pg_wal_replay_pause()`` would not do:
Patroni resumes a paused replica within its loop.)
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING

import pytest
from helpers import run_agora

if TYPE_CHECKING:
    from conftest import Patroni, PatroniDb

pytestmark = [pytest.mark.patroni, pytest.mark.slow]


def _sql(url: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True,
                         connect_timeout=5) as conn:  # fmt: skip
        conn.execute(statement)


def test_a_lagging_standby_is_named_and_a_caught_up_one_is_not(
    patroni: Patroni, patroni_db: PatroniDb
) -> None:
    provisioned = run_agora("db", "provision", "--db", patroni_db.libpq_url)
    assert provisioned.exit_code == 0, provisioned.stderr
    replica = patroni.member_url("replica", patroni_db.name)
    deadline = time.monotonic() + 30
    while run_agora("threads", "list", "--db", replica, "--json").exit_code != 0:
        assert time.monotonic() < deadline, "the replica never saw the provisioned schema"
        time.sleep(0.5)
    import psycopg

    _sql(patroni_db.libpq_url, "CREATE TABLE lag_probe (at timestamptz DEFAULT now())")
    _sql(patroni_db.libpq_url, "INSERT INTO lag_probe DEFAULT VALUES")
    holder = psycopg.connect(replica, connect_timeout=5)
    try:
        deadline = time.monotonic() + 30
        while True:  # until the replica has the table, then hold a lock on it
            try:
                holder.execute("SELECT count(*) FROM lag_probe").fetchone()
                break
            except psycopg.errors.UndefinedTable:
                holder.rollback()
                assert time.monotonic() < deadline
                time.sleep(0.2)
        _sql(patroni_db.libpq_url, "ALTER TABLE lag_probe ADD COLUMN b int")  # replay waits
        _sql(patroni_db.libpq_url, "INSERT INTO lag_probe DEFAULT VALUES")
        time.sleep(1.6)
        behind = run_agora(
            "threads", "list", "--db", patroni_db.libpq_url, "--read-db", replica, "--json"
        )
        assert behind.exit_code == 0, behind.stderr
        assert behind.json()["threads"] == []  # the data on stdout, exact
        note = r"note: the read database is ([\d.,]+) s behind its primary"
        found = re.search(note, behind.stderr)
        assert found is not None, behind.stderr
        assert float(found.group(1).replace(",", "")) > 1.0
        assert "agora-patroni" not in behind.stdout + behind.stderr  # the superuser's password
    finally:
        holder.close()  # replay goes on
    deadline = time.monotonic() + 30
    while True:
        caught_up = run_agora("threads", "list", "--read-db", replica, "--json")
        assert caught_up.exit_code == 0, caught_up.stderr
        if "behind its primary" not in caught_up.stderr:
            break
        assert time.monotonic() < deadline, caught_up.stderr
        time.sleep(0.5)
