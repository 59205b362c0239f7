"""Retention: finished tool calls' input and output replaced by SHA-256 hashes, for good.

``redact_tool_io`` replaces ``agent_tool_call.input`` and ``output`` with ``sha256:<hex of the
original UTF-8 text>`` and cuts ``error`` to its first line, for calls that are finished and
older than the cutoff: a call with a run row is finished when its run has finished before the
cutoff; a call without one (no ``run_id``, or a run row that is gone) when it was created before
the cutoff. Counts, status, timing and the rest of the row stay. A value that already starts with
``sha256:`` counts as redacted and is left alone (a tool whose original output began with that
prefix is taken as already hashed), so the operation is idempotent.

The work runs in bounded batches, each its own transaction, so an interrupted run resumes where
it stopped: the next one finds only the rows still to do. On PostgreSQL and MySQL a batch locks
its rows (``FOR UPDATE``, ``SKIP LOCKED`` where the server has it), so two redactors share the
work; SQLite's single writer serialises them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, exists, func, literal, not_, or_, select, update

from agora_cli.store.clock import DAY_MS, Clock, SystemClock, parse_duration
from agora_cli.store.engine import supports_skip_locked
from agora_cli.store.schema import message, run, thread, tool_call
from agora_cli.store.sqlexpr import exact_eq
from agora_cli.store.values import check_int, check_optional_identity

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine
    from sqlalchemy.sql import ColumnElement

__all__ = [
    "DEFAULT_REDACT_BATCH",
    "HASH_PREFIX",
    "MAX_REDACT_BATCH",
    "RedactBatch",
    "RedactReport",
    "count_redactable_tool_io",
    "hash_marker",
    "redact_cutoff",
    "redact_tool_io",
    "redact_tool_io_batch",
]

HASH_PREFIX = "sha256:"
DEFAULT_REDACT_BATCH = 500
MAX_REDACT_BATCH = 10_000
# --older-than: up to a hundred years (a retention period, not a report window).
_MAX_AGE_MS = 36_500 * DAY_MS

tc = tool_call.c


def hash_marker(text: str) -> str:
    """``sha256:<hex>`` of ``text``'s UTF-8 bytes: what a redacted value holds."""
    return HASH_PREFIX + hashlib.sha256(text.encode("utf-8")).hexdigest()


def redact_cutoff(older_than: str, *, clock: Clock | None = None) -> int:
    """The cutoff (epoch ms) for ``older_than`` (``30d``, ``12h``, ``4w``…) before now."""
    ms = parse_duration(older_than, what="older_than", max_ms=_MAX_AGE_MS)
    return (clock or SystemClock()).now_ms() - ms


def _is_hashed(column: Any) -> ColumnElement[bool]:
    # substr, not LIKE: the same exact, case-sensitive test on every dialect and collation.
    return func.substr(column, 1, len(HASH_PREFIX)) == literal(HASH_PREFIX)


def _pending(column: Any) -> ColumnElement[bool]:
    return and_(column.is_not(None), not_(_is_hashed(column)))


def _eligible(cutoff_ms: int, tenant: str | None) -> ColumnElement[bool]:
    r = run.c
    run_finished = exists().where(
        r.id == tc.run_id, r.finished_at.is_not(None), r.finished_at < cutoff_ms
    )
    no_run = not_(exists().where(r.id == tc.run_id))
    conditions: list[ColumnElement[bool]] = [
        tc.created_at < cutoff_ms,
        or_(run_finished, no_run),
        or_(
            _pending(tc.input),
            _pending(tc.output),
            tc.error.contains("\n", autoescape=True),
        ),
    ]
    if tenant is not None:
        m, t = message.c, thread.c
        conditions.append(
            exists()
            .select_from(message.join(thread, t.id == m.thread_id))
            .where(m.id == tc.message_id, exact_eq(t.tenant_ref, tenant))
        )
    return and_(*conditions)


def count_redactable_tool_io(conn: Connection, *, cutoff_ms: int, tenant: str | None = None) -> int:
    """How many tool calls ``redact_tool_io`` would change at ``cutoff_ms``."""
    tenant = check_optional_identity("tenant", tenant)
    query = select(func.count()).select_from(tool_call).where(_eligible(cutoff_ms, tenant))
    return int(conn.execute(query).scalar() or 0)


