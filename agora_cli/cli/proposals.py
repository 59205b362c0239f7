"""`agora proposals`: inspect and decide action proposals; the privileged worker side.

Scoped commands take the whole scope — ``--actor A --thread T`` and exactly one of ``--tenant T``
or ``--no-tenant`` — and a proposal outside it looks exactly like a missing one. A lease token is
printed only by the claim that issued it.
"""

from __future__ import annotations

# internal on purpose: the operator's commands import the store's private modules (cli/__init__.py)
import enum
import functools
import inspect
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agora_cli.cli.options import (
    CsvOpt,
    DbOpt,
    JsonOpt,
    ReadDbOpt,
    TzOpt,
    open_db,
    open_read_db,
    refuse_unscoped,
    scoped_tenant,
)
from agora_cli.cli.output import (
    Col,
    finish,
    one_format,
    render_table,
    say,
    short_ids,
    table_time,
)
from agora_cli.cli.proposal_views import (
    DECIDED_IN_THE_APP,
    INBOX_CSV,
    LIST_CSV,
    cancel_sentence,
    claim_document,
    inbox_item,
    inbox_notes,
    inbox_tool_call,
    print_claim,
    print_claims,
    proposal_document,
    render_inbox,
    requeue_sentence,
    show_proposal,
    show_tool_call,
    shown_document,
    tool_call_document,
)
from agora_cli.cli.review import review
from agora_cli.store._clock import iso_ms, parse_duration, parse_instant
from agora_cli.store._errors import InvalidInput
from agora_cli.store._values import BIGINT_MAX, MAX_CLAIM_BATCH, MAX_LEASE_MS, parse_json

if TYPE_CHECKING:
    from agora_cli.store._proposals import (
        ActionProposalStore,
        NewProposal,
        Proposal,
        ProposalEvent,
        Scope,
    )

app = typer.Typer(
    help="Inspect and decide action proposals; the privileged worker side.",
    no_args_is_help=True,
)

ActorOpt = Annotated[
    str | None,
    typer.Option("--actor", help="Scope: the actor the proposal belongs to.", show_default=False),
]
ThreadOpt = Annotated[
    str | None,
    typer.Option("--thread", help="Scope: the proposal's thread id.", show_default=False),
]
TenantOpt = Annotated[
    str | None,
    typer.Option("--tenant", help="Scope: the tenant (or --no-tenant).", show_default=False),
]
NoTenantOpt = Annotated[
    bool, typer.Option("--no-tenant", help="Scope: the proposal has no tenant (NULL).")
]
IdArg = Annotated[
    str,
    typer.Argument(
        help="The proposal id, or a unique prefix of it (8+ characters) within the scope.",
        show_default=False,
        metavar="ID",
    ),
]
ApprovalIdArg = Annotated[
    str,
    typer.Argument(
        help="The proposal id, or the runtime's tool call id of an approval, or a unique prefix "
        "of either (8+ characters) within the scope.",
        show_default=False,
        metavar="ID",
    ),
]
LimitOpt = Annotated[int, typer.Option("--limit", min=1, max=1000, help="At most N (1-1000).")]
LeaseOpt = Annotated[
    int,
    typer.Option(
        "--lease-ms",
        min=1,
        max=MAX_LEASE_MS,
        help="Lease length in milliseconds (1 to 604800000: at most 7 days).",
        metavar="N",
    ),
]
TokenOpt = Annotated[
    str,
    typer.Option(
        "--token",
        help="The lease token the claim printed.",
        envvar="AGORA_LEASE_TOKEN",
        show_default=False,
        show_envvar=True,
    ),
]
GenerationOpt = Annotated[
    int,
    typer.Option(
        "--generation", min=1, max=BIGINT_MAX, help="The lease generation the claim printed."
    ),
]

DEFAULT_LEASE_MS = 30_000
MAX_DOCUMENT_BYTES = 16 * 2**20


# --- parse ------------------------------------------------------------------------------------


def _scope(actor: str | None, thread: str | None, tenant: str | None, no_tenant: bool) -> Scope:
    from agora_cli.store._proposals import Scope

    if actor is None or thread is None or (tenant is None) == (not no_tenant):
        raise InvalidInput(
            "this command needs the whole scope: --actor A --thread T and exactly one of "
            "--tenant T or --no-tenant"
        )
    if no_tenant:
        refuse_unscoped("--no-tenant")
    else:
        scoped_tenant(tenant)  # the session tenant's scope only
    return Scope(None if no_tenant else tenant, actor, thread)


