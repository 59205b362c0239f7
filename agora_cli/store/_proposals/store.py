"""``ActionProposalStore``: the proposal functions over an engine, one short transaction each.

Each method is one line over its module function (as httpx's ``Client.get`` is one line over
``request``): the function validates its arguments before any SQL, and the store adds only the
transaction, the clock and the bounded retry of deadlocks and serialization failures.

A worker's store may hold its connection (``hold_connection=True``): the lease steps (claim,
renew, settle, their batches) then run on one connection checked out once, not one pool checkout
per step — the checkout, its events and the return cost more client CPU than the statement.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, overload

from agora_cli.store._clock import Clock
from agora_cli.store._dialects import dialect_of
from agora_cli.store._engine import (
    DRIVER_TRANSACTION,
    end_on_driver,
    merge_commits,
    prepare_if_direct,
    retry_transient,
    session_tenant,
    translate_error,
)
from agora_cli.store._errors import AgoraError, InvalidInput
from agora_cli.store._proposals.backfill import backfill_discovery_index
from agora_cli.store._proposals.decisions import (
    create_proposal,
    decide_proposal,
    expire_proposals,
    find_proposal,
    find_proposal_id,
    get_proposal,
    list_proposals,
)
from agora_cli.store._proposals.delivery import deliver_outcome, list_undelivered_outcomes
from agora_cli.store._proposals.inbox import Inbox, InboxState, list_inbox
from agora_cli.store._proposals.leases import (
    BatchLost,
    claim_next_proposal,
    claim_next_proposals,
    claim_proposal,
    find_own_settles,
    renew_lease,
    settle_and_claim_next,
    settle_proposal,
    settle_proposals,
    settle_proposals_and_claim_next,
)
from agora_cli.store._proposals.model import (
    BackfillResult,
    CancelResult,
    ClaimResult,
    CreateResult,
    DecideResult,
    DeliveryResult,
    NewProposal,
    Proposal,
    ProposalEvent,
    RenewResult,
    RequeueResult,
    Scope,
    Settlement,
    SettleResult,
    clock_or_system,
)
from agora_cli.store._proposals.operator import (
    cancel_proposal,
    decide_as_operator,
    find_any_approval_id,
    list_proposal_events,
    requeue_proposal,
)
from agora_cli.store._proposals.tool_calls import (
    ApprovalKind,
    ToolCallApproval,
    find_any_tool_call_approval,
    find_approval_id,
    get_tool_call_approval,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine

__all__ = ["ActionProposalStore"]

P = ParamSpec("P")
R = TypeVar("R")


class ActionProposalStore:
    """The proposal store over an engine: each call is one short transaction, retried boundedly
    on deadlocks and serialization failures. Arguments are validated before any SQL runs.

    ``hold_connection=True`` (a worker's store): the lease steps — ``claim_next``, ``renew``,
    ``settle``, ``settle_many``, ``settle_and_claim_next`` — run on one connection the store
    holds until ``close()`` (or the end of a ``with`` block), reopened after a lost connection
    as any step retries it. Such a store belongs to the thread that first used it: another
    thread's call is refused (``InvalidInput``); give each thread its own store. On PostgreSQL
    a held connection prepares its statements on the server when it reaches PostgreSQL directly
    (never through a pooler, and never when the URL says ``?prepare_threshold=none``); on
    MariaDB it prepares each statement text the second time it runs (the binary protocol:
    ``_mysql_prepared``), unless the URL says ``?prepare_threshold=none``.
    """

    def __init__(
        self, engine: Engine, clock: Clock | None = None, *, hold_connection: bool = False
    ) -> None:
        self.engine = engine
        self.clock: Clock = clock_or_system(clock)
        self._autocommit_steps = dialect_of(engine).autocommit_worker_steps
        autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
        self._steps = autocommit if self._autocommit_steps else engine
        self._hold = hold_connection
        self._held: Connection | None = None
        self._owner: int | None = None
        # A held connection's transactions are the driver's own (``end_on_driver``): SQLAlchemy's
        # begin and commit around each step, with their events, cost as much client CPU as a
        # statement. Not on SQLite (its BEGIN is an event) nor under a PostgreSQL session
        # tenant (the tenant setting hangs on the begin event: ``install_tenant_hook``).
        d = dialect_of(engine)
        tenant_hook = d.has_row_level_security and session_tenant(engine) is not None
        self._on_driver = hold_connection and d.drives_worker_transactions and not tenant_hook

    def close(self) -> None:
        """Give back the held connection (a store that holds none has nothing to do)."""
        held, self._held = self._held, None
        if held is not None:
            if not held.invalidated and not held.closed:
                held.info.pop(DRIVER_TRANSACTION, None)
            held.close()

    def __enter__(self) -> ActionProposalStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _held_connection(self) -> Connection:
        """The held connection, opened (again) when there is none or it was invalidated."""
        me = threading.get_ident()
        if self._owner != me:
            if self._owner is not None:
                raise InvalidInput(
                    "this store holds its connection for the thread that first used it; "
                    "open one store per thread"
                )
            self._owner = me
        held = self._held
        if held is None or held.invalidated or held.closed:
            if held is not None:
                self._held = None
                held.close()
            held = self._steps.connect()
            prepare_if_direct(held)
            if self._on_driver:
                held.info[DRIVER_TRANSACTION] = True
                merge_commits(held)
            self._held = held
        return held

    def _write(
        self, fn: Callable[Concatenate[Connection, P], R], *args: P.args, **kwargs: P.kwargs
    ) -> R:
        def attempt() -> R:
            with self.engine.begin() as conn:
                return fn(conn, *args, **kwargs)

        return self._retried(attempt)

    def _lease_step(
        self,
        fn: Callable[Concatenate[Connection, P], R],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> R:
        """A lease's step (claim, renew, settle), idempotent by its token and generation: a
        lost connection is retried too (``retry_transient(reconnect=…)``), and on PostgreSQL
        it runs without a surrounding transaction (autocommit: no BEGIN and COMMIT round trips;
        a fenced update proves each step whatever the isolation), elsewhere in a short one."""
        return self._step(self._steps, fn, None, *args, **kwargs)

    def _step(
        self,
        engine: Engine,
        fn: Callable[Concatenate[Connection, P], R],
        after_loss: Callable[[Connection, R], R] | None,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> R:
        """``fn`` as a lease step (``_lease_step``) on ``engine`` (``self.engine`` for one of
        several statements, which must be one transaction everywhere); ``after_loss`` corrects
        its result on a try after a lost connection.

        On a held connection whose transactions are the driver's, the first try runs here
        without the retry machinery's closures (a worker pays for them on every step); what it
        raises is handed to ``retry_transient`` as the first try's error, so a retry, a
        reconnect or the error raised is exactly what the machinery would have made of it."""
        first: Exception | None = None
        if self._on_driver and engine is self._steps:
            conn = self._held
            if (
                conn is not None
                and self._owner == threading.get_ident()
                and not conn.invalidated
                and not conn.closed
            ):
                try:
                    try:
                        result = fn(conn, *args, **kwargs)
                    except BaseException:
                        if not conn.invalidated:
                            end_on_driver(conn, commit=False)
                        raise
                    end_on_driver(conn, commit=True)
                    return result
                except Exception as exc:
                    first = exc
        lost = False
        held = self._hold and engine is self._steps

        def attempt() -> R:
            if held and self._on_driver:
                conn = self._held_connection()
                try:
                    result = fn(conn, *args, **kwargs)
                    if after_loss is not None and lost:
                        result = after_loss(conn, result)
                except BaseException:
                    if not conn.invalidated:
                        end_on_driver(conn, commit=False)
                    raise
                end_on_driver(conn, commit=True)
                return result
            if held:
                conn = self._held_connection()
                with conn.begin():
                    result = fn(conn, *args, **kwargs)
                    return result if after_loss is None or not lost else after_loss(conn, result)
            with engine.connect() as conn:
                with conn.begin():
                    result = fn(conn, *args, **kwargs)
                    # A retry after a loss: the first try may have committed before the loss.
                    return result if after_loss is None or not lost else after_loss(conn, result)

        def on_lost() -> None:
            nonlocal lost
            lost = True
            if held:
                self.close()

        return self._retried(attempt, reconnect=True, on_lost=on_lost, first_error=first)

    def _read(
        self, fn: Callable[Concatenate[Connection, P], R], *args: P.args, **kwargs: P.kwargs
    ) -> R:
        def attempt() -> R:
            with self.engine.connect().execution_options(sqlite_deferred=True) as conn:
                with conn.begin():
                    return fn(conn, *args, **kwargs)

        return self._retried(attempt, reconnect=True)

    def _retried(
        self,
        attempt: Callable[[], R],
        *,
        reconnect: bool = False,
        on_lost: Callable[[], None] | None = None,
        first_error: Exception | None = None,
    ) -> R:
        """``attempt`` under ``retry_transient``; what still fails is raised as agora's error
        (``DatabaseUnreachable`` for a connection that stayed lost), never the driver's."""
        try:
            return retry_transient(
                attempt,
                reconnect=self.engine if reconnect else None,
                on_lost=on_lost,
                first_error=first_error,
            )
        except AgoraError:
            raise
        except Exception as exc:
            translated = translate_error(exc)
            if translated is None:
                raise
            raise translated from exc

    def create(self, new: NewProposal) -> CreateResult:
        """Create a proposal: ``created``, ``existing`` or ``conflict``."""
        return self._write(create_proposal, new, clock=self.clock)

    def get(self, proposal_id: str, scope: Scope) -> Proposal:
        """Return a proposal in its scope; ``NotFound`` otherwise (a wrong scope included)."""
        return self._read(get_proposal, proposal_id, scope=scope)

    def find(self, proposal_id: str, scope: Scope) -> Proposal | None:
        """Return a proposal in its scope, or ``None``."""
        return self._read(find_proposal, proposal_id, scope=scope)

    def resolve_id(self, text: str, scope: Scope) -> str:
        """The full id that ``text`` (an id or a unique prefix) names in ``scope``; ``text``
        itself when it names none, so that ``get`` and ``decide`` answer as for any id."""
        found = self._read(find_proposal_id, text, scope=scope)
        return text if found is None else found

    def resolve_approval(self, text: str, scope: Scope) -> tuple[ApprovalKind, str]:
        """What ``text`` names in ``scope``: a proposal or the runtime's tool-call approval, by id
        or unique prefix; ``("proposal", text)`` when it names neither, as ``resolve_id``."""
        found = self._read(find_approval_id, text, scope=scope)
        return ("proposal", text) if found is None else found

    def get_tool_call_approval(self, tool_call_id: str, scope: Scope) -> ToolCallApproval:
        """Return the runtime's tool-call approval in its scope; ``NotFound`` otherwise."""
        return self._read(get_tool_call_approval, tool_call_id, scope=scope)

    def inbox(
        self,
        state: InboxState = "pending",
        *,
        tenant_ref: str | None = None,
        actor_ref: str | None = None,
        tool_name: str | None = None,
        expiring_within_ms: int | None = None,
        limit: int = 50,
    ) -> Inbox:
        """One page of the cross-scope inbox (privileged): pending, queued, running or failed."""
        return self._read(
            list_inbox, state=state, tenant_ref=tenant_ref, actor_ref=actor_ref,
            tool_name=tool_name, expiring_within_ms=expiring_within_ms, limit=limit,
            clock=self.clock,
        )  # fmt: skip

    def list(
        self, scope: Scope, decision: str | None = None, limit: int = 100
    ) -> builtins.list[Proposal]:
        """List a scope's proposals, newest first."""
        return self._read(list_proposals, scope=scope, decision=decision, limit=limit)

    def decide(
        self,
        proposal_id: str,
        scope: Scope,
        decision: str,
        decided_by: str,
        note: str | None = None,
    ) -> DecideResult:
        """Approve or reject a proposal; the outcome says what happened."""
        return self._write(
            decide_proposal,
            proposal_id,
            scope=scope,
            decision=decision,
            decided_by=decided_by,
            note=note,
            clock=self.clock,
        )

    def claim(self, proposal_id: str, scope: Scope, worker_id: str, lease_ms: int) -> ClaimResult:
        """Take the execution lease of an approved proposal whose work is due."""
        return self._step(
            self.engine,
            claim_proposal,
            None,
            proposal_id,
            scope=scope,
            worker_id=worker_id,
            lease_ms=lease_ms,
            clock=self.clock,
        )

    def renew(self, proposal_id: str, token: str, generation: int, lease_ms: int) -> RenewResult:
        """Extend a live lease: ``renewed`` or ``lost``."""
        return self._lease_step(
            renew_lease,
            proposal_id,
            token=token,
            generation=generation,
            lease_ms=lease_ms,
            clock=self.clock,
        )

    def settle(
        self,
        proposal_id: str,
        token: str,
        generation: int,
        outcome: str,
        result: Any = None,
        error: str | None = None,
    ) -> SettleResult:
        """Record the outcome under a live lease: ``settled`` or ``lost``."""

        def own(conn: Connection, r: SettleResult) -> SettleResult:  # after a lost connection
            mine = Settlement(proposal_id, token, generation, outcome, result, error)  # type: ignore[arg-type]
            return _own_settle(conn, mine, r)

        return self._step(
            self._steps,
            settle_proposal,
            own,
            proposal_id,
            token=token,
            generation=generation,
            outcome=outcome,
            result=result,
            error=error,
            clock=self.clock,
        )

    @overload
    def claim_next(self, worker_id: str, lease_ms: int, limit: None = None) -> ClaimResult: ...

    @overload
    def claim_next(
        self, worker_id: str, lease_ms: int, limit: int
    ) -> builtins.list[ClaimResult]: ...

    def claim_next(
        self, worker_id: str, lease_ms: int, limit: int | None = None
    ) -> ClaimResult | builtins.list[ClaimResult]:
        """Claim the most overdue work across scopes (privileged): one claim (outcome ``none``
        when nothing is due), or with ``limit`` a list of up to ``limit`` claims."""
        if limit is None:
            return self._lease_step(
                claim_next_proposal, worker_id=worker_id, lease_ms=lease_ms, clock=self.clock
            )
        return self._lease_step(
            claim_next_proposals,
            worker_id=worker_id,
            lease_ms=lease_ms,
            limit=limit,
            clock=self.clock,
        )

    def settle_many(self, settlements: Sequence[Settlement]) -> builtins.list[SettleResult]:
        """Record many outcomes at once, each fenced as ``settle``: one result per item."""
        return self._optimistic_step(
            settle_proposals,
            lambda conn, results: _own_settles(conn, settlements, results),
            settlements,
            clock=self.clock,
        )

    def settle_and_claim_next(
        self, settlement: Settlement, worker_id: str, lease_ms: int, limit: int = 1
    ) -> tuple[SettleResult, builtins.list[ClaimResult]]:
        """Settle one job and claim the next ``limit`` in one short transaction (on PostgreSQL
        both statements in one round trip, run by the server as one implicit transaction; on
        MySQL/MariaDB, with a held connection, two round trips and one commit)."""
        return self._optimistic_step(
            settle_and_claim_next,
            lambda conn, r: (_own_settle(conn, settlement, r[0]), r[1]),
            settlement,
            worker_id=worker_id,
            lease_ms=lease_ms,
            limit=limit,
            clock=self.clock,
        )

    def settle_many_and_claim_next(
        self,
        settlements: Sequence[Settlement],
        worker_id: str,
        lease_ms: int,
        limit: int,
    ) -> tuple[builtins.list[SettleResult], builtins.list[ClaimResult]]:
        """Record a batch of outcomes (each fenced as ``settle``) and claim the next ``limit``
        (1–1000) in one step: a batch worker's loop. On PostgreSQL both go in one round trip; on
        MySQL/MariaDB, with a held connection, in two round trips and one commit (where a
        ``settle_many`` and a ``claim_next`` take three and two)."""
        return self._optimistic_step(
            settle_proposals_and_claim_next,
            lambda conn, r: (_own_settles(conn, settlements, r[0]), r[1]),
            settlements,
            worker_id=worker_id,
            lease_ms=lease_ms,
            limit=limit,
            clock=self.clock,
        )

    def _optimistic_step(
        self,
        fn: Callable[..., R],
        after_loss: Callable[[Connection, R], R],
        *args: Any,
        **kwargs: Any,
    ) -> R:
        """A settling lease step (``_step``), first ``optimistic``; on ``BatchLost`` — on
        MySQL/MariaDB the one fenced UPDATE changed fewer rows than it settles (a lease was
        lost, or a keyed tenant's result must be sealed), and nothing was committed — again
        without, each lease checked on its own."""
        try:
            return self._step(self._steps, fn, after_loss, *args, optimistic=True, **kwargs)
        except BatchLost:
            return self._step(self._steps, fn, after_loss, *args, optimistic=False, **kwargs)

    def expire(self, limit: int = 100) -> int:
        """Expire a bounded batch (1–1000) of pending proposals past ``expires_at``."""
        return self._write(expire_proposals, limit=limit, clock=self.clock)

    def list_undelivered_outcomes(self, limit: int = 100) -> builtins.list[Proposal]:
        """List settled proposals whose outcome has not been delivered to their thread."""
        return self._read(list_undelivered_outcomes, limit=limit)

    def deliver_outcome(self, proposal_id: str, message_id: str) -> DeliveryResult:
        """Write a settled outcome to a message of its thread, exactly once."""
        return self._write(deliver_outcome, proposal_id, message_id=message_id, clock=self.clock)

    def backfill(self, limit: int = 500) -> BackfillResult:
        """Backfill one bounded batch of legacy rows in its own transaction."""
        return self._write(backfill_discovery_index, limit=limit)

    # --- the operator's acts, across scopes (privileged: operator tooling only) ---------------

    def resolve_any(
        self, text: str, tenant_ref: str | None = None
    ) -> tuple[ApprovalKind, str] | None:
        """What ``text`` (an id or a unique prefix) names in any scope (``tenant_ref``'s only,
        when given): a proposal or the runtime's tool-call approval; ``None`` for nothing."""
        return self._read(find_any_approval_id, text, tenant_ref=tenant_ref)

    def find_any_tool_call_approval(self, tool_call_id: str) -> ToolCallApproval | None:
        """The runtime's tool-call approval with this id, in any scope, or ``None``."""
        return self._read(find_any_tool_call_approval, tool_call_id)

    def events(self, proposal_id: str) -> builtins.list[ProposalEvent]:
        """The operator's acts on a proposal, oldest first (the newest 1,000)."""
        return self._read(list_proposal_events, proposal_id)

    def decide_as_operator(
        self, proposal_id: str, decision: str, decided_by: str, note: str | None = None
    ) -> DecideResult:
        """Decide the proposal with this full id in its own scope, as the operator; recorded."""
        return self._write(
            decide_as_operator, proposal_id, decision=decision, decided_by=decided_by,
            note=note, clock=self.clock,
        )  # fmt: skip

    def requeue(self, proposal_id: str, requeued_by: str, reason: str) -> RequeueResult:
        """Put a failed execution back in the queue for a new attempt; recorded."""
        return self._write(
            requeue_proposal, proposal_id, requeued_by=requeued_by, reason=reason,
            clock=self.clock,
        )  # fmt: skip

    def cancel(self, proposal_id: str, cancelled_by: str, reason: str) -> CancelResult:
        """Withdraw queued work so that it never runs; recorded."""
        return self._write(
            cancel_proposal, proposal_id, cancelled_by=cancelled_by, reason=reason,
            clock=self.clock,
        )  # fmt: skip


def _own_settle(conn: Connection, settlement: Settlement, result: SettleResult) -> SettleResult:
    """``result`` of a retried settle, ``settled`` when the try cut off by the loss committed."""
    return _own_settles(conn, [settlement], [result])[0]


def _own_settles(
    conn: Connection, settlements: Sequence[Settlement], results: builtins.list[SettleResult]
) -> builtins.list[SettleResult]:
    lost = [s for s, r in zip(settlements, results, strict=True) if r.outcome == "lost"]
    own = find_own_settles(conn, lost)
    return [
        SettleResult("settled") if s.proposal_id in own else r
        for s, r in zip(settlements, results, strict=True)
    ]
