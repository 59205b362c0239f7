"""What `agora proposals` shows: the JSON documents of cli.md, the tables and the inbox's notes.

The commands (cli/proposals.py) parse, call the store and hand the result here; nothing here
touches a database.
"""

from __future__ import annotations

# internal on purpose: the operator's commands import the store's private modules (cli/__init__.py)
import json
from typing import TYPE_CHECKING, Any

from agora_cli.cli.output import (
    Col,
    first_line,
    out_console,
    relative_text,
    render_table,
    safe_text,
    short_ids,
    table_time,
)
from agora_cli.store._clock import iso_ms

if TYPE_CHECKING:
    from agora_cli.store._proposals import (
        ClaimResult,
        Inbox,
        Proposal,
        ProposalEvent,
        ToolCallApproval,
    )


def proposal_document(p: Proposal) -> dict[str, Any]:
    """The ``P`` document of cli.md: JSON values for input/card/result, ISO times, no token."""

    return {
        "id": p.id,
        "idempotency_key": p.idempotency_key,
        "tenant_ref": p.tenant_ref,
        "actor_ref": p.actor_ref,
        "thread_id": p.thread_id,
        "run_id": p.run_id,
        "tool_call_id": p.tool_call_id,
        "tool_name": p.tool_name,
        "input": p.input_value,
        "card": p.card_value,
        "decision": p.decision,
        "decided_by": p.decided_by,
        "decided_at": iso_ms(p.decided_at),
        "decision_note": p.decision_note,
        "expires_at": iso_ms(p.expires_at),
        "execution_state": p.execution_state,
        "lease_owner": p.lease_owner,
        "lease_expires_at": iso_ms(p.lease_expires_at),
        "generation": p.generation,
        "attempts": p.attempts,
        "result": p.result_value,
        "error": p.error,
        "settled_at": iso_ms(p.settled_at),
        "created_at": iso_ms(p.created_at),
        "updated_at": iso_ms(p.updated_at),
    }


def claim_document(result: ClaimResult, *, with_id: bool = False) -> dict[str, Any]:

    work, lease = result.work, result.lease
    doc: dict[str, Any] = {"outcome": result.outcome}
    if with_id:
        doc["id"] = work.id if work else None
    doc["lease"] = (
        None
        if lease is None
        else {
            "token": lease.token,
            "generation": lease.generation,
            "expires_at": iso_ms(lease.expires_at),
        }
    )
    doc["idempotency_key"] = work.idempotency_key if work else None
    doc["input"] = work.input_value if work else None
    return doc


def pretty_json(value: Any) -> str:
    """A JSON value for people: indented, with every control character shown as an escape."""
    return safe_text(json.dumps(value, indent=2, ensure_ascii=False), body=True)


def event_document(e: ProposalEvent) -> dict[str, Any]:
    """One operator act of a proposal's ``history``: who (``by``), when (``at``, the store's
    clock), why; for a requeue or a cancel, ``before``: the execution as the act found it."""
    before = None
    if e.kind != "operator_decision":
        before = {
            "execution_state": e.prior_execution_state,
            "attempts": e.prior_attempts,
            "generation": e.prior_generation,
            "lease_owner": e.prior_lease_owner,
            "result": e.prior_result_value,
            "error": e.prior_error,
            "settled_at": iso_ms(e.prior_settled_at),
            "outcome_delivered_at": iso_ms(e.prior_outcome_delivered_at),
            "outcome_message_id": e.prior_outcome_message_id,
        }
    return {
        "id": e.id,
        "kind": e.kind,
        "by": e.acted_by,
        "at": iso_ms(e.created_at),
        "reason": e.reason,
        "decision": e.decision,
        "before": before,
    }


def shown_document(p: Proposal, events: list[ProposalEvent]) -> dict[str, Any]:
    """What ``proposals show --json`` prints: ``P`` and its ``history`` (the operator's acts,
    oldest first; ``[]`` when there are none)."""
    return {**proposal_document(p), "history": [event_document(e) for e in events]}


