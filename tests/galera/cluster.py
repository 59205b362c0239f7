"""Boot, stop and inspect a three-node MariaDB Galera cluster on 127.0.0.1 (tests and benchmarks).

    python tests/galera/cluster.py up       # boot (idempotent); prints the AGORA_TEST_GALERA value
    python tests/galera/cluster.py status   # one line per node; exit 1 unless all three are Synced
    python tests/galera/cluster.py down     # stop the nodes this script started (idempotent)
    python tests/galera/cluster.py url      # the AGORA_TEST_GALERA value (comma-separated URLs)

Built from Debian's ``mariadb-server`` and ``galera-4`` (``/usr/lib/galera/libgalera_smm.so``)
with rsync state transfer. Each node has its own data directory and ``my.cnf`` under
``AGORA_GALERA_DIR`` (default ``/tmp/agora-galera``) and its own ports, counted from
``AGORA_GALERA_PORT`` (default 3311): client ``P+i``, group communication (``gmcast``) ``P+1260+i``,
IST ``P+1270+i``, SST ``P+1280+i`` for node ``i`` in 0..2 — so with the default: 3311-3313,
4571-4573, 4581-4583, 4591-4593, clear of the usual 3306/4567/4568/4444.

Two traps: rsync's state transfer runs as the server's unprivileged user (``mysql``), so the
data directories belong to it (and their parents are traversable); and mariadbd silently ignores
a world-writable ``my.cnf``, so each is written 0644. Node 1 bootstraps with
``--wsrep-new-cluster``; nodes 2 and 3 join with an empty data directory (the rsync SST copies
node 1's) and the script waits until each reports ``wsrep_local_state_comment = Synced``.

The store's tests find the cluster through ``AGORA_TEST_GALERA`` (see ``tests/galera/conftest.py``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

PROVIDER = Path("/usr/lib/galera/libgalera_smm.so")
MARIADBD = Path("/usr/sbin/mariadbd")
INSTALL_DB = "mariadb-install-db"
NODES = 3
BASE_DIR = Path(os.environ.get("AGORA_GALERA_DIR", "/tmp/agora-galera"))
BASE_PORT = int(os.environ.get("AGORA_GALERA_PORT", "3311"))
SERVER_USER = os.environ.get("AGORA_GALERA_USER", "mysql")
BOOT_TIMEOUT = float(os.environ.get("AGORA_GALERA_TIMEOUT", "120"))


def client_port(i: int) -> int:
    return BASE_PORT + i


def group_port(i: int) -> int:
    return BASE_PORT + 1260 + i


def ist_port(i: int) -> int:
    return BASE_PORT + 1270 + i


def sst_port(i: int) -> int:
    return BASE_PORT + 1280 + i


def node_dir(i: int) -> Path:
    return BASE_DIR / f"node{i + 1}"


def urls() -> list[str]:
    return [f"mysql://root@127.0.0.1:{client_port(i)}/" for i in range(NODES)]


def missing() -> str | None:
    """Why a cluster cannot be booted here (``None``: it can)."""
    for path, package in ((MARIADBD, "mariadb-server"), (PROVIDER, "galera-4")):
        if not path.exists():
            return f"{path} not found (install Debian's {package})"
    for tool in ("rsync", INSTALL_DB):
        if shutil.which(tool) is None:
            return f"{tool} not found (install Debian's rsync and mariadb-server)"
    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        return f"no {SERVER_USER!r} user to run mariadbd as"
    if os.geteuid() != 0 and pwd.getpwuid(os.geteuid()).pw_name != SERVER_USER:
        return f"must run as root or {SERVER_USER} to start mariadbd"
    return None


def my_cnf(i: int) -> str:
    d = node_dir(i)
    peers = ",".join(f"127.0.0.1:{group_port(j)}" for j in range(NODES))
    provider_options = ";".join(
        [
            f"base_port={group_port(i)}",
            f"gmcast.listen_addr=tcp://127.0.0.1:{group_port(i)}",
            f"ist.recv_addr=127.0.0.1:{ist_port(i)}",
            "gcache.size=64M",
            # Loopback: detect a stopped peer in seconds, not the WAN-friendly defaults.
            "evs.suspect_timeout=PT5S",
            "evs.inactive_timeout=PT10S",
            "pc.wait_prim_timeout=PT30S",
        ]
    )
    return f"""\
