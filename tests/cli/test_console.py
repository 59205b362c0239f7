"""The operator's console through the real Typer app, on every dialect: the proposals inbox,
runs, tool health, short ids, threads as the runtime left them, CSV and JSON everywhere."""

from __future__ import annotations

import csv
import io
import re
import shlex
from typing import Any

import pytest
from helpers import CliResult, insert_legacy, no_data
from typer.main import get_command

from agora_cli.cli import app
from agora_cli.store._clock import ManualClock
from agora_cli.store._proposals import NewProposal, Scope, create_proposal
from agora_cli.store._threads import create_thread

AMBIGUOUS_RUN = "demo-run-0"  # demo-run-01-1, demo-run-01-2, …


@pytest.fixture
def demo(db_url: str, cli: Any) -> str:
    result = cli("demo", "--db", db_url, "--json")
    assert result.exit_code == 0, result.stderr
    return db_url


def one_line_error(result: CliResult, code: int = 2) -> str:
    """The command failed with ``code``, one `error:` line on stderr and no data on stdout."""
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert no_data(result)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def rows_of(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


# --- help examples, verbatim ------------------------------------------------------------------


def _help_text(path: tuple[str, ...]) -> str:
    command: Any = get_command(app)
    for name in path:
        command = command.commands[name]
    return str(command.help)


def _examples(path: tuple[str, ...]) -> list[list[str]]:
    """The commands of a help's `Example:` paragraph (lines joined; `&&` splits commands)."""
    text = _help_text(path)
    paragraph = text[text.index("Example: ") + len("Example: ") :].split("\n\n")[0]
    joined = " ".join(paragraph.split())
    return [shlex.split(part)[1:] for part in joined.split("&&")]


# Read-only ones first; then those that change what a later one reads.
EXAMPLES = [
    ("proposals", "inbox"),
    ("proposals", "list"),
    ("proposals", "show"),
    ("runs",),
    ("runs", "list"),
    ("runs", "show"),
    ("tools",),
    ("tools", "stats"),
    ("threads",),
    ("threads", "list"),
    ("threads", "show"),
    ("proposals", "decide"),
    ("proposals", "claim"),
    ("proposals", "claim-next"),
    ("proposals", "expire"),
    ("threads", "delete"),
]


def test_help_examples_work_verbatim_after_the_demo(demo: str, cli: Any) -> None:
    for path in EXAMPLES:
        for argv in _examples(path):
            assert argv[: len(path)] == list(path[: len(argv)]) or len(path) == 1, argv
            result = cli(*argv, "--db", demo)
            assert result.exit_code == 0, f"agora {' '.join(argv)}: {result.stderr}"
    decided = cli(*_examples(("proposals", "decide"))[0], "--db", demo)
    assert decided.exit_code == 0 and decided.stdout.startswith("unchanged: ap_91583097")


# --- the inbox --------------------------------------------------------------------------------

ITEM_KEYS = {
    "id",
    "tenant_ref",
    "actor_ref",
    "thread_id",
    "run_id",
    "tool_name",
    "decision",
    "execution_state",
    "created_at",
    "expires_at",
    "decided_by",
    "decided_at",
    "lease_owner",
    "lease_expires_at",
    "attempts",
    "settled_at",
    "error",
    "stuck",
    "kind",
}


def test_the_inbox_finds_what_waits_across_scopes(demo: str, cli: Any) -> None:
    r = cli("proposals", "inbox", "--db", demo, "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert set(doc) == {"state", "now", "proposals", "more", "past_expiry", "legacy"}
    assert (doc["state"], doc["more"], doc["past_expiry"], doc["legacy"]) == (
        "pending",
        False,
        0,
        0,
    )
    assert all(set(p) == ITEM_KEYS for p in doc["proposals"])
    # the demo's approvals are agora's proposals: their tool calls are not listed twice
    assert {p["kind"] for p in doc["proposals"]} == {"proposal"}
    assert [(p["actor_ref"], p["thread_id"]) for p in doc["proposals"]] == [
        ("dave", "demo-thread-10"),
        ("bob", "demo-thread-05"),
    ]
    assert [p["expires_at"] for p in doc["proposals"]] == sorted(
        p["expires_at"] for p in doc["proposals"]
    )
    full = doc["proposals"][0]["id"]
    table = cli("proposals", "inbox", "--db", demo)
    assert table.exit_code == 0 and full[:12] in table.stdout and full not in table.stdout
    assert "demo-thread-10" in table.stdout and "cancel_subscription" in table.stdout
    lines = rows_of(cli("proposals", "inbox", "--db", demo, "--csv").stdout)
    assert [row["id"] for row in lines] == [p["id"] for p in doc["proposals"]]
    assert lines[0]["stuck"] == "false" and set(lines[0]) == ITEM_KEYS
    only_acme = cli("proposals", "inbox", "--tenant", "acme", "--db", demo, "--json").json()
    assert [p["thread_id"] for p in only_acme["proposals"]] == ["demo-thread-05"]
    within = cli("proposals", "inbox", "--expiring-within", "1h", "--db", demo, "--json").json()
    assert within["proposals"] == []
    week = cli(
        "proposals", "inbox", "--expiring-within", "8d", "--tool", "cancel_subscription",
        "--db", demo, "--json",
    )  # fmt: skip
    assert [p["tool_name"] for p in week.json()["proposals"]] == ["cancel_subscription"]


def test_a_stuck_running_lease_is_flagged_in_the_inbox(demo: str, cli: Any) -> None:
    running = cli("proposals", "inbox", "--state", "running", "--db", demo, "--json").json()
    [stuck] = running["proposals"]
    assert (stuck["thread_id"], stuck["lease_owner"], stuck["stuck"]) == (
        "demo-thread-11",
        "worker-2",
        True,
    )
    table = cli("proposals", "inbox", "--state", "running", "--db", demo)
    assert "STUCK: lease ran out" in table.stdout
    failed = cli("proposals", "inbox", "--state", "failed", "--db", demo, "--json").json()
    assert [p["thread_id"] for p in failed["proposals"]] == ["demo-thread-12"]
    assert "409 Conflict" in failed["proposals"][0]["error"]
    queued = cli("proposals", "inbox", "--state", "queued", "--db", demo, "--json").json()
    assert [p["thread_id"] for p in queued["proposals"]] == ["demo-thread-02", "demo-thread-07"]


def test_the_inbox_counts_legacy_rows_and_points_to_the_backfill(
    db_url: str, engine: Any, cli: Any
) -> None:
    insert_legacy(engine, 5)
    r = cli("proposals", "inbox", "--db", db_url)
    assert r.exit_code == 0 and "nothing waiting for a decision" in r.stdout
    assert "5 proposal(s) written before the discovery index" in " ".join(r.stderr.split())
    assert "agora db backfill" in r.stderr
    assert cli("proposals", "inbox", "--db", db_url, "--json").json()["legacy"] == 5


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--state", "stuck"], "--state"),
        (["--expiring-within", "1y"], "--expiring-within"),
        (["--expiring-within", "0s"], "--expiring-within"),
        (["--expiring-within", "400d"], "--expiring-within"),
        (["--expiring-within", "1h", "--state", "queued"], "--expiring-within"),
        (["--limit", "0"], "--limit"),
        (["--limit", "1001"], "--limit"),
        (["--json", "--csv"], "--csv"),
    ],
)
def test_bad_inbox_input_is_one_line_exit_2(
    db_url: str, cli: Any, args: list[str], flag: str
) -> None:
    line = one_line_error(cli("proposals", "inbox", *args, "--db", db_url))
    assert flag in line or flag.lstrip("-") in line


