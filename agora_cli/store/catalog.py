"""Fetch and read the models.dev catalog: httpx, timeout, retries, an ETag cache, shape checks.

The catalog is the public JSON at ``https://models.dev/api.json`` (override with ``--catalog
URL|PATH`` or ``AGORA_MODELS_DEV_URL``): an object keyed by provider id, each provider holding
``models`` keyed by model id, each model an object whose optional ``cost`` holds USD per 1M tokens.

An HTTP fetch sends ``User-Agent: agora/<version>``, times out after ``timeout`` seconds, retries
connection errors, timeouts, 429 and 5xx a bounded number of times with exponential backoff, and
revalidates a copy cached on disk (``AGORA_CACHE_DIR``, else the user's cache folder) with
``If-None-Match``/``If-Modified-Since``, so a repeated seed does not download 2+ MB again. Every
failure — unreachable after the retries, an HTTP error, a body that is not JSON or not of the
catalog's shape — is a ``CatalogError`` (exit 3) chained with ``from``; nothing is cached then.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agora_cli import __version__
from agora_cli.store.clock import Clock, SystemClock
from agora_cli.store.errors import CatalogError, InvalidInput

if TYPE_CHECKING:
    import httpx

__all__ = [
    "DEFAULT_CATALOG_URL",
    "DEFAULT_TIMEOUT_S",
    "USER_AGENT",
    "Catalog",
    "catalog_cache_dir",
    "catalog_source",
    "fetch_catalog",
    "parse_catalog",
]

DEFAULT_CATALOG_URL = "https://models.dev/api.json"
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_ATTEMPTS = 3
DEFAULT_BACKOFF_S = 0.5
USER_AGENT = f"agora/{__version__}"

CatalogModels = dict[str, dict[str, dict[str, Any]]]


@dataclass(frozen=True)
class Catalog:
    """A parsed, shape-checked catalog: provider id → model id → the model's entry.

    ``modified_at`` is when the catalog last changed as far as agora can tell (the server's
    ``Last-Modified``, a file's mtime), ``downloaded_at`` when these bytes were downloaded, and
    ``from_cache`` whether the server answered 304 and the cached copy was used; all epoch ms.
    """

    source: str
    providers: CatalogModels
    downloaded_at: int
    modified_at: int | None = None
    from_cache: bool = False
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


def catalog_source(source: str | None = None) -> str:
    """The catalog to read: the argument, else ``AGORA_MODELS_DEV_URL``, else models.dev."""
    return source or os.environ.get("AGORA_MODELS_DEV_URL") or DEFAULT_CATALOG_URL


def catalog_cache_dir() -> Path:
    """Where fetched catalogs are cached: ``AGORA_CACHE_DIR``, else the user's cache folder."""
    explicit = os.environ.get("AGORA_CACHE_DIR")
    if explicit:
        return Path(explicit)
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "agora"
    if os.name == "nt" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "agora" / "cache"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agora"


def fetch_catalog(
    source: str | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    attempts: int = DEFAULT_ATTEMPTS,
    backoff_s: float = DEFAULT_BACKOFF_S,
    cache_dir: Path | None = None,
    clock: Clock | None = None,
) -> Catalog:
    """Fetch, parse and shape-check the catalog from a URL or a file path (see module docs)."""
    if not timeout > 0:
        raise InvalidInput(f"--timeout must be a positive number of seconds, not {timeout:g}")
    clock = clock or SystemClock()
    where = catalog_source(source)
    if where.startswith(("http://", "https://")):
        cache = _Cache(cache_dir or catalog_cache_dir(), where)
        return _fetch_http(
            where,
            timeout=timeout,
            attempts=max(1, attempts),
            backoff_s=backoff_s,
            cache=cache,
            clock=clock,
        )
    path = Path(where.removeprefix("file://"))
    try:
        data = path.read_bytes()
        mtime = int(path.stat().st_mtime * 1000)
    except OSError as exc:
        raise CatalogError(
            f"cannot read the catalog file {where}: {exc.strerror or exc} "
            "(give a readable path or an http(s) URL)"
        ) from exc
    return Catalog(
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
    except (ValueError, UnicodeDecodeError) as exc:
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


# --- HTTP -------------------------------------------------------------------------------------


def _fetch_http(
    url: str, *, timeout: float, attempts: int, backoff_s: float, cache: _Cache, clock: Clock
) -> Catalog:
    import httpx

    cached = cache.load()
    headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
    if cached is not None:
        if cached.etag:
            headers["If-None-Match"] = cached.etag
        if cached.last_modified:
            headers["If-Modified-Since"] = cached.last_modified
    with httpx.Client(timeout=timeout, follow_redirects=True, headers=headers) as client:
        response = _get_with_retries(client, url, timeout, attempts, backoff_s)
    if response.status_code == 304 and cached is not None:
        body = cached.read()
        if body is not None:
            with contextlib.suppress(CatalogError):
                providers = parse_catalog(body, source=url)
                return Catalog(
                    source=url,
                    providers=providers,
                    downloaded_at=cached.downloaded_at,
                    modified_at=_http_date_ms(cached.last_modified),
                    from_cache=True,
                )
        # The cached copy is gone or damaged: forget it and download afresh.
        cache.clear()
        return _fetch_http(
            url, timeout=timeout, attempts=attempts, backoff_s=backoff_s, cache=cache, clock=clock
        )
    if response.status_code != 200:
        raise CatalogError(
            f"the catalog server at {url} answered HTTP {response.status_code} "
            f"{response.reason_phrase}".rstrip()
        )
    providers = parse_catalog(response.content, source=url)
    now = clock.now_ms()
    last_modified = response.headers.get("Last-Modified")
    cache.store(
        response.content,
        etag=response.headers.get("ETag"),
        last_modified=last_modified,
        downloaded_at=now,
    )
    return Catalog(
        source=url,
        providers=providers,
        downloaded_at=now,
        modified_at=_http_date_ms(last_modified),
    )


def _get_with_retries(
    client: httpx.Client, url: str, timeout: float, attempts: int, backoff_s: float
) -> httpx.Response:
    import httpx

    problem = ""
    cause: BaseException | None = None
    for attempt in range(attempts):
        if attempt:
            time.sleep(backoff_s * 2 ** (attempt - 1))
        try:
            response = client.get(url)
        except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
            raise InvalidInput(f"{url!r} is not a usable catalog URL: {exc}") from exc
        except httpx.TimeoutException as exc:
            problem, cause = f"timed out after {timeout:g} s", exc
            continue
        except httpx.TransportError as exc:
            problem, cause = f"{type(exc).__name__}: {exc}".rstrip(": "), exc
            continue
        if response.status_code >= 500 or response.status_code == 429:
            problem, cause = f"HTTP {response.status_code} {response.reason_phrase}".rstrip(), None
            continue
        return response
    raise CatalogError(
        f"could not fetch the models.dev catalog from {url} after {attempts} attempt(s): "
        f"{problem} (check the network, raise --timeout, or use --catalog PATH)"
    ) from cause


def _http_date_ms(value: str | None) -> int | None:
    if not value:
        return None
    try:
        return int(parsedate_to_datetime(value).timestamp() * 1000)
    except (TypeError, ValueError, IndexError):
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
    """One cached body plus its validators per catalog URL; failures to write are not errors."""

    def __init__(self, folder: Path, url: str) -> None:
        key = hashlib.sha256(url.encode()).hexdigest()[:16]
        self.url = url
        self.body = folder / f"models-dev-{key}.json"
        self.meta = folder / f"models-dev-{key}.meta.json"

    def load(self) -> _Cached | None:
        try:
            meta = json.loads(self.meta.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(meta, dict) or meta.get("url") != self.url or not self.body.exists():
            return None
        etag, modified = meta.get("etag"), meta.get("last_modified")
        if not (isinstance(etag, str) or isinstance(modified, str)):
            return None
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
        if not etag and not last_modified:
            return
        meta = {
            "url": self.url,
            "etag": etag,
            "last_modified": last_modified,
            "downloaded_at": downloaded_at,
        }
        with contextlib.suppress(OSError):
            self.body.parent.mkdir(parents=True, exist_ok=True)
            _write_atomically(self.body, body)
            _write_atomically(self.meta, json.dumps(meta).encode())

    def clear(self) -> None:
        for path in (self.meta, self.body):
            with contextlib.suppress(OSError):
                path.unlink()


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
