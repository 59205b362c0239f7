"""MariaDB: a held worker connection's statements prepared on the server (the binary protocol).

A worker sends the same few statements in a loop: the claim's read, the claim's ``UPDATE``, the
settle's fenced ``UPDATE`` (each inside its compound statement with the step's COMMIT). Sent as
text, each is parsed again every time, its values among the text (a batch of 10 names 30-40 of
them); the server's parse was 3x the bare loop's a job (issue 29). Prepared once on the
connection (``COM_STMT_PREPARE``) and then executed with its values in the binary protocol
(``COM_STMT_EXECUTE``), the statement is neither parsed nor its values escaped: PyMySQL has no
prepared statements, so this module speaks those two commands on its connection, as
``_engine._set_multi_statements`` speaks ``COM_SET_OPTION``.

What runs prepared (``run_prepared``; else ``None``, and the caller sends the text as before):
- a statement text (``%s`` placeholders, no ``?`` or ``%%`` of its own) from the second time it
  runs on the connection (``threshold``: the URL's ``?prepare_threshold=N``, as psycopg counts
  on PostgreSQL; ``none`` turns it off), up to ``CACHE_MAX`` of them a connection, the least
  recently used closed (``COM_STMT_CLOSE``) beyond that;
- with values that are ``str``, ``int`` (a signed 64-bit one; never a ``bool``) or ``None``;
- returning columns of integer or string types only (what the worker's reads return), read
  back as PyMySQL's text protocol would (an integer, a ``str`` in the connection's encoding, or
  ``bytes`` for a binary column). The rows' packets are read here from PyMySQL's socket file,
  with its checks (``_read_rows``), each row by a parser made for its null bitmap: cheaper than
  the text protocol's, so that the worker's batch read returns plain columns on this connection
  (``queries.next_due_probed``), not one JSON array a row.

A statement the server will not prepare, or whose values or columns are of another kind, runs as
text. A prepared statement the server has forgotten (``ER_UNKNOWN_STMT_HANDLER``) or must prepare
again (``ER_NEED_REPREPARE``, after DDL) is dropped and that run goes as text. The cache lives
with the driver's connection object and is checked against the server's connection id: a
reconnect starts it empty. ``forget`` closes a connection's statements (the pool's check-in of a
held worker connection).

Safe behind ProxySQL or MaxScale, which track prepared statements themselves; a URL that says
``?prepare_threshold=none`` keeps every statement text.
"""

from __future__ import annotations

import struct
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

CACHE_MAX = 32  # prepared statements a connection keeps
_SEEN_MAX = 256  # statement texts counted a connection before they may be prepared

_COM_STMT_PREPARE, _COM_STMT_EXECUTE, _COM_STMT_CLOSE = 0x16, 0x17, 0x19
_ER_UNKNOWN_STMT_HANDLER, _ER_NEED_REPREPARE = 1243, 1615
_SERVER_MORE_RESULTS_EXISTS = 0x08
_BINARY_CHARSET = 63
_INT_TYPES = {1: 1, 2: 2, 3: 4, 8: 8, 9: 4}  # TINY, SHORT, LONG, LONGLONG, INT24: bytes sent
_STRING_TYPES = frozenset({15, 245, 247, 248, 249, 250, 251, 252, 253, 254})  # VARCHAR … STRING
_UNSIGNED_FLAG = 32
_INT_FORMATS = {
    (1, False): struct.Struct("<b"),
    (1, True): struct.Struct("<B"),
    (2, False): struct.Struct("<h"),
    (2, True): struct.Struct("<H"),
    (4, False): struct.Struct("<i"),
    (4, True): struct.Struct("<I"),
    (8, False): struct.Struct("<q"),
    (8, True): struct.Struct("<Q"),
}
_LONGLONG = _INT_FORMATS[(8, False)]
_HEAD = struct.Struct("<IBI")  # statement id, flags (no cursor), iteration count (1)
_TYPE_NULL, _TYPE_LONGLONG, _TYPE_STRING = b"\x06\x00", b"\x08\x00", b"\xfd\x00"
_NOT_PREPARED = -1  # a text the server would not prepare here: ``_Statements.seen``'s mark


_Reader = tuple[struct.Struct | None, bool]
"""How a column is read back: its integer's format (``None``: a length-encoded string), and
whether that string stays ``bytes`` (a binary column)."""
_WIDE_LENGTHS = {0xFC: 2, 0xFD: 3, 0xFE: 8}  # a length-encoded length's bytes, by its first


