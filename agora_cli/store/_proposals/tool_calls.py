"""The runtime's own approvals: tool calls left waiting for a person, read beside the proposals.

The agent runtime (adonis-agent) never writes ``agent_action_proposal``. An action tool call is
recorded ``pending_approval`` (earlier agora writers: ``awaiting_approval``) and the run then
waits for ``AgentService.approve(runId, toolCallId)`` or ``reject(...)``, which signal the
runner: the inline runner resolves a promise it holds in memory, the durable one an engine
signal ``tool:<runId>:<callId>``. Neither resumes from the database row, so agora reads these
approvals and never decides them (``refuse_tool_call_decision``): a status written here would
leave the run waiting forever.

Read as upstream's ``pendingApprovals`` reads them: the thread is the message's, the run the
call's (else the message's), the actor the run's (else the thread's), and the tenant the
thread's. A tool call that an agora proposal already stands for (the proposal's
``tool_call_id``, in the same thread) is the proposal's, and is not listed twice.

An approval tool call, for ``show``: one still waiting (either word), or any ``action`` call
(the runtime asks about every one of them), so that a decided one still shows its status.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from sqlalchemy import and_, exists, func, literal, or_, select

from agora_cli.store._dialects import dialect_of
from agora_cli.store._errors import AmbiguousId, InvalidInput, NotFound
from agora_cli.store._proposals.decisions import find_proposal_id
from agora_cli.store._proposals.model import Scope, check_limit
from agora_cli.store._schema import action_proposal, message, run, thread, tool_call
from agora_cli.store._sealing import is_sealed, open_columns
from agora_cli.store._short_ids import resolve_prefix
from agora_cli.store._sqlexpr import exact_eq
from agora_cli.store._values import check_identity, check_optional_identity, load_json
from agora_cli.store._vocabulary import canonical_tool_status, statuses_of

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection
    from sqlalchemy.sql import ColumnElement, Select

__all__ = [
    "ApprovalKind",
    "ToolCallApproval",
    "count_waiting_tool_calls",
    "find_any_tool_call_approval",
    "find_any_tool_call_approval_id",
    "find_approval_id",
    "find_tool_call_approval",
    "find_tool_call_approval_id",
    "get_tool_call_approval",
    "list_tool_call_approvals",
    "refuse_tool_call_decision",
]

PENDING = "pending_approval"
ApprovalKind = Literal["proposal", "tool_call"]
tc, m, t, r = tool_call, message, thread, run


@dataclass(frozen=True)
class ToolCallApproval:
    """A tool call that asks (or asked) a person, with its thread, run, actor and tenant.

    ``status`` is the stored word; ``pending``: it still waits for a decision (either word).
    ``thread_id`` is ``None`` only when its message is gone; ``created_at`` is when the runtime
    asked (upstream's ``requestedAt``).
    """

    id: str
    message_id: str
    thread_id: str | None
    run_id: str | None
    actor_ref: str | None
    tenant_ref: str | None
    tool_name: str
    tool_type: str
    input: str | None
    status: str
    error: str | None
    executed_by_ref: str | None
    created_at: int
    executed_at: int | None

    @property
    def input_value(self) -> Any:
        return load_json(self.input)

    @property
    def pending(self) -> bool:
        return canonical_tool_status(self.status) == PENDING

    @property
    def scope(self) -> Scope | None:
        """The scope that names it, as a proposal's does (``None`` without its thread)."""
        if self.thread_id is None or self.actor_ref is None:
            return None
        return Scope(self.tenant_ref, self.actor_ref, self.thread_id)


_RUN_ID = func.coalesce(tc.c.run_id, m.c.run_id)
_ACTOR = func.coalesce(r.c.actor_ref, t.c.actor_ref)
_JOINED = (
    tc.outerjoin(m, m.c.id == tc.c.message_id)
    .outerjoin(t, t.c.id == m.c.thread_id)
    .outerjoin(r, r.c.id == _RUN_ID)
)
# A proposal that stands for the call (agora's own approval model): looked up through the
# proposal's thread index, the call's thread being the proposal's.
_HAS_PROPOSAL = exists(
    select(literal(1))
    .select_from(action_proposal)
    .where(
        action_proposal.c.thread_id == m.c.thread_id,
        exact_eq(action_proposal.c.tool_call_id, tc.c.id),
    )
)


def _select() -> Select[Any]:
    return select(
        tc.c.id,
        tc.c.message_id,
        m.c.thread_id,
        _RUN_ID.label("run_id"),
        _ACTOR.label("actor_ref"),
        t.c.tenant_ref,
        tc.c.tool_name,
        tc.c.tool_type,
        tc.c.input,
        tc.c.status,
        tc.c.error,
        tc.c.executed_by_ref,
        tc.c.created_at,
        tc.c.executed_at,
    ).select_from(_JOINED)


def _row(row: Any) -> ToolCallApproval:
    values = {name: row[name] for name in ToolCallApproval.__dataclass_fields__}
    values["created_at"] = int(values["created_at"])
    if values["executed_at"] is not None:
        values["executed_at"] = int(values["executed_at"])
    return ToolCallApproval(**values)


def _rows(conn: Connection, rows: Any) -> list[ToolCallApproval]:
    """Approvals from their rows, a sealed input opened (its thread's tenant's; a marker
    without the KEK)."""
    found = [dict(row) for row in rows]
    if any(is_sealed(row["input"]) for row in found):
        cells = [{"id": row["id"], "input": row["input"]} for row in found]
        opened = open_columns(conn, tc.name, cells, [row["tenant_ref"] for row in found])
        for row, (values, _) in zip(found, opened, strict=True):
            row["input"] = values["input"]
    return [_row(row) for row in found]


def _waiting() -> ColumnElement[bool]:
    return tc.c.status.in_(statuses_of(PENDING))


def _approval() -> ColumnElement[bool]:
    """An approval tool call (see the module docs) that no proposal stands for."""
    return and_(or_(_waiting(), tc.c.tool_type == "action"), ~_HAS_PROPOSAL)


def _in_scope(scope: Scope) -> ColumnElement[bool]:
    if not isinstance(scope, Scope):
        raise InvalidInput("scope must be a Scope(tenant_ref, actor_ref, thread_id)")
    tenant = (
        t.c.tenant_ref.is_(None)
        if scope.tenant_ref is None
        else exact_eq(t.c.tenant_ref, scope.tenant_ref)
    )
    return and_(exact_eq(m.c.thread_id, scope.thread_id), tenant, exact_eq(_ACTOR, scope.actor_ref))


def list_tool_call_approvals(
    conn: Connection,
    *,
    tenant_ref: str | None = None,
    actor_ref: str | None = None,
    tool_name: str | None = None,
    limit: int = 50,
) -> list[ToolCallApproval]:
    """Tool calls waiting for a decision, oldest first (upstream's ``pendingApprovals`` order),
    in every scope; ``limit`` is 1–1000.

    One statement over the ``(status, created_at)`` index, joined to the message, thread and
    run; the filters match the thread's tenant, the resolved actor and the tool exactly.
    """
    check_limit(limit)
    return read_tool_call_approvals(
        conn, tenant_ref=tenant_ref, actor_ref=actor_ref, tool_name=tool_name, limit=limit
    )


def read_tool_call_approvals(
    conn: Connection,
    *,
    tenant_ref: str | None,
    actor_ref: str | None,
    tool_name: str | None,
    limit: int,
) -> list[ToolCallApproval]:
    """``list_tool_call_approvals`` without the limit's bound (the inbox reads one more row
    than its page to tell whether there are more)."""
    where = [_waiting(), ~_HAS_PROPOSAL]
    for column, value, name in (
        (t.c.tenant_ref, tenant_ref, "tenant_ref"),
        (_ACTOR, actor_ref, "actor_ref"),
        (tc.c.tool_name, tool_name, "tool_name"),
    ):
        if check_optional_identity(name, value) is not None:
            where.append(exact_eq(column, value))
    q = _select().where(*where).order_by(tc.c.created_at, tc.c.id).limit(limit)
    return _rows(conn, conn.execute(q).mappings().all())


def find_tool_call_approval_id(conn: Connection, text: str, *, scope: Scope) -> str | None:
    """The full id of the approval tool call in ``scope`` that ``text`` names — its id, or a
    unique prefix of at least 8 characters — or ``None`` (``AmbiguousId`` as for proposals)."""
    # A derived table: a plain IN subquery over agent_tool_call would be correlated away.
    in_scope = select(tc.c.id).select_from(_JOINED).where(_approval(), _in_scope(scope)).subquery()
    return resolve_prefix(
        conn, tc, text, where=tc.c.id.in_(select(in_scope.c.id)), what="tool call"
    )


def _of_tenant(tenant_ref: str | None) -> list[ColumnElement[bool]]:
    """The thread's tenant is ``tenant_ref`` (any tenant: ``None``)."""
    if check_optional_identity("tenant_ref", tenant_ref) is None:
        return []
    return [exact_eq(t.c.tenant_ref, tenant_ref)]


def find_any_tool_call_approval_id(
    conn: Connection, text: str, *, tenant_ref: str | None = None
) -> str | None:
    """``find_tool_call_approval_id`` across every scope (of one tenant's threads with
    ``tenant_ref``): privileged, for the operator, as the inbox is."""
    approvals = (
        select(tc.c.id).select_from(_JOINED).where(_approval(), *_of_tenant(tenant_ref)).subquery()
    )
    return resolve_prefix(
        conn, tc, text, where=tc.c.id.in_(select(approvals.c.id)), what="tool call"
    )


def find_any_tool_call_approval(conn: Connection, tool_call_id: str) -> ToolCallApproval | None:
    """The approval tool call with this id in any scope, or ``None`` (privileged)."""
    check_identity("tool_call_id", tool_call_id)
    q = _select().where(exact_eq(tc.c.id, tool_call_id), _approval())
    row = conn.execute(q.limit(1)).mappings().first()
    return None if row is None else _rows(conn, [row])[0]


def find_approval_id(
    conn: Connection, text: str, *, scope: Scope
) -> tuple[ApprovalKind, str] | None:
    """What ``text`` names in ``scope``: a proposal or a tool-call approval, by its id or a
    unique prefix (8+ characters) — or ``None``.

    An exact id wins over a prefix; a prefix that starts one id of each kind is ``AmbiguousId``.
    """
    proposal = find_proposal_id(conn, text, scope=scope)
    if proposal == text:
        return ("proposal", text)
    call = find_tool_call_approval_id(conn, text, scope=scope)
    if call == text:
        return ("tool_call", text)
    if proposal is not None and call is not None:
        raise AmbiguousId(
            f"id {text!r} is ambiguous: it starts proposal {proposal} and tool call {call}; "
            "give more characters",
            matches=(proposal, call),
        )
    if proposal is not None:
        return ("proposal", proposal)
    return None if call is None else ("tool_call", call)


def find_tool_call_approval(
    conn: Connection, tool_call_id: str, *, scope: Scope
) -> ToolCallApproval | None:
    """The approval tool call with this id in ``scope``, or ``None`` (a wrong scope included)."""
    check_identity("tool_call_id", tool_call_id)
    q = _select().where(exact_eq(tc.c.id, tool_call_id), _approval(), _in_scope(scope))
    row = conn.execute(q.limit(1)).mappings().first()
    return None if row is None else _rows(conn, [row])[0]


def get_tool_call_approval(
    conn: Connection, tool_call_id: str, *, scope: Scope
) -> ToolCallApproval:
    """The approval tool call with this id in ``scope``; ``NotFound`` otherwise."""
    found = find_tool_call_approval(conn, tool_call_id, scope=scope)
    if found is None:
        raise NotFound(f"no tool call {tool_call_id!r} in that scope")
    return found


def refuse_tool_call_decision(approval: ToolCallApproval) -> NoReturn:
    """Refuse to decide a tool call (``InvalidInput``, exit 2): the app decides it, and the
    runtime would never read a decision written here (see the module docs)."""
    run_part = f"run {approval.run_id}" if approval.run_id else "no recorded run"
    if not approval.pending:
        raise InvalidInput(
            f"tool call {approval.id} ({run_part}) is the runtime's own approval and is already "
            f"{approval.status}: there is nothing to decide, and nothing was written"
        )
    raise InvalidInput(
        f"tool call {approval.id} ({run_part}) is the runtime's own approval: decide it in the "
        f"app, AgentService.approve(runId, toolCallId) or reject(runId, toolCallId, reason) "
        f"(its approval route); the run waits on the runtime's signal, not on this row, so "
        f"nothing was written"
    )


def count_waiting_tool_calls(conn: Connection) -> list[tuple[str, str | None, int, int]]:
    """``(tool, tenant, waiting, oldest created_at)`` of the tool calls waiting for a decision,
    by tool and thread tenant (``agora metrics``): one statement over the ``(status,
    created_at)`` index, as ``read_tool_call_approvals`` reads them."""
    keys: list[ColumnElement[Any]] = [tc.c.tool_name, t.c.tenant_ref]
    exact = [func.char_length(k) for k in keys] if dialect_of(conn).pads_spaces else []
    joined = tc.outerjoin(m, m.c.id == tc.c.message_id).outerjoin(t, t.c.id == m.c.thread_id)
    q = (
        select(*keys, func.count(), func.min(tc.c.created_at))
        .select_from(joined)
        .where(_waiting(), ~_HAS_PROPOSAL)
        .group_by(*keys, *exact)  # MySQL: 'a' and 'a ' are one group under PAD SPACE
    )
    return [(row[0], row[1], int(row[2]), int(row[3])) for row in conn.execute(q)]
