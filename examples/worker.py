"""A worker loop: claim approved proposals across scopes, execute each once, settle it.

Delivery is at least once (a worker that dies leaves its lease to expire and the next claim
recovers it), so the side effect is keyed by the proposal's idempotency key: executing the same
key twice is a no-op. Here the "domain" is a table of refunds with a unique key column; in a real
system it is the payment provider's idempotency key.

    python examples/worker.py --db sqlite:///agora.db --max-idle 2
    python examples/worker.py --db postgresql://... --batch 10   # claim 10, run, settle, repeat
    python examples/worker.py --db postgresql://...@pgbouncer:6432/app \
        --listen-db postgresql://...@db:5432/app --poll 30 --max-idle 0   # run until stopped

When idle the worker waits with a ``WorkWaiter``: on PostgreSQL it LISTENs (channel
``agora_work``) and claims as soon as a decision or a requeue commits, and in any case every
``--poll`` seconds (a notification it missed costs at most one interval). A transaction pooler
(PgBouncer) cannot carry LISTEN: give ``--listen-db``, a direct URL to the same database, or the
worker polls, and says so. On MariaDB/MySQL and SQLite it polls adaptively: 10 ms right after
work, doubling while idle up to ``--poll``.

With ``--batch K`` the loop claims up to K proposals at once (each with its own lease), runs them
one after the other, renewing the leases still waiting whenever half of their time is spent (long
work must not let a lease run out under it), and records all their outcomes and claims the next
batch in one step (``settle_many_and_claim_next``: on PostgreSQL one round trip, on MariaDB/MySQL
two and one commit). An item whose lease was lost meanwhile is ``lost`` there and blocks no other.

A tenant with a data key has its proposals' input and result sealed: the worker then needs the
key-encryption key (``AGORA_KEK_FILE`` or ``AGORA_KEK``) to read the input and to settle. Without
it the claim hands back ``[sealed]`` as the input, and this worker stops rather than run a tool
on it (the lease expires and a worker with the KEK recovers the job).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from dataclasses import replace
from typing import Any

from sqlalchemy import Column, Float, MetaData, String, Table, insert, select
from sqlalchemy.engine import Engine

from agora_cli.store import (
    SEALED_MARKER,
    ActionProposalStore,
    ClaimResult,
    Settlement,
    WorkWaiter,
    open_engine,
)

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


def refuse_sealed(claim: ClaimResult) -> None:
    """Stop when a claimed job's input is sealed and this worker has no KEK to open it."""
    if claim.work is not None and claim.work.input == SEALED_MARKER:
        raise SystemExit(
            f"{claim.work.id}: its input is sealed for tenant {claim.work.tenant_ref}: set "
            "AGORA_KEK_FILE (the key-encryption key) for this worker; the job is left to its lease"
        )


def run_one(engine: Engine, claim: ClaimResult, work_seconds: float) -> Settlement:
    """Execute one claimed proposal (idempotently, by its key) and say how it went."""
    assert claim.work is not None and claim.lease is not None
    work, lease = claim.work, claim.lease
    try:
        time.sleep(work_seconds)  # stands for a slow side effect
        result = execute_refund(engine, work.idempotency_key, work.input_value)
        return Settlement(work.id, lease.token, lease.generation, "succeeded", result)
    except Exception as exc:  # a failed side effect is recorded, not retried blindly
        return Settlement(work.id, lease.token, lease.generation, "failed", error=str(exc))


def keep_alive(store: ActionProposalStore, waiting: list[ClaimResult], lease_ms: int) -> None:
    """Renew the leases still waiting in a batch once half their time is spent; drop the lost."""
    now = store.clock.now_ms()
    for claim in list(waiting):
        assert claim.work is not None and claim.lease is not None
        lease = claim.lease
        if lease.expires_at - now > lease_ms // 2:
            continue
        renewed = store.renew(claim.work.id, lease.token, lease.generation, lease_ms)
        print(f"{claim.work.id} lease {renewed.outcome}")
        if renewed.outcome == "lost":  # expired already and taken over: not ours to run
            waiting.remove(claim)
        else:  # the same token and generation, a later expiry
            assert renewed.expires_at is not None
            later = replace(lease, expires_at=renewed.expires_at)
            waiting[waiting.index(claim)] = replace(claim, lease=later)


def idle_wait(waiter: WorkWaiter, idle_since: float, max_idle: float) -> None:
    """Wait for work, never past ``--max-idle`` (0: wait as long as the waiter says)."""
    if max_idle <= 0:
        waiter.wait_for_work()
    else:
        waiter.wait_for_work(max(0.0, max_idle - (time.monotonic() - idle_since)))


