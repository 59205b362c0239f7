"""The daily tool (issue 19): profiles and their precedence, `config show`, settings in --help,
choices and shell completion, the pager, --no-color."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import run_agora

AGORA = str(Path(sys.executable).with_name("agora"))


def _config(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "config.toml"
    path.write_text(text)
    path.chmod(0o600)
    return {"AGORA_CONFIG": str(path)}


def _clean_env(extra: dict[str, str]) -> dict[str, str]:
    """The runner's environment minus any agora setting of the developer's own."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("AGORA_") or k.startswith("AGORA_TEST")
    }
    return {**env, **extra}


@pytest.fixture
def three_dbs(tmp_path: Path, cli: Any) -> dict[str, str]:
    urls = {}
    for name in ("flag", "env", "profile"):
        url = f"sqlite:///{tmp_path / name}.db"
        assert cli("db", "provision", "--db", url).exit_code == 0
        urls[name] = url
    return urls


def _database(result: Any) -> str:
    assert result.exit_code == 0, result.stderr
    return Path(json.loads(result.stdout)["database"]).stem


def test_db_precedence_flag_then_environment_then_profile(
    tmp_path: Path, cli: Any, three_dbs: dict[str, str]
) -> None:
    env = _config(tmp_path, f'[profiles.p]\ndb = "{three_dbs["profile"]}"\n')
    # profile alone
    assert _database(cli("--profile", "p", "db", "status", "--json", env=env)) == "profile"
    # the environment beats the profile
    env_set = {**env, "AGORA_DATABASE_URL": three_dbs["env"]}
    assert _database(cli("--profile", "p", "db", "status", "--json", env=env_set)) == "env"
    # the flag beats both
    flagged = cli(
        "--profile", "p", "db", "status", "--json", "--db", three_dbs["flag"], env=env_set
    )
    assert _database(flagged) == "flag"
    # AGORA_PROFILE chooses the profile as --profile does, and the option works after the
    # command's name too
    by_env = cli("db", "status", "--json", env={**env, "AGORA_PROFILE": "p"})
    assert _database(by_env) == "profile"
    assert _database(cli("db", "status", "--profile", "p", "--json", env=env)) == "profile"


def test_profile_on_a_server_database(tmp_path: Path, cli: Any, db_url: str, dialect: str) -> None:
    env = _config(tmp_path, f'[profiles.server]\ndb = "{db_url}"\n')
    result = cli("--profile", "server", "db", "status", "--json", env=env)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["dialect"] == dialect


def test_profile_report_defaults_and_the_flag_over_them(tmp_path: Path, cli: Any) -> None:
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    assert cli("demo", "--db", url).exit_code == 0
    env = _config(tmp_path, f'[profiles.r]\ndb = "{url}"\nby = "day,model"\nlast = "7d"\n')
    result = cli("--profile", "r", "spend", "--json", env=env)
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["by"] == "day,model"
    first = date_of(doc["from"])
    assert (date_of(doc["to"]) - first).days == 6
    flagged = json.loads(cli("--profile", "r", "spend", "--by", "actor", "--json", env=env).stdout)
    assert flagged["by"] == "actor"
    # an explicit window beats the profile's last
    window = cli(
        "--profile", "r", "spend", "--from", "2026-01-01", "--to", "2026-01-31", "--json", env=env
    )
    assert json.loads(window.stdout)["from"] == "2026-01-01"


def date_of(text: str) -> Any:
    from datetime import date

    return date.fromisoformat(text)


@pytest.mark.parametrize(
    ("text", "needle", "line"),
    [
        ('[profiles.p]\ndb = "sqlite:///x.db"\ncolour = "no"\n', "unknown key 'colour'", 3),
        ('[profiles.p]\n\nby = "weekday"\n', "by = 'weekday'", 3),
        ('[profiles.p]\nlast = "forever"\n', "last = 'forever'", 2),
        ("[profiles.p]\ndb = 5\n", "db must be a non-empty string", 2),
        ('[profiles.p]\ndb = "unterminated\n', "", 2),
    ],
)
def test_a_bad_profile_is_exit_2_with_file_and_line(
    tmp_path: Path, cli: Any, text: str, needle: str, line: int
) -> None:
    env = _config(tmp_path, text)
    result = cli("--profile", "p", "spend", "--json", env=env)
    assert result.exit_code == 2
    message = json.loads(result.stdout)["error"]["message"]
    assert str(tmp_path / "config.toml") in message
    assert needle in message
    assert f":{line}" in message or f"line {line}" in message
    assert not (tmp_path / "x.db").exists()


