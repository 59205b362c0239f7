"""Benchmark: agora's worker loop against PostgreSQL job queues and bare loops (issues 15, 29).

Every system drains queued no-op jobs (``--jobs``, 5,000; the systems that take 100 jobs at a
time ``--batch-jobs``, 20,000, so that each worker runs 50 batches, not 12) with W worker
processes, each in a fresh database of its own, in one run; every job must have run exactly
once (each worker reports the jobs it ran; a double or a missing job stops the benchmark).
Prints jobs/s per system, the client CPU per job, and the ratios of agora to the others.

Each system's clock starts at its first job (the earliest first job of its workers: a peer's
own start-up — pgqueuer spends 0.2-0.4 s before its first job — is not counted) and stops when
the system's own tables say every job is done; it starts once the database servers have
written their dirty pages (``flush_server``) and are idle (``quiet_server``: the previous
system's dropped database and this one's load leave InnoDB's purge and PostgreSQL's autovacuum
busy for seconds). Client CPU is each worker process's user + system time
(``resource.getrusage``; Node's ``process.cpuUsage``) from "go" to its last job, summed over
the workers, per job. Each Python worker (agora's, the bare loops', pgqueuer's,
procrastinate's) runs ``gc.collect()`` before it reports ready: the first full collection that
start-up's imports leave pending (30-45 ms of CPU) is paid before the clock, as the imports
are, not inside the first batch of a run that lasts 0.4 s. Rounds interleave the servers (a
round runs PostgreSQL, then MariaDB); within a round the systems a ratio compares run one after
another (jobs one at a time, then 10, then 100 at a time: ``running_order``), and each round
rotates the groups' order and each group's own by one. Each ratio is taken within a round, and
its median over the rounds is printed with the range. The load average is printed per round.

PostgreSQL: agora with k = 1 (``claim_next`` + ``settle``), k = 1 as one step
(``settle_and_claim_next``), k = 10 and k = 100 (``claim_next(limit=k)`` + ``settle_many``),
and k = 10 and 100 as one step a batch (``settle_many_and_claim_next``: the batch settled with
the next claim);
pgqueuer (its defaults: batches of 10; and batch 100); procrastinate; pg-boss (``fetch`` +
``complete``, one job at a time); bare ``FOR UPDATE SKIP LOCKED`` loops on psycopg taking 1, 10
or 100 jobs at a time (the like-for-like baseline for agora's batches).
MariaDB: agora k = 1, 10, 100 (and the steps) against the same bare loops on PyMySQL.

The peers are never agora's dependencies; they live in the benchmark's own environments:

    python3 -m venv /work/bench-env
    /work/bench-env/bin/pip install pgqueuer procrastinate 'psycopg[binary]'
    mkdir -p /work/bench-node && cd /work/bench-node && npm init -y && npm install pg-boss

(``BENCH_PEER_PYTHON`` and ``BENCH_NODE_DIR`` point elsewhere.) A peer that is not installed is
skipped with a message. Run from agora's environment:

    python tests/bench/bench_worker_queues.py              # 5,000 jobs, 4 workers, 5 rounds
    python tests/bench/bench_worker_queues.py --jobs 2000 --batch-jobs 2000 --rounds 1 \
        --dialects mysql
    python tests/bench/bench_worker_queues.py --skip procrastinate,pg-boss

(``--only``/``--skip`` take parts of the systems' labels; ``--status`` prints, under each MariaDB
run, the server's own counters a job: statements, rows read by index, lock waits, bytes each
way.) agora's workers hold their connection
(``ActionProposalStore(..., hold_connection=True)``); ``BENCH_AGORA_QUERY=?prepare_threshold=none``
is appended to their URL to compare without server-side prepares.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import secrets
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

HERE = Path(__file__).resolve().parent
PEER_PYTHON = os.environ.get("BENCH_PEER_PYTHON", "/work/bench-env/bin/python")
NODE_DIR = Path(os.environ.get("BENCH_NODE_DIR", "/work/bench-node"))
LEASE_MS = 600_000


# --- the worker side: each runs as its own process, prints "ready", waits for "go" ------------


def _cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


class Clock:
    """A worker's side of the measurement: CPU from "go", the time of its first job."""

    def __init__(self) -> None:
        self.cpu0 = 0.0
        self.first: float | None = None

    def ready(self) -> None:
        # Start-up's imports (SQLAlchemy's, a peer's own) leave some 50,000 objects for the
        # collector's first full pass, which the first allocating loop then pays: 30-45
        # ms of CPU inside agora's first batch of 100 claims, a tenth of a 0.4 s run's CPU over
        # four workers. Paid here, before the clock, as the imports are — by every Python worker.
        gc.collect()
        print("ready", flush=True)
        sys.stdin.readline()
        self.cpu0 = _cpu()

    def job(self) -> None:
        if self.first is None:
            self.first = time.time()

    def report(self, ran: list[Any]) -> None:
        doc = {"ran": ran, "first": self.first, "end": time.time(), "cpu": _cpu() - self.cpu0}
        print(json.dumps(doc), flush=True)