def _event_row(e: ProposalEvent) -> dict[str, Any]:
    what = {
        "operator_decision": f"{e.decision} (operator decision)",
        "requeue": "requeued",
        "cancel": "cancelled",
    }.get(e.kind, e.kind)
    before = None
    if e.kind != "operator_decision":
        before = f"{e.prior_execution_state or 'not queued'}, attempt {e.prior_attempts or 0}"
        if e.prior_error:
            before += f": {first_line(e.prior_error, 60)}"
    return {
        "at": table_time(iso_ms(e.created_at)),
        "what": what,
        "by": e.acted_by,
        "reason": first_line(e.reason, 60),
        "before": before,
    }


def show_proposal(p: Proposal, events: list[ProposalEvent] | None = None) -> None:
    from rich.markup import escape

    doc = proposal_document(p)
    rows = [
        {"field": key, "value": value}
        for key, value in doc.items()
        if key not in ("input", "card", "result")
    ]
    render_table(rows, [Col("field"), Col("value")], title=escape(f"proposal {safe_text(p.id)}"))
    console = out_console()
    for key in ("input", "card", "result"):
        if doc[key] is not None:
            console.print(f"{key}:", style="bold")
            console.print(pretty_json(doc[key]), markup=False)
    if events:
        render_table(
            [_event_row(e) for e in events],
            [
                Col("at", "at (UTC)", wrap=False),
                Col("what", wrap=False),
                Col("by"),
                Col("reason", drop=2),
                Col("before", "before the act", drop=1),
            ],
            title="history (operator acts)",
            fuller="--json",
        )
        for e in events:
            if e.prior_result is not None:
                console.print(f"result replaced by the requeue at {iso_ms(e.created_at)}:")
                console.print(pretty_json(e.prior_result_value), markup=False)


def _state_words(p: Proposal) -> str:
    """Where a proposal stands, for a sentence: ``pending``, ``rejected``, ``approved and
    running``…"""
    if p.decision != "approved":
        return p.decision
    return f"approved and {p.execution_state or 'not queued'}"


def requeue_sentence(outcome: str, p: Proposal | None, given: str) -> str:
    """What ``proposals requeue`` says to a person, one line."""
    if p is None:
        return f"not_found: no proposal {given}."
    if outcome == "requeued":
        return (
            f"requeued: {p.id} is queued again; the next claim is attempt {p.attempts + 1} "
            "(the failed attempt is kept in its history)."
        )
    return f"{outcome}: {p.id} is {_state_words(p)}: only a failed execution can be requeued."


def cancel_sentence(
    outcome: str, p: Proposal | None, given: str, events: list[ProposalEvent]
) -> str:
    """What ``proposals cancel`` says to a person, one line: why it was refused, if it was."""
    if p is None:
        return f"not_found: no proposal {given}."
    lease = f"worker {p.lease_owner or '(unknown)'}, lease until {iso_ms(p.lease_expires_at)}"
    said = {
        "cancelled": f"{p.id} will not run; the cancel is in its history.",
        "pending": (
            f"{p.id} is not decided yet: reject it instead "
            f"(agora proposals decide {p.id[:12]} --reject --by WHO)."
        ),
        "running": (
            f"{p.id} is running ({lease}): work under a live lease cannot be cancelled; "
            "it settles, or its lease runs out."
        ),
        "stuck": (
            f"{p.id} is stuck ({lease}, which ran out): the work may have run, so it cannot "
            "be cancelled; claim-next recovers it as a new attempt, and a failed attempt can "
            "be requeued."
        ),
        "not_queued": f"{p.id} is {_state_words(p)}: only queued work can be cancelled.",
    }
    if outcome == "unchanged":
        last = next((e for e in reversed(events) if e.kind == "cancel"), None)
        who = "" if last is None else f" (by {last.acted_by} at {iso_ms(last.created_at)})"
        return f"unchanged: {p.id} was already cancelled{who}."
    return f"{outcome}: {said.get(outcome, p.id)}"


def tool_call_document(c: ToolCallApproval) -> dict[str, Any]:
    """The ``T`` document: the runtime's tool-call approval as ``show --json`` prints it."""
    return {
        "kind": "tool_call",
        "id": c.id,
        "tool_name": c.tool_name,
        "tool_type": c.tool_type,
        "input": c.input_value,
        "status": c.status,
        "thread_id": c.thread_id,
        "run_id": c.run_id,
        "message_id": c.message_id,
        "actor_ref": c.actor_ref,
        "tenant_ref": c.tenant_ref,
        "requested_at": iso_ms(c.created_at),
        "executed_at": iso_ms(c.executed_at),
        "executed_by_ref": c.executed_by_ref,
        "error": c.error,
    }


