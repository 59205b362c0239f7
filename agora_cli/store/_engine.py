"""Open engines from operator-friendly URLs, mask passwords, translate driver errors once.

Accepted URLs: any SQLAlchemy URL; ``postgres://`` and ``postgresql://`` mean psycopg 3;
``mysql://`` and ``mariadb://`` mean PyMySQL (utf8mb4); ``sqlite:///relative.db`` and
``sqlite:////absolute.db``. With no URL, ``AGORA_DATABASE_URL``, else ``sqlite:///agora.db``.

SQLite connections opened here run ``PRAGMA foreign_keys=ON``, wait up to 30 s on a busy
database, and begin every transaction with ``BEGIN IMMEDIATE`` (a deferred transaction that
later upgrades to a write lock fails with "database is locked" instead of waiting), sent with
the transaction's first statement; a read-only connection can ask for a plain deferred
``BEGIN`` with the execution option ``sqlite_deferred=True`` (``open_engine(readonly=True)``
sets it for the whole engine).
MySQL/MariaDB connections use READ COMMITTED, the usual level for queue-like workloads (fewer
gap locks under ``FOR UPDATE SKIP LOCKED``), are recycled hourly rather than pinged on every
checkout, and are not reset again on return to the pool. Each new one asks the server whether it
is a Galera cluster node (``wsrep_on``); on one, it turns on causal reads for the session
(``wsrep_sync_wait = 1``: a read waits until this node has applied every write the cluster had
committed when the read began, so a read on one node sees a commit made on another), and the
store's retries, provisioning and checks adapt (``agora_cli.store._galera``).
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, TypeVar, cast
from urllib.parse import unquote

from agora_cli.store._dialects import dialect_of
from agora_cli.store._errors import (
    AgoraError,
    DatabaseError,
    DatabaseUnreachable,
    InvalidInput,
    SchemaDrift,
    UnknownDialect,
)
from agora_cli.store._masking import mask_url, remember_url, scrub, url_password
from agora_cli.store._tenant_setting import (
    AUTOCOMMIT_TENANT,
    autocommit_tenant_statement,
    install_tenant_hook,
)
from agora_cli.store._values import check_identity

if TYPE_CHECKING:
    from sqlalchemy.engine import URL, Connection, Engine

__all__ = [
    "DEFAULT_URL",
    "DriverResult",
    "RetryStats",
    "describe_url",
    "dialect_name",
    "galera_slot",
    "is_connection_lost",
    "is_galera",
    "is_retryable",
    "mask_url",
    "normalize_url",
    "open_engine",
    "resolve_url",
    "retry_stats",
    "retry_transient",
    "run_on_driver",
    "run_pipelined",
    "server_version",
    "session_tenant",
    "sqlite_path",
    "supports_skip_locked",
    "translate_error",
]

DEFAULT_URL = "sqlite:///agora.db"
DIALECTS = ("postgresql", "mysql", "sqlite")
SQLITE_BUSY_TIMEOUT_MS = 30_000
_PENDING_BEGIN = (
    "agora_sqlite_begin"  # the BEGIN a SQLite transaction sends with its first statement
)

_DRIVERS = {
    "postgres": "postgresql+psycopg",
    "postgresql": "postgresql+psycopg",
    "postgresql+psycopg": "postgresql+psycopg",
    "mysql": "mysql+pymysql",
    "mysql+pymysql": "mysql+pymysql",
    "mariadb": "mysql+pymysql",
    "mariadb+pymysql": "mysql+pymysql",
    "sqlite": "sqlite",
    "sqlite+pysqlite": "sqlite+pysqlite",
}
_SUPPORTED = "use postgresql:// (psycopg 3), mysql:// or mariadb:// (PyMySQL), or sqlite:///FILE"
_MEMORY = ("", ":memory:")

T = TypeVar("T")


def resolve_url(url: str | None) -> str:
    """The URL to use: the argument, else ``AGORA_DATABASE_URL``, else the SQLite default."""
    return url or os.environ.get("AGORA_DATABASE_URL") or DEFAULT_URL


def normalize_url(url: str) -> URL:
    """Parse an operator's URL into a SQLAlchemy URL with agora's drivers.

    Only the drivers agora installs are accepted (``postgresql+asyncpg://`` is ``InvalidInput``
    naming them, not a missing module). A password must be percent-encoded where it holds a
    character that ends the password (``@``): SQLAlchemy would cut ``u:p@ss@host`` after ``p``
    and send the rest of the password to the server as a host name, into its error messages.
    """
    # lazy: start-up — the engine module imports without SQLAlchemy (agora config)
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    remember_url(url)
    try:
        parsed = make_url(_libpq_hosts(url))
    except (ArgumentError, ValueError):
        raise InvalidInput(
            f"{mask_url(url)!r} is not a database URL "
            "(try postgresql://user@host/db, mysql://user@host/db or sqlite:///agora.db)"
        ) from None
    written = url_password(url)
    if written is not None and unquote(written) != (parsed.password or ""):
        raise InvalidInput(
            f"the password in {mask_url(url)!r} holds a character that must be percent-encoded "
            "(@ is %40, / is %2F, ? is %3F, # is %23, % is %25)"
        )
    backend = parsed.get_backend_name().replace("mariadb", "mysql")
    if backend not in DIALECTS:
        raise UnknownDialect(f"unsupported database {backend!r} in {mask_url(url)!r}: {_SUPPORTED}")
    driver = _DRIVERS.get(parsed.drivername)
    if driver is None:
        raise InvalidInput(
            f"the driver {parsed.drivername!r} in {mask_url(url)!r} is not supported: {_SUPPORTED}"
        )
    parsed = parsed.set(drivername=driver)
    if backend == "mysql" and "charset" not in parsed.query:
        parsed = parsed.update_query_dict({"charset": "utf8mb4"})
    return parsed


# libpq's multi-host form, ``postgresql://u@h1:5441,h2:5442/db?target_session_attrs=read-write``:
# SQLAlchemy cannot parse a comma in the host part, and takes the same hosts as repeated ``host``
# parameters (``?host=h1:5441&host=h2:5442``), which psycopg hands to libpq as one list.
_MULTI_HOST = re.compile(
    r"^(?P<scheme>postgres(?:ql)?(?:\+psycopg)?://)(?:(?P<user>[^@/?#]*)@)?"
    r"(?P<hosts>[^@/?#]*,[^@/?#]*)(?P<path>/[^?#]*)?(?:\?(?P<query>[^#]*))?$"
)


def _libpq_hosts(url: str) -> str:
    """``url`` with libpq's comma-separated hosts rewritten as SQLAlchemy's ``host`` parameters
    (any other URL unchanged). Each host keeps its port; a host without one gets libpq's."""
    found = _MULTI_HOST.match(url)
    if found is None:
        return url
    hosts = found["hosts"].split(",")
    if any(not h or h.startswith(":") for h in hosts):
        raise InvalidInput(
            f"{mask_url(url)!r} names an empty host in its host list (write h1:5432,h2:5432)"
        )
    user = f"{found['user']}@" if found["user"] is not None else ""
    query = "&".join([*(f"host={h}" for h in hosts), *filter(None, [found["query"]])])
    return f"{found['scheme']}{user}{found['path'] or '/'}?{query}"