_SCOPE_OPTIONS = (
    ("actor", ActorOpt, None),
    ("thread", ThreadOpt, None),
    ("tenant", TenantOpt, None),
    ("no_tenant", NoTenantOpt, False),
)


def _scope_or_none(
    actor: str | None, thread: str | None, tenant: str | None, no_tenant: bool
) -> Scope | None:
    """The scope given, or ``None`` when no scope option was given at all (an operator's act
    across scopes); part of a scope is exit 2."""
    if actor is None and thread is None and tenant is None and not no_tenant:
        return None
    if actor is None or thread is None or (tenant is None) == (not no_tenant):
        raise InvalidInput(
            "give the whole scope — --actor A --thread T and exactly one of --tenant T or "
            "--no-tenant — or none of it (an operator decision, across scopes)"
        )
    return _scope(actor, thread, tenant, no_tenant)


def optionally_scoped(command: Callable[..., None]) -> Callable[..., None]:
    """``scoped``, where no scope option at all calls ``command`` with ``scope=None``."""
    return scoped(command, optional=True)


def scoped(command: Callable[..., None], *, optional: bool = False) -> Callable[..., None]:
    """Give ``command`` the four scope options, written once, and call it with ``scope=Scope``.

    The options follow the command's own parameters in ``--help``; missing scope is exit 2
    (``optional``: no scope option at all is ``scope=None``, part of one exit 2).
    """
    # The command's own annotations are strings (``from __future__ import annotations``);
    # evaluate all but ``scope``, whose type is imported for type checking only (it is the
    # store's, and the store loads SQLAlchemy).
    signature = inspect.signature(command)
    own = [
        p.replace(annotation=eval(p.annotation, command.__globals__))
        if isinstance(p.annotation, str)
        else p
        for p in signature.parameters.values()
        if p.name != "scope"
    ]
    options = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=kind)
        for name, kind, default in _SCOPE_OPTIONS
    ]

    @functools.wraps(command)
    def with_scope(**kwargs: Any) -> None:
        parts = [kwargs.pop(name) for name, _, _ in _SCOPE_OPTIONS]
        command(**kwargs, scope=_scope_or_none(*parts) if optional else _scope(*parts))

    with_scope.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*own, *options]
    )
    with_scope.__annotations__ = {p.name: p.annotation for p in [*own, *options]}
    return with_scope


def _one_of(what: str, **flags: bool) -> str:
    chosen = [name for name, on in flags.items() if on]
    if len(chosen) != 1:
        raise InvalidInput(f"give exactly one of {' / '.join('--' + f for f in flags)} ({what})")
    return chosen[0]


def _read_document(path: str) -> Any:

    source = "standard input" if path == "-" else repr(path)
    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_DOCUMENT_BYTES + 1)
        else:
            with open(path, "rb") as handle:
                data = handle.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as exc:
        raise InvalidInput(f"cannot read {source}: {exc.strerror or exc}") from None
    if len(data) > MAX_DOCUMENT_BYTES:
        raise InvalidInput(f"{source} is larger than {MAX_DOCUMENT_BYTES // 2**20} MiB")
    return parse_json(source, data)


_CREATE_REQUIRED = ("tenant_ref", "actor_ref", "thread_id", "tool_name", "input")
_CREATE_KEYS = frozenset(
    (*_CREATE_REQUIRED, "id", "idempotency_key", "run_id", "tool_call_id", "card", "expires_at")
)


