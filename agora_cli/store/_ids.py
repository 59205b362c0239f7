"""Time-ordered ids for the rows agora writes itself: UUIDv7 (RFC 9562) from the store's clock.

A UUIDv7 starts with the Unix time in milliseconds, so ids sort by creation time and, on InnoDB
(where the primary key is the table's physical order), rows written in time order sit together:
one day of the ledger is a run of adjacent pages instead of one page per row. The millisecond is
a reading of the store's injectable ``Clock`` (``clock.py``) — the same reading the row records
as its ``created_at`` — so a test's ``ManualClock`` drives the ids too, and rows written for a
past time (the demo's) carry that time in their ids.

Layout (RFC 9562 §5.7, with the monotonic counter of §6.2 "Method 1", as CPython 3.14's
``uuid.uuid7``)::

    unix_ts_ms (48) | ver 7 (4) | counter high (12) | var 0b10 (2) | counter low (30) | random (32)

The 42-bit counter starts at a random value with its top bit clear on each new millisecond and
counts up by one for every further id in that millisecond, so while the clock does not go back,
the ids of one process strictly increase; the 32 random bits (and the random start) keep
processes apart, and a forked child starts a sequence of its own.

An id always carries the millisecond its row records. RFC 9562 §6.2 lets a generator whose clock
steps back keep the previous timestamp so that the next id stays greater; agora does not: the
store's clock is the authority for a row's time (a backfill, the demo's past days, a test's
``ManualClock`` and a time-sync step alike), and an id that sorted after rows written later
would break the one property the ids are for — id order is ``created_at`` order. After a step
back the counter starts afresh at a random value, so ids stay unique (73 random bits per
millisecond). Instants before 1970 (which only an injected clock can give) are stamped as
millisecond 0.

Two textual forms, the ones the columns held before (both 32 hex digits, lower case, so text
order is time order on every dialect and collation): ``new_id`` gives the canonical
``8-4-4-4-12`` form (threads, messages, runs), ``new_hex_id`` the bare 32 digits (ledger rows,
prices, budgets). Ids a caller supplies are never touched.
"""

from __future__ import annotations

import os
import threading
import uuid

__all__ = [
    "id_time_ms",
    "new_hex_id",
    "new_id",
    "uuid7",
]

_MAX_MS = (1 << 48) - 1
_COUNTER_BITS = 42
_COUNTER_MAX = (1 << _COUNTER_BITS) - 1

_lock = threading.Lock()
_last_ms = -1
_counter = 0


def _reset_after_fork() -> None:
    """A forked child starts its own sequence (a fresh random counter on its first id)."""
    global _lock, _last_ms, _counter
    _lock = threading.Lock()
    _last_ms = -1
    _counter = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def _seed() -> int:
    """A random counter start with its top bit clear (room for 2**41 ids in one millisecond)."""
    return int.from_bytes(os.urandom(6)) >> (48 - _COUNTER_BITS + 1)


def _next(now_ms: int) -> tuple[int, int]:
    """The (millisecond, counter) of the next id: in the same millisecond as the previous id of
    this process, the next counter value; in any other, a fresh random counter."""
    global _last_ms, _counter
    ms = min(max(int(now_ms), 0), _MAX_MS)
    with _lock:
        if ms != _last_ms:
            _last_ms, _counter = ms, _seed()
        elif _counter < _COUNTER_MAX:
            _counter += 1
        else:  # 2**41 ids in one millisecond: borrow the next one (§6.2)
            _last_ms, _counter = min(_last_ms + 1, _MAX_MS), _seed()
        return _last_ms, _counter


def uuid7(now_ms: int) -> uuid.UUID:
    """A UUIDv7 for the instant ``now_ms`` (epoch milliseconds from the store's clock)."""
    ms, counter = _next(now_ms)
    tail = int.from_bytes(os.urandom(4))
    value = (
        (ms << 80)
        | (0x7 << 76)
        | ((counter >> 30) << 64)
        | (0b10 << 62)
        | ((counter & 0x3FFF_FFFF) << 32)
        | tail
    )
    return uuid.UUID(int=value)


def new_id(now_ms: int) -> str:
    """A time-ordered id in the canonical form (``0192f3c4-5d6e-7f80-9a1b-2c3d4e5f6a7b``)."""
    return str(uuid7(now_ms))


def new_hex_id(now_ms: int) -> str:
    """A time-ordered id as 32 lower-case hex digits (the ``uuid.hex`` form)."""
    return uuid7(now_ms).hex


def id_time_ms(ident: str) -> int | None:
    """The millisecond a UUIDv7 id (either form) was stamped with; ``None`` for any other id."""
    try:
        value = uuid.UUID(hex=ident)
    except (ValueError, TypeError):
        return None
    if value.version != 7 or value.variant != uuid.RFC_4122:
        return None
    return value.int >> 80
