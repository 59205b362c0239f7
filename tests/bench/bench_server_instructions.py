"""Benchmark: the MariaDB server's instructions a job, agora's worker against the bare loops
(issue 29).

``bench_worker_queues`` reads the server's CPU seconds a job; on this machine they move by 70 %
between runs of the same system, and a difference between two systems of a fifth is lost in
them. This counts the instructions the server executes instead (valgrind's callgrind, on a
private ``mariadbd`` this benchmark boots under valgrind: the same count for the same
statements, whatever else the machine is doing).

Two parts:

- **A job**, as ``bench_worker_instructions`` counts the client: one worker
  (``bench_worker_queues``' own loops), each run in a fresh database; the server's counters
  are zeroed at "go" and dumped when the worker has drained its jobs; the count of a run of
  ``n2`` jobs less that of a run of ``n1``, over ``n2 - n1``. Printed for every thread of the
  server together and for the busiest one (the worker's connection: InnoDB's background
  threads — purge, the page cleaner — do the rest, some of it on timers).
- **A batch of 10, statement by statement** (``--statements``): one connection runs each
  statement of a claim and a settle, in agora's form and in the bare loop's, then a
  ``ROLLBACK`` (the same rows again each time), 40 times; the count a time, less that of a
  ``ROLLBACK`` alone. This is where the difference of the first part comes from. The read,
  the claim's compound statement and the settle's run prepared too (``_mysql_prepared``, as a
  worker's held connection runs them: prepared before the count, values bound).

The server: MariaDB from the machine's own packages (``mariadbd``, ``mariadb-install-db``),
in a temporary data directory, on a free port of 127.0.0.1, with the settings of the
machine's server that matter here (``innodb_flush_log_at_trx_commit = 1``, a 128 MB buffer
pool, no binary log, the same ``sql_mode``); native AIO is off (valgrind does not know
io_uring). It is stopped and its directory removed however the run ends. Under valgrind it
runs some 50 times slower: a run takes minutes.

    python tests/bench/bench_server_instructions.py               # k = 1, 10, 100, statements
    python tests/bench/bench_server_instructions.py --only "k=10" --skip "k=100" --repeat 1
    python tests/bench/bench_server_instructions.py --statements

Needs valgrind (Debian's ``valgrind``) and MariaDB's server package.
"""

from __future__ import annotations

import argparse
import getpass
import glob
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

