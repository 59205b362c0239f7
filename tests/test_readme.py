"""The README cannot rot: every `agora` command in it runs, in order, with the documented exit.

Console blocks are read line by line: `$ agora …` runs (expected exit 0, or the `# exit N`
comment), `$ export VAR=value` sets the environment for what follows. The newcomer's first
command and the cron lines run too, with the README's `config.toml` as the config file. URLs
of example servers are pointed at this session's test databases; the rest runs on the SQLite
default in a fresh folder, after `agora demo`.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from helpers import ROOT, run_cli
from test_readme_story import without_story

# The operator's story runs in its own test, at a fixed date (test_readme_story.py).
README = without_story((ROOT / "README.md").read_text())
EXAMPLE_URLS = {
    "postgresql://postgres@127.0.0.1:5432/app": "postgresql",
    "postgresql://agora@db/app": "postgresql",
    "mysql://root@127.0.0.1:3306/app": "mysql",
}
# The README's standby is the demo database itself (a primary: no lag to note).
SAME_AS_THE_DEMO = {"postgresql://reports@standby.internal/app": "sqlite:///agora.db"}


def test_the_readme_profiles_load() -> None:
    import tomllib

    profiles = tomllib.loads(_blocks("toml")[0])["profiles"]
    assert {"prod", "staging"} <= set(profiles)


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", README, flags=re.S)


def _first_command() -> list[str]:
    install = _blocks("sh")[0].strip()
    return [part.strip() for part in install.split("&&")]


def test_ci_installs_exactly_as_the_readme_says() -> None:
    parts = _first_command()
    install = " && ".join(parts[:2])
    assert install == "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]'"
    ci = (ROOT / ".ci" / "run").read_text()
    assert install in ci
    # CI runs `make lint` and `make test`, and `make test` is the README's test command.
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ntest:\n", 1)[1].splitlines()[0].strip()
    assert recipe == _blocks("sh")[1].strip()
    assert "\nmake lint\n" in ci and "make test\n" in ci


def _steps() -> list[tuple[dict[str, str], list[str], int]]:
    """(environment changes, argv after `agora`, expected exit) in README order."""
    steps: list[tuple[dict[str, str], list[str], int]] = []
    for part in _first_command()[2:]:
        argv = shlex.split(part)
        assert argv[0] == ".venv/bin/agora"
        steps.append(({}, argv[1:], 0))
    for block in _blocks("console"):
        for line in block.splitlines():
            if not line.startswith("$ "):
                continue
            command, _, comment = line[2:].partition("#")
            expected = int(m.group(1)) if (m := re.search(r"exit (\d+)", comment)) else 0
            argv = shlex.split(command)
            if argv[0] == "export":
                name, _, value = argv[1].partition("=")
                steps.append(({name: value}, [], 0))
            else:
                assert argv[0] == "agora", line
                steps.append(({}, argv[1:], expected))
    for block in _blocks("cron"):
        for line in block.splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            words = shlex.split(line)
            at = words.index("agora")
            env = dict(w.split("=", 1) for w in words[5:at])
            argv = words[at + 1 :]
            for cut, word in enumerate(argv):  # the shell's part (>, ||, |, &&, ;) is not agora's
                if word in (">", ">>", "||", "|", "&&", ";"):
                    argv = argv[:cut]
                    break
            steps.append((env, argv, 0))
    return steps


def test_readme_lists_every_command_group() -> None:
    groups = {argv[0] for _, argv, _ in _steps() if argv}
    assert groups >= {
        "demo",
        "db",
        "prices",
        "spend",
        "quota",
        "threads",
        "proposals",
        "frames",
        "runs",
        "tools",
    }


def test_every_readme_command_runs(tmp_path: Path, monkeypatch: Any, databases: Any) -> None:
    for dialect in ("postgresql", "mysql"):
        databases.require(dialect)
    scratch = {dialect: databases.new(dialect) for dialect in ("postgresql", "mysql")}
    urls = {example: scratch[dialect] for example, dialect in EXAMPLE_URLS.items()}
    urls.update(SAME_AS_THE_DEMO)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGORA_DATABASE_URL", raising=False)
    # The README's config.toml is the config file of every command it shows.
    config = tmp_path / "config.toml"
    config.write_text(_blocks("toml")[0])
    env: dict[str, str] = {"AGORA_CONFIG": str(config)}
    ran = 0
    for change, argv, expected in _steps():
        for name, value in change.items():
            env[name] = urls.get(value, value)
        if not argv:
            continue
        argv = [urls.get(arg, arg) for arg in argv]
        result = run_cli(*argv, env=dict(env))
        where = f"agora {' '.join(argv)}"
        assert result.exit_code == expected, f"{where}: {result.stderr}"
        if expected:
            assert result.stderr.startswith("error: ") or result.stdout, where
        assert "s3cret" not in result.stdout + result.stderr
        ran += 1
    assert ran >= 30
