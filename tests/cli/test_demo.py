"""`agora demo`: provisions, writes a reproducible data set, refuses to clobber."""

from __future__ import annotations

import shlex
from typing import Any

from helpers import no_data
from sqlalchemy import select, text

from agora_cli.store._clock import ManualClock
from agora_cli.store._demo import write_demo_data
from agora_cli.store._engine import open_engine
from agora_cli.store._schema import AGENT_TABLES, action_proposal, token_usage


def _snapshot(engine: Any) -> dict[str, Any]:
    with engine.connect() as conn:
        usage = conn.execute(
            select(
                token_usage.c.thread_id,
                token_usage.c.actor_ref,
                token_usage.c.model_id,
                token_usage.c.input_tokens,
                token_usage.c.output_tokens,
                token_usage.c.cost_usd,
                token_usage.c.cost_source,
                token_usage.c.created_at,
            ).order_by(
                token_usage.c.created_at,
                token_usage.c.thread_id,
                token_usage.c.model_id,
                token_usage.c.actor_ref,
                token_usage.c.input_tokens,
            )
        ).all()
        decisions = conn.execute(
            select(
                action_proposal.c.id, action_proposal.c.decision, action_proposal.c.execution_state
            ).order_by(action_proposal.c.id)
        ).all()
        counts = {
            t: conn.execute(text(f"SELECT COUNT(*) FROM {t}")).scalar()
            for t in AGENT_TABLES.values()
        }
    return {
        "usage": [tuple(r) for r in usage],
        "decisions": [tuple(r) for r in decisions],
        "counts": counts,
    }


def test_demo_is_reproducible_and_complete(empty_url: str) -> None:
    clock = ManualClock(1_764_460_800_000 + 15 * 3_600_000)  # 2025-11-30 15:00 UTC
    engine = open_engine(empty_url)
    first = write_demo_data(engine, seed=11, days=30, clock=clock)
    snap = _snapshot(engine)
    again = write_demo_data(engine, seed=11, days=30, clock=clock, force=True)
    assert _snapshot(engine) == snap
    assert first == again
    sources = {row[6] for row in snap["usage"]}
    assert sources == {"estimate", "provider", None}  # priced, provider-reported, unpriced
    models = {row[2] for row in snap["usage"]}
    assert {"gpt-4o-mini-2024-07-18", "llama-3.3-70b-versatile"} <= models
    decisions = {(d, e) for _, d, e in snap["decisions"]}
    assert {
        ("pending", None),
        ("approved", "queued"),
        ("approved", "succeeded"),
        ("rejected", None),
        ("expired", None),
    } <= decisions
    assert all(
        snap["counts"][t] > 0
        for t in (
            "agent_thread",
            "agent_message",
            "agent_tool_call",
            "agent_token_usage",
            "agent_run",
            "agent_model_pricing",
            "agent_action_proposal",
            "agent_stream_frame",
        )
    )
    assert first.frame_runs.keys() == {"finished", "running", "expired"}
    days = {row[7] // 86_400_000 for row in snap["usage"]}
    assert len(days) == 30
    other_seed = write_demo_data(engine, seed=12, days=30, clock=clock, force=True)
    assert _snapshot(engine)["usage"] != snap["usage"] and other_seed.threads == first.threads
    engine.dispose()


def test_demo_cli_refuses_existing_data_unless_forced(db_url: str, cli: Any) -> None:
    first = cli("demo", "--db", db_url, "--json")
    assert first.exit_code == 0, first.stderr
    doc = first.json()
    assert doc["usage_rows"] > 100 and doc["threads"] == 13
    assert all(cmd.startswith("agora ") for cmd in doc["try_next"])
    refused = cli("demo", "--db", db_url)
    assert refused.exit_code == 1 and no_data(refused)
    assert refused.stderr.startswith("error: ") and "--force" in refused.stderr
    forced = cli("demo", "--db", db_url, "--force", "--json")
    assert forced.exit_code == 0 and forced.json()["usage_rows"] == doc["usage_rows"]
    assert cli("demo", "--db", db_url, "--days", "0").exit_code == 2


def test_demo_try_next_commands_all_run(db_url: str, cli: Any) -> None:
    doc = cli("demo", "--db", db_url, "--json").json()
    for command in doc["try_next"]:
        argv = shlex.split(command)[1:]
        if "--db" not in argv:
            argv += ["--db", db_url]
        result = cli(*argv)
        assert result.exit_code in (0, 1), f"{command}: {result.stderr}"
        assert not result.stderr.startswith("error: "), command


def test_demo_saves_a_budget_in_each_state_and_keeps_the_operators_own(
    db_url: str, cli: Any
) -> None:
    assert cli("demo", "--db", db_url, "--json").json()["budgets"] == 3
    report = cli("quota", "--all", "--db", db_url, "--json")
    assert report.exit_code == 1  # one is exhausted
    states = {(b["scope_kind"], b["period"]): b["state"] for b in report.json()["budgets"]}
    assert states == {
        ("global", "month"): "ok",
        ("tenant", "month"): "warning",
        ("actor", "day"): "exhausted",
    }
    mine = cli(
        "budgets",
        "set",
        "--tenant",
        "acme",
        "--period",
        "month",
        "--usd",
        "123",
        "--by",
        "ops",
        "--db",
        db_url,
    )
    assert mine.exit_code == 0, mine.stderr
    forced = cli("demo", "--db", db_url, "--force", "--json")
    assert forced.exit_code == 0 and forced.json()["budgets"] == 2
    listed = cli("budgets", "list", "--db", db_url, "--json").json()["budgets"]
    acme = [b for b in listed if b["scope_ref"] == "acme"]
    # the operator's update is kept; created_by still names who created it (issue 25)
    assert [(b["limit_usd"], b["created_by"], b["note"]) for b in acme] == [(123.0, "demo", None)]
    assert len(listed) == 3
