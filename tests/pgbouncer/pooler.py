"""Boot, stop and inspect two PgBouncer instances on 127.0.0.1 in front of the test PostgreSQL.

    python tests/pgbouncer/pooler.py up       # boot (idempotent); prints AGORA_TEST_PGBOUNCER
    python tests/pgbouncer/pooler.py status   # one line per instance; exit 1 unless both answer
    python tests/pgbouncer/pooler.py down     # stop the instances this script started
    python tests/pgbouncer/pooler.py url      # the AGORA_TEST_PGBOUNCER value

Debian's ``pgbouncer`` (``/usr/sbin/pgbouncer``), two instances, both in front of
``AGORA_PGBOUNCER_UPSTREAM`` (default ``host=127.0.0.1 port=5432``, the test server):

- ``transaction``: ``pool_mode = transaction`` on ``AGORA_PGBOUNCER_PORT`` (default 6432);
- ``session``: ``pool_mode = session`` on the next port (default 6433).

``AGORA_TEST_PGBOUNCER`` is the two URLs, transaction mode first, comma-separated:
``postgresql://postgres@127.0.0.1:6432/postgres,postgresql://postgres@127.0.0.1:6433/postgres``.

Any database name passes through (``* = host=… port=…``), so a database the tests create
directly on the server is reachable through the pooler at once. Authentication is ``trust``, as
on the server; a user the pooler does not know (a role a test has just created) is looked up
through ``auth_query`` as ``postgres``. The transaction-mode pool is small
(``AGORA_PGBOUNCER_POOL_SIZE``, default 3 server connections per database and user), so a few
clients really share server connections: the next transaction of a client may run on another
server connection than its last one, and a server connection serves several clients in turn.
Session mode gives each client a server connection of its own for its whole session
(``AGORA_PGBOUNCER_SESSION_POOL_SIZE``, default 40), reset with ``DISCARD ALL`` when it leaves.

Each instance has its ``pgbouncer.ini``, pid file and log under ``AGORA_PGBOUNCER_DIR`` (default
``/tmp/agora-pgbouncer``); pgbouncer refuses to run as root, so it runs as ``postgres``
(``-u postgres``) and that user owns the directories.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

PGBOUNCER = os.environ.get("AGORA_PGBOUNCER_BIN", "/usr/sbin/pgbouncer")
BASE_DIR = Path(os.environ.get("AGORA_PGBOUNCER_DIR", "/tmp/agora-pgbouncer"))
BASE_PORT = int(os.environ.get("AGORA_PGBOUNCER_PORT", "6432"))
UPSTREAM = os.environ.get("AGORA_PGBOUNCER_UPSTREAM", "host=127.0.0.1 port=5432")
POOL_SIZE = int(os.environ.get("AGORA_PGBOUNCER_POOL_SIZE", "3"))
# Session mode holds a server connection per client for the client's whole session: a pool as
# small as the transaction one would only make the 9th of 8 worker processes wait.
SESSION_POOL_SIZE = int(os.environ.get("AGORA_PGBOUNCER_SESSION_POOL_SIZE", "40"))
# A pool is per database and user, and each test has a database of its own: the user's server
# connections over all of them are capped below the server's max_connections (100), or a busy
# run is refused ("sorry, too many clients already") instead of waiting for a connection.
MAX_USER_CONNECTIONS = 50
RUN_AS = os.environ.get("AGORA_PGBOUNCER_USER", "postgres")
BOOT_TIMEOUT = float(os.environ.get("AGORA_PGBOUNCER_TIMEOUT", "30"))
MODES = ("transaction", "session")


def port(mode: str) -> int:
    return BASE_PORT + MODES.index(mode)


def pool_size(mode: str) -> int:
    return POOL_SIZE if mode == "transaction" else SESSION_POOL_SIZE


def instance_dir(mode: str) -> Path:
    return BASE_DIR / mode


def url(mode: str) -> str:
    return f"postgresql://postgres@127.0.0.1:{port(mode)}/postgres"


def urls() -> list[str]:
    return [url(mode) for mode in MODES]


def missing() -> str | None:
    """Why the poolers cannot be booted here (``None``: they can)."""
    if shutil.which(PGBOUNCER) is None:
        return f"{PGBOUNCER} not found (install Debian's pgbouncer)"
    try:
        pwd.getpwnam(RUN_AS)
    except KeyError:
        return f"no {RUN_AS!r} user to run pgbouncer as"
    if os.geteuid() != 0 and pwd.getpwuid(os.geteuid()).pw_name != RUN_AS:
        return f"must run as root or {RUN_AS} to start pgbouncer"
    return None


def ini(mode: str) -> str:
    d = instance_dir(mode)
    return f"""\
