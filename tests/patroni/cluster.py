"""Boot, stop and inspect a three-node Patroni cluster (PostgreSQL 15) on 127.0.0.1.

    python tests/patroni/cluster.py up          # boot (idempotent); prints AGORA_TEST_PATRONI
    python tests/patroni/cluster.py status      # one line per member; exit 1 unless healthy
    python tests/patroni/cluster.py switchover [CANDIDATE]   # patronictl switchover --force
    python tests/patroni/cluster.py kill-primary   # kill -9 the leader's postmaster
    python tests/patroni/cluster.py kill-primary --with-patroni   # … and its Patroni: failover
    python tests/patroni/cluster.py down        # stop all this script started; remove the data
    python tests/patroni/cluster.py url         # the AGORA_TEST_PATRONI value

Patroni from PyPI (the ``patroni[etcd3]`` of the ``dev`` extra), one etcd member from Debian's
``etcd-server``, the machine's PostgreSQL binaries (``AGORA_PATRONI_BIN_DIR``, default
``/usr/lib/postgresql/15/bin``). Ports, counted from ``AGORA_PATRONI_PORT`` (default 5441):
PostgreSQL 5441-5443, Patroni's REST API ``AGORA_PATRONI_REST_PORT`` (default 8008) to 8010,
etcd client ``AGORA_PATRONI_ETCD_PORT`` (default 2479) and peer (the next port): clear of the
test server's 5432 and of etcd's usual 2379/2380. Everything lives under ``AGORA_PATRONI_DIR``
(default ``/tmp/agora-patroni``): ``etcd/``, and per node ``nodeN/patroni.yml``,
``nodeN/patroni.log`` and ``nodeN/data``.

``synchronous_mode: true`` (one synchronous standby: a commit returns once it has the WAL),
``ttl: 20`` (Patroni's minimum), ``loop_wait: 1``, ``retry_timeout: 5``. The superuser is
``postgres`` with the password ``AGORA_PATRONI_PASSWORD`` (default ``agora-patroni``: initdb and
Patroni need one), replication by ``replicator``; ``pg_hba`` takes scram-sha-256 from 127.0.0.1.

Traps: Patroni (like initdb and postgres) refuses to run as root, so it runs as ``postgres``, who
owns the node directories; and it needs a Python that user can execute with Patroni importable.
The test venv's interpreter often lives under ``/root`` (pyenv), which ``postgres`` cannot read:
then the system's ``/usr/bin/python3.X`` of the same version runs with the venv's site-packages on
``PYTHONPATH`` (compiled wheels match the version), and ``-S``, so that Debian's own
dist-packages (an older pyOpenSSL) stay out. ``kill -9`` of the postmaster leaves the
Patroni of that node alive: it restarts PostgreSQL in place (crash recovery) if it still holds
the leader key, or another member takes over — either way ``kill-primary`` waits until a primary
accepts a synchronously committed write, and prints how long that took and who leads.

``AGORA_TEST_PATRONI`` is two URLs separated by a space-free ``|``: libpq's multi-host form
``postgresql://postgres:PW@127.0.0.1:5441,127.0.0.1:5442,127.0.0.1:5443/postgres?target_session_attrs=read-write``
and SQLAlchemy's ``postgresql://postgres:PW@/postgres?host=127.0.0.1:5441&host=…&target_session_attrs=read-write``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

NODES = 3
BASE_DIR = Path(os.environ.get("AGORA_PATRONI_DIR", "/tmp/agora-patroni"))
BASE_PORT = int(os.environ.get("AGORA_PATRONI_PORT", "5441"))
REST_PORT = int(os.environ.get("AGORA_PATRONI_REST_PORT", "8008"))
ETCD_PORT = int(os.environ.get("AGORA_PATRONI_ETCD_PORT", "2479"))
BIN_DIR = Path(os.environ.get("AGORA_PATRONI_BIN_DIR", "/usr/lib/postgresql/15/bin"))
ETCD = os.environ.get("AGORA_PATRONI_ETCD", "/usr/bin/etcd")
RUN_AS = os.environ.get("AGORA_PATRONI_USER", "postgres")
PASSWORD = os.environ.get("AGORA_PATRONI_PASSWORD", "agora-patroni")
REPLICATION_PASSWORD = os.environ.get("AGORA_PATRONI_REPLICATION_PASSWORD", "agora-replication")
BOOT_TIMEOUT = float(os.environ.get("AGORA_PATRONI_TIMEOUT", "180"))
SCOPE = "agora-test"
TTL, LOOP_WAIT, RETRY_TIMEOUT = 20, 1, 5


def pg_port(i: int) -> int:
    return BASE_PORT + i


def rest_port(i: int) -> int:
    return REST_PORT + i


def node_name(i: int) -> str:
    return f"node{i + 1}"


def node_dir(i: int) -> Path:
    return BASE_DIR / node_name(i)


def hosts() -> list[str]:
    return [f"127.0.0.1:{pg_port(i)}" for i in range(NODES)]


def libpq_url(database: str = "postgres") -> str:
    """libpq's multi-host URL (agora refuses this form today: issue 27)."""
    return (
        f"postgresql://postgres:{PASSWORD}@{','.join(hosts())}/{database}"
        "?target_session_attrs=read-write"
    )