def _new_proposal(doc: Any) -> NewProposal:
    """Turn the ``create`` JSON document into a ``NewProposal`` (``InvalidInput`` if malformed)."""
    from agora_cli.store._proposals import NewProposal, Scope

    if not isinstance(doc, dict):
        raise InvalidInput("the proposal document must be a JSON object")
    unknown = sorted(set(doc) - _CREATE_KEYS)
    if unknown:
        raise InvalidInput(f"unknown key(s) in the proposal document: {', '.join(unknown)}")
    missing = [key for key in _CREATE_REQUIRED if key not in doc]
    if missing:
        raise InvalidInput(
            f"the proposal document lacks {', '.join(missing)} "
            "(tenant_ref may be null, but must be given)"
        )
    for key in ("id", "idempotency_key", "run_id", "tool_call_id", "actor_ref", "thread_id"):
        if doc.get(key) is not None and not isinstance(doc[key], str):
            raise InvalidInput(f"{key} must be a string")
    if doc["tenant_ref"] is not None and not isinstance(doc["tenant_ref"], str):
        raise InvalidInput("tenant_ref must be a string or null")
    expires = doc.get("expires_at")
    if expires is not None and not isinstance(expires, str):
        raise InvalidInput("expires_at must be an ISO 8601 time such as 2026-11-29T12:00:00Z")
    return NewProposal(
        scope=Scope(doc["tenant_ref"], doc["actor_ref"], doc["thread_id"]),
        tool_name=doc["tool_name"],
        input=doc["input"],
        card=doc.get("card"),
        run_id=doc.get("run_id"),
        tool_call_id=doc.get("tool_call_id"),
        id=doc.get("id"),
        idempotency_key=doc.get("idempotency_key"),
        expires_at=None if expires is None else parse_instant(expires, what="expires_at"),
    )


def _parse_result(text: str | None) -> Any:

    return None if text is None else parse_json("--result", text)


def _store(db: str | None, tenant: str | None = None) -> ActionProposalStore:
    """The store; ``tenant`` (a scope's or ``--tenant``) sets ``agora.tenant`` for RLS."""
    from agora_cli.store._proposals import ActionProposalStore

    return ActionProposalStore(open_db(db, tenant=tenant))


def _read_store(
    db: str | None, read_db: str | None, tenant: str | None = None
) -> ActionProposalStore:
    """The store over the read database, when there is one (``open_read_db``): for reads only."""
    from agora_cli.store._proposals import ActionProposalStore

    return ActionProposalStore(open_read_db(db, read_db, tenant=tenant))


# Closed sets as choices, so that --help lists them and the shell completes them. Spelled out
# here (the store's constants live beside SQLAlchemy, which --help must not import); a test
# holds them equal to the store's INBOX_STATES and DECISIONS.
INBOX_STATE_CHOICES = ("pending", "queued", "running", "failed")
DECISION_CHOICES = ("pending", "approved", "rejected", "expired")
InboxStateChoice = enum.StrEnum(  # type: ignore[misc]
    "InboxStateChoice", {v: v for v in INBOX_STATE_CHOICES}
)
DecisionChoice = enum.StrEnum("DecisionChoice", {v: v for v in DECISION_CHOICES})  # type: ignore[misc]


@app.command("inbox")
def inbox(
    state: Annotated[
        InboxStateChoice,
        typer.Option(
            "--state",
            help="pending (waiting for a decision), or approved work: queued, running, failed.",
            case_sensitive=False,
        ),
    ] = InboxStateChoice("pending"),
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="Only this tenant's.", show_default=False)
    ] = None,
    actor: Annotated[
        str | None, typer.Option("--actor", help="Only this actor's.", show_default=False)
    ] = None,
    tool: Annotated[
        str | None, typer.Option("--tool", help="Only this tool's.", show_default=False)
    ] = None,
    expiring_within: Annotated[
        str | None,
        typer.Option(
            "--expiring-within",
            metavar="DURATION",
            help="Only pending ones that expire within 90s, 30m, 1h, 2d, 1w… (m: minutes).",
            show_default=False,
        ),
    ] = None,
    limit: LimitOpt = 50,
    tz: TzOpt = "UTC",
    db: DbOpt = None,
    read_db: ReadDbOpt = None,
    as_json: JsonOpt = False,
    csv: CsvOpt = False,
) -> None:
    """What waits for a decision across every scope, soonest to expire first (privileged).

    Proposals first, then the runtime's own approvals (kind tool_call: tool calls left
    pending_approval), oldest first. --state queued|running|failed lists approved work by
    execution state instead; a running proposal whose lease has expired is STUCK (its worker
    died: claim-next recovers it). Proposals written before the discovery index existed are
    counted, never scanned: agora db backfill fills them in. Decide a proposal with agora
    proposals decide ID --approve|--reject --by WHO, ID its short id (no scope needed: an
    operator decision); requeue failed work with agora proposals requeue, cancel queued work
    with agora proposals cancel. A tool call is decided in the app, where its run waits.

    Example: agora proposals inbox --expiring-within 7d
    """
    one_format(as_json, csv)
    chosen = str(state.value)
    within = (
        None
        if expiring_within is None
        else parse_duration(expiring_within, what="--expiring-within")
    )
    if within is not None and chosen != "pending":
        raise InvalidInput("--expiring-within applies to --state pending only")
    tenant = scoped_tenant(tenant)
    page = _read_store(db, read_db, tenant).inbox(
        chosen,  # type: ignore[arg-type]  # one of INBOX_STATES: a choice
        tenant_ref=tenant,
        actor_ref=actor,
        tool_name=tool,
        expiring_within_ms=within,
        limit=limit,
    )
    items = [inbox_item(e.proposal, e.stuck) for e in page.entries]
    items += [inbox_tool_call(c) for c in page.tool_calls]
    finish(
        {
            "state": page.state,
            "now": iso_ms(page.now),
            "proposals": items,
            "more": page.more,
            "past_expiry": page.past_expiry,
            "legacy": page.legacy,
        },
        as_json=as_json,
        csv=(items, INBOX_CSV) if csv else None,
        show=lambda: render_inbox(page),
    )
    if not as_json:
        for note in inbox_notes(page, limit):
            say(f"note: {note}", style="yellow")