def show_tool_call(c: ToolCallApproval) -> None:
    from rich.markup import escape

    doc = tool_call_document(c)
    rows = [{"field": key, "value": value} for key, value in doc.items() if key != "input"]
    render_table(rows, [Col("field"), Col("value")], title=escape(f"tool call {safe_text(c.id)}"))
    if doc["input"] is not None:
        out_console().print("input:", style="bold")
        out_console().print(pretty_json(doc["input"]), markup=False)


def print_claim(result: ClaimResult) -> None:

    console = out_console()
    if result.lease is None or result.work is None:
        console.print(f"{result.outcome}: nothing was claimed.")
        return
    lease, work = result.lease, result.work
    console.print(
        safe_text(
            f"{result.outcome} {work.id} ({work.tool_name}, attempt {work.attempts}); "
            f"idempotency key {work.idempotency_key}"
        ),
        markup=False,
    )
    console.print(f"lease token  {lease.token}", markup=False)
    console.print(f"generation   {lease.generation}")
    console.print(f"expires at   {iso_ms(lease.expires_at)}")
    console.print("input:", style="bold")
    console.print(pretty_json(work.input_value), markup=False)


def print_claims(claims: list[ClaimResult]) -> None:
    if not claims:
        out_console().print("none: nothing was claimed.")
        return
    for n, result in enumerate(claims):
        if n:
            out_console().print()
        print_claim(result)


# --- commands ---------------------------------------------------------------------------------


INBOX_CSV = [
    Col(name)
    for name in (
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
    )
]
# Said wherever a tool-call approval shows, so that no hint points at a command that refuses it.
DECIDED_IN_THE_APP = (
    "its run waits on the app, not on the database: decide it in the app "
    "(AgentService.approve(runId, toolCallId) or reject(...), its approval route); "
    "agora proposals decide refuses it"
)


def inbox_item(p: Proposal, stuck: bool) -> dict[str, Any]:
    return {
        "id": p.id,
        "tenant_ref": p.tenant_ref,
        "actor_ref": p.actor_ref,
        "thread_id": p.thread_id,
        "run_id": p.run_id,
        "tool_name": p.tool_name,
        "decision": p.decision,
        "execution_state": p.execution_state,
        "created_at": iso_ms(p.created_at),
        "expires_at": iso_ms(p.expires_at),
        "decided_by": p.decided_by,
        "decided_at": iso_ms(p.decided_at),
        "lease_owner": p.lease_owner,
        "lease_expires_at": iso_ms(p.lease_expires_at),
        "attempts": p.attempts,
        "settled_at": iso_ms(p.settled_at),
        "error": p.error,
        "stuck": stuck,
        "kind": "proposal",
    }


def inbox_tool_call(c: ToolCallApproval) -> dict[str, Any]:
    """A tool-call approval as an inbox item: the proposal item's keys, null where a tool call
    has no such thing (it never expires, and nothing of it is decided or leased yet)."""
    return {
        "id": c.id,
        "tenant_ref": c.tenant_ref,
        "actor_ref": c.actor_ref,
        "thread_id": c.thread_id,
        "run_id": c.run_id,
        "tool_name": c.tool_name,
        "decision": "pending",
        "execution_state": None,
        "created_at": iso_ms(c.created_at),
        "expires_at": None,
        "decided_by": None,
        "decided_at": None,
        "lease_owner": None,
        "lease_expires_at": None,
        "attempts": None,
        "settled_at": None,
        "error": None,
        "stuck": False,
        "kind": "tool_call",
    }


