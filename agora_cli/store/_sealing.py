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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, bindparam, func, insert, not_, or_, select, text, tuple_, update

from agora_cli.store._clock import SystemClock
from agora_cli.store._dialects import dialect_of
from agora_cli.store._errors import (
    Conflict,
    InvalidInput,
    KeyUnavailable,
    NotFound,
    SealBroken,
    WrongKek,
)
from agora_cli.store._redaction_form import is_redacted_sql
from agora_cli.store._schema import (
    action_proposal,
    message,
    queued_message,
    run,
    stream_frame,
    thread,
    tool_call,
)
from agora_cli.store._schema import tenant_key as k  # the keys table, in every key query here
from agora_cli.store._sqlexpr import exact_eq
from agora_cli.store._values import check_identity, check_int

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sqlalchemy import Table
    from sqlalchemy.engine import Connection, Engine
    from sqlalchemy.sql import ColumnElement

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
    "SealResult",
    "Sealer",
    "TenantKey",
    "count_to_seal",
    "create_tenant_key",
    "current_kek",
    "destroy_tenant_keys",
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
    "seal_tenant",
    "sealer_for",
    "tenants_of_threads",
    "using_kek",
    "vacuum_sealed_tables",
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


# --- sealing existing rows -------------------------------------------------------------------


@dataclass(frozen=True)
class SealResult:
    """What ``seal_tenant`` did (or, dry run, would do), per table (its sealed columns' values
    summed): values counted
    at the start (``to_seal``), values it sealed, values left (counted at the end), and values
    it left because they name a key but do not open (``broken``: copied, altered or shredded;
    readers show them as markers)."""

    tenant: str
    key_id: str
    rotate: bool
    dry_run: bool
    to_seal: dict[str, int]
    sealed: dict[str, int]
    remaining: dict[str, int]
    batches: int
    broken: dict[str, int] = field(default_factory=dict)


def _sealed_tables() -> list[tuple[Table, Callable[[str], ColumnElement[bool]]]]:
    """The sealed columns' tables, each with its "belongs to the tenant" condition.

    A message, a tool call (through its message) and a frame (through its run) belong to their
    thread's tenant; a thread, a queued message and a proposal to their own ``tenant_ref``.
    """
    # A batch reads the primary key in order from where the last one ended, so that a whole run
    # reads each row once. Given the thread index, SQLite (always), MariaDB and PostgreSQL (by
    # their statistics) drive a batch from the tenant's threads instead and sort every remaining
    # row of the tenant by id, each batch: at 200k rows, 0.8 s a batch on SQLite and 0.57 s on
    # MariaDB, against 18 ms on both without. ``thread_id || ''`` is not indexed, so the
    # primary key drives (the plans are in tests/bench/RESULTS.md).
    thread_id = message.c.thread_id + ""

    def threads_of(tenant: str) -> Any:
        return select(thread.c.id).where(exact_eq(thread.c.tenant_ref, tenant))

    def thread_of(tenant: str) -> ColumnElement[bool]:
        return exact_eq(thread.c.tenant_ref, tenant)

    def message_of(tenant: str) -> ColumnElement[bool]:
        return thread_id.in_(threads_of(tenant))

    def queued_of(tenant: str) -> ColumnElement[bool]:
        return exact_eq(queued_message.c.tenant_ref, tenant)

    def call_of(tenant: str) -> ColumnElement[bool]:
        messages = select(message.c.id).where(message.c.thread_id.in_(threads_of(tenant)))
        return (tool_call.c.message_id + "").in_(messages)

    def proposal_of(tenant: str) -> ColumnElement[bool]:
        return exact_eq(action_proposal.c.tenant_ref, tenant)

    def frame_of(tenant: str) -> ColumnElement[bool]:
        runs = select(run.c.id).where(run.c.thread_id.in_(threads_of(tenant)))
        return (stream_frame.c.run_id + "").in_(runs)

    return [
        (message, message_of),
        (queued_message, queued_of),
        (thread, thread_of),
        (tool_call, call_of),
        (action_proposal, proposal_of),
        (stream_frame, frame_of),
    ]


