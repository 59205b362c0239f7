"""Fetch and read the models.dev catalog: httpx, one deadline, bounded size, an on-disk cache.

The catalog is the public JSON at ``https://models.dev/api.json`` (override with ``--catalog
URL|PATH`` or ``AGORA_MODELS_DEV_URL``): an object keyed by provider id, each provider holding
``models`` keyed by model id, each model an object whose optional ``cost`` holds USD per 1M tokens.

An HTTP fetch sends ``User-Agent: agora/<version>`` and is bounded twice:

- **in time**: ``timeout`` seconds (default 10, at most 600) for the *whole* fetch — connecting,
  waiting, every byte of the body, every retry and every backoff pause (counted from when the
  HTTP client is built, its TLS trust store read: the first attempt is always made, with the time
  that is left, so a failure names at least one attempt). httpx's own timeouts are
  per read, so a server that drips one byte every half second would never trip them; the body is
  streamed instead and the deadline checked after every chunk, and a watchdog shuts the
  connection's socket down at the deadline so that a read already waiting cannot outlive it;
- **in size**: at most ``max_bytes`` (64 MiB; the real catalog is about 2.4 MB) of decoded body,
  streamed and abandoned at the limit; a catalog *file* is read up to the limit plus one byte.

What is plausibly transient is retried (3 attempts, backoff 0.5 s then 1 s): a timeout, a
connection dropped mid-answer, 429 and 5xx. A connection that cannot be made at all — the host
name does not resolve, the port refuses, the network is unreachable — is not: offline, retrying
it only spends the backoff (issue 28: 8 s for an exit 3 that was certain after the first try), so
it fails at once (or falls back to the cached copy). A pause that would not end before the
deadline is not taken, and the fetch fails with the last problem instead.

A copy of every catalog fetched is kept on disk (``AGORA_CACHE_DIR``, else the
user's cache folder) under a hash of its URL, with the validators the server sent; the next fetch
revalidates it (``If-None-Match``/``If-Modified-Since``) so a repeated seed does not download
2+ MB again. The cache metadata never holds a password: it records the URL masked.

Every failure — unreachable after the retries, out of time, an HTTP error, a redirect loop, a
body over the size limit, not JSON or not of the catalog's shape — is a ``CatalogError`` (exit 3)
chained with ``from``, and nothing is cached then. **Stale if error**: when the fetch fails and a
cached copy of that URL exists, the copy is used instead and the ``ModelCatalog`` says so
(``stale=True``, ``stale_reason`` the failure); ``offline=True`` uses the cached copy without any
network access (``CatalogError`` when there is none).

A password in a catalog URL is never shown: ``ModelCatalog.source`` and every message hold the URL
masked, and the URL is registered with ``masking.remember_url`` so that tracebacks are scrubbed.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import math
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agora_cli import __version__
from agora_cli.store._clock import Clock, SystemClock
from agora_cli.store._errors import CatalogError, InvalidInput
from agora_cli.store._masking import mask_url, remember_url, scrub
from agora_cli.store._values import check_finite, check_int

if TYPE_CHECKING:
    import httpx

__all__ = [
    "DEFAULT_CATALOG_URL",
    "DEFAULT_TIMEOUT_S",
    "MAX_CATALOG_BYTES",
    "MAX_TIMEOUT_S",
    "STATUS_TIMEOUT_S",
    "USER_AGENT",
    "CatalogCopies",
    "ModelCatalog",
    "catalog_cache_dir",
    "catalog_source",
    "check_timeout",
    "fetch_catalog",
    "parse_catalog",
    "read_catalog_copies",
]

DEFAULT_CATALOG_URL = "https://models.dev/api.json"
DEFAULT_TIMEOUT_S = 10.0
MAX_TIMEOUT_S = 600.0
DEFAULT_ATTEMPTS = 3
DEFAULT_BACKOFF_S = 0.5
# `prices status` asks the live catalog briefly: a failure is answered from the cached copy.
STATUS_TIMEOUT_S = 5.0
STATUS_ATTEMPTS = 2
# The real catalog is ~2.4 MB; 64 MiB leaves room for years of growth and still bounds memory.
MAX_CATALOG_BYTES = 64 * 1024 * 1024
USER_AGENT = f"agora/{__version__}"
# The watchdog fires this long after the deadline: httpx's own timeout (set to the time left)
# normally ends a wait first and names itself; the watchdog is the backstop for a read that began
# with more time on its clock than the fetch had left.
_WATCHDOG_GRACE_S = 0.1

CatalogModels = dict[str, dict[str, dict[str, Any]]]


@dataclass(frozen=True)
class ModelCatalog:
    """A parsed, shape-checked catalog: provider id → model id → the model's entry.

    ``source`` is the URL (password masked) or path it came from. ``modified_at`` is when the
    catalog last changed as far as agora can tell (the server's ``Last-Modified``, a file's
    mtime), ``downloaded_at`` when these bytes were downloaded, both epoch ms. ``from_cache``: the
    cached copy was used; ``stale``: it was used without the server confirming it is current —
    because the fetch failed (``stale_reason`` says why) or because it was asked to be offline.
    """

    source: str
    providers: CatalogModels
    downloaded_at: int
    modified_at: int | None = None
    from_cache: bool = False
    stale: bool = False
    stale_reason: str | None = None
    _by_model: dict[str, list[str]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        index: dict[str, list[str]] = {}
        for provider in sorted(self.providers):
            for model_id in self.providers[provider]:
                index.setdefault(model_id, []).append(provider)
        object.__setattr__(self, "_by_model", index)

    @property
    def model_count(self) -> int:
        return sum(len(models) for models in self.providers.values())

    def entry(self, provider: str, model_id: str) -> dict[str, Any] | None:
        """The catalog entry of ``provider/model_id``, or ``None``."""
        return self.providers.get(provider, {}).get(model_id)

    def providers_listing(self, model_id: str) -> list[str]:
        """The providers (sorted) whose ``models`` hold exactly ``model_id``."""
        return list(self._by_model.get(model_id, ()))

    def model_ids(self) -> list[str]:
        """Every distinct model id in the catalog."""
        return list(self._by_model)

    def age_ms(self, now_ms: int) -> int | None:
        """How old the catalog's content is, if the source said when it last changed."""
        return None if self.modified_at is None else max(0, now_ms - self.modified_at)

    def copy_age_ms(self, now_ms: int) -> int:
        """How long ago these bytes were downloaded (the age of a cached copy)."""
        return max(0, now_ms - self.downloaded_at)


