"""Report windows and groupings: periods in a time zone, ``--from``/``--to``/``--last``, keys.

Light (no SQLAlchemy): the command line builds its choices and windows from here without
loading the database layer.

- **Zones.** A report's days, weeks and months are those of one IANA zone (``--tz``; UTC by
  default), through ``zoneinfo``: a day runs from one local midnight to the next, so a day of a
  DST change lasts 23 or 25 hours. A local midnight that does not exist (a zone that springs
  forward at 00:00) starts the day at the first instant after the gap.
- **Periods.** A ``day`` runs 00:00:00.000–23:59:59.999 local time, a ``week`` from Monday
  00:00 (ISO weeks: keyed by their Monday), a ``month`` is the calendar month.
- **Bounds** (``--from``/``--to``): a day — ``YYYY-MM-DD``, ``YYYYMMDD``, ``today``,
  ``yesterday``, or relative ``-7d`` (7 days before today), ``-2w`` (14 days), ``-3m`` (the
  same day 3 months back, the month's last day when it is shorter); a month ``YYYY-MM`` (as a
  start its first day, as an end its last); or an instant relative to now, ``-24h``. A day as a
  start means its first instant, as an end its last: days are inclusive.
- ``--last``: ``24h`` the last 24 hours up to now; ``7d`` the last 7 days including today;
  ``4w`` this week and the 3 before; ``3m`` this month and the 2 before.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Literal, get_args

from agora_cli.store._clock import (
    day_start_ms,
    day_window,
    month_window,
    ms_to_date,
    parse_day,
)
from agora_cli.store._errors import InvalidInput
from agora_cli.store._values import MAX_INSTANT_MS, MIN_INSTANT_MS, check_instant

__all__ = [
    "DIMENSION_KEYS",
    "GROUP_KEYS",
    "HOUR_MS",
    "LAST_UNITS",
    "MAX_LAST",
    "PERIODS",
    "SPEND_GROUPINGS",
    "SPEND_ORDERS",
    "TIME_KEYS",
    "TOOL_SORTS",
    "DefaultWindow",
    "Period",
    "Window",
    "check_zone",
    "last_window",
    "local_date",
    "local_day_start_ms",
    "local_day_window",
    "offset_segments",
    "parse_bound",
    "parse_grouping",
    "period_window",
    "report_window",
    "resolve_window",
    "week_start",
    "zone_of",
]

Period = Literal["day", "week", "month"]
PERIODS: tuple[Period, ...] = get_args(Period)
TIME_KEYS: tuple[str, ...] = PERIODS
DIMENSION_KEYS = ("model", "actor", "tenant", "thread")
GROUP_KEYS = (*DIMENSION_KEYS, *TIME_KEYS)
# One key, or two different keys of which at most one is a period, in either order: the first
# is the outer level (``day,model``: each day broken down by model; ``model,actor``: each model
# by actor; ``model,day``: each model by day).
SPEND_GROUPINGS = (
    *GROUP_KEYS,
    *(
        f"{a},{b}"
        for a in GROUP_KEYS
        for b in GROUP_KEYS
        if a != b and not (a in TIME_KEYS and b in TIME_KEYS)
    ),
)
SPEND_ORDERS = ("cost", "tokens", "key")
# How ``tool_stats.stats_by_tool`` orders the tools, each descending (then most calls, then the
# name): calls, failed calls, the failure rate (tools with no settled call last), p95 latency.
TOOL_SORTS = ("calls", "failures", "fail_rate", "p95")
HOUR_MS = 3_600_000
LAST_UNITS = {"h": "hours", "d": "days", "w": "weeks", "m": "months"}
MAX_LAST = {"h": 8784, "d": 3660, "w": 520, "m": 120}  # a leap year of hours; ten years of each
_LAST_RE = re.compile(r"^([0-9]{1,4})([hdwm])$")  # ASCII digits: never ٣d
_RELATIVE_RE = re.compile(r"^-([0-9]{1,4})([hdwm])$")
_MONTH_RE = re.compile(r"^[0-9]{4}-[0-9]{2}$")
_COMPACT_DAY_RE = re.compile(r"^([0-9]{4})([0-9]{2})([0-9]{2})$")
_FORMS = "YYYY-MM-DD, YYYYMMDD, YYYY-MM, today, yesterday, or -7d, -2w, -3m, -24h"
_LAST_FORMS = "24h (hours), 7d (days), 4w (weeks), 3m (months)"


# --- zones -----------------------------------------------------------------------------------


def zone_of(name: str | None) -> tzinfo:
    """The ``tzinfo`` of an IANA zone name (``None`` and ``"UTC"``: UTC); a name ``zoneinfo``
    does not know is ``InvalidInput`` (exit 2)."""
    if name is None or name == "UTC":
        return UTC
    # lazy: most reports are in UTC and never load the zone database
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    if not name or "\x00" in name or len(name) > 64 or name.startswith(("/", ".")) or ".." in name:
        raise InvalidInput(
            f"--tz {name!r} is not an IANA time zone (e.g. Europe/Berlin, America/New_York, UTC)",
            param="tz",
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidInput(
            f"--tz {name!r} is not an IANA time zone (e.g. Europe/Berlin, America/New_York, UTC)",
            param="tz",
        ) from None


def check_zone(name: str | None) -> str:
    """``name`` when it is a zone ``zoneinfo`` knows (``None``: ``"UTC"``), else exit 2."""
    zone_of(name)
    return name or "UTC"


def _utc(tz: tzinfo | None) -> bool:
    return tz is None or tz is UTC


def local_day_start_ms(day: date, tz: tzinfo | None = None) -> int:
    """The first instant (epoch ms) of ``day`` in ``tz``: its local midnight, or the first
    instant after a gap that swallows midnight."""
    if _utc(tz):
        return day_start_ms(day)
    # fold=0 maps a skipped midnight to the instant after the gap, and a midnight that happens
    # twice to its first occurrence: either way the first instant of the local day. The first
    # day of the year 1 east of UTC starts before any instant: at the first one.
    return max(MIN_INSTANT_MS, _dt_ms(datetime(day.year, day.month, day.day, tzinfo=tz)))


def local_day_window(day: date, tz: tzinfo | None = None) -> tuple[int, int]:
    """The first and last millisecond of ``day`` in ``tz`` (23 or 25 hours on a DST change)."""
    if _utc(tz):
        return day_window(day)
    start = local_day_start_ms(day, tz)
    if day == date.max:
        return start, MAX_INSTANT_MS
    return start, local_day_start_ms(day + timedelta(days=1), tz) - 1


def local_date(ms: int, tz: tzinfo | None = None) -> date:
    """The calendar day of an instant in ``tz``."""
    if _utc(tz):
        return ms_to_date(ms)
    return _ms_dt(ms).astimezone(tz).date()


def _ms_dt(ms: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


def _dt_ms(dt: datetime) -> int:
    delta = dt - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def _offset_ms(ms: int, tz: tzinfo) -> int:
    offset = _ms_dt(ms).astimezone(tz).utcoffset()
    return 0 if offset is None else (offset.days * 86_400 + offset.seconds) * 1000


def offset_segments(tz: tzinfo | None, from_ms: int, to_ms: int) -> list[tuple[int, int]]:
    """The zone's UTC offsets over ``[from_ms, to_ms]``: ``[(first instant, offset ms), …]``,
    the first starting at ``from_ms``; one segment of 0 for UTC.

    ``(created_at + offset) DIV 86400000`` over these segments is an instant's local day
    number, which a database can group by (``ledger.py``). Probed every 6 hours and each change
    found to the millisecond by bisection: no zone changes its offset twice within 6 hours.
    """
    if _utc(tz) or from_ms > to_ms:
        return [(from_ms, 0)]
    assert tz is not None
    step = 6 * HOUR_MS
    segments = [(from_ms, _offset_ms(from_ms, tz))]
    at = from_ms
    while at < to_ms:
        nxt = min(at + step, to_ms)
        offset = _offset_ms(nxt, tz)
        if offset != segments[-1][1]:
            lo, hi = at, nxt  # offset(lo) is the old one, offset(hi) the new one
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if _offset_ms(mid, tz) == segments[-1][1]:
                    lo = mid
                else:
                    hi = mid
            segments.append((hi, offset))
        at = nxt
    return segments


# --- periods ---------------------------------------------------------------------------------


def week_start(day: date) -> date:
    """The Monday of ``day``'s week (ISO weeks start on Monday)."""
    return day - timedelta(days=day.weekday())


