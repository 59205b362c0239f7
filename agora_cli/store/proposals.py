"""The action-proposal store (being built by the proposals issue)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

__all__ = ["BackfillResult", "backfill_discovery_index", "count_legacy_proposals"]


@dataclass(frozen=True)
class BackfillResult:
    backfilled: int
    remaining: int


def backfill_discovery_index(conn: Connection, *, limit: int = 500) -> BackfillResult:
    """Placeholder: the discovery backfill is not built yet; it does nothing and says so."""
    import sys

    print("the discovery backfill is not built yet: nothing backfilled", file=sys.stderr)
    return BackfillResult(0, 0)


def count_legacy_proposals(conn: Connection) -> int:
    """Placeholder: proposals written by older writers (discovery_state NULL)."""
    from sqlalchemy import func, select

    from agora_cli.store.schema import action_proposal as p

    q = select(func.count()).select_from(p).where(p.c.discovery_state.is_(None))
    return int(conn.execute(q).scalar_one())