def catalog_source(source: str | None = None) -> str:
    """The catalog to read: the argument, else ``AGORA_MODELS_DEV_URL``, else models.dev."""
    return source or os.environ.get("AGORA_MODELS_DEV_URL") or DEFAULT_CATALOG_URL


def catalog_cache_dir() -> Path:
    """Where fetched catalogs are cached: ``AGORA_CACHE_DIR``, else the platform's user cache
    folder for agora (``platformdirs``: ``~/.cache/agora`` on Linux, ``~/Library/Caches/agora``
    on macOS, ``%LOCALAPPDATA%\\agora\\Cache`` on Windows)."""
    explicit = os.environ.get("AGORA_CACHE_DIR")
    if explicit:
        return Path(explicit)
    # lazy: start-up — platformdirs (~7 ms) only when AGORA_CACHE_DIR is unset
    import platformdirs

    return Path(platformdirs.user_cache_dir("agora", appauthor=False))


def check_timeout(value: object, name: str = "timeout") -> float:
    """Return ``value`` if it is a number of seconds above 0 and at most ``MAX_TIMEOUT_S``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 < value <= MAX_TIMEOUT_S
    ):
        raise InvalidInput(
            f"{name} must be a number of seconds above 0 and at most {MAX_TIMEOUT_S:g}, "
            f"not {value!r}"
        )
    return float(value)


def fetch_catalog(
    source: str | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    attempts: int = DEFAULT_ATTEMPTS,
    backoff_s: float = DEFAULT_BACKOFF_S,
    offline: bool = False,
    max_bytes: int = MAX_CATALOG_BYTES,
    cache_dir: Path | None = None,
    clock: Clock | None = None,
) -> ModelCatalog:
    """Fetch, parse and shape-check the catalog from a URL or a file path (see module docs)."""
    timeout = check_timeout(timeout)
    attempts = check_int("attempts", attempts, low=1, high=100)
    backoff_s = check_finite("backoff_s", backoff_s, low=0.0, high=MAX_TIMEOUT_S)
    max_bytes = check_int("max_bytes", max_bytes, low=1)
    clock = clock or SystemClock()
    where = catalog_source(source)
    if where.startswith(("http://", "https://")):
        remember_url(where)
        fetch = _HttpFetch(
            where,
            cache=_Cache(cache_dir or catalog_cache_dir(), where),
            timeout=timeout,
            attempts=attempts,
            backoff_s=backoff_s,
            max_bytes=max_bytes,
            clock=clock,
        )
        return fetch.offline() if offline else fetch.run()
    return _read_file(where, max_bytes=max_bytes, clock=clock)


@dataclass(frozen=True)
class CatalogCopies:
    """The live catalog and the cached copy of it, for comparing (``prices status``).

    ``live`` is what the source serves now (``None`` when it could not be read — ``live_error``
    says why — or ``offline`` asked not to try); ``cached`` is the copy kept from the last fetch
    that stored one (``None`` when there is none; a file source has none). At least one is there.
    """

    source: str
    live: ModelCatalog | None
    cached: ModelCatalog | None
    live_error: str | None = None
    offline: bool = False
    file: bool = False

    @property
    def compared_with(self) -> str:
        """``live``, ``cache`` or ``file`` (a catalog file: no cache beside it)."""
        if self.file:
            return "file"
        return "live" if self.live is not None else "cache"

    @property
    def current(self) -> ModelCatalog:
        """The copy to compare with: the live one when it answered, else the cached one."""
        found = self.live or self.cached
        assert found is not None  # read_catalog_copies never builds one without either
        return found


def read_catalog_copies(
    source: str | None = None,
    *,
    timeout: float = STATUS_TIMEOUT_S,
    attempts: int = STATUS_ATTEMPTS,
    backoff_s: float = DEFAULT_BACKOFF_S,
    offline: bool = False,
    max_bytes: int = MAX_CATALOG_BYTES,
    cache_dir: Path | None = None,
    clock: Clock | None = None,
) -> CatalogCopies:
    """Read the cached copy of the catalog and, unless ``offline``, the live one beside it.

    A question, not a refresh: the cache is read (and revalidated: a 304 makes the live copy
    the cached bytes) but never written, so asking twice gives the same answer, and what is
    new since the cache stays new until a seed fetches the catalog. The live fetch is short
    (``timeout``, default 5 s; ``attempts``, default 2, only for transient failures) and a
    failure is not an error: ``live_error`` says what happened and the cached copy answers.
    ``CatalogError`` only when neither can be read (a file source that cannot be read; no
    cached copy and no live answer).
    """
    timeout = check_timeout(timeout)
    attempts = check_int("attempts", attempts, low=1, high=100)
    backoff_s = check_finite("backoff_s", backoff_s, low=0.0, high=MAX_TIMEOUT_S)
    max_bytes = check_int("max_bytes", max_bytes, low=1)
    clock = clock or SystemClock()
    where = catalog_source(source)
    if not where.startswith(("http://", "https://")):
        live = _read_file(where, max_bytes=max_bytes, clock=clock)
        return CatalogCopies(where, live, None, file=True)
    remember_url(where)
    fetch = _HttpFetch(
        where,
        cache=_Cache(cache_dir or catalog_cache_dir(), where),
        timeout=timeout,
        attempts=attempts,
        backoff_s=backoff_s,
        max_bytes=max_bytes,
        clock=clock,
        keep=False,
    )
    if offline:
        return CatalogCopies(fetch.shown, None, fetch.offline(), offline=True)
    entry = fetch.cache.load()
    cached = None if entry is None else fetch._from_cache(entry, stale=True)
    try:
        live = fetch._fetch(entry if cached is not None else None)
    except CatalogError as exc:
        if cached is None:
            raise CatalogError(
                f"{exc.message}; and there is no cached copy of that catalog to compare with"
            ) from exc
        return CatalogCopies(fetch.shown, None, cached, live_error=exc.message)
    return CatalogCopies(fetch.shown, live, cached)


def _read_file(where: str, *, max_bytes: int, clock: Clock) -> ModelCatalog:
    path = Path(where.removeprefix("file://"))
    try:
        mtime = int(path.stat().st_mtime * 1000)
        with path.open("rb") as f:
            data = f.read(max_bytes + 1)  # /dev/zero must not run to MemoryError
    except OSError as exc:
        raise CatalogError(
            f"cannot read the catalog file {where}: {exc.strerror or exc} "
            "(give a readable path or an http(s) URL)"
        ) from exc
    if len(data) > max_bytes:
        raise CatalogError(
            f"the catalog file {where} is larger than {_size(max_bytes)}: it is not a catalog"
        )
    return ModelCatalog(
        source=where,
        providers=parse_catalog(data, source=where),
        downloaded_at=clock.now_ms(),
        modified_at=mtime,
    )


def parse_catalog(data: bytes | str, *, source: str = "the catalog") -> CatalogModels:
    """Parse catalog JSON and check its shape; ``CatalogError`` names what is wrong."""
    try:
        with _gc_paused():
            doc = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise CatalogError(f"the catalog from {source} is not valid JSON: {exc}") from exc
    if not isinstance(doc, dict) or not doc:
        raise CatalogError(
            f"the catalog from {source} is not a models.dev catalog: "
            "expected a non-empty JSON object keyed by provider id"
        )
    for provider, body in doc.items():
        models = body.get("models") if isinstance(body, dict) else None
        if not isinstance(models, dict):
            raise CatalogError(
                f"the catalog from {source} is not a models.dev catalog: provider "
                f"{provider!r} has no 'models' object"
            )
        for model_id, entry in models.items():
            if not isinstance(entry, dict):
                raise CatalogError(
                    f"the catalog from {source} is not a models.dev catalog: "
                    f"{provider}/{model_id} is not an object"
                )
            cost = entry.get("cost")
            if cost is not None and not isinstance(cost, dict):
                raise CatalogError(
                    f"the catalog from {source} is not a models.dev catalog: "
                    f"the cost of {provider}/{model_id} is not an object"
                )
    return {provider: body["models"] for provider, body in doc.items()}


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    # Decoding 2+ MB of JSON allocates ~100k containers and would trigger many cyclic-GC passes
    # over them (about a third of the parse time); JSON cannot create reference cycles.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _size(n: int) -> str:
    return f"{n / 1024 / 1024:g} MiB" if n >= 1024 * 1024 else f"{n:,} bytes"


# --- HTTP -------------------------------------------------------------------------------------


class _Retry(Exception):
    """One attempt failed: worth another try (a timeout, a dropped connection, 429, 5xx) unless
    ``transient`` is False (no connection could be made: the next try would fail alike)."""

    def __init__(
        self, problem: str, cause: BaseException | None = None, *, transient: bool = True
    ) -> None:
        super().__init__(problem)
        self.problem = problem
        self.cause = cause
        self.transient = transient


@dataclass
class _Body:
    status: int
    reason: str
    headers: dict[str, str]
    content: bytes


class _HttpFetch:
    """One fetch of one URL: attempts under one deadline, the cache, stale-if-error."""

    def __init__(
        self,
        url: str,
        *,
        cache: _Cache,
        timeout: float,
        attempts: int,
        backoff_s: float,
        max_bytes: int,
        clock: Clock,
        keep: bool = True,
    ) -> None:
        self.url = url
        self.keep = keep
        self.shown = mask_url(url)
        self.cache = cache
        self.timeout = timeout
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.max_bytes = max_bytes
        self.clock = clock

    def offline(self) -> ModelCatalog:
        cached = self.cache.load()
        catalog = None if cached is None else self._from_cache(cached, stale=True)
        if catalog is None:
            raise CatalogError(
                f"--offline: there is no cached copy of the catalog from {self.shown} "
                "(fetch it once without --offline, or use --catalog PATH)"
            )
        return catalog

    def run(self) -> ModelCatalog:
        cached = self.cache.load()
        try:
            return self._fetch(cached)
        except CatalogError as exc:
            stale = None if cached is None else self._from_cache(cached, stale=True, why=exc)
            if stale is None:
                raise
            return stale

    def _from_cache(
        self, cached: _Cached, *, stale: bool, why: CatalogError | None = None
    ) -> ModelCatalog | None:
        body = cached.read()
        if body is None:
            return None
        try:
            providers = parse_catalog(body, source=self.shown)
        except CatalogError:
            return None
        return ModelCatalog(
            source=self.shown,
            providers=providers,
            downloaded_at=cached.downloaded_at,
            modified_at=_http_date_ms(cached.last_modified),
            from_cache=True,
            stale=stale,
            stale_reason=None if why is None else why.message,
        )

    def _fetch(self, cached: _Cached | None) -> ModelCatalog:
        # lazy: httpx (heavy) loads only when a catalog is fetched over HTTP
        import httpx

        headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if cached is not None and cached.etag:
            headers["If-None-Match"] = cached.etag
        if cached is not None and cached.last_modified:
            headers["If-Modified-Since"] = cached.last_modified
        # No keep-alive: every attempt opens its own connection, which the watchdog can cut.
        limits = httpx.Limits(max_keepalive_connections=0)
        with httpx.Client(follow_redirects=True, headers=headers, limits=limits) as client:
            # The timeout bounds the fetch from here: building the client (its TLS context, the
            # trust store read from disk) is this machine's work, and on a loaded one it took
            # all of a short timeout before a first attempt ("after 0 attempt(s)").
            deadline = time.monotonic() + self.timeout
            body = self._get_with_retries(client, deadline)
            if body.status == 304 and cached is not None:
                catalog = self._from_cache(cached, stale=False)
                if catalog is not None:
                    return catalog
                # The cached copy is gone or damaged: forget it and download afresh.
                if self.keep:
                    self.cache.clear()
                for name in ("If-None-Match", "If-Modified-Since"):
                    client.headers.pop(name, None)
                body = self._get_with_retries(client, deadline)
        if body.status != 200:
            raise CatalogError(
                f"the catalog server at {self.shown} answered HTTP {body.status} "
                f"{body.reason}".rstrip()
            )
        providers = parse_catalog(body.content, source=self.shown)
        now = self.clock.now_ms()
        last_modified = body.headers.get("last-modified")
        if self.keep:
            self.cache.store(
                body.content,
                etag=body.headers.get("etag"),
                last_modified=last_modified,
                downloaded_at=now,
            )
        return ModelCatalog(
            source=self.shown,
            providers=providers,
            downloaded_at=now,
            modified_at=_http_date_ms(last_modified),
        )

    def _get_with_retries(self, client: httpx.Client, deadline: float) -> _Body:
        problem, cause, made, final = "", None, 0, False
        for attempt in range(self.attempts):
            if attempt:
                pause = self.backoff_s * 2 ** (attempt - 1)
                if time.monotonic() + pause >= deadline:
                    break  # the pause would use up the time left: stop now, say why
                time.sleep(pause)
                if time.monotonic() >= deadline:
                    break
            made += 1  # the first attempt is always made (with what time is left, if little)
            try:
                return self._attempt(client, deadline)
            except _Retry as retry:
                problem, cause, final = retry.problem, retry.cause, not retry.transient
            if final:
                break  # no connection could be made: another try would fail alike
        if not final and (time.monotonic() >= deadline or not problem):
            problem = f"timed out after {self.timeout:g} s"
        raise CatalogError(
            f"could not fetch the models.dev catalog from {self.shown} after {made} attempt(s): "
            f"{problem} (check the network, raise --timeout, or use --catalog PATH)"
        ) from cause

    def _attempt(self, client: httpx.Client, deadline: float) -> _Body:
        # lazy: httpx (heavy) loads only when a catalog is fetched over HTTP
        import httpx

        watchdog = _Watchdog(deadline + _WATCHDOG_GRACE_S)
        left = max(deadline - time.monotonic(), 0.001)
        try:
            with client.stream(
                "GET", self.url, timeout=left, extensions={"trace": watchdog.trace}
            ) as response:
                status, reason = response.status_code, response.reason_phrase
                if status >= 500 or status == 429:
                    raise _Retry(f"HTTP {status} {reason}".rstrip())
                content = self._read_body(response, deadline) if status == 200 else b""
                if watchdog.fired:
                    raise _Retry(f"timed out after {self.timeout:g} s")
                return _Body(status, reason, dict(response.headers), content)
        except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
            raise InvalidInput(
                f"{self.shown!r} is not a usable catalog URL: {scrub(str(exc))}"
            ) from exc
        except httpx.TooManyRedirects as exc:
            raise CatalogError(
                f"the catalog URL {self.shown} redirects too many times (a redirect loop?): "
                "give the catalog's final URL with --catalog"
            ) from exc
        except httpx.TimeoutException as exc:
            raise _Retry(f"timed out after {self.timeout:g} s", exc) from exc
        except httpx.ConnectError as exc:
            if watchdog.fired:
                raise _Retry(f"timed out after {self.timeout:g} s", exc) from exc
            # DNS failure, connection refused, network unreachable: nothing a retry would change.
            problem = scrub(f"{type(exc).__name__}: {exc}".rstrip(": "))
            raise _Retry(problem, exc, transient=False) from exc
        except httpx.TransportError as exc:
            if watchdog.fired:
                raise _Retry(f"timed out after {self.timeout:g} s", exc) from exc
            raise _Retry(scrub(f"{type(exc).__name__}: {exc}".rstrip(": ")), exc) from exc
        except httpx.HTTPError as exc:  # e.g. a body that fails to decode
            raise CatalogError(
                f"could not read the catalog from {self.shown}: "
                + scrub(f"{type(exc).__name__}: {exc}".rstrip(": "))
            ) from exc
        finally:
            watchdog.cancel()

    def _read_body(self, response: httpx.Response, deadline: float) -> bytes:
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            raise self._too_big()
        body = bytearray()
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > self.max_bytes:
                raise self._too_big()
            if time.monotonic() >= deadline:
                raise _Retry(f"timed out after {self.timeout:g} s")
        return bytes(body)

    def _too_big(self) -> CatalogError:
        return CatalogError(
            f"the catalog from {self.shown} is larger than {_size(self.max_bytes)}: "
            "it is not a catalog (check the URL)"
        )


class _Watchdog:
    """Shut an attempt's socket down at the deadline (httpx's timeouts are per read).

    httpcore reports each new connection's network stream to the ``trace`` request extension;
    the last one reported (the TLS stream after ``start_tls``) is the one to shut down. Shutting
    a socket down wakes a read blocked on it in another thread, which then fails or ends.
    """

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.fired = False
        self._sock: socket.socket | None = None
        self._timer: threading.Timer | None = None

    def trace(self, event: str, info: dict[str, Any]) -> None:
        if event not in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):
            self._sock = sock
        if self._timer is None:
            delay = max(0.0, self.deadline - time.monotonic())
            self._timer = threading.Timer(delay, self._fire)
            self._timer.daemon = True
            self._timer.start()

    def _fire(self) -> None:
        self.fired = True
        if self._sock is not None:
            with contextlib.suppress(OSError):
                socket.socket.shutdown(self._sock, socket.SHUT_RDWR)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


def _http_date_ms(value: str | None) -> int | None:
    if not value:
        return None
    try:
        return int(parsedate_to_datetime(value).timestamp() * 1000)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


# --- the on-disk cache ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Cached:
    path: Path
    etag: str | None
    last_modified: str | None
    downloaded_at: int

    def read(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except OSError:
            return None


class _Cache:
    """One cached body plus its validators per catalog URL; failures to write are not errors.

    Files are named by a hash of the full URL; the metadata holds that hash and the URL masked
    (never a password), the validators the server sent (if any) and when the body was fetched.
    """

    def __init__(self, folder: Path, url: str) -> None:
        self.key = hashlib.sha256(url.encode("utf-8", "surrogatepass")).hexdigest()
        self.shown = mask_url(url)
        self.body = folder / f"models-dev-{self.key[:16]}.json"
        self.meta = folder / f"models-dev-{self.key[:16]}.meta.json"

    def load(self) -> _Cached | None:
        try:
            meta = json.loads(self.meta.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(meta, dict) or meta.get("key") != self.key or not self.body.exists():
            return None
        etag, modified = meta.get("etag"), meta.get("last_modified")
        downloaded = meta.get("downloaded_at")
        return _Cached(
            path=self.body,
            etag=etag if isinstance(etag, str) else None,
            last_modified=modified if isinstance(modified, str) else None,
            downloaded_at=downloaded if isinstance(downloaded, int) else 0,
        )

    def store(
        self, body: bytes, *, etag: str | None, last_modified: str | None, downloaded_at: int
    ) -> None:
        meta = {
            "key": self.key,
            "url": self.shown,
            "etag": etag,
            "last_modified": last_modified,
            "downloaded_at": downloaded_at,
        }
        with contextlib.suppress(OSError):
            self.body.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            _write_atomically(self.body, body)
            _write_atomically(self.meta, json.dumps(meta).encode())

    def clear(self) -> None:
        for path in (self.meta, self.body):
            with contextlib.suppress(OSError):
                path.unlink()


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