# --- runs -------------------------------------------------------------------------------------

RUN_KEYS = {
    "id",
    "thread_id",
    "agent_name",
    "actor_ref",
    "tenant_ref",
    "status",
    "started_at",
    "finished_at",
    "duration_ms",
    "step_count",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "unpriced_turns",
    "recorded_cost_usd",
    "error",
    "durable",
}


def test_runs_list_pages_with_the_cursor_it_prints(demo: str, cli: Any) -> None:
    everything = cli("runs", "list", "--limit", "1000", "--db", demo, "--json").json()
    assert set(everything) == {"runs", "next"} and everything["next"] is None
    ids = [r["id"] for r in everything["runs"]]
    assert all(set(r) == RUN_KEYS for r in everything["runs"])
    assert ids[0] == "demo-stream-running" and everything["runs"][0]["duration_ms"] is None
    seen: list[str] = []
    cursor: str | None = None
    while True:
        extra = ["--after", cursor] if cursor else []
        page = cli("runs", "list", "--limit", "7", *extra, "--db", demo, "--json").json()
        seen += [r["id"] for r in page["runs"]]
        cursor = page["next"]
        if cursor is None:
            break
    assert seen == ids
    table = cli("runs", "list", "--limit", "5", "--db", demo)
    assert "more: add --after " in table.stderr and "running" in table.stdout
    failed = cli("runs", "list", "--status", "failed", "--db", demo, "--csv")
    lines = rows_of(failed.stdout)
    assert lines and all(row["status"] == "failed" and row["error"] for row in lines)
    assert set(lines[0]) == RUN_KEYS