def period_window(period: str, at_ms: int, *, tz: tzinfo | None = None) -> tuple[int, int]:
    """The first and last millisecond (inclusive) of the period holding ``at_ms``, in ``tz``
    (UTC by default)."""
    if period not in PERIODS:
        raise InvalidInput(
            f"period must be one of {', '.join(PERIODS)}, not {period!r}", param="period"
        )
    check_instant("at_ms", at_ms)
    day = local_date(at_ms, tz)
    if _utc(tz):
        if period == "day":
            return day_window(day)
        if period == "month":
            return month_window(day)
    if period == "day":
        return local_day_window(day, tz)
    if period == "month":
        first = day.replace(day=1)
        last = first.replace(day=calendar.monthrange(day.year, day.month)[1])
        return local_day_start_ms(first, tz), local_day_window(last, tz)[1]
    monday = week_start(day)
    start = local_day_start_ms(monday, tz)
    # The last week of 9999 ends in the year 10000, which no instant reaches: it ends with 9999.
    if (date.max - monday).days < 7:
        return start, MAX_INSTANT_MS
    return start, min(local_day_window(monday + timedelta(days=6), tz)[1], MAX_INSTANT_MS)


# --- groupings -------------------------------------------------------------------------------


def parse_grouping(by: str) -> tuple[str, ...]:
    """``--by``: one key, or two joined with a comma (``model,actor``, ``day,model``), from
    ``GROUP_KEYS``, at most one of them a period; anything else is ``InvalidInput``."""
    parts = tuple(p.strip().lower() for p in (by or "").split(","))
    if any(p not in GROUP_KEYS for p in parts) or not 1 <= len(parts) <= 2:
        raise InvalidInput(
            f"--by {by!r} is not one key or two joined with a comma, from "
            f"{', '.join(GROUP_KEYS)} (e.g. model, day,model, model,actor)"
        )
    if len(parts) == 2 and (parts[0] == parts[1] or set(parts) <= set(TIME_KEYS)):
        raise InvalidInput(
            f"--by {by!r}: give two different keys, at most one of them a period "
            f"({', '.join(TIME_KEYS)})"
        )
    return parts