# Node {i + 1} of agora's test Galera cluster (written by tests/galera/cluster.py).
[mysqld]
user = {SERVER_USER}
datadir = {d / "data"}
socket = {d / "mysqld.sock"}
pid-file = {d / "mysqld.pid"}
log-error = {d / "error.log"}
port = {client_port(i)}
bind-address = 127.0.0.1
skip-name-resolve
character-set-server = utf8mb4
collation-server = utf8mb4_general_ci
innodb_buffer_pool_size = 64M
innodb_log_file_size = 48M
innodb_flush_log_at_trx_commit = 2
max_connections = 200
binlog_format = ROW
default_storage_engine = InnoDB
innodb_autoinc_lock_mode = 2
wsrep_on = ON
wsrep_provider = {PROVIDER}
wsrep_cluster_name = agora_test
wsrep_cluster_address = gcomm://{peers}
wsrep_node_name = node{i + 1}
wsrep_node_address = 127.0.0.1:{group_port(i)}
wsrep_provider_options = "{provider_options}"
wsrep_sst_method = rsync
wsrep_sst_receive_address = 127.0.0.1:{sst_port(i)}
wsrep_slave_threads = 2

[client]
socket = {d / "mysqld.sock"}
port = {client_port(i)}
"""


def _pid(i: int) -> int | None:
    try:
        pid = int((node_dir(i) / "mysqld.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except OSError:
        return None
    return pid


def _query(i: int, sql: str) -> list[tuple[object, ...]] | None:
    import pymysql

    try:
        conn = pymysql.connect(
            host="127.0.0.1", port=client_port(i), user="root", connect_timeout=2
        )
    except Exception:
        return None
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return list(cur.fetchall())
    except Exception:
        return None
    finally:
        conn.close()


def node_state(i: int) -> dict[str, str]:
    """``wsrep_local_state_comment``, ``wsrep_cluster_size`` … of node ``i`` (empty: down)."""
    rows = _query(
        i,
        "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_local_state_comment',"
        " 'wsrep_cluster_size', 'wsrep_cluster_status', 'wsrep_ready')",
    )
    return {str(k): str(v) for k, v in rows or []}


def synced(i: int) -> bool:
    state = node_state(i)
    return state.get("wsrep_local_state_comment") == "Synced" and state.get("wsrep_ready") == "ON"


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """One ``up``/``down`` at a time (several test processes may ask for the cluster at once)."""
    BASE_DIR.mkdir(parents=True, exist_ok=True)
    with open(BASE_DIR.parent / f".{BASE_DIR.name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _prepare(i: int, *, bootstrap: bool) -> None:
    d = node_dir(i)
    user = pwd.getpwnam(SERVER_USER)
    d.mkdir(parents=True, exist_ok=True)
    data = d / "data"
    if bootstrap and not (data / "mysql").is_dir():
        shutil.rmtree(data, ignore_errors=True)
        data.mkdir()
        os.chown(data, user.pw_uid, user.pw_gid)
        subprocess.run(
            [
                INSTALL_DB,
                f"--datadir={data}",
                f"--user={SERVER_USER}",
                "--auth-root-authentication-method=normal",  # root@127.0.0.1, no password
                "--skip-test-db",
            ],
            check=True,
            capture_output=True,
        )
    elif bootstrap:
        # Scratch data: bootstrap from node 1 whichever node left last (or if one was killed).
        state = data / "grastate.dat"
        if state.exists():
            state.write_text(
                state.read_text().replace("safe_to_bootstrap: 0", "safe_to_bootstrap: 1")
            )
    else:
        # A joiner starts empty: the rsync SST copies a donor's data directory (an old one would
        # only make it ask for a full SST anyway, since the cluster is new on every `up`).
        shutil.rmtree(data, ignore_errors=True)
        data.mkdir()
    cnf = d / "my.cnf"
    cnf.write_text(my_cnf(i))
    cnf.chmod(0o644)  # mariadbd ignores a world-writable option file
    # rsync SST runs as SERVER_USER: it must own the data directory and reach it.
    for path in (BASE_DIR, d):
        path.chmod(0o755)
    os.chown(d, user.pw_uid, user.pw_gid)
    for root, dirs, files in os.walk(data):
        os.chown(root, user.pw_uid, user.pw_gid)
        for name in dirs + files:
            os.chown(os.path.join(root, name), user.pw_uid, user.pw_gid, follow_symlinks=False)
    (d / "error.log").unlink(missing_ok=True)


def _start(i: int, *, bootstrap: bool) -> None:
    d = node_dir(i)
    args = [str(MARIADBD), f"--defaults-file={d / 'my.cnf'}"]
    if bootstrap:
        args.append("--wsrep-new-cluster")
    with open(d / "stdout.log", "ab") as out:
        subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip


def _wait_synced(i: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        if synced(i):
            return
        if _pid(i) is None and (node_dir(i) / "mysqld.pid").exists() is False:
            log = node_dir(i) / "error.log"
            if log.exists() and "[ERROR] Aborting" in log.read_text(errors="replace"):
                raise RuntimeError(f"node{i + 1} failed to start; see {log}")
        time.sleep(0.3)
    raise RuntimeError(f"node{i + 1} not Synced after {BOOT_TIMEOUT:.0f} s; see {node_dir(i)}")


def up() -> list[str]:
    """Boot the cluster unless it is already up and synced; the node URLs."""
    reason = missing()
    if reason:
        raise RuntimeError(f"cannot boot a Galera cluster: {reason}")
    with _locked():
        if all(synced(i) for i in range(NODES)):
            return urls()
        _down()
        deadline = time.monotonic() + BOOT_TIMEOUT
        for i in range(NODES):
            _prepare(i, bootstrap=i == 0)
            _start(i, bootstrap=i == 0)
            _wait_synced(i, deadline)
        return urls()


def _down() -> None:
    """Stop node 3, then 2, then 1, each to the end: node 1 leaves last, so it is the one that
    is safe to bootstrap from next time."""
    for i in reversed(range(NODES)):
        pid = _pid(i)
        if pid is None:
            continue
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _pid(i) == pid:
            time.sleep(0.1)
        if _pid(i) == pid:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def down() -> None:
    """Stop every node this script started (by the pid in its data directory)."""
    with _locked():
        _down()


def status() -> bool:
    ok = True
    for i in range(NODES):
        state = node_state(i)
        pid = _pid(i)
        if not state:
            print(f"node{i + 1} 127.0.0.1:{client_port(i)} down" + (f" (pid {pid})" if pid else ""))
            ok = False
            continue
        print(
            f"node{i + 1} 127.0.0.1:{client_port(i)} {state.get('wsrep_local_state_comment')}"
            f", cluster size {state.get('wsrep_cluster_size')}"
            f", {state.get('wsrep_cluster_status')} (pid {pid})"
        )
        ok = ok and synced(i)
    return ok


def main(argv: list[str]) -> int:
    command = argv[1] if len(argv) > 1 else "status"
    if command == "up":
        started = time.monotonic()
        try:
            value = ",".join(up())
        except RuntimeError as exc:
            print(f"cluster: {exc}", file=sys.stderr)
            return 1
        print(f"cluster: up in {time.monotonic() - started:.1f} s", file=sys.stderr)
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
