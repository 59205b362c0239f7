"""The operator's inbox: what waits for a decision across every scope, and approved work by state.

Privileged and cross-scope, like ``claim_next``: keep it behind operator tooling. It reads the
discovery index ``(discovery_state, discovery_at)`` only:

- ``pending``: waiting for a decision, soonest to expire first (``discovery_at`` is the expiry),
  then those that never expire. Pending proposals already past their expiry cannot be decided
  any more: they are counted apart (``past_expiry``) for ``expire_proposals`` to mark.
- ``queued``: approved work waiting for a worker, longest waiting first (``discovery_at`` is when
  it was queued).
- ``running``: approved work under a lease, the lease that ran out first first (``discovery_at``
  is the lease's expiry); a lease already expired is ``stuck``: its worker died or hangs, and the
  next ``claim_next`` recovers it.
- ``failed``: settled work that failed, newest first. Settled rows share the index's ``done``
  range with every other finished proposal, so this one reads that range and filters it: its
  cost follows the number of finished proposals, not the page.

The runtime's own approvals — tool calls left ``pending_approval``, which it never writes as
proposals (``tool_calls.py``) — wait for a decision too: ``pending`` lists them after the
proposals, oldest first as upstream's ``pendingApprovals`` does, in one statement over the
``(status, created_at)`` index. They never expire, so ``expiring_within_ms`` leaves them out, and
they have no execution state, so the other states never hold them.

Rows an older writer left without discovery columns (``discovery_state`` NULL) are never scanned:
they are counted (``legacy``, one count over the index's NULL range) so the operator can run the
bounded backfill. Filters (tenant, actor, tool) narrow the rows of the range read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, get_args

from agora_cli.store._clock import DAY_MS, Clock
from agora_cli.store._errors import InvalidInput
from agora_cli.store._proposals.backfill import count_legacy_proposals
from agora_cli.store._proposals.model import Proposal, check_limit, clock_or_system
from agora_cli.store._proposals.queries import (
    count_past_expiry,
    proposal_row,
    select_inbox,
    select_pending_expiring,
    select_pending_without_expiry,
)
from agora_cli.store._proposals.sealed import open_proposals
from agora_cli.store._proposals.tool_calls import ToolCallApproval, read_tool_call_approvals
from agora_cli.store._schema import action_proposal as p
from agora_cli.store._sqlexpr import exact_eq
from agora_cli.store._values import check_int, check_optional_identity

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection
    from sqlalchemy.sql import ColumnElement, Select

__all__ = [
    "INBOX_STATES",
    "MAX_EXPIRING_WITHIN_MS",
    "Inbox",
    "InboxEntry",
    "InboxState",
    "list_inbox",
]

InboxState = Literal["pending", "queued", "running", "failed"]
INBOX_STATES: tuple[InboxState, ...] = get_args(InboxState)
MAX_EXPIRING_WITHIN_MS = 366 * DAY_MS


@dataclass(frozen=True)
class InboxEntry:
    """One proposal of the inbox; ``stuck``: running under a lease that has already expired."""

    proposal: Proposal
    stuck: bool


@dataclass(frozen=True)
class Inbox:
    """A page of the inbox, and what it leaves out: ``more`` (the limit cut it),
    ``past_expiry`` (pending proposals past their expiry, ``pending`` only; else 0) and
    ``legacy`` (rows without discovery columns, in any scope: run the backfill).

    The page is ``entries`` (proposals) then ``tool_calls`` (the runtime's own approvals,
    ``pending`` only), in that order; ``limit`` counts both."""

    state: InboxState
    now: int
    entries: list[InboxEntry]
    more: bool
    past_expiry: int
    legacy: int
    tool_calls: list[ToolCallApproval] = field(default_factory=list)


def _filters(
    tenant_ref: str | None, actor_ref: str | None, tool_name: str | None
) -> list[ColumnElement[bool]]:
    found = []
    for column, value, name in (
        (p.c.tenant_ref, tenant_ref, "tenant_ref"),
        (p.c.actor_ref, actor_ref, "actor_ref"),
        (p.c.tool_name, tool_name, "tool_name"),
    ):
        if check_optional_identity(name, value) is not None:
            found.append(exact_eq(column, value))
    return found


def _read(conn: Connection, q: Select[tuple[object, ...]], limit: int) -> list[Proposal]:
    return open_proposals(conn, [proposal_row(r) for r in conn.execute(q.limit(limit)).mappings()])


def list_inbox(
    conn: Connection,
    *,
    state: InboxState = "pending",
    tenant_ref: str | None = None,
    actor_ref: str | None = None,
    tool_name: str | None = None,
    expiring_within_ms: int | None = None,
    limit: int = 50,
    clock: Clock | None = None,
) -> Inbox:
    """One page of the inbox in ``state`` (see the module docs); ``limit`` is 1–1000.

    ``expiring_within_ms`` keeps the pending proposals that expire within that many milliseconds
    from now (1 ms to 366 days; ``pending`` only). ``tenant_ref`` of a tool call is its thread's,
    ``actor_ref`` its run's (else its thread's).
    """
    if state not in INBOX_STATES:
        raise InvalidInput(f"state must be one of {', '.join(INBOX_STATES)}, not {state!r}")
    check_limit(limit)
    if expiring_within_ms is not None:
        check_int("expiring_within_ms", expiring_within_ms, low=1, high=MAX_EXPIRING_WITHIN_MS)
        if state != "pending":
            raise InvalidInput(
                "expiring_within_ms applies to pending proposals only", param="expiring_within_ms"
            )
    where = _filters(tenant_ref, actor_ref, tool_name)
    now = clock_or_system(clock).now_ms()
    rows: list[Proposal]
    past_expiry = 0
    if state == "pending":
        rows, past_expiry = _pending(conn, where, now, expiring_within_ms, limit + 1)
    else:
        rows = _read(conn, select_inbox(state, where), limit + 1)
    calls: list[ToolCallApproval] = []
    if state == "pending" and expiring_within_ms is None and len(rows) <= limit:
        calls = read_tool_call_approvals(
            conn, tenant_ref=tenant_ref, actor_ref=actor_ref, tool_name=tool_name,
            limit=limit - len(rows) + 1,
        )  # fmt: skip
    entries = [
        InboxEntry(
            proposal=r,
            stuck=state == "running"
            and r.lease_expires_at is not None
            and r.lease_expires_at <= now,
        )
        for r in rows[:limit]
    ]
    return Inbox(
        state=state,
        now=now,
        entries=entries,
        more=len(rows) + len(calls) > limit,
        past_expiry=past_expiry,
        legacy=count_legacy_proposals(conn),
        tool_calls=calls[: limit - len(entries)],
    )


def _pending(
    conn: Connection,
    where: list[ColumnElement[bool]],
    now: int,
    within: int | None,
    limit: int,
) -> tuple[list[Proposal], int]:
    """Pending proposals not past their expiry, soonest first, then those without one; and the
    count of those past it. Two ranges of the index, because NULL sorts first on MySQL and SQLite
    and last on PostgreSQL."""
    rows = _read(conn, select_pending_expiring(now, within, where), limit)
    if within is None and len(rows) < limit:
        rows += _read(conn, select_pending_without_expiry(where), limit - len(rows))
    return rows, int(conn.execute(count_past_expiry(now, where)).scalar_one())
