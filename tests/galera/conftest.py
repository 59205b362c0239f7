"""Fixtures for the Galera cluster tests (``tests/galera``, all marked slow).

The cluster: ``AGORA_TEST_GALERA`` (comma-separated node URLs, e.g. what
``python tests/galera/cluster.py up`` prints); when it is unset and mariadb-server, galera-4 and
rsync are installed, the fixture boots the three-node cluster of ``cluster.py`` itself (about
10-30 s), and stops it at the end of the run (``tests/conftest.py``). Only where those packages
are missing are the tests skipped, with the reason; ``AGORA_TEST_REQUIRE`` containing
``galera`` (as ``.ci/run`` sets it) turns that skip into a failure.

- ``galera_nodes``: the admin URLs of the nodes (session).
- ``galera_db``: a new empty database on the cluster, as one URL per node (dropped afterwards).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import unavailable, unique_name, with_database

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cluster

BOOTED_MARKER = cluster.BASE_DIR / "booted-by-pytest"


def _unavailable(reason: str) -> None:
    unavailable("galera", reason)


@pytest.fixture(scope="session")
def galera_nodes() -> list[str]:
    given = os.environ.get("AGORA_TEST_GALERA", "").strip()
    if given:
        urls = [u.strip() for u in given.split(",") if u.strip()]
    else:
        reason = cluster.missing()
        if reason:
            _unavailable(f"no Galera cluster: {reason} (or set AGORA_TEST_GALERA)")
        was_up = all(cluster.synced(i) for i in range(cluster.NODES))
        try:
            urls = cluster.up()
        except RuntimeError as exc:
            pytest.fail(f"could not boot the Galera cluster: {exc}", pytrace=False)
        if not was_up:
            BOOTED_MARKER.touch()  # tests/conftest.py stops it when the run ends
    if len(urls) < 2:
        pytest.fail(f"AGORA_TEST_GALERA needs two or more node URLs, got {len(urls)}")
    from agora_cli.store._engine import is_galera, open_engine

    for url in urls:
        try:
            engine = open_engine(url)
        except Exception as exc:
            _unavailable(f"Galera node unreachable ({str(exc).splitlines()[0]})")
        try:
            if not is_galera(engine):
                pytest.fail(f"{url} is not a Galera node (wsrep_on is not ON)", pytrace=False)
        finally:
            engine.dispose()
    return urls


@pytest.fixture
def galera_db(galera_nodes: list[str]) -> Iterator[list[str]]:
    from agora_cli.store._engine import open_engine

    name = unique_name("agora_g")
    admin: Any = open_engine(galera_nodes[0], isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    try:
        yield [with_database(url, name) for url in galera_nodes]
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")
        admin.dispose()
