"""Reports from a standby (issue 27): ``--read-db``, ``AGORA_READ_DATABASE_URL`` and a profile's
``read_db`` send the read-only commands to another database; writers never take it.

The read database here is a demo database; the primary (``--db``) is a SQLite path where no
database exists, so a command that read it would exit 3 ("no database at …"): exit 0 with the
same document as ``--db <the demo database>`` proves the command read the read database. The
replay-lag note on a real standby is tests/patroni/test_read_db.py's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import run_cli
from typer.main import get_command

from agora_cli.cli import app

pytestmark = pytest.mark.usefixtures("clean_env")

SCOPE = ("--actor", "bob", "--thread", "demo-thread-05", "--tenant", "acme")
READS: dict[str, tuple[str, ...]] = {
    "spend": ("spend", "--by", "day,model", "--last", "3m", "--json"),
    "spend --csv": ("spend", "--by", "actor", "--last", "3m", "--csv"),
    "quota": ("quota", "--actor", "alice", "--at", "2026-12-01T12:00:00Z", "--json"),
    "runs list": ("runs", "list", "--json"),
    "runs show": ("runs", "show", "demo-run-03-1", "--json"),
    "tools stats": ("tools", "stats", "--from", "2026-01-01", "--json"),
    "threads list": ("threads", "list", "--json"),
    "threads show": ("threads", "show", "demo-thread-01", "--json"),
    "proposals inbox": ("proposals", "inbox", "--json"),
    "proposals list": ("proposals", "list", *SCOPE, "--json"),
    "proposals show": ("proposals", "show", "ap_c16786a6", *SCOPE, "--json"),
    "prices list": ("prices", "list", "--json"),
}
# The commands that take --read-db: the reports above, and nothing that writes.
READ_COMMANDS = {
    "spend",
    "quota",
    "runs list",
    "runs show",
    "tools stats",
    "threads list",
    "threads show",
    "proposals inbox",
    "proposals list",
    "proposals show",
    "prices list",
}
PASSWORD = "s3cret-Pw9x"
NOTE = "behind its primary"


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No agora setting of the developer's own; the current folder has no agora.db."""
    for var in (
        "AGORA_DATABASE_URL",
        "AGORA_READ_DATABASE_URL",
        "AGORA_TENANT",
        "AGORA_PROFILE",
        "AGORA_CONFIG",
        "AGORA_KEK",
        "AGORA_KEK_FILE",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)


_DEMO: dict[str, str] = {}  # dialect -> a demo database of this test process (only read)


@pytest.fixture
def demo_url(dialect: str, databases: Any) -> str:
    if dialect not in _DEMO:
        url = databases.new(dialect)
        made = run_cli("demo", "--db", url, "--json")
        assert made.exit_code == 0, made.stderr
        _DEMO[dialect] = url
    return _DEMO[dialect]


@pytest.fixture
def nowhere(tmp_path: Path) -> str:
    """A primary that is not there: any command that reads it exits 3."""
    return f"sqlite:///{tmp_path / 'no-primary-here.db'}"


def _document(result: Any) -> Any:
    if result.stdout.lstrip().startswith(("{", "[")):
        doc = json.loads(result.stdout)
        if isinstance(doc, dict):
            doc.pop("now", None)  # the inbox's reading instant
        return doc
    return result.stdout


@pytest.mark.parametrize("name", list(READS))
def test_each_report_reads_the_read_database(name: str, demo_url: str, nowhere: str) -> None:
    argv = READS[name]
    direct = run_cli(*argv, "--db", demo_url)
    assert direct.exit_code in (0, 1), direct.stderr  # quota: alice's demo budget is exhausted
    standby = run_cli(*argv, "--db", nowhere, "--read-db", demo_url)
    assert standby.exit_code == direct.exit_code, standby.stderr
    assert _document(standby) == _document(direct)
    assert NOTE not in standby.stderr  # a primary has no replay lag to tell
    primary = run_cli(*argv, "--db", nowhere)
    assert primary.exit_code == 3 and "no database at" in primary.stderr


def test_the_reports_see_the_demo_data(demo_url: str, nowhere: str) -> None:
    runs = run_cli("runs", "list", "--db", nowhere, "--read-db", demo_url, "--json")
    assert runs.exit_code == 0 and runs.json()["runs"]
    shown = run_cli(*READS["proposals show"], "--db", nowhere, "--read-db", demo_url)
    assert shown.json()["id"].startswith("ap_c16786a6")


