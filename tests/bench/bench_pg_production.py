"""Benchmark: agora's worker on PostgreSQL as it runs in production (issue 27, item 4).

Two parts, each with worker processes that claim approved proposals (``claim_next``) and settle
them (``settle``; part 1 also batched, ``--k 1,10``: ``claim_next(limit=10)`` + ``settle_many``),
each process with its own engine (``open_engine(url, pool_size=1)``) and
``ActionProposalStore``:

1. **Direct vs through PgBouncer in transaction mode**, at 4 and 16 workers: the same N queued
   proposals (``--n`` 2,000; batched ``--n-batched`` 10,000) in a fresh database per system and
   round, drained by each system in turn (the order rotates every round). Systems: PostgreSQL
   on 127.0.0.1:5432 directly; the shared transaction-mode PgBouncer of
   ``tests/pgbouncer/pooler.py`` (127.0.0.1:6432, ``default_pool_size = 3``: 16 workers share 3
   server connections); and a transaction-mode PgBouncer with ``default_pool_size = 16`` that
   this script boots with the same ``pooler.py`` on 127.0.0.1:6436 (its own directory; stopped
   at the end if this script started it). jobs/s = settled proposals / (last settle - go).
   Every proposal must be settled exactly once and end ``succeeded`` (a double or a missing one
   stops the run); ratios pooled / direct are taken within a round, the median and the range
   over rounds printed. The pooler's ``SHOW POOLS`` is sampled every 50 ms during a drain: the
   most server connections and the most clients waiting for one.

2. **Seconds without progress across a Patroni switchover and a primary kill**, on the
   three-node cluster of ``tests/patroni/cluster.py`` (``ttl`` 20, ``loop_wait`` 1), through the
   libpq multi-host URL (``h1:5441,h2:5442,h3:5443/db?target_session_attrs=read-write``). Four
   workers claim and settle with a 3 s lease and keep going until every proposal is
   ``succeeded`` (a claim cut off by the event is claimed again once its lease expires); each
   records the monotonic time of every settle. After 2 s of progress the main process triggers
   ``cluster.switchover()``, ``cluster.kill_primary()`` (``kill -9`` of the leader's
   postmaster; its Patroni restarts it in place) or ``kill_primary(with_patroni=True)`` (the
   leader's Patroni killed too, as if its machine died: a failover once the leader key's
   ``ttl`` runs out). A probe thread meanwhile makes a synchronously committed write on a fresh
   connection every 50 ms (``cluster.write_probe``): the longest gap between its successes is
   the cluster's own outage, next to the ``took`` that ``switchover()``/``kill_primary()``
   return (a switchover's includes patronictl's start-up). The figure is the longest gap
   between consecutive settles over all workers, and agora's added time = that gap - the
   probe's outage (goal: under 1 s). Any exception reaching a worker is counted (agora's own
   ``AgoraError`` apart from anything else). Every use of the cluster holds the file lock its
   tests hold (``tests/patroni/conftest.py``: ``_one_at_a_time``), one round at a time, and
   starts and ends on a healthy cluster (``cluster.wait_healthy``).

    .venv/bin/python tests/bench/bench_pg_production.py                 # both parts, 3 rounds
    .venv/bin/python tests/bench/bench_pg_production.py --part pooler --n 2000 --rounds 3
    .venv/bin/python tests/bench/bench_pg_production.py --part patroni --events switchover,kill
    .venv/bin/python tests/bench/bench_pg_production.py --k 1 --no-pool16 --rounds 1  # quick

The poolers: ``pooler.py up`` (this script boots the shared one if nothing answers on 6432, and
leaves it running). The cluster: ``tests/patroni/cluster.py up`` (never booted or stopped here:
part 2 is skipped, saying so, when the cluster is not healthy).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import importlib.util
import itertools
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
sys.path.insert(0, str(HERE))

POOLER = TESTS / "pgbouncer" / "pooler.py"
PG_DIRECT_PORT = 5432
POOL3_PORT = 6432  # pooler.py's shared transaction-mode instance
POOL16_PORT = int(os.environ.get("BENCH_PG_POOL16_PORT", "6436"))
POOL16_DIR = os.environ.get("BENCH_PG_POOL16_DIR", "/tmp/agora-pgbouncer-bench-pool16")
THROUGHPUT_LEASE_MS = 600_000
FAILOVER_LEASE_MS = 3_000
RUN_LIMIT_S = 240.0  # a worker gives up a run after this long (a stuck proposal is a finding)
OK = {"ok": True}


# --- the worker side: one process each, driven by JSON lines on stdin -----------------------


def _remaining(engine: Any) -> int | None:
    """Proposals not yet succeeded (``None``: the count itself failed: the bench's own read,
    outside agora's retries, so never counted as an error that reached the worker)."""
    try:
        with engine.connect() as conn:
            n = conn.exec_driver_sql(
                "SELECT count(*) FROM agent_action_proposal WHERE execution_state <> 'succeeded'"
            ).scalar()
            conn.rollback()
            return int(n)
    except Exception:
        engine.dispose(close=False)
        return None


def _run(
    store: Any, engine: Any, name: str, k: int, lease_ms: int, until_all: bool
) -> dict[str, Any]:
    """Claim and settle until nothing is due (``until_all``: until every proposal is
    ``succeeded``, waiting out the leases of claims a failover cut off)."""
    from agora_cli.store import AgoraError, Settlement
    from agora_cli.store._engine import retry_stats

    stats = retry_stats()
    stats.reset()
    settled: list[str] = []
    times: list[float] = []
    lost = 0
    errors: list[list[Any]] = []
    started = time.monotonic()
    while time.monotonic() - started < RUN_LIMIT_S:
        try:
            if k == 1:
                got = store.claim_next(name, lease_ms)
                batch = [] if got.work is None or got.lease is None else [got]
            else:
                batch = store.claim_next(name, lease_ms, limit=k)
            if not batch:
                if not until_all or _remaining(engine) == 0:
                    break
                time.sleep(0.1)
                continue
            if k == 1:
                c = batch[0]
                results = [
                    store.settle(c.work.id, c.lease.token, c.lease.generation, "succeeded", OK)
                ]
            else:
                results = store.settle_many(
                    [
                        Settlement(c.work.id, c.lease.token, c.lease.generation, "succeeded", OK)
                        for c in batch
                    ]
                )
            now = time.monotonic()
            for c, r in zip(batch, results, strict=True):
                if r.outcome == "settled":
                    settled.append(c.work.id)
                    times.append(now)
                else:
                    lost += 1
        except AgoraError as exc:
            errors.append([time.monotonic(), "agora", f"{type(exc).__name__}: {exc}"])
            time.sleep(0.05)
        except Exception as exc:
            kind = f"{type(exc).__module__}.{type(exc).__name__}"
            errors.append([time.monotonic(), "other", f"{kind}: {exc}"])
            time.sleep(0.05)
    return {
        "settled": settled,
        "times": times,
        "lost": lost,
        "errors": errors,
        "retried": stats.retried,
        "gave_up": stats.gave_up,
        "by_code": stats.by_code,
        "timed_out": time.monotonic() - started >= RUN_LIMIT_S,
    }


def worker_main(name: str) -> None:
    from agora_cli.store import ActionProposalStore, open_engine

    engine: Any = None
    store: Any = None
    job: dict[str, Any] = {}
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "quit":
            break
        if cmd == "go":
            report = _run(store, engine, name, job["k"], job["lease_ms"], job["until_all"])
            engine.dispose()
            print(json.dumps(report), flush=True)
            continue
        job = json.loads(cmd)
        engine = open_engine(job["url"], pool_size=1)  # connects once: warm before the clock
        store = ActionProposalStore(engine)
        print("ready", flush=True)


# --- the parent ---------------------------------------------------------------------------------


class Workers:
    """``count`` worker processes, started once and given one run after another."""

    def __init__(self, count: int) -> None:
        me = [sys.executable, str(Path(__file__).resolve()), "_worker"]
        self.procs = [
            subprocess.Popen(
                [*me, f"w{i}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            )
            for i in range(count)
        ]
        self._expect("ready")

    def _send(self, line: str) -> None:
        for p in self.procs:
            assert p.stdin is not None
            p.stdin.write(line + "\n")
            p.stdin.flush()

    def _expect(self, word: str) -> None:
        for p in self.procs:
            assert p.stdout is not None
            got = p.stdout.readline().strip()
            if got != word:
                self.close()
                raise SystemExit(f"a worker said {got!r}, not {word!r} (its error is above)")

    def open(self, url: str, k: int, lease_ms: int, until_all: bool) -> None:
        self._send(json.dumps({"url": url, "k": k, "lease_ms": lease_ms, "until_all": until_all}))
        self._expect("ready")

    def go(self) -> float:
        t0 = time.monotonic()
        self._send("go")
        return t0

    def collect(self) -> list[dict[str, Any]]:
        out = []
        for p in self.procs:
            assert p.stdout is not None
            line = p.stdout.readline()
            if not line:
                self.close()
                raise SystemExit("a worker died (its error is above)")
            out.append(json.loads(line))
        return out

    def close(self) -> None:
        for p in self.procs:
            with contextlib.suppress(OSError, ValueError):
                assert p.stdin is not None
                p.stdin.write("quit\n")
                p.stdin.close()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def states(url: str) -> tuple[Counter[str], Counter[int]]:
    """The proposals' execution states, and how many were claimed how many times."""
    from agora_cli.store import open_engine

    engine = open_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.exec_driver_sql(
                "SELECT execution_state, attempts FROM agent_action_proposal"
            ).all()
    finally:
        engine.dispose()
    return Counter(str(r[0]) for r in rows), Counter(int(r[1]) for r in rows)


def verify(label: str, n: int, reports: list[dict[str, Any]], url: str) -> dict[str, Any]:
    """Every proposal settled exactly once and ``succeeded``; the errors that reached workers."""
    settled = [pid for r in reports for pid in r["settled"]]
    counts = Counter(settled)
    doubles = sum(c - 1 for c in counts.values() if c > 1)
    missing = n - len(counts)
    by_state, attempts = states(url)
    errors = [e for r in reports for e in r["errors"]]
    found = {
        "doubles": doubles,
        "missing": missing,
        "states": dict(by_state),
        "attempts": dict(sorted(attempts.items())),
        "lost_settles": sum(r["lost"] for r in reports),
        "errors": errors,
        "retried": sum(r["retried"] for r in reports),
        "gave_up": sum(r["gave_up"] for r in reports),
        "by_code": dict(sum((Counter(r["by_code"]) for r in reports), Counter())),
        "timed_out": any(r["timed_out"] for r in reports),
    }
    if doubles or missing or by_state != Counter({"succeeded": n}):
        print(f"  {label}: NOT EXACTLY ONCE: {json.dumps(found)[:3000]}", flush=True)
    return found


def pg_url(database: str, port: int) -> str:
    return f"postgresql://postgres@127.0.0.1:{port}/{database}"


def fresh_pg(n: int) -> tuple[str, str]:
    """A new database on the direct server, provisioned, with ``n`` queued proposals."""
    from _common import create_database
    from bench_claim_throughput import load

    from agora_cli.store import ensure_agent_tables, open_engine

    name, url = create_database("postgresql", "agora_bpgp")
    engine = open_engine(url)
    ensure_agent_tables(engine)
    engine.dispose()
    load(url, n)
    return name, url


def close_server_connections(database: str) -> None:
    """End the server connections a pooler keeps open to ``database`` (idle for 10 minutes
    otherwise: a few drains of 16 would fill the server's 100 connections)."""
    import psycopg

    with psycopg.connect(pg_url("postgres", PG_DIRECT_PORT), autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
            (database,),
        )


def pooler_answers(port: int) -> bool:
    import psycopg

    try:
        with psycopg.connect(
            host="127.0.0.1", port=port, user="postgres", dbname="postgres", connect_timeout=2
        ) as conn:
            return conn.execute("SELECT 1").fetchone() == (1,)
    except Exception:
        return False


def pool_size_of(port: int) -> int | None:
    """``default_pool_size`` as the pooler's admin console says."""
    import psycopg

    try:
        with psycopg.connect(
            host="127.0.0.1", port=port, user="postgres", dbname="pgbouncer", autocommit=True
        ) as conn:
            for row in conn.execute("SHOW CONFIG", prepare=False).fetchall():
                if row[0] == "default_pool_size":
                    return int(row[1])
    except Exception:
        return None
    return None


class PoolSampler(threading.Thread):
    """``SHOW POOLS`` of the pooler's admin console for one database every 50 ms during a
    drain: the most clients waiting for a server connection, the most server connections."""

    def __init__(self, port: int, database: str) -> None:
        super().__init__(daemon=True)
        self.port, self.database = port, database
        self.stop = threading.Event()
        self.samples = 0
        self.max_waiting = 0
        self.max_servers = 0
        self.max_active_clients = 0

    def run(self) -> None:
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname="pgbouncer", autocommit=True
        ) as conn:
            while not self.stop.is_set():
                cur = conn.execute("SHOW POOLS", prepare=False)
                names = [c.name for c in cur.description or []]
                for row in cur.fetchall():
                    doc = dict(zip(names, row, strict=True))
                    if doc.get("database") != self.database:
                        continue
                    self.samples += 1
                    servers = sum(int(doc.get(k) or 0) for k in ("sv_active", "sv_idle", "sv_used"))
                    self.max_waiting = max(self.max_waiting, int(doc.get("cl_waiting") or 0))
                    self.max_active_clients = max(
                        self.max_active_clients, int(doc.get("cl_active") or 0)
                    )
                    self.max_servers = max(self.max_servers, servers)
                self.stop.wait(0.05)

    def result(self) -> dict[str, int]:
        self.stop.set()
        self.join()
        return {
            "samples": self.samples,
            "max_clients_waiting": self.max_waiting,
            "max_server_connections": self.max_servers,
        }


def pooler_env(pool16: bool) -> dict[str, str]:
    env = dict(os.environ)
    if pool16:
        env.update(
            AGORA_PGBOUNCER_DIR=POOL16_DIR,
            AGORA_PGBOUNCER_PORT=str(POOL16_PORT),
            AGORA_PGBOUNCER_POOL_SIZE="16",
        )
    return env


def ensure_poolers(want16: bool) -> bool:
    """The shared pooler answers (booted if not: it stays up); the pool-16 one if wanted.
    Whether this script booted the pool-16 instance (then it stops it at the end)."""
    if not pooler_answers(POOL3_PORT):
        subprocess.run([sys.executable, str(POOLER), "up"], check=True, env=pooler_env(False))
    if not want16 or pooler_answers(POOL16_PORT):
        return False
    subprocess.run(
        [sys.executable, str(POOLER), "up"], check=True, env=pooler_env(True), stdout=sys.stderr
    )
    return True


def spread(values: list[float], fmt: str = "{:,.0f}") -> str:
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-" + (
        f"{fmt.format(max(values))})"
    )


def part_pooler(args: argparse.Namespace, log: dict[str, Any]) -> None:
    booted16 = ensure_poolers(not args.no_pool16)
    systems = [("direct", PG_DIRECT_PORT), ("pgbouncer txn pool 3", POOL3_PORT)]
    if not args.no_pool16:
        systems.append(("pgbouncer txn pool 16", POOL16_PORT))
    for label, port in systems[1:]:
        print(f"  {label}: 127.0.0.1:{port}, default_pool_size={pool_size_of(port)}", flush=True)
    contenders = [(s, p, k) for s, p in systems for k in args.k]
    try:
        for count in args.workers:
            workers = Workers(count)
            rates: list[dict[str, float]] = []
            try:
                for r in range(args.rounds):
                    shift = r % len(contenders)
                    rates.append({})
                    for label, port, k in contenders[shift:] + contenders[:shift]:
                        key = f"{label} k={k}"
                        n = args.n if k == 1 else args.n_batched
                        rates[-1][key] = one_drain(workers, count, label, port, k, n, log)
            finally:
                workers.close()
            print(
                f"postgresql, {count} worker processes, N={args.n} (k=1), {args.n_batched} "
                f"(batched), median of {args.rounds} (range):"
            )
            for label, _, k in contenders:
                key = f"{label} k={k}"
                print(f"  {key:<28} {spread([x[key] for x in rates])} jobs/s", flush=True)
            for label, _, k in contenders:
                if label == "direct":
                    continue
                per_round = [x[f"{label} k={k}"] / x[f"direct k={k}"] for x in rates]
                log.setdefault("ratios", {})[f"{count}w {label} k={k} / direct"] = per_round
                print(
                    f"  ratio {label} / direct, k={k}: {spread(per_round, '{:.2f}')}"
                    f" (rounds: {', '.join(f'{x:.2f}' for x in per_round)})",
                    flush=True,
                )
    finally:
        # Dropped at the end, not after each drain: DROP DATABASE waits for a checkpoint (up to
        # 7 s here after a drain's writes), which would land in the next system's drain.
        from _common import drop_database

        for name in log.pop("to_drop", []):
            drop_database("postgresql", name)
        if booted16:
            subprocess.run([sys.executable, str(POOLER), "down"], env=pooler_env(True))


def one_drain(
    workers: Workers, count: int, label: str, port: int, k: int, n: int, log: dict[str, Any]
) -> float:
    name, _direct = fresh_pg(n)
    log.setdefault("to_drop", []).append(name)
    url = pg_url(name, port)
    workers.open(url, k, THROUGHPUT_LEASE_MS, until_all=False)
    sampler = PoolSampler(port, name) if port != PG_DIRECT_PORT else None
    if sampler is not None:
        sampler.start()
    t0 = workers.go()
    reports = workers.collect()
    pooled = sampler.result() if sampler is not None else {}
    end = max(t for r in reports for t in r["times"])
    found = verify(label, n, reports, pg_url(name, PG_DIRECT_PORT))
    close_server_connections(name)
    rate = float(len([p for r in reports for p in r["settled"]]) / (end - t0))
    errors = found["errors"]
    print(
        f"  {label:<22} k={k:<3} {count:>2} workers: {n} in {end - t0:6.2f} s = {rate:7,.0f} "
        f"jobs/s; twice {found['doubles']}, never {found['missing']}, "
        f"states {found['states']}; errors {len(errors)}, retried {found['retried']}"
        + (
            f"; pooler: at most {pooled['max_server_connections']} server connections, "
            f"{pooled['max_clients_waiting']} clients waiting for one"
            if pooled
            else ""
        ),
        flush=True,
    )
    for e in errors[:3]:
        print(f"    error reaching a worker ({e[1]}): {e[2][:500]}", flush=True)
    row = {"system": label, "k": k, "workers": count, "n": n, "seconds": end - t0}
    row.update(rate=rate, pooler=pooled, **{key: v for key, v in found.items() if key != "errors"})
    log.setdefault("drains", []).append({**row, "errors": errors[:20]})
    if found["doubles"] or found["missing"]:
        raise SystemExit(f"{label}: not exactly once")
    return rate


# --- part 2: the Patroni cluster ------------------------------------------------------------------


def load_cluster_module() -> Any:
    name = "patroni_cluster"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, TESTS / "patroni" / "cluster.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@contextlib.contextmanager
def cluster_lock(cluster: Any) -> Iterator[float]:
    """The lock the Patroni tests hold (tests/patroni/conftest.py ``_one_at_a_time``); the
    seconds spent waiting for it."""
    asked = time.monotonic()
    with open(cluster.BASE_DIR.parent / f".{cluster.BASE_DIR.name}.tests.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            cluster.wait_healthy(120)
            yield time.monotonic() - asked
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _with_database(url: str, name: str) -> str:
    head, _, query = url.partition("?")
    return f"{head.rsplit('/', 1)[0]}/{name}?{query}"


class Probe(threading.Thread):
    """A synchronously committed write on a fresh connection every ``every`` seconds; the
    monotonic time of each success."""

    def __init__(self, cluster: Any, every: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.cluster, self.every = cluster, every
        self.ok: list[float] = []
        self.failed = 0
        self.attempts: list[tuple[float, float, bool]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            began = time.monotonic()
            if self.cluster.write_probe(timeout=3) is not None:
                self.ok.append(time.monotonic())
                self.attempts.append((began, self.ok[-1], True))
            else:
                self.failed += 1
                self.attempts.append((began, time.monotonic(), False))
            self.stop.wait(self.every)


def longest_gap(times: list[float]) -> tuple[float, float, float]:
    """The longest gap between consecutive instants: (seconds, its start, its end)."""
    ordered = sorted(times)
    best = (0.0, ordered[0], ordered[0])
    for a, b in itertools.pairwise(ordered):
        if b - a > best[0]:
            best = (b - a, a, b)
    return best


def one_event(
    cluster: Any, workers: Workers, event: str, n: int, log: dict[str, Any]
) -> dict[str, Any] | None:
    import psycopg
    from bench_claim_throughput import load

    from agora_cli.store import ensure_agent_tables, open_engine

    with cluster_lock(cluster) as waited:
        name = f"agora_bpgf_{os.getpid()}_{os.urandom(3).hex()}"
        with psycopg.connect(cluster.libpq_url(), autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        url = _with_database(cluster.libpq_url(), name)
        try:
            engine = open_engine(url)
            ensure_agent_tables(engine)
            engine.dispose()
            load(url, n)
            before = {m["name"]: m["role"] for m in cluster.members()}
            workers.open(url, 1, FAILOVER_LEASE_MS, until_all=True)
            probe = Probe(cluster)
            probe.start()
            t0 = workers.go()
            time.sleep(2.0)
            at = time.monotonic()
            if event == "switchover":
                took, old, new = cluster.switchover()
            elif event == "kill":
                took, old, new = cluster.kill_primary()
            else:
                took, old, new = cluster.kill_primary(with_patroni=True)
            reports = workers.collect()
            probe.stop.set()
            probe.join()
            healed = cluster.wait_healthy(180)
            found = verify(event, n, reports, url)
        finally:
            for _ in range(3):  # the primary may just have changed
                try:
                    with psycopg.connect(
                        cluster.libpq_url(), autocommit=True, connect_timeout=5
                    ) as conn:
                        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                    break
                except psycopg.OperationalError:
                    cluster.wait_writable(time.monotonic() + 60)
    settles = sorted(t for r in reports for t in r["times"])
    outage, o_from, o_to = longest_gap([t for t in probe.ok if t >= t0])
    # The event's gap: the longest that starts before a write succeeded again (a later gap is
    # the end of the queue waiting out a cut-off claim's lease, not the event).
    gap, g_from, g_to = longest_gap([t for t in settles if t <= o_to] + [
        next((t for t in settles if t > o_to), o_to)
    ])  # fmt: skip
    # The first successful probe after the outage began before it ended: the cluster took
    # writes again somewhere in [began, o_to] (a long attempt: its commit waited).
    began = next((a for a, b, ok in probe.attempts if ok and b == o_to), o_to)
    before_event = [t for t in settles if t < at]
    baseline = longest_gap(before_event)[0] if len(before_event) > 1 else float("nan")
    after = [t for t in settles if t > g_to]
    errors = found["errors"]
    row = {
        "event": event,
        "old": old,
        "new": new,
        "roles_before": before,
        "lock_wait_s": waited,
        "took_s": took,
        "probe_outage_s": outage,
        "probe_outage_from_event_s": [o_from - at, o_to - at],
        "probe_failures": probe.failed,
        "probe_first_ok_attempt_s": [began - at, o_to - at],
        "probe_attempts": [
            [a - at, b - at, ok] for a, b, ok in probe.attempts if o_from - 1 <= a <= o_to + 1
        ],
        "worker_errors_by_time": sorted(e[0] - at for e in errors),
        "gap_s": gap,
        "gap_from_event_s": [g_from - at, g_to - at],
        "added_s": gap - outage,
        "added_vs_took_s": gap - took,
        "reconnect_lag_s": g_to - o_to,
        "baseline_gap_s": baseline,
        "settles_after_gap": len(after),
        "healthy_again_s": healed,
        "rate_before": len(before_event) / (at - t0),
        "seconds_total": max(settles) - t0,
        **{key: v for key, v in found.items() if key != "errors"},
        "errors": errors[:20],
        "error_kinds": dict(Counter(e[1] for e in errors)),
    }
    log.setdefault("events", []).append(row)
    print(
        f"  {event:<10} {old} -> {new}: no settle for {gap:5.2f} s "
        f"(from {g_from - at:+.2f} s to {g_to - at:+.2f} s of the event); probe outage "
        f"{outage:5.2f} s ({o_from - at:+.2f} to {o_to - at:+.2f}, its first success began "
        f"{began - at:+.2f}); took {took:5.2f} s; "
        f"added {gap - outage:+.2f} s (vs took {gap - took:+.2f}); first settle "
        f"{g_to - o_to:+.2f} s after the first probe write",
        flush=True,
    )
    print(
        f"    {n} proposals: twice {found['doubles']}, never {found['missing']}, states "
        f"{found['states']}, claims per proposal {found['attempts']}, lost settles "
        f"{found['lost_settles']}; retried {found['retried']} {found['by_code']}, gave up "
        f"{found['gave_up']}; errors reaching workers {row['error_kinds'] or 0}; "
        f"{row['rate_before']:.0f} jobs/s before; baseline gap {baseline:.3f} s; "
        f"{len(after)} settles after the gap; healthy again {healed:.1f} s; lock wait "
        f"{waited:.1f} s",
        flush=True,
    )
    for e in errors[:5]:
        print(f"    error reaching a worker ({e[1]}, {e[0] - at:+.2f} s): {e[2][:500]}")
    if not after:
        print("    WARNING: the queue drained before the cluster came back (raise --n-failover)")
    return row


def part_patroni(args: argparse.Namespace, log: dict[str, Any]) -> None:
    cluster = load_cluster_module()
    if not cluster.healthy():
        print(f"patroni: skipped: the cluster is not healthy ({cluster.members()})")
        return
    print(
        f"patroni: 3 nodes, ttl {cluster.TTL} s, loop_wait {cluster.LOOP_WAIT} s, retry_timeout "
        f"{cluster.RETRY_TIMEOUT} s, synchronous_mode; 4 workers, lease "
        f"{FAILOVER_LEASE_MS / 1000:.0f} s, N={args.n_failover}, libpq multi-host URL",
        flush=True,
    )
    workers = Workers(4)
    rows: dict[str, list[dict[str, Any]]] = {}
    try:
        for _ in range(args.rounds):
            for event in args.events:
                row = one_event(cluster, workers, event, args.n_failover, log)
                if row is not None:
                    rows.setdefault(event, []).append(row)
    finally:
        workers.close()
    for event, got in rows.items():
        print(f"patroni {event} (median of {len(got)}, range):")
        for key, label in (
            ("gap_s", "seconds without a settle"),
            ("probe_outage_s", "seconds without a write (probe)"),
            ("took_s", f"{event}() took"),
            ("added_s", "agora's added time (gap - probe outage)"),
            ("added_vs_took_s", "gap - took"),
            ("reconnect_lag_s", "first settle after the first probe write"),
        ):
            print(f"  {label:<42} {spread([r[key] for r in got], '{:.2f}')} s")
        stuck = sum(args.n_failover - r["states"].get("succeeded", 0) for r in got)
        errors = sum(len(r["errors"]) for r in got)
        print(f"  errors reaching workers: {errors}; stuck (not succeeded): {stuck}")


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "_worker":
        worker_main(sys.argv[2])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["pooler", "patroni", "both"], default="both")
    parser.add_argument("--n", type=int, default=2000, help="proposals per drain (part 1)")
    parser.add_argument(
        "--n-batched", type=int, default=10_000, help="proposals per batched drain (part 1)"
    )
    parser.add_argument("--n-failover", type=int, default=10_000, help="proposals per event")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", default="4,16", help="worker counts for part 1")
    parser.add_argument("--k", default="1,10", help="claim batch sizes for part 1, e.g. 1,10")
    parser.add_argument("--no-pool16", action="store_true", help="only the shared pool of 3")
    parser.add_argument(
        "--events",
        default="switchover,kill,kill-patroni",
        help="switchover, kill, kill-patroni (failover)",
    )
    parser.add_argument("--json", help="write every measurement to this file")
    args = parser.parse_args()
    args.workers = [int(w) for w in args.workers.split(",")]
    args.k = [int(k) for k in args.k.split(",")]
    args.events = [e.strip() for e in args.events.split(",") if e.strip()]
    print(
        f"pg_production: part={args.part}, n={args.n}, n_batched={args.n_batched}, "
        f"n_failover={args.n_failover}, rounds="
        f"{args.rounds}, workers={args.workers}, k={args.k}, cpus={os.cpu_count()}, load "
        f"average {' '.join(f'{x:.1f}' for x in os.getloadavg())}",
        flush=True,
    )
    log: dict[str, Any] = {"args": vars(args), "load_start": os.getloadavg()}
    started = time.monotonic()
    try:
        if args.part in ("pooler", "both"):
            part_pooler(args, log)
        if args.part in ("patroni", "both"):
            part_patroni(args, log)
    finally:
        log["load_end"] = os.getloadavg()
        log["seconds"] = time.monotonic() - started
        if args.json:
            Path(args.json).write_text(json.dumps(log, indent=1, default=str))
    print(
        f"pg_production: {time.monotonic() - started:.0f} s, load average now "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}",
        flush=True,
    )


if __name__ == "__main__":
    main()
