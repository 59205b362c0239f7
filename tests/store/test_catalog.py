"""The models.dev client against a real HTTP server on 127.0.0.1 serving the fixture snapshot.

``CatalogServer`` (also used by the CLI tests) serves routes with crafted behaviour: the snapshot
with an ETag (and 304 on a matching If-None-Match), 500 then success, 500 forever, a stalled
response, truncated JSON, and JSON of the wrong shape. No test here reaches the real network.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import FIXTURE_CATALOG

from agora_cli import __version__
from agora_cli.store.catalog import (
    USER_AGENT,
    catalog_cache_dir,
    catalog_source,
    fetch_catalog,
    parse_catalog,
)
from agora_cli.store.errors import CatalogError, InvalidInput

SNAPSHOT = FIXTURE_CATALOG.read_bytes()
ETAG = '"snapshot-v1"'
LAST_MODIFIED = "Sun, 29 Nov 2026 12:00:00 GMT"


class CatalogServer:
    """A ThreadingHTTPServer in a daemon thread; records every request it answers."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.counts: dict[str, int] = {}
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                server.requests.append((self.path, {k: v for k, v in self.headers.items()}))
                server.counts[self.path] = server.counts.get(self.path, 0) + 1
                route = server.routes.get(self.path.split("?")[0])
                if route is None:
                    self._send(404, b"not found")
                else:
                    route(self, server.counts[self.path])

            def _send(
                self, status: int, body: bytes, headers: dict[str, str] | None = None
            ) -> None:
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if body:
                    self.wfile.write(body)

        self.routes: dict[str, Callable[[Any, int], None]] = {
            "/api.json": self._snapshot,
            "/flaky.json": self._flaky,
            "/down.json": lambda h, n: h._send(500, b"internal error"),
            "/stall.json": self._stall,
            "/truncated.json": lambda h, n: h._send(200, SNAPSHOT[: len(SNAPSHOT) // 2]),
            "/list.json": lambda h, n: h._send(200, b"[1, 2, 3]"),
            "/nomodels.json": lambda h, n: h._send(200, b'{"openai": {"name": "OpenAI"}}'),
            "/forbidden.json": lambda h, n: h._send(403, b"no"),
        }
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def url(self, path: str = "/api.json") -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    @staticmethod
    def _snapshot(handler: Any, _n: int) -> None:
        if handler.headers.get("If-None-Match") == ETAG:
            handler.send_response(304)
            handler.send_header("ETag", ETAG)
            handler.end_headers()
            return
        handler._send(
            200,
            SNAPSHOT,
            {"ETag": ETAG, "Last-Modified": LAST_MODIFIED, "Content-Type": "application/json"},
        )

    @staticmethod
    def _flaky(handler: Any, n: int) -> None:
        if n == 1:
            handler._send(500, b"try again")
        else:
            handler._send(200, SNAPSHOT)

    def _stall(self, handler: Any, _n: int) -> None:
        self.release.wait(5)
        handler._send(200, SNAPSHOT)


@pytest.fixture
def server() -> Iterator[CatalogServer]:
    srv = CatalogServer()
    yield srv
    srv.close()


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGORA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("AGORA_MODELS_DEV_URL", str(FIXTURE_CATALOG))


def fetch(url: str, **kwargs: Any) -> Any:
    kwargs.setdefault("backoff_s", 0.01)
    return fetch_catalog(url, **kwargs)


def test_fetches_the_snapshot_over_http_with_agoras_user_agent(server: CatalogServer) -> None:
    catalog = fetch(server.url())
    assert catalog.source == server.url()
    assert len(catalog.providers) == 147
    assert catalog.model_count == 5276
    assert catalog.entry("openai", "gpt-4o-mini")["cost"]["input"] == 0.15
    assert catalog.from_cache is False
    ((_path, headers),) = server.requests
    assert headers["User-Agent"] == USER_AGENT == f"agora/{__version__}"
    assert "If-None-Match" not in headers
    # Last-Modified is the catalog's age.
    assert catalog.modified_at == 1_795_953_600_000
    assert catalog.age_ms(1_795_953_600_000 + 5_000) == 5_000


def test_500_then_success_is_retried(server: CatalogServer) -> None:
    catalog = fetch(server.url("/flaky.json"))
    assert catalog.model_count == 5276
    assert server.counts["/flaky.json"] == 2


def test_500_forever_fails_after_bounded_retries(server: CatalogServer) -> None:
    with pytest.raises(CatalogError) as info:
        fetch(server.url("/down.json"), attempts=3)
    assert server.counts["/down.json"] == 3
    assert info.value.exit_code == 3
    assert "after 3 attempt(s)" in info.value.message
    assert "HTTP 500" in info.value.message


def test_a_4xx_is_not_retried(server: CatalogServer) -> None:
    with pytest.raises(CatalogError, match="HTTP 403"):
        fetch(server.url("/forbidden.json"))
    assert server.counts["/forbidden.json"] == 1


def test_a_stalled_response_hits_the_timeout(server: CatalogServer) -> None:
    started = time.monotonic()
    with pytest.raises(CatalogError, match=r"timed out after 0\.2 s") as info:
        fetch(server.url("/stall.json"), timeout=0.2, attempts=2)
    assert time.monotonic() - started < 3
    assert server.counts["/stall.json"] == 2
    assert isinstance(info.value.__cause__, httpx.TimeoutException)


def test_unreachable_server_is_a_catalog_error_chained_from_httpx() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(CatalogError, match="after 2 attempt") as info:
        fetch(f"http://127.0.0.1:{port}/api.json", attempts=2)
    assert isinstance(info.value.__cause__, httpx.ConnectError)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/truncated.json", "is not valid JSON"),
        ("/list.json", "expected a non-empty JSON object keyed by provider id"),
        ("/nomodels.json", "provider 'openai' has no 'models' object"),
    ],
)
def test_malformed_catalogs_are_clear_errors_and_never_cached(
    server: CatalogServer, tmp_path: Path, path: str, message: str
) -> None:
    with pytest.raises(CatalogError, match=message) as info:
        fetch(server.url(path))
    assert info.value.exit_code == 3
    assert server.counts[path] == 1  # a bad body is not retried
    cache = tmp_path / "cache"
    assert not cache.exists() or not any(cache.iterdir())


