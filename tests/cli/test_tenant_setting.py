"""One tenant setting (issues 25.5, 24.10): ``AGORA_TENANT`` scopes a command or is refused.

Every command in the Typer tree is run with ``AGORA_TENANT=acme`` on the demo's data (tenants
acme and globex; on SQLite globex's messages are sealed and the KEK is given) on every dialect.
Each either shows only acme's rows — the same answer as ``--tenant acme`` without a session
tenant — or exits 2 with the documented message. A command added without a decision in
``TENANCY`` and a case here fails ``test_every_command_has_a_decision_and_a_case``.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import run_cli

ACROSS = "works across tenants"
OUTSIDE = "is outside the session tenant 'acme'"
PAST = "reaches past the session tenant 'acme'"
SCOPE = ("--actor", "carol", "--thread", "demo-thread-07")
LEASE = ("ap_00000000", "--token", "t", "--generation", "1")

# command path -> the cases: (arguments after the path, what must happen).
# "refused": exit 2 with ACROSS (and the two ways out); "outside"/"past": exit 2 with that text;
# "missing": exit 1, as if globex's row did not exist; "not_found": exit 1 with that outcome
# (an operator's act across scopes finds no other tenant's proposal); "same:ARGS": exit 0 and
# exactly the
# output of ARGS run with no session tenant; "acme": exit 0 and no globex anywhere.
OPERATOR = ("--by", "ops", "--reason", "r")
CASES: dict[str, list[tuple[tuple[str, ...], str]]] = {
    "budgets list": [((), "refused")],
    "budgets remove": [(("--tenant", "acme", "--period", "month"), "refused")],
    "budgets set": [
        (("--tenant", "acme", "--period", "month", "--usd", "5", "--by", "ops"), "refused")
    ],
    "db backfill": [((), "refused")],
    "db check": [((), "refused")],
    "db downgrade": [(("rollup@base", "--sql"), "refused")],
    "db history": [((), "refused")],
    "db provision": [((), "refused")],
    "db redact": [
        (("--tool-io", "--older-than", "1d", "--dry-run", "--json"), "acme"),
        (("--tool-io", "--older-than", "1d", "--dry-run", "--tenant", "globex"), "outside"),
    ],
    "db rls disable": [(("--dry-run",), "refused")],
    "db rls enable": [(("--dry-run",), "refused")],
    "db rls status": [((), "refused")],
    "db rls verify": [((), "refused")],
    "db seal": [(("--tenant", "globex", "--dry-run"), "outside")],
    "db stamp": [(("agent@head",), "refused")],
    "db status": [((), "refused")],
    "db upgrade": [((), "refused")],
    "demo": [(("--force",), "refused")],
    "frames close": [(("demo-run-07-1",), "refused")],
    "frames purge": [(("--ttl", "60", "--json"), "acme")],
    "frames stats": [((), "refused")],
    "frames tail": [(("demo-run-07-1",), "refused")],
    "keys create": [(("--tenant", "globex"), "outside")],
    "keys destroy": [(("--tenant", "globex", "--yes"), "outside")],
    "keys list": [(("--json",), "same:--tenant acme")],
    "keys rotate": [(("--tenant", "globex"), "outside")],
    "keys status": [(("--tenant", "globex"), "outside")],
    "metrics": [(("--json",), "refused")],
    "metrics serve": [(("--port", "1"), "refused")],
    "prices list": [((), "refused")],
    "prices reprice": [((), "refused")],
    "prices resolve": [(("gpt-4o-mini",), "refused")],
    "prices seed": [(("--missing",), "refused")],
    "prices set": [(("m", "--input", "1", "--output", "2"), "refused")],
    "prices status": [((), "refused")],
    "proposals claim": [
        (("ap_00000000", *SCOPE, "--tenant", "globex", "--worker", "w"), "outside")
    ],
    "proposals cancel": [(("ap_b008162ed", *OPERATOR), "not_found")],  # globex's, queued
    "proposals claim-next": [(("--worker", "w"), "refused")],
    "proposals create": [(("--file", "{globex}"), "outside")],
    "proposals decide": [
        (("ap_00000000", *SCOPE, "--tenant", "globex", "--approve", "--by", "x"), "outside"),
        (("ap_91583097e", "--approve", "--by", "x"), "not_found"),  # untenanted, pending
    ],
    "proposals expire": [((), "refused")],
    "proposals inbox": [(("--json",), "same:--tenant acme")],
    "proposals list": [
        ((*SCOPE, "--tenant", "globex"), "outside"),
        (("--actor", "carol", "--thread", "demo-thread-10", "--no-tenant"), "past"),
    ],
    "proposals renew": [(LEASE, "refused")],
    "proposals review": [(("--tenant", "globex", "--by", "x"), "outside")],
    "proposals requeue": [(("ap_3a06e9908", *OPERATOR), "not_found")],  # untenanted, failed
    "proposals settle": [((*LEASE, "--succeeded"), "refused")],
    "proposals show": [(("ap_00000000", *SCOPE, "--tenant", "globex"), "outside")],
    "quota": [
        (("--json", "--at", "2026-11-20T00:00:00Z"), "same:--tenant acme"),
        (("--all",), "past"),
        (("--actor", "carol"), "past"),
    ],
    "runs list": [
        (("--json", "--limit", "100"), "same:--tenant acme"),
        (("--json", "--tenant", "globex"), "outside"),
    ],
    "runs show": [(("demo-run-07-1",), "missing"), (("demo-run-01-1", "--json"), "acme")],
    "spend": [
        (("--by", "tenant", "--from", "2026-11-01", "--json"), "same:--tenant acme"),
        (("--by", "tenant", "--tenant", "globex"), "outside"),
    ],
    "spend fold": [((), "refused")],
    "threads delete": [(("demo-thread-07", "--yes"), "missing")],
    "threads list": [(("--json", "--include-deleted", "--include-transient"), "acme")],
    "threads show": [
        (("demo-thread-07", "--json"), "missing"),
        (("demo-thread-01", "--json"), "acme"),
    ],
    "tools stats": [
        (("--from", "2026-11-01", "--to", "2026-11-30", "--json"), "same:--tenant acme")
    ],
}
NO_DATABASE = {"config show", "db sql"}


def _leaves(command: Any, path: tuple[str, ...] = ()) -> list[str]:
    subs = getattr(command, "commands", None)
    if not subs:
        return [" ".join(path)]
    own = [" ".join(path)] if path and getattr(command, "invoke_without_command", False) else []
    return own + [
        leaf for name, sub in sorted(subs.items()) for leaf in _leaves(sub, (*path, name))
    ]


def _commands() -> list[str]:
    import typer

    from agora_cli.cli import app

    return _leaves(typer.main.get_command(app))


def test_every_command_has_a_decision_and_a_case() -> None:
    from agora_cli.cli.options import TENANCY

    commands = _commands()
    assert sorted(TENANCY) == commands, "a command without a tenant decision (cli/options.py)"
    assert sorted([*CASES, *NO_DATABASE]) == commands, "a command without a case here"
    assert {c for c, d in TENANCY.items() if d == "none"} == NO_DATABASE
    for command, cases in CASES.items():
        kinds = {kind for _, kind in cases}
        assert (TENANCY[command] == "cross") == (kinds == {"refused"}), command


def _stable(text: str) -> str:
    """The output without the clock's reading (``"now"``), which differs between two runs."""
    return "\n".join(line for line in text.splitlines() if '"now":' not in line)