class _Prepared:
    __slots__ = (
        "described",
        "encoding",
        "head",
        "params",
        "parsers",
        "readers",
        "stmt_id",
        "width",
    )

    def __init__(self, stmt_id: int, params: int) -> None:
        self.stmt_id, self.params = stmt_id, params
        self.head = _HEAD.pack(stmt_id, 0, 1)
        # the column definitions of its last result, as sent, and how each column is read
        self.described: list[bytes] = []
        self.readers: list[_Reader] = []
        self.encoding = ""  # the connection's, when ``readers`` were made
        self.width = 0  # the rows' null bitmap's bytes
        # a row parser by null bitmap (``_parser``)
        self.parsers: dict[bytes, Callable[[bytes], tuple[Any, ...]]] = {}


class _Statements:
    """One connection's prepared statements (by their ``%s`` text) and the texts seen."""

    __slots__ = ("__weakref__", "full", "prepared", "seen", "thread_id")

    def __init__(self, thread_id: Any) -> None:
        self.thread_id = thread_id
        self.prepared: OrderedDict[str, _Prepared] = OrderedDict()
        self.seen: dict[str, int] = {}
        self.full = False  # the server refused to prepare more (max_prepared_stmt_count)


_caches: weakref.WeakKeyDictionary[Any, _Statements] = weakref.WeakKeyDictionary()


def run_prepared(
    dbapi_conn: Any, sql: str, params: tuple[Any, ...], threshold: int
) -> tuple[int, list[tuple[Any, ...]]] | None:
    """Run ``sql`` (``%s`` placeholders) with ``params`` prepared on ``dbapi_conn``, a PyMySQL
    connection: its row count (rows changed, or rows returned) and its rows. ``None``: send it as
    text (see the module). Errors are PyMySQL's own, as its cursor raises them."""
    bound = _bound(params, dbapi_conn.encoding)
    if bound is None:
        return None
    statements = _caches.get(dbapi_conn)
    thread_id = getattr(dbapi_conn, "server_thread_id", None)
    if statements is None or statements.thread_id != thread_id:
        statements = _caches[dbapi_conn] = _Statements(thread_id)
    prepared = statements.prepared.get(sql)
    if prepared is None:
        prepared = _prepare_when_due(dbapi_conn, statements, sql, threshold)
        if prepared is None:
            return None
    else:
        statements.prepared.move_to_end(sql)
    if prepared.params != len(params):
        return None  # not this statement's values: the text path raises the driver's error
    try:
        return _execute(dbapi_conn, prepared, bound)
    except _Unreadable:  # a read (no write returns rows): dropped, and run again as text
        statements.prepared.pop(sql, None)
        statements.seen[sql] = _NOT_PREPARED
        _close(dbapi_conn, prepared.stmt_id)
        return None
    except Exception as exc:
        if getattr(dbapi_conn, "_sock", None) is not None and _errno(exc) in (
            _ER_UNKNOWN_STMT_HANDLER,
            _ER_NEED_REPREPARE,
        ):
            statements.prepared.pop(sql, None)
            _close(dbapi_conn, prepared.stmt_id)
            return None
        raise


def forget(dbapi_conn: Any) -> None:
    """Close ``dbapi_conn``'s prepared statements (no answer is read: the server sends none)."""
    statements = _caches.pop(dbapi_conn, None)
    if statements is None or statements.thread_id != getattr(dbapi_conn, "server_thread_id", None):
        return
    for prepared in statements.prepared.values():
        _close(dbapi_conn, prepared.stmt_id)


def prepared_count(dbapi_conn: Any) -> int:
    """How many statements ``dbapi_conn`` holds prepared (tests, diagnostics)."""
    try:
        statements = _caches.get(dbapi_conn)
    except TypeError:  # another driver's connection (sqlite3's takes no weak reference)
        return 0
    return 0 if statements is None else len(statements.prepared)


