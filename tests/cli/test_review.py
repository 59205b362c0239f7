"""`agora proposals review` (issue 28): the inbox one item at a time, decided with one key.

Two ways in, on every dialect:

- in-process, through the real CLI with a scripted terminal in place of the TTY
  (``review.on_a_terminal`` / ``review.open_terminal``): each branch of the walk — outcomes
  decided elsewhere, tool calls, sealed values, paging, Ctrl-C — fast;
- in a real terminal: the installed ``agora`` in tmux (a private server per test, 120x40 and
  60x40), keys sent with ``send-keys``, the screen read with ``capture-pane``, and the database
  read afterwards. These wait on the clock (``slow``).

Every test here fails on main before issue 28: there was no ``proposals review``.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import Script, no_data, run_cli, snapshot

from agora_cli.cli import review
from agora_cli.store._sealing import Kek, generate_kek

HOUR = 3_600_000
NOT_INTERACTIVE = (
    "error: agora proposals review is interactive and needs a terminal on stdin and stdout; in a "
    "script, list what waits with agora proposals inbox --json and decide each with agora "
    "proposals decide ID --approve|--reject --by WHO\n"
)


@dataclass
class Seeded:
    refund: str  # acme/alice, expires in 1 h: first
    cancel: str  # no tenant/dave, expires in 2 h: second
    export: str  # globex/carol, expires in 3 h: third
    threads: dict[str, str]


def _now() -> int:
    return int(time.time() * 1000)


def seed(engine: Any) -> Seeded:
    """Three pending proposals in three scopes, each in a thread with one message."""
    from agora_cli.store._proposals import ActionProposalStore, NewProposal, Scope
    from agora_cli.store._threads import append_message, create_thread

    now = _now()
    scopes = {
        "refund": ("acme", "alice", "t-acme-refund"),
        "cancel": (None, "dave", "t-none-cancel"),
        "export": ("globex", "carol", "t-globex-export"),
    }
    with engine.begin() as conn:
        for name, (tenant, actor, thread_id) in scopes.items():
            create_thread(conn, actor_ref=actor, tenant_ref=tenant, thread_id=thread_id)
            append_message(conn, thread_id=thread_id, role="user", content=f"please {name} it")
    store = ActionProposalStore(engine)
    made = {}
    for n, (name, tool, inp, card) in enumerate(
        [
            ("refund", "refund_order", {"order_id": 7, "amount": 12.5}, None),
            ("cancel", "cancel_subscription", {"plan": "team"}, None),
            ("export", "export_report", {"format": "csv"}, None),
        ],
        start=1,
    ):
        tenant, actor, thread_id = scopes[name]
        card = {
            "title": f"{tool.replace('_', ' ').capitalize()}",
            "summary": f"{actor} asked: {name}",
            "risk": "low",
        }
        made[name] = store.create(
            NewProposal(
                scope=Scope(tenant, actor, thread_id),
                tool_name=tool,
                input=inp,
                card=card,
                run_id=f"run-{name}",
                tool_call_id=f"call-{name}",
                expires_at=now + n * HOUR,
            )
        ).proposal.id
    return Seeded(threads={k: v[2] for k, v in scopes.items()}, **made)


def rows(engine: Any) -> dict[str, dict[str, Any]]:
    return snapshot(engine)


@pytest.fixture
def walk(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., Any]:
    """Run ``agora proposals review ARGS`` in-process on the scripted terminal ``script``."""
    monkeypatch.setattr(review, "on_a_terminal", lambda: True)
    config = {"AGORA_CONFIG": str(tmp_path / "no-config.toml"), "AGORA_PROFILE": None}

    def run(script: Script, *args: str, env: dict[str, Any] | None = None) -> Any:
        monkeypatch.setattr(review, "open_terminal", lambda: script)
        result = run_cli("proposals", "review", *args, env={**config, **(env or {})})
        # a table pads its cells to the column's width: trailing spaces a terminal never shows
        result.stdout = "".join(line.rstrip() + "\n" for line in result.stdout.splitlines())
        return result

    return run


def _decide_as(engine: Any, pid: str, decision: str, who: str) -> Callable[[], None]:
    def act() -> None:
        from agora_cli.store._proposals import ActionProposalStore

        store = ActionProposalStore(engine)
        found = next(p for p in rows(engine).values() if p["id"] == pid)
        from agora_cli.store._proposals import Scope

        scope = Scope(found["tenant_ref"], found["actor_ref"], found["thread_id"])
        assert store.decide(pid, scope, decision, who, "by hand").outcome == "applied"

    return act


# --- in-process: every branch ------------------------------------------------------------------


def test_the_walk_approves_rejects_with_the_reason_and_skips(
    engine: Any, db_url: str, walk: Any
) -> None:
    s = seed(engine)
    before = rows(engine)
    script = Script("a", "r", "not a customer of ours", "s")
    r = walk(script, "--db", db_url, "--by", "ops-lead")
    assert r.exit_code == 0, r.stderr
    assert r.stderr == ""
    out = r.stdout
    # soonest to expire first, each once, with its tool, scope, card and input
    assert out.index("refund_order") < out.index("cancel_subscription") < out.index("export_report")
    assert "Waiting for a decision: 3 proposal(s), soonest to expire first." in out
    assert "1 of 3 · proposal" in out and "3 of 3 · proposal" in out
    assert "tenant acme · actor alice · thread t-acme-refund" in out
    assert "tenant — · actor dave · thread t-none-cancel" in out
    assert "Refund order\n" in out and "alice asked: refund" in out and '"risk": "low"' in out
    assert '"order_id": 7,' in out and '"amount": 12.5' in out
    # an hour from the seed, less the seconds a busy machine took to get here
    assert re.search(r"expires\s+\S+ \S+ UTC \(in [1-5]?\dm \d\ds\)", out)
    assert re.search(r"created\s+\S+ \S+ UTC \((\d+ ms|\d+\.\d s|\dm \d\ds) ago\)", out)
    assert "approved by ops-lead: queued for a worker." in out
    assert "rejected by ops-lead: not a customer of ours" in out
    assert out.rstrip().endswith("approved 1, rejected 1, skipped 1.")
    assert script.prompts == ["reason (recorded as the note; empty: back): "]  # no name asked
    after = rows(engine)
    refund, cancel = after[s.refund], after[s.cancel]
    assert (refund["decision"], refund["decided_by"], refund["execution_state"]) == (
        "approved",
        "ops-lead",
        "queued",
    )
    assert refund["decision_note"] is None
    assert (cancel["decision"], cancel["decided_by"], cancel["decision_note"]) == (
        "rejected",
        "ops-lead",
        "not a customer of ours",
    )
    assert after[s.export] == before[s.export]  # skipped: untouched, byte for byte
    # each decision is the operator's, in the proposal's history (what `proposals show` lists)
    from sqlalchemy import select

    from agora_cli.store._schema import action_proposal_event as event

    with engine.connect() as conn:
        acts = conn.execute(select(event.c.proposal_id, event.c.kind, event.c.acted_by)).all()
    assert sorted(acts) == sorted(
        [(s.refund, "operator_decision", "ops-lead"), (s.cancel, "operator_decision", "ops-lead")]
    )


def test_an_empty_reason_goes_back_and_q_quits_with_the_summary(
    engine: Any, db_url: str, walk: Any
) -> None:
    s = seed(engine)
    before = rows(engine)
    r = walk(Script("r", "", "r", "   ", "x", "q"), "--db", db_url, "--by", "ops")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.count("not rejected: a rejection needs a reason.") == 2
    assert "press one of a, r, s, o, q › quit" in r.stdout
    assert r.stdout.rstrip().endswith("quit: approved 0, rejected 0, skipped 0.")
    assert "cancel_subscription" not in r.stdout  # it stopped at the first
    assert rows(engine) == before
    assert s.refund in r.stdout


def test_the_operator_comes_from_by_then_the_profile_then_is_asked_once(
    engine: Any, db_url: str, walk: Any, tmp_path: Path
) -> None:
    s = seed(engine)
    config = tmp_path / "config.toml"
    config.write_text('[profiles.ops]\noperator = "night-shift"\n')
    profile = {"AGORA_CONFIG": str(config), "AGORA_PROFILE": "ops"}
    r = walk(Script("a", "q"), "--db", db_url, env=profile)
    assert r.exit_code == 0, r.stderr
    assert rows(engine)[s.refund]["decided_by"] == "night-shift"
    r = walk(Script("a", "q"), "--db", db_url, "--by", "day-shift", env=profile)
    assert r.exit_code == 0, r.stderr
    assert rows(engine)[s.cancel]["decided_by"] == "day-shift"  # --by beats the profile
    script = Script("", "a\x00b", "evening", "a")
    r = walk(script, "--db", db_url)
    assert r.exit_code == 0, r.stderr
    # asked once at the start (an empty answer and a control character asked again)
    assert script.prompts == ["Deciding as (recorded as decided_by; --by skips this): "] * 3
    assert r.stderr == "error: decided_by must not contain a NUL character\n"
    assert rows(engine)[s.export]["decided_by"] == "evening"
    assert r.stdout.index("Waiting for a decision") < r.stdout.index("export_report")


def test_no_operator_at_the_end_of_input_is_exit_2(engine: Any, db_url: str, walk: Any) -> None:
    seed(engine)
    before = rows(engine)
    r = walk(Script(), "--db", db_url)
    assert r.exit_code == 2
    assert r.stderr.endswith(
        "error: no operator given: pass --by WHO or set the profile's operator\n"
    )
    assert rows(engine) == before


def test_what_someone_else_decided_meanwhile_shows_its_outcome_and_moves_on(
    engine: Any, db_url: str, walk: Any
) -> None:
    from agora_cli.store._schema import action_proposal

    s = seed(engine)

    def expire_export() -> None:  # its expiry passes while the operator looks at it
        with engine.begin() as conn:
            conn.execute(
                action_proposal.update()
                .where(action_proposal.c.id == s.export)
                .values(expires_at=_now() - 1000)
            )

    script = Script(  # while refund is shown, others act
        _decide_as(engine, s.refund, "rejected", "someone-else"),  # refund: a conflict
        _decide_as(engine, s.cancel, "approved", "colleague"),  # cancel: gone when read again
        expire_export,  # export: shown, then expired when decided
        "a",
        "a",
    )
    r = walk(script, "--db", db_url, "--by", "ops-lead")
    assert r.exit_code == 0, r.stderr
    out = " ".join(r.stdout.split())
    assert "conflict: it was already rejected by someone-else at " in out
    assert f"{s.cancel} was approved by colleague at " in out and "meanwhile; moving on." in out
    assert "expired: it expired 20" in out and "nothing written." in out
    assert out.endswith("approved 0, rejected 0, skipped 0; 3 decided or expired elsewhere.")
    after = rows(engine)
    assert (after[s.refund]["decision"], after[s.refund]["decided_by"]) == (
        "rejected",
        "someone-else",
    )
    assert after[s.cancel]["decided_by"] == "colleague"
    assert after[s.export]["decision"] == "expired"


def test_unchanged_when_it_already_holds_that_decision(engine: Any, db_url: str, walk: Any) -> None:
    s = seed(engine)
    script = Script(_decide_as(engine, s.refund, "approved", "colleague"), "a", "q")
    r = walk(script, "--db", db_url, "--by", "ops-lead")
    assert r.exit_code == 0, r.stderr
    assert "unchanged: it was already approved by colleague at " in r.stdout
    assert rows(engine)[s.refund]["decided_by"] == "colleague"  # the first audit stays


def test_a_runtime_tool_call_offers_only_skip_open_and_quit(
    engine: Any, db_url: str, walk: Any
) -> None:
    from upstream import write_upstream

    from agora_cli.store._schema import tool_call

    up = write_upstream(engine, now=_now())
    pending = up.tool_calls["pending"]
    before = rows(engine)

    def call_row() -> dict[str, Any]:
        with engine.connect() as conn:
            return dict(
                conn.execute(tool_call.select().where(tool_call.c.id == pending)).mappings().one()
            )

    call_before = call_row()
    script = Script("a", "r", "o", "s")
    r = walk(script, "--db", db_url)  # no --by: nothing to decide, so nobody is asked
    assert r.exit_code == 0, r.stderr
    out = " ".join(r.stdout.split())
    assert "Waiting for a decision: 1 runtime tool-call approval(s), oldest first." in out
    assert "1 of 1 · tool call" in out and "cancel_invoice" in out
    assert "tenant globex · actor bob · thread " + up.threads["globex"] in out
    assert '"order_id": 7' in out and "expires never" in out
    assert "This is the runtime's own approval: its run waits on the app" in out
    assert "[s]kip [o]pen thread [q]uit ›" in out and "[a]pprove" not in out
    assert out.count("press one of s, o, q ›") == 2  # a and r are not offered
    # o: the thread's transcript (threads show), then the tool call again
    assert out.count("1 of 1 · tool call") == 2
    assert "message(s)" in out
    assert out.endswith("approved 0, rejected 0, skipped 1.")
    assert script.prompts == []
    assert call_row() == call_before and rows(engine) == before


def test_open_shows_the_thread_and_returns_to_the_same_proposal(
    engine: Any, db_url: str, walk: Any
) -> None:
    s = seed(engine)
    r = walk(Script("o", "s", "q"), "--db", db_url, "--by", "ops")
    assert r.exit_code == 0, r.stderr
    out = r.stdout
    shown = out.index("please refund it")
    assert out.index("1 of 3 · proposal") < shown < out.rindex("1 of 3 · proposal")
    assert out.count("refund_order") == 2 and s.refund in out


@pytest.mark.usefixtures("no_kek_in_env")
def test_sealed_input_and_card_open_with_the_kek_and_say_so_without(
    engine: Any, db_url: str, walk: Any
) -> None:
    from agora_cli.store._proposals import ActionProposalStore, NewProposal, Scope
    from agora_cli.store._sealing import using_kek
    from agora_cli.store._threads import create_thread

    kek = generate_kek()
    with_kek = {"AGORA_KEK": kek, "AGORA_KEK_FILE": None}
    made = run_cli("keys", "create", "--tenant", "acme", "--db", db_url, env=with_kek)
    assert made.exit_code == 0, made.stderr
    with using_kek(Kek.from_text(kek)):
        with engine.begin() as conn:
            create_thread(conn, actor_ref="alice", tenant_ref="acme", thread_id="t-sealed")
        pid = (
            ActionProposalStore(engine)
            .create(
                NewProposal(
                    scope=Scope("acme", "alice", "t-sealed"),
                    tool_name="pay_invoice",
                    input={"iban": "DE89370400440532013000"},
                    card={"title": "Pay invoice 42", "summary": "to ACME GmbH"},
                    run_id="run-sealed",
                    tool_call_id="call-sealed",
                    expires_at=_now() + HOUR,
                )
            )
            .proposal.id
        )
    stored = rows(engine)[pid]
    assert "DE89" not in stored["input"] and "ACME GmbH" not in stored["card"]
    opened = walk(Script("s"), "--db", db_url, "--by", "ops", env=with_kek)
    assert opened.exit_code == 0, opened.stderr
    assert '"iban": "DE89370400440532013000"' in opened.stdout
    assert "Pay invoice 42" in opened.stdout and "to ACME GmbH" in opened.stdout
    assert "AGORA_KEK" not in opened.stdout
    locked = walk(Script("s"), "--db", db_url, "--by", "ops")
    assert locked.exit_code == 0, locked.stderr
    assert "DE89" not in locked.stdout and "ACME GmbH" not in locked.stdout
    assert "[sealed]" in locked.stdout
    assert "set AGORA_KEK or AGORA_KEK_FILE to read what is sealed" in locked.stdout


def test_control_characters_are_shown_never_obeyed(engine: Any, db_url: str, walk: Any) -> None:
    from agora_cli.store._proposals import ActionProposalStore, NewProposal, Scope
    from agora_cli.store._threads import create_thread

    with engine.begin() as conn:
        create_thread(conn, actor_ref="mallory", thread_id="t-evil")
    ActionProposalStore(engine).create(
        NewProposal(
            scope=Scope(None, "mallory", "t-evil"),
            tool_name="wire\x1b[2Jmoney",
            input={"to": "x\x1b]0;owned\x07"},
            card={"title": "Wire\x1b[31m", "summary": "line\u202eevil"},
            run_id="run-evil",
            tool_call_id="call-evil",
            expires_at=_now() + HOUR,
        )
    )
    r = walk(Script("s"), "--db", db_url, "--by", "ops")
    assert r.exit_code == 0, r.stderr
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout and "\u202e" not in r.stdout
    assert "wire\\x1b[2Jmoney" in r.stdout and "Wire\\x1b[31m" in r.stdout
    assert "line\\u202eevil" in r.stdout


def test_a_long_walk_is_read_a_page_at_a_time_and_each_item_shows_once(
    engine: Any, db_url: str, walk: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agora_cli.store._proposals import ActionProposalStore, NewProposal, Scope
    from agora_cli.store._threads import create_thread

    monkeypatch.setattr(review, "PAGE", 3)
    with engine.begin() as conn:
        create_thread(conn, actor_ref="erin", thread_id="t-many")
    store = ActionProposalStore(engine)
    now = _now()
    ids = [
        store.create(
            NewProposal(
                scope=Scope(None, "erin", "t-many"),
                tool_name=f"tool_{n}",
                input={"n": n},
                run_id="run-many",
                tool_call_id=f"call-{n}",
                expires_at=now + (n + 1) * HOUR,
            )
        ).proposal.id
        for n in range(7)
    ]
    # skip, approve, skip, ...: the skipped ones come back in every later page, never shown twice
    script = Script(*["s" if n % 2 == 0 else "a" for n in range(7)])
    r = walk(script, "--db", db_url, "--by", "ops")
    assert r.exit_code == 0, r.stderr
    assert [r.stdout.count(f"tool_{n}\n") for n in range(7)] == [1] * 7
    order = [r.stdout.index(f"tool_{n}\n") for n in range(7)]
    assert order == sorted(order)
    assert "7 of 7 · proposal" in r.stdout and "1 of 3+ · proposal" in r.stdout
    assert r.stdout.rstrip().endswith("approved 3, rejected 0, skipped 4.")
    decided = rows(engine)
    assert [decided[i]["decision"] for i in ids] == ["pending", "approved"] * 3 + ["pending"]


def test_filters_narrow_the_walk_like_the_inbox(engine: Any, db_url: str, walk: Any) -> None:
    seed(engine)
    for args, tool in (
        (("--tenant", "acme"), "refund_order"),
        (("--actor", "dave"), "cancel_subscription"),
        (("--tool", "export_report"), "export_report"),
    ):
        r = walk(Script("s"), *args, "--db", db_url, "--by", "ops")
        assert r.exit_code == 0, r.stderr
        assert "1 of 1 · proposal" in r.stdout and tool in r.stdout, args
    r = walk(Script(), "--tenant", "nobody", "--db", db_url)
    assert r.exit_code == 0, r.stderr
    assert r.stdout == "nothing waiting for a decision.\n"  # and nobody was asked a name


def test_ctrl_c_ends_the_walk_with_130_and_keeps_what_was_decided(
    engine: Any, db_url: str, walk: Any
) -> None:
    s = seed(engine)
    r = walk(Script("a", KeyboardInterrupt()), "--db", db_url, "--by", "ops")
    assert r.exit_code == 130
    assert r.stdout.rstrip().endswith("interrupted: approved 1, rejected 0, skipped 0.")
    assert rows(engine)[s.refund]["decision"] == "approved"
    assert rows(engine)[s.cancel]["decision"] == "pending"


def test_the_past_expiry_count_is_noted(engine: Any, db_url: str, walk: Any) -> None:
    from agora_cli.store._schema import action_proposal

    s = seed(engine)
    with engine.begin() as conn:
        conn.execute(
            action_proposal.update()
            .where(action_proposal.c.id == s.refund)
            .values(expires_at=_now() - 1000, discovery_at=_now() - 1000)
        )
    r = walk(Script("q"), "--db", db_url, "--by", "ops")
    assert r.exit_code == 0, r.stderr
    assert "note: 1 pending proposal(s) are past their expiry" in " ".join(r.stderr.split())
    assert "refund_order" not in r.stdout and "cancel_subscription" in r.stdout


# --- without a terminal, and what it refuses ----------------------------------------------------


def test_without_a_terminal_it_refuses_and_points_at_inbox_and_decide(
    engine: Any, db_url: str
) -> None:
    seed(engine)
    before = rows(engine)
    r = run_cli("proposals", "review", "--db", db_url, "--by", "ops")
    assert r.exit_code == 2
    assert r.stdout == ""
    assert r.stderr == NOT_INTERACTIVE
    assert rows(engine) == before


def test_it_refuses_what_makes_no_sense_before_touching_anything(tmp_path: Path) -> None:
    missing = f"sqlite:///{tmp_path / 'none.db'}"
    for args, said in (
        (("--json",), "No such option: --json"),
        (("--csv",), "No such option: --csv"),
        (("--read-db", missing), "No such option: --read-db"),
        (("--by", " "), "error: --by must be a non-empty string (not blank)"),
        (("--by", "a\x00b"), "error: --by"),
    ):
        r = run_cli("proposals", "review", *args, "--db", missing)
        assert r.exit_code == 2, (args, r.stderr)
        assert said in r.stderr and no_data(r), args
    assert not (tmp_path / "none.db").exists()


def test_the_session_tenant_scopes_it(engine: Any, db_url: str, walk: Any) -> None:
    seed(engine)
    r = walk(Script("s"), "--db", db_url, "--by", "ops", env={"AGORA_TENANT": "acme"})
    assert r.exit_code == 0, r.stderr
    assert "1 of 1 · proposal" in r.stdout and "refund_order" in r.stdout
    r = walk(Script(), "--tenant", "globex", "--db", db_url, env={"AGORA_TENANT": "acme"})
    assert r.exit_code == 2 and "is outside the session tenant 'acme'" in r.stderr


def test_the_operator_profile_key(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[profiles.ops]\ndb = "sqlite:///x.db"\noperator = "night-shift"\n')
    env = {"AGORA_CONFIG": str(config), "AGORA_PROFILE": None}
    shown = run_cli("--profile", "ops", "config", "show", "--json", env=env)
    assert shown.exit_code == 0, shown.stderr
    assert shown.json()["settings"]["operator"] == {
        "value": "night-shift",
        "source": f"profile ops ({config}:3)",
        "env": None,
    }
    table = run_cli("--profile", "ops", "config", "show", env=env)
    assert re.search(r"operator\s+night-shift\s+profile ops", table.stdout)
    plain = run_cli("config", "show", "--json", env=env).json()["settings"]["operator"]
    assert plain == {"value": None, "source": "default (asked by proposals review)", "env": None}
    config.write_text('[profiles.ops]\noperator = "   "\n')
    bad = run_cli("--profile", "ops", "config", "show", env=env)
    assert bad.exit_code == 2
    assert f"error: {config}:2: operator must be a non-empty string" in bad.stderr
    config.write_text(f'[profiles.ops]\noperator = "{"x" * 300}"\n')
    bad = run_cli("--profile", "ops", "config", "show", env=env)
    assert bad.exit_code == 2
    assert f"{config}:2: operator is 300 UTF-16 code units long; the limit is" in bad.stderr
    config.write_text('[profiles.ops]\noperatr = "x"\n')
    bad = run_cli("--profile", "ops", "config", "show", env=env)
    assert bad.exit_code == 2 and "tenant, tz, by, last, operator)" in bad.stderr


def test_its_help_loads_neither_the_database_layer_nor_the_terminal_modes() -> None:
    code = (
        "import sys\n"
        "from agora_cli.cli import main\n"
        "sys.argv = ['agora', 'proposals', 'review', '--help']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('MODULES', ' '.join(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "Example: agora proposals review --by ops-lead" in done.stdout
    modules = set(done.stdout.rsplit("MODULES", 1)[1].split())
    assert not {"sqlalchemy", "httpx", "alembic", "termios", "tty"} & modules


# --- in a real terminal: tmux ------------------------------------------------------------------

AGORA = Path(sys.executable).with_name("agora")


class Tmux:
    """A private tmux server (its own socket, a unique name) running one command in one pane."""

    def __init__(self, name: str, env: dict[str, str]) -> None:
        self.name = name
        self.env = env
        self.started = False

    def _tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.name, *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=30,
            check=False,
        )
        assert done.returncode == 0, f"tmux {' '.join(args)}: {done.stderr}"
        return done.stdout

    def start(self, command: str, *, width: int, height: int = 40) -> None:
        """Run ``command`` in a fresh pane (the first in a new session, later ones in a new
        window of it: its own screen and history)."""
        # The pane outlives the command, so its last screen and exit status can be read.
        shell = f'{command}; echo "[exit $?]"; exec sleep 600'
        size = ["-x", str(width), "-y", str(height)]
        if not self.started:
            self._tmux("new-session", "-d", "-s", "review", *size, "sh", "-c", shell)
            self.started = True
        else:
            self._tmux("new-window", "-t", "review", "sh", "-c", shell)

    def send(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", "review", *keys)

    def type(self, text: str) -> None:
        self._tmux("send-keys", "-t", "review", "-l", text)

    def screen(self, *, history: bool = False) -> str:
        args = ["capture-pane", "-p", "-t", "review"]
        if history:
            args += ["-S", "-"]
        return self._tmux(*args)

    def wait_for(self, text: str, *, timeout: float = 60, history: bool = True) -> str:
        """The screen once ``text`` is on it (the whole history with ``history``)."""
        deadline = time.monotonic() + timeout
        while True:
            shown = self.screen(history=history)
            if text in shown:
                return shown
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} never showed; the screen:\n{shown}")
            time.sleep(0.1)

    def kill(self) -> None:
        subprocess.run(
            ["tmux", "-L", self.name, "kill-server"],
            capture_output=True,
            env=self.env,
            timeout=30,
            check=False,
        )


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    """A tmux server of this test's own; killed however the test ends."""
    if shutil.which("tmux") is None:
        if os.environ.get("CI"):
            pytest.fail("tmux is not installed (.ci/run installs it)", pytrace=False)
        pytest.skip("tmux is not installed")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AGORA_", "TMUX")) and k not in ("COLUMNS", "LINES", "NO_COLOR")
    }
    # the server's socket in a folder of its own, short enough for a socket's path (108 bytes)
    sockets = tempfile.mkdtemp(prefix="agora-tmux-", dir="/tmp")
    env.update(
        AGORA_CONFIG=str(tmp_path / "no-config.toml"),
        TERM="xterm-256color",
        LANG="C.UTF-8",
        LC_ALL="C.UTF-8",
        HOME=str(tmp_path),
        TMUX_TMPDIR=sockets,
    )
    server = Tmux(f"agora-review-{os.getpid()}-{secrets.token_hex(4)}", env)
    try:
        yield server
    finally:
        server.kill()
        shutil.rmtree(sockets, ignore_errors=True)


