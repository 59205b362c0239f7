"""Fixtures: every store test runs on SQLite, PostgreSQL and MySQL/MariaDB over real connections.

Servers come from ``AGORA_TEST_POSTGRES_URL`` / ``AGORA_TEST_MYSQL_URL`` (defaults: the local
servers). Each test session creates its own uniquely named databases and drops them afterwards.
A dialect whose server is unreachable is skipped (and named in the summary) unless it is listed
in ``AGORA_TEST_REQUIRE`` (``.ci/run`` sets
``postgresql,mysql,galera,pgbouncer,patroni,prometheus``), where that is a failure; the clusters
and poolers of ``tests/galera``, ``tests/pgbouncer`` and ``tests/patroni``, and Prometheus and
promtool (``tests/metrics``), are named there the same way.

``AGORA_TEST_PG_POOLER_URL`` (e.g. ``postgresql://postgres@127.0.0.1:6432/postgres``, the
transaction-mode PgBouncer of ``tests/pgbouncer/pooler.py``) sends the PostgreSQL tests' own
connections through a pooler: each database is still created and dropped on the server of
``AGORA_TEST_POSTGRES_URL``, but ``empty_url``, ``db_url`` and ``engine`` point at the pooler.

Fixtures:
- ``dialect``: parametrised over sqlite, postgresql, mysql.
- ``empty_url``: a brand-new empty database of that dialect, for this test only.
- ``db_url``: a provisioned database shared by the session, all agent tables emptied before the
  test. Tests that change the schema must use ``empty_url`` instead.
- ``engine``: ``open_engine(db_url)``.
- ``cli``: ``helpers.run_cli`` (the CLI in-process; ``helpers.run_agora`` starts a process).
- ``clock``: a ``ManualClock`` at ``helpers.T0``; ``thread``: thread ``th-1`` in ``engine``.
- ``pg_url`` / ``app_role``: a provisioned PostgreSQL database of the test's own, a role name.
- ``catalog`` / ``served_catalog``: the models.dev snapshot read from its file / over HTTP.
- ``offline_catalog`` / ``no_kek_in_env``: environment guards a module takes through
  ``pytestmark = pytest.mark.usefixtures(...)``.

Every test that takes ``databases`` (so any of the database fixtures) is marked ``db``.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import (
    DIALECTS,
    FIXTURE_CATALOG,
    MYSQL_ADMIN_URL,
    PG_ADMIN_URL,
    PG_POOLER_URL,
    REQUIRABLE,
    REQUIRED,
    T0,
    UNAVAILABLE,
    drop_roles,
    run_cli,
    unique_name,
    with_database,
)
from hypothesis import settings

# Hypothesis: the default profile runs every test's full count (`make test`, CI); `fast`
# (`make test-fast`, `--hypothesis-profile=fast`) a tenth of it, through helpers.examples().
settings.register_profile("fast", max_examples=10)

# Temporary files (every SQLite database, tmp_path) go to memory when the machine has a tmpfs:
# a SQLite commit fsyncs, about 9 ms on this disk and 0.1 ms on /dev/shm, and a test commits a
# dozen times. AGORA_TEST_TMPDIR names another folder; TMPDIR, when set, is left alone.
_TMP = os.environ.get("AGORA_TEST_TMPDIR") or (
    "/dev/shm" if "TMPDIR" not in os.environ and os.access("/dev/shm", os.W_OK) else None
)
if _TMP:
    os.environ["TMPDIR"] = _TMP  # subprocesses the tests start, too
    tempfile.tempdir = None  # pytest's tmp_path_factory asks tempfile.gettempdir()

# Output into a pipe is laid out for 120 columns unless COLUMNS says otherwise; pytest-xdist's
# workers start with COLUMNS=80 (and LINES=24), which a plain `pytest` run does not have. Every
# test sees what a pipe sees, and a test that wants a width sets COLUMNS itself.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

# `make test-fast` runs SQLite only: AGORA_TEST_DIALECTS=sqlite (default: all three).
SELECTED = tuple(
    d for d in (os.environ.get("AGORA_TEST_DIALECTS") or ",".join(DIALECTS)).split(",") if d
)
_skipped: dict[str, str] = {}


class Server:
    """A database server on which the session creates and drops its own databases; with
    ``via`` (a pooler in front of it), the URLs handed to tests point there instead."""

    def __init__(self, dialect: str, admin_url: str, via: str | None = None) -> None:
        self.dialect = dialect
        self.admin_url = admin_url
        self.via = via
        self.error: str | None = None
        self.created: list[str] = []
        self._engine: Any = None

    def engine(self) -> Any:
        if self._engine is None:
            from agora_cli.store._engine import open_engine

            self._engine = open_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        return self._engine

    def probe(self) -> bool:
        if self.error is not None:
            return False
        try:
            self.engine()
            if self.via is not None:
                from agora_cli.store import open_engine

                open_engine(self.via).dispose()
            return True
        except Exception as exc:
            self.error = str(exc).splitlines()[0]
            return False

    def create(self) -> str:
        name = unique_name()
        with self.engine().connect() as conn:
            if self.dialect == "mysql":
                conn.exec_driver_sql(
                    f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
                )
            else:
                conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        self.created.append(name)
        return with_database(self.via or self.admin_url, name)

    def drop_all(self) -> None:
        if self._engine is None:
            return
        with self._engine.connect() as conn:
            for name in self.created:
                if self.dialect == "mysql":
                    conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")
                else:
                    conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self._engine.dispose()


@pytest.fixture(scope="session")
def servers() -> Iterator[dict[str, Server]]:
    found = {
        "postgresql": Server("postgresql", PG_ADMIN_URL, via=PG_POOLER_URL),
        "mysql": Server("mysql", MYSQL_ADMIN_URL),
    }
    yield found
    for server in found.values():
        server.drop_all()


class Databases:
    """Creates databases of a dialect for the session (SQLite: files in a temp folder)."""

    def __init__(self, servers: dict[str, Server], tmp_factory: Any) -> None:
        self.servers = servers
        self.tmp_factory = tmp_factory
        self.provisioned: dict[str, str] = {}

    def require(self, dialect: str) -> None:
        if dialect not in SELECTED:
            pytest.skip(f"{dialect} not selected (AGORA_TEST_DIALECTS={','.join(SELECTED)})")
        if dialect == "sqlite":
            return
        server = self.servers[dialect]
        if not server.probe():
            reason = f"{dialect} unreachable ({server.error})"
            if dialect in REQUIRED:
                pytest.fail(f"{reason}, and AGORA_TEST_REQUIRE lists it", pytrace=False)
            _skipped[dialect] = reason
            pytest.skip(reason)

    def new(self, dialect: str) -> str:
        self.require(dialect)
        if dialect == "sqlite":
            path = self.tmp_factory.mktemp("sqlite") / "agora.db"
            path.touch()  # an empty database exists; only a missing file is "no database"
            return f"sqlite:///{path}"
        return self.servers[dialect].create()

    def shared(self, dialect: str) -> str:
        self.require(dialect)
        if dialect not in self.provisioned:
            from agora_cli.store._engine import open_engine
            from agora_cli.store._provision import ensure_agent_tables

            url = self.new(dialect)
            engine = open_engine(url)
            ensure_agent_tables(engine)
            engine.dispose()
            self.provisioned[dialect] = url
        return self.provisioned[dialect]


@pytest.fixture(scope="session")
def databases(servers: dict[str, Server], tmp_path_factory: Any) -> Databases:
    return Databases(servers, tmp_path_factory)


@pytest.fixture(params=[d for d in DIALECTS if d in SELECTED])
def dialect(request: Any, databases: Databases) -> str:
    databases.require(request.param)
    return str(request.param)


@pytest.fixture
def empty_url(dialect: str, databases: Databases) -> str:
    return databases.new(dialect)


def clear_agent_tables(url: str) -> None:
    from agora_cli.store._engine import open_engine
    from agora_cli.store._fold import has_rollup
    from agora_cli.store._schema import metadata, usage_model_daily

    engine = open_engine(url)
    with engine.begin() as conn:
        for table in reversed(metadata.sorted_tables):
            conn.execute(table.delete())
        if has_rollup(conn):  # the optional rollup branch, if a test applied it
            conn.execute(usage_model_daily.delete())
    engine.dispose()


@pytest.fixture
def db_url(dialect: str, databases: Databases) -> str:
    url = databases.shared(dialect)
    clear_agent_tables(url)
    return url


@pytest.fixture
def engine(db_url: str) -> Iterator[Any]:
    from agora_cli.store._engine import open_engine

    eng = open_engine(db_url)
    yield eng
    eng.dispose()


@pytest.fixture
def cli() -> Any:
    return run_cli


def pytest_configure(config: Any) -> None:
    unknown = sorted(REQUIRED - set(REQUIRABLE))
    if unknown:
        raise pytest.UsageError(
            f"AGORA_TEST_REQUIRE names {', '.join(unknown)}: it takes {', '.join(REQUIRABLE)}"
        )


# What tests booted for this run (not what they found running) and stop when it ends:
# each folder's script and the marker file its conftest leaves in the script's BASE_DIR.
BOOTED_BY_TESTS = (("galera", "cluster.py"), ("pgbouncer", "pooler.py"), ("patroni", "cluster.py"))


@pytest.fixture
def clock() -> Any:
    """A ``ManualClock`` at ``helpers.T0`` (2026-01-01T00:00:00Z)."""
    from agora_cli.store._clock import ManualClock

    return ManualClock(T0)


@pytest.fixture
def pg_url(databases: Databases) -> str:
    """A new PostgreSQL database of this test's own, provisioned (RLS and role tests)."""
    from agora_cli.store._engine import open_engine
    from agora_cli.store._provision import ensure_agent_tables

    databases.require("postgresql")
    url = str(databases.new("postgresql"))
    engine = open_engine(url)
    ensure_agent_tables(engine)
    engine.dispose()
    return url


