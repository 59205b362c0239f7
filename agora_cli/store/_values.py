"""One verdict per input: identities, strict JSON, numbers, instants and leases, checked once.

Every store module validates through these functions, so the same value gets the same answer
everywhere (an actor accepted by ``create_thread`` is accepted as a proposal scope) and every
bound is what Python's ``datetime`` and all three dialects can hold, checked before any SQL runs:

- identities (ids, actors, tenants, model ids, tool names): non-blank text of valid Unicode
  (no lone surrogates, which no database column can store), no NUL, at most 255 UTF-16 code
  units (an emoji counts 2; the TypeScript runtime counts the same way);
- JSON payloads: strict JSON only (``NaN`` and ``Infinity`` are refused, as are values nested
  deeper than Python can walk);
- numbers: finite, inside a stated range, and for integers inside a signed 64-bit ``BIGINT``;
- spending limits: tokens a count, USD finite from 0 to ``MAX_COST_USD`` (what one ledger row
  may cost), for a saved budget and a limit given now alike;
- instants: epoch milliseconds from 0001-01-01 to 9999-12-31 (UTC), the range of ``datetime``;
- leases: 1 ms to 7 days.

The messages name the library's own parameters; the command line maps them to its flags.
"""

from __future__ import annotations

import json
import math
from typing import Any

from agora_cli.store._errors import InvalidInput

__all__ = [
    "BIGINT_MAX",
    "MAX_CLAIM_BATCH",
    "MAX_COST_USD",
    "MAX_IDENTITY_UNITS",
    "MAX_INSTANT_MS",
    "MAX_LEASE_MS",
    "MIN_INSTANT_MS",
    "check_count",
    "check_finite",
    "check_identity",
    "check_instant",
    "check_int",
    "check_lease_ms",
    "check_limits",
    "check_optional_identity",
    "check_text",
    "dump_json",
    "load_json",
    "parse_json",
    "utf16_units",
]

MAX_IDENTITY_UNITS = 255
BIGINT_MAX = 2**63 - 1
MAX_LEASE_MS = 7 * 86_400_000
# The largest cost one ledger row may hold, and the largest limit in USD.
MAX_COST_USD = 1e15
# Leases per batched claim, settlements per batched settle (proposals).
MAX_CLAIM_BATCH = 1000
# datetime(1, 1, 1) and datetime(9999, 12, 31, 23, 59, 59, 999000), UTC, in epoch milliseconds.
MIN_INSTANT_MS = -62_135_596_800_000
MAX_INSTANT_MS = 253_402_300_799_999


def utf16_units(text: str) -> int:
    """Count ``text`` in UTF-16 code units (a character outside the BMP counts 2)."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def check_text(name: str, value: object) -> str:
    """Return ``value`` if it is a string that a database can store (valid Unicode, no NUL)."""
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be text, not {type(value).__name__}", param=name)
    if "\x00" in value:
        raise InvalidInput(f"{name} must not contain a NUL character", param=name)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"{name} is not valid UTF-8 text", param=name) from None
    return value


def check_identity(name: str, value: object) -> str:
    """Return ``value`` if it is a valid identity field, else raise ``InvalidInput``.

    The fast test below is also inlined in ``leases._checked_settlements`` (a batch worker's
    settle); ``tests/store/test_settle_checks.py`` holds the two to the same answers."""
    if (
        type(value) is str
        and value.isascii()  # one UTF-16 unit a character, valid UTF-8: the usual id, fast
        and len(value) <= MAX_IDENTITY_UNITS
        and value
        and not value.isspace()
        and "\x00" not in value
    ):
        return value
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{name} must be a non-empty string (not blank)", param=name)
    check_text(name, value)
    units = utf16_units(value)
    if units > MAX_IDENTITY_UNITS:
        raise InvalidInput(
            f"{name} is {units} UTF-16 code units long; the limit is {MAX_IDENTITY_UNITS}",
            param=name,
        )
    return value


def check_optional_identity(name: str, value: object) -> str | None:
    """``check_identity`` for a field that may be ``None``."""
    return None if value is None else check_identity(name, value)


def check_int(name: str, value: object, *, low: int = 0, high: int = BIGINT_MAX) -> int:
    """Return ``value`` if it is an integer (not a bool) in ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(
            f"{name} must be a whole number from {low:,} to {high:,}, not {value!r}", param=name
        )
    return value


def check_count(name: str, value: object) -> int:
    """A token or row count: a whole number from 0 to the largest ``BIGINT``."""
    return check_int(name, value, low=0, high=BIGINT_MAX)


def check_finite(name: str, value: object, *, low: float = 0.0, high: float = math.inf) -> float:
    """Return ``value`` as a float if it is a finite number in ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{name} must be a number, not {value!r}", param=name)
    number = float(value)
    if not math.isfinite(number):
        raise InvalidInput(f"{name} must be a finite number, not {value!r}", param=name)
    if not low <= number <= high:
        bound = f"from {low:g} to {high:g}" if math.isfinite(high) else f">= {low:g}"
        raise InvalidInput(f"{name} must be a number {bound}, not {value!r}", param=name)
    return number + 0.0  # -0.0 is 0.0


def check_limits(prefix: str, tokens: object, usd: object) -> tuple[int | None, float | None]:
    """Return a spending limit ``(tokens, usd)`` if each part is ``None`` (not given) or valid.

    Tokens (input + output) are a count; USD a finite number from 0 to ``MAX_COST_USD``. The
    messages name the parameters ``{prefix}tokens`` and ``{prefix}usd``.
    """
    return (
        None if tokens is None else check_count(f"{prefix}tokens", tokens),
        None if usd is None else check_finite(f"{prefix}usd", usd, high=MAX_COST_USD),
    )


def check_instant(name: str, value: object) -> int:
    """Return ``value`` if it is epoch milliseconds between years 0001 and 9999 (UTC)."""
    return check_int(name, value, low=MIN_INSTANT_MS, high=MAX_INSTANT_MS)


def check_lease_ms(value: object, name: str = "lease_ms") -> int:
    """Return ``value`` if it is a lease length from 1 ms to 7 days."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LEASE_MS:
        raise InvalidInput(
            f"{name} must be from 1 to {MAX_LEASE_MS:,} milliseconds (7 days), not {value!r}",
            param=name,
        )
    return value


def _no_constants(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


# json.dumps with options builds an encoder on every call; a worker settles many results
_STRICT_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def dump_json(name: str, value: Any) -> str:
    """``value`` as compact, strict JSON text; ``InvalidInput`` if it is not strict JSON."""
    try:
        return _STRICT_JSON(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{name} is not strict JSON: {exc}", param=name) from None
    except RecursionError:
        raise InvalidInput(f"{name} is nested too deeply to store as JSON", param=name) from None


def parse_json(name: str, text: str | bytes) -> Any:
    """Parse strict JSON input; ``InvalidInput`` names what is wrong (never a traceback)."""
    try:
        return json.loads(text, parse_constant=_no_constants)
    except RecursionError:
        raise InvalidInput(f"{name} is nested too deeply", param=name) from None
    except UnicodeDecodeError:
        raise InvalidInput(f"{name} is not UTF-8 text", param=name) from None
    except ValueError as exc:
        raise InvalidInput(f"{name} is not valid JSON: {exc}", param=name) from None


def load_json(text: str | None) -> Any:
    """A stored JSON payload as a value; text that is not strict JSON comes back as the text."""
    if text is None:
        return None
    try:
        return json.loads(text, parse_constant=_no_constants)
    except (ValueError, RecursionError):
        return text
