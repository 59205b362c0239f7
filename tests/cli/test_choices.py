"""Every option whose value is one of a fixed set is checked (issue 28, friction 2).

A typo (`runs list --status fail`) or another spelling (`--status FAILED`) printed `no runs.`
with exit 0: good news for a question nobody asked. Every such option, on every command, found
by walking the command tree (so an option added later is covered by the same tests): a value
outside the set is exit 2, one line on stderr naming every choice, nothing on stdout and nothing
written; a value in capitals is the same word in lower case; a list (`spend --by day,model`) is
checked word by word.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import agora_command, run_cli

from agora_cli.cli.choices import Choice

# Options that take one word of a fixed set wherever they appear; `--by` too, except where it
# names a person (its help then starts with "Who").
CHOICE_FLAGS = {
    "--status",
    "--state",
    "--sort",
    "--order",
    "--decision",
    "--dialect",
    "--period",
    "--kind",
    "--outcome",
    "--by",
}
# Options that take no database (so no --db on their command line).
NO_DATABASE = {"db sql", "config show"}


def _commands(command: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    found = [(path, command)]
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        found += _commands(sub, (*path, name))
    return found


def _choices(param: Any) -> tuple[str, ...] | None:
    """The words a parameter takes, or None when it takes free text."""
    kind = param.type
    parser = getattr(kind, "func", None)
    if isinstance(parser, Choice):
        return parser.choices
    words = getattr(kind, "choices", None)
    return None if words is None else tuple(str(getattr(w, "value", w)) for w in words)


def _choice_options() -> list[tuple[str, Any]]:
    found = []
    for path, command in _commands(agora_command()):
        for param in command.params:
            if _choices(param) is not None:
                found.append((" ".join(path), param))
    return found


CHOICE_OPTIONS = _choice_options()
IDS = [f"{path} {param.opts[0]}" for path, param in CHOICE_OPTIONS]


def test_the_walk_finds_the_choices_of_every_group() -> None:
    found = set(IDS)
    assert {
        "runs list --status",
        "spend --by",
        "spend --order",
        "proposals inbox --state",
        "proposals list --decision",
        "db sql --dialect",
        "budgets set --period",
        "budgets remove --period",
    } <= found


def test_every_option_named_like_a_choice_is_one() -> None:
    """`--status`, `--state`, `--sort` … take a fixed set of words on every command, so a new one
    written as free text (what `runs list --status` was) fails here."""
    free = []
    for path, command in _commands(agora_command()):
        for param in command.params:
            flags = set(getattr(param, "opts", ())) & CHOICE_FLAGS
            if not flags or getattr(param, "is_flag", False):
                continue
            if flags == {"--by"} and (param.help or "").startswith("Who"):
                continue  # a person: free text
            if _choices(param) is None:
                free.append(f"{' '.join(path)} {param.opts[0]}")
    assert free == []


def _argv(path: str, param: Any, value: str, db: str | None) -> list[str]:
    flag = [param.opts[0], value] if param.opts[0].startswith("-") else [value]
    database = [] if path in NO_DATABASE or db is None else ["--db", db]
    return [*path.split(), *flag, *database]


@pytest.mark.parametrize(("path", "param"), CHOICE_OPTIONS, ids=IDS)
def test_a_value_outside_the_choices_is_exit_2_naming_them(
    path: str, param: Any, tmp_path: Path
) -> None:
    db = tmp_path / "never.db"
    for bad in ("nope", "fail", f"{_choices(param)[0]}x"):  # type: ignore[index]
        result = run_cli(*_argv(path, param, bad, f"sqlite:///{db}"))
        assert result.exit_code == 2, (path, bad, result)
        assert result.stdout == ""
        [line] = result.stderr.splitlines()
        assert line.startswith("error: ") and param.opts[0] in line and repr(bad) in line
        for word in _choices(param):  # type: ignore[union-attr]
            assert repr(word) in line, (path, word, line)
    assert not db.exists()  # refused while parsing: not even a database file


@pytest.mark.parametrize(("path", "param"), CHOICE_OPTIONS, ids=IDS)
def test_a_choice_in_capitals_is_the_same_word(path: str, param: Any) -> None:
    """One rule for case everywhere: `FAILED` is `failed` (never a filter that matches nothing,
    never refused on one command and taken on another)."""
    for word in _choices(param):  # type: ignore[union-attr]
        converted = param.type.convert(word.upper(), param, None)
        assert str(getattr(converted, "value", converted)) == word


def test_a_bad_choice_writes_nothing(db_url: str, engine: Any) -> None:
    """On every dialect: each option's bad value, with the database named, changes no row."""
    from sqlalchemy import func, select

    from agora_cli.store._schema import metadata

    assert run_cli("budgets", "set", "--actor", "a", "--period", "day", "--usd", "1",
                   "--by", "ops", "--db", db_url).exit_code == 0  # fmt: skip

    def counts() -> dict[str, int]:
        with engine.connect() as conn:
            return {
                t.name: conn.execute(select(func.count()).select_from(t)).scalar_one()
                for t in metadata.sorted_tables
            }

    before = counts()
    for path, param in CHOICE_OPTIONS:
        extra: list[str] = []
        if path == "budgets set":  # everything else it needs: only the choice is wrong
            extra = ["--actor", "a", "--usd", "2", "--by", "ops"]
        result = run_cli(*_argv(path, param, "nope", db_url), *extra)
        assert result.exit_code == 2 and result.stdout == "", (path, result)
    assert counts() == before