@pytest.fixture
def app_role(pg_url: str) -> Iterator[str]:
    """A fresh role name on ``pg_url``'s server; the role, if a test made it, dropped after."""
    role = f"agora_app_{secrets.token_hex(5)}"
    yield role
    drop_roles(pg_url, f"{role}_rt", role)  # its member login (helpers.member_login_url) first


@pytest.fixture
def thread(engine: Any) -> str:
    """Thread ``th-1`` (alice's, no tenant) in ``engine``'s database."""
    from agora_cli.store import _schema as schema

    with engine.begin() as conn:
        conn.execute(
            schema.thread.insert().values(
                id="th-1", actor_ref="alice", title="t", created_at=0, updated_at=0
            )
        )
    return "th-1"


@pytest.fixture(scope="session")
def catalog() -> Any:
    """The models.dev snapshot in tests/fixtures, parsed once per test process (read-only)."""
    from agora_cli.store._catalog import fetch_catalog

    return fetch_catalog(str(FIXTURE_CATALOG))


@pytest.fixture(scope="session")
def served_catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The same snapshot fetched from a local HTTP server (its source an http:// URL)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from agora_cli.store._catalog import fetch_catalog

    body = FIXTURE_CATALOG.read_bytes()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    ).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/api.json"
    try:
        yield fetch_catalog(url, cache_dir=tmp_path_factory.mktemp("catalog-cache"))
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def offline_catalog(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """No network and no shared cache: the catalog is the fixture file, the cache in tmp_path."""
    monkeypatch.setenv("AGORA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("AGORA_MODELS_DEV_URL", str(FIXTURE_CATALOG))


@pytest.fixture
def no_kek_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither AGORA_KEK nor AGORA_KEK_FILE from the shell reaches the test."""
    monkeypatch.delenv("AGORA_KEK", raising=False)
    monkeypatch.delenv("AGORA_KEK_FILE", raising=False)


def pytest_collection_modifyitems(items: list[Any]) -> None:
    """Mark ``db`` every test that takes a database (``databases``, so ``dialect``, ``db_url``,
    ``empty_url``, ``engine``, ``pg_url``): ``make test-pg`` / ``make test-mysql`` run those."""
    for item in items:
        if "databases" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.db)


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    """Stop the Galera cluster, PgBouncer and Patroni cluster that tests booted for this run.

    In the main process only: under pytest-xdist it ends after every worker has."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    import importlib.util
    from pathlib import Path

    for folder, script in BOOTED_BY_TESTS:
        path = Path(__file__).resolve().parent / folder / script
        if not path.exists():
            continue
        spec = importlib.util.spec_from_file_location(f"agora_test_{folder}_{script[:-3]}", path)
        if spec is None or spec.loader is None:
            continue
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        marker = module.BASE_DIR / "booted-by-pytest"
        if marker.exists():
            module.down()
            marker.unlink(missing_ok=True)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if set(SELECTED) != set(DIALECTS):
        terminalreporter.write_line(f"dialects: only {', '.join(SELECTED)} (AGORA_TEST_DIALECTS)")
    elif _skipped:
        terminalreporter.write_sep("=", "dialects skipped")
        for dialect, reason in sorted(_skipped.items()):
            terminalreporter.write_line(f"{dialect}: {reason}")
    else:
        terminalreporter.write_line("dialects: sqlite, postgresql and mysql all ran")
    if PG_POOLER_URL and "postgresql" in SELECTED:
        from sqlalchemy.engine import make_url

        pooler = make_url(PG_POOLER_URL).render_as_string(hide_password=True)
        terminalreporter.write_line(f"postgresql: through {pooler} (AGORA_TEST_PG_POOLER_URL)")
    if UNAVAILABLE:
        terminalreporter.write_sep("=", "clusters and poolers skipped")
        for name, reason in sorted(UNAVAILABLE.items()):
            terminalreporter.write_line(f"{name}: {reason}")