def _demo(dialect: str, databases: Any, tmp_path: Path) -> tuple[str, dict[str, str]]:
    url = databases.new(dialect)
    env: dict[str, str] = {}
    if dialect == "sqlite":
        kek = tmp_path / "kek"
        kek.write_text("QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE=\n")
        kek.chmod(0o600)
        env["AGORA_KEK_FILE"] = str(kek)
    made = run_cli("demo", "--db", url, env=env)
    assert made.exit_code == 0, made.stderr
    return url, env


def test_a_session_tenant_scopes_or_is_refused_by_every_command(
    dialect: str, databases: Any, tmp_path: Path
) -> None:
    url, env = _demo(dialect, databases, tmp_path)
    doc = tmp_path / "globex.json"
    doc.write_text(
        json.dumps(
            {
                "tenant_ref": "globex",
                "actor_ref": "carol",
                "thread_id": "demo-thread-07",
                "tool_name": "refund",
                "input": {"order_id": 7},
            }
        )
    )
    acme = {**env, "AGORA_TENANT": "acme"}
    problems: list[str] = []
    for command, cases in CASES.items():
        for args, kind in cases:
            argv = [*command.split(), *(str(doc) if a == "{globex}" else a for a in args)]
            got = run_cli(*argv, "--db", url, env=acme)
            said = f"{' '.join(argv)} -> exit {got.exit_code}: {got.stderr.strip()[:300]}"
            if kind in ("refused", "outside", "past"):
                text = {"refused": ACROSS, "outside": OUTSIDE, "past": PAST}[kind]
                if (
                    got.exit_code != 2
                    or text not in got.stderr
                    or "--all-tenants" not in got.stderr
                ):
                    problems.append(said)
                elif kind == "refused" and "its own database" not in got.stderr:
                    problems.append(said)
            elif kind == "missing":
                if got.exit_code != 1 or "error: no " not in got.stderr:
                    problems.append(said)
            elif kind == "not_found":
                if got.exit_code != 1 or not got.stdout.startswith("not_found: no proposal"):
                    problems.append(f"{said}: {got.stdout[:300]}")
            elif kind == "acme" and got.exit_code != 0:
                problems.append(said)
            elif "globex" in got.stdout.lower():
                problems.append(f"{said}: globex in {got.stdout[:300]}")
            elif kind.startswith("same:"):
                plain = run_cli(*argv, *kind[5:].split(), "--db", url, env=env)
                if (plain.exit_code, _stable(plain.stdout)) != (got.exit_code, _stable(got.stdout)):
                    problems.append(f"{said}: differs from {kind[5:]} without a session tenant")
                unscoped = run_cli(*argv, "--db", url, env=env)
                if command != "keys list" and _stable(unscoped.stdout) == _stable(got.stdout):
                    problems.append(f"{said}: the same as every tenant's (no scope to test)")
    assert not problems, "\n".join(problems)


