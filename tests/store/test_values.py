"""The values and masking modules: one verdict per input, and secrets masked by position."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agora_cli.store._clock import iso_ms, month_window, parse_instant
from agora_cli.store._engine import normalize_url
from agora_cli.store._errors import InvalidInput, UnknownDialect
from agora_cli.store._masking import mask_url, remember_url, scrub
from agora_cli.store._values import (
    MAX_INSTANT_MS,
    MIN_INSTANT_MS,
    check_finite,
    check_identity,
    check_lease_ms,
    dump_json,
    load_json,
    parse_json,
)


@pytest.mark.parametrize(
    ("url", "secret", "shown"),
    [
        (
            "postgresql://u:s3cret PW@db.internal/app",
            "s3cret PW",
            "postgresql://u:***@db.internal/app",
        ),
        ("postgresql://u:tab\tbed@db/app", "tab\tbed", "postgresql://u:***@db/app"),
        ("mysql://u:p@ss@host:3306/app", "p@ss", "mysql://u:***@host:3306/app"),
        ("mysql://u:p%40ss%2Fw@host/app", "p%40ss%2Fw", "mysql://u:***@host/app"),
        (
            "postgresql://u@host/app?password=hunter2x",
            "hunter2x",
            "postgresql://u@host/app?password=***",
        ),
        ("mysql://u@host/app?charset=utf8mb4&passwd=hunter2x", "hunter2x", None),
        ("postgresql://u:o@host/app", "o", "postgresql://u:***@host/app"),
    ],
)
def test_mask_url_masks_the_password_by_position(url: str, secret: str, shown: str | None) -> None:
    masked = mask_url(url)
    assert "***" in masked
    if shown is not None:
        assert masked == shown
    else:
        assert secret not in masked


def test_mask_url_leaves_urls_without_a_password_alone() -> None:
    for url in ("sqlite:///a:b@c.db", "postgresql://app@db/app", "https://models.dev/api.json"):
        assert mask_url(url) == url


def test_free_text_is_not_over_masked() -> None:
    # A one-letter password must not turn every "o" of a driver message into ***.
    remember_url("postgresql://u:o@127.0.0.1:1/x")
    text = 'connection failed: connection to server at "127.0.0.1", port 1 failed'
    assert scrub(text) == text
    remember_url("postgresql://u:Zx9-long-secret@127.0.0.1:1/x")
    assert scrub("echoed Zx9-long-secret back") == "echoed *** back"
    assert scrub("dsn: password=abc host=x") == "dsn: password=*** host=x"
    assert "(using password: YES)" in scrub("Access denied for user 'u' (using password: YES)")


def test_unencoded_at_in_a_password_is_refused_masked() -> None:
    with pytest.raises(InvalidInput) as info:
        normalize_url("postgresql://u:p@ss@127.0.0.1/x")
    assert "p@ss" not in str(info.value) and "ss@" not in str(info.value)
    assert "%40" in str(info.value)


def test_unsupported_drivers_are_invalid_input_naming_the_supported_ones() -> None:
    with pytest.raises(InvalidInput) as info:
        normalize_url("postgresql+asyncpg://u:secretpw1@h/x")
    assert "psycopg" in str(info.value) and "secretpw1" not in str(info.value)
    with pytest.raises(UnknownDialect):
        normalize_url("oracle://u@h/x")


def test_identity_has_one_verdict() -> None:
    assert check_identity("actor", "alice ") == "alice "
    assert check_identity("actor", "😀" * 127) == "😀" * 127  # 254 units
    for bad in ("", "   ", "a\x00b", "\udcff", "😀" * 128, None, 3):
        with pytest.raises(InvalidInput):
            check_identity("actor", bad)


@given(
    st.text(min_size=1, max_size=300)
    | st.text(st.characters(max_codepoint=127), min_size=1, max_size=300)  # ASCII: a fast path
    | st.sampled_from(["a" * 255, "a" * 256, " \t\n", "a\x00"])
)
def test_identity_verdict_matches_the_utf16_rule(text: str) -> None:
    units = len(text.encode("utf-16-le", "surrogatepass")) // 2
    try:
        text.encode("utf-8")
        encodable = True
    except UnicodeEncodeError:
        encodable = False
    ok = bool(text.strip()) and "\x00" not in text and encodable and units <= 255
    try:
        check_identity("x", text)
        assert ok
    except InvalidInput:
        assert not ok


def test_numbers_and_leases_are_bounded() -> None:
    for bad in (math.nan, math.inf, -math.inf, -0.01, True, "1"):
        with pytest.raises(InvalidInput):
            check_finite("limit", bad)
    assert check_finite("limit", 0) == 0.0
    assert check_lease_ms(7 * 86_400_000) == 7 * 86_400_000
    for bad in (0, 7 * 86_400_000 + 1, 100_000_000_000_000_000, 1.5):
        with pytest.raises(InvalidInput):
            check_lease_ms(bad)


def test_json_is_strict_everywhere() -> None:
    with pytest.raises(InvalidInput):
        dump_json("usage", {"x": math.nan})
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(InvalidInput):
        dump_json("input", deep)
    with pytest.raises(InvalidInput):
        parse_json("document", "[" * 100_000 + "]" * 100_000)
    with pytest.raises(InvalidInput):
        parse_json("document", '{"x": NaN}')
    assert load_json('{"x": NaN}') == '{"x": NaN}'  # not strict JSON: handed back as text
    assert load_json('{"x": 1.5}') == {"x": 1.5}


def test_instants_span_years_0001_to_9999_with_four_digit_years() -> None:
    assert iso_ms(MIN_INSTANT_MS) == "0001-01-01T00:00:00.000Z"
    assert iso_ms(MAX_INSTANT_MS) == "9999-12-31T23:59:59.999Z"
    assert parse_instant("0001-01-01T00:00:00Z") == MIN_INSTANT_MS
    assert month_window(__import__("datetime").date(9999, 12, 31))[1] == MAX_INSTANT_MS
    with pytest.raises(InvalidInput):
        parse_instant("9999-12-31T23:59:59-01:00")
