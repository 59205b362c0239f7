"""Report windows (issue 28): relative bounds, hours, zones and DST days, without a database."""

from __future__ import annotations

from datetime import date

import pytest

from agora_cli.store._clock import iso_ms, parse_instant
from agora_cli.store._errors import InvalidInput
from agora_cli.store._windows import (
    SPEND_GROUPINGS,
    local_date,
    local_day_window,
    offset_segments,
    parse_bound,
    parse_grouping,
    period_window,
    resolve_window,
    zone_of,
)

BERLIN = zone_of("Europe/Berlin")
HOUR = 3_600_000


def window(*args: str | None, now: str, tz: str | None = None, default: str = "month") -> tuple:
    w = resolve_window(*args, now_ms=parse_instant(now), tz=tz, default=default)  # type: ignore[arg-type]
    return iso_ms(w.from_ms), iso_ms(w.to_ms), w.from_day.isoformat(), w.to_day.isoformat()


def test_the_default_spend_window_on_the_1st_is_a_week_not_a_day() -> None:
    # month to date, at least 7 days: the 1st (the one-day report) and the 6th look
    # back a week; the 7th is the month's own first week
    w = resolve_window(
        None, None, None, now_ms=parse_instant("2026-12-01T09:00:00Z"), default="month_min_7d"
    )
    assert (w.from_day, w.to_day, w.chosen) == (date(2026, 11, 25), date(2026, 12, 1), "7d")
    w = resolve_window(
        None, None, None, now_ms=parse_instant("2026-12-06T09:00:00Z"), default="month_min_7d"
    )
    assert (w.from_day, w.chosen) == (date(2026, 11, 30), "7d")
    w = resolve_window(
        None, None, None, now_ms=parse_instant("2026-12-07T09:00:00Z"), default="month_min_7d"
    )
    assert (w.from_day, w.to_day, w.chosen) == (date(2026, 12, 1), date(2026, 12, 7), "month")
    # --to alone still starts on the 1st of its month; the plain default stays month to date
    assert window(None, "2026-11-10", None, now="2026-12-01T09:00:00Z")[2] == "2026-11-01"
    assert window(None, None, None, now="2026-12-01T09:00:00Z")[2:] == ("2026-12-01", "2026-12-01")


@pytest.mark.parametrize(
    ("bound", "day"),
    [
        ("today", "2026-12-01"),
        ("yesterday", "2026-11-30"),
        ("20261115", "2026-11-15"),
        ("2026-11-15", "2026-11-15"),
        ("-7d", "2026-11-24"),
        ("-2w", "2026-11-17"),
        ("-3m", "2026-09-01"),
        ("2026-10", "2026-10-01"),
    ],
)
def test_from_accepts_relative_and_compact_days(bound: str, day: str) -> None:
    assert window(bound, None, None, now="2026-12-01T09:00:00Z")[2] == day


def test_a_month_back_from_the_31st_is_the_shorter_months_last_day() -> None:
    assert parse_bound("-1m", what="--from", end=False, today=date(2026, 3, 31)) == date(
        2026, 2, 28
    )


