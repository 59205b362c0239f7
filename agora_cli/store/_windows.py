"""Report windows and groupings: UTC periods, ``--from``/``--to``/``--last``, spend keys.

Light (no SQLAlchemy): the command line builds its choices and windows from here without
loading the database layer.

- Periods are UTC: a ``day`` runs 00:00:00.000–23:59:59.999, a ``week`` from Monday 00:00, a
  ``month`` is the calendar month.
- A window's bounds are ``YYYY-MM-DD`` or ``YYYY-MM`` (as a start the month's first day, as an
  end its last), inclusive; or ``--last``: ``7d`` the last 7 days including today, ``4w`` this
  week and the 3 before, ``3m`` this month and the 2 before.
"""

from __future__ import annotations

import calendar
import re
from datetime import date, timedelta
from typing import Literal, get_args

from agora_cli.store._clock import day_start_ms, day_window, month_window, ms_to_date, parse_day
from agora_cli.store._errors import InvalidInput
from agora_cli.store._values import MAX_INSTANT_MS, check_instant

__all__ = [
    "DIMENSION_KEYS",
    "LAST_UNITS",
    "MAX_LAST",
    "PERIODS",
    "SPEND_GROUPINGS",
    "SPEND_ORDERS",
    "TIME_KEYS",
    "Period",
    "last_window",
    "parse_bound",
    "period_window",
    "report_window",
    "week_start",
]

Period = Literal["day", "week", "month"]
PERIODS: tuple[Period, ...] = get_args(Period)
TIME_KEYS: tuple[str, ...] = PERIODS
DIMENSION_KEYS = ("model", "actor", "tenant", "thread")
# One-level groupings, then every time key with every dimension key (``day,model``).
SPEND_GROUPINGS = (
    *DIMENSION_KEYS,
    *TIME_KEYS,
    *(f"{time},{dim}" for time in TIME_KEYS for dim in DIMENSION_KEYS),
)
SPEND_ORDERS = ("cost", "tokens", "key")
LAST_UNITS = {"d": "days", "w": "weeks", "m": "months"}
MAX_LAST = {"d": 3660, "w": 520, "m": 120}  # ten years of each
_LAST_RE = re.compile(r"^([0-9]{1,4})([dwm])$")  # ASCII digits: never ٣d
_MONTH_RE = re.compile(r"^[0-9]{4}-[0-9]{2}$")


def week_start(day: date) -> date:
    """The Monday of ``day``'s week (UTC weeks start on Monday)."""
    return day - timedelta(days=day.weekday())


def period_window(period: str, at_ms: int) -> tuple[int, int]:
    """The first and last millisecond (UTC, inclusive) of the period holding ``at_ms``."""
    if period not in PERIODS:
        raise InvalidInput(
            f"period must be one of {', '.join(PERIODS)}, not {period!r}", param="period"
        )
    day = ms_to_date(check_instant("at_ms", at_ms))
    if period == "day":
        return day_window(day)
    if period == "month":
        return month_window(day)
    start = day_start_ms(week_start(day))
    # The last week of 9999 ends in the year 10000, which no instant reaches: it ends with 9999.
    return start, min(start + 7 * 86_400_000 - 1, MAX_INSTANT_MS)


def parse_bound(text: str, *, what: str, end: bool) -> date:
    """``YYYY-MM-DD``, or ``YYYY-MM``: the month's first day (a start) or last day (an end)."""
    if _MONTH_RE.match(text or ""):
        first = parse_day(f"{text}-01", what=what)
        if not end:
            return first
        return first.replace(day=calendar.monthrange(first.year, first.month)[1])
    return parse_day(text, what=what)


def last_window(spec: str, today: date, *, what: str = "last") -> tuple[date, date]:
    """The window of ``--last 7d|4w|3m`` ending today (see the module docs)."""
    match = _LAST_RE.match(spec or "")
    if match is None:
        raise InvalidInput(
            f"{what} {spec!r} is not a count and a unit: 7d (days), 4w (weeks), 3m (months)",
            param="last",
        )
    count, unit = int(match.group(1)), match.group(2)
    if not 1 <= count <= MAX_LAST[unit]:
        raise InvalidInput(
            f"{what} {spec!r}: the count must be from 1 to {MAX_LAST[unit]} {LAST_UNITS[unit]}",
            param="last",
        )
    if unit == "d":
        start = today - timedelta(days=count - 1)
    elif unit == "w":
        start = week_start(today) - timedelta(weeks=count - 1)
    else:
        months = today.year * 12 + today.month - 1 - (count - 1)
        start = date(months // 12, months % 12 + 1, 1)
    return start, today


def report_window(
    from_text: str | None, to_text: str | None, last: str | None, today: date
) -> tuple[date, date]:
    """A report's inclusive window: ``--last``, or ``--from``/``--to`` (default: this month
    to date; ``--from`` alone runs to today, ``--to`` alone starts on the 1st of its month)."""
    if last is not None:
        if from_text is not None or to_text is not None:
            raise InvalidInput("give --last or --from/--to, not both", param="last")
        return last_window(last, today, what="--last")
    start = parse_bound(from_text, what="--from", end=False) if from_text is not None else None
    end = parse_bound(to_text, what="--to", end=True) if to_text is not None else today
    if start is None:
        start = end.replace(day=1)
    if start > end:
        raise InvalidInput(f"--from {start.isoformat()} is after --to {end.isoformat()}")
    return start, end