def agora_worker(url: str, name: str, k: int, mode: str) -> None:
    from agora_cli.store._engine import open_engine
    from agora_cli.store._proposals import ActionProposalStore, Settlement

    query = os.environ.get("BENCH_AGORA_QUERY", "")
    store = ActionProposalStore(open_engine(url + query, pool_size=1), hold_connection=True)
    # warm up as the bare loop's connect does: the connection, the lazy imports of the hot path
    store.renew("p-none", "x" * 43, 1, LEASE_MS)
    ran: list[str] = []
    ok = {"ok": True}
    clock = Clock()

    def ran_ok(batch: list[Any]) -> list[Any]:
        """The no-op jobs of ``batch`` run (recorded in ``ran``): their settlements."""
        items = []
        for c in batch:
            assert c.work is not None and c.lease is not None
            ran.append(c.work.id)
            items.append(Settlement(c.work.id, c.lease.token, c.lease.generation, "succeeded", ok))
        return items

    clock.ready()
    if mode == "batch-step":  # settle a batch and claim the next in one step
        batch = store.claim_next(name, LEASE_MS, limit=k)
        while batch:
            clock.job()
            items = ran_ok(batch)
            settled_many, batch = store.settle_many_and_claim_next(items, name, LEASE_MS, k)
            assert all(r.outcome == "settled" for r in settled_many)
    elif mode == "step":  # settle one and claim the next in one step
        batch = store.claim_next(name, LEASE_MS, limit=k)
        while batch:
            clock.job()
            c = batch[0]
            assert c.work is not None and c.lease is not None
            ran.append(c.work.id)
            done = Settlement(c.work.id, c.lease.token, c.lease.generation, "succeeded", ok)
            settled, batch = store.settle_and_claim_next(done, name, LEASE_MS, k)
            assert settled.outcome == "settled"
    elif k == 1:  # the single-job path: claim_next, settle
        while True:
            got = store.claim_next(name, LEASE_MS)
            if got.work is None or got.lease is None:
                break
            clock.job()
            ran.append(got.work.id)
            lease = got.lease
            assert store.settle(got.work.id, lease.token, lease.generation, "succeeded", ok)
    else:
        while batch := store.claim_next(name, LEASE_MS, limit=k):
            clock.job()
            items = ran_ok(batch)
            assert all(r.outcome == "settled" for r in store.settle_many(items))
    clock.report(ran)


_QUEUED_ONLY = (
    "SELECT {columns} FROM agent_action_proposal WHERE discovery_state = 'queued' "
    "AND discovery_at <= %s ORDER BY discovery_at LIMIT {k} FOR UPDATE SKIP LOCKED"
)
# What a hand-written worker reads to run a job: its id, which tool, and the tool's input (the
# payload). ``bare loop … ids only`` reads the ids alone, as this loop did before issue 29.
_JOB_COLUMNS = "id, tool_name, input"


