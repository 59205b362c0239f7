"""`agora proposals …` through the real command line: cli.md's documents, exit codes, errors."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import no_data, run_agora

from agora_cli.store._proposals import proposal_id
from agora_cli.store._schema import thread

P_KEYS = [
    "id",
    "idempotency_key",
    "tenant_ref",
    "actor_ref",
    "thread_id",
    "run_id",
    "tool_call_id",
    "tool_name",
    "input",
    "card",
    "decision",
    "decided_by",
    "decided_at",
    "decision_note",
    "expires_at",
    "execution_state",
    "lease_owner",
    "lease_expires_at",
    "generation",
    "attempts",
    "result",
    "error",
    "settled_at",
    "created_at",
    "updated_at",
]
ISO = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$"
NO_TENANT = ("--actor", "alice", "--thread", "t1", "--no-tenant")
ACME = ("--actor", "alice", "--thread", "t2", "--tenant", "acme")
DOC = {
    "run_id": "run-1",
    "tool_call_id": "call-1",
    "tenant_ref": None,
    "actor_ref": "alice",
    "thread_id": "t1",
    "tool_name": "refund",
    "input": {"order": 7, "lines": [1, 2], "note": "☃"},
    "card": {"title": "Refund order 7"},
    "expires_at": "2099-01-01T00:00:00Z",
}


@pytest.fixture
def db(engine: Any, db_url: str) -> str:
    with engine.begin() as conn:
        for tid, tenant in (("t1", None), ("t2", "acme")):
            conn.execute(
                thread.insert().values(
                    id=tid,
                    actor_ref="alice",
                    tenant_ref=tenant,
                    title="",
                    created_at=0,
                    updated_at=0,
                )
            )
    return db_url


def one_error(result: Any, code: int) -> str:
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert no_data(result)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return str(lines[0])


def create(cli: Any, tmp_path: Path, db: str, **changes: Any) -> Any:
    path = tmp_path / "proposal.json"
    path.write_text(json.dumps({**DOC, **changes}))
    return cli("proposals", "create", "--file", str(path), "--db", db, "--json")


def created_id(cli: Any, tmp_path: Path, db: str, **changes: Any) -> str:
    result = create(cli, tmp_path, db, **changes)
    assert result.exit_code == 0, result.stderr
    return str(result.json()["proposal"]["id"])


def approve(cli: Any, db: str, pid: str) -> None:
    result = cli("proposals", "decide", pid, *NO_TENANT, "--approve", "--by", "bob", "--db", db)
    assert result.exit_code == 0, result.stderr


# --- create -----------------------------------------------------------------------------------


def test_create_documents_and_outcomes(cli: Any, db: str, tmp_path: Path) -> None:
    first = create(cli, tmp_path, db)
    assert first.exit_code == 0, first.stderr
    doc = first.json()
    assert list(doc) == ["outcome", "proposal"]
    assert doc["outcome"] == "created"
    p = doc["proposal"]
    assert list(p) == P_KEYS
    assert p["id"] == proposal_id("run-1", "call-1")
    assert p["idempotency_key"] == "run-1:call-1"
    assert p["input"] == DOC["input"] and p["card"] == DOC["card"]
    assert p["expires_at"] == "2099-01-01T00:00:00.000Z"
    assert (p["decision"], p["generation"], p["attempts"], p["result"]) == ("pending", 0, 0, None)
    for key in ("created_at", "updated_at"):
        assert re.match(ISO, p[key])

    again = create(cli, tmp_path, db)
    assert again.exit_code == 0
    assert again.json() == {"outcome": "existing", "proposal": p}

    conflict = create(cli, tmp_path, db, input={"order": 8})
    assert conflict.exit_code == 1
    assert conflict.json() == {"outcome": "conflict", "proposal": p}


def test_create_from_standard_input(cli: Any, db: str) -> None:
    doc = {**DOC, "id": "custom", "idempotency_key": "k-1"}
    result = cli("proposals", "create", "--file", "-", "--db", db, "--json", input=json.dumps(doc))
    assert result.exit_code == 0, result.stderr
    p = result.json()["proposal"]
    assert (p["id"], p["idempotency_key"]) == ("custom", "k-1")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"tenant_ref": null, "actor_ref": "alice"', "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        (json.dumps({k: v for k, v in DOC.items() if k != "tenant_ref"}), "lacks tenant_ref"),
        (json.dumps({**DOC, "colour": "red"}), "unknown key(s) in the proposal document: colour"),
        (json.dumps({**DOC, "expires_at": "next tuesday"}), "expires_at 'next tuesday'"),
        (json.dumps({**DOC, "expires_at": 1234}), "expires_at must be an ISO 8601"),
        (json.dumps({**DOC, "actor_ref": "a" * 254 + "😀"}), "actor_ref is 256 UTF-16"),
        (json.dumps({**DOC, "run_id": None}), "run_id and tool_call_id"),
    ],
)
def test_create_rejects_bad_documents_with_exit_2(
    cli: Any, db: str, engine: Any, text: str, message: str
) -> None:
    result = cli("proposals", "create", "--file", "-", "--db", db, "--json", input=text)
    assert message in one_error(result, 2)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM agent_action_proposal").scalar() == 0


def test_create_from_a_missing_file(cli: Any, db: str, tmp_path: Path) -> None:
    result = cli("proposals", "create", "--file", str(tmp_path / "nope.json"), "--db", db)
    assert "cannot read" in one_error(result, 2)


def test_create_in_a_thread_that_does_not_exist(cli: Any, db: str, tmp_path: Path) -> None:
    result = create(cli, tmp_path, db, thread_id="t-missing")
    assert "t-missing" in one_error(result, 1)


# --- scope, list and show ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "scope",
    [
        (),
        ("--actor", "alice", "--thread", "t1"),
        ("--actor", "alice", "--no-tenant"),
        ("--thread", "t1", "--no-tenant"),
        ("--actor", "alice", "--thread", "t1", "--tenant", "acme", "--no-tenant"),
    ],
)
def test_scoped_commands_need_the_whole_scope(cli: Any, db: str, scope: tuple[str, ...]) -> None:
    for command in (
        ("list",),
        ("show", "ap_x"),
        # no scope at all is an operator decision (issue 28): tests/cli/test_proposals_operator.py
        *([("decide", "ap_x", "--approve", "--by", "bob")] if scope else []),
        ("claim", "ap_x", "--worker", "w"),
    ):
        result = cli("proposals", *command, *scope, "--db", db, "--json")
        assert "--no-tenant" in one_error(result, 2)


def test_list_and_show(cli: Any, db: str, tmp_path: Path) -> None:
    first = created_id(cli, tmp_path, db)
    time.sleep(0.002)
    second = created_id(cli, tmp_path, db, tool_call_id="call-2")
    other = created_id(cli, tmp_path, db, tool_call_id="call-3", thread_id="t2", tenant_ref="acme")
    approve(cli, db, first)

    listed = cli("proposals", "list", *NO_TENANT, "--db", db, "--json")
    assert listed.exit_code == 0, listed.stderr
    doc = listed.json()
    assert list(doc) == ["proposals"]
    assert [p["id"] for p in doc["proposals"]] == [second, first]
    assert all(list(p) == P_KEYS for p in doc["proposals"])
    pending = cli("proposals", "list", *NO_TENANT, "--decision", "pending", "--db", db, "--json")
    assert [p["id"] for p in pending.json()["proposals"]] == [second]
    limited = cli("proposals", "list", *NO_TENANT, "--limit", "1", "--db", db, "--json")
    assert [p["id"] for p in limited.json()["proposals"]] == [second]
    acme = cli("proposals", "list", *ACME, "--db", db, "--json")
    assert [p["id"] for p in acme.json()["proposals"]] == [other]

    shown = cli("proposals", "show", first, *NO_TENANT, "--db", db, "--json")
    assert shown.exit_code == 0, shown.stderr
    p = shown.json()
    assert list(p) == [*P_KEYS, "history"]  # P and the operator's acts (issue 28): none here
    assert p.pop("history") == []
    assert (p["decision"], p["decided_by"], p["execution_state"]) == ("approved", "bob", "queued")
    assert p == next(x for x in doc["proposals"] if x["id"] == first)

    people = cli("proposals", "show", first, *NO_TENANT, "--db", db)
    assert people.exit_code == 0 and "Refund order 7" in people.stdout
    table = cli("proposals", "list", *NO_TENANT, "--db", db)
    assert table.exit_code == 0 and "refund" in table.stdout


@pytest.mark.parametrize(
    "scope",
    [
        ("--actor", "alice", "--thread", "t1", "--tenant", "acme"),
        ("--actor", "mallory", "--thread", "t1", "--no-tenant"),
        ("--actor", "alice", "--thread", "t2", "--no-tenant"),
    ],
)
def test_show_in_a_wrong_scope_is_exactly_not_found(
    cli: Any, db: str, tmp_path: Path, scope: tuple[str, ...]
) -> None:
    pid = created_id(cli, tmp_path, db)
    wrong = one_error(cli("proposals", "show", pid, *scope, "--db", db, "--json"), 1)
    missing = one_error(cli("proposals", "show", "ap_none", *scope, "--db", db, "--json"), 1)
    assert wrong == missing.replace("ap_none", pid)


@pytest.mark.parametrize("limit", ["0", "1001", "-5"])
def test_list_limit_out_of_range(cli: Any, db: str, limit: str) -> None:
    result = cli("proposals", "list", *NO_TENANT, "--limit", limit, "--db", db, "--json")
    assert "limit must be an integer from 1 to 1000" in one_error(result, 2)


# --- decide -----------------------------------------------------------------------------------


def decide(cli: Any, db: str, pid: str, flag: str, by: str = "bob", *extra: str) -> Any:
    return cli(
        "proposals", "decide", pid, *NO_TENANT, flag, "--by", by, *extra, "--db", db, "--json"
    )


def test_decide_outcomes_and_exit_codes(cli: Any, db: str, tmp_path: Path) -> None:
    pid = created_id(cli, tmp_path, db)
    applied = decide(cli, db, pid, "--approve", "bob", "--note", "checked")
    assert applied.exit_code == 0, applied.stderr
    doc = applied.json()
    assert list(doc) == ["outcome", "proposal"] and doc["outcome"] == "applied"
    p = doc["proposal"]
    assert list(p) == P_KEYS
    assert (p["decision"], p["decided_by"], p["decision_note"]) == ("approved", "bob", "checked")

    unchanged = decide(cli, db, pid, "--approve", "carol")
    assert unchanged.exit_code == 0
    assert unchanged.json() == {"outcome": "unchanged", "proposal": p}

    conflict = decide(cli, db, pid, "--reject", "carol")
    assert conflict.exit_code == 1
    assert conflict.json() == {"outcome": "conflict", "proposal": p}

    missing = decide(cli, db, "ap_none", "--approve")
    assert missing.exit_code == 1
    assert missing.json() == {"outcome": "not_found", "proposal": None}

    late = created_id(cli, tmp_path, db, tool_call_id="late", expires_at="2020-01-01T00:00:00")
    expired = decide(cli, db, late, "--approve")
    assert expired.exit_code == 1
    doc = expired.json()
    assert doc["outcome"] == "expired" and doc["proposal"]["decision"] == "expired"
    assert doc["proposal"]["decided_by"] is None


def test_decide_needs_one_decision_and_a_decider(cli: Any, db: str, tmp_path: Path) -> None:
    pid = created_id(cli, tmp_path, db)
    both = cli("proposals", "decide", pid, *NO_TENANT, "--approve", "--reject", "--by", "b")
    assert "--approve / --reject" in one_error(both, 2)
    neither = cli("proposals", "decide", pid, *NO_TENANT, "--by", "bob", "--db", db)
    assert "--approve / --reject" in one_error(neither, 2)
    nobody = cli("proposals", "decide", pid, *NO_TENANT, "--approve", "--db", db)
    assert "--by" in one_error(nobody, 2)
    shown = cli("proposals", "show", pid, *NO_TENANT, "--db", db, "--json")
    assert shown.json()["decision"] == "pending"


# --- leases -----------------------------------------------------------------------------------


def test_claim_renew_settle_and_the_token_is_shown_once(cli: Any, db: str, tmp_path: Path) -> None:
    pid = created_id(cli, tmp_path, db)
    early = cli("proposals", "claim", pid, *NO_TENANT, "--worker", "w1", "--db", db, "--json")
    assert early.exit_code == 1
    assert early.json() == {
        "outcome": "not_claimable",
        "lease": None,
        "idempotency_key": None,
        "input": None,
    }
    approve(cli, db, pid)
    claimed = cli(
        "proposals", "claim", pid, *NO_TENANT, "--worker", "w1", "--lease-ms", "60000",
        "--db", db, "--json",
    )  # fmt: skip
    assert claimed.exit_code == 0, claimed.stderr
    doc = claimed.json()
    assert list(doc) == ["outcome", "lease", "idempotency_key", "input"]
    assert doc["outcome"] == "claimed"
    assert (doc["idempotency_key"], doc["input"]) == ("run-1:call-1", DOC["input"])
    lease = doc["lease"]
    assert list(lease) == ["token", "generation", "expires_at"] and lease["generation"] == 1
    token = lease["token"]

    again = cli("proposals", "claim", pid, *NO_TENANT, "--worker", "w2", "--db", db, "--json")
    assert again.exit_code == 1 and again.json()["outcome"] == "not_claimable"
    missing = cli("proposals", "claim", "ap_none", *NO_TENANT, "--worker", "w2", "--db", db)
    assert missing.exit_code == 1

    renewed = cli(
        "proposals", "renew", pid, "--token", token, "--generation", "1", "--db", db, "--json"
    )
    assert renewed.exit_code == 0, renewed.stderr
    assert list(renewed.json()) == ["outcome", "expires_at"]
    assert renewed.json()["outcome"] == "renewed"
    lost = cli(
        "proposals", "renew", pid, "--token", token, "--generation", "2", "--db", db, "--json"
    )
    assert lost.exit_code == 1 and lost.json() == {"outcome": "lost", "expires_at": None}

    settled = cli(
        "proposals", "settle", pid, "--token", token, "--generation", "1", "--succeeded",
        "--result", '{"refund_id": "r-9", "amount": 12.5}', "--db", db, "--json",
    )  # fmt: skip
    assert settled.exit_code == 0, settled.stderr
    assert settled.json() == {"outcome": "settled"}
    twice = cli(
        "proposals", "settle", pid, "--token", token, "--generation", "1", "--failed",
        "--db", db, "--json",
    )  # fmt: skip
    assert twice.exit_code == 1 and twice.json() == {"outcome": "lost"}

    shown = cli("proposals", "show", pid, *NO_TENANT, "--db", db, "--json")
    p = shown.json()
    assert (p["execution_state"], p["result"], p["lease_owner"]) == (
        "succeeded",
        {"refund_id": "r-9", "amount": 12.5},
        "w1",
    )
    outputs = [
        shown.stdout,
        cli("proposals", "show", pid, *NO_TENANT, "--db", db).stdout,
        cli("proposals", "list", *NO_TENANT, "--db", db, "--json").stdout,
        cli("proposals", "list", *NO_TENANT, "--db", db).stdout,
        renewed.stdout,
        settled.stdout,
    ]
    assert all(token not in out for out in outputs)


def test_lease_expiry_and_the_token_from_the_environment(cli: Any, db: str, tmp_path: Path) -> None:
    pid = created_id(cli, tmp_path, db)
    approve(cli, db, pid)
    doc = cli(
        "proposals", "claim", pid, *NO_TENANT, "--worker", "w1", "--lease-ms", "1",
        "--db", db, "--json",
    ).json()  # fmt: skip
    time.sleep(0.01)
    env = {"AGORA_LEASE_TOKEN": doc["lease"]["token"]}
    lost = cli("proposals", "renew", pid, "--generation", "1", "--db", db, "--json", env=env)
    assert lost.exit_code == 1 and lost.json()["outcome"] == "lost"
    recovered = cli("proposals", "claim-next", "--worker", "w2", "--db", db, "--json")
    assert recovered.exit_code == 0
    assert recovered.json()["outcome"] == "recovered"
    assert recovered.json()["lease"]["generation"] == 2
    stale = cli(
        "proposals", "settle", pid, "--generation", "1", "--succeeded", "--db", db, "--json",
        env=env,
    )  # fmt: skip
    assert stale.exit_code == 1 and stale.json() == {"outcome": "lost"}


def test_claim_next_documents(cli: Any, db: str, tmp_path: Path) -> None:
    none = cli("proposals", "claim-next", "--worker", "w1", "--db", db, "--json")
    assert none.exit_code == 0
    assert none.json() == {
        "outcome": "none",
        "id": None,
        "lease": None,
        "idempotency_key": None,
        "input": None,
    }
    pid = created_id(cli, tmp_path, db, thread_id="t2", tenant_ref="acme")
    cli("proposals", "decide", pid, *ACME, "--approve", "--by", "bob", "--db", db)
    got = cli("proposals", "claim-next", "--worker", "w1", "--db", db, "--json")
    assert got.exit_code == 0
    doc = got.json()
    assert list(doc) == ["outcome", "id", "lease", "idempotency_key", "input"]
    assert (doc["outcome"], doc["id"], doc["input"]) == ("claimed", pid, DOC["input"])
    people = cli("proposals", "claim-next", "--worker", "w1", "--db", db)
    assert people.exit_code == 0 and "none" in people.stdout


def test_claim_next_with_a_limit_claims_a_batch(cli: Any, db: str, tmp_path: Path) -> None:
    empty = cli("proposals", "claim-next", "--worker", "w1", "--limit", "5", "--db", db, "--json")
    assert empty.exit_code == 0 and empty.json() == []
    ids = []
    for i in range(3):
        pid = created_id(cli, tmp_path, db, tool_call_id=f"batch-{i}", thread_id="t2",
                         tenant_ref="acme")  # fmt: skip
        cli("proposals", "decide", pid, *ACME, "--approve", "--by", "bob", "--db", db)
        ids.append(pid)
    two = cli("proposals", "claim-next", "--worker", "w1", "--limit", "2", "--db", db, "--json")
    assert two.exit_code == 0, two.stderr
    claims = two.json()
    assert [list(c) for c in claims] == [["outcome", "id", "lease", "idempotency_key", "input"]] * 2
    assert {c["outcome"] for c in claims} == {"claimed"} and {c["id"] for c in claims} < set(ids)
    assert len({c["lease"]["token"] for c in claims}) == 2  # each claim its own lease
    rest = cli("proposals", "claim-next", "--worker", "w2", "--limit", "10", "--db", db)
    assert rest.exit_code == 0, rest.stderr
    (last,) = set(ids) - {c["id"] for c in claims}
    assert last in rest.stdout and rest.stdout.count("lease token") == 1
    for c in claims:  # the batch's leases settle one by one, as a single claim's would
        settled = cli(
            "proposals", "settle", c["id"], "--token", c["lease"]["token"], "--generation",
            str(c["lease"]["generation"]), "--succeeded", "--db", db, "--json",
        )  # fmt: skip
        assert settled.json() == {"outcome": "settled"}
    for bad in ("0", "1001", "x"):
        wrong = cli("proposals", "claim-next", "--worker", "w", "--limit", bad, "--db", db)
        assert "--limit" in one_error(wrong, 2)


def test_settle_rejects_bad_arguments(cli: Any, db: str) -> None:
    common = ("--token", "t", "--generation", "1", "--db", db)
    both = cli("proposals", "settle", "ap_x", *common, "--succeeded", "--failed")
    assert "--succeeded / --failed" in one_error(both, 2)
    bad = cli("proposals", "settle", "ap_x", *common, "--succeeded", "--result", "{oops")
    assert "--result is not valid JSON" in one_error(bad, 2)
    zero = cli("proposals", "settle", "ap_x", "--token", "t", "--generation", "0", "--failed")
    assert "generation" in one_error(zero, 2)
    lease = cli("proposals", "claim-next", "--worker", "w", "--lease-ms", "0", "--db", db)
    assert "--lease-ms" in one_error(lease, 2)


def test_expire(cli: Any, db: str, tmp_path: Path) -> None:
    for i in range(3):
        created_id(cli, tmp_path, db, tool_call_id=f"old-{i}", expires_at=f"2020-01-01T00:00:0{i}Z")
    created_id(cli, tmp_path, db, tool_call_id="fresh")
    first = cli("proposals", "expire", "--limit", "2", "--db", db, "--json")
    assert first.exit_code == 0, first.stderr
    assert first.json() == {"expired": 2}
    assert cli("proposals", "expire", "--db", db, "--json").json() == {"expired": 1}
    assert cli("proposals", "expire", "--db", db, "--json").json() == {"expired": 0}
    assert "limit" in one_error(cli("proposals", "expire", "--limit", "1001", "--db", db), 2)


def test_every_proposals_command_has_help_with_an_example(cli: Any) -> None:
    for command in (
        "list",
        "show",
        "decide",
        "create",
        "claim",
        "claim-next",
        "renew",
        "settle",
        "expire",
    ):
        result = cli("proposals", command, "--help")
        assert result.exit_code == 0
        assert f"Example: agora proposals {command}" in result.stdout


@pytest.mark.slow
def test_claim_next_in_a_real_process(db: str, tmp_path: Path, cli: Any) -> None:
    pid = created_id(cli, tmp_path, db)
    approve(cli, db, pid)
    result = run_agora("proposals", "claim-next", "--worker", "proc", "--db", db, "--json")
    assert result.exit_code == 0, result.stderr
    assert result.json()["id"] == pid
    assert result.stderr == ""
