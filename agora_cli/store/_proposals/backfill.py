"""Proposals written by older writers, and the bounded backfill of their discovery columns.

A legacy row has no ``discovery_state``: ``claim_next`` and ``expire``, which read only the
discovery index, never see it until the backfill fills it in, batch by batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, case, func, or_, select, update

from agora_cli.store._clock import Clock
from agora_cli.store._engine import dialect_name
from agora_cli.store._proposals.model import MAX_BACKFILL_BATCH, BackfillResult, check_limit
from agora_cli.store._schema import action_proposal as p

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection
    from sqlalchemy.sql import ColumnElement

__all__ = ["backfill_discovery_index", "count_legacy_proposals"]

# Computed from the row's own state columns inside the UPDATE, so the values always match the
# version the fence admits. (MySQL applies SET left to right: neither reads discovery_state.)
_LEGACY_STATE = case(
    (p.c.decision == "pending", "pending"),
    (p.c.execution_state == "running", "running"),
    (
        and_(
            p.c.decision == "approved",
            or_(p.c.execution_state.is_(None), p.c.execution_state == "queued"),
        ),
        "queued",
    ),
    else_="done",
)
_LEGACY_AT = case(
    (p.c.decision == "pending", p.c.expires_at),
    (p.c.execution_state == "running", func.coalesce(p.c.lease_expires_at, p.c.updated_at)),
    (
        and_(
            p.c.decision == "approved",
            or_(p.c.execution_state.is_(None), p.c.execution_state == "queued"),
        ),
        func.coalesce(p.c.decided_at, p.c.updated_at),
    ),
    else_=None,
)


def _legacy_order(conn: Connection) -> tuple[ColumnElement[Any], ...]:
    """An ORDER BY that keeps each planner on the discovery index's NULL range.

    Without it PostgreSQL picks a sequential scan that wades through every row earlier batches
    filled; it needs both index columns to see the order is free, while MariaDB sorts unless
    given ``discovery_at`` alone.
    """
    if dialect_name(conn) == "postgresql":
        return (p.c.discovery_state, p.c.discovery_at)
    return (p.c.discovery_at,)


def count_legacy_proposals(conn: Connection) -> int:
    """Count proposals written by older writers (``discovery_state`` NULL)."""
    q = select(func.count()).select_from(p).where(p.c.discovery_state.is_(None))
    return int(conn.execute(q).scalar_one())


def backfill_discovery_index(
    conn: Connection,
    *,
    limit: int = 500,
    clock: Clock | None = None,
    count_remaining: bool = True,
) -> BackfillResult:
    """Fill the discovery columns of at most ``limit`` legacy rows, in the caller's transaction.

    Changes nothing but the discovery columns and ``version``: input, card, timestamps
    (``updated_at`` too) and the decision audit stay byte-for-byte. Each row's update is fenced
    by its version, so a concurrent decision is never overwritten; repeating an interrupted run
    is safe. ``clock`` is accepted for symmetry and unused: the backfill writes no timestamp.

    The exact ``remaining`` count costs a scan of the legacy rows left; a loop that runs batches
    until one comes back short (``agora db backfill``, migration 0002) passes
    ``count_remaining=False`` and counts once at the end, which keeps the whole run linear.
    """
    check_limit(limit, MAX_BACKFILL_BATCH)
    legacy = conn.execute(
        select(p.c.id, p.c.version)
        .where(p.c.discovery_state.is_(None))
        .order_by(*_legacy_order(conn))
        .limit(limit)
    ).all()
    filled = 0
    if legacy:
        by_version: dict[int, list[str]] = {}
        for pid, version in legacy:
            by_version.setdefault(version, []).append(pid)
        fence = or_(
            *(
                and_(p.c.version == version, p.c.id.in_(ids))
                for version, ids in sorted(by_version.items())
            )
        )
        stmt = (
            update(p)
            .where(fence)
            .values(
                discovery_state=_LEGACY_STATE,
                discovery_at=_LEGACY_AT,
                version=p.c.version + 1,
            )
        )
        filled = int(conn.execute(stmt).rowcount)
    if count_remaining:
        return BackfillResult(filled, count_legacy_proposals(conn))
    # A short batch that filled every row it read leaves nothing (older writers are stopped).
    exhausted = len(legacy) < limit and filled == len(legacy)
    return BackfillResult(filled, 0 if exhausted else None)