def test_a_missing_profile_or_file_is_exit_2(tmp_path: Path, cli: Any) -> None:
    env = _config(tmp_path, '[profiles.prod]\ndb = "sqlite:///x.db"\n')
    result = cli("--profile", "staging", "spend", env=env)
    assert result.exit_code == 2
    assert "no profile 'staging'" in result.stderr and "prod" in result.stderr
    missing = {"AGORA_CONFIG": str(tmp_path / "nowhere.toml")}
    result = cli("--profile", "prod", "spend", env=missing)
    assert result.exit_code == 2
    assert "nowhere.toml" in result.stderr


def test_config_show_sources_and_masked_password(tmp_path: Path, cli: Any) -> None:
    env = _config(
        tmp_path,
        '[profiles.prod]\ndb = "postgresql://ops:s3cret PW@db.internal:5432/app"\n'
        'catalog = "http://u:catpw@127.0.0.1:9/api.json"\ntenant = "acme"\nby = "tenant"\n',
    )
    result = cli(
        "--profile", "prod", "config", "show", "--json", env={**env, "AGORA_TENANT": "globex"}
    )
    assert result.exit_code == 0, result.stderr
    assert "s3cret" not in result.stdout and "catpw" not in result.stdout
    doc = json.loads(result.stdout)
    settings = doc["settings"]
    assert doc["profile"] == "prod" and doc["config_file_exists"] is True
    assert (
        settings["db"]["source"].startswith("profile prod (") and ":2)" in settings["db"]["source"]
    )
    assert settings["db"]["value"] == "postgresql://ops:***@db.internal:5432/app"
    assert settings["tenant"] == {
        "value": "globex",
        "source": "environment (AGORA_TENANT)",
        "env": "AGORA_TENANT",
    }
    assert settings["spend.by"]["value"] == "tenant"
    assert settings["spend.last"]["source"] == "default"
    human = cli("--profile", "prod", "config", "show", env=env)
    assert human.exit_code == 0 and "s3cret" not in human.stdout and "***" in human.stdout
    # no profile: defaults
    bare = json.loads(cli("config", "show", "--json", env=_clean_env({})).stdout)
    assert bare["profile"] is None
    assert bare["settings"]["db"]["value"] == "sqlite:///agora.db"


def test_every_environment_variable_is_in_help(cli: Any) -> None:
    assert "AGORA_DATABASE_URL" in cli("spend", "--help").stdout
    assert "AGORA_PROFILE" in cli("threads", "show", "--help").stdout
    assert "AGORA_MODELS_DEV_URL" in cli("prices", "seed", "--help").stdout
    root = cli("--help").stdout
    assert "AGORA_DEBUG" in root and "--no-color" in root


def test_closed_sets_are_choices_equal_to_the_store() -> None:
    from agora_cli.cli.proposals import DECISION_CHOICES, INBOX_STATE_CHOICES
    from agora_cli.store._proposals import DECISIONS, INBOX_STATES

    assert INBOX_STATE_CHOICES == INBOX_STATES
    assert DECISION_CHOICES == DECISIONS


