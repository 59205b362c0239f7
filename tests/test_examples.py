"""The runnable examples in examples/ run, against every dialect."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, run_cli
from sqlalchemy import func, select

from agora_cli.store._engine import open_engine
from agora_cli.store._schema import action_proposal as proposal

pytestmark = pytest.mark.slow  # every example runs as its own process

EXAMPLES = ROOT / "examples"


def _kek(db_url: str) -> dict[str, str]:
    """The KEK a SQLite demo wrote next to its database (it sealed tenant globex's proposals:
    the worker needs it); a server demo seals nothing."""
    from sqlalchemy.engine import make_url

    database = make_url(db_url).database
    return {"AGORA_KEK_FILE": f"{database}.kek"} if db_url.startswith("sqlite") else {}


def _run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def test_record_usage_example(db_url: str) -> None:
    proc = _run(sys.executable, str(EXAMPLES / "record_usage.py"), "--db", db_url)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert (
        lines[0].startswith("gpt-4o-mini-2024-07-18: cost_usd=0.0003") and "(estimate)" in lines[0]
    )
    assert lines[1] == "some-unpriced-model: cost_usd=None (None)"


def test_worker_without_the_kek_stops_at_a_sealed_job(db_url: str, dialect: str) -> None:
    if dialect != "sqlite":
        pytest.skip("only a SQLite demo seals (its own KEK file)")
    assert run_cli("demo", "--db", db_url).exit_code == 0
    worker = str(EXAMPLES / "worker.py")
    blind = _run(
        sys.executable, worker, "--db", db_url, "--max-idle", "1", env={"AGORA_KEK_FILE": ""}
    )
    assert blind.returncode == 1 and "input is sealed for tenant globex" in blind.stderr
    assert "[sealed]" not in blind.stdout


def test_worker_example_executes_each_approved_proposal_once(db_url: str) -> None:
    assert run_cli("demo", "--db", db_url).exit_code == 0
    worker = str(EXAMPLES / "worker.py")
    first = _run(sys.executable, worker, "--db", db_url, "--max-idle", "1", env=_kek(db_url))
    assert first.returncode == 0, first.stderr
    # the two approved, queued proposals, and the one whose worker died holding its lease
    assert "settled 3 proposal(s)" in first.stdout and "(recovered)" in first.stdout
    again = _run(sys.executable, worker, "--db", db_url, "--max-idle", "0.5", env=_kek(db_url))
    assert "settled 0 proposal(s)" in again.stdout
    engine = open_engine(db_url)
    with engine.connect() as conn:
        keys = sorted(conn.exec_driver_sql("SELECT idempotency_key FROM example_refund").scalars())
        done = sorted(
            conn.execute(
                select(proposal.c.idempotency_key).where(proposal.c.execution_state == "succeeded")
            ).scalars()
        )
        queued = conn.execute(
            select(func.count()).where(proposal.c.execution_state == "queued")
        ).scalar()
    engine.dispose()
    assert len(keys) == 3 and set(keys) <= set(done)  # each executed once, by its key
    assert queued == 0


def test_worker_example_batched_renews_long_work_and_settles_each_once(db_url: str) -> None:
    assert run_cli("demo", "--db", db_url).exit_code == 0
    worker = str(EXAMPLES / "worker.py")
    # Three jobs of 0.3 s under 1 s leases: the third is renewed before it runs.
    args = ("--batch", "3", "--lease-ms", "1000", "--work-seconds", "0.3", "--max-idle", "1")
    first = _run(sys.executable, worker, "--db", db_url, *args, env=_kek(db_url))
    assert first.returncode == 0, first.stderr
    assert "settled 3 proposal(s)" in first.stdout and "(recovered) -> settled" in first.stdout
    assert "lease renewed" in first.stdout and "lease lost" not in first.stdout
    again = _run(
        sys.executable,
        worker,
        "--db",
        db_url,
        "--batch",
        "10",
        "--max-idle",
        "0.5",
        env=_kek(db_url),
    )
    assert again.returncode == 0, again.stderr
    assert "settled 0 proposal(s)" in again.stdout
    engine = open_engine(db_url)
    with engine.connect() as conn:
        keys = sorted(conn.exec_driver_sql("SELECT idempotency_key FROM example_refund").scalars())
        done = sorted(
            conn.execute(
                select(proposal.c.idempotency_key).where(proposal.c.execution_state == "succeeded")
            ).scalars()
        )
        open_work = conn.execute(
            select(func.count()).where(proposal.c.execution_state.in_(["queued", "running"]))
        ).scalar()
    engine.dispose()
    assert len(keys) == 3 and set(keys) <= set(done)  # each executed once, by its key
    assert open_work == 0


def test_cron_script_runs_each_step(db_url: str, tmp_path: Path) -> None:
    assert run_cli("demo", "--db", db_url).exit_code == 0
    agora = str(Path(sys.executable).with_name("agora"))
    proc = _run(
        "bash",
        str(EXAMPLES / "cron-maintenance.sh"),
        env={"AGORA": agora, "AGORA_DATABASE_URL": db_url},
    )
    assert proc.returncode == 0, proc.stderr
    decoder = json.JSONDecoder()
    docs, text = [], proc.stdout.strip()
    while text:
        doc, end = decoder.raw_decode(text)
        docs.append(doc)
        text = text[end:].strip()
    assert [sorted(d) for d in docs] == [
        ["cutoff", "rows_deleted", "runs_purged", "runs_still_active"],
        ["expired"],
        ["repriced", "still_unpriced", "unpriced_models"],
        ["backfilled", "batches", "remaining"],
    ]
    assert docs[0]["runs_purged"] == 1  # the demo's expired stream


def test_cron_script_stops_with_exit_3_when_the_database_is_down() -> None:
    agora = str(Path(sys.executable).with_name("agora"))
    proc = _run(
        "bash",
        str(EXAMPLES / "cron-maintenance.sh"),
        env={"AGORA": agora, "AGORA_DATABASE_URL": "postgresql://x:pw@127.0.0.1:1/none"},
    )
    assert proc.returncode == 3
    assert proc.stderr.startswith("error: ") and "pw@" not in proc.stderr
