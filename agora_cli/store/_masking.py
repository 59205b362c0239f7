"""Keep secrets out of everything agora shows: URLs masked by position, known passwords scrubbed.

A URL is masked by parsing it, not by a pattern over its characters: the password is everything
between the user's ``:`` and the *last* ``@`` of the URL, whatever it holds (spaces, tabs, an
unencoded ``@``, percent-escapes), and query parameters that hold a secret are masked too, named
as written or percent-encoded (``pass%77ord``, ``token``, ``api_key``, ``key``, ``secret``…). The
result shows ``***`` in the password's own position and changes nothing else.

Free text (a driver's or an HTTP library's error message) is different: agora did not write it,
so it cannot be masked by position. ``scrub`` masks any URL-shaped credentials and
``password=…`` pairs in it, and replaces a password agora has seen (``remember_url``) only where
the replacement cannot itself disclose the password: a password of fewer than 8 characters, or
of letters only, could also be ordinary text (replacing every ``o`` of "connection failed" with
``***`` would tell the reader the password is ``o``), so it is left to the positional masks.

This module imports nothing heavy; the command line uses it on every error line.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

__all__ = [
    "MASK",
    "mask_url",
    "remember_secret",
    "remember_url",
    "scrub",
    "url_password",
]

MASK = "***"
_MIN_FREE_TEXT_SECRET = 8
_SECRET_KEYS = ("password", "passwd", "pwd", "sslpassword", "pass")
# Query parameters whose value is a secret, by their *decoded* name (a driver or HTTP library
# decodes ``pass%77ord`` to ``password`` before it sends it): the password forms, and the
# names a catalog URL carries a credential in.
_SECRET_PARAMS = frozenset(
    (
        *_SECRET_KEYS,
        "key",
        "apikey",
        "api_key",
        "token",
        "secret",
        "sig",
        "signature",
        "auth",
        "authorization",
        "credential",
        "credentials",
    )
)
_SECRET_PARTS = ("password", "passwd", "secret", "token", "apikey", "api_key", "credential")
# A query parameter, its name and its value: in a URL the value runs to the next ``&`` or
# ``#``; in free text it also stops at a blank (``…?password=***: connection refused``).
_QUERY_PARAM_RE = re.compile(r"(?P<head>[?&;](?P<key>[^=&#;?\s]+)=)(?P<value>[^&#]*)")
_FREE_PARAM_RE = re.compile(r"(?P<head>[?&;](?P<key>[^=&#;?\s]+)=)(?P<value>[^&#\s]*)")
# In free text: credentials of any scheme://user:password@ form (up to the last @ before a
# blank), and key=value / key: value pairs a driver may echo from a DSN.
_FREE_URL_RE = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s:/?#@]*:)(?P<pw>\S*)(?=@)")
_FREE_KV_RE = re.compile(
    r"(?P<head>\b(?:" + "|".join(_SECRET_KEYS) + r")\s*[=:]\s*)(?P<q>['\"]?)"
    r"(?!(?:YES|NO)\b|\*\*\*)(?P<value>[^\s'\"&;,)]+)",
    re.IGNORECASE,
)
_known: set[str] = set()


def _split(url: str) -> tuple[str, str, str | None, str] | None:
    """``(scheme://, user, password or None, rest after the last @)``, or ``None``."""
    head, sep, rest = url.partition("://")
    if not sep or not head or head.lower().startswith("sqlite"):
        return None
    at = rest.rfind("@")
    if at < 0:
        return None
    userinfo, after = rest[:at], rest[at + 1 :]
    user, colon, password = userinfo.partition(":")
    return head + sep, user, (password if colon else None), after


def url_password(url: object) -> str | None:
    """The password written in ``url`` (as written: still percent-encoded), or ``None``."""
    parts = _split(str(url))
    return None if parts is None else parts[2]


def mask_url(url: object) -> str:
    """Return ``url`` as text with its password (and ``password=`` parameters) shown as ``***``."""
    text = str(url)
    parts = _split(text)
    if parts is not None and parts[2] is not None:
        scheme, user, _password, after = parts
        text = f"{scheme}{user}:{MASK}@{after}"
    return _mask_params(_QUERY_PARAM_RE, text)


def secret_param(name: str) -> bool:
    """Whether a query parameter named ``name`` (as written: decoded here) holds a secret."""
    key = unquote(name).strip().lower().replace("-", "_")
    return key in _SECRET_PARAMS or any(part in key for part in _SECRET_PARTS)


def _mask_params(pattern: re.Pattern[str], text: str) -> str:
    def one(m: re.Match[str]) -> str:
        if m.group("value").startswith(MASK) or not secret_param(m.group("key")):
            return m.group(0)  # already masked (``?password=***: connection refused``): kept
        return m.group("head") + MASK

    return pattern.sub(one, text)


def remember_secret(secret: str | None) -> None:
    """Remember a secret so that ``scrub`` removes it from free text (where that is safe)."""
    if secret:
        _known.add(secret)
        decoded = unquote(secret)
        if decoded != secret:
            _known.add(decoded)


def remember_url(url: object) -> None:
    """Remember the password and any ``password=`` parameters of ``url`` for ``scrub``."""
    text = str(url)
    remember_secret(url_password(text))
    for match in _QUERY_PARAM_RE.finditer(text):
        if secret_param(match.group("key")):
            remember_secret(match.group("value"))


def _safe_to_replace(secret: str) -> bool:
    return len(secret) >= _MIN_FREE_TEXT_SECRET and not secret.isalpha()


def scrub(text: str) -> str:
    """Mask credentials in free text (see the module docs for what is and is not replaced)."""
    for secret in sorted(_known, key=len, reverse=True):
        if _safe_to_replace(secret) and secret in text:
            text = text.replace(secret, MASK)
    text = _FREE_URL_RE.sub(lambda m: m.group("head") + MASK, text)
    text = _mask_params(_FREE_PARAM_RE, text)
    return _FREE_KV_RE.sub(lambda m: m.group("head") + m.group("q") + MASK, text)