# (n1, n2) jobs for a loop that takes k at a time: the server under valgrind runs a batch in
# tens of milliseconds
RUNS = {1: (100, 400), 10: (300, 1_300), 100: (1_000, 4_000)}
_SUMMARY = re.compile(rb"^summary: (\d+)", re.MULTILINE)
_SQL_MODE = (
    "STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_AUTO_CREATE_USER,NO_ENGINE_SUBSTITUTION"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A private ``mariadbd`` under callgrind: ``zero`` its counters, ``dump`` them."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, out: Path) -> None:
        self.proc, self.port, self.out = proc, port, out
        self.admin = f"mysql://root@127.0.0.1:{port}/"  # for ``_common``'s scratch databases

    def _control(self, flag: str) -> None:
        subprocess.run(
            ["callgrind_control", flag, str(self.proc.pid)], capture_output=True, check=True
        )

    def zero(self) -> None:
        self._control("-z")

    def dump(self) -> tuple[int, int]:
        """The instructions since ``zero``: every thread's, and the busiest thread's."""
        self._control("-d")
        total = top = 0
        # callgrind writes a dump (a file a thread) when the server next runs: wait for the first
        # file, then a moment for the rest
        for _ in range(100):
            files = glob.glob(str(self.out / "callgrind.out.*.*"))
            if files:
                break
            time.sleep(0.1)
        time.sleep(0.3)
        for name in glob.glob(str(self.out / "callgrind.out.*.*")):
            with open(name, "rb") as f:
                found = _SUMMARY.search(f.read(1 << 20))
            os.remove(name)
            if found:
                total += int(found.group(1))
                top = max(top, int(found.group(1)))
        return total, top


@contextmanager
def private_server() -> Iterator[Server]:
    for tool in ("valgrind", "callgrind_control", "mariadbd", "mariadb-install-db"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            raise SystemExit(f"{tool} is not installed (Debian: valgrind, mariadb-server)")
    base = Path(tempfile.mkdtemp(prefix="agora_cg_mariadb_"))
    data, out = base / "data", base / "out"
    out.mkdir()
    user = getpass.getuser()
    subprocess.run(
        ["mariadb-install-db", "--no-defaults", f"--datadir={data}", f"--user={user}",
         "--auth-root-authentication-method=normal"],
        check=True, capture_output=True,
    )  # fmt: skip
    port = _free_port()
    mariadbd = shutil.which("mariadbd") or "/usr/sbin/mariadbd"
    log = open(base / "server.log", "wb")
    proc = subprocess.Popen(
        [
            "valgrind", "--tool=callgrind", "--separate-threads=yes",
            f"--callgrind-out-file={out}/callgrind.out.%p",
            mariadbd, "--no-defaults", f"--datadir={data}", f"--user={user}",
            f"--port={port}", "--bind-address=127.0.0.1", f"--socket={base}/sock",
            f"--pid-file={base}/pid", "--innodb-flush-log-at-trx-commit=1",
            "--innodb-buffer-pool-size=128M", "--innodb-buffer-pool-size-max=256M",
            "--innodb-log-file-size=96M", "--innodb-use-native-aio=0", "--skip-name-resolve",
            "--skip-log-bin", "--performance-schema=0", "--query-cache-type=0",
            f"--sql-mode={_SQL_MODE}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )  # fmt: skip
    try:
        import pymysql

        deadline = time.time() + 300
        while True:
            try:
                pymysql.connect(host="127.0.0.1", port=port, user="root").close()
                break
            except pymysql.err.OperationalError:
                if proc.poll() is not None or time.time() > deadline:
                    said = (base / "server.log").read_text(errors="replace")[-2000:]
                    raise SystemExit(f"the private MariaDB did not start: {said}") from None
                time.sleep(1)
        yield Server(proc, port, out)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(base, ignore_errors=True)


def drained(server: Server, system: str, k: int, mode: str, n: int) -> tuple[int, int]:
    """The server's instructions (all threads; the busiest) while one worker drains ``n``."""
    from _common import create_database, drop_database
    from bench_worker_queues import load_agora

    name, url = create_database("mysql", "agora_bsi", server.admin)
    worker: subprocess.Popen[str] | None = None
    try:
        load_agora(url, n)
        worker = subprocess.Popen(
            [sys.executable, str(HERE / "bench_worker_queues.py"), "_worker", system, url,
             str(k), mode, "w0"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )  # fmt: skip
        assert worker.stdout is not None
        if worker.stdout.readline().strip() != "ready":
            raise SystemExit(f"{system} k={k}: the worker did not start")
        time.sleep(1.0)  # the load's commit and the worker's warm-up are in before the zero
        server.zero()
        out, err = worker.communicate("go\n", timeout=3_600)
        counts = server.dump()
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
        drop_database("mysql", name, server.admin)
    if worker.returncode != 0:
        raise SystemExit(f"{system} k={k} {mode}: the worker failed: {err[-2000:]}")
    ran = json.loads(out.strip().splitlines()[-1])["ran"]
    if len(ran) != n or len(set(ran)) != n:
        raise SystemExit(f"{system} k={k} {mode}: {len(ran)} jobs ran, {len(set(ran))} distinct")
    return counts


def per_job(server: Server, system: str, k: int, mode: str) -> tuple[float, float]:
    n1, n2 = RUNS[k]
    small = drained(server, system, k, mode, n1)
    large = drained(server, system, k, mode, n2)
    return (large[0] - small[0]) / (n2 - n1), (large[1] - small[1]) / (n2 - n1)


def statements(server: Server, k: int = 10, times: int = 40) -> None:
    """A claim's and a settle's statements of a batch of ``k``, agora's and the bare loop's,
    each followed by a ``ROLLBACK``: the server's instructions a time, less a ``ROLLBACK``'s."""
    import pymysql
    from _common import create_database, drop_database
    from bench_worker_queues import _JOB_COLUMNS, _QUEUED_ONLY, load_agora

    from agora_cli.store._mysql_prepared import run_prepared
    from agora_cli.store._proposals.queries import (
        fence_mysql,
        next_due_probed,
        settle_fenced_mysql,
        take_leases_mysql,
    )

    name, url = create_database("mysql", "agora_bsi", server.admin)
    conn: Any = None
    try:
        load_agora(url, 2_000)
        conn = pymysql.connect(
            host="127.0.0.1", port=server.port, user="root", database=name, charset="utf8mb4",
            autocommit=False, client_flag=pymysql.constants.CLIENT.MULTI_STATEMENTS,
        )  # fmt: skip
        cur = conn.cursor()
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        conn.commit()
        now = int(time.time() * 1000)

        def lit(sql: str, args: tuple[Any, ...]) -> str:
            return sql % tuple(conn.escape(a) for a in args)

        def run(label: str, sqls: list[Any], changes: int | None = None) -> float:
            """``sqls``: texts, or (text with ``%s``, values) run prepared (``_mysql_prepared``:
            prepared before the count, as a worker's held connection runs them)."""

            def once() -> None:
                for sql in sqls:
                    if isinstance(sql, tuple):
                        got = run_prepared(conn, sql[0], sql[1], 0)
                        if got is None:
                            raise SystemExit(f"{label}: not prepared")
                        changed = got[0]
                        continue
                    cur.execute(sql)
                    changed = cur.rowcount
                    while True:
                        cur.fetchall()
                        if not cur.nextset():
                            break
                if changes is not None and changed != changes:
                    raise SystemExit(f"{label}: {changed} rows changed, not {changes}")
                conn.rollback()

            once()
            server.zero()
            for _ in range(times):
                once()
            return server.dump()[1] / times

        reads = next_due_probed("mysql", k)
        probe = re.compile(r", \(SELECT MIN\(.*?\) AS running_due")
        bare_read = lit(_QUEUED_ONLY.format(columns=_JOB_COLUMNS, k=k), (now,))
        cur.execute(bare_read)
        ids = [row[0] for row in cur.fetchall()]
        conn.rollback()
        hashes = [hashlib.sha256(secrets.token_bytes(32)).hexdigest() for _ in ids]
        marks = ", ".join(["%s"] * len(ids))
        pairs = [v for pair in zip(ids, hashes, strict=True) for v in pair]
        later = now + 600_000
        claim = lit(take_leases_mysql(len(ids)), ("w0", *pairs, later, later, now, *ids))
        bare_claim = lit(
            "UPDATE agent_action_proposal SET execution_state = 'running', lease_owner = %s, "
            "lease_token_hash = %s, lease_expires_at = %s, generation = generation + 1, "
            "attempts = attempts + 1, discovery_state = 'running', discovery_at = %s, "
            f"updated_at = %s, version = version + 1 WHERE id IN ({marks})",
            ("w0", hashes[0], later, later, now, *ids),
        )
        base = run("rollback", [])
        rows: list[tuple[str, float]] = []

        def row(label: str, sqls: list[Any], changes: int | None = None) -> None:
            rows.append((label, run(label, sqls, changes) - base))

        row("claim read: agora's (JSON, the probe)", [lit(reads.queued, (now, now))])
        row("claim read: agora's without the probe", [lit(probe.sub("", reads.queued), (now,))])
        plain = reads.queued.replace("JSON_ARRAY(", "").replace(") AS due", "")
        row("claim read: agora's columns, not as JSON", [lit(plain, (now, now))])
        row("claim read: agora's, prepared", [(reads.queued, (now, now))])
        plain_reads = next_due_probed("mysql", k, False)
        row("claim read: agora's columns, prepared (default)", [(plain_reads.queued, (now, now))])
        row("claim read: the bare loop's", [bare_read])
        row("claim read + UPDATE: the bare loop's", [bare_read, bare_claim], len(ids))
        row("claim read + UPDATE: a token a lease (CASE)", [bare_read, claim], len(ids))
        row(
            "claim read + UPDATE: the same, compound",
            [bare_read, f"BEGIN NOT ATOMIC {claim}; END"],
            len(ids),
        )
        take = take_leases_mysql(len(ids))
        take_args = ("w0", *pairs, later, later, now, *ids)
        row(
            "claim read + UPDATE: the same, prepared",
            [bare_read, (f"BEGIN NOT ATOMIC {take}; END", take_args)],
            len(ids),
        )
        bare_take = (
            "UPDATE agent_action_proposal SET execution_state = 'running', lease_owner = %s, "
            "lease_token_hash = %s, lease_expires_at = %s, generation = generation + 1, "
            "attempts = attempts + 1, discovery_state = 'running', discovery_at = %s, "
            f"updated_at = %s, version = version + 1 WHERE id IN ({marks})"
        )
        row(
            "claim read + UPDATE: the bare loop's, prepared",
            [bare_read, (bare_take, ("w0", hashes[0], later, later, now, *ids))],
            len(ids),
        )
        row(
            "claim read + UPDATE: a token a lease (CASE), prepared",
            [bare_read, (take, take_args)],
            len(ids),
        )
        for chunk in (10, 25, 50):
            if chunk >= len(ids):
                continue
            sqls, chunk_args = [], []
            for at in range(0, len(ids), chunk):
                part = ids[at : at + chunk]
                part_pairs = pairs[2 * at : 2 * (at + len(part))]
                sqls.append(take_leases_mysql(len(part)))
                chunk_args += ["w0", *part_pairs, later, later, now, *part]
            row(
                f"claim read + UPDATE: CASEs of {chunk}, compound, prepared",
                [bare_read, (f"BEGIN NOT ATOMIC {'; '.join(sqls)}; END", tuple(chunk_args))],
                None,
            )
            if chunk == 25:
                apart, at = [], 0
                for sql in sqls:
                    n = sql.count("%s")
                    apart.append((sql, tuple(chunk_args[at : at + n])))
                    at += n
                row("claim read + UPDATE: CASEs of 25, prepared apart", [bare_read, *apart], None)
        # the settles: the batch claimed and committed once, each settle rolled back
        cur.execute(bare_read)
        cur.fetchall()
        cur.execute(claim)
        conn.commit()
        quoted = [conn.escape(i) for i in ids]
        fences = [conn.escape(fence_mysql(i, h, 1)) for i, h in zip(ids, hashes, strict=True)]

        def settle(unkeyed: bool) -> str:
            sql = settle_fenced_mysql(len(ids), (False, False, False), unkeyed)
            result = conn.escape('{"ok": true}')
            return sql % ("'succeeded'", result, "NULL", now, now, now, *quoted, *fences)

        bare_settle = lit(
            "UPDATE agent_action_proposal SET execution_state = 'succeeded', result = %s, "
            "settled_at = %s, lease_token_hash = NULL, lease_expires_at = NULL, "
            "discovery_state = 'done', discovery_at = NULL, updated_at = %s, "
            f"version = version + 1 WHERE id IN ({marks}) AND lease_token_hash IS NOT NULL "
            "AND generation = 1 AND execution_state = 'running' AND lease_expires_at > %s",
            ('{"ok":true}', now, now, *ids, now),
        )
        row("settle: the bare loop's shape (no token)", [bare_settle], len(ids))
        row("settle: fenced a lease (id:hash:generation)", [settle(False)], len(ids))
        row("settle: fenced, the unkeyed-tenant test", [settle(True)], len(ids))
        guard = (
            f"IF ROW_COUNT() = {len(ids)} THEN DO 0; "
            "ELSE SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'x'; END IF"
        )
        row(
            "settle: the same, compound with its test",
            [f"BEGIN NOT ATOMIC {settle(True)}; {guard}; END"],
            len(ids),
        )
        fenced = settle_fenced_mysql(len(ids), (False, False, False), True)
        fence_args = ("succeeded", '{"ok": true}', None, now, now, now, *ids)
        fence_args += tuple(fence_mysql(i, h, 1) for i, h in zip(ids, hashes, strict=True))
        row(
            "settle: the same, prepared",
            [(f"BEGIN NOT ATOMIC {fenced}; {guard}; END", fence_args)],
            len(ids),
        )
        row("settle: fenced, the unkeyed-tenant test, prepared", [(fenced, fence_args)], len(ids))
        for label, count in rows:
            print(f"  {label:<48} {count:>11,.0f} instructions a batch of {len(ids)}", flush=True)
    finally:
        if conn is not None:
            conn.close()  # before the drop: an open transaction would hold its metadata lock
        drop_database("mysql", name, server.admin)


def main() -> None:
    from bench_worker_queues import contenders

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated label parts to run")
    parser.add_argument("--skip", default="", help="comma-separated label parts to leave out")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--statements", action="store_true", help="only the statements")
    parser.add_argument("--batch", type=int, default=10, help="the statements' batch (default 10)")
    args = parser.parse_args()
    only = [o.strip() for o in args.only.split(",") if o.strip()]
    skip = [o.strip() for o in args.skip.split(",") if o.strip()]
    print(
        "server_instructions: a private MariaDB under callgrind; one worker; the server's "
        "instructions a job (the difference of runs of n1 and n2 jobs: "
        f"{', '.join(f'k={k}: {a}/{b}' for k, (a, b) in RUNS.items())}), all threads and the "
        f"busiest (the connection's), each measured {args.repeat} times",
        flush=True,
    )
    # a SIGTERM (a timeout, a kill) ends the run as Ctrl-C does: the server is stopped and its
    # directory removed on the way out
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("stopped by SIGTERM"))
    with private_server() as server:
        if not args.statements:
            counts: dict[str, tuple[str, int, list[float]]] = {}
            for group in contenders("mysql"):
                for label, (system, k, mode) in group:
                    if only and not any(o in label for o in only):
                        continue
                    if any(o in label for o in skip):
                        continue
                    measured = [per_job(server, system, k, mode) for _ in range(args.repeat)]
                    counts[label] = (system, k, [busiest for _, busiest in measured])
                    shown = "; ".join(f"{a:,.0f} all, {b:,.0f} busiest" for a, b in measured)
                    print(f"  {label:<40} {shown} instructions a job", flush=True)
            bare = {k: each for system, k, each in counts.values() if system == "bare"}
            for label, (system, k, each) in counts.items():
                if system == "agora" and k in bare:
                    ratio = statistics.median(each) / statistics.median(bare[k])
                    print(f"  ratio busiest thread {label} / bare loop k={k}: {ratio:.2f}")
        print(
            f"a batch of {args.batch}, statement by statement (the busiest thread, less a "
            "ROLLBACK's):"
        )
        statements(server, args.batch, 40 if args.batch <= 10 else 10)


if __name__ == "__main__":
    main()