def test_threads_list_shows_acme_only_and_all_tenants_ignores_the_session(
    dialect: str, databases: Any, tmp_path: Path
) -> None:
    url, env = _demo(dialect, databases, tmp_path)
    acme = {**env, "AGORA_TENANT": "acme"}
    args = ("threads", "list", "--json", "--db", url)
    scoped = run_cli(*args, env=acme).json()["threads"]
    assert scoped and {t["tenant_ref"] for t in scoped} == {"acme"}
    every = run_cli(*args, "--all-tenants", env=acme).json()["threads"]
    assert {t["tenant_ref"] for t in every} == {"acme", "globex", None}
    spend = run_cli(
        "spend", "--by", "tenant", "--from", "2026-11-01", "--json", "--db", url, env=acme
    )
    assert spend.exit_code == 0, spend.stderr
    assert [r["key"] for r in spend.json()["rows"]] == ["acme"]
    folded = run_cli("spend", "fold", "--all-tenants", "--db", url, env=acme)
    assert folded.exit_code == 0, folded.stderr


@pytest.mark.parametrize("where", ["env", "profile"])
def test_a_profiles_tenant_is_the_same_setting(where: str, tmp_path: Path) -> None:
    url, env = f"sqlite:///{tmp_path / 'a.db'}", {}
    assert run_cli("demo", "--db", url).exit_code == 0
    config = tmp_path / "config.toml"
    config.write_text('[profiles.acme]\ntenant = "acme"\n')
    env = {"AGORA_CONFIG": str(config)}
    extra = ("--profile", "acme") if where == "profile" else ()
    if where == "env":
        env["AGORA_TENANT"] = "acme"
    got = run_cli("prices", "list", *extra, "--db", url, env=env)
    assert got.exit_code == 2
    assert got.stderr.startswith("error: `agora prices list` works across tenants")
    shown = run_cli("config", "show", *extra, "--json", env=env).json()
    assert shown["tenant_scope"]["tenant"] == "acme"
    assert "spend" in shown["tenant_scope"]["scoped"]
    assert "prices list" in shown["tenant_scope"]["refused"]
    ignored = run_cli("config", "show", *extra, "--all-tenants", "--json", env=env).json()
    assert ignored["tenant_scope"] == {
        "tenant": None,
        "ignored": "acme",
        "scoped": [],
        "refused": [],
    }