def _bound(params: tuple[Any, ...], encoding: str) -> bytes | None:
    """``COM_STMT_EXECUTE``'s parameters (their NULL bitmap, "types follow", their types, their
    values), or ``None`` when a value is not a ``str``, an ``int`` of 64 bits or ``None``.

    A batch's statement binds hundreds of values (a claim of 100: 304): one pass, each string
    encoded and given its one-byte length from a table."""
    if not params:
        return b""
    utf8 = encoding in _UTF8
    short = _SHORT_LENGTHS
    types: list[bytes] = []
    values: list[bytes] = []
    typed, add = types.append, values.append
    nulls: bytearray | None = None
    for value in params:
        kind = type(value)
        if kind is str:
            data = value.encode() if utf8 else value.encode(encoding)
            size = len(data)
            add((short[size] if size < 251 else _lenenc(size)) + data)
            typed(_TYPE_STRING)
        elif kind is int:
            try:
                add(_LONGLONG.pack(value))
            except struct.error:  # past 64 bits
                return None
            typed(_TYPE_LONGLONG)
        elif value is None:
            if nulls is None:
                nulls = bytearray((len(params) + 7) // 8)
            n = len(types)
            nulls[n >> 3] |= 1 << (n & 7)
            typed(_TYPE_NULL)
        else:
            return None
    if nulls is None:
        nulls = bytearray((len(params) + 7) // 8)
    return b"".join((nulls, b"\x01", *types, *values))


_UTF8 = frozenset({"utf8", "utf-8", "utf8mb4"})
_SHORT_LENGTHS = [bytes((n,)) for n in range(251)]


def _errno(exc: BaseException) -> int | None:
    args = getattr(exc, "args", ())
    return args[0] if args and type(args[0]) is int else None


def _prepare_when_due(
    dbapi_conn: Any, statements: _Statements, sql: str, threshold: int
) -> _Prepared | None:
    seen = statements.seen
    runs = seen.get(sql, 0)
    if runs == _NOT_PREPARED or statements.full:
        return None
    if runs < threshold:
        if len(seen) >= _SEEN_MAX and sql not in seen:
            seen.clear()
        seen[sql] = runs + 1
        return None
    if "?" in sql or "%%" in sql:  # agora's texts have neither; a placeholder must not be read
        seen[sql] = _NOT_PREPARED
        return None
    try:
        prepared = _prepare(dbapi_conn, sql.replace("%s", "?"))
    except Exception as exc:
        if getattr(dbapi_conn, "_sock", None) is None or _errno(exc) is None:
            raise  # the connection is gone: the caller's error
        if _errno(exc) == 1461:  # ER_MAX_PREPARED_STMT_COUNT_REACHED: the server's own limit
            statements.full = True
        else:
            seen[sql] = _NOT_PREPARED
        return None
    seen.pop(sql, None)
    cache = statements.prepared
    cache[sql] = prepared
    if len(cache) > CACHE_MAX:
        _, oldest = cache.popitem(last=False)
        _close(dbapi_conn, oldest.stmt_id)
    return prepared


def _readers(definitions: list[bytes], encoding: str) -> list[_Reader] | None:
    """How each column of these definitions is read back, or ``None`` when one is of a type not
    read here."""
    from pymysql.protocol import FieldDescriptorPacket  # lazy: PyMySQL, a worker's only

    readers: list[_Reader] = []
    for data in definitions:
        field = FieldDescriptorPacket(data, encoding)
        kind = field.type_code
        if kind in _INT_TYPES:
            unsigned = bool(field.flags & _UNSIGNED_FLAG)
            readers.append((_INT_FORMATS[(_INT_TYPES[kind], unsigned)], False))
        elif kind in _STRING_TYPES:
            readers.append((None, field.charsetnr == _BINARY_CHARSET))
        else:
            return None
    return readers


class _Unreadable(Exception):
    """A prepared statement's result has a column of a type this module does not read."""


def _drain_rows(dbapi_conn: Any) -> None:
    while not dbapi_conn._read_packet().is_eof_packet():
        pass


def _prepare(dbapi_conn: Any, sql: str) -> _Prepared:
    """``COM_STMT_PREPARE``. Its columns are read from each result's own definitions (a
    column's type may be its parameter's, unknown until it runs)."""
    dbapi_conn._execute_command(_COM_STMT_PREPARE, sql)
    first = dbapi_conn._read_packet().get_all_data()
    stmt_id, n_columns, n_params = struct.unpack_from("<IHH", first, 1)
    for count in (n_params, n_columns):
        if count:
            for _ in range(count + 1):  # the definitions, then an EOF
                dbapi_conn._read_packet()
    return _Prepared(stmt_id, n_params)


def _close(dbapi_conn: Any, stmt_id: int) -> None:
    if getattr(dbapi_conn, "_sock", None) is None:
        return
    try:
        dbapi_conn._execute_command(_COM_STMT_CLOSE, struct.pack("<I", stmt_id))
    except Exception:
        pass


def _lenenc(n: int) -> bytes:
    if n < 251:
        return bytes((n,))
    if n < 1 << 16:
        return b"\xfc" + n.to_bytes(2, "little")
    if n < 1 << 24:
        return b"\xfd" + n.to_bytes(3, "little")
    return b"\xfe" + n.to_bytes(8, "little")


def _execute(
    dbapi_conn: Any, prepared: _Prepared, bound: bytes
) -> tuple[int, list[tuple[Any, ...]]]:
    dbapi_conn._execute_command(_COM_STMT_EXECUTE, prepared.head + bound)
    count, rows, more = _read_result(dbapi_conn, prepared)
    while more:  # a compound statement's further answers: read, not reported
        _, _, more = _read_result(dbapi_conn, prepared)
    return count, rows


def _read_result(dbapi_conn: Any, prepared: _Prepared) -> tuple[int, list[tuple[Any, ...]], bool]:
    from pymysql.protocol import OKPacketWrapper  # lazy: PyMySQL only

    first = dbapi_conn._read_packet()
    if first.is_ok_packet():
        ok = OKPacketWrapper(first)
        return ok.affected_rows, [], bool(ok.server_status & _SERVER_MORE_RESULTS_EXISTS)
    n_columns = first.read_length_encoded_integer()
    described = _definitions(dbapi_conn, n_columns)
    encoding = dbapi_conn.encoding
    if described != prepared.described or encoding != prepared.encoding:
        # its first result, or its columns changed since
        readers = _readers(described, encoding)
        if readers is None:  # a type not read here: the rows read and dropped, sent as text
            _drain_rows(dbapi_conn)
            raise _Unreadable
        prepared.described, prepared.readers = described, readers
        prepared.encoding, prepared.width, prepared.parsers = encoding, (n_columns + 9) // 8, {}
    return _read_rows(dbapi_conn, prepared)


def _definitions(dbapi_conn: Any, n_columns: int) -> list[bytes]:
    """A result's ``n_columns`` column definitions, as sent, and the EOF after them read (as
    ``_read_rows`` reads its packets: the server sends them again with every execute)."""
    read = dbapi_conn._rfile.read
    seq = dbapi_conn._next_seq_id
    described = []
    try:
        for _ in range(n_columns + 1):
            data, seq = _packet(dbapi_conn, read, seq)
            if data[0] == 0xFF:
                _raise_error(dbapi_conn, data)
            described.append(data)
    except OSError as exc:
        raise _lost(dbapi_conn, exc) from exc
    finally:
        dbapi_conn._next_seq_id = seq
    described.pop()  # the EOF
    return described


def _packet(dbapi_conn: Any, read: Callable[[int], bytes], seq: int) -> tuple[bytes, int]:
    """The next packet's payload (one of 16 MiB continues in the next, to one shorter) and the
    sequence number after it, checked as PyMySQL's ``_read_packet`` checks them."""
    header = read(4)
    if len(header) < 4:
        raise _lost(dbapi_conn)
    length = int.from_bytes(header[:3], "little")
    if header[3] != seq:
        raise _out_of_sequence(dbapi_conn, header[3], seq)
    data = read(length)
    if len(data) < length:
        raise _lost(dbapi_conn)
    seq = (seq + 1) & 0xFF
    if length == _MAX_PACKET:
        rest, seq = _packet(dbapi_conn, read, seq)
        data += rest
    return data, seq


def _raise_error(dbapi_conn: Any, data: bytes) -> None:
    """An error packet raised as PyMySQL raises it."""
    from pymysql.protocol import MysqlPacket  # lazy: PyMySQL only

    MysqlPacket(data, dbapi_conn.encoding).raise_for_error()


def _read_rows(dbapi_conn: Any, prepared: _Prepared) -> tuple[int, list[tuple[Any, ...]], bool]:
    """A result's rows, after its column definitions, to its EOF: its row count, its rows, and
    whether another result follows.

    The packets are read here from PyMySQL's buffered socket file, not by its ``_read_packet``
    (a packet object, two reads through its checks: half the client's work of a batch's read),
    with the same checks: the sequence numbers, the connection lost (``_lost``), an error packet
    raised as PyMySQL raises it. Each row is parsed by a function made for its null bitmap
    (``_parser``)."""
    read = dbapi_conn._rfile.read
    seq = dbapi_conn._next_seq_id
    parsers = prepared.parsers
    width = prepared.width
    rows: list[tuple[Any, ...]] = []
    add = rows.append
    try:
        while True:  # ``_packet``, written out: this loop runs once a row
            header = read(4)
            if len(header) < 4:
                raise _lost(dbapi_conn)
            length = int.from_bytes(header[:3], "little")
            if header[3] != seq:
                raise _out_of_sequence(dbapi_conn, header[3], seq)
            seq = (seq + 1) & 0xFF
            data = read(length)
            if len(data) < length:
                raise _lost(dbapi_conn)
            if length == _MAX_PACKET:  # a row of 16 MiB or more: its further packets
                rest, seq = _packet(dbapi_conn, read, seq)
                data += rest
            if data[0]:  # not a row: its EOF (0xFE), or an error (0xFF)
                break
            nulls = data[1 : 1 + width]
            parse = parsers.get(nulls)
            if parse is None:
                parse = _parser(prepared, nulls)
            add(parse(data))
    except OSError as exc:
        raise _lost(dbapi_conn, exc) from exc
    finally:
        dbapi_conn._next_seq_id = seq
    if data[0] == 0xFF:
        _raise_error(dbapi_conn, data)
    status = int.from_bytes(data[3:5], "little")
    return len(rows), rows, bool(status & _SERVER_MORE_RESULTS_EXISTS)


_MAX_PACKET = 0xFFFFFF
_PARSERS_MAX = 64  # null bitmaps a statement keeps a parser for


def _lost(dbapi_conn: Any, exc: BaseException | None = None) -> Exception:
    """PyMySQL's error for a connection lost mid-result (``_read_bytes``'), the socket closed."""
    from pymysql import err  # lazy: PyMySQL only

    dbapi_conn._force_close()
    why = f" ({exc})" if exc is not None else ""
    lost: Exception = err.OperationalError(
        _CR_SERVER_LOST, f"Lost connection to MySQL server during query{why}"
    )
    return lost


def _out_of_sequence(dbapi_conn: Any, got: int, expected: int) -> Exception:
    """PyMySQL's error for a packet out of sequence (``_read_packet``'), the socket closed."""
    from pymysql import err  # lazy: PyMySQL only

    if got == 0:  # MariaDB's error packet at its shutdown
        return _lost(dbapi_conn)
    dbapi_conn._force_close()
    wrong: Exception = err.InternalError(
        f"Packet sequence number wrong - got {got} expected {expected}"
    )
    return wrong


_CR_SERVER_LOST = 2013


def _parser(prepared: _Prepared, nulls: bytes) -> Callable[[bytes], tuple[Any, ...]]:
    """The parser of this statement's rows whose null bitmap is ``nulls``: a function made for
    its columns (``prepared.readers``), each column's offset arithmetic written out, its NULLs
    known, and each run of integer columns read with one ``struct`` format; kept by the bitmap
    (up to ``_PARSERS_MAX``; past that, one more is made each row). Its source is built from
    column numbers and sizes alone."""
    readers = prepared.readers
    lines = ["def parse(data):", f"    at = {1 + len(nulls)}"]
    scope: dict[str, Any] = {"wide": _wide_length}
    decode = ".decode()" if prepared.encoding in _UTF8 else ".decode(encoding)"
    values: list[str] = []
    numbers: list[tuple[int, struct.Struct]] = []  # a run of integer columns, read together

    def read_numbers() -> None:
        if numbers:
            first = numbers[0][0]
            both = struct.Struct("<" + "".join(f.format[1:] for _, f in numbers))
            scope[f"f{first}"] = both.unpack_from
            names = ", ".join(f"v{n}" for n, _ in numbers)
            lines.extend([f"    {names}, = f{first}(data, at)", f"    at += {both.size}"])
            numbers.clear()

    for n, (number, binary) in enumerate(readers):
        bit = n + 2
        if nulls[bit >> 3] & (1 << (bit & 7)):
            values.append("None")
            continue
        values.append(f"v{n}")
        if number is not None:
            numbers.append((n, number))
            continue
        read_numbers()
        text = "" if binary else decode
        lines += [
            "    size = data[at]",
            "    if size < 251:",
            f"        v{n} = data[at + 1 : (at := at + 1 + size)]{text}",
            "    else:",
            "        size, at = wide(data, at)",
            f"        v{n} = data[at : (at := at + size)]{text}",
        ]
    read_numbers()
    lines.append(f"    return ({', '.join(values)},)")
    scope["encoding"] = prepared.encoding
    exec("\n".join(lines), scope)  # the source holds column numbers and sizes only
    parse: Callable[[bytes], tuple[Any, ...]] = scope["parse"]
    if len(prepared.parsers) < _PARSERS_MAX:
        prepared.parsers[nulls] = parse
    return parse


def _wide_length(data: bytes, at: int) -> tuple[int, int]:
    """A length-encoded length of more than one byte at ``at``: the length, and where it ends."""
    wide = _WIDE_LENGTHS[data[at]]
    return int.from_bytes(data[at + 1 : at + 1 + wide], "little"), at + 1 + wide
