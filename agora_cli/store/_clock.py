"""The injectable clock, and epoch-millisecond <-> ISO 8601 / UTC-day conversions.

Every timestamp the store writes comes from a ``Clock``; none is accepted from a caller where the
spec says the store decides. Tests inject a ``ManualClock`` and move it by hand.
"""

from __future__ import annotations

import calendar
import re
import time
from datetime import UTC, date, datetime, timedelta
from typing import Protocol

from agora_cli.store._errors import InvalidInput
from agora_cli.store._values import MAX_INSTANT_MS, MIN_INSTANT_MS

__all__ = [
    "DAY_MS",
    "Clock",
    "ManualClock",
    "SystemClock",
    "day_window",
    "iso_ms",
    "month_window",
    "parse_day",
    "parse_duration",
    "parse_instant",
]

DAY_MS = 86_400_000


class Clock(Protocol):
    """A source of the current time in epoch milliseconds (UTC)."""

    def now_ms(self) -> int: ...


class SystemClock:
    """The wall clock."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that only moves when told to (tests, server-side coordination)."""

    def __init__(self, now_ms: int = 1_767_225_600_000) -> None:
        self._now = now_ms

    def now_ms(self) -> int:
        return self._now

    def set(self, now_ms: int) -> None:
        self._now = now_ms

    def advance(self, ms: int) -> None:
        self._now += ms


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def iso_ms(ms: int | None) -> str | None:
    """Format epoch milliseconds as ISO 8601 UTC with milliseconds (``…T21:42:59.123Z``).

    Years always have four digits (``0001-01-01T00:00:00.000Z``), for every instant from year 1
    to 9999; an instant outside that range (only a foreign writer could store one) is shown as
    its epoch milliseconds rather than failing the whole command.
    """
    if ms is None:
        return None
    try:
        dt = _EPOCH + timedelta(milliseconds=ms)
    except OverflowError:
        return f"{ms} ms since 1970-01-01 (out of range)"
    return (
        f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T"
        f"{dt.hour:02d}:{dt.minute:02d}:{dt.second:02d}.{ms % 1000:03d}Z"
    )


_DAY_RE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")


def parse_day(text: str, *, what: str = "date") -> date:
    """Parse ``YYYY-MM-DD`` (UTC); anything else is ``InvalidInput``."""
    if not _DAY_RE.match(text or ""):
        raise InvalidInput(f"{what} {text!r} is not a date of the form YYYY-MM-DD")
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise InvalidInput(f"{what} {text!r} is not a real calendar date") from None


def parse_instant(text: str, *, what: str = "timestamp") -> int:
    """Parse an ISO 8601 instant to epoch ms; one without a zone is UTC."""
    raw = (text or "").strip()
    if not raw:
        raise InvalidInput(f"{what} is empty; give an ISO 8601 time such as 2026-11-29T12:00:00Z")
    if raw.endswith(("z", "Z")):
        raw = raw[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(raw)
    except ValueError:
        raise InvalidInput(
            f"{what} {text!r} is not an ISO 8601 time (e.g. 2026-11-29T12:00:00Z)"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    try:
        ms = _dt_ms(dt)
    except OverflowError:
        ms = None
    if ms is None or not MIN_INSTANT_MS <= ms <= MAX_INSTANT_MS:
        raise InvalidInput(f"{what} {text!r} is outside the years 0001 to 9999 (UTC)")
    return ms


# ASCII digits only (``\d`` would take ``٣``); ``m`` and ``min`` are minutes, and units are
# lower case: ``1M`` (a month, to many readers) is refused rather than read as a minute.
_DURATION_RE = re.compile(r"^(?:[0-9]{1,9}(?:min|[smhdw]))+$")
_DURATION_PART = re.compile(r"([0-9]+)(min|[smhdw])")
_UNIT_MS = {"s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": DAY_MS, "w": 7 * DAY_MS}


def parse_duration(text: str, *, what: str = "duration", max_ms: int = 366 * DAY_MS) -> int:
    """Parse ``90s``, ``30m``, ``1h``, ``2d``, ``1w`` or a sum such as ``1h30m`` to milliseconds
    (``m`` is minutes), from 1 s to ``max_ms``; anything else is ``InvalidInput``."""
    raw = (text or "").strip()
    if not _DURATION_RE.match(raw):
        raise InvalidInput(
            f"{what} {text!r} is not a duration such as 90s, 30m (or 30min), 1h, 2d or 1w"
            " (m is minutes; lower case)"
        )
    ms = sum(int(n) * _UNIT_MS[unit] for n, unit in _DURATION_PART.findall(raw))
    if not 1000 <= ms <= max_ms:
        raise InvalidInput(
            f"{what} {text!r} is outside 1s to {max_ms // DAY_MS:,}d"
            if max_ms % DAY_MS == 0
            else f"{what} {text!r} is outside 1s to {max_ms:,} ms"
        )
    return ms


def _dt_ms(dt: datetime) -> int:
    delta = dt - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def day_start_ms(day: date) -> int:
    """Epoch ms of ``day`` 00:00:00.000 UTC."""
    return _dt_ms(datetime(day.year, day.month, day.day, tzinfo=UTC))


def day_window(day: date) -> tuple[int, int]:
    """The first and last millisecond of a UTC day, inclusive."""
    start = day_start_ms(day)
    return start, start + DAY_MS - 1


def month_window(day: date) -> tuple[int, int]:
    """The first and last millisecond of the UTC calendar month holding ``day``, inclusive."""
    first = day.replace(day=1)
    days = calendar.monthrange(day.year, day.month)[1]
    return day_start_ms(first), day_start_ms(first) + days * DAY_MS - 1


def ms_to_date(ms: int) -> date:
    """The UTC calendar day of an epoch-ms instant."""
    return (_EPOCH + timedelta(milliseconds=ms)).date()