@pytest.fixture
def member_login(databases: Any) -> Iterator[tuple[str, str]]:
    """A demo database with RLS enabled, and a LOGIN that is a member of its app role."""
    from sqlalchemy import text
    from sqlalchemy.engine import make_url

    from agora_cli.store._engine import open_engine

    databases.require("postgresql")
    url = str(databases.new("postgresql"))
    role, login = f"agora_app_ts_{secrets.token_hex(4)}", f"agora_rt_ts_{secrets.token_hex(4)}"
    try:
        assert run_cli("demo", "--db", url).exit_code == 0
        enabled = run_cli("db", "rls", "enable", "--app-role", role, "--db", url)
        assert enabled.exit_code == 0, enabled.stderr
        engine = open_engine(url)
        with engine.begin() as conn:
            conn.exec_driver_sql(f'CREATE ROLE "{login}" LOGIN NOSUPERUSER NOBYPASSRLS')
            conn.exec_driver_sql(f'GRANT "{role}" TO "{login}"')
        engine.dispose()
        yield url, make_url(url).set(username=login).render_as_string(hide_password=False)
    finally:
        engine = open_engine(url)
        with engine.begin() as conn:
            for name in (login, role):
                if conn.execute(
                    text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": name}
                ).first():
                    conn.exec_driver_sql(f'DROP OWNED BY "{name}"')
                    conn.exec_driver_sql(f'DROP ROLE "{name}"')
        engine.dispose()


def test_as_a_member_of_the_app_role_with_globex_ids_in_hand(
    member_login: tuple[str, str], tmp_path: Path
) -> None:
    owner_url, url = member_login
    acme = {"AGORA_TENANT": "acme"}
    shown = run_cli("threads", "show", "demo-thread-07", "--json", "--db", url, env=acme)
    assert (shown.exit_code, shown.stderr) == (1, "error: no thread 'demo-thread-07'\n")
    gone = run_cli("threads", "delete", "demo-thread-07", "--yes", "--db", url, env=acme)
    assert gone.exit_code == 1
    assert run_cli("runs", "show", "demo-run-07-1", "--db", url, env=acme).exit_code == 1
    spend = run_cli(
        "spend", "--by", "tenant", "--from", "2026-11-01", "--json", "--db", url, env=acme
    )
    assert [r["key"] for r in spend.json()["rows"]] == ["acme"]
    other = run_cli("spend", "--tenant", "globex", "--db", url, env=acme)
    assert other.exit_code == 2 and OUTSIDE in other.stderr
    doc = tmp_path / "p.json"
    doc.write_text(
        json.dumps(
            {
                "tenant_ref": "globex",
                "actor_ref": "carol",
                "thread_id": "demo-thread-07",
                "tool_name": "refund",
                "input": {"order_id": 7},
            }
        )
    )
    created = run_cli("proposals", "create", "--file", str(doc), "--db", url, env=acme)
    assert created.exit_code == 2 and OUTSIDE.replace("--tenant", "tenant_ref") in created.stderr
    fold = run_cli("spend", "fold", "--db", url, env=acme)
    assert fold.exit_code == 2 and ACROSS in fold.stderr
    # --all-tenants drops the session tenant: the app role then sees untenanted threads only.
    listed = run_cli("threads", "list", "--all-tenants", "--json", "--db", url, env=acme).json()
    assert {t["tenant_ref"] for t in listed["threads"]} == {None}
    # Nothing of globex's was touched.
    kept = run_cli("threads", "show", "demo-thread-07", "--json", "--db", owner_url)
    assert kept.exit_code == 0 and kept.json()["thread"]["tenant_ref"] == "globex"