def still_waiting(idle_since: float, max_idle: float) -> bool:
    return max_idle <= 0 or time.monotonic() - idle_since < max_idle


def batched_loop(
    engine: Engine, store: ActionProposalStore, waiter: WorkWaiter, args: argparse.Namespace
) -> int:
    """Claim up to ``--batch`` proposals, run each, settle them all at once and claim the next
    batch in the same step (``settle_many_and_claim_next``); until idle."""
    idle_since = time.monotonic()
    settled = 0
    waiting: list[ClaimResult] = []
    while still_waiting(idle_since, args.max_idle):
        if not waiting:
            waiting = store.claim_next(args.worker, args.lease_ms, limit=args.batch)
        if not waiting:
            idle_wait(waiter, idle_since, args.max_idle)
            continue
        waiter.work_found()
        idle_since = time.monotonic()
        for claim in waiting:
            refuse_sealed(claim)
        kinds = {c.work.id: c.outcome for c in waiting if c.work}
        done: list[Settlement] = []
        while waiting:
            keep_alive(store, waiting, args.lease_ms)
            if waiting:
                done.append(run_one(engine, waiting.pop(0), args.work_seconds))
        if not done:
            continue
        outcomes, waiting = store.settle_many_and_claim_next(
            done, args.worker, args.lease_ms, args.batch
        )
        for item, outcome in zip(done, outcomes, strict=True):
            print(f"{item.proposal_id} ({kinds[item.proposal_id]}) -> {outcome.outcome}")
            settled += outcome.outcome == "settled"
    print(f"settled {settled} proposal(s) on {engine.dialect.name}; idle, stopping")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=os.environ.get("AGORA_DATABASE_URL", "sqlite:///agora.db"))
    parser.add_argument("--worker", default=f"{socket.gethostname()}-{os.getpid()}")
    parser.add_argument("--lease-ms", type=int, default=30_000)
    parser.add_argument(
        "--max-idle", type=float, default=5.0, help="stop after N idle seconds (0: never)"
    )
    parser.add_argument(
        "--poll", type=float, default=5.0, help="claim at least every N seconds when idle"
    )
    parser.add_argument(
        "--listen-db",
        default=os.environ.get("AGORA_LISTEN_DATABASE_URL"),
        help="a direct PostgreSQL URL to LISTEN on, when --db goes through a pooler",
    )
    parser.add_argument("--batch", type=int, default=0, help="claim up to K at once (1-1000)")
    parser.add_argument("--work-seconds", type=float, default=0.0, help="time each job takes")
    args = parser.parse_args()

    engine = open_engine(args.db)
    domain.create_all(engine)
    store = ActionProposalStore(engine)
    with WorkWaiter(engine, poll_interval=args.poll, listen_url=args.listen_db) as waiter:
        how = waiter.notice or f"{waiter.mode}, claiming at least every {args.poll:g} s"
        print(f"waiting for work: {how}", file=sys.stderr, flush=True)
        if args.batch:
            return batched_loop(engine, store, waiter, args)
        return single_loop(engine, store, waiter, args)


def single_loop(
    engine: Engine, store: ActionProposalStore, waiter: WorkWaiter, args: argparse.Namespace
) -> int:
    """Claim one proposal, run it, settle it; until idle."""
    idle_since = time.monotonic()
    settled = 0
    while still_waiting(idle_since, args.max_idle):
        claim = store.claim_next(args.worker, args.lease_ms)
        if claim.work is None or claim.lease is None:
            idle_wait(waiter, idle_since, args.max_idle)
            continue
        waiter.work_found()
        idle_since = time.monotonic()
        refuse_sealed(claim)
        work, lease = claim.work, claim.lease
        try:
            result = execute_refund(engine, work.idempotency_key, work.input_value)
            outcome = store.settle(work.id, lease.token, lease.generation, "succeeded", result)
        except Exception as exc:  # a failed side effect is recorded, not retried blindly
            outcome = store.settle(work.id, lease.token, lease.generation, "failed", error=str(exc))
        # "lost" means our lease expired and another worker took over: nothing more to do.
        print(f"{work.id} {work.tool_name} ({claim.outcome}) -> {outcome.outcome}", flush=True)
        settled += outcome.outcome == "settled"
    print(f"settled {settled} proposal(s) on {engine.dialect.name}; idle, stopping")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
