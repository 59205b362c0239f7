"""Every choice the store makes per dialect, in one class per dialect (alembic's ``DefaultImpl``).

``Dialect`` holds the portable default; ``PostgresDialect``, ``MySQLDialect`` (MariaDB too) and
``SQLiteDialect`` override what differs, and register themselves under their names (and
aliases: ``postgres``, ``mariadb``). A caller asks the impl a question — ``dialect_of(conn)``
then ``d.pads_spaces``, ``d.day_bucket(column)``, ``d.supports_skip_locked(conn)`` — and never
compares a dialect name (``tests/test_dialect_home.py`` proves it). Differences SQLAlchemy
already handles stay its business: types (``with_variant``, ``load_dialect_impl``), table
options (``mysql_engine``), index hints (``with_hint``) and ``@compiles`` constructs
(``sqlexpr.py``, ``redact.py``).

Importing this module loads nothing heavy (no SQLAlchemy): the command line reads
``DIALECT_CHOICES`` from it while building ``agora --help``.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from agora_cli.store._clock import DAY_MS
from agora_cli.store._errors import UnknownDialect

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine
    from sqlalchemy.engine import Dialect as SADialect
    from sqlalchemy.sql import Select
    from sqlalchemy.sql.elements import ColumnElement
    from sqlalchemy.sql.selectable import FromClause

__all__ = [
    "DIALECT_CHOICES",
    "RLS_DIALECT",
    "Dialect",
    "MySQLDialect",
    "PostgresDialect",
    "SQLiteDialect",
    "dialect_of",
    "index_hint",
]

_REGISTRY: dict[str, Dialect] = {}
_UNKNOWN = "unknown dialect {!r}: use postgresql, mysql or sqlite"


class Dialect:
    """The portable default of every per-dialect choice (SQLAlchemy's ``default`` dialect too:
    statements compiled with ``str()``)."""

    name: ClassVar[str] = "default"
    aliases: ClassVar[tuple[str, ...]] = ()
    label: ClassVar[str] = "SQL"

    # --- text -----------------------------------------------------------------------------
    pads_spaces: ClassVar[bool] = False
    """A PAD SPACE collation: ``'a' = 'a '``, and ``GROUP BY``/``DISTINCT``/``IN`` take them for
    one (MySQL/MariaDB ``utf8mb4_bin``); callers add the length or the bytes."""
    prefix_by_range: ClassVar[bool] = False
    """Text orders by code point always (SQLite ``BINARY``): a prefix is one range."""
    asks_collation: ClassVar[bool] = False
    """Whether a column orders by code point depends on its collation, which the catalog tells
    (PostgreSQL: ``pg_collation``)."""
    sized_text: ClassVar[bool] = False
    """``TEXT`` holds 64 KB and bigger texts have their own types (MySQL's TINY/MEDIUM/LONG)."""
    types_are_affinities: ClassVar[bool] = False
    """Declared types are affinities (SQLite): only a different affinity is a wrong type."""

    # --- reads ----------------------------------------------------------------------------
    locks_rows: ClassVar[bool] = True
    """``SELECT … FOR UPDATE`` locks rows (SQLite has no row locks: its writer locks the file)."""
    always_skips_locked: ClassVar[bool] = False
    """Every supported server has ``SKIP LOCKED`` (PostgreSQL 9.5+): no need to ask it."""
    loose_index_scan: ClassVar[bool] = False
    """``DISTINCT``/``MAX`` per group read off an index by a loose scan (MySQL/MariaDB)."""
    binds_arrays: ClassVar[bool] = False
    """A list can be one array parameter (``unnest``, ``%s::text[]``): PostgreSQL."""
    has_percentiles: ClassVar[bool] = False
    """``percentile_cont(…) WITHIN GROUP`` (PostgreSQL); elsewhere ranks are interpolated."""
    unions_derived_tables: ClassVar[bool] = True
    """``UNION`` members that lock are wrapped as derived tables (PostgreSQL refuses ``FOR
    UPDATE`` on a member, SQLite parenthesised members); MariaDB materialises each derived
    table, so it gets parenthesised branches."""
    locks_next_key: ClassVar[bool] = False
    """A locking range read also locks the first record past the range (InnoDB)."""
    orders_by_whole_index_key: ClassVar[bool] = False
    """The planner sees an index's order as free only when ``ORDER BY`` names every column of
    it (PostgreSQL); MariaDB sorts unless given the last column alone."""
    aborts_on_error: ClassVar[bool] = False
    """A failed statement aborts the whole transaction (PostgreSQL): a statement that may fail
    inside a caller's transaction runs in a savepoint."""
    has_pg_extras: ClassVar[bool] = False
    """The PostgreSQL-only table sets of the optional branches (``pg_extras.py``: the document
    tree, pgvector chunks) can be created here."""
    has_pg_catalog: ClassVar[bool] = False
    """PostgreSQL's own catalogs and views (``pg_locks``, ``pg_stat_activity``, ``pg_roles``)."""

    # --- writes ---------------------------------------------------------------------------
    deletes_through_joins: ClassVar[bool] = True
    """A multi-table ``DELETE`` (MariaDB before 11.1 runs ``IN (subquery)`` in a DELETE as a
    dependent subquery over the whole child table); SQLite has none."""
    updates_read_own_table: ClassVar[bool] = True
    """An ``UPDATE … WHERE x IN (SELECT … FROM <same table>)`` is accepted (MySQL refuses it)."""
    updates_through_joins: ClassVar[bool] = False
    """``UPDATE t JOIN (rows) AS v ON …`` (MySQL/MariaDB) settles many rows in one statement."""
    claims_in_one_update: ClassVar[bool] = False
    """``UPDATE … FROM (locking reads) … RETURNING``: a claim in one statement (PostgreSQL)."""
    pipelines: ClassVar[bool] = False
    """The driver sends several statements in one round trip (psycopg's pipeline mode)."""
    autocommit_worker_steps: ClassVar[bool] = False
    """A worker's single fenced statement runs in autocommit (PostgreSQL: no BEGIN/COMMIT
    round trips), elsewhere in a short transaction."""
    drives_worker_transactions: ClassVar[bool] = False
    """A held worker connection's transactions are run on the driver itself, without
    SQLAlchemy's begin and commit (PostgreSQL without a session tenant, MySQL/MariaDB; not
    SQLite, whose BEGIN is an engine event)."""
    merges_commits: ClassVar[bool] = False
    """A held worker connection sends a step's COMMIT with its last statement, in one round
    trip (MySQL/MariaDB over PyMySQL: two statements a packet, asked for on that connection
    only; ``merge_commits``). PostgreSQL's worker steps are single statements in autocommit."""
    forces_discovery_index: ClassVar[bool] = False
    """A worker's discovery read names the discovery index (``FORCE INDEX``): MariaDB otherwise
    scans the whole table and sorts it when most rows are due (a backlog) and the read asks for
    more than the index holds — with ``FOR UPDATE SKIP LOCKED``, a claim of 100 read 3,000 rows."""
    reads_due_as_json: ClassVar[bool] = False
    """A worker's discovery read returns each row as one ``JSON_ARRAY`` column (MySQL/MariaDB:
    PyMySQL parses every column's descriptor on every result, a third of the worker's CPU) —
    but a batch claim's read on a connection that prepares its statements, whose rows agora
    reads itself in the binary protocol (``queries.next_due_probed(…, as_json=False)``)."""
    upserts_on_duplicate_key: ClassVar[bool] = False
    """``INSERT … ON DUPLICATE KEY UPDATE`` (MySQL/MariaDB)."""
    driver_placeholder: ClassVar[str] = "%s"
    """The placeholder of SQL sent on the driver's cursor (``run_on_driver``)."""

    # --- sessions, locks, tenants ---------------------------------------------------------
    has_row_level_security: ClassVar[bool] = False
    """Row-level security, roles and grants (PostgreSQL): tenants isolated in one database."""
    keyed_advisory_locks: ClassVar[bool] = False
    """Advisory locks on a number (``pg_advisory_lock``, ``pg_advisory_xact_lock``)."""
    named_locks: ClassVar[bool] = False
    """Named session locks (``GET_LOCK``/``RELEASE_LOCK``: MySQL/MariaDB)."""
    single_writer: ClassVar[bool] = False
    """One writer at a time for the whole database (SQLite): its write lock is every lock, and
    the server cannot tell who holds it."""
    may_be_galera: ClassVar[bool] = False
    """The server may be a Galera cluster node (MariaDB Galera, Percona XtraDB Cluster)."""
    listens: ClassVar[bool] = False
    """``LISTEN``/``NOTIFY`` (PostgreSQL): a write wakes waiting workers on commit (``wakeups``);
    elsewhere they poll."""
    server_version_sql: ClassVar[str] = "SELECT VERSION()"

    # --- DDL ------------------------------------------------------------------------------
    transactional_ddl: ClassVar[bool] = True
    """DDL runs inside the caller's transaction (MySQL commits each DDL statement)."""
    has_table_options: ClassVar[bool] = False
    """Tables have an engine and a collation of their own (MySQL/MariaDB ``ENGINE``,
    ``COLLATE``): ``schema.apply_mysql_options`` before compiling, ``db check`` compares them."""
    create_index_if_not_exists: ClassVar[bool] = True
    """``CREATE INDEX IF NOT EXISTS`` (MySQL has none)."""
    adds_foreign_keys: ClassVar[bool] = True
    """``ALTER TABLE … ADD CONSTRAINT … FOREIGN KEY`` (SQLite cannot)."""
    alters_column_types: ClassVar[bool] = True
    """A column's type can be changed in place (SQLite cannot)."""
    widens_by_modify: ClassVar[bool] = False
    """A column is widened by restating it (``MODIFY COLUMN``: MySQL), else ``ALTER … TYPE``."""
    compacts_on_driver: ClassVar[bool] = False
    """``compaction_statements`` run on the driver's connection outside any transaction
    (SQLite's ``VACUUM`` refuses a transaction, and the engine begins one for every statement)."""
    row_estimates_sql: ClassVar[str] = (
        "SELECT name, 0 FROM sqlite_master WHERE type = 'table' AND name LIKE :p ESCAPE '!'"
    )
    """The catalog's row estimate of each table named ``LIKE :p`` (``live_schema.row_counts``)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        impl = cls()
        for key in (cls.name, *cls.aliases):
            _REGISTRY[key] = impl

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"

    # --- expressions ----------------------------------------------------------------------
    int_div_operator: ClassVar[str] = "/"

    def day_bucket(self, column: Any) -> ColumnElement[Any]:
        """``column`` (epoch ms) as a UTC day number, the divisor inlined as a literal."""
        # lazy: the engine and the tenant setting import this module; SQLAlchemy loads on use
        from sqlalchemy import BigInteger, literal_column

        divisor = literal_column(str(DAY_MS), BigInteger())
        return column.op(self.int_div_operator, return_type=BigInteger())(divisor)  # type: ignore[no-any-return]

    def driver_sql(self, sql: str) -> str:
        """``sql`` written with ``%s`` placeholders, in this driver's placeholder style."""
        return (
            sql if self.driver_placeholder == "%s" else sql.replace("%s", self.driver_placeholder)
        )

    # --- questions to the server ----------------------------------------------------------
    def supports_skip_locked(self, conn: Connection) -> bool:
        """Whether ``FOR UPDATE SKIP LOCKED`` works on ``conn``'s server."""
        return self.always_skips_locked

    def replay_lag_s(self, conn: Connection) -> float | None:
        """How many seconds ``conn``'s server is behind its primary in applying its changes:
        ``None`` when it is no replica (a primary, SQLite) or cannot tell; 0 when it has
        applied everything it received."""
        return None

    # --- statements -----------------------------------------------------------------------
    def sqlalchemy_dialect(self) -> SADialect:
        """A SQLAlchemy dialect object for compiling statements without a database."""
        raise UnknownDialect(_UNKNOWN.format(self.name))

    def drop_index_sql(self, prep: Any, index: str, table: str) -> str:
        return f"DROP INDEX IF EXISTS {prep.quote(index)}"

    def compaction_statements(self, tables: Sequence[str]) -> list[str]:
        """What rewrites ``tables`` so that old row versions leave the files (``db seal``)."""
        return []

    def set_lock_bound(self, conn: Connection, seconds: float) -> Callable[[], None]:
        """Bound the session's lock waits to ``seconds``; return what puts the old bound back."""
        return lambda: None


class PostgresDialect(Dialect):
    name = "postgresql"
    aliases = ("postgres",)
    label = "PostgreSQL"
    asks_collation = True
    always_skips_locked = True
    binds_arrays = True
    has_percentiles = True
    orders_by_whole_index_key = True
    has_pg_catalog = True
    has_pg_extras = True
    aborts_on_error = True
    claims_in_one_update = True
    pipelines = True
    autocommit_worker_steps = True
    drives_worker_transactions = True
    has_row_level_security = True
    keyed_advisory_locks = True
    listens = True
    server_version_sql = "SHOW server_version"
    row_estimates_sql = (
        "SELECT c.relname, c.reltuples::bigint FROM pg_catalog.pg_class c "
        "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') "
        "AND c.relname LIKE :p ESCAPE '!'"
    )

    # NULL on a primary. A standby that has replayed all the WAL it received is not behind,
    # however old its last replayed commit is (an idle primary sends nothing to replay);
    # otherwise the lag is the age of the last commit it replayed — unless the replay reaches,
    # within ``REPLAY_CATCH_UP_S``, what had been received when asked (``replay_lag_s``).
    replay_lag_sql: ClassVar[str] = (
        "SELECT CASE WHEN NOT pg_is_in_recovery() THEN NULL "
        "WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0 "
        "ELSE EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp()) END, "
        "pg_last_wal_receive_lsn()::text"
    )
    replayed_up_to_sql: ClassVar[str] = "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn"
    REPLAY_CATCH_UP_S: ClassVar[float] = 0.25

    def replay_lag_s(self, conn: Connection) -> float | None:
        """A hot standby's replay lag (``pg_last_xact_replay_timestamp``); ``None`` on a
        primary.

        The received and the replayed WAL differ for a moment after any record arrives — an
        idle primary's periodic snapshot of running transactions, a checkpoint — while the last
        replayed commit may be seconds old: that is no lag. So when they differ, the replay is
        given ``REPLAY_CATCH_UP_S`` (polled every 20 ms) to reach what had been received when
        asked; if it does, the standby was not behind (0). A paused or slow replay does not,
        and its lag is the age of the last commit it replayed.

        While it waits, ``conn`` holds no transaction (rolled back before each pause): an idle
        transaction keeps its snapshot's xmin, and the replay of a cleanup record (a prune, a
        vacuum) that conflicts with it waits for it — up to ``max_standby_streaming_delay`` —
        so the wait would hold back the very replay it waits for.
        """
        value, received = conn.exec_driver_sql(self.replay_lag_sql).one()
        if value is None:
            return None
        lag = max(0.0, float(value))
        if lag == 0.0 or received is None:  # None: nothing streamed (replay from an archive)
            return lag
        deadline = time.monotonic() + self.REPLAY_CATCH_UP_S
        while True:
            conn.rollback()
            if time.monotonic() >= deadline:
                return lag
            time.sleep(0.02)
            if conn.exec_driver_sql(self.replayed_up_to_sql, (received,)).scalar():
                conn.rollback()
                return 0.0

    def sqlalchemy_dialect(self) -> SADialect:
        # lazy: the engine and the tenant setting import this module; SQLAlchemy loads on use
        from sqlalchemy.dialects.postgresql import psycopg

        return psycopg.dialect()  # type: ignore[no-untyped-call]

    def compaction_statements(self, tables: Sequence[str]) -> list[str]:
        return [f'VACUUM (FULL) "{t}"' for t in tables]

    def set_lock_bound(self, conn: Connection, seconds: float) -> Callable[[], None]:
        # Transaction-local (``SET LOCAL``), set again as each transaction on ``conn`` begins:
        # behind a transaction pooler the next transaction may run on another server connection,
        # and a session setting would stay behind on this one for another client.
        # lazy: the engine and the tenant setting import this module; SQLAlchemy loads on use
        from sqlalchemy import event, text

        value = f"{max(1, round(seconds * 1000))}ms"

        def on_begin(c: Connection) -> None:
            cursor = c.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
            try:
                cursor.execute("SELECT set_config('lock_timeout', %s, true)", (value,))
            finally:
                cursor.close()

        event.listen(conn, "begin", on_begin)
        if conn.in_transaction():
            conn.execute(text("SELECT set_config('lock_timeout', :v, true)"), {"v": value})

        def restore_pg() -> None:
            event.remove(conn, "begin", on_begin)

        return restore_pg


class MySQLDialect(Dialect):
    name = "mysql"
    aliases = ("mariadb",)
    label = "MySQL/MariaDB"
    pads_spaces = True
    sized_text = True
    loose_index_scan = True
    unions_derived_tables = False
    locks_next_key = True
    updates_read_own_table = False
    updates_through_joins = True
    upserts_on_duplicate_key = True
    reads_due_as_json = True
    forces_discovery_index = True
    drives_worker_transactions = True
    merges_commits = True
    may_be_galera = True
    named_locks = True
    transactional_ddl = False
    has_table_options = True
    create_index_if_not_exists = False
    widens_by_modify = True
    int_div_operator = "DIV"
    row_estimates_sql = (
        "SELECT table_name, table_rows FROM information_schema.tables "
        "WHERE table_schema = DATABASE() AND table_name LIKE :p ESCAPE '!'"
    )

    def supports_skip_locked(self, conn: Connection) -> bool:
        """MySQL >= 8.0.1, MariaDB >= 10.6."""
        text = str(conn.exec_driver_sql(self.server_version_sql).scalar())
        nums = [int(x) for x in re.findall(r"\d+", text)[:3]] + [0, 0, 0]
        major, minor, patch = nums[:3]
        if "mariadb" in text.lower() or getattr(conn.dialect, "is_mariadb", False):
            return (major, minor) >= (10, 6)
        return (major, minor, patch) >= (8, 0, 1)

    # SHOW REPLICA STATUS: MySQL 8.0.22+, MariaDB 10.5.1+; SHOW SLAVE STATUS before them.
    replica_status_sql: ClassVar[tuple[str, ...]] = ("SHOW REPLICA STATUS", "SHOW SLAVE STATUS")
    _SYNTAX_ERROR: ClassVar[int] = 1064  # an older server: try the next spelling
    _NO_PRIVILEGE: ClassVar[int] = 1227  # needs REPLICATION CLIENT (MariaDB: REPLICA MONITOR)

    def replay_lag_s(self, conn: Connection) -> float | None:
        """A replica's ``Seconds_Behind_Source`` (``Seconds_Behind_Master``): ``None`` on a
        server that replicates from nothing, with replication stopped (the server says NULL),
        or for a login without the privilege to ask (REPLICATION CLIENT, MariaDB's REPLICA
        MONITOR)."""
        # lazy: the engine and the tenant setting import this module; SQLAlchemy loads on use
        from sqlalchemy.exc import DBAPIError

        for statement in self.replica_status_sql:
            try:
                row = conn.exec_driver_sql(statement).mappings().first()
            except DBAPIError as exc:
                args = getattr(exc.orig, "args", ())
                code = args[0] if args and isinstance(args[0], int) else None
                if code == self._SYNTAX_ERROR:
                    continue
                if code == self._NO_PRIVILEGE:
                    return None
                raise
            if row is None:
                return None
            value = row.get("Seconds_Behind_Source", row.get("Seconds_Behind_Master"))
            return None if value is None else float(value)
        return None

    def sqlalchemy_dialect(self) -> SADialect:
        # lazy: the engine and the tenant setting import this module; SQLAlchemy loads on use
        from sqlalchemy.dialects.mysql import pymysql

        return pymysql.dialect()

    def drop_index_sql(self, prep: Any, index: str, table: str) -> str:
        return f"DROP INDEX {prep.quote(index)} ON {prep.quote(table)}"

    def compaction_statements(self, tables: Sequence[str]) -> list[str]:
        return [f"OPTIMIZE TABLE `{t}`" for t in tables]

    def set_lock_bound(self, conn: Connection, seconds: float) -> Callable[[], None]:
        # lazy: the engine and the tenant setting import this module; SQLAlchemy loads on use
        from sqlalchemy import text

        # One round trip each way: the old values wait in user variables of the session.
        conn.execute(
            text(
                "SET @agora_lwt = @@SESSION.lock_wait_timeout, "
                "@agora_ilwt = @@SESSION.innodb_lock_wait_timeout, "
                "SESSION lock_wait_timeout = :n, SESSION innodb_lock_wait_timeout = :n"
            ),
            {"n": max(1, math.ceil(seconds))},
        )
        conn.commit()

        def restore_mysql() -> None:
            if conn.in_transaction():
                conn.rollback()
            conn.execute(
                text(
                    "SET SESSION lock_wait_timeout = @agora_lwt, "
                    "SESSION innodb_lock_wait_timeout = @agora_ilwt, @agora_lwt = NULL, "
                    "@agora_ilwt = NULL"
                )
            )
            conn.commit()

        return restore_mysql


class SQLiteDialect(Dialect):
    name = "sqlite"
    label = "SQLite"
    prefix_by_range = True
    types_are_affinities = True
    locks_rows = False
    deletes_through_joins = False
    single_writer = True
    adds_foreign_keys = False
    alters_column_types = False
    compacts_on_driver = True
    driver_placeholder = "?"
    server_version_sql = "SELECT sqlite_version()"

    def sqlalchemy_dialect(self) -> SADialect:
        # lazy: the engine and the tenant setting import this module; SQLAlchemy loads on use
        from sqlalchemy.dialects.sqlite import pysqlite

        return pysqlite.dialect()

    def compaction_statements(self, tables: Sequence[str]) -> list[str]:
        return ["VACUUM", "PRAGMA wal_checkpoint(TRUNCATE)"]

    def set_lock_bound(self, conn: Connection, seconds: float) -> Callable[[], None]:
        # Through the driver: a statement through SQLAlchemy would BEGIN IMMEDIATE first, which
        # is itself the wait we are bounding.
        raw = conn.connection.driver_connection
        assert raw is not None
        old = int(raw.execute("PRAGMA busy_timeout").fetchone()[0])
        raw.execute(f"PRAGMA busy_timeout = {max(1, round(seconds * 1000))}")

        def restore_sqlite() -> None:
            raw.execute(f"PRAGMA busy_timeout = {old}")

        return restore_sqlite


_REGISTRY[Dialect.name] = Dialect()

DIALECT_CHOICES = ("postgresql", "postgres", "mysql", "mariadb", "sqlite")
"""The names ``db sql --dialect`` accepts (each resolves through ``dialect_of``)."""
RLS_DIALECT = PostgresDialect.name
"""The dialect row-level security runs on (``agora db rls``)."""


def dialect_of(bind: Engine | Connection | SADialect | Dialect | str) -> Dialect:
    """The impl for ``bind``: an engine, a connection, a SQLAlchemy dialect or a name (MariaDB
    is MySQL). Raises ``UnknownDialect`` for any other name."""
    if isinstance(bind, Dialect):
        return bind
    if isinstance(bind, str):
        name = bind
    else:
        carrier: Any = bind  # an engine or connection carries a SQLAlchemy dialect
        name = str(getattr(carrier, "dialect", carrier).name)
    found = _REGISTRY.get(name)
    if found is None:
        raise UnknownDialect(_UNKNOWN.format(name))
    return found


def index_hint(q: Select[Any], table: FromClause, hint: str) -> Select[Any]:
    """``q`` with the index hint ``hint`` on ``table`` where the dialect takes one (MySQL and
    MariaDB: SQLAlchemy renders a hint only for the dialect it names); others ignore it."""
    for name in (MySQLDialect.name, *MySQLDialect.aliases):
        q = q.with_hint(table, hint, dialect_name=name)
    return q