# --- bounds ----------------------------------------------------------------------------------


def _months_back(day: date, count: int) -> date:
    months = day.year * 12 + day.month - 1 - count
    year, month = divmod(months, 12)
    month += 1
    if year < 1:
        raise InvalidInput("that is before the year 1")
    return date(year, month, min(day.day, calendar.monthrange(year, month)[1]))


def _relative_day(count: int, unit: str, today: date, text: str, what: str) -> date:
    if not 1 <= count <= MAX_LAST[unit]:
        raise InvalidInput(
            f"{what} {text!r}: the count must be from 1 to {MAX_LAST[unit]} {LAST_UNITS[unit]}",
            param="from" if what == "--from" else "to",
        )
    try:
        if unit == "d":
            return today - timedelta(days=count)
        if unit == "w":
            return today - timedelta(weeks=count)
        return _months_back(today, count)
    except (OverflowError, InvalidInput):
        raise InvalidInput(f"{what} {text!r} is before the year 1") from None


def parse_bound(text: str, *, what: str, end: bool, today: date | None = None) -> date:
    """A day bound: ``YYYY-MM-DD``, ``YYYYMMDD``, or ``YYYY-MM`` (the month's first day as a
    start, its last as an end); with ``today`` also ``today``, ``yesterday``, ``-7d``, ``-2w``
    and ``-3m``. Anything else (an hour form too: it is an instant) is ``InvalidInput``."""
    raw = (text or "").strip()
    if _MONTH_RE.match(raw):
        first = parse_day(f"{raw}-01", what=what)
        if not end:
            return first
        return first.replace(day=calendar.monthrange(first.year, first.month)[1])
    compact = _COMPACT_DAY_RE.match(raw)
    if compact:
        return parse_day("-".join(compact.groups()), what=what)
    if today is not None:
        if raw.lower() == "today":
            return today
        if raw.lower() == "yesterday":
            if today == date.min:
                raise InvalidInput(f"{what} yesterday is before the year 1")
            return today - timedelta(days=1)
        relative = _RELATIVE_RE.match(raw)
        if relative and relative.group(2) != "h":
            return _relative_day(int(relative.group(1)), relative.group(2), today, text, what)
    if re.match(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$", raw):
        return parse_day(raw, what=what)
    forms = _FORMS if today is not None else "YYYY-MM-DD, YYYYMMDD or YYYY-MM"
    raise InvalidInput(f"{what} {text!r} is not a date: use {forms}")


def _bound_ms(text: str, *, what: str, end: bool, now_ms: int, tz: tzinfo | None) -> int:
    """A bound as an instant: an hour form relative to now, else a day's first (a start) or
    last (an end) instant in ``tz``."""
    raw = (text or "").strip()
    relative = _RELATIVE_RE.match(raw)
    if relative and relative.group(2) == "h":
        count = int(relative.group(1))
        if not 1 <= count <= MAX_LAST["h"]:
            raise InvalidInput(
                f"{what} {text!r}: the count must be from 1 to {MAX_LAST['h']} hours",
                param="from" if what == "--from" else "to",
            )
        return max(MIN_INSTANT_MS, now_ms - count * HOUR_MS)
    day = parse_bound(raw, what=what, end=end, today=local_date(now_ms, tz))
    first, last = local_day_window(day, tz)
    return last if end else first


def last_window(spec: str, today: date, *, what: str = "--last") -> tuple[date, date]:
    """The days of ``--last 7d|4w|3m`` ending today (see the module docs); hours are an
    instant window (``resolve_window``)."""
    count, unit = _last_parts(spec, what)
    if unit == "h":
        raise InvalidInput(f"{what} {spec!r}: hours need an instant window here; use days")
    try:
        if unit == "d":
            start = today - timedelta(days=count - 1)
        elif unit == "w":
            start = week_start(today) - timedelta(weeks=count - 1)
        else:
            start = _months_back(today.replace(day=1), count - 1)
    except (OverflowError, InvalidInput):
        raise InvalidInput(f"{what} {spec!r} reaches before the year 1") from None
    return start, today


def _last_parts(spec: str, what: str) -> tuple[int, str]:
    match = _LAST_RE.match((spec or "").strip())
    if match is None:
        raise InvalidInput(
            f"{what} {spec!r} is not a count and a unit: {_LAST_FORMS}", param="last"
        )
    count, unit = int(match.group(1)), match.group(2)
    if not 1 <= count <= MAX_LAST[unit]:
        raise InvalidInput(
            f"{what} {spec!r}: the count must be from 1 to {MAX_LAST[unit]} {LAST_UNITS[unit]}",
            param="last",
        )
    return count, unit


def report_window(
    from_text: str | None, to_text: str | None, last: str | None, today: date
) -> tuple[date, date]:
    """A report's inclusive window of days: ``--last``, or ``--from``/``--to`` (default: this
    month to date; ``--from`` alone runs to today, ``--to`` alone starts on the 1st of its
    month). The day forms of ``parse_bound`` relative to ``today``; no hour forms."""
    if last is not None:
        if from_text is not None or to_text is not None:
            raise InvalidInput("give --last or --from/--to, not both", param="last")
        return last_window(last, today, what="--last")
    start = (
        parse_bound(from_text, what="--from", end=False, today=today)
        if from_text is not None
        else None
    )
    end = parse_bound(to_text, what="--to", end=True, today=today) if to_text is not None else today
    if start is None:
        start = end.replace(day=1)
    if start > end:
        raise InvalidInput(f"--from {start.isoformat()} is after --to {end.isoformat()}")
    return start, end


# --- resolved windows ------------------------------------------------------------------------

DefaultWindow = Literal["month", "month_min_7d", "7d", "30d", "open"]


@dataclass(frozen=True)
class Window:
    """A report's window: its first and last instant (inclusive), their local days, the zone,
    and how it was chosen (``chosen``: ``"given"``, or the default that made it: ``"month"``
    to date, the last ``"7d"`` or ``"30d"``, ``"open"``)."""

    from_ms: int
    to_ms: int
    from_day: date
    to_day: date
    tz: str
    chosen: str = "given"
    hours: bool = False  # a bound is an instant (an hour form), not a whole day


def resolve_window(
    from_text: str | None,
    to_text: str | None,
    last: str | None,
    *,
    now_ms: int,
    tz: str | None = None,
    default: DefaultWindow = "month",
) -> Window:
    """A report's window in zone ``tz`` (UTC by default): ``--last``, else ``--from``/``--to``
    (each a day, a month, or an hour form relative to now: ``parse_bound``, ``-24h``).

    Without ``--from``, the start is the 1st of ``--to``'s month when ``--to`` was given, else
    the ``default``: ``"month"`` this month to date; ``"month_min_7d"`` this month to date, or
    the last 7 days when fewer of this month have begun (spend: never a one-day month); ``"7d"``
    / ``"30d"`` the last 7 / 30 days including today. A missing ``--to`` is the end of today.
    """
    name = check_zone(tz)
    zone = zone_of(name)
    check_instant("now_ms", now_ms)
    today = local_date(now_ms, zone)
    if last is not None:
        if from_text is not None or to_text is not None:
            raise InvalidInput("give --last or --from/--to, not both", param="last")
        count, unit = _last_parts(last, "--last")
        if unit == "h":
            lo = max(MIN_INSTANT_MS, now_ms - count * HOUR_MS)
            return Window(lo, now_ms, local_date(lo, zone), today, name, "given", hours=True)
        first, final = last_window(last, today)
        lo, hi = local_day_start_ms(first, zone), local_day_window(final, zone)[1]
        return Window(lo, hi, first, final, name)
    chosen = "given"
    hours = any(
        t is not None and (m := _RELATIVE_RE.match(t.strip())) is not None and m.group(2) == "h"
        for t in (from_text, to_text)
    )
    if to_text is not None:
        hi = _bound_ms(to_text, what="--to", end=True, now_ms=now_ms, tz=zone)
    else:
        hi = local_day_window(today, zone)[1]
    if from_text is not None:
        lo = _bound_ms(from_text, what="--from", end=False, now_ms=now_ms, tz=zone)
    elif to_text is not None:
        lo = local_day_start_ms(local_date(hi, zone).replace(day=1), zone)
    else:
        chosen = "month" if default == "month_min_7d" else default
        if default == "open":
            lo = MIN_INSTANT_MS
        elif default in ("7d", "30d"):
            days = 7 if default == "7d" else 30
            back = (
                today - timedelta(days=days - 1) if today > date.min + timedelta(days) else date.min
            )
            lo = local_day_start_ms(back, zone)
        else:
            first = today.replace(day=1)
            if default == "month_min_7d" and (today - first).days < 6:
                first = today - timedelta(days=6) if today > date.min + timedelta(7) else date.min
                chosen = "7d"
            lo = local_day_start_ms(first, zone)
    if lo > hi:
        raise InvalidInput(
            f"--from {_shown(lo, zone, hours)} is after --to {_shown(hi, zone, hours)}"
        )
    return Window(lo, hi, local_date(lo, zone), local_date(hi, zone), name, chosen, hours)


def _shown(ms: int, zone: tzinfo, hours: bool) -> str:
    if not hours:
        return local_date(ms, zone).isoformat()
    return _ms_dt(ms).astimezone(zone).isoformat(timespec="seconds")