def _row_key(table: Table) -> list[Any]:
    """The columns naming a row (the primary key), in order."""
    return list(table.primary_key.columns)


def _row_id(table: Table, key: Sequence[Any]) -> str:
    """The row id a value of the row is sealed for (a frame's: ``frame_row_id``)."""
    if table.name == "agent_stream_frame":
        return frame_row_id(key[0], key[1])
    return str(key[0])


def _seal_targets() -> list[tuple[Table, str, Callable[[str], ColumnElement[bool]]]]:
    return [
        (table, column, of)
        for table, of in _sealed_tables()
        for column in SEALED_COLUMNS[table.name]
    ]


def _sealing_key_ids(conn: Connection, tenant: str, active_id: str, rotate: bool) -> list[str]:
    """The key ids a value may already be sealed under: the tenant's (``rotate``: the active
    one). Read once per count or batch, not once per column."""
    if rotate:
        return [active_id]
    return list(conn.execute(select(k.c.id).where(exact_eq(k.c.tenant_key, tenant))).scalars())


def _needs_sealing(
    conn: Connection,
    table: Table,
    column: str,
    tenant: str,
    active_id: str,
    rotate: bool,
    *,
    ids: list[str] | None = None,
) -> ColumnElement[bool]:
    """Not NULL, not in the sealed form under a key of the tenant (``rotate``: under its
    active key) and not a redaction marker (``db redact``'s keyed hash: nothing left to seal,
    and sealing it would have the next ``db redact`` hash it again). Text in the sealed form
    naming no key of the tenant is plaintext: sealed."""
    col = table.c[column]
    redacted = is_redacted_sql(col, frame=table.name == "agent_stream_frame")
    if ids is None:
        ids = _sealing_key_ids(conn, tenant, active_id, rotate)
    under = [
        func.substr(col, 1, len(f"{SEALED_PREFIX}{i}:")) == f"{SEALED_PREFIX}{i}:" for i in ids
    ]
    if under:
        return and_(col.is_not(None), not_(redacted), not_(or_(*under)))
    return and_(col.is_not(None), not_(redacted))


def count_to_seal(conn: Connection, *, tenant: str, rotate: bool = False) -> dict[str, int]:
    """Values of the tenant not yet sealed under one of its keys (with ``rotate``: not under the
    active key), per table (every sealed column of the table counted)."""
    return _by_table(_count_columns(conn, check_identity("tenant", tenant), rotate))