@dataclass(frozen=True)
class RedactBatch:
    """One batch: rows changed, and how many inputs and outputs were hashed."""

    redacted: int
    inputs: int
    outputs: int
    errors_trimmed: int


def _redacted(value: str | None) -> str | None:
    if value is None or value.startswith(HASH_PREFIX):
        return value
    return hash_marker(value)


def redact_tool_io_batch(
    conn: Connection,
    *,
    cutoff_ms: int,
    tenant: str | None = None,
    limit: int = DEFAULT_REDACT_BATCH,
) -> RedactBatch:
    """Redact up to ``limit`` eligible tool calls inside the caller's transaction."""
    tenant = check_optional_identity("tenant", tenant)
    limit = check_int("limit", limit, low=1, high=MAX_REDACT_BATCH)
    query = (
        select(tc.id, tc.input, tc.output, tc.error)
        .where(_eligible(cutoff_ms, tenant))
        .order_by(tc.id)
        .limit(limit)
    )
    if conn.dialect.name != "sqlite":
        query = query.with_for_update(skip_locked=supports_skip_locked(conn))
    rows = conn.execute(query).all()
    inputs = outputs = trimmed = 0
    changes: list[dict[str, Any]] = []
    for row_id, old_input, old_output, old_error in rows:
        new_input, new_output = _redacted(old_input), _redacted(old_output)
        new_error = None if old_error is None else old_error.split("\n", 1)[0]
        inputs += new_input != old_input
        outputs += new_output != old_output
        trimmed += new_error != old_error
        changes.append({"k": row_id, "i": new_input, "o": new_output, "e": new_error})
    if changes:
        from sqlalchemy import bindparam

        statement = (
            update(tool_call)
            .where(tc.id == bindparam("k"))
            .values(input=bindparam("i"), output=bindparam("o"), error=bindparam("e"))
        )
        conn.execute(statement, changes)
    return RedactBatch(len(changes), inputs, outputs, trimmed)


@dataclass(frozen=True)
class RedactReport:
    """What ``redact_tool_io`` did (or, with ``dry_run``, would do)."""

    cutoff: int
    matched: int  # eligible rows when it started
    redacted: int
    inputs: int
    outputs: int
    errors_trimmed: int
    batches: int
    remaining: int
    dry_run: bool


def redact_tool_io(
    engine: Engine,
    *,
    cutoff_ms: int,
    tenant: str | None = None,
    batch: int = DEFAULT_REDACT_BATCH,
    max_batches: int | None = None,
    dry_run: bool = False,
    on_batch: Callable[[RedactBatch], None] | None = None,
) -> RedactReport:
    """Redact every eligible tool call in batches of ``batch``, each batch its own transaction.

    Irreversible (the caller confirms first). Resumable: a run cut short leaves whole batches
    done and the rest untouched. ``dry_run`` only counts.
    """
    tenant = check_optional_identity("tenant", tenant)
    batch = check_int("batch", batch, low=1, high=MAX_REDACT_BATCH)
    with engine.connect().execution_options(sqlite_deferred=True) as conn:
        matched = count_redactable_tool_io(conn, cutoff_ms=cutoff_ms, tenant=tenant)
        conn.rollback()
    done = RedactBatch(0, 0, 0, 0)
    batches = 0
    while not dry_run and matched and (max_batches is None or batches < max_batches):
        with engine.begin() as conn:
            result = redact_tool_io_batch(conn, cutoff_ms=cutoff_ms, tenant=tenant, limit=batch)
        if result.redacted == 0:
            break
        batches += 1
        done = RedactBatch(
            done.redacted + result.redacted,
            done.inputs + result.inputs,
            done.outputs + result.outputs,
            done.errors_trimmed + result.errors_trimmed,
        )
        if on_batch is not None:
            on_batch(result)
        if result.redacted < batch:
            break
    if dry_run:
        remaining = matched
    else:
        with engine.connect().execution_options(sqlite_deferred=True) as conn:
            remaining = count_redactable_tool_io(conn, cutoff_ms=cutoff_ms, tenant=tenant)
            conn.rollback()
    return RedactReport(
        cutoff=cutoff_ms,
        matched=matched,
        redacted=done.redacted,
        inputs=done.inputs,
        outputs=done.outputs,
        errors_trimmed=done.errors_trimmed,
        batches=batches,
        remaining=remaining,
        dry_run=dry_run,
    )