;; PgBouncer in {mode} mode for agora's tests (written by tests/pgbouncer/pooler.py).
[databases]
* = {UPSTREAM}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port(mode)}
unix_socket_dir =
pidfile = {d / "pgbouncer.pid"}
logfile = {d / "pgbouncer.log"}
pool_mode = {mode}
default_pool_size = {pool_size(mode)}
min_pool_size = 0
reserve_pool_size = 0
max_user_connections = {MAX_USER_CONNECTIONS}
max_client_conn = 1000
auth_type = trust
auth_file = {d / "userlist.txt"}
auth_user = postgres
auth_query = SELECT usename, passwd FROM pg_catalog.pg_shadow WHERE usename = $1
admin_users = postgres
stats_users = postgres
ignore_startup_parameters = extra_float_digits
server_login_retry = 1
server_connect_timeout = 5
query_wait_timeout = 60
log_connections = 0
log_disconnections = 0
"""


def _pid(mode: str) -> int | None:
    try:
        pid = int((instance_dir(mode) / "pgbouncer.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except OSError:
        return None
    return pid


def answers(mode: str) -> bool:
    """A query through the pooler (to the server behind it) succeeds."""
    import psycopg

    try:
        with psycopg.connect(
            host="127.0.0.1", port=port(mode), user="postgres", dbname="postgres", connect_timeout=2
        ) as conn:
            return conn.execute("SELECT 1").fetchone() == (1,)
    except Exception:
        return False


def pools(mode: str) -> list[dict[str, object]]:
    """``SHOW POOLS`` of the pooler's admin console (empty: down)."""
    import psycopg

    try:
        with psycopg.connect(
            host="127.0.0.1",
            port=port(mode),
            user="postgres",
            dbname="pgbouncer",
            connect_timeout=2,
            autocommit=True,
        ) as conn:
            cur = conn.execute("SHOW POOLS", prepare=False)
            names = [c.name for c in cur.description or []]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    except Exception:
        return []


def _port_free(p: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", p))
        except OSError:
            return False
        return True


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    BASE_DIR.mkdir(parents=True, exist_ok=True)
    with open(BASE_DIR.parent / f".{BASE_DIR.name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _start(mode: str) -> None:
    d = instance_dir(mode)
    user = pwd.getpwnam(RUN_AS)
    d.mkdir(parents=True, exist_ok=True)
    (d / "pgbouncer.ini").write_text(ini(mode))
    (d / "userlist.txt").write_text('"postgres" ""\n')
    (d / "pgbouncer.log").unlink(missing_ok=True)
    (d / "pgbouncer.pid").unlink(missing_ok=True)
    BASE_DIR.chmod(0o755)
    for path in (d, d / "pgbouncer.ini", d / "userlist.txt"):
        os.chown(path, user.pw_uid, user.pw_gid)
    if not _port_free(port(mode)):
        raise RuntimeError(f"port {port(mode)} is taken (set AGORA_PGBOUNCER_PORT)")
    args = [PGBOUNCER, str(d / "pgbouncer.ini")]
    if os.geteuid() == 0:
        args[1:1] = ["-u", RUN_AS]
    with open(d / "stdout.log", "ab") as out:
        subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip


def _wait(mode: str, deadline: float) -> None:
    log = instance_dir(mode) / "pgbouncer.log"
    while time.monotonic() < deadline:
        if _pid(mode) is not None and answers(mode):
            return
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
    raise RuntimeError(f"pgbouncer ({mode}) not answering on {port(mode)}; log:\n{tail}")


def up() -> list[str]:
    """Boot both instances unless they already answer; their URLs (transaction first)."""
    reason = missing()
    if reason:
        raise RuntimeError(f"cannot boot PgBouncer: {reason}")
    with _locked():
        if all(_pid(m) is not None and answers(m) for m in MODES):
            return urls()
        _down()
        deadline = time.monotonic() + BOOT_TIMEOUT
        for mode in MODES:
            _start(mode)
        for mode in MODES:
            _wait(mode, deadline)
        return urls()


def _down() -> None:
    for mode in MODES:
        pid = _pid(mode)
        if pid is None:
            continue
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)  # immediate shutdown (SIGINT would wait for clients)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _pid(mode) == pid:
            time.sleep(0.05)
        if _pid(mode) == pid:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def down() -> None:
    """Stop the instances this script started (by the pid in their directories)."""
    with _locked():
        _down()


def status() -> bool:
    ok = True
    for mode in MODES:
        pid = _pid(mode)
        if pid is None or not answers(mode):
            print(f"{mode} 127.0.0.1:{port(mode)} down" + (f" (pid {pid})" if pid else ""))
            ok = False
            continue
        servers = sum(
            int(str(p.get(k) or 0)) for p in pools(mode) for k in ("sv_active", "sv_idle")
        )
        print(
            f"{mode} 127.0.0.1:{port(mode)} up, default_pool_size={pool_size(mode)}"
            f", {servers} server connection(s) open, upstream {UPSTREAM} (pid {pid})"
        )
    return ok


def main(argv: list[str]) -> int:
    command = argv[1] if len(argv) > 1 else "status"
    if command == "up":
        started = time.monotonic()
        try:
            value = ",".join(up())
        except RuntimeError as exc:
            print(f"pooler: {exc}", file=sys.stderr)
            return 1
        print(f"pooler: up in {time.monotonic() - started:.1f} s", file=sys.stderr)
        print(value)
        return 0
    if command == "down":
        down()
        return 0
    if command == "status":
        return 0 if status() else 1
    if command == "url":
        print(",".join(urls()))
        return 0
    print(f"usage: {argv[0]} up|down|status|url", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
