"""Retention: settled tool I/O replaced by keyed hashes, for good, wherever it was copied.

``redact_tool_io`` replaces, for work that is settled and older than the cutoff:

- ``agent_tool_call.input`` and ``output`` (``error`` cut to its first line): calls whose run
  finished before the cutoff, or — without a run row — created before it;
- ``agent_message.tool_calls``, ``tool_results`` (the message's tool parts) and ``outcome`` (a
  proposal's result delivered to it), by the same rule on the message's run and ``created_at``;
- ``agent_action_proposal.input``, ``card`` and ``result`` (``error`` cut to its first line):
  proposals settled before the cutoff, or rejected/expired and last changed before it;
- ``agent_action_proposal_event.prior_result`` (``prior_error`` cut to its first line): the
  attempt a requeue replaced, settled before the cutoff — a copy of the proposal's result;
- ``agent_stream_frame.frame``: every frame of a run that finished before the cutoff (or, without
  a run row, written before it) — a frame stream interleaves tool inputs, results and text.

**The hash is keyed.** A value becomes ``"agora:redacted:v1:<tag>:<hex>"`` (a JSON string, so
the column stays JSON for every reader): ``<hex>`` is HMAC-SHA-256 of the original text under the
row's tenant's redaction key, ``<tag>`` 8 hex characters naming that key. A frame becomes
``{"type":"redacted","digest":"agora:redacted:v1:<tag>:<hex>"}`` (still a frame). The key is
derived from the key-encryption key (``sealing.derive_key(kek, "redact", tenant)``; a database
key, ``tenant=None``, for untenanted rows): nothing is stored and no schema changes, a guess
cannot be checked without the KEK (a bare SHA-256 of ``{"order_id":7}`` was found by a loop in
0.28 s), and equal inputs of two tenants hash differently. A row's tenant is its own
``tenant_ref``, else its thread's (a tool call's and a message's are their thread's, a frame's
its run's). Redacting therefore needs the KEK (``KeyUnavailable``, exit 3, before any write);
counting does not.

**Recognised by its whole form, never a prefix.** A value counts as redacted only when it is
exactly that form: the quotes, the version, 8 then 64 lowercase hex characters, nothing else
(checked in SQL — a regular expression on PostgreSQL and MySQL/MariaDB, ``GLOB`` on SQLite — and
by ``is_redacted``). Anything else is hashed: ``sha256:deadbeef SSN …`` is not "already hashed",
and the bare ``sha256:<hex>`` values older versions wrote are hashed again under the key. A
value a tool wrote that is exactly the form holds only hex and is kept.

The work runs table by table in bounded batches, each its own transaction, so an interrupted run
resumes where it stopped: the next one finds only the rows still to do. On PostgreSQL and MySQL a
batch locks its rows (``FOR UPDATE``, ``SKIP LOCKED`` where the server has it), so two redactors
share the work; SQLite's writer lock serialises them. Counts are rows and values really changed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    and_,
    bindparam,
    exists,
    func,
    literal,
    not_,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.sql.elements import ColumnElement

from agora_cli.store._clock import DAY_MS, Clock, SystemClock, parse_duration
from agora_cli.store._dialects import dialect_of
from agora_cli.store._engine import supports_skip_locked
from agora_cli.store._errors import InvalidInput, KeyUnavailable
from agora_cli.store._redaction_form import (
    FRAME_FORM,
    REDACTED_PREFIX,
    TAG_HEX,
    is_redacted,
    is_redacted_sql,
)
from agora_cli.store._schema import (
    action_proposal,
    action_proposal_event,
    message,
    run,
    stream_frame,
    thread,
    tool_call,
)
from agora_cli.store._sealing import KEK_ENV, KEK_FILE_ENV, current_kek, derive_key
from agora_cli.store._sqlexpr import exact_eq
from agora_cli.store._values import check_int, check_optional_identity

if TYPE_CHECKING:
    from sqlalchemy import Table
    from sqlalchemy.engine import Connection, Engine

    from agora_cli.store._sealing import Kek

__all__ = [
    "DEFAULT_REDACT_BATCH",
    "MAX_REDACT_BATCH",
    "REDACTED_TABLES",
    "RedactBatch",
    "RedactReport",
    "TableCounts",
    "count_redactable_tool_io",
    "redact_cutoff",
    "redact_tool_io",
    "redact_tool_io_batch",
    "redaction_kek",
    "redaction_marker",
]

DEFAULT_REDACT_BATCH = 500
MAX_REDACT_BATCH = 10_000
# --older-than: up to a hundred years (a retention period, not a report window).
_MAX_AGE_MS = 36_500 * DAY_MS
_KEY_TAG_LABEL = b"agora:redaction-key-tag:v1"


# --- keys and markers ------------------------------------------------------------------------


class _RedactionKey:
    """A tenant's (or the database's) redaction key; its ``repr`` shows the tag only."""

    __slots__ = ("_key", "tag")

    def __init__(self, kek: Kek, tenant: str | None) -> None:
        self._key = derive_key(kek, "redact", tenant)
        self.tag = hmac.new(self._key, _KEY_TAG_LABEL, hashlib.sha256).hexdigest()[:TAG_HEX]

    def __repr__(self) -> str:
        return f"_RedactionKey(tag={self.tag!r})"

    def digest(self, text: str) -> str:
        mac = hmac.new(self._key, text.encode("utf-8"), hashlib.sha256).hexdigest()
        return f"{REDACTED_PREFIX}{self.tag}:{mac}"

    def value(self, text: str) -> str:
        return json.dumps(self.digest(text))

    def frame(self, text: str) -> str:
        return FRAME_FORM[0] + self.digest(text)[len(REDACTED_PREFIX) :] + FRAME_FORM[1]


def redaction_kek(kek: Kek | None = None) -> Kek:
    """The KEK redaction derives its keys from: ``kek``, else the environment's; else
    ``KeyUnavailable`` (exit 3)."""
    found = kek if kek is not None else current_kek()
    if found is None:
        raise KeyUnavailable(
            f"redaction hashes under a key derived from the key-encryption key: set {KEK_ENV} "
            f"or {KEK_FILE_ENV}"
        )
    return found


def redaction_marker(
    text: str, *, tenant: str | None, kek: Kek | None = None, frame: bool = False
) -> str:
    """What redacting ``text`` of a row of ``tenant`` stores (``None``: an untenanted row).

    With the KEK, this checks a guess against a redacted value; without it, no guess can be.
    """
    key = _RedactionKey(redaction_kek(kek), check_optional_identity("tenant", tenant))
    return key.frame(text) if frame else key.value(text)


def redact_cutoff(older_than: str, *, clock: Clock | None = None) -> int:
    """The cutoff (epoch ms) for ``older_than`` (``30d``, ``12h``, ``4w``…) before now."""
    ms = parse_duration(older_than, what="older_than", max_ms=_MAX_AGE_MS)
    return (clock or SystemClock()).now_ms() - ms


# --- what is redacted, table by table --------------------------------------------------------

r, t, m, tc, p, sf = run.c, thread.c, message.c, tool_call.c, action_proposal.c, stream_frame.c
ev = action_proposal_event.c


def _finished(run_id: Any, created_at: Any, cutoff_ms: int) -> ColumnElement[bool]:
    """Created before the cutoff, and its run finished before it (or it has no run row)."""
    run_finished = exists().where(
        r.id == run_id, r.finished_at.is_not(None), r.finished_at < cutoff_ms
    )
    return and_(created_at < cutoff_ms, or_(run_finished, not_(exists().where(r.id == run_id))))


def _thread_of(thread_id: Any, tenant: str) -> ColumnElement[bool]:
    return exists().where(t.id == thread_id, exact_eq(t.tenant_ref, tenant))


def _own_or_thread(tenant_ref: Any, thread_id: Any, tenant: str) -> ColumnElement[bool]:
    return or_(
        exact_eq(tenant_ref, tenant), and_(tenant_ref.is_(None), _thread_of(thread_id, tenant))
    )


@dataclass(frozen=True)
class _Target:
    table: Table
    keys: tuple[str, ...]
    hashed: tuple[str, ...]
    trimmed: tuple[str, ...]
    settled: Callable[[int], ColumnElement[bool]]
    of_tenant: Callable[[str], ColumnElement[bool]]
    # The rows' tenants by their first key column: a statement over ``ids``.
    tenants: Callable[[list[str]], Any]
    frame: bool = False

    @property
    def name(self) -> str:
        return str(self.table.name)

    def pending(self) -> ColumnElement[bool]:
        c = self.table.c
        parts = [
            and_(c[n].is_not(None), not_(is_redacted_sql(c[n], frame=self.frame)))
            for n in self.hashed
        ]
        parts += [c[n].contains("\n", autoescape=True) for n in self.trimmed]
        return or_(*parts)

    def eligible(self, cutoff_ms: int, tenant: str | None) -> ColumnElement[bool]:
        conditions = [self.settled(cutoff_ms), self.pending()]
        if tenant is not None:
            conditions.append(self.of_tenant(tenant))
        return and_(*conditions)


_TARGETS = (
    _Target(
        table=tool_call,
        keys=("id",),
        hashed=("input", "output"),
        trimmed=("error",),
        settled=lambda cutoff: _finished(tc.run_id, tc.created_at, cutoff),
        of_tenant=lambda tenant: (
            exists()
            .select_from(message.join(thread, t.id == m.thread_id))
            .where(m.id == tc.message_id, exact_eq(t.tenant_ref, tenant))
        ),
        tenants=lambda ids: (
            select(tc.id, t.tenant_ref)
            .select_from(tool_call.join(message, m.id == tc.message_id))
            .join(thread, t.id == m.thread_id)
            .where(tc.id.in_(ids))
        ),
    ),
    _Target(
        table=message,
        keys=("id",),
        hashed=("tool_calls", "tool_results", "outcome"),
        trimmed=(),
        settled=lambda cutoff: _finished(m.run_id, m.created_at, cutoff),
        of_tenant=lambda tenant: _thread_of(m.thread_id, tenant),
        tenants=lambda ids: (
            select(m.id, t.tenant_ref)
            .select_from(message.join(thread, t.id == m.thread_id))
            .where(m.id.in_(ids))
        ),
    ),
    _Target(
        table=action_proposal,
        keys=("id",),
        hashed=("input", "card", "result"),
        trimmed=("error",),
        settled=lambda cutoff: or_(
            and_(p.settled_at.is_not(None), p.settled_at < cutoff),
            and_(
                p.settled_at.is_(None),
                p.decision.in_(("rejected", "expired")),
                p.updated_at < cutoff,
            ),
        ),
        of_tenant=lambda tenant: _own_or_thread(p.tenant_ref, p.thread_id, tenant),
        tenants=lambda ids: (
            select(p.id, func.coalesce(p.tenant_ref, t.tenant_ref))
            .select_from(action_proposal.outerjoin(thread, t.id == p.thread_id))
            .where(p.id.in_(ids))
        ),
    ),
    # The attempt a requeue replaced (revision 0009): its result is a copy of the proposal's,
    # hashed under the proposal's tenant's key as the proposal's was.
    _Target(
        table=action_proposal_event,
        keys=("id",),
        hashed=("prior_result",),
        trimmed=("prior_error",),
        settled=lambda cutoff: and_(ev.prior_settled_at.is_not(None), ev.prior_settled_at < cutoff),
        of_tenant=lambda tenant: or_(
            exact_eq(ev.tenant_ref, tenant),
            and_(
                ev.tenant_ref.is_(None),
                exists().where(
                    p.id == ev.proposal_id, _own_or_thread(p.tenant_ref, p.thread_id, tenant)
                ),
            ),
        ),
        tenants=lambda ids: (
            select(ev.id, func.coalesce(ev.tenant_ref, p.tenant_ref, t.tenant_ref))
            .select_from(
                action_proposal_event.outerjoin(action_proposal, p.id == ev.proposal_id).outerjoin(
                    thread, t.id == p.thread_id
                )
            )
            .where(ev.id.in_(ids))
        ),
    ),
    _Target(
        table=stream_frame,
        keys=("run_id", "seq"),
        hashed=("frame",),
        trimmed=(),
        settled=lambda cutoff: _finished(sf.run_id, sf.created_at, cutoff),
        of_tenant=lambda tenant: exists().where(
            r.id == sf.run_id, _own_or_thread(r.tenant_ref, r.thread_id, tenant)
        ),
        tenants=lambda ids: (
            select(r.id, func.coalesce(r.tenant_ref, t.tenant_ref))
            .select_from(run.outerjoin(thread, t.id == r.thread_id))
            .where(r.id.in_(ids))
        ),
        frame=True,
    ),
)
_BY_NAME = {target.name: target for target in _TARGETS}
REDACTED_TABLES = tuple(_BY_NAME)


def _counts(conn: Connection, cutoff_ms: int, tenant: str | None) -> dict[str, int]:
    return {
        target.name: int(
            conn.execute(
                select(func.count())
                .select_from(target.table)
                .where(target.eligible(cutoff_ms, tenant))
            ).scalar()
            or 0
        )
        for target in _TARGETS
    }


def count_redactable_tool_io(conn: Connection, *, cutoff_ms: int, tenant: str | None = None) -> int:
    """How many rows (of every table in ``REDACTED_TABLES``) ``redact_tool_io`` would change."""
    tenant = check_optional_identity("tenant", tenant)
    return sum(_counts(conn, cutoff_ms, tenant).values())


@dataclass(frozen=True)
class RedactBatch:
    """One batch, in one table: rows changed, values hashed per column, errors cut."""

    table: str
    redacted: int
    values: dict[str, int] = field(default_factory=dict)  # "<table>.<column>" -> values hashed
    errors_trimmed: int = 0
    last: tuple[Any, ...] | None = None  # the key of the last row read


def _batch(
    conn: Connection,
    target: _Target,
    *,
    cutoff_ms: int,
    tenant: str | None,
    limit: int,
    keys: dict[str | None, _RedactionKey],
    kek: Kek,
    after: tuple[Any, ...] | None = None,
) -> RedactBatch:
    c = target.table.c
    names = (*target.hashed, *target.trimmed)
    key_columns = [c[k] for k in target.keys]
    query = (
        select(*key_columns, *(c[n] for n in names))
        .where(target.eligible(cutoff_ms, tenant))
        .order_by(*key_columns)
        .limit(limit)
    )
    if after is not None:
        # A run reads each table once in key order: rows behind it were done (or are another
        # redactor's, locked), and re-testing them every batch would cost O(rows²).
        query = query.where(tuple_(*key_columns) > tuple_(*(literal(v) for v in after)))
    if dialect_of(conn).locks_rows:
        query = query.with_for_update(skip_locked=supports_skip_locked(conn))
    rows = conn.execute(query).all()
    if not rows:
        return RedactBatch(target.name, 0)
    owners = sorted({row[0] for row in rows})
    tenants: dict[str, str | None] = {k: v for k, v in conn.execute(target.tenants(owners))}
    hashed = dict.fromkeys(target.hashed, 0)
    trimmed = 0
    changes: list[dict[str, Any]] = []
    width = len(target.keys)
    for row in rows:
        owner = tenants.get(row[0])
        key = keys.get(owner)
        if key is None:
            key = keys[owner] = _RedactionKey(kek, owner)
        change: dict[str, Any] = {f"k{i}": row[i] for i in range(width)}
        changed = False
        for name, old in zip(names, row[width:], strict=True):
            new = old
            if name in hashed and old is not None and not is_redacted(old, frame=target.frame):
                new = key.frame(old) if target.frame else key.value(old)
                hashed[name] += 1
            elif name not in hashed and old is not None and "\n" in old:
                new = old.split("\n", 1)[0]
                trimmed += 1
            changed |= new != old
            change[f"v_{name}"] = new
        if changed:
            changes.append(change)
    if changes:
        statement = (
            update(target.table)
            .where(*(exact_eq(c[k], bindparam(f"k{i}")) for i, k in enumerate(target.keys)))
            .values({n: bindparam(f"v_{n}") for n in names})
        )
        conn.execute(statement, changes)
    values = {f"{target.name}.{n}": v for n, v in hashed.items()}
    return RedactBatch(target.name, len(changes), values, trimmed, tuple(rows[-1][:width]))


def _check_table(table: str | None) -> list[_Target]:
    if table is None:
        return list(_TARGETS)
    if table not in _BY_NAME:
        raise InvalidInput(f"no table {table!r} to redact (one of {', '.join(REDACTED_TABLES)})")
    return [_BY_NAME[table]]


def redact_tool_io_batch(
    conn: Connection,
    *,
    cutoff_ms: int,
    tenant: str | None = None,
    limit: int = DEFAULT_REDACT_BATCH,
    table: str | None = None,
    kek: Kek | None = None,
) -> RedactBatch:
    """Redact up to ``limit`` eligible rows of one table inside the caller's transaction.

    The table is ``table``, or the first of ``REDACTED_TABLES`` with rows to redact.
    """
    tenant = check_optional_identity("tenant", tenant)
    limit = check_int("limit", limit, low=1, high=MAX_REDACT_BATCH)
    targets = _check_table(table)
    found = redaction_kek(kek)
    done = RedactBatch(targets[0].name, 0)
    for target in targets:
        done = _batch(
            conn, target, cutoff_ms=cutoff_ms, tenant=tenant, limit=limit, keys={}, kek=found
        )
        if done.redacted:
            break
    return done


@dataclass(frozen=True)
class TableCounts:
    """One table's rows: eligible at the start, redacted, and still eligible at the end."""

    matched: int
    redacted: int
    remaining: int


