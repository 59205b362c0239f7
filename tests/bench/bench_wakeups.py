"""Benchmark: from a decision's commit to its claim, and an idle worker's CPU (issue 30).

One decision at a time: the producer (this process) waits a random gap (uniform 0 to
``--gap-ms``, the same gaps for every system of a round), approves one pending proposal
(``ActionProposalStore.decide``, its own transaction) and notes the time when the commit has
returned; the worker (its own process, waiting idle) notes the time its claim returned the work
and prints it; the next decision waits for that line. Latency = claim time - commit time, both
``CLOCK_MONOTONIC`` (one clock for every process of the machine). Systems:

- ``agora notify``: PostgreSQL, ``WorkWaiter`` listening (``agora_work``), poll interval 30 s;
- ``agora polling``: PostgreSQL, ``WorkWaiter(listen=False)``: adaptive polling 10 ms .. 1 s;
- ``pgqueuer asyncpg`` / ``pgqueuer psycopg``: PostgreSQL, its ``QueueManager`` on its asyncpg
  driver (its documented default) and on its psycopg one (LISTEN on its insert trigger, its
  defaults: dequeue timeout 30 s, batch 10), fed by ``Queries.enqueue`` from a producer process
  of its own (both in the peer environment, ``BENCH_PEER_PYTHON``, default
  /work/bench-env/bin/python, with ``pip install pgqueuer asyncpg 'psycopg[binary]'``); its
  latency is enqueue-returned to entrypoint-called, measured the same way;
- ``mariadb polling``, ``sqlite polling``: adaptive polling 10 ms .. 1 s.

Idle CPU: every system's worker started on an empty queue, ``getrusage(RUSAGE_SELF)`` user +
system time read by the worker itself over ``--idle`` seconds (all idle at once, after one second
to settle).

Rounds rotate the systems' order; each round has fresh databases and the same gaps for every
system. ``--decisions`` (1,000) is per system over all rounds; ``pgqueuer psycopg`` takes about a
second a decision (its driver's notification watcher holds the connection for up to 1 s, so the
dequeue that a notification triggers waits for it), so it runs ``--slow-cap`` (30) a round.
Prints per system p50 and p99 (ms) over all its decisions pooled, the median over rounds of
each round's p50 and p99 with the range, the idle CPU, and agora notify's p50 against
pgqueuer's within each round (median, range). Run from agora's environment:

    python tests/bench/bench_wakeups.py               # 1,000 decisions a system over 3 rounds
    python tests/bench/bench_wakeups.py --decisions 200 --rounds 2 \
        --systems "agora notify,pgqueuer asyncpg"
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import create_database, drop_database  # noqa: E402

PEER_PYTHON = os.environ.get("BENCH_PEER_PYTHON", "/work/bench-env/bin/python")
LEASE_MS = 600_000
POLL_S = 1.0  # the polling systems' longest wait
NOTIFY_POLL_S = 30.0  # a listening worker's poll, as pgqueuer's default dequeue timeout
SYSTEMS = (
    "agora notify",
    "agora polling",
    "pgqueuer asyncpg",
    "pgqueuer psycopg",
    "mariadb polling",
    "sqlite polling",
)
SLOW = {"pgqueuer psycopg"}  # its driver's notification watcher holds the connection ~1 s
DIALECT = {
    "agora notify": "postgresql",
    "agora polling": "postgresql",
    "pgqueuer asyncpg": "postgresql",
    "pgqueuer psycopg": "postgresql",
    "mariadb polling": "mysql",
    "sqlite polling": "sqlite",
}


def now() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)


# --- the worker side (its own process) --------------------------------------------------------


def _serve_rusage() -> None:
    """Answer each ``rusage`` line on stdin with this process's CPU seconds (a thread of its own,
    blocked on stdin, so the worker's loop is untouched)."""

    def answer() -> None:
        for line in sys.stdin:
            if line.strip() == "rusage":
                r = resource.getrusage(resource.RUSAGE_SELF)
                print(f"cpu {r.ru_utime + r.ru_stime:.6f}", flush=True)
        os._exit(0)  # stdin closed: the benchmark is gone, never outlive it

    threading.Thread(target=answer, daemon=True).start()


def agora_worker(url: str, listen: bool) -> None:
    from agora_cli.store import ActionProposalStore, WorkWaiter, open_engine

    engine = open_engine(url, pool_size=1)
    store = ActionProposalStore(engine)
    poll = NOTIFY_POLL_S if listen else POLL_S
    waiter = WorkWaiter(engine, poll_interval=poll, listen=listen)
    assert waiter.mode == ("listening" if listen else "polling"), waiter.mode
    _serve_rusage()
    print("ready", flush=True)
    while True:
        claim = store.claim_next("bench", LEASE_MS)
        if claim.work is None or claim.lease is None:
            waiter.wait_for_work()
            continue
        print(f"claimed {claim.work.id} {now():.6f}", flush=True)
        waiter.work_found()
        store.settle(claim.work.id, claim.lease.token, claim.lease.generation, "succeeded", {})