def _line_of(screen: str, text: str) -> str:
    return next(line for line in screen.splitlines() if text in line)


@pytest.mark.slow
def test_review_driven_in_a_real_terminal_at_120_columns(
    engine: Any, db_url: str, tmux: Tmux
) -> None:
    s = seed(engine)
    before = rows(engine)
    tmux.start(f"{AGORA} proposals review --db '{db_url}' --by ops-lead", width=120)
    screen = tmux.wait_for("[q]uit ›")
    assert "Waiting for a decision: 3 proposal(s), soonest to expire first." in screen
    header = _line_of(screen, "1 of 3 · proposal")
    assert header.startswith("1 of 3 · proposal ap_") and header.rstrip().endswith("─")
    assert re.search(r"^tool\s+refund_order$", screen, re.M)
    assert re.search(r"^scope\s+tenant acme · actor alice · thread t-acme-refund$", screen, re.M)
    assert re.search(r"^expires\s+\S+ \S+ UTC \(in [1-5]?\dm \d\ds\)$", screen, re.M)
    assert re.search(rf"^id\s+{s.refund}$", screen, re.M)
    assert re.search(r"^card\s+Refund order$", screen, re.M)
    assert '"order_id": 7,' in screen
    assert _line_of(screen, "[q]uit ›").strip() == (
        "[a]pprove  [r]eject  [s]kip  [o]pen thread  [q]uit ›"
    )
    tmux.send("a")
    tmux.wait_for("approved by ops-lead: queued for a worker.")
    tmux.wait_for("2 of 3 · proposal")
    tmux.send("r")
    tmux.wait_for("reason (recorded as the note; empty: back):")
    tmux.type("not a customer of ours")
    tmux.send("Enter")
    tmux.wait_for("rejected by ops-lead: not a customer of ours")
    tmux.wait_for("3 of 3 · proposal")
    tmux.send("s")
    screen = tmux.wait_for("[exit 0]")
    assert "approved 1, rejected 1, skipped 1." in screen
    # what a person saw is what the database holds
    after = rows(engine)
    assert (after[s.refund]["decision"], after[s.refund]["decided_by"]) == ("approved", "ops-lead")
    assert after[s.refund]["execution_state"] == "queued"
    assert (after[s.cancel]["decision"], after[s.cancel]["decision_note"]) == (
        "rejected",
        "not a customer of ours",
    )
    assert after[s.cancel]["decided_by"] == "ops-lead"
    assert after[s.export] == before[s.export]