def bare_worker(url: str, name: str, k: int, ids_only: bool = False) -> None:
    """The hand-written loop on the raw driver: a SKIP LOCKED read of up to k queued jobs (each
    one's id, tool and input; with ``ids_only`` the ids alone), their claim UPDATE, commit; the
    no-op jobs; their settle UPDATE, commit. One token for the whole batch."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    conn: Any
    if parsed.get_backend_name() == "postgresql":
        import psycopg

        conn = psycopg.connect(
            host=parsed.host, port=parsed.port, user=parsed.username, dbname=parsed.database
        )
    else:
        import pymysql

        conn = pymysql.connect(
            host=parsed.host,
            port=parsed.port or 3306,
            user=parsed.username,
            database=parsed.database,
            charset="utf8mb4",
            autocommit=False,
        )
        with conn.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    read = _QUEUED_ONLY.format(columns="id" if ids_only else _JOB_COLUMNS, k=k)
    ran: list[str] = []
    clock = Clock()
    clock.ready()
    while True:
        now = int(time.time() * 1000)
        token_hash = secrets.token_hex(32)
        with conn.cursor() as cur:
            cur.execute(read, (now,))
            ids = [row[0] for row in cur.fetchall()]
            if not ids:
                conn.commit()
                break
            clock.job()
            marks = ", ".join(["%s"] * len(ids))
            cur.execute(
                "UPDATE agent_action_proposal SET execution_state = 'running', lease_owner = %s, "
                "lease_token_hash = %s, lease_expires_at = %s, generation = generation + 1, "
                "attempts = attempts + 1, discovery_state = 'running', discovery_at = %s, "
                f"updated_at = %s, version = version + 1 WHERE id IN ({marks})",
                (name, token_hash, now + LEASE_MS, now + LEASE_MS, now, *ids),
            )
        conn.commit()
        ran.extend(ids)
        with conn.cursor() as cur:
            cur.execute(
                "UPDATE agent_action_proposal SET execution_state = 'succeeded', result = %s, "
                "settled_at = %s, lease_token_hash = NULL, lease_expires_at = NULL, "
                "discovery_state = 'done', discovery_at = NULL, updated_at = %s, "
                f"version = version + 1 WHERE id IN ({marks}) AND lease_token_hash = %s "
                "AND generation = 1 AND execution_state = 'running' AND lease_expires_at > %s",
                ('{"ok":true}', now, now, *ids, token_hash, now),
            )
            assert cur.rowcount == len(ids)
        conn.commit()
    conn.close()
    clock.report(ran)


async def _pgqueuer_worker(dsn: str, batch: int) -> None:
    import psycopg
    from pgqueuer import PsycopgDriver, Queries, QueueManager
    from pgqueuer.types import QueueExecutionMode

    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    qm = QueueManager(Queries(PsycopgDriver(conn)))
    ran: list[str] = []
    clock = Clock()

    @qm.entrypoint("job")
    async def job(j: Any) -> None:
        clock.job()
        ran.append(j.payload.decode())

    clock.ready()
    if batch:
        await qm.run(batch_size=batch, mode=QueueExecutionMode.drain)
    else:  # its defaults
        await qm.run(mode=QueueExecutionMode.drain)
    clock.report(ran)


async def _procrastinate_worker(dsn: str) -> None:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))
    ran: list[int] = []
    clock = Clock()

    @app.task(name="job")
    async def job(n: int) -> None:
        clock.job()
        ran.append(n)

    async with app.open_async():
        clock.ready()
        await app.run_worker_async(wait=False, install_signal_handlers=False)
    clock.report(ran)


async def _pgqueuer_setup(dsn: str, n: int) -> None:
    import psycopg
    from pgqueuer import PsycopgDriver, Queries

    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    queries = Queries(PsycopgDriver(conn))
    await queries.install()
    for start in range(0, n, 5000):
        chunk = range(start, min(n, start + 5000))
        await queries.enqueue(
            ["job"] * len(chunk), [str(i).encode() for i in chunk], [0] * len(chunk)
        )
    await conn.close()


async def _procrastinate_setup(dsn: str, n: int) -> None:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @app.task(name="job")
    async def job(n: int) -> None:  # pragma: no cover - only deferred here
        pass

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        for start in range(0, n, 5000):
            await job.batch_defer_async(*({"n": i} for i in range(start, min(n, start + 5000))))


PGBOSS_JS = r"""
// pg-boss worker for bench_worker_queues.py: setup DSN N | work DSN
const { PgBoss } = (() => { const m = require('pg-boss'); return { PgBoss: m.PgBoss || m } })()
const readline = require('readline')
async function main () {
  const [cmd, dsn, n] = process.argv.slice(2)
  const boss = new PgBoss({ connectionString: dsn, max: 2, supervise: false, schedule: false })
  boss.on('error', e => console.error(e))
  await boss.start()
  if (cmd === 'setup') {
    await boss.createQueue('job')
    for (let s = 0; s < Number(n); s += 5000) {
      const jobs = []
      const stop = Math.min(Number(n), s + 5000)
      for (let i = s; i < stop; i++) jobs.push({ name: 'job', data: { n: i } })
      await boss.insert(jobs)
    }
    await boss.stop({ graceful: false, wait: true })
    return
  }
  const ran = []
  let first = null
  console.log('ready')
  const lines = readline.createInterface({ input: process.stdin })
  await new Promise(resolve => lines.once('line', resolve))
  const cpu0 = process.cpuUsage()
  for (;;) {
    const jobs = await boss.fetch('job')  // one job at a time, as a worker takes it
    if (!jobs || jobs.length === 0) break
    if (first === null) first = Date.now() / 1000
    ran.push(jobs[0].data.n)  // the no-op job
    await boss.complete('job', jobs[0].id)
  }
  const used = process.cpuUsage(cpu0)
  const cpu = (used.user + used.system) / 1e6
  console.log(JSON.stringify({ ran, first, end: Date.now() / 1000, cpu }))
  await boss.stop({ graceful: false, wait: true })
  process.exit(0)
}
main().catch(e => { console.error(e); process.exit(1) })
"""


def worker_main(argv: list[str]) -> None:
    system, url = argv[0], argv[1]
    if system == "agora":
        agora_worker(url, argv[4], int(argv[2]), argv[3])
    elif system == "bare":
        bare_worker(url, argv[4], int(argv[2]), ids_only=argv[3] == "ids")
    elif system == "pgqueuer":
        asyncio.run(_pgqueuer_worker(url, int(argv[2])))
    elif system == "procrastinate":
        asyncio.run(_procrastinate_worker(url))
    elif system == "pgqueuer-setup":
        asyncio.run(_pgqueuer_setup(url, int(argv[2])))
    elif system == "procrastinate-setup":
        asyncio.run(_procrastinate_setup(url, int(argv[2])))
    else:
        raise SystemExit(f"unknown worker {system}")


# --- the parent: fresh database, load, start W workers, time the drain, verify ----------------


def peer_missing(peer: str) -> str | None:
    if peer == "pg-boss":
        if not (NODE_DIR / "node_modules" / "pg-boss").is_dir():
            return f"pg-boss not installed in {NODE_DIR} (cd there; npm install pg-boss)"
        return None
    if not Path(PEER_PYTHON).exists():
        return f"no peer environment at {PEER_PYTHON} (see this file's docstring)"
    probe = subprocess.run([PEER_PYTHON, "-c", f"import {peer}"], capture_output=True)
    if probe.returncode != 0:
        return f"{peer} not installed in {PEER_PYTHON}"
    return None


def plain_dsn(url: str) -> str:
    from sqlalchemy.engine import make_url

    u = make_url(url)
    return f"postgresql://{u.username}@{u.host}:{u.port or 5432}/{u.database}"


def load_agora(url: str, n: int) -> None:
    sys.path.insert(0, str(HERE))
    from bench_claim_throughput import load

    from agora_cli.store._engine import open_engine
    from agora_cli.store._provision import ensure_agent_tables

    engine = open_engine(url)
    ensure_agent_tables(engine)
    engine.dispose()
    load(url, n)


# agora and the bare loops: whether any job is still queued or running, one probe of the
# discovery index (a count of every row that has not succeeded would scan the table on each
# poll: server CPU taken from the workers it times). A job is done when its state is ``done``.
_ANY_LEFT = (
    "SELECT count(*) FROM (SELECT 1 FROM agent_action_proposal "
    "WHERE discovery_state IN ('queued', 'running') LIMIT 1) AS left_"
)
REMAINING = {
    "agora": _ANY_LEFT,
    "bare": _ANY_LEFT,
    "pgqueuer": "SELECT count(*) FROM pgqueuer",
    "procrastinate": "SELECT count(*) FROM procrastinate_jobs WHERE status <> 'succeeded'",
    "pg-boss": "SELECT count(*) FROM pgboss.job WHERE state <> 'completed'",
}


def drained_at(url: str, system: str, procs: list[Any]) -> float:
    """When the system's own tables say every job is done (polled every 5 ms): the same
    finish line for all, whatever a worker does after (a peer's shutdown, a final flush)."""
    from sqlalchemy import text

    from agora_cli.store._engine import open_engine

    engine = open_engine(url, pool_size=1)
    sql = text(REMAINING[system])
    try:
        with engine.connect() as conn:
            while True:
                left = conn.execute(sql).scalar()
                conn.rollback()
                if left == 0:
                    return time.time()
                if all(p.poll() is not None for p in procs):
                    raise SystemExit(f"{system}: workers stopped with {left} jobs not done")
                time.sleep(0.005)
    finally:
        engine.dispose()


class Measured(NamedTuple):
    rate: float  # jobs/s from the system's first job to the last job done
    cpu_ms: float  # client CPU per job, summed over the workers (ms)
    server_ms: float | None  # the database server's CPU per job (ms), where it can be read


_SERVERS = ("mariadbd", "mysqld", "postgres")
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def server_cpu() -> float | None:
    """The CPU seconds of the database servers on this machine (Linux ``/proc``): user + system
    of every ``mariadbd``/``postgres`` process, with the children each has reaped (PostgreSQL's
    postmaster collects its exited backends'). Every such process on the machine counts: run the
    benchmark with no other database server busy (the test clusters down). ``None`` where
    ``/proc`` cannot be read."""
    total = 0
    seen = False
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        if name not in _SERVERS:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        seen = True
    return total / _TICK if seen else None


# ``--status`` (MariaDB): the server's own counters a job, per run — what each system makes the
# server do (rows read by index, rows locked past, lock waits, statements, bytes), beside its
# CPU. Read before "go" and after the last job; the bench's own polls (``drained_at``) add a
# query every 5 ms. (For instructions rather than counters: ``bench_server_instructions``.)
_STATUS = (
    "Questions",
    "Com_commit",
    "Com_rollback",
    "Handler_read_key",
    "Handler_read_next",
    "Handler_read_rnd_next",
    "Handler_update",
    "Handler_write",
    "Innodb_row_lock_waits",
    "Innodb_row_lock_time",
    "Innodb_buffer_pool_read_requests",
    "Innodb_rows_read",
    "Innodb_rows_updated",
    "Bytes_received",
    "Bytes_sent",
    "Created_tmp_tables",
    "Select_scan",
    "Select_range",
    "Sort_rows",
)
STATUS = False  # set by ``--status``


def server_status(dialect: str) -> dict[str, int] | None:
    """The server's ``_STATUS`` counters (MariaDB, with ``--status``); ``None`` elsewhere."""
    if not STATUS or dialect == "postgresql":
        return None
    from _common import ADMIN

    from agora_cli.store._engine import open_engine

    admin = open_engine(ADMIN[dialect], isolation_level="AUTOCOMMIT", pool_size=1)
    try:
        with admin.connect() as conn:
            rows = conn.exec_driver_sql("SHOW GLOBAL STATUS").all()
    finally:
        admin.dispose()
    wanted = set(_STATUS)
    return {str(name): int(value) for name, value in rows if name in wanted}


def flush_server(dialect: str, limit_s: float = 30.0) -> str:
    """Write the server's dirty pages and move its checkpoint up to now, before a timed run;
    what was done, for the run's line. Each run loads thousands of rows and the one before it
    dropped a database: their pages stay dirty in memory, and the server writes them when its
    redo log fills — a flush that then lands inside whichever system's run comes next (single
    rounds of the same code swung from 0.71x to 1.31x of the bare loop at k = 100 on MariaDB).
    MariaDB: ``innodb_max_dirty_pages_pct`` set to 0 until no page is dirty, then put back;
    PostgreSQL: ``CHECKPOINT``. Needs the admin login's privilege; without it, says so."""
    from _common import ADMIN

    from agora_cli.store._engine import open_engine

    admin = open_engine(ADMIN[dialect], isolation_level="AUTOCOMMIT", pool_size=1)
    start = time.time()
    try:
        with admin.connect() as conn:
            if dialect == "postgresql":
                conn.exec_driver_sql("CHECKPOINT")
                return f"checkpoint {time.time() - start:.1f} s"
            was = conn.exec_driver_sql("SELECT @@GLOBAL.innodb_max_dirty_pages_pct").scalar()
            conn.exec_driver_sql("SET GLOBAL innodb_max_dirty_pages_pct = 0")
            try:
                dirty = None
                while time.time() - start < limit_s:
                    dirty = conn.exec_driver_sql(
                        "SELECT variable_value FROM information_schema.global_status "
                        "WHERE variable_name = 'INNODB_BUFFER_POOL_PAGES_DIRTY'"
                    ).scalar()
                    if int(dirty or 0) == 0:
                        break
                    time.sleep(0.05)
            finally:
                conn.exec_driver_sql(f"SET GLOBAL innodb_max_dirty_pages_pct = {float(was)}")
            return f"pages written {time.time() - start:.1f} s ({dirty} dirty left)"
    except Exception as exc:  # no privilege: the run goes on, and its line says so
        return f"not flushed ({type(exc).__name__})"
    finally:
        admin.dispose()


def quiet_server(limit_s: float = 15.0) -> float:
    """Wait until the database servers are idle — under 5 % of a core over 250 ms, or
    ``limit_s`` — and return the seconds waited. The previous system's database was just
    dropped and this one's just loaded: InnoDB's purge and PostgreSQL's autovacuum then work
    for seconds, and a system timed during that work pays for another's (one system's rounds
    swung from 0.7x to 1.2x of the same code)."""
    start = time.time()
    before = server_cpu()
    if before is None:
        return 0.0
    while time.time() - start < limit_s:
        time.sleep(0.25)
        now = server_cpu()
        if now is None or now - before < 0.25 * 0.05:
            break
        before = now
    return time.time() - start


def run_system(
    label: str,
    dialect: str,
    system: str,
    url: str,
    argv: list[str],
    n: int,
    workers: int,
    cwd: Path | None = None,
) -> Measured:
    procs = []
    for i in range(workers):
        proc = subprocess.Popen(
            [*argv, f"w{i}"],  # the worker's name comes last
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
        )
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != "ready":
            proc.kill()
            raise SystemExit(
                f"{label}: worker did not start: {line}{proc.stderr.read() if proc.stderr else ''}"
            )
        procs.append(proc)
    flushed = flush_server(dialect)
    waited = quiet_server()
    status0 = server_status(dialect)
    go = time.time()
    server0 = server_cpu()
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    end = drained_at(url, system, procs)
    server1 = server_cpu()
    status1 = server_status(dialect)
    ran: list[Any] = []
    firsts: list[float] = []
    cpu = 0.0
    for proc in procs:
        out, err = proc.communicate(timeout=3600)
        if proc.returncode != 0:
            raise SystemExit(f"{label}: worker failed: {err[-2000:]}")
        doc = json.loads(out.strip().splitlines()[-1])
        ran.extend(str(x) for x in doc["ran"])
        if doc["first"] is not None:
            firsts.append(float(doc["first"]))
        cpu += float(doc["cpu"])
    start = min(firsts) if firsts else go
    elapsed = end - start
    counts = Counter(ran)
    doubles = sum(c - 1 for c in counts.values() if c > 1)
    missing = n - len(counts)
    rate = len(ran) / elapsed
    cpu_ms = cpu * 1000 / max(1, len(ran))
    server_ms = None
    if server0 is not None and server1 is not None:
        server_ms = (server1 - server0) * 1000 / max(1, len(ran))
    served = "" if server_ms is None else f"; server {server_ms:.3f} ms/job"
    print(
        f"  {label:<34} {workers}w: {len(ran)} jobs in {elapsed:6.2f} s from the first job "
        f"(+{start - go:.2f} s to it) = {rate:7,.0f} jobs/s; CPU {cpu_ms:.3f} ms/job{served}; "
        f"ran twice {doubles}; never ran {missing}; {flushed}; server quiet after {waited:.1f} s",
        flush=True,
    )
    if status0 is not None and status1 is not None:
        per_job = ", ".join(
            f"{name} {(status1[name] - status0[name]) / max(1, len(ran)):.2f}"
            for name in _STATUS
            if name in status0 and name in status1
        )
        print(f"    a job: {per_job}", flush=True)
    if doubles or missing:
        raise SystemExit(f"{label}: {doubles} jobs ran twice, {missing} never ran")
    return Measured(rate, cpu_ms, server_ms)


def contenders(dialect: str) -> list[list[tuple[str, tuple[str, int, str]]]]:
    """(label, (system, k, mode)) for ``dialect``, in groups of the systems each ratio compares
    (jobs one at a time, 10 at a time, 100 at a time; the slow peers), in the first round's
    order."""
    ones: list[tuple[str, tuple[str, int, str]]] = [
        ("agora k=1", ("agora", 1, "single")),
        ("agora k=1 settle_and_claim_next", ("agora", 1, "step")),
        ("bare loop k=1", ("bare", 1, "")),
    ]
    tens: list[tuple[str, tuple[str, int, str]]] = [
        ("agora k=10", ("agora", 10, "batch")),
        ("agora k=10 settle_many_and_claim_next", ("agora", 10, "batch-step")),
        ("bare loop k=10", ("bare", 10, "")),
    ]
    hundreds: list[tuple[str, tuple[str, int, str]]] = [
        ("agora k=100", ("agora", 100, "batch")),
        ("agora k=100 settle_many_and_claim_next", ("agora", 100, "batch-step")),
        ("bare loop k=100", ("bare", 100, "")),
    ]
    if dialect != "postgresql":
        return [ones, tens, hundreds]
    tens.append(("pgqueuer defaults", ("pgqueuer", 0, "")))
    hundreds.append(("pgqueuer batch 100", ("pgqueuer", 100, "")))
    # one job at a time too, but 15 s a run each: a group of their own, not between the loops
    slow = [("procrastinate", ("procrastinate", 0, "")), ("pg-boss", ("pg-boss", 0, ""))]
    return [ones, tens, hundreds, slow]


def running_order(
    groups: list[list[tuple[str, tuple[str, int, str]]]], rotation: int
) -> list[tuple[str, tuple[str, int, str]]]:
    """The systems of one round: the groups in turn, each group's systems one after another
    (the runs a ratio compares are minutes apart at most, not a whole round: this machine's
    speed drifts by a third within minutes), the groups' order and each group's own order
    rotated by ``rotation`` places, so that every system leads and follows in turn."""
    kept = [group for group in groups if group]
    order: list[tuple[str, tuple[str, int, str]]] = []
    if not kept:
        return order
    shift = rotation % len(kept)
    for group in kept[shift:] + kept[:shift]:
        turn = rotation % len(group)
        order += group[turn:] + group[:turn]
    return order


# Systems taking this many jobs at a time drain ``--batch-jobs`` jobs (default 20,000), not
# ``--jobs``: 5,000 jobs are 12 batches a worker, over in 0.3 s, and such a run measured its
# start more than its pace (agora k=100 / pgqueuer batch 100 on PostgreSQL: 1.14 over 5,000
# jobs, 1.33 over 20,000, the same code, rounds side by side). Every ratio compares systems
# that drained the same number of jobs.
BATCH_K = 100


def measure_round(
    dialect: str,
    jobs: int,
    workers: int,
    wanted: Callable[[str], bool],
    rotation: int,
    batch_jobs: int,
) -> dict[str, Measured]:
    """One run of every wanted system in ``running_order`` for round ``rotation``: ``jobs``
    jobs each, ``batch_jobs`` for the systems that take 100 at a time (``BATCH_K``)."""
    from _common import create_database, drop_database

    me = [sys.executable, str(Path(__file__).resolve()), "_worker"]
    rates: dict[str, Measured] = {}
    groups = [[c for c in group if wanted(c[0])] for group in contenders(dialect)]
    for label, (system, k, mode) in running_order(groups, rotation):
        n = batch_jobs if k >= BATCH_K else jobs
        if system in ("pgqueuer", "procrastinate", "pg-boss"):
            why = peer_missing(system)
            if why:
                print(f"  {label:<34} skipped: {why}", flush=True)
                continue
        name, url = create_database(dialect, f"agora_bwq_{system.replace('-', '')}")
        try:
            if system in ("agora", "bare"):
                load_agora(url, n)
                argv = [*me, system, url, str(k), mode]
                rates[label] = run_system(label, dialect, system, url, argv, n, workers)
            elif system in ("pgqueuer", "procrastinate"):
                dsn = plain_dsn(url)
                peer = [PEER_PYTHON, str(Path(__file__).resolve()), "_worker"]
                subprocess.run([*peer, f"{system}-setup", dsn, str(n)], check=True)
                extra = [str(k)] if system == "pgqueuer" else []
                argv = [*peer, system, dsn, *extra]
                rates[label] = run_system(label, dialect, system, url, argv, n, workers)
            else:
                dsn = plain_dsn(url)
                script = NODE_DIR / "agora_bench_pgboss.js"
                script.write_text(PGBOSS_JS)
                subprocess.run(
                    ["node", str(script), "setup", dsn, str(n)], check=True, cwd=NODE_DIR
                )
                argv = ["node", str(script), "work", dsn]
                rates[label] = run_system(label, dialect, system, url, argv, n, workers, NODE_DIR)
        finally:
            drop_database(dialect, name)
    return rates


# (a, b, goal): the ratio a / b of jobs/s, and the issue's goal for it ("" for none)
RATE_PAIRS = [
    ("agora k=1", "bare loop k=1", ">= 0.9"),
    ("agora k=10", "bare loop k=10", ">= 0.9 (MariaDB)"),
    ("agora k=100", "bare loop k=100", ">= 0.9 (MariaDB)"),
    ("agora k=10", "pgqueuer defaults", ">= 1.3"),
    ("agora k=100", "pgqueuer batch 100", ">= 1.2"),
    ("agora k=10 settle_many_and_claim_next", "bare loop k=10", ">= 0.9 (MariaDB)"),
    ("agora k=100 settle_many_and_claim_next", "bare loop k=100", ">= 0.9 (MariaDB)"),
    ("agora k=10 settle_many_and_claim_next", "pgqueuer defaults", ">= 1.3"),
    ("agora k=100 settle_many_and_claim_next", "pgqueuer batch 100", ">= 1.2"),
    ("agora k=1 settle_and_claim_next", "bare loop k=1", ">= 0.9"),
    ("agora k=1 settle_and_claim_next", "agora k=1", ""),
    ("agora k=1", "procrastinate", ""),
    ("agora k=1", "pg-boss", ""),
]
# (a, b, goal): the ratio a / b of client CPU per job
CPU_PAIRS = [
    ("agora k=1", "bare loop k=1", "<= 1.3"),
    ("agora k=10", "bare loop k=10", ""),
    ("agora k=100", "bare loop k=100", ""),
    ("agora k=1 settle_and_claim_next", "bare loop k=1", "<= 1.3"),
    ("agora k=10 settle_many_and_claim_next", "bare loop k=10", ""),
    ("agora k=100 settle_many_and_claim_next", "bare loop k=100", ""),
]


def spread(values: list[float], fmt: str) -> str:
    low, high = min(values), max(values)
    return f"{format(statistics.median(values), fmt)} ({format(low, fmt)}-{format(high, fmt)})"


def summary(dialect: str, workers: int, rounds: list[dict[str, Measured]]) -> None:
    """Medians (range) over the rounds: jobs/s and CPU per system, then each ratio per round."""
    print(f"{dialect}, {workers} workers, {len(rounds)} rounds: median (min-max)", flush=True)
    labels = [
        label
        for group in contenders(dialect)
        for label, _ in group
        if any(label in r for r in rounds)
    ]
    for label in labels:
        rates = [r[label].rate for r in rounds if label in r]
        cpus = [r[label].cpu_ms for r in rounds if label in r]
        servers = [s for r in rounds if label in r and (s := r[label].server_ms) is not None]
        served = f"; server {spread(servers, '.3f')} ms/job" if servers else ""
        print(
            f"  {label:<34} {spread(rates, ',.0f')} jobs/s; CPU {spread(cpus, '.3f')} ms/job"
            f"{served}",
            flush=True,
        )
    for what, pairs in (("jobs/s", RATE_PAIRS), ("CPU/job", CPU_PAIRS)):
        for a, b, goal in pairs:
            per_round = [
                (r[a].rate / r[b].rate if what == "jobs/s" else r[a].cpu_ms / r[b].cpu_ms)
                for r in rounds
                if a in r and b in r
            ]
            if not per_round:
                continue
            shown = ", ".join(f"{x:.2f}" for x in per_round)
            aim = f" goal {goal};" if goal else ""
            print(
                f"  {dialect} ratio {what} {a} / {b}: {spread(per_round, '.2f')};{aim} "
                f"rounds {shown}",
                flush=True,
            )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_worker":
        worker_main(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5_000)
    parser.add_argument(
        "--batch-jobs", type=int, default=20_000, help="jobs for the systems taking 100 at once"
    )
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--dialects", default="postgresql,mysql")
    parser.add_argument("--only", default="", help="comma-separated label parts to run")
    parser.add_argument("--skip", default="", help="comma-separated label parts to leave out")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--status", action="store_true", help="MariaDB: the server's counters a job, per run"
    )
    args = parser.parse_args()
    global STATUS
    STATUS = args.status
    only = {o.strip() for o in args.only.split(",") if o.strip()}
    skip = {o.strip() for o in args.skip.split(",") if o.strip()}

    def wanted(label: str) -> bool:
        return (not only or any(o in label for o in only)) and not any(s in label for s in skip)

    dialects = args.dialects.split(",")
    print(
        f"worker_queues: jobs={args.jobs} (batches of 100: {args.batch_jobs}), "
        f"workers={args.workers}, rounds={args.rounds}, "
        f"cpus={os.cpu_count()}, no-op jobs, every job verified to run exactly once; each "
        "system's clock starts at its first job",
        flush=True,
    )
    results: dict[str, list[dict[str, Measured]]] = {d: [] for d in dialects}
    for r in range(args.rounds):
        for dialect in dialects:
            load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
            print(f"round {r + 1}, {dialect} (load average {load}):", flush=True)
            measured = measure_round(dialect, args.jobs, args.workers, wanted, r, args.batch_jobs)
            results[dialect].append(measured)
    print(f"load average at the end {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for dialect in dialects:
        summary(dialect, args.workers, results[dialect])


if __name__ == "__main__":
    main()