async def _pgqueuer_driver(dsn: str, driver: str) -> Any:
    if driver == "asyncpg":
        import asyncpg
        from pgqueuer import AsyncpgDriver

        return AsyncpgDriver(await asyncpg.connect(dsn))
    import psycopg
    from pgqueuer import PsycopgDriver

    return PsycopgDriver(await psycopg.AsyncConnection.connect(dsn, autocommit=True))


async def _pgqueuer_worker(dsn: str, driver: str) -> None:
    from pgqueuer import Queries, QueueManager

    qm = QueueManager(Queries(await _pgqueuer_driver(dsn, driver)))

    @qm.entrypoint("job")
    async def job(j: Any) -> None:
        print(f"claimed {j.payload.decode()} {now():.6f}", flush=True)

    _serve_rusage()
    print("ready", flush=True)
    await qm.run()  # its defaults: dequeue timeout 30 s, batch 10, continuous


async def _pgqueuer_producer(dsn: str, driver: str, install: bool) -> None:
    """Install pgqueuer's schema; then enqueue one job per ``enqueue ID`` line on stdin and print
    the time its (autocommitted) insert returned."""
    from pgqueuer import Queries

    queries = Queries(await _pgqueuer_driver(dsn, driver))
    if install:
        await queries.install()
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line.startswith("enqueue "):
            break
        await queries.enqueue("job", line.split()[1].encode(), 0)
        print(f"enqueued {now():.6f}", flush=True)


def worker_main(argv: list[str]) -> None:
    role, url = argv[0], argv[1]
    if role == "agora":
        agora_worker(url, listen=argv[2] == "listen")
    elif role == "pgqueuer":
        asyncio.run(_pgqueuer_worker(url, argv[2]))
    elif role == "pgqueuer-producer":
        asyncio.run(_pgqueuer_producer(url, argv[2], install=argv[3:] == ["install"]))


# --- the producer side ------------------------------------------------------------------------


class Proc:
    """A child process spoken to by lines."""

    def __init__(self, argv: list[str]) -> None:
        self.p = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def send(self, line: str) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def expect(self, prefix: str) -> str:
        assert self.p.stdout is not None
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError(f"{self.p.args[:3]} ended before {prefix!r}")
            if line.startswith(prefix):
                return line.strip()

    def stop(self) -> None:
        self.p.kill()
        self.p.wait()


def plain_dsn(url: str) -> str:
    from sqlalchemy.engine import make_url

    u = make_url(url)
    return f"postgresql://{u.username}@{u.host}:{u.port or 5432}/{u.database}"


def prepare_agora(url: str, n: int) -> list[str]:
    """Provision ``url`` and create ``n`` pending proposals in one thread; their ids."""
    from agora_cli.store import NewProposal, Scope, open_engine
    from agora_cli.store._proposals import create_proposal
    from agora_cli.store._provision import ensure_agent_tables
    from agora_cli.store._schema import thread

    engine = open_engine(url)
    ensure_agent_tables(engine)
    scope = Scope(None, "bench", "t1")
    ids = []
    with engine.begin() as conn:
        conn.execute(
            thread.insert().values(
                id="t1", actor_ref="bench", title="t", created_at=0, updated_at=0
            )
        )
        for i in range(n):
            new = NewProposal(
                scope=scope, tool_name="job", run_id="r", tool_call_id=f"c{i}", input={}
            )
            ids.append(create_proposal(conn, new).proposal.id)
    engine.dispose()
    return ids


class System:
    """One contender of a round: its database, its worker, how to decide."""

    def __init__(self, label: str, n: int) -> None:
        self.label, self.dialect = label, DIALECT[label]
        self.name, self.url = create_database(self.dialect, "agora_bwake")
        self.producer: Proc | None = None
        me = [sys.executable, __file__, "--worker"]
        if label.startswith("pgqueuer"):
            dsn, driver = plain_dsn(self.url), label.split()[1]
            peer = [PEER_PYTHON, __file__, "--worker"]
            # pgqueuer's schema is installed over psycopg (its CLI's default) in both cases
            installer = Proc([*peer, "pgqueuer-producer", dsn, "psycopg", "install"])
            installer.expect("ready")
            installer.send("stop")
            installer.p.wait()
            self.producer = Proc([*peer, "pgqueuer-producer", dsn, driver])
            self.producer.expect("ready")
            self.worker = Proc([*peer, "pgqueuer", dsn, driver])
        else:
            from agora_cli.store import ActionProposalStore, open_engine

            self.ids = prepare_agora(self.url, n)
            self.engine = open_engine(self.url)
            self.store = ActionProposalStore(self.engine)
            mode = "listen" if label == "agora notify" else "poll"
            self.worker = Proc([*me, "agora", self.url, mode])
        self.worker.expect("ready")

    def decide(self, i: int) -> float:
        """Make item ``i`` claimable; the time its commit returned."""
        if self.producer is not None:
            self.producer.send(f"enqueue j{i}")
            return float(self.producer.expect("enqueued").split()[1])
        from agora_cli.store import Scope

        result = self.store.decide(self.ids[i], Scope(None, "bench", "t1"), "approved", "b")
        done = now()
        assert result.outcome == "applied"
        return done

    def cpu(self) -> float:
        self.worker.send("rusage")
        return float(self.worker.expect("cpu").split()[1])

    def close(self) -> None:
        self.worker.stop()
        if self.producer is not None:
            self.producer.send("stop")
            self.producer.stop()
        else:
            self.engine.dispose()
        drop_database(self.dialect, self.name)


