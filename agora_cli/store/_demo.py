"""A realistic, reproducible sample data set, written through the store's own public functions.

``write_demo_data`` provisions the database, then writes — for several actors and tenants over
``days`` UTC days ending today — threads and messages with tool calls and runs, a ledger over
several models (some priced by hand, one unpriced, one dated model id, one routed id with a
provider-reported cost), action proposals that are pending, approved (executed by a worker, still
queued, failed, and one whose worker died holding the lease), rejected and expired, and the stream
frames of a finished, a running and an expired run. Runs are a realistic mix — mostly completed,
some failed with the error that ended them, one still running (the running stream's) — and their
tool calls have durations and failures (``fetch_invoice`` is the flaky one). One thread is
soft-deleted and the nightly summaries' thread is transient, as the runtime leaves them. Every
timestamp comes from a ``ManualClock`` that the demo moves through the days, exactly as a
runtime's clock would have moved.

Same seed → the same ids, texts, token counts and costs (the agent's own tool calls and the run
outcomes draw from a second random stream, so adding them changed none of the ids an earlier demo
wrote); dates are relative to today (UTC), so the default reports (the current month to date)
always have data to show. Demo rows are recognisable by their ids (``demo-…``): ``--force``
deletes the previous demo data set (its threads, whose deletion cascades, its frames and its
prices) before writing, and leaves every other row alone.

One tenant (``globex``) has a data key, so its messages are stored sealed and ``threads show``
has both kinds to show. The key is wrapped by the KEK in ``AGORA_KEK``/``AGORA_KEK_FILE``; with
neither set, a SQLite demo makes its own KEK in a file next to the database (``agora.db.kek``,
mode 0600, reused by a later ``--force``), and a demo on a server database leaves the tenant
unsealed rather than invent a key nobody keeps (``demo_kek``).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, exists, select

from agora_cli.store import _schema as schema
from agora_cli.store._budgets import list_budgets, set_budget, sum_scope_usage
from agora_cli.store._clock import DAY_MS, Clock, ManualClock, SystemClock, day_start_ms
from agora_cli.store._engine import sqlite_path
from agora_cli.store._errors import DemoRefused, InvalidInput
from agora_cli.store._fold import day_number, mark_range_dirty
from agora_cli.store._frames import FrameWriter, close
from agora_cli.store._pricing import current_prices, set_price
from agora_cli.store._proposals import (
    NewProposal,
    Scope,
    claim_proposal,
    create_proposal,
    decide_proposal,
    expire_proposals,
    settle_proposal,
)
from agora_cli.store._provision import ensure_agent_tables
from agora_cli.store._sealing import (
    KEK_FILE_ENV,
    create_tenant_key,
    current_kek,
    find_active_key,
    generate_kek,
    using_kek,
)
from agora_cli.store._steps import (
    complete_tool_call,
    end_run,
    record_tool_call,
    set_tool_call_status,
    start_run,
)
from agora_cli.store._threads import (
    append_message,
    create_thread,
    delete_thread,
    soft_delete_thread,
)
from agora_cli.store._usage import record_usage
from agora_cli.store._windows import period_window

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine

    from agora_cli.store._sealing import Kek

__all__ = [
    "DEMO_PRICES",
    "DemoRefused",
    "DemoSummary",
    "demo_has_agent_data",
    "demo_kek",
    "write_demo_data",
]

PREFIX = "demo-"
SOFT_DELETED = 9  # the thread the runtime soft-deleted
RUNNING_RUN = f"{PREFIX}stream-running"  # the run still going: its frames are the running stream
REFUND_FAILURE = "refunds-api: 409 Conflict: order 12 was already refunded (rf_0007)"

# (model id as priced, input, output, cache read, cache write) in USD per 1M tokens.
DEMO_PRICES: tuple[tuple[str, float, float, float | None, float | None], ...] = (
    ("gpt-4o-mini", 0.15, 0.60, 0.075, None),
    ("claude-3-5-sonnet", 3.00, 15.00, 0.30, 3.75),
    ("gemini-2.0-flash", 0.10, 0.40, 0.025, None),
)
# The ids a provider reports in the ledger, and how often each is used.
LEDGER_MODELS: tuple[tuple[str, int], ...] = (
    ("gpt-4o-mini", 30),
    ("gpt-4o-mini-2024-07-18", 15),  # dated id: priced through the date rule
    ("claude-3-5-sonnet-20241022", 25),  # dated id of a priced model
    ("gemini-2.0-flash", 15),
    ("openrouter/anthropic/claude-3.5-haiku", 8),  # the provider reports the cost
    ("llama-3.3-70b-versatile", 7),  # unpriced on purpose: shows up as unpriced, never $0
)
SEALED_TENANT = "globex"  # the tenant whose messages the demo seals (given a KEK)
ACTORS: tuple[tuple[str, str | None], ...] = (
    ("alice", "acme"),
    ("bob", "acme"),
    ("carol", "globex"),
    ("dave", None),
)
TOPICS = (
    ("Refund for order 7", "refund_order", {"order_id": 7, "amount_usd": 42.5}),
    ("Quarterly report summary", "export_report", {"quarter": "Q3", "format": "pdf"}),
    ("Reset my password", "send_reset_link", {"channel": "email"}),
    ("Cancel subscription", "cancel_subscription", {"plan": "team"}),
    ("Invoice address change", "update_invoice_address", {"country": "DE"}),
    ("Shipping delay on order 12", "refund_order", {"order_id": 12, "amount_usd": 9.99}),
)
USER_LINES = (
    "Can you look into this for me?",
    "Thanks — and what happens next?",
    "Please go ahead.",
    "Could you double-check the numbers?",
)
# Tools the agent calls on its own (no approval): (name, share that fails, duration range in ms,
# the error a failure leaves). fetch_invoice is the flaky one.
CONSOLE_TOOLS: tuple[tuple[str, float, tuple[int, int], str], ...] = (
    ("lookup_order", 0.03, (40, 400), "orders-api: 504 Gateway Timeout after 10000 ms"),
    ("search_kb", 0.0, (120, 900), ""),
    (
        "fetch_invoice",
        0.35,
        (300, 4500),
        "billing-api: 503 Service Unavailable (retry budget spent)",
    ),
    ("send_email", 0.05, (200, 1200), "smtp: 421 4.7.0 Try again later"),
)
ASSISTANT_LINES = (
    "I looked it up: here is what I found.",
    "Done. I have prepared the action for your approval.",
    "The numbers add up; details below.",
    "I will need a person to approve that step.",
)


@dataclass
class DemoSummary:
    """What the demo wrote, and real ids to try commands with."""

    threads: int = 0
    messages: int = 0
    tool_calls: int = 0
    runs: int = 0
    usage_rows: int = 0
    priced_models: list[str] = field(default_factory=list)
    unpriced_models: list[str] = field(default_factory=list)
    proposals: dict[str, int] = field(default_factory=dict)
    frame_runs: dict[str, str] = field(default_factory=dict)
    sample_thread: str = ""
    sample_actor: str = ""
    sample_tenant: str | None = None
    sample_proposal: str = ""
    failed_runs: int = 0
    running_runs: int = 0
    budgets: int = 0
    first_day: str = ""
    last_day: str = ""
    sealed_tenant: str | None = None  # None: no KEK, nothing sealed
    sealed_thread: str = ""
    sealed_messages: int = 0


def demo_has_agent_data(conn: Connection) -> bool:
    """Whether any agent table the demo writes to already holds a row."""
    tables = (
        schema.thread,
        schema.token_usage,
        schema.model_pricing,
        schema.action_proposal,
        schema.stream_frame,
    )
    return any(conn.execute(select(exists().select_from(t))).scalar() for t in tables)


def _delete_previous_demo(engine: Engine) -> None:
    with engine.begin() as conn:
        ids = conn.execute(
            select(schema.thread.c.id).where(schema.thread.c.id.like(f"{PREFIX}%"))
        ).scalars()
        for thread_id in list(ids):
            delete_thread(conn, thread_id)
        runs = conn.execute(
            select(schema.stream_frame.c.run_id)
            .where(schema.stream_frame.c.run_id.like(f"{PREFIX}%"))
            .distinct()
        ).scalars()
        for run_id in list(runs):
            close(conn, run_id)
        conn.execute(delete(schema.model_pricing).where(schema.model_pricing.c.source == "demo"))
        demo_budget = schema.budget.c
        conn.execute(  # the demo's own, unless the operator has updated it since (note cleared)
            delete(schema.budget).where(
                demo_budget.created_by == DEMO_BUDGET_BY, demo_budget.note == "demo"
            )
        )
        conn.execute(delete(schema.tenant_key).where(schema.tenant_key.c.id.like(f"{PREFIX}%")))


def demo_kek(engine: Engine) -> tuple[Kek | None, str | None]:
    """The KEK the demo seals with, and the file it made or reused (``None`` when the KEK came
    from the environment, or when there is none: a server database without ``AGORA_KEK``)."""
    found = current_kek()
    if found is not None:
        return found, None
    database = engine.url.database
    if sqlite_path(engine.url) is None:  # no database file to keep a key file beside
        return None, None
    path = f"{database}.kek"
    if not os.path.exists(path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(generate_kek() + "\n")
    return current_kek({KEK_FILE_ENV: path}), path


def write_demo_data(
    engine: Engine,
    *,
    seed: int = 7,
    days: int = 30,
    force: bool = False,
    clock: Clock | None = None,
    kek: Kek | Callable[[], Kek | None] | None = None,
) -> DemoSummary:
    """Provision the database and write the demo data set; ``DemoRefused`` if data exists.

    Each thread is one transaction, so an interrupted demo leaves whole threads behind. With
    ``kek`` (or what the callable returns, asked only once the demo is sure to write), tenant
    ``globex`` gets a data key first and its messages are written sealed.
    """
    if not 1 <= days <= 365:
        raise InvalidInput(f"days must be between 1 and 365, not {days}", param="days")
    ensure_agent_tables(engine)
    with engine.connect() as conn:
        taken = demo_has_agent_data(conn)
        conn.rollback()
    if taken and not force:
        raise DemoRefused(
            "the database already holds agent data; `agora demo --force` replaces the previous "
            "demo data set (rows with demo- ids) and leaves everything else alone"
        )
    if taken:
        _delete_previous_demo(engine)
    if callable(kek):
        kek = kek()

    now = (clock or SystemClock()).now_ms()
    today = datetime.fromtimestamp(now / 1000, tz=UTC).date()
    first = day_start_ms(today) - (days - 1) * DAY_MS
    rng = random.Random(seed)
    demo_clock = ManualClock(first)
    summary = DemoSummary(
        first_day=_day(first), last_day=today.isoformat(), sample_actor=ACTORS[0][0]
    )

    # The demo writes into past days: any of them already folded must be refolded.
    with engine.begin() as conn:
        mark_range_dirty(conn, day_number(_date(first)), day_number(today))
    _write_prices(engine, demo_clock, summary)
    if kek is not None:
        with using_kek(kek), engine.begin() as conn:
            if find_active_key(conn, SEALED_TENANT) is None:
                create_tenant_key(
                    conn,
                    tenant=SEALED_TENANT,
                    key_id=f"{PREFIX}key-{SEALED_TENANT}",
                    clock=demo_clock,
                )
        summary.sealed_tenant = SEALED_TENANT
    # What the agent does on its own (tool calls, failed runs) draws from a stream of its own,
    # so that the main one — and every id drawn from it — is what it was before these existed.
    ops = random.Random(f"console-{seed}")
    if kek is not None:
        with using_kek(kek):
            _write_threads(engine, rng, ops, demo_clock, first, days, now, summary)
    else:
        _write_threads(engine, rng, ops, demo_clock, first, days, now, summary)
    _write_frames(engine, demo_clock, now, summary)
    _write_budgets(engine, now, summary)
    return summary


# (scope kind, scope ref, period, limit, used share aimed at): one budget in each state, the
# limits derived from what the demo wrote so the states hold whatever the day of the month.
DEMO_BUDGETS: tuple[tuple[str, str | None, str, str, float], ...] = (
    ("global", None, "month", "usd", 0.5),  # ok
    ("tenant", "acme", "month", "usd", 0.85),  # warning (warn at 80%)
    ("actor", "alice", "day", "tokens", 1.1),  # exhausted
)
DEMO_BUDGET_BY = "demo"


def _write_budgets(engine: Engine, now: int, summary: DemoSummary) -> None:
    """Saved budgets in each state; a budget the demo did not write is never changed."""
    with engine.begin() as conn:
        for kind, ref, period, unit, share in DEMO_BUDGETS:
            taken = list_budgets(conn, scope_kind=kind, scope_ref=ref, period=period)
            # The operator's own, or the demo's that the operator updated (an update keeps
            # created_by; `budgets set` without --note clears the demo's note).
            if taken and (taken[0].created_by != DEMO_BUDGET_BY or taken[0].note != "demo"):
                continue
            lo, hi = period_window(period, now)
            tokens, usd, _unpriced = sum_scope_usage(
                conn, scope_kind=kind, scope_ref=ref, from_ms=lo, to_ms=min(hi, now), raw=True
            )
            if unit == "usd":
                limits: dict[str, Any] = {"limit_usd": float(f"{usd / share:.3g}") or 1.0}
            else:
                limits = {"limit_tokens": int(tokens / share)}
            set_budget(
                conn,
                scope_kind=kind,
                scope_ref=ref,
                period=period,
                created_by=DEMO_BUDGET_BY,
                note="demo",
                clock=ManualClock(now),
                **limits,
            )
            summary.budgets += 1


def _date(ms: int) -> date:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).date()


def _day(ms: int) -> str:
    return _date(ms).isoformat()


def _write_prices(engine: Engine, clock: ManualClock, summary: DemoSummary) -> None:
    with engine.begin() as conn:
        # Never touch a price the demo did not write: an operator's `prices set` (or a seeded
        # catalog price) of a demo model stays current, and the demo ledger is priced by it.
        current = current_prices(conn, model_ids=[model for model, *_ in DEMO_PRICES])
        for model, inp, out, cache_read, cache_write in DEMO_PRICES:
            theirs = current.get(model)
            if theirs is not None and theirs.source != "demo":
                summary.priced_models.append(model)
                continue
            set_price(
                conn,
                model,
                input_per_1m=inp,
                output_per_1m=out,
                cache_read_per_1m=cache_read,
                cache_write_per_1m=cache_write,
                source="demo",
                clock=clock,
            )
            summary.priced_models.append(model)
    summary.unpriced_models = ["llama-3.3-70b-versatile"]


def _provider_cost(model: str, input_tokens: int, output_tokens: int) -> float | None:
    """The cost a routing provider reports with its usage (only the routed model has one)."""
    if not model.startswith("openrouter/"):
        return None
    return round((input_tokens * 0.8 + output_tokens * 4.0) / 1_000_000, 6)


def _pick_model(rng: random.Random) -> str:
    models, weights = zip(*LEDGER_MODELS, strict=True)
    return str(rng.choices(models, weights=weights)[0])


def _write_threads(
    engine: Engine,
    rng: random.Random,
    ops: random.Random,
    clock: ManualClock,
    first: int,
    days: int,
    now: int,
    summary: DemoSummary,
) -> None:
    n = 0
    decisions = ["approved-executed", "approved-queued", "rejected", "expired", "pending"]
    for actor, tenant in ACTORS:
        for _ in range(3):
            n += 1
            topic = TOPICS[(n - 1) % len(TOPICS)]
            # spread the threads over the window; the last ones land on today
            day = min(days - 1, (n * days) // 12 if n < 12 else days - 1)
            start = first + day * DAY_MS + rng.randrange(8, 18) * 3_600_000
            start = min(start, now - 3_600_000) if start > now else start
            clock.set(start)
            decision = (
                decisions[(n - 1) % len(decisions)]
                if n <= 10
                else {11: "approved-stuck", 12: "approved-failed"}[n]
            )
            with engine.begin() as conn:
                _write_thread(
                    conn, rng, ops, clock, n, actor, tenant, topic, decision, summary, now
                )
    with engine.begin() as conn:  # the runtime soft-deleted one conversation
        clock.set(now - 2 * 3_600_000)
        soft_delete_thread(conn, f"{PREFIX}thread-{SOFT_DELETED:02d}", clock=clock)
    # the ledger also covers the days without a thread: background summarisation turns
    _write_background_usage(engine, rng, clock, first, days, now, summary)


def _write_thread(
    conn: Connection,
    rng: random.Random,
    ops: random.Random,
    clock: ManualClock,
    n: int,
    actor: str,
    tenant: str | None,
    topic: tuple[str, str, dict[str, Any]],
    decision: str | None,
    summary: DemoSummary,
    now: int,
) -> None:
    title, tool, tool_input = topic
    thread_id = f"{PREFIX}thread-{n:02d}"
    create_thread(
        conn, actor_ref=actor, tenant_ref=tenant, title=title, thread_id=thread_id, clock=clock
    )
    summary.threads += 1
    turns = rng.randint(2, 4)
    for turn in range(1, turns + 1):
        run_id = f"{PREFIX}run-{n:02d}-{turn}"
        start_run(
            conn,
            thread_id=thread_id,
            actor_ref=actor,
            tenant_ref=tenant,
            run_id=run_id,
            agent_name="support",
            clock=clock,
        )
        summary.runs += 1
        append_message(
            conn,
            thread_id=thread_id,
            role="user",
            content=rng.choice(USER_LINES),
            run_id=run_id,
            message_id=f"{PREFIX}msg-{n:02d}-{turn}u",
            clock=clock,
        )
        clock.advance(rng.randrange(800, 4000))
        model = _pick_model(rng)
        inp, out = rng.randrange(400, 6000), rng.randrange(80, 900)
        cache_read = rng.randrange(0, inp // 2) if rng.random() < 0.4 else None
        cache_write = rng.randrange(0, inp // 4) if model.startswith("claude") else None
        if cache_read is not None and cache_write is not None:
            cache_write = min(cache_write, inp - cache_read)
        message_id = f"{PREFIX}msg-{n:02d}-{turn}a"
        with_tool = turn == turns and decision is not None
        plan = _plan_agent_tool_calls(ops, n, turn)
        # the assistant's message names the calls it makes, as the runtime writes it
        requested = [{"id": c[0], "name": c[1], "input": {"turn": turn}} for c in plan]
        if with_tool:
            requested.append({"id": f"{PREFIX}call-{n:02d}", "name": tool, "input": tool_input})
        append_message(
            conn,
            thread_id=thread_id,
            role="assistant",
            content=rng.choice(ASSISTANT_LINES),
            run_id=run_id,
            message_id=message_id,
            clock=clock,
            usage={"input_tokens": inp, "output_tokens": out},
            tool_calls=requested or None,
        )
        summary.messages += 2
        if tenant is not None and tenant == summary.sealed_tenant:
            summary.sealed_messages += 2
            summary.sealed_thread = summary.sealed_thread or thread_id
        failure = _write_agent_tool_calls(conn, clock, plan, turn, message_id, run_id, summary)
        if with_tool:
            call_id = f"{PREFIX}call-{n:02d}"
            record_tool_call(  # an action: it waits for a person, as the runtime records it
                conn,
                message_id=message_id,
                tool_call_id=call_id,
                tool_name=tool,
                tool_type="action",
                input=tool_input,
                status="pending_approval",
                run_id=run_id,
                clock=clock,
            )
            summary.tool_calls += 1
            state = _write_proposal(
                conn,
                clock,
                n,
                actor,
                tenant,
                thread_id,
                run_id,
                call_id,
                tool,
                tool_input,
                decision,
                summary,
                now,
            )
            if state in ("rejected", "expired"):
                # never ran: the runtime's word is `rejected` either way, the error says why
                set_tool_call_status(
                    conn,
                    call_id,
                    status="rejected",
                    error="rejected by ops-lead" if state == "rejected" else "the approval expired",
                )
            if decision in ("approved-executed", "approved-failed"):
                ok = decision == "approved-executed"
                complete_tool_call(
                    conn,
                    call_id,
                    status="executed" if ok else "failed",
                    output={"ok": True} if ok else None,
                    error=None if ok else REFUND_FAILURE,
                    executed_by_ref="worker-1",
                    clock=clock,
                )
        usage = record_usage(
            conn,
            thread_id=thread_id,
            actor_ref=actor,
            tenant_ref=tenant,
            model_id=model,
            purpose="turn",
            input_tokens=inp,
            output_tokens=out,
            cache_read_tokens=cache_read,
            cache_write_tokens=cache_write,
            provider_cost_usd=_provider_cost(model, inp, out),
            message_id=message_id,
            run_id=run_id,
            clock=clock,
        )
        summary.usage_rows += 1
        # a failed tool call ends most runs it happens in, and the provider fails a few more
        # (never the run that proposed an action)
        error = None
        if not with_tool and failure is not None and ops.random() < 0.9:
            error = f"step 2: {failure}\n  the model gave up after 3 attempts"
        elif not with_tool and ops.random() < 0.06:
            error = f"{model}: 529 overloaded, no retries left\n  request id req_{n:02d}{turn}"
        summary.failed_runs += int(error is not None)
        end_run(
            conn,
            run_id,
            status="completed" if error is None else "failed",
            error=error,
            step_count=1 + int(with_tool) + int(failure is not None),
            input_tokens=inp,
            output_tokens=out,
            cost_usd=usage.cost_usd,
            clock=clock,
        )
        clock.advance(rng.randrange(30_000, 600_000))
    if n == 1:
        summary.sample_thread, summary.sample_tenant = thread_id, tenant


def _plan_agent_tool_calls(
    ops: random.Random, n: int, turn: int
) -> list[tuple[str, str, int, str | None]]:
    """The read tools the agent runs by itself in a turn (0–2): ``(call id, tool, duration ms,
    error or None)``, drawn before the assistant's message is written so that it can name them."""
    plan = []
    for k in range(ops.choice((0, 1, 1, 2, 2))):
        name, fails, (low, high), error = ops.choice(CONSOLE_TOOLS)
        took = ops.randrange(low, high)
        failed = ops.random() < fails
        plan.append(
            (
                f"{PREFIX}call-{n:02d}-{turn}-{k + 1}",
                name,
                took,
                f"{name}: {error}" if failed else None,
            )
        )
    return plan