def inbox_notes(page: Inbox, limit: int) -> list[str]:
    notes = []
    if page.more:
        notes.append(f"showing the first {limit:,}; --limit (up to 1,000) or a filter shows more")
    if page.past_expiry:
        notes.append(
            f"{page.past_expiry:,} pending proposal(s) are past their expiry and can no longer "
            "be decided: agora proposals expire marks them expired"
        )
    if page.tool_calls:
        notes.append(
            f"{len(page.tool_calls):,} of these (kind tool_call) are the runtime's own "
            f"approvals; for each, {DECIDED_IN_THE_APP}"
        )
    if page.legacy:
        notes.append(
            f"{page.legacy:,} proposal(s) written before the discovery index existed are not "
            "in this view (in any scope): agora db backfill fills them in"
        )
    return notes


def render_inbox(page: Inbox) -> None:
    now = page.now
    entries = page.entries
    calls = page.tool_calls
    ids = short_ids([e.proposal.id for e in entries] + [c.id for c in calls])
    threads = short_ids([e.proposal.thread_id for e in entries] + [c.thread_id for c in calls])
    rows = []
    for e in entries:
        p = e.proposal
        row: dict[str, Any] = {
            "id": ids[p.id],
            "kind": "proposal",
            "tool": p.tool_name,
            "tenant": p.tenant_ref or "—",
            "actor": p.actor_ref,
            "thread": threads[p.thread_id],
            "age": relative_text(p.created_at, now),
        }
        if page.state == "pending":
            row["when"] = "never" if p.expires_at is None else relative_text(p.expires_at, now)
        elif page.state == "queued":
            row["by"] = p.decided_by
            # when it was queued: its approval, or the requeue that put it back (issue 28)
            row["when"] = relative_text(p.discovery_at or p.decided_at, now)
        elif page.state == "running":
            row["by"] = p.lease_owner
            row["attempts"] = p.attempts
            lease = relative_text(p.lease_expires_at, now)
            row["when"] = f"STUCK: lease ran out {lease}" if e.stuck else f"lease ends {lease}"
        else:
            row["attempts"] = p.attempts
            row["when"] = table_time(iso_ms(p.settled_at))
            row["error"] = first_line(p.error, 60)
        rows.append(row)
    for c in calls:  # pending only: a tool call never expires
        rows.append(
            {
                "id": ids[c.id],
                "kind": "tool_call",
                "tool": c.tool_name,
                "tenant": c.tenant_ref or "—",
                "actor": c.actor_ref or "—",
                "thread": "—" if c.thread_id is None else threads[c.thread_id],
                "age": relative_text(c.created_at, now),
                "when": "never",
            }
        )
    # Narrow, the inbox keeps what deciding needs: the id to type, the tool, and the thread (the
    # rest of the scope and the times go first, and stderr names them).
    columns = [Col("id", wrap=False)]
    if page.state == "pending":
        columns.append(Col("kind", wrap=False, drop=2))
    columns += [
        Col("tool"),
        Col("tenant", drop=3),
        Col("actor", drop=4),
        Col("thread"),
        Col("age", "created", wrap=False, drop=1),
    ]
    columns += {
        "pending": [Col("when", "expires", wrap=False, drop=5)],
        "queued": [Col("by", "approved by", drop=5), Col("when", "queued", wrap=False, drop=6)],
        "running": [
            Col("by", "worker", drop=6),
            Col.number("attempts", drop=5),
            Col("when", "lease"),
        ],
        "failed": [
            Col.number("attempts", drop=5),
            Col("when", "settled (UTC)", wrap=False, drop=6),
            Col.text("error"),
        ],
    }[page.state]
    what = {
        "pending": "waiting for a decision",
        "queued": "approved, waiting for a worker",
        "running": "approved, being executed",
        "failed": "approved, failed",
    }[page.state]
    render_table(
        rows,
        columns,
        title="Waiting for a decision" if page.state == "pending" else f"Proposals {what}",
        row_styles=[*("bold red" if e.stuck else None for e in entries), *(None for _ in calls)],
        empty=f"nothing {what}.",
        fuller="--json",
    )


# P's keys but the JSON values (input, card, result): those stay in --json.
LIST_CSV = [
    Col(name)
    for name in (
        "id",
        "idempotency_key",
        "tenant_ref",
        "actor_ref",
        "thread_id",
        "run_id",
        "tool_call_id",
        "tool_name",
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
        "error",
        "settled_at",
        "created_at",
        "updated_at",
    )
]