def latencies(system: System, gaps: list[float]) -> list[float]:
    out = []
    for i, gap in enumerate(gaps):
        time.sleep(gap)
        committed = system.decide(i)
        claimed = float(system.worker.expect("claimed").split()[2])
        out.append((claimed - committed) * 1000)
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def one_round(
    labels: list[str], n: int, gap_ms: float, idle_s: float, cap: int, seed: int
) -> dict[str, Any]:
    rng = random.Random(seed)
    gaps = [rng.uniform(0, gap_ms) / 1000 for _ in range(n)]
    systems: list[System] = []
    try:
        for label in labels:
            systems.append(System(label, n))
        time.sleep(1)  # every worker has claimed nothing and waits
        before = [s.cpu() for s in systems]
        time.sleep(idle_s)
        idle = {s.label: (s.cpu() - b) * 1000 for s, b in zip(systems, before, strict=True)}
        result: dict[str, Any] = {}
        for s in systems:
            lat = latencies(s, gaps[:cap] if s.label in SLOW else gaps)
            result[s.label] = {
                "p50": pct(lat, 0.5),
                "p99": pct(lat, 0.99),
                "idle_ms": idle[s.label],
                "ms": lat,
            }
            print(
                f"  {s.label:16} {len(lat):5} decisions  p50 {pct(lat, 0.5):7.2f} ms  p99 "
                f"{pct(lat, 0.99):7.2f} ms  idle CPU {idle[s.label]:6.1f} ms/{idle_s:g}s",
                flush=True,
            )
        return result
    finally:
        for s in systems:
            s.close()


def summary(rounds: list[dict[str, Any]], labels: list[str], idle_s: float) -> None:
    def spread(values: list[float]) -> str:
        return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"

    print(f"\nall rounds' decisions pooled; per round: median (range) over {len(rounds)} round(s)")
    head = [
        "system",
        "n",
        "p50 ms",
        "p99 ms",
        "round p50 ms",
        "round p99 ms",
        f"idle CPU ms/{idle_s:g}s",
    ]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for label in labels:
        got = [r[label] for r in rounds]
        pooled = [x for g in got for x in g["ms"]]
        cells = [
            label,
            str(len(pooled)),
            f"{pct(pooled, 0.5):.2f}",
            f"{pct(pooled, 0.99):.2f}",
            spread([g["p50"] for g in got]),
            spread([g["p99"] for g in got]),
            spread([g["idle_ms"] for g in got]),
        ]
        print("| " + " | ".join(cells) + " |")
    for peer in ("pgqueuer asyncpg", "pgqueuer psycopg"):
        if "agora notify" in labels and peer in labels:
            ratio = [r["agora notify"]["p50"] / r[peer]["p50"] for r in rounds]
            print(
                f"agora notify p50 / {peer} p50, within each round: "
                f"{statistics.median(ratio):.4f} ({min(ratio):.4f}-{max(ratio):.4f})"
            )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker_main(sys.argv[2:])
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up databases and workers
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=1000, help="per system, over all rounds")
    parser.add_argument(
        "--slow-cap", type=int, default=30, help="per round for pgqueuer psycopg (~1 s each)"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gap-ms", type=float, default=50.0, help="random gap before each")
    parser.add_argument("--idle", type=float, default=10.0, help="idle seconds for the CPU figure")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--json", help="write every latency to this file")
    args = parser.parse_args()
    labels = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = set(labels) - set(SYSTEMS)
    if unknown:
        raise SystemExit(f"unknown systems {sorted(unknown)}: choose from {', '.join(SYSTEMS)}")
    for peer, module in (("pgqueuer asyncpg", "asyncpg"), ("pgqueuer psycopg", "psycopg")):
        probe = [PEER_PYTHON, "-c", f"import pgqueuer, {module}"]
        if peer in labels and (not Path(PEER_PYTHON).exists() or subprocess.run(probe).returncode):
            print(
                f"pgqueuer or {module} is not installed in {PEER_PYTHON}: skipped", file=sys.stderr
            )
            labels.remove(peer)
    per_round = -(-args.decisions // args.rounds)
    rounds = []
    for r in range(args.rounds):
        order = labels[r % len(labels) :] + labels[: r % len(labels)]
        print(f"round {r + 1}: {' > '.join(order)}; gaps 0-{args.gap_ms:g} ms", flush=True)
        cap = min(per_round, args.slow_cap)
        rounds.append(one_round(order, per_round, args.gap_ms, args.idle, cap, seed=r))
    summary(rounds, labels, args.idle)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "rounds": rounds}))


if __name__ == "__main__":
    main()