def _commands(group: Any, path: tuple[str, ...] = ()) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name, command in group.commands.items():
        here = (*path, name)
        found[" ".join(here)] = command
        if hasattr(command, "commands"):
            found.update(_commands(command, here))
    return found


def test_only_the_reports_take_read_db() -> None:
    taking = {
        name
        for name, command in _commands(get_command(app)).items()
        if any("--read-db" in getattr(p, "opts", ()) for p in command.params)
    }
    assert taking == READ_COMMANDS
    for name in READ_COMMANDS:  # wide: at 80 columns spend's help cuts the variable's name
        help_text = run_cli(*name.split(), "--help", env={"COLUMNS": "160"}).stdout
        assert "[env var: AGORA_READ_DATABASE_URL]" in help_text, name


@pytest.mark.parametrize(
    "argv",
    [
        ("proposals", "decide", "ap_c16786a6", *SCOPE, "--approve", "--by", "ops"),
        ("db", "upgrade"),
        ("threads", "delete", "demo-thread-01", "--yes"),
        ("prices", "set", "m", "--input", "1", "--output", "2"),
        ("budgets", "set", "--actor", "alice", "--period", "day", "--tokens", "5"),
        ("spend", "fold"),
        ("frames", "purge"),
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_a_write_command_has_no_read_db(argv: tuple[str, ...], tmp_path: Path) -> None:
    target = f"sqlite:///{tmp_path / 'untouched.db'}"
    result = run_cli(*argv, "--db", target, "--read-db", target)
    assert result.exit_code == 2
    assert "No such option: --read-db" in result.stderr
    assert not (tmp_path / "untouched.db").exists()


def test_spend_read_db_before_fold_is_refused(db_url: str, demo_url: str) -> None:
    refused = run_cli("spend", "--read-db", demo_url, "fold", "--db", db_url)
    assert refused.exit_code == 2
    assert refused.stderr.startswith("error: --read-db is for reports: `agora spend fold` writes")
    assert refused.stderr.count("\n") == 1 and refused.stdout == ""
    as_json = run_cli("spend", "--read-db", demo_url, "fold", "--db", db_url, "--json")
    assert as_json.exit_code == 2 and as_json.json()["error"]["kind"] == "invalid_input"
    # the environment's read database is the shell's setting for reports: the fold ignores it
    folded = run_cli(
        "spend", "fold", "--db", db_url, "--json", env={"AGORA_READ_DATABASE_URL": demo_url}
    )
    assert folded.exit_code == 0, folded.stderr


# --- precedence -----------------------------------------------------------------------------
#
# Where each URL comes from: typed on the command line ("flag"), the environment ("env"), the
# profile ("profile"), or nowhere (None: the primary is the default sqlite:///agora.db, absent
# in the test's folder). The read database is used when it is at least as explicit as --db.
PRECEDENCE = [
    # (db from, read_db from, which one the report reads)
    ("flag", "flag", "read"),
    ("env", "flag", "read"),
    ("profile", "flag", "read"),
    ("env", "env", "read"),
    ("profile", "env", "read"),
    ("profile", "profile", "read"),
    (None, "env", "read"),
    (None, "profile", "read"),
    ("flag", "env", "db"),
    ("flag", "profile", "db"),
    ("env", "profile", "db"),
]


def _run_with(db_from: str | None, read_from: str, db: str, read: str, tmp_path: Path) -> Any:
    argv = ["spend", "--json"]
    env: dict[str, str] = {}
    profile: dict[str, str] = {}
    for source, option, var, key, url in (
        (db_from, "--db", "AGORA_DATABASE_URL", "db", db),
        (read_from, "--read-db", "AGORA_READ_DATABASE_URL", "read_db", read),
    ):
        if source == "flag":
            argv += [option, url]
        elif source == "env":
            env[var] = url
        elif source == "profile":
            profile[key] = url
    if profile:
        config = tmp_path / "config.toml"
        config.write_text("[profiles.r]\n" + "".join(f'{k} = "{v}"\n' for k, v in profile.items()))
        config.chmod(0o600)
        env["AGORA_CONFIG"] = str(config)
        argv = ["--profile", "r", *argv]
    return run_cli(*argv, env=env)


@pytest.mark.parametrize(("db_from", "read_from", "reads"), PRECEDENCE)
def test_the_read_database_is_used_when_as_explicit_as_db(
    db_from: str | None, read_from: str, reads: str, demo_url: str, nowhere: str, tmp_path: Path
) -> None:
    # The one that should be read is the demo database and the other is not there (exit 0),
    # then the other way round (exit 3): the choice, not a fallback.
    db, read = (nowhere, demo_url) if reads == "read" else (demo_url, nowhere)
    chosen = _run_with(db_from, read_from, db, read, tmp_path)
    assert chosen.exit_code == 0, chosen.stderr
    assert chosen.json()["rows"]
    if db_from is not None:
        swapped = _run_with(db_from, read_from, read, db, tmp_path)
        assert swapped.exit_code == 3 and "no database at" in swapped.stderr


def test_no_read_database_reads_db(demo_url: str) -> None:
    assert run_cli("spend", "--db", demo_url, "--json").exit_code == 0


# --- secrets ----------------------------------------------------------------------------------


def _with_password(url: str, password: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).set(password=password).render_as_string(hide_password=False)


def test_an_unreachable_read_database_names_itself_and_hides_its_password(
    demo_url: str,
) -> None:
    read = f"postgresql://agora:{PASSWORD}@127.0.0.1:1/app"
    for debug in ((), ("--debug",)):
        failed = run_cli(*debug, "spend", "--db", demo_url, "--read-db", read, "--json")
        assert failed.exit_code == 3
        everything = failed.stdout + failed.stderr
        assert PASSWORD not in everything
        assert "postgresql://agora:***@127.0.0.1:1/app" in everything
        assert "the read database" in everything
    from_env = run_cli("spend", "--json", env={"AGORA_READ_DATABASE_URL": read})
    assert from_env.exit_code == 3 and PASSWORD not in from_env.stdout + from_env.stderr


@pytest.mark.parametrize("dialect", ["postgresql", "mysql"], indirect=True)
def test_a_read_database_password_is_never_printed(demo_url: str, nowhere: str) -> None:
    # PostgreSQL here trusts 127.0.0.1 (any password connects); MariaDB's root has none, so a
    # password is refused: either way the password is in no output and no error.
    read = _with_password(demo_url, PASSWORD)
    for argv in (READS["spend"], READS["threads list"], READS["proposals inbox"]):
        result = run_cli(*argv, "--db", nowhere, "--read-db", read)
        assert result.exit_code in (0, 3), result.stderr
        assert PASSWORD not in result.stdout + result.stderr
        if result.exit_code == 3:
            assert "***" in result.stderr and "the read database" in result.stderr


def test_config_show_names_the_read_database_masked(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        '[profiles.r]\ndb = "postgresql://ops@primary/app"\n'
        f'read_db = "postgresql://ops:{PASSWORD}@standby/app"\n'
    )
    config.chmod(0o600)
    env = {"AGORA_CONFIG": str(config)}
    shown = run_cli("--profile", "r", "config", "show", "--json", env=env)
    assert shown.exit_code == 0, shown.stderr
    setting = shown.json()["settings"]["read_db"]
    assert setting["value"] == "postgresql://ops:***@standby/app"
    assert setting["env"] == "AGORA_READ_DATABASE_URL"
    assert setting["source"].startswith("profile r (") and ":3)" in setting["source"]
    human = run_cli("--profile", "r", "config", "show", env=env)
    assert PASSWORD not in human.stdout + human.stderr
    # a profile holding a password in a file others can read is warned about, read_db too
    config.chmod(0o644)
    warned = run_cli("--profile", "r", "config", "show", "--json", env=env)
    assert "holds a password and others can read it" in warned.stderr


# --- the replay lag ---------------------------------------------------------------------------


def test_a_primary_has_no_replay_lag(engine: Any) -> None:
    from agora_cli.store._replica import replay_lag

    assert replay_lag(engine) is None


@pytest.mark.parametrize("dialect", ["mysql"], indirect=True)
def test_a_login_that_may_not_ask_gets_no_lag(db_url: str) -> None:
    """SHOW REPLICA STATUS needs REPLICATION CLIENT (MariaDB: REPLICA MONITOR): without it the
    lag is unknown, not an error."""
    import secrets

    from sqlalchemy.engine import make_url

    from agora_cli.store._engine import open_engine
    from agora_cli.store._replica import replay_lag

    admin = open_engine(db_url)
    user, password = f"agora_lag_{secrets.token_hex(4)}", secrets.token_hex(8)
    database = make_url(db_url).database
    with admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE USER '{user}'@'%%' IDENTIFIED BY '{password}'")
        conn.exec_driver_sql(f"GRANT SELECT ON `{database}`.* TO '{user}'@'%%'")
    try:
        url = make_url(db_url).set(username=user, password=password)
        engine = open_engine(url.render_as_string(hide_password=False))
        try:
            assert replay_lag(engine) is None
        finally:
            engine.dispose()
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f"DROP USER '{user}'@'%%'")
        admin.dispose()
