"""Issue 28 through the real command line: decisions by short id (friction 1), `proposals
requeue` and `proposals cancel` (friction 8), and the history `proposals show` prints.

Each test fails on main: there, `decide` without scope flags is exit 2 ("this command needs the
whole scope"), `--by` is not a required option, and `requeue`/`cancel` do not exist.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import agora_command, no_data, run_cli
from sqlalchemy import select
from upstream import write_upstream

from agora_cli.store._proposals import ActionProposalStore, NewProposal, Scope
from agora_cli.store._schema import action_proposal, action_proposal_event, thread

P_KEYS = [
    "id", "idempotency_key", "tenant_ref", "actor_ref", "thread_id", "run_id", "tool_call_id",
    "tool_name", "input", "card", "decision", "decided_by", "decided_at", "decision_note",
    "expires_at", "execution_state", "lease_owner", "lease_expires_at", "generation", "attempts",
    "result", "error", "settled_at", "created_at", "updated_at",
]  # fmt: skip
EVENT_KEYS = ["id", "kind", "by", "at", "reason", "decision", "before"]
BEFORE_KEYS = [
    "execution_state", "attempts", "generation", "lease_owner", "result", "error", "settled_at",
    "outcome_delivered_at", "outcome_message_id",
]  # fmt: skip
ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
ALICE = Scope(None, "alice", "t1")
ACME = Scope("acme", "bob", "t2")
OPS = ("--by", "ops-lead", "--reason", "refunds-api is back")


def one_error(result: Any, code: int) -> str:
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert no_data(result)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return str(lines[0])


@pytest.fixture
def store(engine: Any, db_url: str) -> ActionProposalStore:
    with engine.begin() as conn:
        for tid, actor, tenant in (("t1", "alice", None), ("t2", "bob", "acme")):
            conn.execute(
                thread.insert().values(
                    id=tid, actor_ref=actor, tenant_ref=tenant, title="", created_at=0,
                    updated_at=0,
                )
            )  # fmt: skip
    return ActionProposalStore(engine)


def created(store: ActionProposalStore, call: str, scope: Scope = ALICE, **kw: Any) -> str:
    new = NewProposal(
        scope=scope, tool_name="refund", run_id="r1", tool_call_id=call, input={"order": 7}, **kw
    )
    return store.create(new).proposal.id


def approved(store: ActionProposalStore, call: str, scope: Scope = ALICE) -> str:
    pid = created(store, call, scope)
    assert store.decide(pid, scope, "approved", "bob").outcome == "applied"
    return pid


def failed(store: ActionProposalStore, call: str, scope: Scope = ALICE) -> str:
    pid = approved(store, call, scope)
    claim = store.claim(pid, scope, "worker-1", 30_000)
    assert claim.lease is not None
    settled = store.settle(pid, claim.lease.token, 1, "failed", {"status": 503}, "503: busy")
    assert settled.outcome == "settled"
    return pid


def history(engine: Any, pid: str) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        q = select(action_proposal_event).where(action_proposal_event.c.proposal_id == pid)
        return [dict(r) for r in conn.execute(q).mappings()]


# --- friction 1: deciding from the inbox by its short id alone ---------------------------------


@pytest.fixture
def demo(dialect: str, databases: Any, tmp_path: Path) -> str:
    url: str = databases.new(dialect)
    made = run_cli("demo", "--db", url)
    assert made.exit_code == 0, made.stderr
    return url


def test_the_issues_command_decides_with_the_rows_own_scope(demo: str) -> None:
    # exactly what the operator typed in issue 28 (main: exit 2, "needs the whole scope")
    r = run_cli("proposals", "decide", "ap_c16786a64", "--approve", "--by", "me", "--db", demo)
    assert r.exit_code == 0, r.stderr
    assert r.stderr == ""
    assert r.stdout.startswith(
        "applied: ap_c16786a6417552be25a5ff200e75f2e5b5e82d8e77d8b567c50894d9e70cc937 is "
        "approved (by me at "
    )
    assert "operator decision" in r.stdout
    scope = ("--actor", "bob", "--thread", "demo-thread-05", "--tenant", "acme")
    shown = run_cli("proposals", "show", "ap_c16786a64", *scope, "--db", demo, "--json")
    assert shown.exit_code == 0, shown.stderr
    p = shown.json()
    assert list(p) == [*P_KEYS, "history"]
    assert (p["decision"], p["decided_by"], p["execution_state"]) == ("approved", "me", "queued")
    [event] = p["history"]
    assert list(event) == EVENT_KEYS
    assert (event["kind"], event["by"], event["decision"], event["before"]) == (
        "operator_decision", "me", "approved", None,
    )  # fmt: skip
    assert event["at"] == p["decided_at"] and ISO.match(event["at"])
    # the same outcomes as a scoped decide: unchanged (exit 0), conflict (exit 1), one event
    again = run_cli("proposals", "decide", "ap_c16786a64", "--approve", "--by", "x", "--db", demo)
    assert again.exit_code == 0 and again.stdout.startswith("unchanged: ")
    other = run_cli(
        "proposals", "decide", "ap_c16786a64", "--reject", "--by", "x", "--db", demo, "--json"
    )
    assert other.exit_code == 1
    assert other.json()["outcome"] == "conflict"
    assert other.json()["proposal"]["decided_by"] == "me"
    shown = run_cli("proposals", "show", "ap_c16786a64", *scope, "--db", demo, "--json")
    assert len(shown.json()["history"]) == 1


def test_the_inbox_hint_works_exactly_as_written(demo: str) -> None:
    helped = run_cli("proposals", "inbox", "--help")
    hint = "agora proposals decide ID --approve|--reject --by WHO, ID its short id"
    assert hint in " ".join(helped.stdout.replace("│", " ").split())
    table = run_cli("proposals", "inbox", "--db", demo)
    assert table.exit_code == 0, table.stderr
    [short] = [
        line.split("│")[1].strip()
        for line in table.stdout.splitlines()
        if "cancel_subscription" in line
    ]
    assert 8 <= len(short) < 30 and short.startswith("ap_")  # a short id, as the table shows it
    decided = run_cli("proposals", "decide", short, "--reject", "--by", "me", "--db", demo)
    assert decided.exit_code == 0, decided.stderr
    assert decided.stdout.startswith(f"applied: {short}") and " is rejected (by me at " in (
        decided.stdout
    )
    after = run_cli("proposals", "inbox", "--db", demo, "--json").json()["proposals"]
    assert not [p for p in after if p["id"].startswith(short)]


def test_by_is_marked_required_in_help() -> None:
    decide = agora_command().commands["proposals"].commands["decide"]
    [by] = [p for p in decide.params if "--by" in getattr(p, "opts", ())]
    assert by.required
    helped = run_cli("proposals", "decide", "--help")
    flat = " ".join(helped.stdout.replace("│", " ").split())
    assert re.search(r"\* --by WHO Who decides [^*]*\[required\]", flat), flat
    missing = run_cli("proposals", "decide", "ap_c16786a64", "--approve", "--db", "sqlite://")
    assert "Missing option '--by'" in one_error(missing, 2)


def test_a_scoped_decision_keeps_its_scope_check_and_is_not_an_operators(
    store: ActionProposalStore, engine: Any, db_url: str
) -> None:
    pid = created(store, "c1", ACME)
    wrong = ("--actor", "bob", "--thread", "t2", "--no-tenant")
    r = run_cli("proposals", "decide", pid[:12], *wrong, "--approve", "--by", "x", "--db", db_url)
    assert r.exit_code == 1 and r.stdout.startswith(f"not_found: no proposal {pid[:12]} in that")
    right = ("--actor", "bob", "--thread", "t2", "--tenant", "acme")
    r = run_cli("proposals", "decide", pid[:12], *right, "--approve", "--by", "x", "--db", db_url)
    assert r.exit_code == 0 and r.stdout.startswith("applied: ")
    assert "operator decision" not in r.stdout
    assert history(engine, pid) == []  # a scoped decision is the row's own audit, as before
    for partial in (("--actor", "bob"), ("--thread", "t2", "--tenant", "acme"), ("--no-tenant",)):
        r = run_cli("proposals", "decide", pid, *partial, "--reject", "--by", "x", "--db", db_url)
        assert "or none of it" in one_error(r, 2)


def test_an_operator_decision_of_nothing_is_not_found(
    store: ActionProposalStore, db_url: str
) -> None:
    r = run_cli("proposals", "decide", "ap_nothing1", "--approve", "--by", "x", "--db", db_url)
    assert (r.exit_code, r.stderr) == (1, "")
    assert r.stdout.strip() == "not_found: no proposal ap_nothing1."
    r = run_cli(
        "proposals", "decide", "ap_nothing1", "--approve", "--by", "x", "--db", db_url, "--json"
    )
    assert r.exit_code == 1 and r.json() == {"outcome": "not_found", "proposal": None}


def test_an_ambiguous_short_id_across_scopes_is_exit_2_listing_them(
    store: ActionProposalStore, db_url: str
) -> None:
    one = created(store, "c1", ALICE, id="ap_twin_0001")
    two = created(store, "c2", ACME, id="ap_twin_0002")
    for command in (
        ("decide", "ap_twin_0", "--approve", "--by", "x"),
        ("requeue", "ap_twin_0", *OPS),
        ("cancel", "ap_twin_0", *OPS),
    ):
        error = one_error(run_cli("proposals", *command, "--db", db_url), 2)
        assert one in error and two in error and "ambiguous" in error


def test_the_runtimes_own_approval_is_refused_without_the_scope_too(
    engine: Any, db_url: str
) -> None:
    up = write_upstream(engine, now=int(time.time() * 1000))
    pending = up.tool_calls["pending"]
    r = run_cli("proposals", "decide", pending[:14], "--approve", "--by", "ops", "--db", db_url)
    assert "is the runtime's own approval: decide it in the app" in one_error(r, 2)
    for command in ("requeue", "cancel"):
        r = run_cli("proposals", command, pending, *OPS, "--db", db_url)
        assert f"agora cannot {command} it" in one_error(r, 2)
    with engine.connect() as conn:
        assert conn.execute(select(action_proposal.c.id)).first() is None


# --- friction 8: requeue and cancel -----------------------------------------------------------


def test_requeue_a_failed_execution_by_its_short_id(
    store: ActionProposalStore, engine: Any, db_url: str
) -> None:
    pid = failed(store, "c1", ACME)
    r = run_cli("proposals", "requeue", pid[:12], *OPS, "--db", db_url, "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert list(doc) == ["outcome", "proposal"] and doc["outcome"] == "requeued"
    p = doc["proposal"]
    assert list(p) == [*P_KEYS, "history"]
    assert (p["id"], p["execution_state"], p["attempts"], p["result"], p["error"]) == (
        pid, "queued", 1, None, None,
    )  # fmt: skip
    assert (p["lease_owner"], p["lease_expires_at"], p["settled_at"]) == (None, None, None)
    [event] = p["history"]
    assert list(event) == EVENT_KEYS and list(event["before"]) == BEFORE_KEYS
    assert (event["kind"], event["by"], event["reason"], event["decision"]) == (
        "requeue", "ops-lead", "refunds-api is back", None,
    )  # fmt: skip
    before = event["before"]
    assert (before["execution_state"], before["attempts"], before["generation"]) == ("failed", 1, 1)
    assert (before["lease_owner"], before["result"], before["error"]) == (
        "worker-1", {"status": 503}, "503: busy",
    )  # fmt: skip
    assert ISO.match(before["settled_at"]) and ISO.match(event["at"])
    assert event["at"] == p["updated_at"]
    # the next claim is attempt 2
    claim = run_cli("proposals", "claim-next", "--worker", "w2", "--db", db_url, "--json")
    assert (claim.json()["id"], claim.json()["lease"]["generation"]) == (pid, 2)
    # people get one sentence
    again = failed(store, "c2", ALICE)
    said = run_cli("proposals", "requeue", again[:12], *OPS, "--db", db_url)
    assert said.exit_code == 0 and said.stderr == ""
    assert said.stdout.strip() == (
        f"requeued: {again} is queued again; the next claim is attempt 2 (the failed attempt "
        "is kept in its history)."
    )


def test_requeue_refuses_what_did_not_fail(store: ActionProposalStore, db_url: str) -> None:
    queued = approved(store, "c1")
    r = run_cli("proposals", "requeue", queued, *OPS, "--db", db_url)
    assert (r.exit_code, r.stderr) == (1, "")
    assert r.stdout.strip() == (
        f"not_failed: {queued} is approved and queued: only a failed execution can be requeued."
    )
    doc = run_cli("proposals", "requeue", queued, *OPS, "--db", db_url, "--json")
    assert doc.exit_code == 1
    assert doc.json()["outcome"] == "not_failed"
    assert doc.json()["proposal"]["history"] == []
    missing = run_cli("proposals", "requeue", "ap_missing", *OPS, "--db", db_url, "--json")
    assert missing.exit_code == 1 and missing.json() == {"outcome": "not_found", "proposal": None}


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--by", "ops"), "Missing option '--reason'"),
        (("--reason", "why"), "Missing option '--by'"),
        (("--by", "ops", "--reason", "x" * 4097), "reason is 4097 UTF-16 code units long"),
        (("--by", "ops", "--reason", "  "), "reason must be a non-empty string"),
        (("--by", " ", "--reason", "why"), "must be a non-empty string"),
        (("--by", "x" * 256, "--reason", "why"), "the limit is 255"),
    ],
)
@pytest.mark.parametrize("command", ["requeue", "cancel"])
def test_who_and_why_are_required_and_bounded(
    store: ActionProposalStore, engine: Any, db_url: str, command: str, args: Any, says: str
) -> None:
    pid = failed(store, "c1") if command == "requeue" else approved(store, "c1")
    r = run_cli("proposals", command, pid, *args, "--db", db_url, "--json")
    assert says in one_error(r, 2)
    assert history(engine, pid) == []


def test_cancel_queued_work_and_the_refusals_that_say_why(
    store: ActionProposalStore, engine: Any, db_url: str
) -> None:
    queued = approved(store, "c1")
    r = run_cli("proposals", "cancel", queued[:12], "--by", "ops", "--reason", "withdrawn",
                "--db", db_url, "--json")  # fmt: skip
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert doc["outcome"] == "cancelled"
    assert ISO.match(doc["proposal"]["settled_at"])
    assert doc["proposal"]["execution_state"] == "cancelled"
    [event] = doc["proposal"]["history"]
    assert (event["kind"], event["by"], event["before"]["execution_state"]) == (
        "cancel", "ops", "queued",
    )  # fmt: skip
    again = run_cli("proposals", "cancel", queued, "--by", "x", "--reason", "y", "--db", db_url)
    assert again.exit_code == 0
    assert again.stdout.startswith(f"unchanged: {queued} was already cancelled (by ops at ")
    # nothing claims it
    none = run_cli("proposals", "claim-next", "--worker", "w", "--db", db_url, "--json")
    assert none.json()["outcome"] == "none"

    running = approved(store, "c2")
    lease = store.claim(running, ALICE, "worker-7", 600_000).lease
    assert lease is not None
    r = run_cli("proposals", "cancel", running, *OPS, "--db", db_url)
    assert (r.exit_code, r.stderr) == (1, "")
    assert r.stdout.startswith(f"running: {running} is running (worker worker-7, lease until ")
    assert "cannot be cancelled" in r.stdout

    stuck = approved(store, "c3")
    assert store.claim(stuck, ALICE, "worker-8", 1).lease is not None
    time.sleep(0.01)
    r = run_cli("proposals", "cancel", stuck, *OPS, "--db", db_url)
    assert r.exit_code == 1 and r.stdout.startswith(f"stuck: {stuck} is stuck (worker worker-8")
    assert "claim-next recovers it" in r.stdout

    pending = created(store, "c4")
    r = run_cli("proposals", "cancel", pending, *OPS, "--db", db_url)
    assert r.exit_code == 1
    assert r.stdout.strip() == (
        f"pending: {pending} is not decided yet: reject it instead "
        f"(agora proposals decide {pending[:12]} --reject --by WHO)."
    )
    done = failed(store, "c5")
    r = run_cli("proposals", "cancel", done, *OPS, "--db", db_url, "--json")
    assert r.exit_code == 1 and r.json()["outcome"] == "not_queued"
    missing = run_cli("proposals", "cancel", "ap_missing", *OPS, "--db", db_url, "--json")
    assert missing.exit_code == 1 and missing.json() == {"outcome": "not_found", "proposal": None}
    for pid in (running, stuck, pending, done):
        assert history(engine, pid) == []


def test_show_prints_the_history_for_people(store: ActionProposalStore, db_url: str) -> None:
    pid = failed(store, "c1")
    assert run_cli("proposals", "requeue", pid, *OPS, "--db", db_url).exit_code == 0
    scope = ("--actor", "alice", "--thread", "t1", "--no-tenant")
    shown = run_cli("proposals", "show", pid[:12], *scope, "--db", db_url)
    assert shown.exit_code == 0, shown.stderr
    assert "history (operator acts)" in shown.stdout
    row = next(line for line in shown.stdout.splitlines() if "requeued" in line)
    for part in ("ops-lead", "refunds-api is back", "failed, attempt 1: 503: busy"):
        assert part in row
    assert '"status": 503' in shown.stdout  # the result the requeue replaced


def test_the_inbox_shows_requeued_work_queued_when_it_was_requeued(
    store: ActionProposalStore, engine: Any, db_url: str
) -> None:
    from agora_cli.store._clock import ManualClock

    three_days_ago = ActionProposalStore(
        engine, ManualClock(int(time.time() * 1000) - 3 * 86_400_000)
    )
    pid = failed(three_days_ago, "c1")
    assert run_cli("proposals", "requeue", pid, *OPS, "--db", db_url).exit_code == 0
    queued = run_cli("proposals", "inbox", "--state", "queued", "--db", db_url)
    assert queued.exit_code == 0, queued.stderr
    [row] = [line for line in queued.stdout.splitlines() if pid[:12] in line]
    cells = [c.strip() for c in row.split("│")]
    assert cells[-2].endswith("ago") and "d " not in cells[-2], row  # seconds ago, not 3 days
    assert "3d" in cells[-4], row  # created three days ago