def test_runs_show_and_its_short_id(demo: str, cli: Any) -> None:
    r = cli("runs", "show", "demo-stream-running", "--db", demo, "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert set(doc) == {
        "run",
        "messages",
        "messages_total",
        "tool_calls",
        "tool_calls_total",
        "usage",
        "usage_total",
        "proposals",
        "frames",
    }
    assert doc["run"]["status"] == "running"
    assert [c["status"] for c in doc["tool_calls"]] == ["auto_executed"]  # the runtime's word
    assert [m["content"] for m in doc["messages"]] == ["Any news on the refund?"]
    assert doc["frames"]["buffered"] and doc["frames"]["ended"] is False
    failed = cli("runs", "show", "demo-run-03-1", "--db", demo)
    assert failed.exit_code == 0 and "504 Gateway Timeout" in failed.stdout
    ambiguous = one_line_error(cli("runs", "show", AMBIGUOUS_RUN, "--db", demo))
    assert "ambiguous" in ambiguous and "demo-run-01-1" in ambiguous
    missing = cli("runs", "show", "demo-run-99-9", "--db", demo, "--json")
    assert missing.exit_code == 1 and no_data(missing)
    assert missing.json()["error"]["kind"] == "not_found"


@pytest.mark.parametrize(
    "args",
    [
        ["--after", "not-a-cursor"],
        ["--limit", "0"],
        ["--limit", "1001"],
        ["--from", "2026-02-30"],
        ["--from", "2026-11-02", "--to", "2026-11-01"],
        ["--json", "--csv"],
    ],
)
def test_bad_runs_input_is_one_line_exit_2(db_url: str, cli: Any, args: list[str]) -> None:
    line = one_line_error(cli("runs", "list", *args, "--db", db_url))
    assert args[0] in line or "--csv" in line


# --- tools stats ------------------------------------------------------------------------------


def test_tools_stats_json_and_csv(demo: str, cli: Any) -> None:
    r = cli("tools", "stats", "--from", "2000-01-01", "--db", demo, "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert set(doc) == {"from", "to", "tenant", "tools", "agents"} | {
        "from_at",
        "to_at",
        "tz",
        "window",
        "sort",
    }
    by_name = {t["tool_name"]: t for t in doc["tools"]}
    flaky = by_name["fetch_invoice"]
    assert flaky["failed"] > 0 and flaky["last_failure"]["error"].startswith("fetch_invoice:")
    assert flaky["p50_ms"] <= flaky["p95_ms"]
    assert set(flaky) == {
        "tool_name",
        "tool_type",
        "calls",
        "succeeded",
        "failed",
        "rejected",
        "pending_approval",
        "running",
        "other",
        "timed",
        "derived",
        "settled",
        "fail_rate",
        "p50_ms",
        "p95_ms",
        "last_failure",
    }
    assert by_name["lookup_order"]["running"] >= 1  # the running run's call, still executing
    for t in doc["tools"]:
        outcomes = ("succeeded", "failed", "rejected", "pending_approval", "running", "other")
        assert t["calls"] == sum(t[k] for k in outcomes)
    [support] = doc["agents"]
    assert (support["agent_name"], support["running"]) == ("support", 1)
    assert support["failed"] >= 1 and support["median_ms"] > 0
    lines = rows_of(cli("tools", "stats", "--from", "2000-01-01", "--db", demo, "--csv").stdout)
    assert {row["kind"] for row in lines} == {"tool", "agent"}
    assert sum(row["kind"] == "tool" for row in lines) == len(doc["tools"])
    acme = cli("tools", "stats", "--from", "2000-01-01", "--tenant", "acme", "--db", demo, "--json")
    assert sum(t["calls"] for t in acme.json()["tools"]) < sum(t["calls"] for t in doc["tools"])
    table = cli("tools", "stats", "--from", "2000-01-01", "--db", demo)
    assert "fetch_invoice" in table.stdout and "Run reliability by agent" in table.stdout


@pytest.mark.parametrize(
    "args", [["--from", "tomorrow"], ["--from", "2026-11-02", "--to", "2026-11-01"]]
)
def test_bad_tools_input_is_one_line_exit_2(db_url: str, cli: Any, args: list[str]) -> None:
    one_line_error(cli("tools", "stats", *args, "--db", db_url))


# --- short ids --------------------------------------------------------------------------------


