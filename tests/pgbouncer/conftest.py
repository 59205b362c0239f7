"""Fixtures for the PgBouncer tests (``tests/pgbouncer``).

The poolers: ``AGORA_TEST_PGBOUNCER`` (the transaction-mode URL, then the session-mode URL,
comma-separated — what ``python tests/pgbouncer/pooler.py up`` prints). Unset, the tests are
skipped, saying how to run them; ``AGORA_TEST_PGBOUNCER=boot`` makes the fixture boot both
instances of ``pooler.py`` itself (well under a second; ``tests/conftest.py`` stops them when the
run ends). ``AGORA_TEST_REQUIRE`` containing ``pgbouncer`` (as ``.ci/run`` sets it) turns every
such skip into a failure. The server behind the
poolers is the test server of ``AGORA_TEST_POSTGRES_URL`` (databases are created and dropped
there directly; only the tests' own connections go through the pooler).

- ``pgbouncer_urls``: ``{"transaction": url, "session": url}`` (session).
- ``pooled_db``: a new empty database, as ``{"direct": url, "transaction": url, "session":
  url}`` (dropped afterwards).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import PG_ADMIN_URL, drop_roles, unavailable, unique_name, with_database

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pooler

BOOTED_MARKER = pooler.BASE_DIR / "booted-by-pytest"


def _unavailable(reason: str) -> None:
    unavailable("pgbouncer", reason)


@pytest.fixture(scope="session")
def pgbouncer_urls() -> dict[str, str]:
    given = os.environ.get("AGORA_TEST_PGBOUNCER", "").strip()
    if not given:
        _unavailable(
            "AGORA_TEST_PGBOUNCER is not set (the URLs `python tests/pgbouncer/pooler.py up`"
            " prints, or `boot`)"
        )
    if given != "boot":
        urls = [u.strip() for u in given.split(",") if u.strip()]
    else:
        reason = pooler.missing()
        if reason:
            _unavailable(f"no PgBouncer: {reason}")
        was_up = all(pooler.answers(m) for m in pooler.MODES)
        try:
            urls = pooler.up()
        except RuntimeError as exc:
            _unavailable(f"could not boot PgBouncer: {exc}")
        if not was_up:
            BOOTED_MARKER.touch()  # tests/conftest.py stops them when the run ends
    if len(urls) != 2:
        pytest.fail(
            f"AGORA_TEST_PGBOUNCER needs two URLs (transaction mode, session mode), got {len(urls)}"
        )
    from agora_cli.store import open_engine

    for u in urls:
        try:
            open_engine(u).dispose()
        except Exception as exc:
            _unavailable(f"PgBouncer unreachable at {u} ({str(exc).splitlines()[0]})")
    return dict(zip(pooler.MODES, urls, strict=True))


@pytest.fixture
def pooled_db(pgbouncer_urls: dict[str, str]) -> Iterator[dict[str, str]]:
    from agora_cli.store import open_engine

    name = unique_name("agora_b")
    try:
        admin: Any = open_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    except Exception as exc:
        _unavailable(f"postgresql unreachable ({str(exc).splitlines()[0]})")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield {
            "direct": with_database(PG_ADMIN_URL, name),
            **{mode: with_database(u, name) for mode, u in pgbouncer_urls.items()},
        }
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.fixture
def app_role_on() -> Iterator[Any]:
    """``app_role_on(url)``: provision ``url``'s database, enable row-level security for a fresh
    app role there and return the role's name; the role and its member login
    (``helpers.member_login_url``) are dropped afterwards."""
    from agora_cli.store import ensure_agent_tables, open_engine
    from agora_cli.store._rls import enable_rls

    made: list[tuple[str, str]] = []

    def make(url: str) -> str:
        role = unique_name("agora_app")
        engine = open_engine(url)
        try:
            ensure_agent_tables(engine)
            enable_rls(engine, app_role=role)
        finally:
            engine.dispose()
        made.append((url, role))
        return role

    yield make
    for url, role in made:
        drop_roles(url, f"{role}_rt", role)