# psycopg prepares a statement server-side once it has run this many times on a connection: off
# by default, since a transaction pooler (PgBouncer's ``pool_mode = transaction``) runs the next
# transaction on another server connection, where the statement was never prepared. A direct
# connection may ask for it: ``?prepare_threshold=5`` (0 prepares every statement).
PREPARE_THRESHOLD_PARAM = "prepare_threshold"
PG_CONNECT_TIMEOUT_S = 10  # per host, unless the URL says ?connect_timeout=N
MAX_PREPARE_THRESHOLD = 1_000_000


def _prepare_threshold(url: URL) -> tuple[URL, int | None]:
    """``url`` without its ``prepare_threshold`` parameter, and that parameter's value (``None``,
    psycopg's "never prepare", when absent or ``none``)."""
    if PREPARE_THRESHOLD_PARAM not in url.query:
        return url, None
    given = url.query[PREPARE_THRESHOLD_PARAM]
    text = given[-1] if isinstance(given, tuple) else given
    stripped = url.difference_update_query([PREPARE_THRESHOLD_PARAM])
    if text.strip().lower() in ("", "none"):
        return stripped, None
    if not text.strip().isdigit() or int(text) > MAX_PREPARE_THRESHOLD:
        raise InvalidInput(
            f"prepare_threshold must be a whole number from 0 to {MAX_PREPARE_THRESHOLD:,} or "
            f"none, not {text!r}"
        )
    return stripped, int(text)


def sqlite_path(url: URL) -> Path | None:
    """The absolute path of a file-backed SQLite database (``None``: in memory, or not SQLite)."""
    if url.get_backend_name() != "sqlite" or (url.database or "") in _MEMORY:
        return None
    database = str(url.database)
    if database.startswith("file:"):
        database = database.removeprefix("file:").split("?", 1)[0]
    return Path(database).expanduser().absolute()


def describe_url(url: str | None) -> str:
    """The database as a person should see it: the masked URL, or a SQLite file's full path."""
    raw = resolve_url(url)
    try:
        parsed = normalize_url(raw)
    except InvalidInput:
        return mask_url(raw)
    path = sqlite_path(parsed)
    if path is not None:
        return str(path)
    return mask_url(raw)