def test_a_short_id_collision_is_exit_2_listing_both(engine: Any, db_url: str, cli: Any) -> None:
    clock = ManualClock(1_767_225_600_000)
    scope = Scope(None, "alice", "3f2c9a1e-0001")
    with engine.begin() as conn:
        for thread_id in ("3f2c9a1e-0001", "3f2c9a1e-0002"):
            create_thread(conn, actor_ref="alice", thread_id=thread_id, clock=clock)
        for pid in ("ap_5e27aaaa1111", "ap_5e27aaaa2222"):
            create_proposal(
                conn, NewProposal(scope=scope, tool_name="refund", input={}, id=pid), clock=clock
            )
    line = one_line_error(cli("threads", "show", "3f2c9a1e", "--db", db_url))
    assert "3f2c9a1e-0001" in line and "3f2c9a1e-0002" in line
    as_json = cli("threads", "delete", "3f2c9a1e", "--yes", "--db", db_url, "--json")
    assert as_json.exit_code == 2 and as_json.json()["error"]["kind"] == "ambiguous_id"
    scoped = ["--actor", "alice", "--thread", "3f2c9a1e-0001", "--no-tenant", "--db", db_url]
    line = one_line_error(cli("proposals", "show", "ap_5e27aaaa", *scoped))
    assert "ap_5e27aaaa1111" in line and "ap_5e27aaaa2222" in line
    decided = cli("proposals", "decide", "ap_5e27aaaa2", *scoped, "--approve", "--by", "ops")
    assert decided.exit_code == 0 and decided.stdout.startswith("applied: ap_5e27aaaa2222")
    shown = cli("threads", "show", "3f2c9a1e-0002", "--db", db_url, "--json")
    assert shown.json()["thread"]["id"] == "3f2c9a1e-0002"
    # a prefix never widens the scope: in another thread's scope it names nothing
    other = ["--actor", "alice", "--thread", "3f2c9a1e-0002", "--no-tenant", "--db", db_url]
    missing = cli("proposals", "show", "ap_5e27aaaa1", *other)
    assert missing.exit_code == 1 and "in that scope" in missing.stderr
    not_found = cli("proposals", "decide", "ap_5e27aaaa1", *other, "--reject", "--by", "x")
    assert not_found.exit_code == 1 and not_found.stdout.startswith("not_found")


# --- threads as the runtime left them -------------------------------------------------------


def test_soft_deleted_and_transient_threads_hidden_and_shown(demo: str, cli: Any) -> None:
    default = cli("threads", "list", "--db", demo, "--json").json()["threads"]
    ids = [t["id"] for t in default]
    assert "demo-thread-09" not in ids and "demo-thread-summaries" not in ids
    assert all(t["deleted_at"] is None and t["transient"] is False for t in default)
    assert all(set(t["usage"]) >= {"turns", "input_tokens", "cost_usd"} for t in default)
    both = cli(
        "threads", "list", "--include-deleted", "--include-transient", "--db", demo, "--json"
    ).json()["threads"]
    marked = {t["id"]: (t["deleted_at"] is not None, t["transient"]) for t in both}
    assert marked["demo-thread-09"] == (True, False)
    assert marked["demo-thread-summaries"] == (False, True)
    table = cli(
        "threads", "list", "--include-deleted", "--include-transient", "--db", demo,
        env={"COLUMNS": "200"},  # the titles and their marks on one line each
    )  # fmt: skip
    assert re.search(r"\[deleted \d{4}-\d\d-\d\d\]", table.stdout) and "[transient]" in table.stdout
    lines = rows_of(cli("threads", "list", "--include-transient", "--db", demo, "--csv").stdout)
    summaries = next(row for row in lines if row["id"] == "demo-thread-summaries")
    assert summaries["transient"] == "true" and int(summaries["turns"]) > 0
    shown = cli("threads", "show", "demo-thread-09", "--db", demo, "--json").json()
    assert shown["thread"]["deleted_at"] is not None


def test_threads_delete_says_what_the_ledger_loses(demo: str, cli: Any) -> None:
    listed = cli("threads", "list", "--actor", "alice", "--db", demo, "--json").json()["threads"]
    usage = next(t["usage"] for t in listed if t["id"] == "demo-thread-01")
    r = cli("threads", "delete", "demo-thread-01", "--yes", "--db", demo, "--json")
    assert r.exit_code == 0, r.stderr
    assert r.json()["ledger"] == usage and usage["turns"] > 0
    assert r.json()["deleted"]["agent_token_usage"] == usage["turns"]


# --- CSV on the other lists -------------------------------------------------------------------


def test_proposals_list_and_quota_take_csv(demo: str, cli: Any) -> None:
    scope = ["--actor", "bob", "--thread", "demo-thread-05", "--tenant", "acme"]
    lines = rows_of(cli("proposals", "list", *scope, "--db", demo, "--csv").stdout)
    assert [row["decision"] for row in lines] == ["pending"] and lines[0]["id"].startswith("ap_")
    quota = cli("quota", "--actor", "alice", "--month-tokens", "1", "--db", demo, "--csv")
    assert quota.exit_code == 1  # exhausted, as with a table
    windows = rows_of(quota.stdout)
    assert [w["period"] for w in windows] == ["day", "month"]
    assert windows[1]["state"] == "exhausted" and windows[1]["limit_tokens"] == "1"
    one_line_error(cli("quota", "--actor", "alice", "--db", demo, "--csv", "--json"))
    one_line_error(cli("proposals", "list", *scope, "--db", demo, "--csv", "--json"))
