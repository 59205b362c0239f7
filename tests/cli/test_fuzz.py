"""The hostile-input fuzz: every option of every command that takes a value, with hostile values.

The options come from the real command tree (Typer's Click commands), not from a hand list, so a
command or option added later is fuzzed too. Each invocation runs in-process on a provisioned
SQLite database (with the demo's data) and must end as a documented outcome: no traceback, no
"unexpected" error, an exit code from the README's table, and stderr free of control characters
(everything shown is escaped). The fast tier gives every option a few values (rotating through
the list, so every value is used); ``-m slow`` gives every option every value.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import FIXTURE_CATALOG
from typer.testing import CliRunner

from agora_cli.cli import lazy_root

# The README's exit codes a command can end with here (130 and 141 need a terminal or a pipe).
DOCUMENTED = {0, 1, 2, 3, 4}
HOSTILE = [
    "\x1b[2J\x1b[H",
    "\x1b]52;c;cm0gLXJmIH4=\x07",
    "\x9b31mC1",
    "\u202eevil\u2066",
    "a\x00b",
    "%00",
    "\r=1+1\n@SUM(A1)",
    "-0",
    "-0.0",
    "nan",
    "-inf",
    "1e309",
    "99999999999999999999999999",
    "-1",
    "\u0663d",  # Arabic-Indic three, then d
    "\uff11\uff12",  # fullwidth 12
    "x" * 10_000,
    "../../../../etc/passwd",
    "\U0001f600\U0001f4a5",
    "",
    " ",
    "\t\u2028",
    "9999-12-31T23:59:59Z",
    "'; DROP TABLE agent_thread; --",
    "\udcff",  # an argument that was not valid UTF-8 (surrogateescape)
]
FAST_PER_OPTION = 3
# Controls that must never reach a terminal raw on stderr (newline ends the one error line).
_RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_SKIP = {
    # Follows until Ctrl-C by design; its options are fuzzed through `frames tail` without it.
    ("frames", "tail", "--follow"),
    # Serves until SIGTERM once its options are valid, and an empty --profile is no profile;
    # its own options (--port, --host, --interval, --frames-ttl) are fuzzed, and refused.
    ("metrics", "serve", "--profile"),
}


def _commands(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    ctx = None
    for name in sorted(group.list_commands(ctx)):
        command = group.get_command(ctx, name)
        if command is None or getattr(command, "hidden", False):
            continue
        if hasattr(command, "list_commands"):
            if command.invoke_without_command:  # a group that is a command too (`spend`)
                yield (*path, name), command
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name), command


def _cases() -> list[tuple[tuple[str, ...], list[str], str]]:
    """``(command path, the command's required arguments, option)`` for every value option."""
    cases = []
    for path, command in _commands(lazy_root()):
        required = []
        for param in command.params:
            if param.param_type_name == "argument" and param.required:
                required.extend(["x12345678"] * max(param.nargs, 1))
        for param in command.params:
            if param.param_type_name != "option" or param.is_flag or param.count:
                continue
            flag = max(param.opts, key=len)
            if (*path, flag) in _SKIP or flag in ("--db", "--help"):
                continue
            cases.append((path, required, flag))
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def fuzz_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'fuzz.db'}"
    runner = CliRunner()
    with runner.isolation():
        assert lazy_root().main(["demo", "--db", url], standalone_mode=False) == 0
    return url


def _run(root: Any, args: list[str], tmp: Path) -> tuple[int, str, str]:
    env = {
        "AGORA_MODELS_DEV_URL": str(FIXTURE_CATALOG),
        "AGORA_CACHE_DIR": str(tmp / "cache"),
        "AGORA_CONFIG": str(tmp / "no-config.toml"),
        "AGORA_PAGER": "",
        "COLUMNS": "120",
    }
    runner = CliRunner()
    with runner.isolation(env=env) as (out, err, _):
        code = root.main(args, prog_name="agora", standalone_mode=False)
        shown = out.getvalue().decode("utf-8", "replace"), err.getvalue().decode("utf-8", "replace")
    return code, *shown


def _fuzz(cases: list[tuple[tuple[str, ...], list[str], str, str]], db: str, tmp: Path) -> None:
    root = lazy_root()
    failures = []
    for path, required, flag, value in cases:
        args = [*path, *required, flag, value, "--db", db]
        code, _out, err = _run(root, args, tmp)
        wrong = []
        if code not in DOCUMENTED:
            wrong.append(f"exit {code}")
        if "Traceback" in err or "unexpected" in err:
            wrong.append("traceback or unexpected error")
        if _RAW_CONTROL.search(err):
            wrong.append("a raw control character on stderr")
        if code != 0 and err.count("\n") > 1 and "note:" not in err and "warning" not in err:
            wrong.append("more than one error line")
        if wrong:
            failures.append(f"agora {' '.join(path)} {flag} {value[:40]!r}: {wrong}: {err[:300]!r}")
    assert not failures, "\n".join(failures[:30]) + f"\n({len(failures)} in all)"


def test_the_tree_has_options_to_fuzz() -> None:
    paths = {path for path, _, _ in CASES}
    assert len(CASES) > 100 and ("spend",) in paths and ("proposals", "claim-next") in paths


def test_every_option_with_some_hostile_values(fuzz_db: str, tmp_path: Path) -> None:
    cases = [
        (path, required, flag, HOSTILE[(i * FAST_PER_OPTION + k) % len(HOSTILE)])
        for i, (path, required, flag) in enumerate(CASES)
        for k in range(FAST_PER_OPTION)
    ]
    _fuzz(cases, fuzz_db, tmp_path)


@pytest.mark.slow
def test_every_option_with_every_hostile_value(fuzz_db: str, tmp_path: Path) -> None:
    cases = [(p, r, f, value) for p, r, f in CASES for value in HOSTILE]
    _fuzz(cases, fuzz_db, tmp_path)
