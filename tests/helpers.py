"""Shared test helpers (importable as ``helpers``; ``tests/`` is on pytest's pythonpath)."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
FIXTURE_CATALOG = SHARED / "fixtures" / "models-dev-api.json"

PG_ADMIN_URL = os.environ.get(
    "AGORA_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
MYSQL_ADMIN_URL = os.environ.get("AGORA_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/")
DIALECTS = ("sqlite", "postgresql", "mysql")


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def run_cli(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> CliResult:
    """Run the real Typer app in-process; stdout and stderr apart."""
    from agora_cli.cli import app

    runner = CliRunner(env=env)
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


def unique_name(prefix: str = "agora_t") -> str:
    return f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"


def with_database(admin_url: str, name: str) -> str:
    """The admin URL pointed at database ``name`` (no password ever printed by tests)."""
    from sqlalchemy.engine import make_url

    from agora_cli.store.engine import normalize_url

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
        and result.stderr == f"error: {doc['error']['message']}\n"
    )