def test_runs_list_status_is_checked(db_url: str) -> None:
    """`--status FAILED` lists the failed runs; `--status fail` is refused with the four words."""
    assert run_cli("demo", "--db", db_url).exit_code == 0
    failed = run_cli("runs", "list", "--status", "failed", "--db", db_url, "--json").json()
    assert failed["runs"] and {r["status"] for r in failed["runs"]} == {"failed"}
    upper = run_cli("runs", "list", "--status", "FAILED", "--db", db_url, "--json")
    assert upper.exit_code == 0 and upper.json() == failed
    typo = run_cli("runs", "list", "--status", "fail", "--db", db_url)
    assert typo.exit_code == 2 and typo.stdout == ""
    assert typo.stderr == (
        "error: Invalid value for '--status': 'fail' is not one of 'running', 'completed', "
        "'failed', 'cancelled'. (see `agora runs list --help`)\n"
    )
    as_json = run_cli("runs", "list", "--status", "fail", "--db", db_url, "--json")
    assert as_json.exit_code == 2
    assert as_json.json()["error"]["kind"] == "usage"


def test_spend_by_checks_each_word_of_a_list(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'a.db'}"
    typo = run_cli("spend", "--by", "day,modle", "--db", db)
    assert typo.exit_code == 2 and typo.stdout == ""
    assert "'day,modle': 'modle' is not one of 'model', 'actor'" in typo.stderr
    two_periods = run_cli("spend", "--by", "day,month", "--db", db)
    assert two_periods.exit_code == 2
    assert "'day,month' is not one of the combinations: " in two_periods.stderr
    twice = run_cli("spend", "--by", "model,model", "--db", db)
    assert twice.exit_code == 2 and "'model,model'" in twice.stderr
    three = run_cli("spend", "--by", "day,model,actor", "--db", db)
    assert three.exit_code == 2 and "has 3 parts: at most 2" in three.stderr
    empty = run_cli("spend", "--by", "day,", "--db", db)
    assert empty.exit_code == 2 and "'' is not one of" in empty.stderr
    assert not (tmp_path / "a.db").exists()
    assert run_cli("db", "provision", "--db", db).exit_code == 0
    shouted = run_cli("spend", "--by", "DAY,Model", "--order", "TOKENS", "--db", db, "--json")
    assert shouted.exit_code == 0 and shouted.json()["by"] == "day,model"


def test_help_shows_the_choices() -> None:
    text = run_cli("runs", "list", "--help", env={"COLUMNS": "200"}).stdout
    assert "running|completed|failed|cancelled" in text
    spend = " ".join(run_cli("spend", "--help").stdout.replace("│", " ").split())
    assert "--by WORD[,WORD]" in spend
    assert "WORD: model, actor, tenant, thread, day, week, month." in spend


def test_the_parser_completes_each_word() -> None:
    from agora_cli.cli.spend import SPEND_BY

    assert {"model", "day", "day,model", "week,actor"} <= set(SPEND_BY.complete(""))
    assert SPEND_BY.complete("day,m") == ["day,model"]
    by = Choice(("model", "actor", "day"), separator=",", max_parts=2)
    assert by.complete("da") == ["day"]
    assert by.complete("day,m") == ["day,model"]
    assert by("Day , MODEL") == "day,model"
    assert Choice(("a", "b")).metavar == "a|b" and by.metavar == "WORD[,WORD]"