@pytest.mark.slow
@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ("agora proposals inbox --state ", {"pending", "queued", "running", "failed"}),
        ("agora spend --by ", {"model", "actor", "tenant", "day,model"}),
        ("agora budgets set --period ", {"day", "week", "month"}),
        ("agora db sql --dialect ", {"postgresql", "mysql", "sqlite"}),
        ("agora p", {"proposals", "prices"}),
    ],
)
def test_shell_completion_offers_the_choices(words: str, expected: set[str]) -> None:
    env = _clean_env(
        {
            "_AGORA_COMPLETE": "complete_bash",
            "COMP_WORDS": words,
            "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
        }
    )
    done = subprocess.run([AGORA], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    offered = set(done.stdout.split())
    assert expected <= offered, offered


def _run_on_a_terminal(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [AGORA, *args], stdin=slave, stdout=slave, stderr=subprocess.PIPE, env=env
    )
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    proc.wait(timeout=30)
    os.close(master)
    return proc.returncode, b"".join(chunks).decode(errors="replace")


@pytest.mark.slow
def test_long_transcripts_go_through_the_pager_on_a_terminal(tmp_path: Path, cli: Any) -> None:
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    assert cli("demo", "--db", url).exit_code == 0
    paged = tmp_path / "paged.txt"
    env = _clean_env({"AGORA_PAGER": f"cat > {paged}", "AGORA_DATABASE_URL": url})
    for command in (["threads", "show", "demo-thread-01"], ["runs", "show", "demo-run-01-1"]):
        paged.unlink(missing_ok=True)
        code, screen = _run_on_a_terminal(command, env)
        assert code == 0
        assert paged.exists(), command
        assert command[2] in paged.read_text()
        assert command[2] not in screen  # it went to the pager, not the terminal
        # --no-pager: straight to the terminal
        paged.unlink()
        code, screen = _run_on_a_terminal([*command, "--no-pager"], env)
        assert code == 0 and not paged.exists() and command[2] in screen
    # PAGER is used when AGORA_PAGER is unset; piped output never pages
    env = _clean_env({"PAGER": f"cat > {paged}", "AGORA_DATABASE_URL": url})
    code, _ = _run_on_a_terminal(["threads", "show", "demo-thread-01"], env)
    assert code == 0 and paged.exists()
    paged.unlink()
    piped = run_agora("threads", "show", "demo-thread-01", env=env)
    assert piped.exit_code == 0 and "demo-thread-01" in piped.stdout and not paged.exists()


@pytest.mark.slow
def test_no_color_beats_force_color(tmp_path: Path, cli: Any) -> None:
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    assert cli("demo", "--db", url).exit_code == 0
    env = _clean_env({"FORCE_COLOR": "1", "AGORA_DATABASE_URL": url})
    coloured = run_agora("quota", "--all", env=env)
    assert "\x1b[" in coloured.stdout
    plain = run_agora("quota", "--all", "--no-color", env=env)
    assert plain.stdout and "\x1b[" not in plain.stdout
    assert plain.exit_code == coloured.exit_code


def _tree(command: Any, ctx: Any = None) -> Any:
    import typer

    ctx = ctx or typer.Context(command)
    params = [
        (
            p.name,
            tuple(getattr(p, "opts", ())),
            repr(getattr(p.type, "func", p.type)),  # a parser's type: the parser (choices.Choice)
            repr(p.default),
            getattr(p, "envvar", None),
            p.required,
            getattr(p, "hidden", False),
        )
        for p in command.params
    ]
    node = {"name": command.name, "help": command.help, "params": params}
    if hasattr(command, "list_commands"):
        node["commands"] = [
            _tree(command.get_command(ctx, name), ctx) for name in command.list_commands(ctx)
        ]
    return node


def test_the_lazy_tree_is_the_tree_typer_builds() -> None:
    import typer.main

    from agora_cli.cli import app, lazy_root

    assert _tree(lazy_root()) == _tree(typer.main.get_command(app))


def test_a_command_line_builds_only_its_branch() -> None:
    from agora_cli.cli import lazy_root

    root = lazy_root()
    assert root.main(["spend", "--help"], standalone_mode=False) == 0
    assert set(root.commands) == {"spend"}


@pytest.mark.slow
def test_the_collector_is_back_on_before_a_command_works(tmp_path: Path, cli: Any) -> None:
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    assert cli("db", "provision", "--db", url).exit_code == 0
    probe = (
        "import gc, sys\n"
        "from agora_cli.store import _engine as engine\n"
        "opened = engine.open_engine\n"
        "def spy(*a, **k):\n"
        "    print('during start-up:', gc.isenabled(), file=sys.stderr)\n"
        "    return opened(*a, **k)\n"
        "engine.open_engine = spy\n"
        "from agora_cli.store import _ledger as ledger\n"
        "summarize = ledger.spend\n"
        "def work(*a, **k):\n"
        "    print('at work:', gc.isenabled(), gc.get_freeze_count() > 0, file=sys.stderr)\n"
        "    return summarize(*a, **k)\n"
        "ledger.spend = work\n"
        f"sys.argv = ['agora', 'spend', '--json', '--db', {url!r}]\n"
        "from agora_cli.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert "during start-up: False" in done.stderr, done.stderr
    assert "at work: True True" in done.stderr, done.stderr