def test_a_repeated_fetch_revalidates_the_cache_with_the_etag(
    server: CatalogServer, tmp_path: Path
) -> None:
    first = fetch(server.url())
    assert first.from_cache is False
    second = fetch(server.url())
    assert second.from_cache is True
    assert second.providers == first.providers
    assert second.downloaded_at == first.downloaded_at
    assert second.modified_at == first.modified_at
    (_p1, h1), (_p2, h2) = server.requests
    assert "If-None-Match" not in h1
    assert h2["If-None-Match"] == ETAG
    assert h2["If-Modified-Since"] == LAST_MODIFIED
    assert len(list((tmp_path / "cache").glob("models-dev-*.json"))) == 2  # body + validators


def test_a_damaged_cache_is_dropped_and_the_catalog_downloaded_again(
    server: CatalogServer, tmp_path: Path
) -> None:
    fetch(server.url())
    (body,) = [p for p in (tmp_path / "cache").glob("*.json") if ".meta." not in p.name]
    body.write_bytes(b"{ damaged")
    again = fetch(server.url())
    assert again.model_count == 5276 and again.from_cache is False
    assert [h.get("If-None-Match") for _p, h in server.requests] == [None, ETAG, None]
    assert body.read_bytes() == SNAPSHOT


def test_reads_a_file_path_and_file_url(tmp_path: Path) -> None:
    assert fetch_catalog(str(FIXTURE_CATALOG)).model_count == 5276
    assert fetch_catalog(f"file://{FIXTURE_CATALOG}").model_count == 5276
    with pytest.raises(CatalogError, match="cannot read the catalog file"):
        fetch_catalog(str(tmp_path / "absent.json"))


def test_the_source_comes_from_the_argument_then_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert catalog_source("x.json") == "x.json"
    assert catalog_source(None) == str(FIXTURE_CATALOG)
    assert fetch_catalog().source == str(FIXTURE_CATALOG)
    monkeypatch.delenv("AGORA_MODELS_DEV_URL")
    assert catalog_source(None) == "https://models.dev/api.json"


def test_cache_dir_honours_agora_cache_dir_then_xdg(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert catalog_cache_dir() == tmp_path / "cache"
    monkeypatch.delenv("AGORA_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert catalog_cache_dir() == tmp_path / "xdg" / "agora"


def test_timeout_must_be_positive() -> None:
    with pytest.raises(InvalidInput, match="--timeout"):
        fetch_catalog(str(FIXTURE_CATALOG), timeout=0)


def test_parse_rejects_entries_of_the_wrong_shape() -> None:
    with pytest.raises(CatalogError, match="openai/m is not an object"):
        parse_catalog(b'{"openai": {"models": {"m": 3}}}')
    with pytest.raises(CatalogError, match="the cost of openai/m is not an object"):
        parse_catalog(b'{"openai": {"models": {"m": {"cost": "cheap"}}}}')
    with pytest.raises(CatalogError, match="not valid JSON"):
        parse_catalog(b"\xff\xfe")
    assert parse_catalog('{"p": {"models": {}}}') == {"p": {}}
