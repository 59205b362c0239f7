"""Shared test helpers (importable as ``helpers``; ``tests/`` is on pytest's pythonpath)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
# A copy of the shared models.dev snapshot, kept in the repository so a fresh clone runs alone.
FIXTURE_CATALOG = ROOT / "tests" / "fixtures" / "models-dev-api.json"

PG_ADMIN_URL = os.environ.get(
    "AGORA_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
# ssl_disabled: PyMySQL's default (TLS "preferred") builds a certificate store for every
# connection, 24 ms of CPU each, before it learns that the local test server offers no TLS; the
# suite opens thousands of connections. The connections are otherwise the same.
MYSQL_ADMIN_URL = os.environ.get(
    "AGORA_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/?ssl_disabled=true"
)
# Optional: the PostgreSQL tests' own connections go through this pooler (any database name,
# e.g. the transaction-mode PgBouncer of tests/pgbouncer/pooler.py), while their databases are
# still created and dropped through PG_ADMIN_URL on the server behind it.
PG_POOLER_URL = os.environ.get("AGORA_TEST_PG_POOLER_URL", "").strip() or None
DIALECTS = ("sqlite", "postgresql", "mysql")
# What AGORA_TEST_REQUIRE may name: a dialect's server, or a cluster/pooler the tests boot.
REQUIRABLE = ("postgresql", "mysql", "galera", "pgbouncer", "patroni", "prometheus")
REQUIRED = frozenset(
    d.strip() for d in os.environ.get("AGORA_TEST_REQUIRE", "").split(",") if d.strip()
)
# Environments (galera, pgbouncer, patroni) whose tests were skipped, with the reason.
UNAVAILABLE: dict[str, str] = {}


def unavailable(name: str, reason: str) -> None:
    """Skip the test because ``name`` (a cluster or pooler) is missing, or fail it when
    ``AGORA_TEST_REQUIRE`` lists ``name``; the summary names it either way."""
    import pytest

    UNAVAILABLE.setdefault(name, reason)
    if name in REQUIRED:
        pytest.fail(f"{reason}, and AGORA_TEST_REQUIRE lists {name}", pytrace=False)
    pytest.skip(reason)


T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z: the instant the ``clock`` fixture starts at


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


_COMMAND: list[Any] = []  # the Click command of ``agora_cli.cli.app``, built once per process


def agora_command() -> Any:
    """The Click command Typer builds from the app: what ``agora`` runs.

    Typer's ``CliRunner.invoke`` rebuilds the whole command tree from the app on every call
    (three quarters of an in-process invocation); a real process builds it once, so do we."""
    if not _COMMAND:
        from typer.main import get_command

        from agora_cli.cli import app

        _COMMAND.append(get_command(app))
    return _COMMAND[0]


def run_cli(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> CliResult:
    """Run the real Typer app in-process; stdout and stderr apart."""
    from unittest import mock

    import typer.testing

    from agora_cli.cli import app

    command = agora_command()
    runner = CliRunner(env=env)
    with mock.patch.object(typer.testing, "_get_command", lambda _app: command):
        result = runner.invoke(app, list(args), input=input, catch_exceptions=False)
    return CliResult(result.exit_code, result.stdout, result.stderr)


def run_agora(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> CliResult:
    """Run the installed ``agora`` in a real subprocess."""
    exe = Path(sys.executable).with_name("agora")
    proc = subprocess.run(
        [str(exe), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def examples(n: int) -> int:
    """A Hypothesis test's example count, scaled by the profile: ``n`` in the default profile
    (100 examples), ``n / 10`` under ``--hypothesis-profile=fast`` (``make test-fast``)."""
    from hypothesis import settings

    return max(1, n * settings.default.max_examples // 100)


def unique_name(prefix: str = "agora_t") -> str:
    return f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"


def with_database(admin_url: str, name: str) -> str:
    """The admin URL pointed at database ``name`` (no password ever printed by tests)."""
    from sqlalchemy.engine import make_url

    from agora_cli.store._engine import normalize_url

    url = normalize_url(admin_url).set(database=name)
    return make_url(url).render_as_string(hide_password=False)


def no_data(result: CliResult) -> bool:
    """Nothing but the error on stdout: empty, or (with ``--json``) the one error document."""
    if result.stdout == "":
        return True
    doc = json.loads(result.stdout)
    return (
        set(doc) == {"error"}
        and doc["error"]["exit_code"] == result.exit_code
        and result.stderr.endswith(f"error: {doc['error']['message']}\n")
    )


def exec_sql(engine: Any, *statements: str) -> None:
    """Run raw SQL statements in one transaction."""
    with engine.begin() as conn:
        for statement in statements:
            conn.exec_driver_sql(statement)


def snapshot(engine: Any) -> dict[str, dict[str, Any]]:
    """Every action proposal row, by id, every column."""
    from sqlalchemy import select

    from agora_cli.store._schema import action_proposal

    with engine.connect() as conn:
        rows = conn.execute(select(action_proposal)).mappings().all()
    return {r["id"]: dict(r) for r in rows}


# --- legacy proposals, as an older writer left them -----------------------------------------

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
    from sqlalchemy import select

    from agora_cli.store._schema import action_proposal, thread

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
                if not c.name.startswith(("discovery", "outcome", "tenant_key"))
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


def member_login_url(url: str, role: str) -> str:
    """``url`` as ``{role}_rt``, a LOGIN role that is a member of ``role`` (made once, dropped
    by the ``app_role`` fixture): the runtime's login as deployed, never the superuser, and
    reachable through a pooler (which passes no ``options=-crole=…`` startup parameter)."""
    from sqlalchemy.engine import make_url

    from agora_cli.store._engine import open_engine

    login = f"{role}_rt"
    engine = open_engine(url)
    try:
        with engine.begin() as conn:
            found = conn.exec_driver_sql("SELECT 1 FROM pg_roles WHERE rolname = %s", (login,))
            if found.first() is None:
                conn.exec_driver_sql(f'CREATE ROLE "{login}" LOGIN NOBYPASSRLS IN ROLE "{role}"')
    finally:
        engine.dispose()
    return make_url(url).set(username=login).render_as_string(hide_password=False)


def drop_roles(url: str, *roles: str) -> None:
    """Drop each of ``roles`` that exists on ``url``'s server (what it owns in ``url``'s
    database first), in the order given: a member login before the role it belongs to."""
    from agora_cli.store._engine import open_engine

    engine = open_engine(url)
    try:
        with engine.begin() as conn:
            for role in roles:
                found = conn.exec_driver_sql("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,))
                if found.first() is not None:
                    conn.exec_driver_sql(f'DROP OWNED BY "{role}"')
                    conn.exec_driver_sql(f'DROP ROLE "{role}"')
    finally:
        engine.dispose()


# --- a scripted terminal for `agora proposals review` ----------------------------------------

Step = str | None | BaseException | Callable[[], None]


class Script:
    """The walk's terminal, scripted (``review.open_terminal``): keys and lines in order; a
    callable runs when reached (someone else's hand), an exception is raised (Ctrl-C). Past the
    end: Ctrl-D. With ``echo`` a typed line is shown after its prompt, as a terminal echoes it
    (the README's transcript)."""

    def __init__(self, *steps: Step, echo: bool = False) -> None:
        self.steps = list(steps)
        self.prompts: list[str] = []
        self.keys_read = 0
        self.echo = echo

    def __enter__(self) -> Script:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def _next(self) -> str | None:
        while self.steps and callable(self.steps[0]):
            self.steps.pop(0)()  # type: ignore[operator]
        if not self.steps:
            return None
        step = self.steps.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step  # type: ignore[return-value]

    def key(self) -> str:
        self.keys_read += 1
        step = self._next()
        return "\x04" if step is None else step

    def line(self, prompt: str) -> str | None:
        self.prompts.append(prompt)
        typed = self._next()
        if self.echo:
            sys.stdout.write(f"{prompt}{'' if typed is None else typed}\n")
        return typed

    def cooked(self) -> Any:
        return contextlib.nullcontext()


def end_other_sessions(dialect: str, url: str) -> int:
    """End every other session on ``url``'s database, as a failover or an administrator does
    (PostgreSQL: ``pg_terminate_backend``; MySQL/MariaDB: ``KILL``); how many."""
    from agora_cli.store._engine import normalize_url, open_engine

    name = normalize_url(url).database
    if dialect == "postgresql":
        admin = open_engine(PG_ADMIN_URL)
        try:
            with admin.begin() as conn:
                found = conn.exec_driver_sql(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = %s AND pid <> pg_backend_pid()",
                    (name,),
                ).scalar()
            return int(found or 0)
        finally:
            admin.dispose()
    admin = open_engine(url)
    try:
        with admin.connect() as conn:
            others = (
                conn.exec_driver_sql(
                    "SELECT id FROM information_schema.processlist "
                    "WHERE db = %s AND id <> CONNECTION_ID()",
                    (name,),
                )
                .scalars()
                .all()
            )
            for pid in others:
                conn.exec_driver_sql(f"KILL {int(pid)}")
        return len(others)
    finally:
        admin.dispose()
