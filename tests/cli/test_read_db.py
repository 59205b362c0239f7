"""`--read-db` / `AGORA_READ_DATABASE_URL` / a profile's `read_db`: the reports read a replica,
the writes never do, on every dialect.

The replica here is any database holding the rows; `--db` names a SQLite file that does not
exist, so a report that read `--db` would fail (exit 3) instead of answering. The replay-lag
note is tested on a real standby in tests/patroni/test_read_db.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agora_cli.store._clock import ManualClock
from agora_cli.store._proposals import ActionProposalStore, NewProposal, Scope
from agora_cli.store._steps import start_run
from agora_cli.store._threads import create_thread

SECRET = "s3cret-Pw-123"


@pytest.fixture
def replica(engine: Any, db_url: str) -> dict[str, str]:
    """``db_url`` with a thread, a run and a pending proposal of alice's; the ids."""
    clock = ManualClock(1_767_225_600_000)
    with engine.begin() as conn:
        thread = create_thread(conn, actor_ref="alice", title="on the replica", clock=clock)
        run = start_run(conn, thread_id=thread.id, actor_ref="alice", clock=clock)
    scope = Scope(None, "alice", thread.id)
    new = NewProposal(scope, "refund", {"order": 7}, run_id=run.id, tool_call_id="c1")
    pid = ActionProposalStore(engine).create(new).proposal.id
    return {"url": db_url, "thread": thread.id, "run": run.id, "proposal": pid}


def missing_db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'not-the-primary.db'}"


READS = [
    ("spend", "--last", "30d"),
    ("quota", "--actor", "alice"),
    ("runs", "list"),
    ("runs", "show", "{run}"),
    ("tools", "stats"),
    ("threads", "list"),
    ("threads", "show", "{thread}"),
    ("proposals", "inbox"),
    ("proposals", "list", "--actor", "alice", "--thread", "{thread}", "--no-tenant"),
    ("proposals", "show", "{proposal}", "--actor", "alice", "--thread", "{thread}", "--no-tenant"),
    ("prices", "list"),
]


@pytest.mark.parametrize("command", READS, ids=[" ".join(c[:2]) for c in READS])
def test_every_report_reads_the_read_database(
    cli: Any, replica: dict[str, str], tmp_path: Path, command: tuple[str, ...]
) -> None:
    args = [a.format(**replica) for a in command]
    primary = missing_db(tmp_path)
    alone = cli(*args, "--db", primary, "--json")
    assert alone.exit_code == 3, alone.stdout  # the primary is not there: --db was read
    read = cli(*args, "--db", primary, "--read-db", replica["url"], "--json")
    assert read.exit_code in (0, 1), read.stderr  # quota exits 1 only at a limit
    assert not (tmp_path / "not-the-primary.db").exists()


def test_the_reports_show_the_read_databases_rows(
    cli: Any, replica: dict[str, str], tmp_path: Path
) -> None:
    via = ("--db", missing_db(tmp_path), "--read-db", replica["url"], "--json")
    threads = cli("threads", "list", *via).json()["threads"]
    assert [t["id"] for t in threads] == [replica["thread"]]
    inbox = cli("proposals", "inbox", *via).json()
    assert [p["id"] for p in inbox["proposals"]] == [replica["proposal"]]
    run = cli("runs", "show", replica["run"], *via).json()
    assert run["run"]["id"] == replica["run"]


def test_the_environment_and_a_profile_name_the_read_database(
    cli: Any, replica: dict[str, str], tmp_path: Path
) -> None:
    primary = missing_db(tmp_path)
    from_env = cli(
        "threads", "list", "--json",
        env={"AGORA_DATABASE_URL": primary, "AGORA_READ_DATABASE_URL": replica["url"]},
    )  # fmt: skip
    assert from_env.exit_code == 0, from_env.stderr
    config = tmp_path / "config.toml"
    config.write_text(f'[profiles.ops]\ndb = "{primary}"\nread_db = "{replica["url"]}"\n')
    config.chmod(0o600)
    from_profile = cli(
        "--profile", "ops", "threads", "list", "--json", env={"AGORA_CONFIG": str(config)}
    )
    assert from_profile.exit_code == 0, from_profile.stderr
    assert [t["id"] for t in from_profile.json()["threads"]] == [replica["thread"]]


def test_an_explicit_db_beats_a_read_url_from_the_environment(
    cli: Any, replica: dict[str, str], tmp_path: Path
) -> None:
    """`--db X` on the command line is a person pointing at X: a read URL the environment or a
    profile holds does not take the report elsewhere; `--read-db` on the line does."""
    primary = missing_db(tmp_path)
    env = {"AGORA_READ_DATABASE_URL": replica["url"]}
    explicit = cli("threads", "list", "--db", primary, "--json", env=env)
    assert explicit.exit_code == 3
    both = cli("threads", "list", "--db", primary, "--read-db", replica["url"], "--json")
    assert both.exit_code == 0, both.stderr


@pytest.mark.parametrize(
    "command",
    [
        ("proposals", "decide", "ap_x", "--approve", "--by", "me"),
        ("db", "upgrade"),
        ("prices", "set", "m", "--input", "1", "--output", "1"),
        ("threads", "delete", "t1"),
        ("proposals", "claim-next", "--worker", "w1"),
    ],
)
def test_write_commands_have_no_read_database(cli: Any, command: tuple[str, ...]) -> None:
    refused = cli(*command, "--read-db", "sqlite:///x.db")
    assert refused.exit_code == 2
    assert "--read-db" in refused.stderr


def test_spend_fold_refuses_a_read_database(cli: Any, replica: dict[str, str]) -> None:
    refused = cli("spend", "--read-db", replica["url"], "fold")
    assert refused.exit_code == 2
    assert "--read-db" in refused.stderr and refused.stderr.count("\n") == 1


def test_a_read_urls_password_is_never_shown(cli: Any, dialect: str, tmp_path: Path) -> None:
    if dialect == "sqlite":
        pytest.skip("a server URL")
    scheme = "postgresql" if dialect == "postgresql" else "mysql"
    gone = f"{scheme}://u:{SECRET}@127.0.0.1:1/app"
    result = cli("spend", "--db", missing_db(tmp_path), "--read-db", gone, "--json")
    assert result.exit_code == 3
    assert SECRET not in result.stdout + result.stderr


def test_a_primary_has_no_replay_lag(engine: Any) -> None:
    from agora_cli.store._status import replay_lag

    assert replay_lag(engine) is None