def _write_agent_tool_calls(
    conn: Connection,
    clock: ManualClock,
    plan: list[tuple[str, str, int, str | None]],
    turn: int,
    message_id: str,
    run_id: str,
    summary: DemoSummary,
) -> str | None:
    """Record the planned calls as the runtime does (``auto_executed``, then ``executed`` or
    ``failed``); the error of the last one that failed."""
    failure = None
    for call_id, name, took, error in plan:
        record_tool_call(
            conn,
            message_id=message_id,
            tool_call_id=call_id,
            tool_name=name,
            tool_type="read",
            input={"turn": turn},
            status="auto_executed",
            run_id=run_id,
            clock=clock,
        )
        clock.advance(took)
        complete_tool_call(
            conn,
            call_id,
            status="failed" if error else "executed",
            output=None if error else {"ok": True},
            error=error,
            executed_by_ref="runtime",
            clock=clock,
        )
        summary.tool_calls += 1
        if error:
            failure = error
    return failure


def _write_proposal(
    conn: Connection,
    clock: ManualClock,
    n: int,
    actor: str,
    tenant: str | None,
    thread_id: str,
    run_id: str,
    call_id: str,
    tool: str,
    tool_input: dict[str, Any],
    decision: str | None,
    summary: DemoSummary,
    now: int,
) -> str:
    scope = Scope(tenant_ref=tenant, actor_ref=actor, thread_id=thread_id)
    # pending ones stay decidable for a week after the demo ran; "expired" lapsed an hour in
    expires = clock.now_ms() + 3_600_000 if decision == "expired" else now + 7 * DAY_MS
    what = ", ".join(f"{k} {v}" for k, v in tool_input.items())
    card = {"title": tool.replace("_", " ").capitalize(), "summary": f"{actor} asked: {what}"}
    created = create_proposal(
        conn,
        NewProposal(
            scope=scope,
            tool_name=tool,
            input=tool_input,
            card=card,
            run_id=run_id,
            tool_call_id=call_id,
            expires_at=max(expires, clock.now_ms() + 1),
        ),
        clock=clock,
    )
    proposal = created.proposal
    assert proposal is not None
    state = "pending"
    if decision in (
        "approved-executed",
        "approved-queued",
        "approved-stuck",
        "approved-failed",
        "rejected",
    ):
        clock.advance(120_000)
        verdict = "rejected" if decision == "rejected" else "approved"
        decide_proposal(
            conn,
            proposal.id,
            scope=scope,
            decision=verdict,
            decided_by="ops-lead",
            note="checked against the order history",
            clock=clock,
        )
        state = "approved (queued)" if verdict == "approved" else verdict
    if decision in ("approved-executed", "approved-failed", "approved-stuck"):
        clock.advance(5_000)
        worker = "worker-2" if decision == "approved-stuck" else "worker-1"
        claim = claim_proposal(
            conn, proposal.id, scope=scope, worker_id=worker, lease_ms=30_000, clock=clock
        )
        assert claim.lease is not None
        clock.advance(1_500)
        if decision == "approved-stuck":  # the worker died holding the lease
            state = "approved (running, lease expired)"
        else:
            ok = decision == "approved-executed"
            settle_proposal(
                conn,
                proposal.id,
                token=claim.lease.token,
                generation=claim.lease.generation,
                outcome="succeeded" if ok else "failed",
                result={"refund_id": f"rf_{n:04d}"} if ok else None,
                error=None if ok else REFUND_FAILURE,
                clock=clock,
            )
            state = "approved (executed)" if ok else "approved (failed)"
    if decision == "expired" and expires < now:
        clock.advance(3_600_001)
        expire_proposals(conn, limit=10, clock=clock)
        state = "expired"
    summary.proposals[state] = summary.proposals.get(state, 0) + 1
    if n == 1:
        summary.sample_proposal = proposal.id
    return state


