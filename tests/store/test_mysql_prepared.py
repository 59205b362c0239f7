"""MariaDB: a held worker connection's statements prepared on the server (issue 29).

``_mysql_prepared`` speaks the binary protocol (``COM_STMT_PREPARE``/``EXECUTE``/``CLOSE``) on
PyMySQL's connection. What it returns must be exactly what PyMySQL's text protocol returns for
the same statement and values; what it cannot send or read goes as text; its statements are
bounded a connection, closed when the connection goes back to its pool, and forgotten with a
lost connection. Real servers; on PostgreSQL and SQLite a held store prepares nothing of this.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from helpers import end_other_sessions
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store.test_held_connection import LEASE_MS, queue, states, succeeded, with_query

from agora_cli.store import _mysql_prepared
from agora_cli.store._clock import ManualClock
from agora_cli.store._engine import open_engine, prepares_statements
from agora_cli.store._errors import InvalidInput
from agora_cli.store._mysql_prepared import CACHE_MAX, forget, prepared_count, run_prepared
from agora_cli.store._proposals import ActionProposalStore


def _mariadb(dialect: str, db_url: str) -> Any:
    if dialect != "mysql":
        pytest.skip("MariaDB's prepared statements")
    engine = open_engine(db_url)
    if not getattr(engine.dialect, "is_mariadb", False):
        engine.dispose()
        pytest.skip("MySQL: the COMMIT goes as a second statement, which nothing prepares")
    return engine


@pytest.fixture
def raw(dialect: str, db_url: str) -> Any:
    """A PyMySQL connection of the MariaDB under test, its statements forgotten after."""
    engine = _mariadb(dialect, db_url)
    fairy = engine.raw_connection()
    dbapi = fairy.driver_connection
    yield dbapi
    forget(dbapi)
    fairy.close()
    engine.dispose()


def _text(dbapi: Any, sql: str, params: tuple[Any, ...]) -> tuple[int, list[tuple[Any, ...]]]:
    with dbapi.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount, list(cursor.fetchall())


def _session_status(dbapi: Any, name: str) -> int:
    with dbapi.cursor() as cursor:
        cursor.execute("SHOW SESSION STATUS LIKE %s", (name,))
        return int(cursor.fetchone()[1])


HOSTILE = [
    "",
    "plain",
    'it\'s "quoted" \\ back\\slashed',
    "nul \x00 ctrl \x1a \n\r\t",
    "é ü 中文 🙂",
    "x" * 300,  # a two-byte length
    "y" * 70_000,  # a three-byte length
    "%s ? %% :1",
]


def test_values_come_back_exactly_as_the_text_protocol_returns_them(raw: Any) -> None:
    """Strings (quotes, backslashes, NUL, multi-byte, 300 and 70,000 characters), integers at
    both ends of 64 bits, and NULL: the prepared run's rows are the text run's, value for
    value, type for type."""
    ints = [0, 1, -1, 2**63 - 1, -(2**63), 10**12]
    strings = ["CAST(%s AS CHAR)"] * (len(HOSTILE) + 1)
    sql = "SELECT " + ", ".join([*strings, *["CAST(%s AS SIGNED)"] * len(ints)])
    params = (*HOSTILE, None, *ints)
    assert run_prepared(raw, sql, params, 1) is None  # its first run: counted, sent as text
    got = run_prepared(raw, sql, params, 1)
    assert got is not None and prepared_count(raw) == 1
    want = _text(raw, sql, params)
    assert got == want
    assert [type(v) for v in got[1][0]] == [type(v) for v in want[1][0]]
    assert got[1][0] == params


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.text(), st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)))
def test_any_string_and_integer_come_back_as_sent(raw: Any, text: str, number: Any) -> None:
    sql = "SELECT CAST(%s AS CHAR), CAST(%s AS SIGNED), CONCAT('[', %s, ']')"
    params = (text, number, text)
    try:
        want = _text(raw, sql, params)
    except UnicodeEncodeError:  # a lone surrogate: no driver sends it; the prepared path neither
        with pytest.raises(UnicodeEncodeError):
            run_prepared(raw, sql, params, 0)
        return
    assert run_prepared(raw, sql, params, 0) == want


def test_a_tables_columns_read_back_as_pymysql_reads_them(raw: Any) -> None:
    """Integer columns of every width, signed and unsigned, strings, JSON and a binary column
    (``bytes``): the same rows prepared as text."""
    with raw.cursor() as cursor:
        cursor.execute(
            "CREATE TEMPORARY TABLE kinds (a TINYINT, b TINYINT UNSIGNED, c SMALLINT, "
            "d MEDIUMINT UNSIGNED, e INT, f BIGINT UNSIGNED, g VARCHAR(20), h TEXT, "
            "i VARBINARY(8), j JSON, k CHAR(3))"
        )
        cursor.execute(
            "INSERT INTO kinds VALUES (-128, 255, -32768, 16777215, -2147483648, "
            "18446744073709551615, 'é', 'long\\ntext', x'00ff10', '{\"a\": [1]}', 'abc'), "
            "(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
        )
    sql = "SELECT * FROM kinds WHERE %s = %s ORDER BY a IS NULL"
    got = run_prepared(raw, sql, (1, 1), 0)
    want = _text(raw, sql, (1, 1))
    assert got == want and got is not None
    assert got[1][0][8] == b"\x00\xff\x10" and got[1][0][5] == 2**64 - 1


def test_what_it_cannot_send_or_read_goes_as_text(raw: Any) -> None:
    """A ``bool``, a float, a ``Decimal``, an integer past 64 bits: sent as text (``None``),
    nothing prepared. A statement returning a DECIMAL or a DATETIME column is not kept prepared
    and never asked again; a text holding a ``?`` of its own is never prepared."""
    for value in (True, 1.5, Decimal("1.5"), 2**63, b"bytes"):
        assert run_prepared(raw, "SELECT CAST(%s AS CHAR)", (value,), 0) is None
    assert prepared_count(raw) == 0
    for sql in (
        "SELECT CAST(%s AS DECIMAL(10, 2))",
        "SELECT NOW() + INTERVAL %s SECOND",
    ):
        before = _session_status(raw, "Com_stmt_prepare")
        assert run_prepared(raw, sql, (1,), 0) is None
        assert run_prepared(raw, sql, (1,), 0) is None
        assert _session_status(raw, "Com_stmt_prepare") == before + 1  # asked once only
    assert run_prepared(raw, "SELECT %s, '?'", (1,), 0) is None
    assert prepared_count(raw) == 0
    # a column whose type is its parameter's (unknown when prepared) is read as it comes
    assert run_prepared(raw, "SELECT %s", ("é",), 0) == _text(raw, "SELECT %s", ("é",))
    assert run_prepared(raw, "SELECT %s", (7,), 0) == _text(raw, "SELECT %s", (7,))


def test_a_server_error_is_pymysqls_own_and_the_connection_goes_on(raw: Any) -> None:
    import pymysql

    sql = "SELECT 1 FROM no_such_table WHERE 1 = %s"
    with pytest.raises(pymysql.err.ProgrammingError) as text_error:
        _text(raw, sql, (1,))
    assert run_prepared(raw, sql, (1,), 0) is None  # the server would not prepare it
    signal = (
        "BEGIN NOT ATOMIC IF %s THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'no'; END IF; END"
    )
    assert run_prepared(raw, signal, (0,), 0) == (0, [])
    with pytest.raises(pymysql.err.OperationalError) as signalled:
        run_prepared(raw, signal, (1,), 0)
    assert signalled.value.args == (1644, "no")
    assert text_error.value.args[0] == 1146
    assert run_prepared(raw, "SELECT CONCAT(%s)", ("after",), 0) == (1, [("after",)])


def test_the_statements_a_connection_keeps_are_bounded(raw: Any) -> None:
    """Past ``CACHE_MAX`` statements the least recently used is closed on the server."""
    closed = _session_status(raw, "Com_stmt_close")
    for n in range(CACHE_MAX + 5):
        assert run_prepared(raw, f"SELECT CAST(%s AS SIGNED) + {n}", (1,), 0) == (1, [(1 + n,)])
    assert prepared_count(raw) == CACHE_MAX
    assert _session_status(raw, "Com_stmt_close") == closed + 5
    # the most recent are still prepared: their runs prepare nothing more
    prepared = _session_status(raw, "Com_stmt_prepare")
    again = f"SELECT CAST(%s AS SIGNED) + {CACHE_MAX + 4}"
    assert run_prepared(raw, again, (2,), 0) == (1, [(CACHE_MAX + 6,)])
    assert _session_status(raw, "Com_stmt_prepare") == prepared


def test_a_statement_the_server_forgot_runs_as_text_then_is_prepared_again(raw: Any) -> None:
    sql = "SELECT CAST(%s AS SIGNED) * 2"
    assert run_prepared(raw, sql, (2,), 0) == (1, [(4,)])
    statements = _mysql_prepared._caches[raw]
    _mysql_prepared._close(raw, statements.prepared[sql].stmt_id)  # behind the cache's back
    assert run_prepared(raw, sql, (3,), 0) is None  # ER_UNKNOWN_STMT_HANDLER: dropped
    assert prepared_count(raw) == 0
    assert run_prepared(raw, sql, (5,), 0) == (1, [(10,)])


def test_a_held_store_prepares_on_mariadb_only_and_closes_them_when_given_back(
    dialect: str, db_url: str, clock: ManualClock
) -> None:
    """Every dialect: a worker's held store prepares its statements on MariaDB (from their
    second run; ``?prepare_threshold=none`` never), nowhere else; given back to the pool, the
    connection's statements are closed on the server; the queue's outcomes are the same."""
    engine = open_engine(db_url, pool_size=1)
    try:
        ids = queue(engine, clock, 6)
        mariadb = bool(getattr(engine.dialect, "is_mariadb", False))
        with ActionProposalStore(engine, clock, hold_connection=True) as store:
            for _ in range(2):
                batch = store.claim_next("w1", LEASE_MS, limit=2)
                assert [r.outcome for r in store.settle_many(succeeded(batch))] == ["settled"] * 2
            held: Any = store._held
            assert prepares_statements(held) == mariadb
            dbapi = held.connection.driver_connection
            kept = prepared_count(dbapi)
            assert (kept > 0) == mariadb
            if mariadb:
                closed = _session_status(dbapi, "Com_stmt_close")
        if mariadb:
            assert prepared_count(dbapi) == 0
            with engine.connect() as conn:
                assert conn.connection.driver_connection is dbapi  # the pool's one connection
                assert _session_status(dbapi, "Com_stmt_close") == closed + kept
        seen = states(engine)
        assert [seen[pid] for pid in ids] == ["succeeded"] * 4 + ["queued"] * 2
    finally:
        engine.dispose()
    if dialect != "mysql":
        return
    engine = open_engine(with_query(db_url, "prepare_threshold=none"), pool_size=1)
    try:
        with ActionProposalStore(engine, clock, hold_connection=True) as store:
            for _ in range(2):
                batch = store.claim_next("w1", LEASE_MS, limit=1)
                assert [r.outcome for r in store.settle_many(succeeded(batch))] == ["settled"]
            held = store._held
            assert not prepares_statements(held)
            assert prepared_count(held.connection.driver_connection) == 0
    finally:
        engine.dispose()


def test_a_mysql_url_takes_prepare_threshold_and_checks_it(dialect: str, db_url: str) -> None:
    if dialect != "mysql":
        pytest.skip("a MySQL URL's prepare_threshold")
    with pytest.raises(InvalidInput, match="prepare_threshold must be a whole number"):
        open_engine(with_query(db_url, "prepare_threshold=-1"))
    open_engine(with_query(db_url, "prepare_threshold=3")).dispose()


def test_a_held_connection_lost_mid_queue_prepares_again_on_the_new_one(
    dialect: str, db_url: str, clock: ManualClock
) -> None:
    """The server ends the held connection after its statements were prepared: the next step
    reconnects, runs as text and prepares again on the new connection; every job settles once."""
    engine = _mariadb(dialect, db_url)
    try:
        ids = queue(engine, clock, 8)
        engine.dispose()
        with ActionProposalStore(engine, clock, hold_connection=True) as store:
            done: list[str] = []
            for _ in range(4):
                batch = store.claim_next("w1", LEASE_MS, limit=2)
                first: Any = store._held
                before = first.connection.driver_connection
                assert [r.outcome for r in store.settle_many(succeeded(batch))] == ["settled"] * 2
                done += [c.work.id for c in batch if c.work]
                if len(done) == 4:
                    assert prepared_count(before) > 0
                    assert end_other_sessions(dialect, db_url) >= 1
            after = store._held.connection.driver_connection  # type: ignore[union-attr]
            assert after is not before or prepared_count(after) > 0
        assert sorted(done) == sorted(ids)
        assert set(states(engine).values()) == {"succeeded"}
    finally:
        engine.dispose()


def test_rows_of_every_null_pattern_read_as_the_text_protocol_reads_them(raw: Any) -> None:
    """A row's parser is made for its null bitmap (``_parser``) and kept for up to 64 bitmaps:
    256 rows of 256 patterns over 8 nullable columns of both kinds, each across a null
    bitmap's byte boundary, come back as the text protocol reads them (each a second time
    from the kept parsers, the rest made again)."""
    with raw.cursor() as cursor:
        cursor.execute(
            "CREATE TEMPORARY TABLE patterns (n INT PRIMARY KEY, a VARCHAR(9), b BIGINT, "
            "c TEXT, d INT UNSIGNED, e VARCHAR(500), f SMALLINT, g VARBINARY(4), h BIGINT)"
        )
        rows = []
        for n in range(256):
            values = [f"a{n}", -n, "c" * n, n, "é" * (n + 200), n - 128, bytes([n]), 2**40 + n]
            rows.append((n, *[None if n >> i & 1 else v for i, v in enumerate(values)]))
        cursor.executemany("INSERT INTO patterns VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)", rows)
    sql = "SELECT * FROM patterns WHERE n >= %s ORDER BY n"
    want = _text(raw, sql, (0,))
    assert want[1] == rows
    for _ in range(2):
        assert run_prepared(raw, sql, (0,), 0) == want


def test_a_row_past_16_mib_comes_in_several_packets_and_reads_whole(raw: Any) -> None:
    """A row of 16 MiB or more is sent as several packets (the last one shorter): read whole,
    and the connection goes on in sequence after it."""
    import pymysql

    with raw.cursor() as cursor:
        cursor.execute("SELECT @@global.max_allowed_packet")
        was = int(cursor.fetchone()[0])
        if was < 64 << 20:
            try:
                cursor.execute("SET GLOBAL max_allowed_packet = %s", (64 << 20,))
            except pymysql.err.MySQLError:
                pytest.skip("max_allowed_packet is below 64 MiB and this login cannot raise it")
    try:
        big = pymysql.connect(
            host=raw.host, port=raw.port, user=raw.user, password=raw.password, charset="utf8mb4"
        )
        try:
            sql = "SELECT REPEAT(%s, %s), %s"
            for size in ((16 << 20) - 10, 17 << 20, (32 << 20) + 5):
                got = run_prepared(big, sql, ("x", size, 7), 0)
                assert got is not None
                assert got[0] == 1 and len(got[1][0][0]) == size and got[1][0][1:] == (7,)
                assert set(got[1][0][0]) == {"x"}
            assert run_prepared(big, "SELECT CONCAT(%s)", ("after",), 0) == (1, [("after",)])
        finally:
            forget(big)
            big.close()
    finally:
        if was < 64 << 20:
            with raw.cursor() as cursor:
                cursor.execute("SET GLOBAL max_allowed_packet = %s", (was,))


def test_a_connection_lost_mid_rows_is_pymysqls_lost_connection(raw: Any) -> None:
    """The connection goes down while its rows come (each large enough to be sent at once, the
    server sleeping between them; the socket shut down under the reader): PyMySQL's own
    ``OperationalError`` 2013, and the connection closed, as PyMySQL's reader leaves it."""
    import socket
    import threading

    import pymysql

    sql = "SELECT REPEAT('r', 100000), SLEEP(%s) FROM seq_1_to_20"
    assert run_prepared(raw, sql, ("0",), 0) is not None  # prepared, runs whole
    sock = raw._sock
    timer = threading.Timer(1.0, lambda: sock.shutdown(socket.SHUT_RDWR))
    timer.start()
    try:
        with pytest.raises(pymysql.err.OperationalError) as lost:
            run_prepared(raw, sql, ("0.2",), 0)
    finally:
        timer.cancel()
        timer.join()
    assert lost.value.args[0] == 2013
    assert raw._sock is None
