"""Fixtures for the Patroni cluster tests (``tests/patroni``).

The cluster: ``AGORA_TEST_PATRONI`` (what ``python tests/patroni/cluster.py up`` prints: libpq's
multi-host URL, then SQLAlchemy's ``?host=`` form, separated by ``|``). Unset, the tests are
skipped, saying how to run them; ``AGORA_TEST_PATRONI=boot`` makes the fixture boot the
three-node cluster of ``cluster.py`` itself (10-25 s; Patroni from the ``dev`` extra, Debian's
``etcd-server``, PostgreSQL 15) and ``tests/conftest.py`` stops it when the run ends.
``AGORA_TEST_REQUIRE`` containing ``patroni`` (as ``.ci/run`` sets it) turns every such skip
into a failure. The tests read the members' roles from Patroni's REST API
on ``cluster.py``'s ports (``AGORA_PATRONI_REST_PORT``, default 8008-8010).

- ``patroni``: a ``Patroni`` (session): the two URLs, and the members as Patroni sees them now.
- ``patroni_db``: a new empty database on the cluster, as a ``PatroniDb`` (dropped afterwards).

Every test here has the cluster to itself (``_one_at_a_time``: a file lock, since pytest-xdist
runs tests of this folder in several processes) and starts on a healthy cluster: a switchover in
one test must not land in another's writes.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import unavailable, unique_name


def _load(name: str, path: Path) -> Any:
    """Import ``path`` as module ``name`` (``cluster`` alone would be tests/galera's)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


# The test modules here `import patroni_cluster as cluster`.
cluster = _load("patroni_cluster", Path(__file__).resolve().parent / "cluster.py")

BOOTED_MARKER = cluster.BASE_DIR / "booted-by-pytest"


@dataclass(frozen=True)
class Patroni:
    libpq_url: str  # postgresql://u:pw@h1:p1,h2:p2,h3:p3/postgres?target_session_attrs=read-write
    sqlalchemy_url: str  # postgresql://u:pw@/postgres?host=h1:p1&host=…&target_session_attrs=…

    def members(self) -> list[dict[str, Any]]:
        return cluster.members()

    def member_url(self, role: str, database: str = "postgres") -> str:
        """The single-host URL of the member in ``role`` (leader, sync_standby, replica)."""
        found = [m for m in cluster.members() if m.get("role") == role]
        assert found, f"no {role} in {cluster.members()}"
        return cluster.node_url(cluster.node_index(str(found[0]["name"])), database)


@dataclass(frozen=True)
class PatroniDb:
    name: str
    libpq_url: str
    sqlalchemy_url: str


def _unavailable(reason: str) -> None:
    unavailable("patroni", reason)


@pytest.fixture(scope="session")
def patroni() -> Patroni:
    given = os.environ.get("AGORA_TEST_PATRONI", "").strip()
    if not given:
        _unavailable(
            "AGORA_TEST_PATRONI is not set (the URLs `python tests/patroni/cluster.py up`"
            " prints, or `boot`)"
        )
    if given != "boot":
        urls = [u.strip() for u in given.split("|") if u.strip()]
    else:
        reason = cluster.missing()
        if reason:
            _unavailable(f"no Patroni cluster: {reason}")
        was_up = cluster.etcd_pid() is not None and cluster.healthy()
        try:
            urls = cluster.up()
        except RuntimeError as exc:
            pytest.fail(f"could not boot the Patroni cluster: {exc}", pytrace=False)
        if not was_up:
            BOOTED_MARKER.touch()  # tests/conftest.py stops it when the run ends
    if len(urls) != 2:
        pytest.fail(f"AGORA_TEST_PATRONI needs two URLs separated by '|', got {len(urls)}")
    try:
        cluster.wait_healthy(60)
    except RuntimeError as exc:
        _unavailable(f"the Patroni cluster is not healthy: {exc}")
    return Patroni(*urls)


@pytest.fixture(autouse=True)
def _one_at_a_time(patroni: Patroni) -> Iterator[None]:
    with open(cluster.BASE_DIR.parent / f".{cluster.BASE_DIR.name}.tests.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            cluster.wait_healthy(120)
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _with_database(url: str, name: str) -> str:
    """A multi-host URL (either form) pointed at database ``name``."""
    head, _, query = url.partition("?")
    base = head.rsplit("/", 1)[0]
    return f"{base}/{name}?{query}"


@pytest.fixture
def patroni_db(patroni: Patroni) -> Iterator[PatroniDb]:
    import psycopg

    name = unique_name("agora_p")
    with psycopg.connect(patroni.libpq_url, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield PatroniDb(
            name,
            _with_database(patroni.libpq_url, name),
            _with_database(patroni.sqlalchemy_url, name),
        )
    finally:
        for _ in range(3):  # the primary may just have changed
            try:
                with psycopg.connect(patroni.libpq_url, autocommit=True, connect_timeout=5) as c:
                    c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                break
            except psycopg.OperationalError:
                cluster.wait_writable(time.monotonic() + 60)
