"""What a proposal is: its states, the values it is made of, and the results of acting on it.

No SQL here: the dataclasses the store returns, the state and outcome literals, the input checks
every operation runs before any SQL, and the pure functions that derive ids and keys.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from binascii import b2a_base64
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal, TypeVar, get_args

from agora_cli.store._clock import Clock, SystemClock
from agora_cli.store._errors import Conflict, InvalidInput
from agora_cli.store._values import (
    BIGINT_MAX,
    check_identity,
    check_int,
    check_optional_identity,
    check_text,
    load_json,
    utf16_units,
)

__all__ = [
    "DECISIONS",
    "ID_PREFIX",
    "BackfillResult",
    "CancelOutcome",
    "CancelResult",
    "ClaimOutcome",
    "ClaimResult",
    "CreateOutcome",
    "CreateResult",
    "DecideOutcome",
    "DecideResult",
    "Decision",
    "DeliveryOutcome",
    "DeliveryResult",
    "DiscoveryState",
    "EventKind",
    "ExecutionState",
    "Lease",
    "NewProposal",
    "Proposal",
    "ProposalEvent",
    "RenewOutcome",
    "RenewResult",
    "RequeueOutcome",
    "RequeueResult",
    "Scope",
    "SettleOutcome",
    "SettleResult",
    "SettledState",
    "Settlement",
    "Work",
    "default_idempotency_key",
    "proposal_id",
]

Decision = Literal["pending", "approved", "rejected", "expired"]
# ``cancelled``: queued work an operator withdrew (``cancel_proposal``); it never runs.
ExecutionState = Literal["queued", "running", "succeeded", "failed", "cancelled"]
DiscoveryState = Literal["pending", "queued", "running", "done"]
SettledState = Literal["succeeded", "failed"]

CreateOutcome = Literal["created", "existing", "conflict"]
DecideOutcome = Literal["applied", "unchanged", "conflict", "expired", "not_found"]
ClaimOutcome = Literal["claimed", "recovered", "not_claimable", "not_found", "none"]
RenewOutcome = Literal["renewed", "lost"]
SettleOutcome = Literal["settled", "lost"]
DeliveryOutcome = Literal["delivered", "already_delivered", "not_settled", "not_found"]
RequeueOutcome = Literal["requeued", "not_failed", "not_found"]
# ``pending``: not decided yet (reject it instead); ``running``: under a live lease; ``stuck``:
# under a lease that ran out (the work may have run: claim_next recovers it); ``not_queued``:
# rejected, expired, or its work already settled; ``unchanged``: already cancelled.
CancelOutcome = Literal[
    "cancelled", "unchanged", "pending", "running", "stuck", "not_queued", "not_found"
]
# What an operator did to a proposal (``agent_action_proposal_event.kind``).
EventKind = Literal["operator_decision", "requeue", "cancel"]

ID_PREFIX = "ap_"
DECISIONS: tuple[Decision, ...] = get_args(Decision)
SETTLED_STATES: tuple[SettledState, ...] = get_args(SettledState)
MAX_LIST = 1000
MAX_BACKFILL_BATCH = 10_000
# An operator's reason for a requeue or a cancel, in UTF-16 code units (as identities are counted).
MAX_REASON_UNITS = 4096
# The newest operator acts ``list_proposal_events`` returns for one proposal.
MAX_EVENTS = 1000
# A fenced update loses only to a writer that changed the row; after a few rounds the row has
# left the state being raced for, so this bound is never reached in practice.
FENCE_ROUNDS = 16


# --- values -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scope:
    """Whose proposal it is: ``tenant_ref`` is ``None`` only for a proposal without a tenant."""

    tenant_ref: str | None
    actor_ref: str
    thread_id: str

    def __post_init__(self) -> None:
        check_optional_identity("tenant_ref", self.tenant_ref)
        check_identity("actor_ref", self.actor_ref)
        check_identity("thread_id", self.thread_id)


@dataclass(frozen=True)
class NewProposal:
    """What a runtime proposes; ``id`` and ``idempotency_key`` derive from the run and call."""

    scope: Scope
    tool_name: str
    input: Any
    card: Any = None
    run_id: str | None = None
    tool_call_id: str | None = None
    id: str | None = None
    idempotency_key: str | None = None
    expires_at: int | None = None


@dataclass(frozen=True)
class Proposal:
    """One proposal as stored; ``input``, ``card`` and ``result`` are JSON text (opened when
    sealed). No lease token."""

    id: str
    idempotency_key: str
    tenant_ref: str | None
    actor_ref: str
    thread_id: str
    run_id: str | None
    tool_call_id: str | None
    tool_name: str
    input: str
    card: str | None
    decision: Decision
    decided_by: str | None
    decided_at: int | None
    decision_note: str | None
    expires_at: int | None
    execution_state: ExecutionState | None
    lease_owner: str | None
    lease_expires_at: int | None
    generation: int
    attempts: int
    result: str | None
    error: str | None
    settled_at: int | None
    version: int
    created_at: int
    updated_at: int
    discovery_state: DiscoveryState | None
    discovery_at: int | None
    outcome_delivered_at: int | None
    outcome_message_id: str | None
    # how input, card and result read (``sealing.Opened`` states): "plain", "opened", "locked"
    # (no KEK: ``[sealed]`` in their place), "broken" or "shredded"; not a column
    seal_state: str = "plain"

    @property
    def scope(self) -> Scope:
        return Scope(self.tenant_ref, self.actor_ref, self.thread_id)

    @property
    def input_value(self) -> Any:
        return load_json(self.input)

    @property
    def card_value(self) -> Any:
        return load_json(self.card)

    @property
    def result_value(self) -> Any:
        return load_json(self.result)


PROPOSAL_FIELDS = tuple(f.name for f in fields(Proposal) if f.name != "seal_state")


@dataclass(frozen=True)
class Lease:
    """A lease as issued: the token is shown here once and stored only as its SHA-256."""

    token: str
    generation: int
    expires_at: int


@dataclass(frozen=True)
class Work:
    """What a worker needs to execute a claimed proposal: no audit, no lease token."""

    id: str
    idempotency_key: str
    tenant_ref: str | None
    actor_ref: str
    thread_id: str
    run_id: str | None
    tool_call_id: str | None
    tool_name: str
    input: str
    attempts: int

    @property
    def input_value(self) -> Any:
        return load_json(self.input)


WORK_FIELDS = tuple(f.name for f in fields(Work))

_D = TypeVar("_D")


def fast_maker(cls: type[_D]) -> Callable[..., _D]:
    """A constructor of the frozen dataclass ``cls`` for a worker's hot path: the object
    ``cls(*values)`` makes (every field given, in order), without ``__init__``'s
    ``object.__setattr__`` for each field — a batch of claims builds three objects a job.

    Generated as ``dataclasses`` generates ``__init__`` (one function with the fields as its
    parameters, filling the instance's ``__dict__`` with one dict display): a third of the cost
    of filling it from ``zip``. The source is built from the field names alone.
    """
    names = tuple(f.name for f in fields(cls))  # type: ignore[arg-type]
    if not all(name.isidentifier() and not name.startswith("_") for name in names):
        raise TypeError(f"fast_maker: {cls.__name__} has a field that is not a plain name")
    params = ", ".join(names)
    entries = ", ".join(f"{name!r}: {name}" for name in names)
    source = (
        f"def make({params}):\n"
        "    made = new(cls)\n"
        f"    made.__dict__.update({{{entries}}})\n"
        "    return made\n"
    )
    scope: dict[str, Any] = {"new": object.__new__, "cls": cls}
    exec(source, scope)  # the source holds field names checked as identifiers
    make: Callable[..., _D] = scope["make"]
    make.__qualname__ = f"fast_maker({cls.__name__})"
    return make


def claim_maker(columns: Sequence[str]) -> Callable[[str, int, Sequence[Any]], ClaimResult]:
    """``make(token, expires_at, row)``: the claim of a due ``row`` (a sequence of ``columns``,
    which name each of ``Work``'s fields, ``generation`` and ``discovery_state``) under a lease
    of ``token`` — the row's ``generation`` and ``attempts`` each one more, ``recovered`` if it
    was ``running`` — the three objects built in one call as ``fast_maker`` builds each (a batch
    of claims makes three a job). Generated from the field names and their positions alone."""
    at = {name: n for n, name in enumerate(columns)}
    names = (*WORK_FIELDS, "generation", "discovery_state")
    missing = [name for name in names if name not in at]
    if missing or tuple(f.name for f in fields(Lease)) != ("token", "generation", "expires_at"):
        raise TypeError(f"claim_maker: the row lacks {missing} or Lease changed")
    if tuple(f.name for f in fields(ClaimResult)) != ("outcome", "lease", "work"):
        raise TypeError("claim_maker: ClaimResult changed")
    work = ", ".join(
        f"{name!r}: row[{at[name]}]" + (" + 1" if name == "attempts" else "")
        for name in WORK_FIELDS
    )
    source = (
        "def make(token, expires_at, row):\n"
        "    work = new(Work)\n"
        f"    put(work, '__dict__', {{{work}}})\n"
        "    lease = new(Lease)\n"
        "    put(lease, '__dict__', {'token': token, "
        f"'generation': row[{at['generation']}] + 1, 'expires_at': expires_at}})\n"
        "    claim = new(ClaimResult)\n"
        f"    outcome = 'recovered' if row[{at['discovery_state']}] == 'running' else 'claimed'\n"
        "    put(claim, '__dict__', {'outcome': outcome, 'lease': lease, 'work': work})\n"
        "    return claim\n"
    )
    scope: dict[str, Any] = {
        "new": object.__new__,
        "put": _set_attribute,
        "Work": Work,
        "Lease": Lease,
        "ClaimResult": ClaimResult,
    }
    exec(source, scope)  # the source holds field names checked as identifiers, and integers
    make: Callable[[str, int, Sequence[Any]], ClaimResult] = scope["make"]
    return make


@dataclass(frozen=True)
class ProposalEvent:
    """One operator act on a proposal (``agent_action_proposal_event``): who, when (the store's
    clock), why, and for ``requeue`` and ``cancel`` the execution as it stood before the act.

    ``prior_result`` is the proposal's ``result`` as it was stored (opened as the proposal's own
    result when sealed; ``list_proposal_events`` opens it).
    """

    id: str
    proposal_id: str
    tenant_ref: str | None
    kind: EventKind
    acted_by: str
    reason: str | None
    decision: Decision | None
    prior_execution_state: ExecutionState | None
    prior_attempts: int | None
    prior_generation: int | None
    prior_lease_owner: str | None
    prior_result: str | None
    prior_error: str | None
    prior_settled_at: int | None
    prior_outcome_delivered_at: int | None
    prior_outcome_message_id: str | None
    created_at: int

    @property
    def prior_result_value(self) -> Any:
        return load_json(self.prior_result)


EVENT_FIELDS = tuple(f.name for f in fields(ProposalEvent))


# --- results ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CreateResult:
    """``created``, ``existing`` (same key and content) or ``conflict`` (the one that exists)."""

    outcome: CreateOutcome
    proposal: Proposal


@dataclass(frozen=True)
class DecideResult:
    """The outcome of a decision and the proposal as it now stands (``None``: not found)."""

    outcome: DecideOutcome
    proposal: Proposal | None


@dataclass(frozen=True)
class RequeueResult:
    """The outcome of a requeue and the proposal as it now stands (``None``: not found)."""

    outcome: RequeueOutcome
    proposal: Proposal | None


@dataclass(frozen=True)
class CancelResult:
    """The outcome of a cancel and the proposal as it now stands (``None``: not found)."""

    outcome: CancelOutcome
    proposal: Proposal | None


@dataclass(frozen=True)
class ClaimResult:
    """The outcome of a claim; ``lease`` and ``work`` only when ``claimed`` or ``recovered``."""

    outcome: ClaimOutcome
    lease: Lease | None
    work: Work | None


@dataclass(frozen=True)
class RenewResult:
    """``renewed`` with the new lease expiry, or ``lost``."""

    outcome: RenewOutcome
    expires_at: int | None


@dataclass(frozen=True)
class SettleResult:
    """``settled`` or ``lost``."""

    outcome: SettleOutcome


@dataclass(frozen=True)
class DeliveryResult:
    """The outcome of admitting a settled proposal's outcome into its thread."""

    outcome: DeliveryOutcome
    message_id: str | None


@dataclass(frozen=True, init=False)
class Settlement:
    """One outcome to record under a lease, for ``settle_proposals`` (a batched settle)."""

    proposal_id: str
    token: str
    generation: int
    outcome: SettledState
    result: Any = None
    error: str | None = None

    def __init__(
        self,
        proposal_id: str,
        token: str,
        generation: int,
        outcome: SettledState,
        result: Any = None,
        error: str | None = None,
    ) -> None:
        # A batch worker makes one a job: the frozen instance's fields set as one dict, where
        # the generated ``__init__`` sets each through ``object.__setattr__`` (0.8 -> 0.4 µs)
        _set_attribute(
            self,
            "__dict__",
            {
                "proposal_id": proposal_id,
                "token": token,
                "generation": generation,
                "outcome": outcome,
                "result": result,
                "error": error,
            },
        )


_set_attribute = object.__setattr__


@dataclass(frozen=True)
class BackfillResult:
    """How many legacy rows one backfill batch filled, and how many remain.

    ``remaining`` is ``None`` when the caller asked not to count (``count_remaining=False``) and
    the batch was full, so that more may remain.
    """

    backfilled: int
    remaining: int | None


# --- ids, keys and checks ---------------------------------------------------------------------


def proposal_id(run_id: str, tool_call_id: str) -> str:
    """Return the deterministic id of the proposal for one tool call of one run."""
    check_identity("run_id", run_id)
    check_identity("tool_call_id", tool_call_id)
    # A JSON pair, so that ("a:b", "c") and ("a", "b:c") never share a digest.
    digest = hashlib.sha256(json.dumps([run_id, tool_call_id]).encode()).hexdigest()
    return ID_PREFIX + digest


def default_idempotency_key(run_id: str, tool_call_id: str) -> str:
    """Return the default idempotency key, ``run_id:tool_call_id``."""
    return check_identity("idempotency_key", f"{run_id}:{tool_call_id}")


def new_tokens(n: int) -> list[str]:
    """``n`` lease tokens, each of ``secrets.token_urlsafe(32)``'s kind — 43 characters of the
    base64url alphabet — from one read of the system's random source: a batch of claims asks it
    once. Each token is the first 43 characters of the encoding of its own 33 random bytes (33
    is a multiple of 3: the batch's bytes are encoded at once and each token's characters are
    its own bytes' alone), so it carries 258 random bits, where ``token_urlsafe(32)`` has 256."""
    text = b2a_base64(os.urandom(_TOKEN_BYTES * n), newline=False)
    chars = text.translate(_URLSAFE).decode("ascii")
    return [chars[i : i + _TOKEN_CHARS] for i in range(0, _TOKEN_STRIDE * n, _TOKEN_STRIDE)]


_TOKEN_BYTES, _TOKEN_STRIDE, _TOKEN_CHARS = 33, 44, 43  # 33 bytes encode as 44 characters
_URLSAFE = bytes.maketrans(b"+/", b"-_")


def _sha256_hex(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


token_hash: Callable[[str], str] = functools.lru_cache(maxsize=4096)(_sha256_hex)
"""The SHA-256 (hex) of a lease token: the only form of it the store keeps.

The last 4,096 tokens hashed are remembered with their hashes (a worker's settle of a batch
hashes the tokens its claim hashed a moment before). They are this process's own leases, which
the worker holds anyway; nothing is kept across processes or written anywhere. A token must be
a ``str`` (``check_lease`` first)."""


def clock_or_system(clock: Clock | None) -> Clock:
    return clock if clock is not None else SystemClock()


def check_limit(limit: object, high: int = MAX_LIST) -> int:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= high:
        raise InvalidInput(f"limit must be an integer from 1 to {high}, not {limit!r}")
    return limit


def check_lease(token: object, generation: object) -> None:
    """A lease as a caller presents it: a token and a generation within ``BIGINT``.

    Its fast path is also inlined in ``leases._checked_settlements``;
    ``tests/store/test_settle_checks.py`` holds the two to the same answers."""
    if not isinstance(token, str) or not token:
        raise InvalidInput("the lease token must be a non-empty string")
    if not (token.isascii() and "\x00" not in token):  # an issued token is ASCII: no encoding
        check_text("the lease token", token)
    if type(generation) is not int or not 1 <= generation <= BIGINT_MAX:  # else no call
        check_int("generation", generation, low=1, high=BIGINT_MAX)


def check_decision_filter(decision: str | None) -> None:
    if decision is not None and decision not in DECISIONS:
        raise InvalidInput(f"decision must be one of {', '.join(DECISIONS)}, not {decision!r}")


def check_decide(decision: str, decided_by: str, note: str | None) -> None:
    if decision not in ("approved", "rejected"):
        raise InvalidInput(f"decision must be approved or rejected, not {decision!r}")
    check_identity("decided_by", decided_by)
    if note is not None:
        check_text("note", note)


def check_operator_act(by_name: str, by: object, reason: object) -> None:
    """An operator's identity and reason for a requeue or a cancel: ``by`` an identity, ``reason``
    text of at most ``MAX_REASON_UNITS`` UTF-16 code units (not blank)."""
    check_identity(by_name, by)
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidInput("reason must be a non-empty string (not blank)", param="reason")
    check_text("reason", reason)
    units = utf16_units(reason)
    if units > MAX_REASON_UNITS:
        raise InvalidInput(
            f"reason is {units} UTF-16 code units long; the limit is {MAX_REASON_UNITS}",
            param="reason",
        )


def check_settle(outcome: str, error: str | None) -> None:
    if outcome not in SETTLED_STATES:
        raise InvalidInput(f"outcome must be succeeded or failed, not {outcome!r}")
    if error is not None:
        check_text("error", error)


def raced_too_often(pid: str) -> Conflict:
    return Conflict(f"proposal {pid!r} kept changing under concurrent writers; try again")