@pytest.mark.slow
def test_review_at_60_columns_with_a_tool_call_a_conflict_and_the_pager(
    engine: Any, db_url: str, tmux: Tmux, tmp_path: Path
) -> None:
    from upstream import write_upstream

    s = seed(engine)
    up = write_upstream(engine, now=_now())
    config = tmp_path / "config.toml"
    config.write_text('[profiles.ops]\noperator = "night-shift"\n')
    # less without -F waits for q on its own screen, however short the transcript
    env = f"AGORA_CONFIG='{config}' AGORA_PROFILE=ops AGORA_PAGER=less LESS=R"
    tmux.start(f"env {env} {AGORA} proposals review --db '{db_url}' --actor alice", width=60)
    screen = tmux.wait_for("[q]uit ›")
    assert all(len(line) <= 60 for line in screen.splitlines())
    assert "1 of 1 · proposal" in screen
    # the whole id folds inside its column (51 of the 60), never under the labels
    assert f"\nid       {s.refund[:51]}\n         {s.refund[51:]}\n" in screen
    assert _line_of(screen, "[q]uit ›").strip() == (
        "[a]pprove  [r]eject  [s]kip  [o]pen thread  [q]uit ›"
    )
    # someone rejects it while the operator looks at it: approve is a conflict
    _decide_as(engine, s.refund, "rejected", "someone-else")()
    tmux.send("a")
    screen = tmux.wait_for("nothing written.")
    said = " ".join(screen.split())
    assert "conflict: it was already rejected by someone-else at " in said
    tmux.wait_for("[exit 0]")
    assert rows(engine)[s.refund]["decided_by"] == "someone-else"

    # the runtime's tool call, at 60 columns: only s, o and q; o pages the transcript
    tmux.start(
        f"env {env} {AGORA} proposals review --db '{db_url}' --tool cancel_invoice", width=60
    )
    screen = tmux.wait_for("[q]uit ›")
    assert "1 of 1 · tool call" in screen and "cancel_invoice" in screen
    assert "[a]pprove" not in screen and "runtime's own approval" in " ".join(screen.split())
    tmux.send("a")
    tmux.wait_for("press one of s, o, q ›")
    tmux.send("o")
    pager = tmux.wait_for("(END)", history=False)  # less, on its own screen
    assert "#1 user" in pager or "message(s)" in pager
    tmux.send("q")  # leaves less, not the walk
    screen = tmux.wait_for("[q]uit ›", history=False)
    assert "(END)" not in screen and "1 of 1 · tool call" in screen
    tmux.send("q")
    screen = tmux.wait_for("[exit 0]")
    assert "quit: approved 0, rejected 0, skipped 0." in screen
    pending = up.tool_calls["pending"]
    from agora_cli.store._schema import tool_call

    with engine.connect() as conn:
        status = conn.execute(
            tool_call.select()
            .with_only_columns(tool_call.c.status)
            .where(tool_call.c.id == pending)
        ).scalar_one()
    assert status == "pending_approval"


@pytest.mark.slow
@pytest.mark.parametrize("redirect", ["< /dev/null", "> /dev/null"])
def test_in_a_terminal_but_redirected_it_refuses(tmp_path: Path, tmux: Tmux, redirect: str) -> None:
    db = f"sqlite:///{tmp_path / 'none.db'}"  # refused before any database is opened
    tmux.start(f"{AGORA} proposals review --db '{db}' --by ops {redirect}", width=120)
    screen = tmux.wait_for("[exit ")
    assert "[exit 2]" in screen
    assert " ".join(NOT_INTERACTIVE.split()) in " ".join(screen.split())
    assert not (tmp_path / "none.db").exists()