def sqlalchemy_url(database: str = "postgres") -> str:
    """SQLAlchemy's multi-host form (``?host=h:p&host=…``), which agora accepts."""
    query = "&".join(f"host={h}" for h in hosts())
    return f"postgresql://postgres:{PASSWORD}@/{database}?{query}&target_session_attrs=read-write"


def node_url(i: int, database: str = "postgres") -> str:
    return f"postgresql://postgres:{PASSWORD}@127.0.0.1:{pg_port(i)}/{database}"


def urls() -> list[str]:
    return [libpq_url(), sqlalchemy_url()]


# --- where Patroni can run -----------------------------------------------------------------------


def _site_packages() -> list[str]:
    import sysconfig

    paths = sysconfig.get_paths()
    return list(dict.fromkeys([paths["purelib"], paths["platlib"]]))


def _runner_env() -> dict[str, str]:
    return {
        "PATH": f"{BIN_DIR}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(BASE_DIR),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONPATH": os.pathsep.join(_site_packages()),
        "PYTHONDONTWRITEBYTECODE": "1",
    }


_PYTHON: list[str | None] = []


def patroni_python() -> str | None:
    """An interpreter ``RUN_AS`` can execute and import Patroni with (``None``: none found)."""
    if _PYTHON:
        return _PYTHON[0]
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [sys.executable, f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"]
    found = None
    for candidate in dict.fromkeys(candidates):
        if not Path(candidate).exists():
            continue
        try:
            probe = subprocess.run(
                [candidate, "-S", "-c", "import patroni, psycopg, yaml, etcd, psutil"],
                env=_runner_env(),
                user=RUN_AS if os.geteuid() == 0 else None,
                cwd="/",
                capture_output=True,
                timeout=60,
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if probe.returncode == 0:
            found = candidate
            break
    _PYTHON.append(found)
    return found


def missing() -> str | None:
    """Why a cluster cannot be booted here (``None``: it can)."""
    for path, package in ((BIN_DIR / "postgres", "postgresql-15"), (Path(ETCD), "etcd-server")):
        if not path.exists():
            return f"{path} not found (install Debian's {package})"
    try:
        import patroni  # noqa: F401
    except ImportError:
        return "patroni is not installed (pip install -e '.[dev]')"
    try:
        pwd.getpwnam(RUN_AS)
    except KeyError:
        return f"no {RUN_AS!r} user to run Patroni as"
    if os.geteuid() != 0 and pwd.getpwuid(os.geteuid()).pw_name != RUN_AS:
        return f"must run as root or {RUN_AS} to start Patroni"
    if patroni_python() is None:
        return f"no Python that {RUN_AS} can run with Patroni importable"
    return None


# --- configuration ---------------------------------------------------------------------------


def patroni_yml(i: int) -> str:
    d = node_dir(i)
    config: dict[str, Any] = {
        "scope": SCOPE,
        "namespace": "/agora-test/",
        "name": node_name(i),
        "restapi": {
            "listen": f"127.0.0.1:{rest_port(i)}",
            "connect_address": f"127.0.0.1:{rest_port(i)}",
        },
        "etcd3": {"hosts": [f"127.0.0.1:{ETCD_PORT}"]},
        "bootstrap": {
            "dcs": {
                "ttl": TTL,
                "loop_wait": LOOP_WAIT,
                "retry_timeout": RETRY_TIMEOUT,
                "maximum_lag_on_failover": 1048576,
                "synchronous_mode": True,
                "postgresql": {
                    "use_pg_rewind": True,
                    "use_slots": True,
                    "parameters": {
                        "wal_level": "replica",
                        "hot_standby": "on",
                        "max_connections": 200,
                        "max_wal_senders": 10,
                        "max_replication_slots": 10,
                        "wal_keep_size": "128MB",
                        "wal_log_hints": "on",
                        "synchronous_commit": "on",
                    },
                },
            },
            "initdb": [{"encoding": "UTF8"}, {"locale": "C.UTF-8"}, {"auth-local": "trust"}],
        },
        "postgresql": {
            "listen": f"127.0.0.1:{pg_port(i)}",
            "connect_address": f"127.0.0.1:{pg_port(i)}",
            "data_dir": str(d / "data"),
            "bin_dir": str(BIN_DIR),
            "pgpass": str(d / "pgpass"),
            "authentication": {
                "superuser": {"username": "postgres", "password": PASSWORD},
                "replication": {"username": "replicator", "password": REPLICATION_PASSWORD},
                "rewind": {"username": "postgres", "password": PASSWORD},
            },
            "pg_hba": [
                "local all all trust",
                "host replication replicator 127.0.0.1/32 scram-sha-256",
                "host all all 127.0.0.1/32 scram-sha-256",
            ],
            "parameters": {
                "unix_socket_directories": str(d),
                "shared_buffers": "32MB",
                "fsync": "off",  # a test cluster on one machine: durability is not under test
                "logging_collector": "off",
                "log_min_messages": "warning",
            },
        },
        "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False},
    }
    return json.dumps(config, indent=2)  # JSON is YAML


# --- processes -------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    """Running (a zombie, killed but not yet reaped by whoever adopted it, is not)."""
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False  # our own child, just reaped
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _read_pid(path: Path) -> int | None:
    try:
        pid = int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if _alive(pid) else None


def etcd_pid() -> int | None:
    return _read_pid(BASE_DIR / "etcd" / "etcd.pid")


def patroni_pid(i: int) -> int | None:
    return _read_pid(node_dir(i) / "patroni.pid")


def postmaster_pid(i: int) -> int | None:
    return _read_pid(node_dir(i) / "data" / "postmaster.pid")


def _port_free(p: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", p))
        except OSError:
            return False
        return True


def _get(url: str, timeout: float = 2) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return json.loads(response.read())
    except Exception:
        return None


def members() -> list[dict[str, Any]]:
    """The members as Patroni's REST ``/cluster`` reports them (from any node that answers)."""
    for i in range(NODES):
        doc = _get(f"http://127.0.0.1:{rest_port(i)}/cluster")
        if isinstance(doc, dict) and doc.get("members"):
            return list(doc["members"])
    return []


def leader() -> dict[str, Any] | None:
    return next((m for m in members() if m.get("role") == "leader"), None)


def healthy(found: list[dict[str, Any]] | None = None) -> bool:
    """A running leader, two streaming replicas, one of them the synchronous standby."""
    found = members() if found is None else found
    roles = sorted(str(m.get("role")) for m in found)
    streaming = [m for m in found if m.get("role") != "leader" and m.get("state") == "streaming"]
    lead = [m for m in found if m.get("role") == "leader" and m.get("state") == "running"]
    return (
        len(found) == NODES
        and len(lead) == 1
        and len(streaming) == NODES - 1
        and "sync_standby" in roles
    )


def node_index(name: str) -> int:
    return [node_name(i) for i in range(NODES)].index(name)


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    BASE_DIR.parent.mkdir(parents=True, exist_ok=True)
    with open(BASE_DIR.parent / f".{BASE_DIR.name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _start_etcd() -> None:
    d = BASE_DIR / "etcd"
    d.mkdir(parents=True, exist_ok=True)
    client, peer = f"http://127.0.0.1:{ETCD_PORT}", f"http://127.0.0.1:{ETCD_PORT + 1}"
    args = [
        ETCD,
        "--name", "agora-test",
        "--data-dir", str(d / "data"),
        "--listen-client-urls", client,
        "--advertise-client-urls", client,
        "--listen-peer-urls", peer,
        "--initial-advertise-peer-urls", peer,
        "--initial-cluster", f"agora-test={peer}",
        "--initial-cluster-state", "new",
        "--initial-cluster-token", "agora-test",
        "--listen-metrics-urls", "",
        "--log-level", "warn",
        "--logger", "zap",
        "--unsafe-no-fsync",
    ]  # fmt: skip
    with open(d / "etcd.log", "ab") as out:
        proc = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, cwd=d,
        )  # fmt: skip
    (d / "etcd.pid").write_text(f"{proc.pid}\n")


def _wait_etcd(deadline: float) -> None:
    while time.monotonic() < deadline:
        doc = _get(f"http://127.0.0.1:{ETCD_PORT}/health", timeout=1)
        if isinstance(doc, dict) and str(doc.get("health")) == "true":
            return
        if etcd_pid() is None:
            log = BASE_DIR / "etcd" / "etcd.log"
            tail = log.read_text(errors="replace")[-1500:]
            raise RuntimeError(f"etcd exited; see {log}:\n{tail}")
        time.sleep(0.1)
    raise RuntimeError(f"etcd not healthy on 127.0.0.1:{ETCD_PORT}")


def _start_node(i: int) -> None:
    d = node_dir(i)
    user = pwd.getpwnam(RUN_AS)
    d.mkdir(parents=True, exist_ok=True)
    config = d / "patroni.yml"
    config.write_text(patroni_yml(i))
    config.chmod(0o600)  # it holds the passwords
    for path in (d, config):
        os.chown(path, user.pw_uid, user.pw_gid)
    python = patroni_python()
    assert python is not None
    with open(d / "patroni.log", "ab") as out:
        os.chown(d / "patroni.log", user.pw_uid, user.pw_gid)
        proc = subprocess.Popen(
            [python, "-S", "-m", "patroni", str(config)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, cwd=d, env=_runner_env(),
            user=RUN_AS if os.geteuid() == 0 else None,
            group=user.pw_gid if os.geteuid() == 0 else None,
            extra_groups=[] if os.geteuid() == 0 else None,
        )  # fmt: skip
    (d / "patroni.pid").write_text(f"{proc.pid}\n")


def _wait_healthy(deadline: float) -> None:
    while time.monotonic() < deadline:
        if healthy():
            return
        dead = [node_name(i) for i in range(NODES) if patroni_pid(i) is None]
        if dead:
            log = node_dir(node_index(dead[0])) / "patroni.log"
            raise RuntimeError(
                f"Patroni of {', '.join(dead)} exited; see {log}:\n"
                + log.read_text(errors="replace")[-2000:]
            )
        time.sleep(0.3)
    raise RuntimeError(
        f"no leader with two streaming replicas after {BOOT_TIMEOUT:.0f} s: {members()}"
        f" (see {BASE_DIR}/node*/patroni.log)"
    )


def up() -> list[str]:
    """Boot the cluster unless it is already healthy; the AGORA_TEST_PATRONI URLs."""
    reason = missing()
    if reason:
        raise RuntimeError(f"cannot boot a Patroni cluster: {reason}")
    with _locked():
        if etcd_pid() is not None and healthy():
            return urls()
        _down()
        taken = [
            p
            for p in (ETCD_PORT, ETCD_PORT + 1, *map(pg_port, range(NODES)),
                      *map(rest_port, range(NODES)))
            if not _port_free(p)
        ]  # fmt: skip
        if taken:
            raise RuntimeError(f"ports taken: {taken} (see AGORA_PATRONI_*PORT)")
        BASE_DIR.mkdir(parents=True, exist_ok=True)
        BASE_DIR.chmod(0o755)
        deadline = time.monotonic() + BOOT_TIMEOUT
        _start_etcd()
        _wait_etcd(deadline)
        _start_node(0)  # the first to take the initialize key bootstraps; let it be node1
        while time.monotonic() < deadline and (leader() or {}).get("state") != "running":
            if patroni_pid(0) is None:
                break
            time.sleep(0.2)
        for i in range(1, NODES):
            _start_node(i)
        _wait_healthy(deadline)
        wait_writable(deadline)
        return urls()


def _stop(pid: int | None, sig: int, wait: float) -> None:
    if pid is None:
        return
    with contextlib.suppress(OSError):
        os.kill(pid, sig)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if not _alive(pid):
            return
        time.sleep(0.05)
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)


def _down() -> None:
    """Stop every Patroni (each stops its PostgreSQL), any postmaster left, then etcd; remove
    the data."""
    # The data goes anyway: no clean shutdown (a leader's waits for its synchronous standby).
    # Patroni first, so that none restarts its PostgreSQL; then each postmaster's immediate
    # shutdown (SIGQUIT, which ends its backends too); then etcd.
    for i in range(NODES):
        _stop(patroni_pid(i), signal.SIGKILL, 10)
    for i in range(NODES):
        _stop(postmaster_pid(i), signal.SIGQUIT, 10)
    _stop(etcd_pid(), signal.SIGTERM, 10)
    if BASE_DIR.exists():
        shutil.rmtree(BASE_DIR, ignore_errors=True)


def down() -> None:
    with _locked():
        _down()


# --- writes, switchover, kill ------------------------------------------------------------------


def write_probe(timeout: float = 3) -> str | None:
    """A synchronously committed write through the libpq multi-host URL: the node that took it
    (``host:port``), or ``None`` when no primary accepts writes now."""
    import psycopg

    try:
        with psycopg.connect(libpq_url(), connect_timeout=2, autocommit=True) as conn:
            conn.execute(f"SET statement_timeout = {int(timeout * 1000)}")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS agora_cluster_probe (at timestamptz DEFAULT now())"
            )
            conn.execute("INSERT INTO agora_cluster_probe DEFAULT VALUES")
            info = conn.pgconn
            return f"{info.host.decode()}:{info.port.decode()}"
    except Exception:
        return None


def wait_writable(deadline: float) -> str:
    while time.monotonic() < deadline:
        took = write_probe()
        if took is not None:
            return took
        time.sleep(0.1)
    raise RuntimeError("no primary accepted a write in time")


def switchover(candidate: str | None = None) -> tuple[float, str, str]:
    """``patronictl switchover --force`` to ``candidate`` (default: the synchronous standby,
    the only kind synchronous mode allows); the seconds until a primary took a write, the old
    and the new leader."""
    found = members()
    old = next((m for m in found if m.get("role") == "leader"), None)
    if old is None:
        raise RuntimeError(f"no leader: {found}")
    if candidate is None:
        sync = [m for m in found if m.get("role") == "sync_standby"]
        if not sync:
            raise RuntimeError(f"no synchronous standby to switch over to: {found}")
        candidate = str(sync[0]["name"])
    ctl = Path(sys.executable).with_name("patronictl")
    started = time.monotonic()
    done = subprocess.run(
        [str(ctl), "-c", str(node_dir(0) / "patroni.yml"), "switchover", SCOPE,
         "--leader", str(old["name"]), "--candidate", candidate, "--force"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"patronictl switchover failed: {done.stdout}{done.stderr}")
    deadline = started + BOOT_TIMEOUT
    while time.monotonic() < deadline:
        now = leader()
        if now is not None and now.get("name") == candidate and now.get("state") == "running":
            break
        time.sleep(0.1)
    wait_writable(deadline)
    return time.monotonic() - started, str(old["name"]), candidate


@contextlib.contextmanager
def maintenance() -> Iterator[None]:
    """Patroni's maintenance mode for the block (``patronictl pause --wait``, then ``resume
    --wait``): Patroni leaves PostgreSQL alone, so no failover, and a WAL replay a test paused
    (``pg_wal_replay_pause()``) stays paused; outside it, Patroni resumes a paused replay on its
    next loop (PostgreSQL 14+)."""
    ctl = Path(sys.executable).with_name("patronictl")
    config = str(node_dir(0) / "patroni.yml")

    def run(*args: str) -> None:
        done = subprocess.run(
            [str(ctl), "-c", config, *args, SCOPE, "--wait"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"patronictl {args[0]} failed: {done.stdout}{done.stderr}")

    run("pause")
    try:
        yield
    finally:
        run("resume")


def kill_primary(with_patroni: bool = False) -> tuple[float, str, str]:
    """``kill -9`` of the leader's postmaster; the seconds until a primary took a write, the
    old and the new leader. Its Patroni restarts it in place (crash recovery) while it holds
    the leader key.

    ``with_patroni``: the leader's Patroni is killed first (``kill -9``, as if its machine had
    died): the others wait for the leader key to expire (``ttl``), the synchronous standby takes
    over; then the dead node's Patroni is started again and rejoins as a replica (pg_rewind)."""
    old = leader()
    if old is None:
        raise RuntimeError(f"no leader: {members()}")
    i = node_index(str(old["name"]))
    pid = postmaster_pid(i)
    if pid is None:
        raise RuntimeError(f"no postmaster.pid for {old['name']}")
    started = time.monotonic()
    if with_patroni:
        patroni = patroni_pid(i)
        if patroni is not None:
            os.kill(patroni, signal.SIGKILL)
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)  # until the connections are gone
    deadline = started + BOOT_TIMEOUT
    if with_patroni:
        while time.monotonic() < deadline:
            now = leader()
            if now is not None and now.get("name") != old["name"] and now["state"] == "running":
                break
            time.sleep(0.1)
    wait_writable(deadline)
    elapsed = time.monotonic() - started
    now = leader()
    if with_patroni:
        _start_node(i)
    return elapsed, str(old["name"]), str((now or {}).get("name"))


def wait_healthy(timeout: float = BOOT_TIMEOUT) -> float:
    """Wait until the cluster has its leader and two streaming replicas again; seconds taken."""
    started = time.monotonic()
    _wait_healthy(started + timeout)
    return time.monotonic() - started


def status() -> bool:
    found = members()
    if not found:
        print(f"no Patroni member answers on 127.0.0.1:{REST_PORT}-{rest_port(NODES - 1)}")
        return False
    for m in sorted(found, key=lambda m: str(m.get("name"))):
        lag = m.get("lag", m.get("receive_lag", ""))
        print(
            f"{m.get('name')} {m.get('host')}:{m.get('port')} {m.get('role')} {m.get('state')}"
            f", timeline {m.get('timeline')}" + (f", lag {lag}" if lag not in ("", None) else "")
        )
    return healthy(found)


def main(argv: list[str]) -> int:
    command = argv[1] if len(argv) > 1 else "status"
    try:
        if command == "up":
            started = time.monotonic()
            value = "|".join(up())
            print(f"cluster: up in {time.monotonic() - started:.1f} s", file=sys.stderr)
            print(value)
            return 0
        if command == "down":
            down()
            return 0
        if command == "status":
            return 0 if status() else 1
        if command == "url":
            print("|".join(urls()))
            return 0
        if command in ("switchover", "kill-primary"):
            if command == "switchover":
                took, old, new = switchover(argv[2] if len(argv) > 2 else None)
            else:
                took, old, new = kill_primary(with_patroni="--with-patroni" in argv[2:])
            print(f"cluster: {command} {old} -> {new}: writes again after {took:.1f} s")
            healed = wait_healthy()
            print(f"cluster: healthy again {healed:.1f} s later")
            return 0
    except RuntimeError as exc:
        print(f"cluster: {exc}", file=sys.stderr)
        return 1
    usage = "up|down|status|url|switchover [CANDIDATE]|kill-primary [--with-patroni]"
    print(f"usage: {argv[0]} {usage}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