app.command("review")(review)  # the interactive walk: cli/review.py


@app.command("list")
@scoped
def list_(
    scope: Scope,
    decision: Annotated[
        DecisionChoice | None,
        typer.Option("--decision", help="Only this decision.", case_sensitive=False),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", help="At most N (1-1000).")] = 100,
    tz: TzOpt = "UTC",
    db: DbOpt = None,
    read_db: ReadDbOpt = None,
    as_json: JsonOpt = False,
    csv: CsvOpt = False,
) -> None:
    """List a scope's proposals, newest first, with their audit and execution state.

    Example: agora proposals list --actor bob --thread demo-thread-05 --tenant acme
    --decision pending
    """
    one_format(as_json, csv)
    chosen = None if decision is None else str(decision.value)
    proposals = [
        proposal_document(p)
        for p in _read_store(db, read_db, scope.tenant_ref).list(scope, chosen, limit)
    ]
    ids = short_ids([p["id"] for p in proposals])
    finish(
        {"proposals": proposals},
        as_json=as_json,
        csv=(proposals, LIST_CSV) if csv else None,
        show=lambda: render_table(
            [
                {**p, "id": ids[p["id"]], "created_at": table_time(p["created_at"])}
                for p in proposals
            ],
            [
                Col("id", wrap=False),
                Col("tool_name", "tool"),
                Col("decision", wrap=False),
                Col("decided_by", "by", drop=2),
                Col("execution_state", "execution", drop=3),
                Col("created_at", "created (UTC)", wrap=False, drop=1),
            ],
            empty="no proposals in that scope",
            fuller="--json",
        ),
    )


@app.command("show")
@scoped
def show(
    proposal_id: ApprovalIdArg,
    scope: Scope,
    db: DbOpt = None,
    read_db: ReadDbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show one proposal with its input, card and audit; exit 1 if it is not in that scope.

    ID may be a unique prefix (8+ characters) of the id, resolved within the scope only. A
    runtime's tool-call approval (kind tool_call in the inbox) shows its tool, input, thread,
    run, actor, tenant, requested time and status; its scope is its thread's tenant, its run's
    actor (else the thread's) and its thread.

    Example: agora proposals show ap_c16786a6 --actor bob --thread demo-thread-05 --tenant acme
    """
    store = _read_store(db, read_db, scope.tenant_ref)
    kind, found = store.resolve_approval(proposal_id, scope)
    if kind == "tool_call":
        call = store.get_tool_call_approval(found, scope)
        finish(tool_call_document(call), as_json=as_json, show=lambda: show_tool_call(call))
        if call.pending and not as_json:
            say(f"note: this is the runtime's own approval; {DECIDED_IN_THE_APP}", style="yellow")
        return
    proposal = store.get(found, scope)
    events = store.events(proposal.id)
    finish(
        shown_document(proposal, events),
        as_json=as_json,
        show=lambda: show_proposal(proposal, events),
    )


ByOpt = Annotated[
    str,
    typer.Option(
        "--by",
        help="Who does it (an operator already authorised): recorded with it.",
        show_default=False,
        metavar="WHO",
    ),
]
ReasonOpt = Annotated[
    str,
    typer.Option(
        "--reason",
        help="Why, for the history (up to 4,096 characters).",
        show_default=False,
        metavar="TEXT",
    ),
]
AnyIdArg = Annotated[
    str,
    typer.Argument(
        help="The proposal id, or a unique prefix of it (8+ characters), in any scope (the "
        "session tenant's only, when one is set): the short id the inbox shows.",
        show_default=False,
        metavar="ID",
    ),
]


DecideIdArg = Annotated[
    str,
    typer.Argument(
        help="The proposal id, or the runtime's tool call id of an approval, or a unique prefix "
        "of either (8+ characters): within the scope given, else across scopes (the short id "
        "the inbox shows).",
        show_default=False,
        metavar="ID",
    ),
]
DecideByOpt = Annotated[
    str,
    typer.Option(
        "--by",
        help="Who decides (already authorised): recorded with the decision.",
        show_default=False,
        metavar="WHO",
    ),
]


@app.command("decide")
@optionally_scoped
def decide(
    proposal_id: DecideIdArg,
    scope: Scope | None,
    by: DecideByOpt,
    approve: Annotated[bool, typer.Option("--approve", help="Approve it.")] = False,
    reject: Annotated[bool, typer.Option("--reject", help="Reject it.")] = False,
    note: Annotated[
        str | None, typer.Option("--note", help="A note for the audit.", show_default=False)
    ] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Approve or reject a pending proposal; exit 0 if applied or unchanged, else 1.

    An approval queues the work for a worker. The decision time is the clock's, never an option.
    Without scope options it is an operator decision (privileged, like the inbox): ID is
    resolved across scopes — the short id the inbox shows — and the proposal is decided in its
    own scope; the decision is recorded in its history as an operator decision. With the scope
    (all of it) ID is resolved within that scope only, and a proposal outside it is not_found.
    A runtime's tool-call approval is refused (exit 2, nothing written): its run waits on the
    app's AgentService.approve/reject, not on the database, so decide it in the app.

    Example: agora proposals decide ap_91583097e --reject --by ops-lead --note "not a customer"
    """
    choice = _one_of("the decision", approve=approve, reject=reject)
    from agora_cli.store._proposals import refuse_tool_call_decision

    decision = "approved" if choice == "approve" else "rejected"
    if scope is None:
        tenant = scoped_tenant(None)  # the session tenant's proposals only, when one is set
        store = _store(db, tenant)
        target = store.resolve_any(proposal_id, tenant)
        if target is not None and target[0] == "tool_call":
            call = store.find_any_tool_call_approval(target[1])
            if call is not None:
                refuse_tool_call_decision(call)
        if target is None or target[0] == "tool_call":
            result = None
        else:
            result = store.decide_as_operator(target[1], decision, by, note)
        where = ""
    else:
        store = _store(db, scope.tenant_ref)
        kind, found = store.resolve_approval(proposal_id, scope)
        if kind == "tool_call":
            refuse_tool_call_decision(store.get_tool_call_approval(found, scope))
        result = store.decide(found, scope, decision, by, note)
        where = " in that scope"
    outcome = "not_found" if result is None else result.outcome
    p = None if result is None or result.proposal is None else proposal_document(result.proposal)
    if p is None:
        said = f"not_found: no proposal {proposal_id}{where}."
    else:
        said = f"{outcome}: {p['id']} is {p['decision']}" + (
            f" (by {p['decided_by']} at {p['decided_at']})" if p["decided_by"] else ""
        )
        if scope is None and outcome == "applied":
            said += "; recorded in its history as an operator decision"
    finish(
        {"outcome": outcome, "proposal": p},
        as_json=as_json,
        show=said,
        exit_code=0 if outcome in ("applied", "unchanged") else 1,
    )


def _operator_target(store: ActionProposalStore, text: str, what: str) -> str | None:
    """The full id of the proposal ``text`` names in any scope (the session tenant's only), or
    ``None``; the runtime's tool-call approval is refused (exit 2): the runtime executes it."""
    target = store.resolve_any(text, scoped_tenant(None))
    if target is None:
        return None
    kind, found = target
    if kind == "tool_call":
        raise InvalidInput(
            f"tool call {found} is the runtime's own approval, not a proposal: the runtime "
            f"executes it, so agora cannot {what} it; nothing was written"
        )
    return found


def _operator_document(
    outcome: str, proposal: Proposal | None, events: list[ProposalEvent]
) -> dict[str, Any]:
    return {
        "outcome": outcome,
        "proposal": None if proposal is None else shown_document(proposal, events),
    }


@app.command("requeue")
def requeue(
    proposal_id: AnyIdArg,
    by: ByOpt,
    reason: ReasonOpt,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Put a failed execution back in the queue for a new attempt (privileged); exit 0 if
    requeued, else 1.

    Only approved work settled as failed (agora proposals inbox --state failed) is requeued:
    its lease and outcome are cleared and the next claim is a new attempt, with the same
    idempotency key. The failed attempt (result, error, attempts, settled_at) is kept in the
    proposal's history with who, when and why. Anything else is not_failed, and nothing is
    written.

    Example: agora proposals requeue ap_3a06e9908 --by ops-lead --reason "refunds-api is back"
    """
    store = _store(db, scoped_tenant(None))
    found = _operator_target(store, proposal_id, "requeue")
    result = None if found is None else store.requeue(found, by, reason)
    proposal = None if result is None else result.proposal
    events = [] if proposal is None else store.events(proposal.id)
    outcome = "not_found" if result is None else result.outcome
    finish(
        _operator_document(outcome, proposal, events),
        as_json=as_json,
        show=requeue_sentence(outcome, proposal, proposal_id),
        exit_code=0 if outcome == "requeued" else 1,
    )


@app.command("cancel")
def cancel(
    proposal_id: AnyIdArg,
    by: ByOpt,
    reason: ReasonOpt,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Withdraw approved work that waits for a worker, so that it never runs (privileged); exit
    0 if cancelled or already cancelled, else 1.

    Queued work (agora proposals inbox --state queued) becomes cancelled: no claim takes it
    again, and the cancel is in its history with who, when and why. Refused, nothing written:
    running work (a live lease: the worker and its lease are named), stuck work (a lease that
    ran out: the work may have run; claim-next recovers it), pending proposals (reject them
    with agora proposals decide --reject), and finished ones.

    Example: agora proposals cancel ap_b008162ed --by ops-lead --reason "customer withdrew"
    """
    store = _store(db, scoped_tenant(None))
    found = _operator_target(store, proposal_id, "cancel")
    result = None if found is None else store.cancel(found, by, reason)
    proposal = None if result is None else result.proposal
    events = [] if proposal is None else store.events(proposal.id)
    outcome = "not_found" if result is None else result.outcome
    finish(
        _operator_document(outcome, proposal, events),
        as_json=as_json,
        show=cancel_sentence(outcome, proposal, proposal_id, events),
        exit_code=0 if outcome in ("cancelled", "unchanged") else 1,
    )


@app.command("create")
def create(
    file: Annotated[
        str,
        typer.Option(
            "--file", help="A JSON proposal document, or - for standard input.", show_default=False
        ),
    ],
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a pending proposal from a JSON document; exit 1 on a conflict.

    The document: {id?, idempotency_key?, run_id?, tool_call_id?, tenant_ref, actor_ref,
    thread_id, tool_name, input, card?, expires_at?}.

    Without id and key, both derive from run_id and tool_call_id. The same key and content again
    is "existing"; the same id or key with other content is "conflict" and writes nothing.

    Example: agora proposals create --file refund.json --json
    """
    proposal = _new_proposal(_read_document(file))
    if proposal.scope.tenant_ref is None:
        refuse_unscoped("a proposal with tenant_ref null")
    else:
        scoped_tenant(proposal.scope.tenant_ref, what="tenant_ref")
    result = _store(db, proposal.scope.tenant_ref).create(proposal)
    finish(
        {"outcome": result.outcome, "proposal": proposal_document(result.proposal)},
        as_json=as_json,
        show=f"{result.outcome}: {result.proposal.id}",
        exit_code=1 if result.outcome == "conflict" else 0,
    )


@app.command("claim")
@scoped
def claim(
    proposal_id: IdArg,
    worker: Annotated[str, typer.Option("--worker", help="This worker's id.", show_default=False)],
    scope: Scope,
    lease_ms: LeaseOpt = DEFAULT_LEASE_MS,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Take the execution lease of one approved proposal; exit 1 unless claimed or recovered.

    Prints the lease token once: keep it for renew and settle. ID may be a unique prefix (8+
    characters) of the id, resolved within the scope only.

    Example: agora proposals claim ap_aa967a75 --actor alice --thread demo-thread-02 --tenant acme
    --worker w1
    """
    store = _store(db, scope.tenant_ref)
    result = store.claim(store.resolve_id(proposal_id, scope), scope, worker, lease_ms)
    finish(
        claim_document(result),
        as_json=as_json,
        show=lambda: print_claim(result),
        exit_code=1 if result.lease is None else 0,
    )


@app.command("claim-next")
def claim_next(
    worker: Annotated[str, typer.Option("--worker", help="This worker's id.", show_default=False)],
    lease_ms: LeaseOpt = DEFAULT_LEASE_MS,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit",
            min=1,
            max=MAX_CLAIM_BATCH,
            metavar="K",
            help=f"Claim up to K at once (1–{MAX_CLAIM_BATCH:,}), each with its own lease; "
            "--json is then a list of claims.",
            show_default=False,
        ),
    ] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Claim the most overdue approved work across all scopes (privileged; for workers).

    Outcome none (exit 0) when nothing is due. Prints each lease token once. With --limit K,
    up to K claims from one statement (JSON: a list of claims, [] when nothing is due).

    Example: agora proposals claim-next --worker w1 --lease-ms 30000 --limit 10 --json
    """
    if limit is not None:
        claims = _store(db).claim_next(worker, lease_ms, limit=limit)
        finish(
            [claim_document(c, with_id=True) for c in claims],
            as_json=as_json,
            show=lambda: print_claims(claims),
        )
        return
    result = _store(db).claim_next(worker, lease_ms)
    finish(claim_document(result, with_id=True), as_json=as_json, show=lambda: print_claim(result))


@app.command("renew")
def renew(
    proposal_id: IdArg,
    token: TokenOpt,
    generation: GenerationOpt,
    lease_ms: LeaseOpt = DEFAULT_LEASE_MS,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Extend a live lease; exit 1 if it was lost (wrong token or generation, or expired).

    Example: agora proposals renew "$ID" --token "$TOKEN" --generation 1 --lease-ms 30000
    """

    result = _store(db).renew(proposal_id, token, generation, lease_ms)
    finish(
        {"outcome": result.outcome, "expires_at": iso_ms(result.expires_at)},
        as_json=as_json,
        show=(
            f"renewed: the lease now expires at {iso_ms(result.expires_at)}"
            if result.outcome == "renewed"
            else "lost: the lease no longer holds; stop working on it."
        ),
        exit_code=0 if result.outcome == "renewed" else 1,
    )


@app.command("settle")
def settle(
    proposal_id: IdArg,
    token: TokenOpt,
    generation: GenerationOpt,
    succeeded: Annotated[bool, typer.Option("--succeeded", help="The work succeeded.")] = False,
    failed: Annotated[bool, typer.Option("--failed", help="The work failed.")] = False,
    result: Annotated[
        str | None,
        typer.Option("--result", help="The result, as JSON.", show_default=False, metavar="JSON"),
    ] = None,
    error: Annotated[
        str | None, typer.Option("--error", help="What went wrong.", show_default=False)
    ] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Record the outcome of claimed work and end the lease; exit 1 if the lease was lost.

    Example: agora proposals settle "$ID" --token "$TOKEN" --generation 1 --succeeded
    """
    outcome = _one_of("the outcome", succeeded=succeeded, failed=failed)
    value = _parse_result(result)
    settled = _store(db).settle(proposal_id, token, generation, outcome, value, error)
    finish(
        {"outcome": settled.outcome},
        as_json=as_json,
        show=(
            f"settled: {proposal_id} {outcome}."
            if settled.outcome == "settled"
            else "lost: the lease no longer holds; nothing was recorded."
        ),
        exit_code=0 if settled.outcome == "settled" else 1,
    )


@app.command("expire")
def expire(
    limit: Annotated[int, typer.Option("--limit", help="At most N (1-1000).")] = 100,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Expire a bounded batch of pending proposals past their expiry, oldest first (for cron).

    Example: agora proposals expire --limit 500 --json
    """
    expired = _store(db).expire(limit)
    finish({"expired": expired}, as_json=as_json, show=f"Expired {expired:,} proposal(s).")