def open_engine(
    url: str | None = None,
    *,
    check: bool = True,
    create: bool = True,
    readonly: bool = False,
    tenant: str | None = None,
    **kwargs: Any,
) -> Engine:
    """Create an engine for ``url`` (see module docs) and, with ``check``, prove it connects.

    ``create=False`` refuses a SQLite file that does not exist (``DatabaseUnreachable``, "no
    database at /absolute/path") instead of creating an empty one: only provisioning, migrations
    and the demo create databases. ``readonly=True`` makes every SQLite transaction on the engine
    a plain deferred ``BEGIN``, so that a report never takes the write lock.

    ``tenant`` (else ``AGORA_TENANT``) makes every transaction on a PostgreSQL engine begin with
    ``agora.tenant`` set to it (``SET LOCAL``, for row-level security: see ``rls.py``), and every
    statement of an autocommit connection (a worker's) carry it for that statement only
    (``install_tenant_hook``: safe behind a transaction pooler); on every dialect
    ``session_tenant`` then names it, and privileged jobs refuse to run.
    On PostgreSQL no statement is prepared server-side unless the URL asks for it
    (``?prepare_threshold=N``), and libpq's multi-host URLs are accepted
    (``postgresql://u@h1:5432,h2:5432/db?target_session_attrs=read-write``).
    Bound parameters never appear in errors (``hide_parameters``).

    Raises ``InvalidInput`` for a malformed URL or unknown dialect and ``DatabaseUnreachable``
    when the server cannot be reached or refuses the credentials.
    """
    # lazy: start-up — the engine module imports without SQLAlchemy (agora config)
    from sqlalchemy import create_engine, event
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    raw = resolve_url(url)
    parsed = normalize_url(raw)
    backend = parsed.get_backend_name()
    path = sqlite_path(parsed)
    if path is not None and not create and not path.exists():
        raise DatabaseUnreachable(
            f"no database at {path} (check the URL; `agora db provision` creates one)"
        )
    # Bound parameters are row values (a message's text, a sealed column's plaintext before it
    # is sealed): an error's text names the statement, never its values.
    options: dict[str, Any] = {"hide_parameters": True}
    if backend == "mysql":
        options["isolation_level"] = "READ COMMITTED"
        # Recycle before the server's wait_timeout (8 h by default) instead of pinging on every
        # checkout, and skip the pool's reset-on-return ROLLBACK: every connection agora uses
        # ends its transaction itself (SQLAlchemy rolls back an open one on close), and PyMySQL,
        # unlike psycopg, sends that ROLLBACK even when idle: two round trips per transaction.
        options["pool_recycle"] = 3600
        options["pool_reset_on_return"] = None
    if backend == "sqlite":
        options["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}
    prepare_given = False
    mysql_prepare: int | None = MYSQL_PREPARE_THRESHOLD
    if backend == "mysql":
        # a held worker connection on MariaDB prepares its statements (``_mysql_prepared``)
        # unless the URL says otherwise; PyMySQL itself has no such parameter
        parsed, mysql_prepare = (
            _prepare_threshold(parsed)
            if PREPARE_THRESHOLD_PARAM in parsed.query
            else (parsed, mysql_prepare)
        )
    if backend == "postgresql":
        prepare_given = PREPARE_THRESHOLD_PARAM in parsed.query
        parsed, threshold = _prepare_threshold(parsed)
        options["connect_args"] = {"prepare_threshold": threshold}
        if "connect_timeout" not in parsed.query:
            # libpq waits for a host that does not answer as long as TCP does (minutes): a
            # multi-host URL would sit on a dead machine past the reconnect deadline.
            options["connect_args"]["connect_timeout"] = PG_CONNECT_TIMEOUT_S
    given_args = kwargs.pop("connect_args", None)
    if given_args:
        options["connect_args"] = {**options.get("connect_args", {}), **given_args}
    options.update(kwargs)
    try:
        engine = create_engine(parsed, **options)
    except (ArgumentError, NoSuchModuleError) as exc:
        raise InvalidInput(f"cannot use {mask_url(raw)!r}: {_first_line(exc, raw)}") from None
    tenant = tenant or os.environ.get("AGORA_TENANT") or None
    if tenant is not None:
        check_identity("tenant", tenant)
        if backend == "postgresql":
            install_tenant_hook(engine, tenant)
    if backend == "sqlite":
        _install_sqlite_events(engine, event)
        if readonly:
            engine = engine.execution_options(sqlite_deferred=True)
    if backend == "mysql":
        event.listen(engine, "connect", _on_mysql_connect)
        if mysql_prepare != MYSQL_PREPARE_THRESHOLD:
            engine = engine.execution_options(**{_MYSQL_PREPARE: mysql_prepare})
    if prepare_given:
        # the URL chose (``prepare_if_direct`` then leaves the threshold as it is)
        engine = engine.execution_options(**{_PREPARE_GIVEN: True})
    if tenant is not None:
        # Every connection knows its session tenant (``session_tenant``): a privileged job
        # refuses to run under one, on every dialect. Last: the events above are the base's.
        engine = engine.execution_options(**{_SESSION_TENANT: tenant})
    if check:
        try:
            # Deferred on SQLite: proving the connection never waits for another's write lock.
            with engine.connect().execution_options(sqlite_deferred=True) as conn:
                conn.exec_driver_sql("SELECT 1")
                conn.rollback()
        except Exception as exc:
            engine.dispose()
            raise _unreachable(exc, raw, path) from exc
    return engine


_SESSION_TENANT = "agora_tenant"  # execution option: the engine's session tenant
_PREPARE_GIVEN = "agora_prepare_given"  # execution option: the URL set prepare_threshold
_MYSQL_PREPARE = "agora_mysql_prepare"  # execution option: the URL's MySQL prepare_threshold
MYSQL_PREPARE_THRESHOLD = 1
"""MariaDB: the runs of a statement text, on a held worker connection, before it is prepared on
the server (``_mysql_prepared``): from its second. ``?prepare_threshold=N`` sets it, ``none``
keeps every statement text."""


def session_tenant(bind: Engine | Connection) -> str | None:
    """The session tenant ``bind`` was opened with (``open_engine(tenant=…)`` or
    ``AGORA_TENANT``), or ``None``."""
    value = bind.get_execution_options().get(_SESSION_TENANT)
    return None if value is None else str(value)


_GALERA = "agora_galera"  # connection-record key: this server is a Galera node (wsrep_on)
_GALERA_SLOT = "agora_galera_slot"  # (wsrep_local_index, wsrep_cluster_size) at connect
CAUSAL_READS = 1  # wsrep_sync_wait bit 1: SELECT, SHOW and BEGIN wait for the cluster


def _on_mysql_connect(dbapi_conn: Any, record: Any) -> None:
    """Ask a new MySQL/MariaDB connection whether the server is a Galera node (``wsrep_on``,
    absent on MySQL); on one, turn on causal reads for the session."""
    cur = dbapi_conn.cursor()
    try:
        cur.execute("SHOW VARIABLES LIKE 'wsrep_on'")
        row = cur.fetchone()
        galera = row is not None and str(row[1]).upper() == "ON"
        if galera:
            cur.execute(f"SET SESSION wsrep_sync_wait = {CAUSAL_READS}")
            cur.execute(
                "SHOW STATUS WHERE Variable_name IN ('wsrep_local_index', 'wsrep_cluster_size')"
            )
            found = {str(k): str(v) for k, v in cur.fetchall()}
            record.info[_GALERA_SLOT] = _slot(found)
    finally:
        cur.close()
    record.info[_GALERA] = galera


def _slot(found: Mapping[str, str]) -> tuple[int, int]:
    try:
        index, size = int(found["wsrep_local_index"]), int(found["wsrep_cluster_size"])
    except (KeyError, ValueError):
        return (0, 1)
    return (index, size) if 0 <= index < size else (0, 1)


def galera_slot(conn: Connection) -> tuple[int, int]:
    """This Galera node's index in the cluster and the cluster's size, as they were when the
    connection opened (``(0, 1)`` when unknown): a hint for spreading work over nodes only."""
    return cast("tuple[int, int]", conn.info.get(_GALERA_SLOT, (0, 1)))


def is_galera(bind: Engine | Connection) -> bool:
    """Whether ``bind``'s server is a Galera cluster node (MariaDB Galera, Percona XtraDB
    Cluster) with replication on: asked once per pooled connection, when it connects."""
    if not dialect_of(bind).may_be_galera:
        return False
    if hasattr(bind, "info") and hasattr(bind, "in_transaction"):  # a Connection
        return bool(cast("Connection", bind).info.get(_GALERA, False))
    with bind.connect() as conn:
        return bool(conn.info.get(_GALERA, False))


def _install_sqlite_events(engine: Engine, event: Any) -> None:
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let us issue BEGIN ourselves (pysqlite's own BEGIN is deferred).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cur.close()

    def _on_begin(conn: Connection) -> None:
        # Readers that must never wait on a writer ask for a deferred transaction. The BEGIN is
        # sent with the transaction's first statement, as psycopg and PyMySQL do: a transaction
        # whose arguments fail validation never touched the database (nor its write lock).
        deferred = conn.get_execution_options().get("sqlite_deferred")
        conn.info[_PENDING_BEGIN] = "BEGIN" if deferred else "BEGIN IMMEDIATE"

    def _before_statement(conn: Connection, cursor: Any, *_args: Any) -> None:
        begin = conn.info.pop(_PENDING_BEGIN, None)
        if begin is not None:
            cursor.execute(begin)

    def _on_end(conn: Connection) -> None:
        conn.info.pop(_PENDING_BEGIN, None)

    def _on_checkin(_dbapi_conn: Any, record: Any) -> None:
        record.info.pop(_PENDING_BEGIN, None)

    event.listen(engine, "connect", _on_connect)
    event.listen(engine, "begin", _on_begin)
    event.listen(engine, "before_cursor_execute", _before_statement)
    event.listen(engine, "commit", _on_end)
    event.listen(engine, "rollback", _on_end)
    event.listen(engine.pool, "checkin", _on_checkin)


def _first_line(exc: BaseException, url: str | None = None) -> str:
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
    if url:
        remember_url(url)
    return scrub(text)


def _unreachable(exc: BaseException, url: str, path: Path | None = None) -> AgoraError:
    if isinstance(exc, AgoraError):
        return exc
    where = f"the SQLite database {path}" if path is not None else mask_url(url)
    return DatabaseUnreachable(f"cannot connect to {where}: {_first_line(exc, url)}")


def translate_error(exc: BaseException, url: str | None = None) -> AgoraError | None:
    """Map a SQLAlchemy/driver exception to agora's tree, or ``None`` if it is not one."""
    # lazy: start-up — the engine module imports without SQLAlchemy (agora config)
    from sqlalchemy import exc as sa_exc

    if isinstance(exc, AgoraError):
        return exc
    if isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError) and _is_connection_error(
        exc
    ):
        where = f" to {mask_url(url)}" if url else ""
        return DatabaseUnreachable(f"lost the connection{where}: {_first_line(exc, url)}")
    if isinstance(exc, sa_exc.DBAPIError):
        missing = _missing_object(exc)
        if missing is not None:
            return SchemaDrift(
                f"{missing} does not exist: this database's agent schema is missing or "
                "incomplete (not provisioned yet, or made by another writer); run `agora db "
                "provision` (`agora db check` lists what differs)"
            )
        return DatabaseError(f"the database refused a statement: {_first_line(exc, url)}")
    if isinstance(exc, sa_exc.ArgumentError | sa_exc.NoSuchModuleError):
        return InvalidInput(_first_line(exc, url))
    return None


# What each driver says when a statement names a table or column the database lacks (the
# column as the driver gives it: "m.seq" when the statement aliased the table).
_MISSING = tuple(
    re.compile(p)
    for p in (
        r'relation "(?P<table>[^"]+)" does not exist',  # PostgreSQL 42P01
        r'column "?(?P<column>[^" ]+)"? of relation "(?P<table>[^"]+)" does not exist',  # 42703
        r'column "?(?P<column>[^" ]+)"? does not exist',
        r"Table '(?:[^'.]+\.)?(?P<table>[^']+)' doesn't exist",  # MySQL 1146
        r"Unknown column '(?P<column>[^']+)'",  # MySQL 1054
        r"^no such table: (?P<table>\S+)",  # SQLite
        r"^no such column: (?P<column>\S+)",
        r"^table (?P<table>\S+) has no column named (?P<column>\S+)",
    )
)
_MISSING_CODES = {"42P01", "42703"}  # PostgreSQL; MySQL by errno below


def _missing_object(exc: Any) -> str | None:
    """``table agent_budget`` or ``column agent_message.seq`` when the driver says a statement
    named something the database lacks (PostgreSQL 42P01/42703, MySQL 1146/1054, SQLite's "no
    such table/column"), else ``None``."""
    orig = getattr(exc, "orig", exc)
    args: tuple[Any, ...] = tuple(getattr(orig, "args", ()))
    code = getattr(orig, "sqlstate", None)
    if args and args[0] in (1146, 1054):  # PyMySQL: (errno, message), sqlstate beside
        message = str(args[1]) if len(args) > 1 else ""
    elif code in _MISSING_CODES or type(orig).__module__.startswith("sqlite3"):
        message = str(orig).strip().splitlines()[0] if str(orig).strip() else ""
    else:
        return None
    for pattern in _MISSING:
        found = pattern.search(message)
        if found is not None:
            named = found.groupdict()
            if named.get("column"):
                table = f"{named['table']}." if named.get("table") else ""
                return f"column {table}{named['column']}"
            return f"table {named['table']}"
    return None


def _is_connection_error(exc: Any) -> bool:
    if getattr(exc, "connection_invalidated", False):
        return True
    text = str(getattr(exc, "orig", exc)).lower()
    return any(
        s in text
        for s in (
            "connection refused",
            "could not connect",
            "can't connect",
            "server closed the connection",
            "lost connection",
            "gone away",
            "connection failed",
            "unable to open database",
        )
    )


def dialect_name(bind: Engine | Connection) -> str:
    """``postgresql``, ``mysql`` (MariaDB too) or ``sqlite``."""
    return str(bind.dialect.name).replace("mariadb", "mysql")


def server_version(conn: Connection) -> str:
    """The server's version string (SQLite: the library's)."""
    return str(conn.exec_driver_sql(dialect_of(conn).server_version_sql).scalar())


def supports_skip_locked(conn: Connection) -> bool:
    """Whether ``FOR UPDATE SKIP LOCKED`` works here: PostgreSQL, MySQL >= 8.0.1, MariaDB >= 10.6.

    SQLAlchemy renders SKIP LOCKED without checking the server, so the store asks this first.
    """
    return dialect_of(conn).supports_skip_locked(conn)


_RETRYABLE_SQLSTATES = {"40001", "40P01"}
# 1213: a deadlock, and on Galera a transaction that lost certification (another node committed
# a conflicting write first) or was aborted by a replicated write ("brute force" abort);
# 1205: a lock wait timeout.
_RETRYABLE_MYSQL_CODES = {1213, 1205}
# 1047 is "unknown command" in general, and on Galera "WSREP has not yet prepared node for
# application use": the node is joining or resyncing, for a moment.
_GALERA_NOT_READY = 1047
# Long enough for a Galera node to finish a state transfer or flow control to ease (the sum of
# the full-jitter delays of 12 attempts from 10 ms is about 20 s at most, 10 s on average).
DEFAULT_ATTEMPTS = 12
MAX_DELAY_S = 5.0


class RetryStats:
    """Counts of this process's transient-error retries (``retry_stats()``): a benchmark or a
    worker's metrics read them; nothing else depends on them."""

    def __init__(self) -> None:
        self.retried = 0  # attempts that failed with a retryable error and were tried again
        self.gave_up = 0  # calls whose retryable error survived every attempt
        self.by_code: dict[str, int] = {}

    def reset(self) -> None:
        self.__init__()  # type: ignore[misc]


_STATS = RetryStats()


def retry_stats() -> RetryStats:
    """This process's retry counters (see ``RetryStats``); ``.reset()`` zeroes them."""
    return _STATS


def _error_code(exc: BaseException) -> str:
    orig = getattr(exc, "orig", exc)
    args = getattr(orig, "args", ())
    if args and isinstance(args[0], int):
        return str(args[0])  # MySQL's error number (1213 …)
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return str(sqlstate) if sqlstate else "locked"


def is_retryable(exc: BaseException) -> bool:
    """Whether ``exc`` is a deadlock, serialization failure, busy lock or Galera certification
    failure (or a Galera node not ready for a moment) worth retrying."""
    orig = getattr(exc, "orig", exc)
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if sqlstate in _RETRYABLE_SQLSTATES:
        return True
    args = getattr(orig, "args", ())
    if args and isinstance(args[0], int):
        if args[0] in _RETRYABLE_MYSQL_CODES:
            return True
        if args[0] == _GALERA_NOT_READY and "wsrep" in str(orig).lower():
            return True
    return "database is locked" in str(orig).lower()


# A lost connection (a failover, a switchover, a restart, a pooler's reconnect) is retried until
# this deadline from the first loss, with full-jitter delays of at most RECONNECT_MAX_DELAY_S:
# long enough for Patroni to promote a replica after a primary dies (its ``ttl``, 30 s by
# default, plus a ``loop_wait``).
RECONNECT_DEADLINE_S = 60.0
RECONNECT_MAX_DELAY_S = 1.0
# Class 08 (connection exception), 57P01-57P03 (admin shutdown, crash shutdown, cannot connect
# now), 25006 (a read-only transaction: the server this connection reached is a standby now).
_LOST_SQLSTATES = {"57P01", "57P02", "57P03", "25006"}


def is_connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection to the server is gone or unusable (refused, closed,
    terminated by an administrator or a failover, or now on a standby): a new connection may
    succeed where this one failed."""
    orig = getattr(exc, "orig", exc)
    sqlstate = str(getattr(orig, "sqlstate", None) or "")
    if sqlstate.startswith("08") or sqlstate in _LOST_SQLSTATES:
        return True
    if type(orig).__name__ == "OperationalError" and "connection" in str(orig).lower():
        return True
    return _is_connection_error(exc)


def retry_transient(
    fn: Callable[[], T],
    *,
    attempts: int = DEFAULT_ATTEMPTS,
    base_delay: float = 0.01,
    reconnect: Engine | None = None,
    on_lost: Callable[[], None] | None = None,
    first_error: Exception | None = None,
) -> T:
    """Call ``fn`` (one whole transaction), retrying deadlocks, serialization failures and
    Galera certification failures.

    Bounded: after ``attempts`` tries the last error is raised. Between tries it sleeps a random
    time ("full jitter") up to ``base_delay * 2**attempt`` (at most ``MAX_DELAY_S``): processes
    that collided once do not collide again in lockstep. ``fn`` must redo the whole
    transaction, reads included: nothing it returned from a failed try is ever seen.

    With ``reconnect`` (the engine ``fn`` uses), a lost connection (``is_connection_lost``) is
    retried too, for ``RECONNECT_DEADLINE_S`` from the first loss: the engine's pooled
    connections are dropped (they reach the old server) and ``on_lost`` is called before the
    next try. Only for ``fn`` that is safe to run twice: the statement that was cut off may have
    committed.

    ``first_error``: what a first try the caller made itself raised, taken as ``fn``'s first
    try (a worker's step tries once without this function's frames).
    """
    tries = 0
    losses = 0
    deadline: float | None = None
    pending = first_error
    while True:
        try:
            if pending is not None:
                raised, pending = pending, None
                raise raised
            return fn()
        except Exception as exc:
            if reconnect is not None and is_connection_lost(exc):
                now = time.monotonic()
                deadline = now + RECONNECT_DEADLINE_S if deadline is None else deadline
                if now >= deadline:
                    _STATS.gave_up += 1
                    raise
                _count_retry("lost")
                reconnect.dispose(close=False)
                if on_lost is not None:
                    on_lost()
                losses += 1
                pause = random.uniform(0, min(RECONNECT_MAX_DELAY_S, 0.05 * (2**losses)))
                time.sleep(min(pause, max(0.0, deadline - now)))
                continue
            if not is_retryable(exc):
                raise
            tries += 1
            if tries >= attempts:
                _STATS.gave_up += 1
                raise
            _count_retry(_error_code(exc))
            time.sleep(random.uniform(0, min(MAX_DELAY_S, base_delay * (2 ** (tries - 1)))))


def _count_retry(code: str) -> None:
    _STATS.retried += 1
    _STATS.by_code[code] = _STATS.by_code.get(code, 0) + 1


# --- statements on the driver's cursor --------------------------------------------------------


class DriverResult(NamedTuple):
    """What a statement run on the driver's cursor did: rows changed, and the rows it returned."""

    rowcount: int
    rows: list[tuple[Any, ...]]


def run_on_driver(
    conn: Connection,
    sql: str,
    params: Sequence[Any] | Mapping[str, Any] | None,
    *,
    commit: bool = False,
    rendered: bool = False,
) -> DriverResult:
    """Run ``sql`` on the DBAPI cursor inside ``conn``'s transaction; the cursor is closed.

    For the few statements a worker runs in a loop: SQLAlchemy's per-statement work (execution
    context, bind processing, result wrapping) costs more client CPU than the round trip itself.
    Begins the transaction first if the caller has not (as SQLAlchemy's autobegin would, so the
    engine's ``begin`` events run), and raises driver errors as the ``sqlalchemy.exc.DBAPIError``
    SQLAlchemy itself would raise — so ``retry_transient`` and ``translate_error`` see the same
    thing — invalidating the connection when the driver reports it lost. These statements fire
    no engine events and are not echoed.

    ``params`` is ``None`` for text rendered with its values (``driver_quote``): the driver
    then reads no placeholder in it. Say so with ``rendered``: an error then names no statement
    (its text holds the values, a result among them; ``hide_parameters`` cannot hide them).

    ``commit``: the statement may end the transaction (a step's last statement, or one after
    which a commit is harmless). On a connection that merges commits (``merge_commits``) its
    COMMIT is sent with it, in the same round trip, and ``end_on_driver`` then has nothing to
    send; elsewhere the flag changes nothing.
    """
    fairy = conn.connection  # each of SQLAlchemy's properties costs; this path counts them
    info = fairy.info
    if not conn.in_transaction():
        if info.get(_MERGES_COMMIT):
            if commit:
                return _run_and_commit(conn, fairy.driver_connection, sql, params, rendered)
            info.pop(_COMMITTED, None)
        elif not info.get(DRIVER_TRANSACTION):
            conn.begin()
    if info.get(AUTOCOMMIT_TENANT) is not None or _PENDING_BEGIN in info:
        return _on_driver(conn, [(sql, params)], pipeline=False)[0]
    # The worker's usual case, without the general path's lists and context managers: a
    # statement's client CPU is what a worker pays per job.
    dbapi_conn: Any = fairy.driver_connection
    cursor: Any = None
    try:
        if type(params) is tuple and info.get(_MERGES_COMMIT):  # PyMySQL
            got = _run_prepared(info, dbapi_conn, sql, params)
            if got is not None:
                return DriverResult(*got)
            cursor = dbapi_conn.cursor()
            cursor.execute(_render_pymysql(dbapi_conn, sql, params), None)  # rendered here
        else:
            cursor = dbapi_conn.cursor()
            cursor.execute(sql, params)
        done = DriverResult(cursor.rowcount, cursor.fetchall() if cursor.description else [])
    except BaseException as exc:
        _raise_failed(conn, exc, _shown(sql, rendered), params, cursor)
    _close_quietly(cursor)
    return done


def _run_prepared(
    info: dict[Any, Any], dbapi_conn: Any, sql: str, params: Any
) -> tuple[int, list[tuple[Any, ...]]] | None:
    """``sql`` run prepared (``_mysql_prepared.run_prepared``) where the connection whose
    ``info`` this is prepares its statements and ``params`` are bound (a tuple); else ``None``:
    the caller sends the text."""
    threshold = info.get(_PREPARES)
    if threshold is None or type(params) is not tuple:
        return None
    from agora_cli.store._mysql_prepared import run_prepared  # lazy: a MariaDB worker's only

    return run_prepared(dbapi_conn, sql, params, threshold)


def prepares_statements(conn: Connection) -> bool:
    """Whether ``conn`` runs its statements with bound values prepared on the server
    (``_mysql_prepared``): a held worker connection on MariaDB, unless the URL said
    ``?prepare_threshold=none``. Its batch statements then go with their values bound, not
    rendered into the text (``values_quote``)."""
    return conn.connection.info.get(_PREPARES) is not None


def values_quote(conn: Connection) -> Callable[[Any], str] | None:
    """``driver_quote``, for a statement rendered with its values — or ``None``, bound values,
    where ``conn`` prepares its statements (``prepares_statements``): a prepared statement is
    sent without its values in the text, and parsed once."""
    return None if prepares_statements(conn) else driver_quote(conn)


_NOT_SHOWN = "(a statement rendered with its values: not shown)"


def _shown(sql: str, rendered: bool) -> str:
    """The statement an error names: ``sql``, unless it was rendered with its values."""
    return _NOT_SHOWN if rendered else sql


def runs_compound_statements(conn: Connection) -> bool:
    """Whether ``conn`` takes a compound statement (``BEGIN NOT ATOMIC … END``) outside a stored
    program, answered once (``run_committing_if``): a held worker connection on MariaDB."""
    return bool(conn.connection.info.get(_GUARDS_COMMIT)) and not conn.in_transaction()


def takes_statements_together(conn: Connection) -> bool:
    """Whether ``conn`` takes several statements in one packet (``merge_commits``): a held
    worker connection on MySQL/MariaDB over PyMySQL."""
    return bool(conn.connection.info.get(_MERGES_COMMIT)) and not conn.in_transaction()


def run_write_then_reads(conn: Connection, sql: str) -> tuple[int, list[tuple[Any, ...]]]:
    """A write followed by reads in one text, rendered with its values, sent in one round trip
    on a connection that ``takes_statements_together``: the rows the write changed, and the
    rows of every read after it. Inside the step's transaction (nothing commits), raised as
    ``run_on_driver`` raises, naming no statement (``rendered``): a failed statement ends the
    packet, nothing after it runs."""
    return _every_result(conn, sql, None, _NOT_SHOWN)


def _every_result(
    conn: Connection, sql: str, params: Any, shown: str
) -> tuple[int, list[tuple[Any, ...]]]:
    """``sql``'s statements sent in one packet: the first one's row count, and the rows of
    them all (a write returns none); a failure names ``shown`` as the statement."""
    fairy = conn.connection
    fairy.info.pop(_COMMITTED, None)
    cursor: Any = None
    try:
        cursor = fairy.driver_connection.cursor()  # type: ignore[union-attr]
        cursor.execute(sql, params)
        changed = int(cursor.rowcount)
        rows = list(cursor.fetchall())
        while cursor.nextset():
            rows += cursor.fetchall()
    except BaseException as exc:
        _raise_failed(conn, exc, shown, params, cursor)
    _close_quietly(cursor)
    return changed, rows


def driver_quote(conn: Connection) -> Callable[[Any], str] | None:
    """PyMySQL's own quoting of one value as an SQL literal — what its cursor does to each
    parameter, under the connection's ``sql_mode`` (``pymysql_quote``) — or ``None`` with
    another driver.

    For a batch statement that names one value many times (a lease's id in its ``CASE`` and in
    the ``IN`` list): quoted once and rendered into the text, sent with no parameters
    (``run_on_driver(conn, rendered, None)``), where the driver would quote each of the
    hundreds of parameters a batch of 100 binds.
    """
    if conn.dialect.driver != "pymysql":
        return None
    return pymysql_quote(conn.connection.driver_connection)


# PyMySQL's escapes of a ``str`` (``converters.escape_string``'s table, indexed by code point
# as its own is: ``translate`` reads a list faster than a dict; a test holds them equal)
def _escape_table() -> list[str]:
    table = [chr(c) for c in range(128)]
    escapes = {
        "\0": "\\0",
        "\n": "\\n",
        "\r": "\\r",
        "\x1a": "\\Z",
        '"': '\\"',
        "'": "\\'",
        "\\": "\\\\",
    }
    for char, escaped in escapes.items():
        table[ord(char)] = escaped
    return table


_ESCAPES = _escape_table()
_NO_BACKSLASH_ESCAPES = 512  # PyMySQL's SERVER_STATUS_NO_BACKSLASH_ESCAPES


def pymysql_quote(dbapi_conn: Any) -> Callable[[Any], str]:
    """``dbapi_conn.escape`` (PyMySQL's quoting of one value, under the ``sql_mode`` the server
    last reported), a ``str`` quoted without its three calls — the kind a worker's batch
    statement quotes hundreds of — and, when it holds none of the seven characters PyMySQL
    escapes (an id, a token's hash: seven scans in C), without its ``translate``. Asked for
    each statement: the mode is read as it is now."""
    escape: Callable[[Any], str] = dbapi_conn.escape
    if dbapi_conn.server_status & _NO_BACKSLASH_ESCAPES:
        return escape
    table = _ESCAPES

    def quote(value: Any) -> str:
        if type(value) is not str:
            return escape(value)
        if _escapes_nothing(value):
            return f"'{value}'"
        return f"'{value.translate(table)}'"

    return quote


def _escapes_nothing(text: str) -> bool:
    """Whether ``text`` holds none of the seven characters PyMySQL escapes (seven scans in C)."""
    return not (
        "'" in text
        or "\\" in text
        or '"' in text
        or "\0" in text
        or "\n" in text
        or "\r" in text
        or "\x1a" in text
    )


_STR = {str}


def quote_all(quote: Callable[[Any], str], values: Sequence[Any]) -> list[str]:
    """``[quote(value) for value in values]`` with ``quote`` from ``driver_quote``, for a
    batch's ids: where every value is a ``str`` and none holds a character PyMySQL escapes
    (``_escapes_nothing`` of their joined text), each is its own text in quotes — what
    ``quote`` makes of it under either ``sql_mode`` — without a call a value."""
    if len(values) > 1 and set(map(type, values)) == _STR and _escapes_nothing("".join(values)):
        return [f"'{value}'" for value in values]
    return list(map(quote, values))


def _raise_failed(
    conn: Connection, exc: BaseException, sql: str, params: Any, cursor: Any
) -> NoReturn:
    """A statement run on the driver's cursor failed: close the cursor and raise a driver error
    as SQLAlchemy would (``_driver_error``); anything else (an interrupt mid-statement) leaves
    the connection's state unknown: it is invalidated and ``exc`` raised as it is."""
    _close_quietly(cursor)
    if isinstance(exc, conn.dialect.loaded_dbapi.Error):
        raise _driver_error(conn, exc, sql, params, cursor) from exc
    conn.invalidate()
    raise exc


def _close_quietly(cursor: Any) -> None:
    if cursor is not None:
        try:
            cursor.close()
        except Exception:
            pass


def _render_pymysql(dbapi_conn: Any, sql: str, params: tuple[Any, ...]) -> str:
    """``sql`` with ``params`` rendered as PyMySQL's cursor renders them (``mogrify``: each
    value through the connection's ``escape``, under its ``sql_mode``), the commonest kinds
    without its per-value dispatch: an ``int`` (never a ``bool``) as its digits, ``None`` as
    ``NULL``, a ``str`` as ``pymysql_quote`` quotes it; anything else as PyMySQL's ``escape``
    renders it. A worker's statement binds a dozen values: half its rendering cost."""
    quote = pymysql_quote(dbapi_conn)
    values = []
    for value in params:
        kind = type(value)
        if kind is int:
            values.append(str(value))
        elif value is None:
            values.append("NULL")
        else:
            values.append(quote(value))
    return sql % tuple(values)


def _run_and_commit(
    conn: Connection, dbapi_conn: Any, sql: str, params: Any, rendered: bool = False
) -> DriverResult:
    """``sql`` and its COMMIT in one round trip (``merge_commits``); the COMMIT's own answer is
    read before this returns, so a failed commit (a Galera certification conflict) is raised
    here as ``run_on_driver`` raises a statement's error, and the step is retried.

    On MariaDB the two are one compound statement (``BEGIN NOT ATOMIC … END``), which the
    server answers once, with the write's row count: it sends each statement's answer of a
    multi-statement text as soon as it has it, so the worker would wake for the write's and
    again for the COMMIT's, 30-50 µs of client CPU a step (``sql``: one write, no rows)."""
    info = conn.connection.info
    if info.get(_GUARDS_COMMIT):
        sent = f"BEGIN NOT ATOMIC {sql}; COMMIT; END"
        try:
            got = _run_prepared(info, dbapi_conn, sent, params)
        except BaseException as exc:
            _raise_failed(conn, exc, sent, params, None)
        if got is not None:
            conn.info[_COMMITTED] = True
            return DriverResult(*got)
    else:
        sent = sql + "; COMMIT"
    text = _render_pymysql(dbapi_conn, sent, params) if type(params) is tuple else None
    cursor: Any = None
    try:
        cursor = dbapi_conn.cursor()
        if text is None:
            cursor.execute(sent, params)
        else:
            cursor.execute(text, None)
        done = DriverResult(cursor.rowcount, cursor.fetchall() if cursor.description else [])
        cursor.nextset()  # the COMMIT's answer
    except BaseException as exc:
        _raise_failed(conn, exc, _shown(sent, rendered), params, cursor)
    _close_quietly(cursor)
    conn.info[_COMMITTED] = True
    return done


def run_committing_if(
    conn: Connection,
    sql: str,
    params: Any,
    rows: int,
    *,
    rendered: bool = False,
    then: str | None = None,
    then_params: tuple[Any, ...] | None = None,
) -> int:
    """Run ``sql`` (a write) on the driver as ``run_on_driver`` does, and let it end the
    step's transaction only if it changed exactly ``rows`` rows; its row count (``rows`` when
    it committed; on MariaDB another number, -1, when it did not).

    For a step that is all or nothing by its count (``settle_proposals``' one fenced UPDATE of
    a batch): a count that differs leaves the transaction open for the caller to roll back, as
    a plain ``run_on_driver`` would. On MariaDB, over a connection that merges commits
    (``merge_commits``), the test and the COMMIT go with the statement in one round trip, as
    one compound statement the server answers once: ``BEGIN NOT ATOMIC sql; IF ROW_COUNT() =
    rows THEN COMMIT; ELSE SIGNAL …; END IF; END``. Elsewhere (MySQL has no compound statement
    outside a stored program) the step's end sends the COMMIT.

    ``then``: one more write that runs only when ``sql`` changed ``rows`` rows, in the same
    transaction — on MariaDB inside the same compound statement, before its COMMIT
    (``settle_proposals_and_claim_next``: a batch's settle, then the claim's ``UPDATE``, one
    round trip and one answer): rendered with its values (``then_params`` ``None``, and
    ``params`` too), or with its own parameters (``then_params``, after ``params``: both bound,
    as a connection that ``prepares_statements`` sends them).
    """
    fairy = conn.connection
    if then is not None and (params is None) != (then_params is None):
        raise ValueError("run_committing_if: `then` and `sql` are both rendered, or both bound")
    if not runs_compound_statements(conn):
        count = run_on_driver(conn, sql, params, rendered=rendered).rowcount
        if then is not None and count == rows:
            run_on_driver(conn, then, then_params, rendered=then_params is None)
        return count
    # One compound statement, answered once (as ``_run_and_commit``'s): the write, then its test
    more = "" if then is None else f"{then}; "
    sent = (
        f"BEGIN NOT ATOMIC {sql}; IF ROW_COUNT() = {int(rows)} THEN {more}COMMIT; "
        f"ELSE SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '{_NOT_ALL}'; END IF; END"
    )
    fairy.info.pop(_COMMITTED, None)  # until this COMMIT is in
    dbapi = conn.dialect.loaded_dbapi
    dbapi_conn: Any = fairy.driver_connection
    if then_params is not None:
        params = (*params, *then_params)
    cursor: Any = None
    try:
        try:
            got = _run_prepared(fairy.info, dbapi_conn, sent, params)
        except dbapi.Error as exc:
            if exc.args[:2] != (_SIGNALLED, _NOT_ALL):
                raise
            return -1  # not committed: the caller rolls back
        if got is None and type(params) is tuple:
            sent, params, rendered = _render_pymysql(dbapi_conn, sent, params), None, True
        if got is None:
            cursor = dbapi_conn.cursor()
        try:
            if got is None:
                cursor.execute(sent, params)
        except dbapi.Error as exc:
            if exc.args[:2] != (_SIGNALLED, _NOT_ALL):
                raise
            _close_quietly(cursor)  # not committed: the caller rolls back
            return -1  # not ``rows`` (the count itself is not reported with the SIGNAL)
    except BaseException as exc:
        _raise_failed(conn, exc, _shown(sent, rendered), params, cursor)
    _close_quietly(cursor)
    fairy.info[_COMMITTED] = True
    return int(rows)  # committed: the test held, the write changed exactly ``rows``


_NOT_ALL = "agora: not every row changed; not committed"
_SIGNALLED = 1644  # ER_SIGNAL_EXCEPTION: a SIGNAL's own error
_GUARDS_COMMIT = "agora_guards_commit"
_PREPARES = "agora_prepares"  # a held MariaDB connection's prepare threshold (``_mysql_prepared``)
_MERGES_COMMIT = "agora_merges_commit"
_COMMITTED = "agora_committed"
_MULTI_STATEMENTS_ON, _MULTI_STATEMENTS_OFF = 0, 1  # COM_SET_OPTION's two options


def merge_commits(conn: Connection) -> bool:
    """Let ``conn``, a held worker connection (``DRIVER_TRANSACTION``) on MySQL/MariaDB over
    PyMySQL, send a step's COMMIT with its last statement (``run_on_driver(commit=True)``):
    one round trip fewer per step. Whether it now does.

    The server takes two statements in one packet only when the connection asks
    (``COM_SET_OPTION``, this connection only); every statement a worker sends is agora's own
    text, its values escaped by the driver. The connection asks it off again as it goes back to
    its pool, however it goes (``close()``, or a connection nobody closed): a pool ``checkin``
    listener does, and drops the connection if the server does not answer. ``False`` (and
    nothing changed) with another driver, or when the server refuses.
    """
    if not dialect_of(conn).merges_commits or conn.dialect.driver != "pymysql":
        return False
    from sqlalchemy import event  # lazy: start-up (see _driver_error)

    pool = conn.engine.pool
    if not event.contains(pool, "checkin", _unmerge_at_checkin):
        event.listen(pool, "checkin", _unmerge_at_checkin)
    fairy = conn.connection
    if _set_multi_statements(fairy.driver_connection, _MULTI_STATEMENTS_ON):
        fairy.info[_MERGES_COMMIT] = True
        # MariaDB runs ``IF`` outside a stored program (``run_committing_if``); MySQL does not
        fairy.info[_GUARDS_COMMIT] = guards = bool(getattr(conn.dialect, "is_mariadb", False))
        # MariaDB prepares a compound statement as any other (MySQL sends the COMMIT as a
        # second statement of the packet, which no prepared statement can hold)
        threshold = conn.get_execution_options().get(_MYSQL_PREPARE, MYSQL_PREPARE_THRESHOLD)
        if guards and threshold is not None:
            fairy.info[_PREPARES] = threshold
    return bool(fairy.info.get(_MERGES_COMMIT))


def _unmerge_at_checkin(dbapi_conn: Any, record: Any) -> None:
    """A pool's ``checkin``: a connection that merged commits takes one statement a packet
    again before anyone else checks it out; one that cannot say so is dropped."""
    if record is None or record.info.pop(_MERGES_COMMIT, None) is None:
        return
    record.info.pop(_COMMITTED, None)
    record.info.pop(_GUARDS_COMMIT, None)
    if record.info.pop(_PREPARES, None) is not None and dbapi_conn is not None:
        from agora_cli.store._mysql_prepared import forget  # lazy: a MariaDB worker's only

        forget(dbapi_conn)  # its statements closed before anyone else checks it out
    if dbapi_conn is not None and not _set_multi_statements(dbapi_conn, _MULTI_STATEMENTS_OFF):
        record.invalidate()


def _set_multi_statements(dbapi_conn: Any, option: int) -> bool:
    """PyMySQL has no public call for ``COM_SET_OPTION``: send the command on its connection
    (the server answers with an EOF packet, or an error); ``False`` if anything fails."""
    import struct  # lazy: the worker's connection only

    try:
        from pymysql.constants import COMMAND  # lazy: PyMySQL only

        dbapi_conn._execute_command(COMMAND.COM_SET_OPTION, struct.pack("<H", option))
        return bool(dbapi_conn._read_packet().is_eof_packet())
    except Exception:
        return False


def prepare_if_direct(conn: Connection) -> bool:
    """Prepare ``conn``'s statements on the server from their first run when ``conn`` reaches
    PostgreSQL directly; whether it now does.

    For a connection held for many statements (a worker's): a prepared statement is parsed and
    planned once. Never through a pooler — a pooler answers the startup itself, so the backend
    pid psycopg got (``info.backend_pid``) is not the server process's (``pg_backend_pid()``),
    and a transaction pooler would run the next statement where it was never prepared — and
    never when the URL set ``prepare_threshold`` (``none``: off; a number: kept as given).
    """
    if not dialect_of(conn).has_pg_catalog or conn.get_execution_options().get(_PREPARE_GIVEN):
        return False
    from agora_cli.store._pooler import backend_pids  # lazy: PostgreSQL only

    startup, server = backend_pids(conn)
    if startup is None or startup != server:
        return False
    dbapi_conn: Any = conn.connection.driver_connection
    dbapi_conn.prepare_threshold = 0
    return True


def run_pipelined(
    conn: Connection, statements: Sequence[tuple[str, Sequence[Any] | Mapping[str, Any]]]
) -> list[DriverResult]:
    """Run ``statements`` on the driver as ``run_on_driver`` does, sent together in one round
    trip where the driver can (psycopg's pipeline mode); one result each, in order.

    PostgreSQL runs statements sent without a Sync between them as one implicit transaction
    even in autocommit: a failing statement undoes those before it. Other drivers run them one
    after the other, in ``conn``'s transaction.
    """
    return _on_driver(conn, statements, pipeline=True)


DRIVER_TRANSACTION = "agora_driver_transaction"
"""Connection-info key: the caller runs this connection's transaction on the driver itself
(``commit_on_driver``), so ``run_on_driver`` does not begin SQLAlchemy's (a held worker
connection on MySQL/MariaDB: SQLAlchemy's begin and commit cost a fifth of a step's client CPU)."""


def _on_driver(
    conn: Connection,
    statements: Sequence[tuple[str, Sequence[Any] | Mapping[str, Any] | None]],
    *,
    pipeline: bool,
) -> list[DriverResult]:
    info = conn.info
    info.pop(_COMMITTED, None)
    if not conn.in_transaction() and not info.get(DRIVER_TRANSACTION):
        conn.begin()
    dbapi_conn: Any = conn.connection.driver_connection
    scoped = autocommit_tenant_statement(conn)
    if scoped is not None:  # an autocommit block under a tenant: the setting goes first
        statements = [scoped, *statements]
    pipelined = (scoped is not None or (pipeline and len(statements) > 1)) and hasattr(
        dbapi_conn, "pipeline"
    )
    cursors: list[Any] = []
    sql, params = statements[0]
    try:
        with dbapi_conn.pipeline() if pipelined else contextlib.nullcontext():
            for sql, params in statements:
                cursor = dbapi_conn.cursor()
                cursors.append(cursor)
                if _PENDING_BEGIN in info:  # SQLite's deferred BEGIN (see above)
                    cursor.execute(info.pop(_PENDING_BEGIN))
                cursor.execute(sql, params)
                if not pipelined:
                    cursors[-1] = _collect(cursor)
        if pipelined:  # leaving the pipeline sent them all and waited once
            cursors = [_collect(cursor) for cursor in cursors]
        return cursors[1:] if scoped is not None else cursors
    except conn.dialect.loaded_dbapi.Error as exc:
        cursor = cursors[-1] if cursors and not isinstance(cursors[-1], DriverResult) else None
        raise _driver_error(conn, exc, sql, params, cursor) from exc
    except BaseException:
        # Interrupted mid-statement (KeyboardInterrupt, cancellation): the connection's state
        # is unknown, so it must not go back to the pool.
        conn.invalidate()
        raise
    finally:
        for cursor in cursors:
            if not isinstance(cursor, DriverResult):
                with contextlib.suppress(Exception):
                    cursor.close()


def _driver_error(conn: Connection, exc: Any, sql: str, params: Any, cursor: Any) -> BaseException:
    """``exc`` as the ``DBAPIError`` SQLAlchemy itself would raise; ``conn`` invalidated when
    the driver says the connection is lost."""
    # lazy: start-up — the engine module imports without SQLAlchemy (agora config)
    from sqlalchemy.exc import DBAPIError

    dbapi_conn: Any = conn.connection.driver_connection
    lost = conn.dialect.is_disconnect(exc, dbapi_conn, cursor)
    wrapped = DBAPIError.instance(
        sql,
        params,
        exc,
        conn.dialect.loaded_dbapi.Error,
        hide_parameters=conn.engine.hide_parameters,
        connection_invalidated=lost,
        dialect=conn.dialect,
    )
    if lost:
        conn.invalidate(exc)
    return cast(BaseException, wrapped)


def end_on_driver(conn: Connection, *, commit: bool) -> None:
    """Commit (or roll back) the transaction of a ``DRIVER_TRANSACTION`` connection: on the
    driver, or through SQLAlchemy when a statement there began SQLAlchemy's transaction too.
    Driver errors are raised as ``run_on_driver`` raises them. Nothing is sent when the step's
    last statement carried its COMMIT (``merge_commits``) and nothing ran since."""
    if conn.info.pop(_COMMITTED, False) and not conn.in_transaction():
        return
    if conn.in_transaction():
        if commit:
            conn.commit()
        else:
            conn.rollback()
        return
    dbapi_conn: Any = conn.connection.driver_connection
    try:
        if commit:
            dbapi_conn.commit()
        else:
            dbapi_conn.rollback()
    except conn.dialect.loaded_dbapi.Error as exc:
        raise _driver_error(conn, exc, "COMMIT" if commit else "ROLLBACK", (), None) from exc
    except BaseException:
        conn.invalidate()
        raise


def _collect(cursor: Any) -> DriverResult:
    """The cursor's rows and rowcount, the cursor closed."""
    try:
        rows = cursor.fetchall() if cursor.description is not None else []
        return DriverResult(cursor.rowcount, rows)
    finally:
        cursor.close()
