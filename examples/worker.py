"""A worker loop: claim approved proposals across scopes, execute each once, settle it.

Delivery is at least once (a worker that dies leaves its lease to expire and the next claim
recovers it), so the side effect is keyed by the proposal's idempotency key: executing the same
key twice is a no-op. Here the "domain" is a table of refunds with a unique key column; in a real
system it is the payment provider's idempotency key.

    python examples/worker.py --db sqlite:///agora.db --max-idle 2
"""

from __future__ import annotations

import argparse
import os
import socket
import time
from typing import Any

from sqlalchemy import Column, Float, MetaData, String, Table, insert, select
from sqlalchemy.engine import Engine

from agora_cli.store import ActionProposalStore, open_engine
from agora_cli.store.engine import dialect_name

domain = MetaData()
refunds = Table(
    "example_refund",
    domain,
    Column("idempotency_key", String(255), primary_key=True),
    Column("order_id", String(64), nullable=False),
    Column("amount_usd", Float, nullable=False),
)


def execute_refund(engine: Engine, key: str, work_input: dict[str, Any]) -> dict[str, Any]:
    """The side effect, made idempotent by the proposal's key: a repeat returns the first result."""
    with engine.begin() as conn:
        done = conn.execute(select(refunds).where(refunds.c.idempotency_key == key)).first()
        if done is None:
            conn.execute(
                insert(refunds).values(
                    idempotency_key=key,
                    order_id=str(work_input.get("order_id")),
                    amount_usd=float(work_input.get("amount_usd", 0)),
                )
            )
            return {"refunded": True, "repeat": False}
    return {"refunded": True, "repeat": True}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=os.environ.get("AGORA_DATABASE_URL", "sqlite:///agora.db"))
    parser.add_argument("--worker", default=f"{socket.gethostname()}-{os.getpid()}")
    parser.add_argument("--lease-ms", type=int, default=30_000)
    parser.add_argument("--max-idle", type=float, default=5.0, help="stop after N idle seconds")
    args = parser.parse_args()

    engine = open_engine(args.db)
    domain.create_all(engine)
    store = ActionProposalStore(engine)
    idle_since = time.monotonic()
    settled = 0
    while time.monotonic() - idle_since < args.max_idle:
        claim = store.claim_next(args.worker, args.lease_ms)
        if claim.work is None or claim.lease is None:
            time.sleep(0.2)
            continue
        idle_since = time.monotonic()
        work, lease = claim.work, claim.lease
        try:
            result = execute_refund(engine, work.idempotency_key, work.input_value)
            outcome = store.settle(work.id, lease.token, lease.generation, "succeeded", result)
        except Exception as exc:  # a failed side effect is recorded, not retried blindly
            outcome = store.settle(work.id, lease.token, lease.generation, "failed", error=str(exc))
        # "lost" means our lease expired and another worker took over: nothing more to do.
        print(f"{work.id} {work.tool_name} ({claim.outcome}) -> {outcome.outcome}")
        settled += outcome.outcome == "settled"
    print(f"settled {settled} proposal(s) on {dialect_name(engine)}; idle, stopping")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