def _write_background_usage(
    engine: Engine,
    rng: random.Random,
    clock: ManualClock,
    first: int,
    days: int,
    now: int,
    summary: DemoSummary,
) -> None:
    with engine.begin() as conn:
        clock.set(first)
        thread_id = f"{PREFIX}thread-summaries"
        create_thread(
            conn,
            actor_ref="system",
            title="Nightly summaries",
            thread_id=thread_id,
            transient=True,
            clock=clock,
        )
        summary.threads += 1
        for day in range(days):
            for actor, tenant in ACTORS:
                at = first + day * DAY_MS + rng.randrange(1, 6) * 3_600_000
                clock.set(min(at, now - 1))  # today's rows exist whatever the hour
                inp, out = rng.randrange(1000, 9000), rng.randrange(100, 700)
                model = _pick_model(rng)
                record_usage(
                    conn,
                    thread_id=thread_id,
                    actor_ref=actor,
                    tenant_ref=tenant,
                    model_id=model,
                    purpose="summary",
                    input_tokens=inp,
                    output_tokens=out,
                    provider_cost_usd=_provider_cost(model, inp, out),
                    clock=clock,
                )
                summary.usage_rows += 1


def _write_frames(engine: Engine, clock: ManualClock, now: int, summary: DemoSummary) -> None:
    words = "Your refund for order 7 has been approved and will arrive in 3 days.".split(" ")
    plans = (
        ("finished", f"{PREFIX}stream-finished", now - 5 * 60_000, True),
        ("running", f"{PREFIX}stream-running", now - 20_000, False),
        ("expired", f"{PREFIX}stream-expired", now - 2 * DAY_MS, True),
    )
    for label, run_id, start, ended in plans:
        clock.set(start)
        if run_id == RUNNING_RUN:
            _write_running_run(engine, clock, summary)
        writer = FrameWriter(engine, run_id, clock=clock, autoflush=False, auto_purge=False)
        writer.append({"type": "start", "run_id": run_id})
        writer.append({"type": "reasoning-delta", "delta": "Checking the order history. "})
        clock.advance(400)
        writer.append({"type": "tool-input-delta", "tool_call_id": "c1", "delta": '{"order_id":'})
        writer.append({"type": "tool-input-delta", "tool_call_id": "c1", "delta": " 7}"})
        writer.append({"type": "tool-result", "tool_call_id": "c1", "result": {"status": "ok"}})
        count = len(words) if ended else len(words) // 2
        for word in words[:count]:
            writer.append({"type": "text-delta", "delta": word + " "})
            clock.advance(120)  # past flush_ms: one row every few words
        if ended:
            writer.append({"type": "finish", "reason": "stop"})
            writer.end()
        else:
            writer.flush()
        summary.frame_runs[label] = run_id


def _write_running_run(engine: Engine, clock: ManualClock, summary: DemoSummary) -> None:
    """The run still going as the demo ends: a tool call of it is still executing."""
    thread_id = f"{PREFIX}thread-12"
    with engine.begin() as conn:
        start_run(
            conn,
            thread_id=thread_id,
            actor_ref="dave",
            run_id=RUNNING_RUN,
            agent_name="support",
            clock=clock,
        )
        message = append_message(
            conn,
            thread_id=thread_id,
            role="user",
            content="Any news on the refund?",
            run_id=RUNNING_RUN,
            message_id=f"{PREFIX}msg-12-live",
            clock=clock,
        )
        record_tool_call(
            conn,
            message_id=message.id,
            tool_call_id=f"{PREFIX}call-12-live",
            tool_name="lookup_order",
            tool_type="read",
            input={"order_id": 12},
            status="auto_executed",  # recorded, still executing
            run_id=RUNNING_RUN,
            clock=clock,
        )
    summary.runs += 1
    summary.running_runs += 1
    summary.messages += 1
    summary.tool_calls += 1
