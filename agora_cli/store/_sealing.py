"""Sealed message content: tenants' data keys, wrapped by a key-encryption key (KEK).

Envelope encryption with AES-256-GCM from ``cryptography`` (imported only when a key is made or a
value sealed or opened: ``agora --help`` never loads it):

- The KEK (32 bytes) comes from ``AGORA_KEK`` (base64) or ``AGORA_KEK_FILE`` (a file holding the
  base64 text, or the 32 raw bytes), or from ``using_kek`` in a program; it never touches the
  database. Its fingerprint — an HMAC-SHA-256 of a fixed label under the KEK, which names it and
  reveals nothing — is stored with every key it wrapped, so a wrong KEK is told apart from a
  broken key row before anything is written.
- Each tenant has data keys in ``agent_tenant_key``: the active one (the newest with
  ``retired_at`` NULL) seals, the ones rotation retired stay for opening. A data key is stored
  wrapped: ``base64(nonce ‖ AES-GCM(KEK, key, AD = [tenant, key id]))``, so a key row moved to
  another tenant does not unwrap either.
- A sealed value is text: ``agora:sealed:v1:<key_id>:<base64url(nonce ‖ ciphertext ‖ tag)>``
  (no padding), with a fresh 96-bit nonce per value and associated data binding it to
  ``<table>.<column>``, the tenant and the row id (and the key id). Copied to another row, column
  or tenant it does not open: ``SealBroken``.

Writers: ``append_message`` (and ``fork_thread``) seal when the thread's tenant has an active key
and refuse (``KeyUnavailable``) without the KEK rather than store plaintext. Readers open
transparently when the KEK is set and otherwise hand back ``SEALED_MARKER``. ``seal_tenant``
seals (and with ``rotate`` re-seals) a tenant's existing rows in bounded batches, each its own
transaction: killed at any moment, a batch is all or nothing and the next run resumes.

Key material is never part of a message, a ``repr`` or a dataclass field: ``Kek`` shows only its
fingerprint, ``TenantKey`` has no wrapped key, and errors name keys by id.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import json
import os
import re
import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import insert, select, update

from agora_cli.store._clock import SystemClock
from agora_cli.store._errors import (
    Conflict,
    InvalidInput,
    KeyUnavailable,
    NotFound,
    SealBroken,
    WrongKek,
)
from agora_cli.store._schema import tenant_key as k  # the keys table, in every key query here
from agora_cli.store._schema import (
    thread,
)
from agora_cli.store._sqlexpr import exact_eq
from agora_cli.store._values import check_identity

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqlalchemy.engine import Connection

    from agora_cli.store._clock import Clock

__all__ = [
    "KEK_ENV",
    "KEK_FILE_ENV",
    "SEALED_COLUMNS",
    "SEALED_MARKER",
    "SEALED_PREFIX",
    "SEAL_BROKEN_MARKER",
    "SHREDDED_MARKER",
    "Kek",
    "KeyRotation",
    "Opened",
    "Sealer",
    "TenantKey",
    "create_tenant_key",
    "current_kek",
    "find_active_key",
    "frame_row_id",
    "generate_kek",
    "is_sealed",
    "key_destroyed",
    "list_tenant_keys",
    "open_cells",
    "open_columns",
    "open_values",
    "rotate_tenant_key",
    "seal_columns",
    "seal_state_of",
    "sealer_for",
    "tenants_of_threads",
    "using_kek",
]

KEK_ENV = "AGORA_KEK"
KEK_FILE_ENV = "AGORA_KEK_FILE"
SEALED_PREFIX = "agora:sealed:v1:"
SEALED_MARKER = "[sealed]"
SEAL_BROKEN_MARKER = "[seal broken]"
SHREDDED_MARKER = "[shredded]"
# What ``keys destroy`` leaves in ``wrapped_key``: the key row stays (so its values are known as
# sealed, and read as shredded), the key is gone.
_SHREDDED_KEY = "shredded"
# Every column holding a tenant's bytes, per table; what reports filter on (ids, tool names,
# states, times, models, counts) stays plain. The row id is the row's ``id``.
SEALED_COLUMNS: dict[str, tuple[str, ...]] = {
    "agent_thread": ("title", "summary"),
    "agent_message": ("content", "tool_calls", "tool_results", "attachments", "outcome"),
    "agent_queued_message": ("content",),
    # what a tool was given and gave back (its name, status and times stay plain: stats)
    "agent_tool_call": ("input", "output"),
    # what a worker runs and what it returned (tool name, decision, states, times stay plain:
    # the inbox and the worker's claim filter on them)
    "agent_action_proposal": ("input", "card", "result"),
    # a run's stream (answer text, tool inputs and results); its row id is ``<run_id>:<seq>``
    "agent_stream_frame": ("frame",),
}
_NONCE = 12  # 96 bits, fresh per value (os.urandom)
_FINGERPRINT_LABEL = b"agora:kek-fingerprint:v1"
MAX_SEAL_BATCH = 10_000


# --- the key-encryption key ------------------------------------------------------------------


class Kek:
    """A key-encryption key. Its ``repr`` and ``str`` show the fingerprint only."""

    __slots__ = ("_key", "fingerprint")

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, bytes) or len(key) != 32:
            raise WrongKek("a key-encryption key is 32 bytes")
        self._key = key
        self.fingerprint = hmac.new(key, _FINGERPRINT_LABEL, hashlib.sha256).hexdigest()[:16]

    def __repr__(self) -> str:
        return f"Kek(fingerprint={self.fingerprint!r})"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("a Kek is not pickled")

    @classmethod
    def from_text(cls, text: str, *, source: str = KEK_ENV) -> Kek:
        """The KEK written as base64 (standard or URL-safe, padding optional)."""
        raw = text.strip().replace("-", "+").replace("_", "/")
        try:
            key = base64.b64decode(raw + "=" * (-len(raw) % 4), validate=True)
        except (binascii.Error, ValueError):
            key = b""
        if len(key) != 32:
            raise WrongKek(f"{source} is not a key-encryption key: 32 bytes in base64 expected")
        return cls(key)


def generate_kek() -> str:
    """A new random KEK as base64 text (what ``AGORA_KEK`` or a KEK file holds)."""
    return base64.b64encode(secrets.token_bytes(32)).decode()


def derive_key(kek: Kek, label: str, *context: str | None) -> bytes:
    """A 32-byte key for ``label`` and ``context`` under the KEK, never stored.

    HMAC-SHA-256 under the KEK of the JSON array ``["agora:derived-key:v1", label, *context]``
    (one HKDF-Expand block: the KEK is already uniformly random). JSON keeps every (label,
    context) distinct, ``None`` included. Used by ``redact.py`` for its per-tenant keys.
    """
    info = json.dumps(["agora:derived-key:v1", label, *context]).encode()
    return hmac.new(kek._key, info, hashlib.sha256).digest()


_OVERRIDE: ContextVar[Kek | None] = ContextVar("agora_kek", default=None)
_FILE_CACHE: dict[tuple[str, int, int], Kek] = {}


@contextmanager
def using_kek(kek: Kek) -> Iterator[Kek]:
    """Use ``kek`` (instead of the environment's) for everything sealed or opened inside."""
    token = _OVERRIDE.set(kek)
    try:
        yield kek
    finally:
        _OVERRIDE.reset(token)


def current_kek(environ: Mapping[str, str] | None = None) -> Kek | None:
    """The KEK in use: ``using_kek``'s, else ``AGORA_KEK`` or ``AGORA_KEK_FILE``, else ``None``.

    A value that is not a key, both variables set, or a file that cannot be read is
    ``WrongKek`` / ``KeyUnavailable`` (exit 3), never silently no key.
    """
    override = _OVERRIDE.get()
    if override is not None:
        return override
    env = os.environ if environ is None else environ
    text, path = env.get(KEK_ENV, ""), env.get(KEK_FILE_ENV, "")
    if text and path:
        raise WrongKek(f"set {KEK_ENV} or {KEK_FILE_ENV}, not both")
    if text:
        return Kek.from_text(text)
    if not path:
        return None
    try:
        stat = os.stat(path)
        cached = _FILE_CACHE.get((path, stat.st_mtime_ns, stat.st_size))
        if cached is not None:
            return cached
        with open(path, "rb") as fh:
            data = fh.read(4096)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise KeyUnavailable(f"{KEK_FILE_ENV} {path}: {reason}") from None
    if len(data) == 32:
        kek = Kek(data)
    else:
        try:
            kek = Kek.from_text(data.decode("ascii"), source=f"{KEK_FILE_ENV} {path}")
        except UnicodeDecodeError:
            raise WrongKek(f"{KEK_FILE_ENV} {path} does not hold a key-encryption key") from None
    _FILE_CACHE[(path, stat.st_mtime_ns, stat.st_size)] = kek
    return kek


def _require_kek(kek: Kek | None, why: str) -> Kek:
    found = kek if kek is not None else current_kek()
    if found is None:
        raise KeyUnavailable(f"{why}: set {KEK_ENV} or {KEK_FILE_ENV} (the key-encryption key)")
    return found


def _aead(key: bytes) -> Any:
    # lazy: cryptography loads only when a value is sealed or opened
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    return AESGCM(key)


def _invalid_tag() -> type[Exception]:
    # lazy: cryptography loads only when a value is sealed or opened
    from cryptography.exceptions import InvalidTag

    return InvalidTag


# --- tenant keys -----------------------------------------------------------------------------


@dataclass(frozen=True)
class TenantKey:
    """One row of ``agent_tenant_key``, without its wrapped key."""

    id: str
    tenant: str
    kek_fingerprint: str
    created_at: int
    retired_at: int | None = None
    destroyed: bool = False  # crypto-shredded by ``destroy_tenant_keys``

    @property
    def active(self) -> bool:
        return self.retired_at is None and not self.destroyed


@dataclass(frozen=True)
class KeyRotation:
    """What ``rotate_tenant_key`` did: the new active key and the keys it retired."""

    key: TenantKey
    retired: list[str]


@dataclass(frozen=True, repr=False)
class _DataKey:
    """An unwrapped data key (never shown: no ``repr`` of the key)."""

    id: str
    tenant: str
    aead: Any = field(compare=False)

    def __repr__(self) -> str:
        return f"_DataKey(id={self.id!r}, tenant={self.tenant!r})"


def _key_ad(tenant: str, key_id: str) -> bytes:
    return json.dumps(["agora:tenant-key:v1", tenant, key_id]).encode()


def _wrap(kek: Kek, tenant: str, key_id: str, data_key: bytes) -> str:
    nonce = os.urandom(_NONCE)
    sealed = _aead(kek._key).encrypt(nonce, data_key, _key_ad(tenant, key_id))
    return base64.b64encode(nonce + sealed).decode()


def _unwrap(kek: Kek, row: Mapping[Any, Any]) -> _DataKey:
    key_id, tenant = row["id"], row["tenant_key"]
    if row["kek_fingerprint"] != kek.fingerprint:
        raise WrongKek(
            f"the key-encryption key set (fingerprint {kek.fingerprint}) is not the one that "
            f"wrapped key {key_id} of tenant {tenant!r} (fingerprint {row['kek_fingerprint']})"
        )
    try:
        blob = base64.b64decode(row["wrapped_key"], validate=True)
        data_key = _aead(kek._key).decrypt(blob[:_NONCE], blob[_NONCE:], _key_ad(tenant, key_id))
    except (binascii.Error, ValueError, _invalid_tag()):
        raise SealBroken(
            f"key {key_id} of tenant {tenant!r} does not unwrap: its row was altered or moved"
        ) from None
    if len(data_key) != 32:
        raise SealBroken(f"key {key_id} of tenant {tenant!r} is not an AES-256 key")
    return _DataKey(key_id, tenant, _aead(data_key))


def _tenant_key(row: Mapping[Any, Any]) -> TenantKey:
    return TenantKey(
        id=row["id"],
        tenant=row["tenant_key"],
        kek_fingerprint=row["kek_fingerprint"],
        created_at=int(row["created_at"]),
        retired_at=None if row["retired_at"] is None else int(row["retired_at"]),
        destroyed=bool(row.get("destroyed", row.get("wrapped_key") == _SHREDDED_KEY)),
    )


def _active_row(conn: Connection, tenant: str, *, lock: bool = False) -> Mapping[Any, Any] | None:
    q = (
        select(k)
        .where(exact_eq(k.c.tenant_key, tenant), k.c.retired_at.is_(None))
        .order_by(k.c.created_at.desc(), k.c.id.desc())
        .limit(1)
    )
    if lock:
        q = q.with_for_update()
    return conn.execute(q).mappings().first()


def find_active_key(conn: Connection, tenant: str) -> TenantKey | None:
    """The tenant's active key (the newest not retired), or ``None``."""
    row = _active_row(conn, check_identity("tenant", tenant))
    return None if row is None else _tenant_key(row)


def list_tenant_keys(conn: Connection, *, tenant: str | None = None) -> list[TenantKey]:
    """The keys (all, or one tenant's), by tenant then newest first; never key material."""
    cols = [
        k.c.id,
        k.c.tenant_key,
        k.c.kek_fingerprint,
        k.c.created_at,
        k.c.retired_at,
        (k.c.wrapped_key == _SHREDDED_KEY).label("destroyed"),
    ]
    q = select(*cols).order_by(k.c.tenant_key, k.c.created_at.desc(), k.c.id.desc())
    if tenant is not None:
        q = q.where(exact_eq(k.c.tenant_key, check_identity("tenant", tenant)))
    return [_tenant_key(r) for r in conn.execute(q).mappings()]


def _check_database_kek(conn: Connection, kek: Kek) -> None:
    """Refuse a KEK other than the one that wrapped the keys already stored (one per database)."""
    other = conn.execute(
        select(k.c.kek_fingerprint).where(k.c.kek_fingerprint != kek.fingerprint).limit(1)
    ).scalar()
    if other is not None:
        raise WrongKek(
            f"the key-encryption key set (fingerprint {kek.fingerprint}) is not the one that "
            f"wrapped this database's tenant keys (fingerprint {other})"
        )


def _new_key_id() -> str:
    return "tk_" + secrets.token_hex(10)


def _insert_key(conn: Connection, kek: Kek, tenant: str, key_id: str | None, now: int) -> TenantKey:
    ident = check_identity("key_id", key_id or _new_key_id())
    if ":" in ident:
        raise InvalidInput("a key id cannot hold ':'", param="key_id")
    row = {
        "id": ident,
        "tenant_key": tenant,
        "wrapped_key": _wrap(kek, tenant, ident, secrets.token_bytes(32)),
        "kek_fingerprint": kek.fingerprint,
        "created_at": now,
        "retired_at": None,
    }
    conn.execute(insert(k).values(row))
    return _tenant_key(row)


def create_tenant_key(
    conn: Connection,
    *,
    tenant: str,
    kek: Kek | None = None,
    key_id: str | None = None,
    clock: Clock | None = None,
) -> TenantKey:
    """Give a tenant its first data key; from then on its new messages are sealed.

    ``Conflict`` when the tenant already has an active key (rotate it instead); ``WrongKek``
    when the database's keys were wrapped by another KEK.
    """
    tenant = check_identity("tenant", tenant)
    kek = _require_kek(kek, "a tenant key is wrapped by the key-encryption key")
    _check_database_kek(conn, kek)
    if _active_row(conn, tenant, lock=True) is not None:
        raise Conflict(f"tenant {tenant!r} already has an active key: rotate it instead")
    return _insert_key(conn, kek, tenant, key_id, (clock or SystemClock()).now_ms())


def rotate_tenant_key(
    conn: Connection,
    *,
    tenant: str,
    kek: Kek | None = None,
    key_id: str | None = None,
    clock: Clock | None = None,
) -> KeyRotation:
    """Make a new active key for the tenant and retire the old one (kept for opening).

    The old active key is unwrapped first: a wrong KEK is ``WrongKek`` with nothing written.
    Rows sealed under retired keys stay readable; ``seal_tenant(rotate=True)`` re-seals them.
    """
    tenant = check_identity("tenant", tenant)
    kek = _require_kek(kek, "a tenant key is wrapped by the key-encryption key")
    current = _active_row(conn, tenant, lock=True)
    for _ in range(_ROTATE_ROUNDS):
        if current is not None or not _has_keys(conn, tenant):
            break
        # A rotation running at once retired the row this one waited for (PostgreSQL re-checks
        # only that row after the wait): read again, the new active key is committed now.
        current = _active_row(conn, tenant, lock=True)
    if current is None:
        raise NotFound(f"tenant {tenant!r} has no active key: create one first")
    _unwrap(kek, current)
    _check_database_kek(conn, kek)
    now = (clock or SystemClock()).now_ms()
    # A key made in the same millisecond would sort by id: keep the new one strictly newest.
    now = max(now, int(current["created_at"]) + 1)
    retired = _retire(conn, tenant, now)
    return KeyRotation(_insert_key(conn, kek, tenant, key_id, now), sorted(retired))


_ROTATE_ROUNDS = 50


def _has_keys(conn: Connection, tenant: str) -> bool:
    found = conn.execute(select(k.c.id).where(exact_eq(k.c.tenant_key, tenant)).limit(1))
    return found.first() is not None


def _retire(conn: Connection, tenant: str, now: int) -> list[str]:
    live = exact_eq(k.c.tenant_key, tenant), k.c.retired_at.is_(None)
    ids = list(conn.execute(select(k.c.id).where(*live)).scalars())
    conn.execute(update(k).where(*live).values(retired_at=now))
    return ids


def _key_rows(conn: Connection, key_ids: Sequence[str]) -> dict[str, Mapping[Any, Any]]:
    if not key_ids:
        return {}
    rows = conn.execute(select(k).where(k.c.id.in_(sorted(set(key_ids))))).mappings()
    return {r["id"]: r for r in rows}


def key_destroyed(conn: Connection, tenant: str) -> bool:
    """Whether the tenant's keys were destroyed (it has keys, none of them live)."""
    q = select(k.c.wrapped_key).where(exact_eq(k.c.tenant_key, tenant)).limit(50)
    states = [w == _SHREDDED_KEY for w in conn.execute(q).scalars()]
    return bool(states) and all(states)


# --- values ----------------------------------------------------------------------------------


def is_sealed(value: str | None) -> bool:
    """Whether a stored value has the sealed form ``agora:sealed:v1:<key id>:…``.

    The form alone is a claim any text can make (a user can type it): a value is taken for
    sealed only when its key id names a key in ``agent_tenant_key``, and it is trusted only
    once it authenticates for its row (``open_cells``). Anything else is plaintext.
    """
    return _claimed_key(value) is not None


def _claimed_key(value: str | None) -> str | None:
    """The key id a value in the sealed form names, else ``None``."""
    if value is None or not value.startswith(SEALED_PREFIX):
        return None
    key_id, sep, _ = value[len(SEALED_PREFIX) :].partition(":")
    return key_id if sep and key_id else None


_GENERATED_KEY_ID = re.compile(r"tk_[0-9a-f]{20}")
_BODY = re.compile(r"[A-Za-z0-9_-]{38,}")  # base64url of a nonce, a tag and at least 1 byte


def _well_formed(value: str | None) -> bool:
    """Whether a value is exactly what ``_seal`` writes under a generated key id (``tk_`` and 20
    hex digits; the body base64url without padding, long enough for a nonce and a tag)."""
    key_id = _claimed_key(value)
    if value is None or key_id is None or not _GENERATED_KEY_ID.fullmatch(key_id):
        return False
    return _BODY.fullmatch(value[len(SEALED_PREFIX) + len(key_id) + 1 :]) is not None


def _split(value: str) -> tuple[str, str]:
    key_id, sep, body = value[len(SEALED_PREFIX) :].partition(":")
    if not sep or not key_id:
        raise SealBroken("a sealed value without a key id")
    return key_id, body


@functools.lru_cache(maxsize=256)
def _ad_head(table: str, column: str, tenant: str, key_id: str) -> bytes:
    return json.dumps(["agora:sealed:v1", f"{table}.{column}", tenant, key_id]).encode()


def _value_ad(table: str, column: str, tenant: str, row_id: str, key_id: str) -> bytes:
    """The associated data: ``["agora:sealed:v1", "<table>.<column>", tenant, key id]`` as JSON,
    then the row id. The JSON array ends where it closes, so the whole is unambiguous whatever
    the identities hold; the head is the same for every row of a thread (cached)."""
    return _ad_head(table, column, tenant, key_id) + row_id.encode("utf-8")


_URLSAFE_TO_STD = bytes.maketrans(b"-_", b"+/")


def _seal(dk: _DataKey, table: str, column: str, row_id: str, plaintext: str) -> str:
    nonce = os.urandom(_NONCE)
    ad = _value_ad(table, column, dk.tenant, row_id, dk.id)
    body = nonce + dk.aead.encrypt(nonce, plaintext.encode("utf-8"), ad)
    return f"{SEALED_PREFIX}{dk.id}:{base64.urlsafe_b64encode(body).rstrip(b'=').decode()}"


def _open(
    dk: _DataKey, table: str, column: str, tenant: str | None, row_id: str, value: str
) -> str:
    if tenant != dk.tenant:
        raise SealBroken(
            f"{table}.{column} of row {row_id!r} does not open: it was sealed for another "
            f"tenant's key ({dk.id})"
        )
    body = value[len(SEALED_PREFIX) + len(dk.id) + 1 :]
    try:
        raw = body.encode("ascii").translate(_URLSAFE_TO_STD) + b"=" * (-len(body) % 4)
        blob = binascii.a2b_base64(raw, strict_mode=True)
        ad = _value_ad(table, column, tenant, row_id, dk.id)
        return str(dk.aead.decrypt(blob[:_NONCE], blob[_NONCE:], ad).decode("utf-8"))
    except (binascii.Error, ValueError, UnicodeError, _invalid_tag()):
        raise SealBroken(
            f"{table}.{column} of row {row_id!r} does not open: sealed for another row, column "
            "or tenant, or altered"
        ) from None


class Sealer:
    """A tenant's active key, unwrapped, sealing values for rows of that tenant."""

    def __init__(self, key: _DataKey) -> None:
        self._key = key

    @property
    def key_id(self) -> str:
        return self._key.id

    def seal(self, table: str, column: str, row_id: str, plaintext: str) -> str:
        """``plaintext`` sealed for ``<table>.<column>`` of row ``row_id`` of the tenant."""
        return _seal(self._key, table, column, row_id, plaintext)

    def __repr__(self) -> str:
        return f"Sealer(key_id={self._key.id!r})"


def sealer_for(conn: Connection, tenant: str | None, *, kek: Kek | None = None) -> Sealer | None:
    """The tenant's sealer when it has an active key, else ``None`` (content stays plain).

    ``KeyUnavailable`` when the tenant has an active key and no KEK is set: its content is
    never written in plaintext.
    """
    if tenant is None:
        return None
    row = _active_row(conn, tenant)
    if row is None:
        if key_destroyed(conn, tenant):
            raise KeyUnavailable(
                f"tenant {tenant!r}'s keys were destroyed: its content is not written in "
                "plaintext (`agora keys create` gives it a new key)"
            )
        return None
    found = _require_kek(kek, f"tenant {tenant!r} seals its messages")
    return Sealer(_unwrap(found, row))


@dataclass(frozen=True)
class Opened:
    """A stored value as a reader gets it: ``text`` (``None`` for NULL) and ``state``:

    - ``plain``: stored in plaintext (including text that merely looks sealed: its key id names
      no key, so it was never sealed — unless it is exactly in the form agora writes, see
      ``broken``);
    - ``opened``: sealed, authenticated for its row, column and tenant, and opened;
    - ``locked``: sealed, and no KEK is set (``text`` is ``SEALED_MARKER``);
    - ``broken``: names a key but does not open where it is stored — copied from another row,
      column or tenant, or altered — or is exactly in agora's sealed form under a key this
      session cannot see (another tenant's, under row-level security) (``text`` is
      ``SEAL_BROKEN_MARKER``);
    - ``shredded``: sealed under a key ``keys destroy`` destroyed (``text`` is
      ``SHREDDED_MARKER``).
    """

    text: str | None
    state: str = "plain"

    @property
    def sealed(self) -> bool:
        return self.state != "plain"


_PLAIN_NONE = Opened(None)


def open_cells(
    conn: Connection,
    cells: Sequence[tuple[str, str, str, str | None, str | None]],
    *,
    kek: Kek | None = None,
    without_kek: str = "marker",
) -> list[Opened]:
    """Each ``(table, column, row_id, tenant, stored value)`` as a reader gets it (``Opened``).

    One query reads the keys the values name; a value whose key id names no key is plaintext,
    one that names a key is opened (authenticated for its table, column, tenant and row) or
    shown in its place as a marker: ``broken``, ``shredded``, or ``locked`` without a KEK
    (``without_kek="raise"``: ``KeyUnavailable`` instead). A KEK that did not wrap a key is
    ``WrongKek``: that is the caller's setting, not the row's.
    """
    claims = {i: k for i, cell in enumerate(cells) if (k := _claimed_key(cell[4])) is not None}
    out = [_PLAIN_NONE if c[4] is None else Opened(c[4]) for c in cells]
    if not claims:
        return out
    rows = _key_rows(conn, list(claims.values()))
    found: Kek | bool | None = False  # read once, only if a value needs it
    keys: dict[str, _DataKey | str] = {}
    for i, key_id in claims.items():
        table, column, row_id, tenant, value = cells[i]
        row = rows.get(key_id)
        if row is None:
            # A key this session cannot see (another tenant's, under row-level security) or
            # that is gone: a value exactly as ``_seal`` writes them was sealed, and does not
            # open here; anything else is text that merely starts like one (plaintext).
            if _well_formed(value):
                out[i] = Opened(SEAL_BROKEN_MARKER, "broken")
            continue
        if row["tenant_key"] != tenant:
            out[i] = Opened(SEAL_BROKEN_MARKER, "broken")
            continue
        if row["wrapped_key"] == _SHREDDED_KEY:
            out[i] = Opened(SHREDDED_MARKER, "shredded")
            continue
        if found is False:
            found = kek if kek is not None else current_kek()
        if found is None:
            if without_kek == "raise":
                raise KeyUnavailable(
                    f"{table}.{column} holds sealed values: set {KEK_ENV} or {KEK_FILE_ENV}"
                )
            out[i] = Opened(SEALED_MARKER, "locked")
            continue
        assert isinstance(found, Kek)
        if key_id not in keys:
            try:
                keys[key_id] = _unwrap(found, row)
            except SealBroken:
                keys[key_id] = "broken"
        key = keys[key_id]
        if isinstance(key, str):
            out[i] = Opened(SEAL_BROKEN_MARKER, "broken")
            continue
        try:
            out[i] = Opened(_open(key, table, column, tenant, row_id, str(value)), "opened")
        except SealBroken:
            out[i] = Opened(SEAL_BROKEN_MARKER, "broken")
    return out


def open_values(
    conn: Connection,
    *,
    table: str,
    column: str,
    cells: Sequence[tuple[str, str | None, str]],
    kek: Kek | None = None,
    without_kek: str = "marker",
) -> list[str]:
    """Each ``(row_id, tenant, stored value)`` of one column as its text, strictly: as
    ``open_cells``, except that a value that does not open (broken) is ``SealBroken`` naming
    the row; a shredded one is ``SHREDDED_MARKER``."""
    opened = open_cells(
        conn,
        [(table, column, row_id, tenant, value) for row_id, tenant, value in cells],
        kek=kek,
        without_kek=without_kek,
    )
    for (row_id, _, _), o in zip(cells, opened, strict=True):
        if o.state == "broken":
            raise SealBroken(
                f"{table}.{column} of row {row_id!r} does not open: sealed for another row, "
                "column or tenant, or altered"
            )
    return [str(o.text) for o in opened]


def seal_columns(
    sealer: Sealer | None, table: str, row_id: str, values: Mapping[str, Any]
) -> dict[str, Any]:
    """``values`` (a row about to be written) with its sealed columns sealed for ``row_id``;
    unchanged without a sealer. NULLs stay NULL."""
    if sealer is None:
        return dict(values)
    out = dict(values)
    for column in SEALED_COLUMNS.get(table, ()):
        if out.get(column) is not None:
            out[column] = sealer.seal(table, column, row_id, out[column])
    return out


def frame_row_id(run_id: str, seq: int) -> str:
    """The row id a frame's payload is sealed for: ``<run_id>:<seq>`` (the last ``:`` splits
    it, ``seq`` being a number)."""
    return f"{run_id}:{int(seq)}"


_SEAL_RANK = {"plain": 0, "opened": 1, "locked": 2, "shredded": 3, "broken": 4}


def seal_state_of(states: Sequence[str]) -> str:
    """The worst of some values' states (``plain`` < ``opened`` < ``locked`` < ``shredded`` <
    ``broken``): how a row with those values reads."""
    return max(states, key=_SEAL_RANK.__getitem__, default="plain")


def open_columns(
    conn: Connection,
    table: str,
    rows: Sequence[Mapping[Any, Any]],
    tenants: Sequence[str | None],
    *,
    row_ids: Sequence[str] | None = None,
    kek: Kek | None = None,
) -> list[tuple[dict[str, Any], str]]:
    """Each row as a dict with its sealed columns (those of ``SEALED_COLUMNS[table]`` it holds)
    opened, or a marker in place, and its seal state (``seal_state_of`` its columns'). The row
    id is ``row["id"]`` unless ``row_ids`` are given. One key read for the lot, none when no
    value is in the sealed form."""
    columns = [c for c in SEALED_COLUMNS[table] if not rows or c in rows[0]]
    out = [(dict(r), "plain") for r in rows]
    if not any(_claimed_key(r[c]) is not None for r in rows for c in columns):
        return out
    ids = [r["id"] for r in rows] if row_ids is None else list(row_ids)
    cells = [
        (table, c, row_id, tenant, r[c])
        for r, tenant, row_id in zip(rows, tenants, ids, strict=True)
        for c in columns
    ]
    opened = iter(open_cells(conn, cells, kek=kek))
    result = []
    for values, _ in out:
        found = [next(opened) for _ in columns]
        values.update({c: o.text for c, o in zip(columns, found, strict=True)})
        result.append((values, seal_state_of([o.state for o in found])))
    return result


def tenants_of_threads(conn: Connection, thread_ids: Sequence[str]) -> dict[str, str | None]:
    """Each thread's tenant (one read; a missing thread is left out)."""
    ids = sorted(set(thread_ids))
    if not ids:
        return {}
    q = select(thread.c.id, thread.c.tenant_ref).where(thread.c.id.in_(ids))
    return {i: t for i, t in conn.execute(q).all()}
