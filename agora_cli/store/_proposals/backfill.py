"""Proposals written by older writers, and the bounded backfill of their discovery columns.

A legacy row has no ``discovery_state``: ``claim_next`` and ``expire``, which read only the
discovery index, never see it until the backfill fills it in, batch by batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agora_cli.store._clock import Clock
from agora_cli.store._dialects import dialect_of
from agora_cli.store._proposals.model import MAX_BACKFILL_BATCH, BackfillResult, check_limit
from agora_cli.store._proposals.queries import COUNT_LEGACY, fill_legacy, select_legacy

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

__all__ = ["backfill_discovery_index", "count_legacy_proposals"]


def count_legacy_proposals(conn: Connection) -> int:
    """Count proposals written by older writers (``discovery_state`` NULL)."""
    return int(conn.execute(COUNT_LEGACY).scalar_one())


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
    whole_key = dialect_of(conn).orders_by_whole_index_key
    legacy = conn.execute(select_legacy(limit, whole_index_key=whole_key)).all()
    filled = 0
    if legacy:
        by_version: dict[int, list[str]] = {}
        for pid, version in legacy:
            by_version.setdefault(version, []).append(pid)
        filled = int(conn.execute(fill_legacy(by_version)).rowcount)
    if count_remaining:
        return BackfillResult(filled, count_legacy_proposals(conn))
    # A short batch that filled every row it read leaves nothing (older writers are stopped).
    exhausted = len(legacy) < limit and filled == len(legacy)
    return BackfillResult(filled, 0 if exhausted else None)