def test_hours_are_instants_up_to_now() -> None:
    now = "2026-12-01T09:30:00.000Z"
    assert window(None, None, "24h", now=now)[:2] == ("2026-11-30T09:30:00.000Z", now)
    assert window("-6h", None, None, now=now)[0] == "2026-12-01T03:30:00.000Z"
    w = resolve_window(None, None, "24h", now_ms=parse_instant(now))
    assert w.hours and w.chosen == "given"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("tomorrow", None, None), "today, yesterday"),
        (("7d", None, None), "-7d"),
        (("-0d", None, None), "from 1 to"),
        (("2026-02-30", None, None), "real calendar date"),
        (("20260230", None, None), "real calendar date"),
        ((None, None, "24x"), "24h (hours)"),
        ((None, None, "0h"), "from 1 to 8784 hours"),
        ((None, None, "8785h"), "from 1 to 8784 hours"),
        (("today", None, "7d"), "not both"),
        (("-1h", "-2h", None), "is after"),
    ],
)
def test_bad_bounds_say_which_forms_are_accepted(args: tuple, words: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        resolve_window(*args, now_ms=parse_instant("2026-12-01T09:00:00Z"))
    assert words in exc.value.message
    assert "----" not in exc.value.message


def test_last_24h_is_named_once_in_its_error() -> None:
    with pytest.raises(InvalidInput) as exc:
        resolve_window(None, None, "24x", now_ms=0)
    assert exc.value.message.startswith("--last '24x' is not a count and a unit")


def test_berlin_days_of_23_and_25_hours() -> None:
    spring = local_day_window(date(2026, 3, 29), BERLIN)
    autumn = local_day_window(date(2026, 10, 25), BERLIN)
    assert [iso_ms(x) for x in spring] == ["2026-03-28T23:00:00.000Z", "2026-03-29T21:59:59.999Z"]
    assert [iso_ms(x) for x in autumn] == ["2026-10-24T22:00:00.000Z", "2026-10-25T22:59:59.999Z"]
    assert spring[1] + 1 - spring[0] == 23 * HOUR and autumn[1] + 1 - autumn[0] == 25 * HOUR
    # the window of --from/--to is made of those local days
    assert window("2026-03-29", "2026-03-29", None, now="2026-12-01T00:00:00Z", tz="Europe/Berlin")[
        :2
    ] == tuple(iso_ms(x) for x in spring)


def test_a_midnight_that_does_not_exist_starts_the_day_after_the_gap() -> None:
    # Chile springs forward at 00:00 on 2026-09-06: the day starts at 01:00 local (04:00Z)
    santiago = zone_of("America/Santiago")
    start, _ = local_day_window(date(2026, 9, 6), santiago)
    assert local_date(start, santiago) == date(2026, 9, 6)
    assert local_date(start - 1, santiago) == date(2026, 9, 5)


def test_offset_segments_find_each_change_to_the_millisecond() -> None:
    lo, hi = parse_instant("2026-01-01T00:00:00Z"), parse_instant("2026-12-31T23:59:59.999Z")
    assert offset_segments(BERLIN, lo, hi) == [
        (lo, HOUR),
        (parse_instant("2026-03-29T01:00:00Z"), 2 * HOUR),
        (parse_instant("2026-10-25T01:00:00Z"), HOUR),
    ]
    assert offset_segments(None, lo, hi) == [(lo, 0)]
    # St John's is 3:30 behind: a half-hour offset is exact too
    st_johns = offset_segments(
        zone_of("America/St_Johns"), lo, parse_instant("2026-02-01T00:00:00Z")
    )
    assert st_johns == [(lo, -int(3.5 * HOUR))]


def test_periods_in_a_zone() -> None:
    at = parse_instant("2026-03-29T12:00:00Z")
    day = period_window("day", at, tz=BERLIN)
    week = period_window("week", at, tz=BERLIN)  # Monday 2026-03-23 to Sunday 2026-03-29
    month = period_window("month", at, tz=BERLIN)
    assert iso_ms(day[0]) == "2026-03-28T23:00:00.000Z"
    assert [iso_ms(x) for x in week] == ["2026-03-22T23:00:00.000Z", "2026-03-29T21:59:59.999Z"]
    assert [iso_ms(x) for x in month] == ["2026-02-28T23:00:00.000Z", "2026-03-31T21:59:59.999Z"]
    assert period_window("day", at) == (
        parse_instant("2026-03-29T00:00:00Z"),
        parse_instant("2026-03-29T23:59:59.999Z"),
    )


@pytest.mark.parametrize("name", ["Mars/Olympus", "../../etc/passwd", "", "Europe/Berlin\x00"])
def test_a_zone_zoneinfo_does_not_know_is_invalid_input(name: str) -> None:
    with pytest.raises(InvalidInput, match="is not an IANA time zone"):
        zone_of(name)


def test_groupings_are_one_key_or_two_with_at_most_one_period() -> None:
    assert parse_grouping("model,actor") == ("model", "actor")
    assert parse_grouping("day,model") == ("day", "model")
    assert parse_grouping("thread,week") == ("thread", "week")
    for bad in ("model,model", "day,week", "model,actor,tenant", "year", ""):
        with pytest.raises(InvalidInput):
            parse_grouping(bad)
    assert "model,actor" in SPEND_GROUPINGS and "day,month" not in SPEND_GROUPINGS
    assert len(SPEND_GROUPINGS) == 7 + 7 * 6 - 6