def _by_table(counts: Mapping[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, n in counts.items():
        table = name.partition(".")[0]
        out[table] = out.get(table, 0) + n
    return out


def _count_columns(conn: Connection, tenant: str, rotate: bool) -> dict[str, int]:
    row = _active_row(conn, tenant)
    active_id = "" if row is None else row["id"]
    ids = _sealing_key_ids(conn, tenant, active_id, rotate)
    return {
        f"{table.name}.{column}": int(
            conn.execute(
                select(func.count()).where(
                    of(tenant),
                    _needs_sealing(conn, table, column, tenant, active_id, rotate, ids=ids),
                )
            ).scalar_one()
        )
        for table, column, of in _seal_targets()
    }


def _tenant_keys(conn: Connection, tenant: str, kek: Kek) -> tuple[_DataKey, dict[str, _DataKey]]:
    """Every live key of the tenant unwrapped (so a wrong KEK fails before any write), the
    active one first; destroyed keys are left out (their values stay shredded)."""
    active = _active_row(conn, tenant)
    if active is None:
        raise NotFound(f"tenant {tenant!r} has no active key: `agora keys create` first")
    rows = conn.execute(select(k).where(exact_eq(k.c.tenant_key, tenant))).mappings().all()
    keys = {r["id"]: _unwrap(kek, r) for r in rows if r["wrapped_key"] != _SHREDDED_KEY}
    return keys[active["id"]], keys


def seal_tenant(
    engine: Engine,
    *,
    tenant: str,
    rotate: bool = False,
    batch: int = 1000,
    dry_run: bool = False,
    max_batches: int | None = None,
    kek: Kek | None = None,
    progress: Callable[[int], None] | None = None,
) -> SealResult:
    """Seal the tenant's plaintext values (every column of ``SEALED_COLUMNS``) under its active
    key, in bounded batches.

    With ``rotate``, values sealed under retired keys are opened and sealed again under the
    active one. Every key of the tenant is unwrapped before anything is written (a wrong KEK is
    ``WrongKek``, nothing written). Each batch — at most ``batch`` rows of one column, read by
    id — is its own transaction (the exception to "the caller owns the transaction"), and each
    row's update is fenced by the value it read, so a batch killed half-way is rolled back
    whole, a rerun resumes where the last committed batch ended, and no value is ever sealed
    twice. A value that names a key of the tenant but does not open is left as it is and
    counted in ``broken``. ``progress(n)`` is called with the values of each batch.
    """
    tenant = check_identity("tenant", tenant)
    check_int("batch", batch, low=1, high=MAX_SEAL_BATCH)
    if max_batches is not None:
        check_int("max_batches", max_batches, low=1, high=10**9)
    found = _require_kek(kek, f"sealing tenant {tenant!r}'s rows")
    with engine.connect() as conn:
        active, keys = _tenant_keys(conn, tenant, found)
        before = _count_columns(conn, tenant, rotate)
        conn.rollback()
    sealed = {name: 0 for name in before}
    broken = {name: 0 for name in before}
    batches = 0
    if not dry_run:
        for table, column, of in _seal_targets():
            name = f"{table.name}.{column}"
            col = table.c[column]
            pk = _row_key(table)
            width = len(pk)
            after: tuple[Any, ...] | None = None
            while before[name] and (max_batches is None or batches < max_batches):
                with engine.begin() as conn:
                    q = (
                        select(*pk, col)
                        .where(
                            of(tenant),
                            _needs_sealing(conn, table, column, tenant, active.id, rotate),
                        )
                        .order_by(*pk)
                        .limit(batch)
                    )
                    if after is not None:
                        q = q.where(
                            pk[0] > after[0] if width == 1 else tuple_(*pk) > tuple_(*after)
                        )
                    fence = (
                        update(table)
                        .where(
                            and_(*(c == bindparam(f"b_k{n}") for n, c in enumerate(pk))),
                            col == bindparam("b_old"),
                        )
                        .values({column: bindparam("b_new")})
                    )
                    rows = conn.execute(q).all()
                    if not rows:
                        break
                    changes = []
                    # keys named here that are not the tenant's live ones: one read a batch
                    claimed = {_claimed_key(r[width]) for r in rows} - set(keys) - {None}
                    foreign = _key_rows(conn, [str(c) for c in claimed])
                    for r in rows:
                        key, value = tuple(r[:width]), r[width]
                        row_id = _row_id(table, key)
                        plain = value
                        key_id = _claimed_key(value)
                        if key_id in foreign:  # another tenant's key, or a destroyed one
                            broken[name] += 1
                            continue
                        if key_id is not None and key_id in keys:
                            try:
                                plain = _open(
                                    keys[key_id], table.name, column, tenant, row_id, value
                                )
                            except SealBroken:
                                broken[name] += 1
                                continue
                        new = _seal(active, table.name, column, row_id, plain)
                        ident = {f"b_k{n}": k for n, k in enumerate(key)}
                        changes.append({**ident, "b_old": value, "b_new": new})
                    done = conn.execute(fence, changes).rowcount if changes else 0
                batches += 1
                # A row whose fence lost was sealed by a concurrent run: not counted twice.
                exact = conn.dialect.supports_sane_multi_rowcount and done >= 0
                sealed[name] += done if exact else len(changes)
                after = tuple(rows[-1][:width])
                if progress is not None:
                    progress(len(rows))
                if len(rows) < batch:
                    break
    with engine.connect() as conn:
        remaining = _count_columns(conn, tenant, rotate) if not dry_run else before
        conn.rollback()
    return SealResult(
        tenant=tenant,
        key_id=active.id,
        rotate=rotate,
        dry_run=dry_run,
        to_seal=_by_table(before),
        sealed=_by_table(sealed),
        remaining=_by_table(remaining),
        batches=batches,
        broken=_by_table(broken),
    )


def destroy_tenant_keys(conn: Connection, *, tenant: str, clock: Clock | None = None) -> list[str]:
    """Crypto-shred a tenant: overwrite every one of its data keys (the rows stay, retired, so
    its sealed values read as ``shredded``). Needs no KEK; cannot be undone.

    Returns the ids destroyed (none when already destroyed); ``NotFound`` for a tenant that
    never had a key. Until ``create_tenant_key`` gives it a new key, writes of the tenant's
    content are refused (``KeyUnavailable``) rather than stored in plaintext.
    """
    tenant = check_identity("tenant", tenant)
    mine = exact_eq(k.c.tenant_key, tenant)
    ids = sorted(conn.execute(select(k.c.id).where(mine).with_for_update()).scalars())
    if not ids:
        raise NotFound(f"tenant {tenant!r} has no key to destroy")
    live = sorted(
        conn.execute(select(k.c.id).where(mine, k.c.wrapped_key != _SHREDDED_KEY)).scalars()
    )
    now = (clock or SystemClock()).now_ms()
    conn.execute(
        update(k)
        .where(mine, k.c.wrapped_key != _SHREDDED_KEY)
        .values(wrapped_key=_SHREDDED_KEY, retired_at=func.coalesce(k.c.retired_at, now))
    )
    return live


def key_destroyed(conn: Connection, tenant: str) -> bool:
    """Whether the tenant's keys were destroyed (it has keys, none of them live)."""
    q = select(k.c.wrapped_key).where(exact_eq(k.c.tenant_key, tenant)).limit(50)
    states = [w == _SHREDDED_KEY for w in conn.execute(q).scalars()]
    return bool(states) and all(states)


def vacuum_sealed_tables(engine: Engine) -> list[str]:
    """Rewrite the sealed tables so that old row versions (the plaintext ``db seal`` replaced)
    leave the table files: PostgreSQL ``VACUUM FULL`` (an ACCESS EXCLUSIVE lock on each table
    in turn: reads and writes of that table wait), MySQL/MariaDB ``OPTIMIZE TABLE`` (InnoDB
    rebuilds the table online: brief exclusive locks at its start and end), SQLite ``VACUUM``
    then a WAL checkpoint (the whole file rebuilt under an exclusive lock). Returns the
    statements run. WAL already archived, replicas' own files and backups keep what they hold.
    """
    d = dialect_of(engine)
    stmts = d.compaction_statements(list(SEALED_COLUMNS))
    if d.compacts_on_driver:
        # outside any transaction: the engine's own BEGIN (IMMEDIATE) would refuse VACUUM
        raw = engine.raw_connection()
        try:
            driver: Any = raw.driver_connection
            driver.commit()
            before, driver.isolation_level = driver.isolation_level, None
            try:
                for stmt in stmts:
                    driver.execute(stmt).fetchall()
            finally:
                driver.isolation_level = before
        finally:
            raw.close()
        return stmts
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for stmt in stmts:
            result = conn.execute(text(stmt))
            if result.returns_rows:  # OPTIMIZE TABLE answers with a status row per table
                result.fetchall()
    return stmts