@dataclass(frozen=True)
class RedactReport:
    """What ``redact_tool_io`` did (or, with ``dry_run``, would do); row counts summed over
    ``tables``, ``inputs``/``outputs`` the tool calls' values hashed."""

    cutoff: int
    matched: int  # eligible rows when it started
    redacted: int
    inputs: int
    outputs: int
    errors_trimmed: int
    batches: int
    remaining: int
    dry_run: bool
    tables: dict[str, TableCounts] = field(default_factory=dict)
    # "<table>.<column>" -> values hashed, every column of every table in REDACTED_TABLES
    values: dict[str, int] = field(default_factory=dict)


def _count_all(engine: Engine, cutoff_ms: int, tenant: str | None) -> dict[str, int]:
    with engine.connect().execution_options(sqlite_deferred=True) as conn:
        counts = _counts(conn, cutoff_ms, tenant)
        conn.rollback()
    return counts


def redact_tool_io(
    engine: Engine,
    *,
    cutoff_ms: int,
    tenant: str | None = None,
    batch: int = DEFAULT_REDACT_BATCH,
    max_batches: int | None = None,
    dry_run: bool = False,
    on_batch: Callable[[RedactBatch], None] | None = None,
    kek: Kek | None = None,
) -> RedactReport:
    """Redact every eligible row, table by table, in batches of ``batch``, each batch its own
    transaction.

    Irreversible (the caller confirms first). Resumable: a run cut short leaves whole batches
    done and the rest untouched. ``dry_run`` only counts (and needs no KEK); otherwise the KEK
    (``kek``, else the environment's) is required before anything is written.
    """
    tenant = check_optional_identity("tenant", tenant)
    batch = check_int("batch", batch, low=1, high=MAX_REDACT_BATCH)
    if max_batches is not None:
        check_int("max_batches", max_batches, low=1, high=10**9)
    found = None if dry_run else redaction_kek(kek)
    matched = _count_all(engine, cutoff_ms, tenant)
    redacted = dict.fromkeys(matched, 0)
    values = {f"{target.name}.{n}": 0 for target in _TARGETS for n in target.hashed}
    trimmed = batches = 0
    keys: dict[str | None, _RedactionKey] = {}
    for target in _TARGETS:
        after: tuple[Any, ...] | None = None
        while (
            found is not None
            and matched[target.name]
            and (max_batches is None or batches < max_batches)
        ):
            with engine.begin() as conn:
                result = _batch(
                    conn,
                    target,
                    cutoff_ms=cutoff_ms,
                    tenant=tenant,
                    limit=batch,
                    keys=keys,
                    kek=found,
                    after=after,
                )
            if result.redacted == 0:
                break
            after = result.last
            batches += 1
            redacted[target.name] += result.redacted
            for name, n in result.values.items():
                values[name] += n
            trimmed += result.errors_trimmed
            if on_batch is not None:
                on_batch(result)
            if result.redacted < batch:
                break
    remaining = matched if dry_run else _count_all(engine, cutoff_ms, tenant)
    tables = {name: TableCounts(matched[name], redacted[name], remaining[name]) for name in matched}
    return RedactReport(
        cutoff=cutoff_ms,
        matched=sum(matched.values()),
        redacted=sum(redacted.values()),
        inputs=values["agent_tool_call.input"],
        outputs=values["agent_tool_call.output"],
        errors_trimmed=trimmed,
        batches=batches,
        remaining=sum(remaining.values()),
        dry_run=dry_run,
        tables=tables,
        values=values,
    )
