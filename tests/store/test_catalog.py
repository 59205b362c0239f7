"""The models.dev client against a real HTTP server on 127.0.0.1 serving the fixture snapshot.

``CatalogServer`` (also used by the CLI tests) serves routes with crafted behaviour: the snapshot
with an ETag (and 304 on a matching If-None-Match), 500 then success, 500 forever, a stalled
response, truncated JSON, JSON of the wrong shape, a body dripped one byte every half second, a
body that stalls half-way, endless zeros, a redirect loop, basic auth, and a route whose
behaviour a test switches (``server.mode``). No test here reaches the real network.
"""

from __future__ import annotations

import base64
import math
import re
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
from agora_cli.store._catalog import (
    MAX_CATALOG_BYTES,
    USER_AGENT,
    catalog_cache_dir,
    catalog_source,
    check_timeout,
    fetch_catalog,
    parse_catalog,
    read_catalog_copies,
)
from agora_cli.store._clock import ManualClock
from agora_cli.store._errors import CatalogError, InvalidInput
from agora_cli.store._masking import scrub

# No network, no shared cache: AGORA_CACHE_DIR in tmp_path, the fixture file as the catalog.
pytestmark = pytest.mark.usefixtures("offline_catalog")

SNAPSHOT = FIXTURE_CATALOG.read_bytes()
ETAG = '"snapshot-v1"'
LAST_MODIFIED = "Sun, 29 Nov 2026 12:00:00 GMT"
USER, PASSWORD = "agent", "s3cret-Pa55word"
_CLIENT_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


class CatalogServer:
    """A ThreadingHTTPServer in a daemon thread; records every request it answers."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.counts: dict[str, int] = {}
        self.release = threading.Event()
        self.mode = "ok"
        self.sent: dict[str, int] = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                server.requests.append((self.path, {k: v for k, v in self.headers.items()}))
                server.counts[self.path] = server.counts.get(self.path, 0) + 1
                route = server.routes.get(self.path.split("?")[0])
                try:
                    if route is None:
                        self._send(404, b"not found")
                    else:
                        route(self, server.counts[self.path])
                except _CLIENT_GONE:
                    pass  # the client gave up (timeouts, size limits): that is the point

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
            "/drip.json": self._drip,
            "/late-stall.json": self._late_stall,
            "/zeros.json": self._zeros,
            "/declared-huge.json": self._declared_huge,
            "/loop.json": self._loop,
            "/plain.json": lambda h, n: h._send(200, SNAPSHOT),
            "/switch.json": self._switch,
            "/private.json": self._private,
        }
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def url(self, path: str = "/api.json", *, auth: str = "") -> str:
        return f"http://{auth}127.0.0.1:{self.httpd.server_address[1]}{path}"

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

    def _drip(self, handler: Any, _n: int) -> None:
        """The whole snapshot announced, then one byte every half second."""
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(SNAPSHOT)))
        handler.end_headers()
        for i in range(len(SNAPSHOT)):
            if self.release.wait(0.5):
                return
            handler.wfile.write(SNAPSHOT[i : i + 1])
            handler.wfile.flush()

    def _late_stall(self, handler: Any, _n: int) -> None:
        """Headers after 1.5 s, half the body, then nothing: a read that began late stalls."""
        if self.release.wait(1.5):
            return
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(SNAPSHOT)))
        handler.end_headers()
        handler.wfile.write(SNAPSHOT[: len(SNAPSHOT) // 2])
        handler.wfile.flush()
        self.release.wait(30)

    def _zeros(self, handler: Any, _n: int) -> None:
        """An endless body with no Content-Length (the connection would end it, never does)."""
        handler.send_response(200)
        handler.send_header("Connection", "close")
        handler.end_headers()
        chunk = b"0" * 65536
        path = handler.path
        while not self.release.is_set():
            handler.wfile.write(chunk)
            self.sent[path] = self.sent.get(path, 0) + len(chunk)

    @staticmethod
    def _declared_huge(handler: Any, _n: int) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(10**12))
        handler.end_headers()
        handler.wfile.write(b"{")

    @staticmethod
    def _loop(handler: Any, _n: int) -> None:
        handler.send_response(302)
        handler.send_header("Location", "/loop.json")
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    def _switch(self, handler: Any, _n: int) -> None:
        if self.mode == "ok":
            handler._send(200, SNAPSHOT)
        elif self.mode == "500":
            handler._send(500, b"down for maintenance")
        elif self.mode == "garbage":
            handler._send(200, b"<html>not json</html>")
        else:  # "stall"
            self.release.wait(5)

    @staticmethod
    def _private(handler: Any, _n: int) -> None:
        token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        if handler.headers.get("Authorization") != f"Basic {token}":
            handler._send(401, b"who are you")
        elif handler.headers.get("If-None-Match") == ETAG:
            handler._send(304, b"")
        else:
            handler._send(200, SNAPSHOT, {"ETag": ETAG})


@pytest.fixture
def server() -> Iterator[CatalogServer]:
    srv = CatalogServer()
    yield srv
    srv.close()


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
    with pytest.raises(CatalogError, match=r"after 1 attempt\(s\): timed out after 0\.2 s") as info:
        fetch(server.url("/stall.json"), timeout=0.2, attempts=2)
    assert time.monotonic() - started < 1
    # The timeout bounds the whole fetch: the first attempt used it all, so there is no second.
    assert server.counts["/stall.json"] == 1
    assert isinstance(info.value.__cause__, httpx.TransportError)


def test_a_timeout_too_short_for_anything_still_makes_one_attempt_and_says_so(
    server: CatalogServer,
) -> None:
    # A timeout used up before the first attempt once reported "after 0 attempt(s)" (building the
    # client on a loaded machine took all of 0.2 s): the first attempt is always made.
    with pytest.raises(CatalogError, match=r"after 1 attempt\(s\): timed out after 0\.001 s"):
        fetch(server.url("/stall.json"), timeout=0.001, attempts=3)
    assert server.counts.get("/stall.json", 0) <= 1


@pytest.mark.slow
def test_the_timeout_bounds_a_body_dripped_one_byte_every_half_second(
    server: CatalogServer,
) -> None:
    # httpx's timeouts are per read: each byte arrives well within one, so only a deadline over
    # the whole body ends this (before the fix it ran for the 2.4 MB × 0.5 s = two weeks).
    started = time.monotonic()
    with pytest.raises(CatalogError, match=r"timed out after 2 s") as info:
        fetch(server.url("/drip.json"), timeout=2)
    elapsed = time.monotonic() - started
    assert 1.9 < elapsed < 3.2, elapsed
    assert server.counts["/drip.json"] == 1
    assert info.value.exit_code == 3


@pytest.mark.slow
def test_the_timeout_cuts_a_read_that_began_with_more_time_than_was_left(
    server: CatalogServer,
) -> None:
    # Headers come at 1.5 s, then the body stalls: httpx's read timeout (2 s, set when the
    # attempt began) would end the read at 3.5 s; the deadline watchdog ends it at 2 s.
    started = time.monotonic()
    with pytest.raises(CatalogError, match=r"timed out after 2 s"):
        fetch(server.url("/late-stall.json"), timeout=2)
    elapsed = time.monotonic() - started
    assert 1.9 < elapsed < 3.0, elapsed


@pytest.mark.slow
def test_retries_and_backoff_fit_inside_the_timeout(server: CatalogServer) -> None:
    # 500 forever with a 1 s backoff and 5 attempts would take 1 + 2 + 4 + 8 s: a 1.5 s timeout
    # stops after the pause that still fits, and says what the last answer was.
    started = time.monotonic()
    with pytest.raises(CatalogError, match=r"after 2 attempt\(s\): HTTP 500"):
        fetch_catalog(server.url("/down.json"), timeout=1.5, attempts=5, backoff_s=1.0)
    assert time.monotonic() - started < 1.5
    assert server.counts["/down.json"] == 2


@pytest.mark.parametrize("value", [0, -1, math.inf, -math.inf, math.nan, 600.5, True, "10"])
def test_the_timeout_must_be_finite_above_0_and_at_most_600_s(value: Any) -> None:
    with pytest.raises(InvalidInput, match="timeout must be a number of seconds above 0"):
        fetch_catalog(str(FIXTURE_CATALOG), timeout=value)
    assert check_timeout(600) == 600.0
    assert check_timeout(0.001) == 0.001


# --- size -------------------------------------------------------------------------------------


def test_an_endless_body_stops_at_the_size_limit_without_buffering_more(
    server: CatalogServer,
) -> None:
    started = time.monotonic()
    with pytest.raises(CatalogError, match="is larger than 64 MiB") as info:
        fetch(server.url("/zeros.json"), timeout=60)
    assert info.value.exit_code == 3
    assert server.counts["/zeros.json"] == 1  # not retried: it would be as large again
    assert time.monotonic() - started < 30
    server.release.set()
    # The client stopped reading at the limit: the server got no further than the limit plus
    # what the sockets buffer.
    time.sleep(0.2)
    assert MAX_CATALOG_BYTES < server.sent["/zeros.json"] < MAX_CATALOG_BYTES + 32 * 2**20


def test_a_declared_length_over_the_limit_is_refused_before_reading(
    server: CatalogServer,
) -> None:
    with pytest.raises(CatalogError, match="is larger than 1 MiB"):
        fetch(server.url("/declared-huge.json"), max_bytes=2**20)
    with pytest.raises(CatalogError, match="is larger than 1,000 bytes"):
        fetch(server.url("/zeros.json"), max_bytes=1000)


def test_a_catalog_file_is_read_up_to_the_limit_only(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="larger than 64 MiB: it is not a catalog") as info:
        fetch_catalog("/dev/zero")
    assert info.value.exit_code == 3
    big = tmp_path / "big.json"
    big.write_bytes(SNAPSHOT)
    with pytest.raises(CatalogError, match="larger than 1 MiB"):
        fetch_catalog(str(big), max_bytes=2**20)
    assert fetch_catalog(str(big), max_bytes=len(SNAPSHOT)).model_count == 5276


# --- redirects --------------------------------------------------------------------------------


def test_a_redirect_loop_is_a_catalog_error_naming_it(server: CatalogServer) -> None:
    with pytest.raises(CatalogError, match="redirects too many times") as info:
        fetch(server.url("/loop.json"))
    assert info.value.exit_code == 3
    assert isinstance(info.value.__cause__, httpx.TooManyRedirects)
    assert server.counts["/loop.json"] == 21  # the first request and 20 redirects, once


def test_unreachable_server_is_a_catalog_error_chained_from_httpx_and_not_retried() -> None:
    # Connection refused (as offline: a name that does not resolve) is no transient failure:
    # the next attempt would fail alike, after the backoff (issue 28: 8 s, then exit 3).
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(CatalogError, match=r"after 1 attempt\(s\): ConnectError") as info:
        fetch(f"http://127.0.0.1:{port}/api.json", attempts=3, backoff_s=5.0)
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


def test_a_catalog_without_validators_is_cached_too(server: CatalogServer, tmp_path: Path) -> None:
    fetch(server.url("/plain.json"))
    again = fetch(server.url("/plain.json"))
    assert again.from_cache is False  # no validators: nothing to revalidate, downloaded again
    assert [h.get("If-None-Match") for _p, h in server.requests] == [None, None]
    assert len(list((tmp_path / "cache").glob("models-dev-*.json"))) == 2


# --- stale if error, offline ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        ("500", r"after 3 attempt\(s\): HTTP 500"),
        ("stall", "timed out after 0.5 s"),
        ("garbage", "is not valid JSON"),
    ],
)
def test_a_failed_fetch_falls_back_to_the_cached_copy_and_says_so(
    server: CatalogServer, mode: str, why: str
) -> None:
    clock = ManualClock(1_800_000_000_000)
    first = fetch(server.url("/switch.json"), clock=clock)
    assert (first.stale, first.from_cache) == (False, False)
    server.mode = mode
    clock.advance(3 * 86_400_000)
    # Only the stall is about the deadline: the others get time for all three attempts however
    # loaded the machine is.
    stale = fetch(server.url("/switch.json"), clock=clock, timeout=0.5 if mode == "stall" else 10)
    assert (stale.stale, stale.from_cache) == (True, True)
    assert stale.providers == first.providers
    assert stale.stale_reason is not None
    assert re.search(why, stale.stale_reason), stale.stale_reason
    assert stale.downloaded_at == first.downloaded_at
    assert stale.copy_age_ms(clock.now_ms()) == 3 * 86_400_000
    assert stale.source == server.url("/switch.json")


def test_a_failed_fetch_without_a_cached_copy_is_still_an_error(server: CatalogServer) -> None:
    server.mode = "500"
    with pytest.raises(CatalogError, match="HTTP 500"):
        fetch(server.url("/switch.json"))


def test_offline_uses_the_cached_copy_without_any_request(server: CatalogServer) -> None:
    with pytest.raises(CatalogError, match="--offline: there is no cached copy"):
        fetch(server.url("/switch.json"), offline=True)
    assert server.requests == []
    clock = ManualClock(1_800_000_000_000)
    first = fetch(server.url("/switch.json"), clock=clock)
    offline = fetch(server.url("/switch.json"), offline=True)
    assert len(server.requests) == 1
    assert (offline.stale, offline.stale_reason, offline.from_cache) == (True, None, True)
    assert offline.providers == first.providers
    # a file path is read as ever: it needs no network
    assert fetch_catalog(str(FIXTURE_CATALOG), offline=True).model_count == 5276


# --- the live catalog beside the cached copy (prices status) ---------------------------------


def _cache_files(tmp_path: Path) -> dict[str, float]:
    folder = tmp_path / "cache"
    return {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} if folder.exists() else {}


def test_copies_read_the_live_catalog_and_never_write_the_cache(
    server: CatalogServer, tmp_path: Path
) -> None:
    copies = read_catalog_copies(server.url())
    assert (copies.compared_with, copies.cached, copies.live_error) == ("live", None, None)
    assert copies.live is not None and copies.live.model_count == 5276
    assert _cache_files(tmp_path) == {}  # a question: nothing cached
    first = fetch(server.url())  # a seed caches it, with its ETag
    cached = _cache_files(tmp_path)
    assert len(cached) == 2
    copies = read_catalog_copies(server.url())
    # revalidated (304): the live copy is the cached bytes, confirmed current
    assert server.requests[-1][1].get("If-None-Match") == ETAG
    assert copies.live is not None and copies.cached is not None
    assert (copies.live.from_cache, copies.live.stale) == (True, False)
    assert copies.cached.downloaded_at == first.downloaded_at
    assert copies.current is copies.live
    assert _cache_files(tmp_path) == cached


def test_copies_answer_from_the_cache_when_the_live_catalog_fails(
    server: CatalogServer, tmp_path: Path
) -> None:
    fetch(server.url("/switch.json"))
    server.mode = "500"
    copies = read_catalog_copies(server.url("/switch.json"), backoff_s=0.01)
    assert (copies.compared_with, copies.live) == ("cache", None)
    assert copies.cached is not None and copies.current is copies.cached
    # a short, bounded look: two attempts for a transient failure
    assert copies.live_error is not None and "after 2 attempt(s): HTTP 500" in copies.live_error
    offline = read_catalog_copies(server.url("/switch.json"), offline=True)
    assert (offline.compared_with, offline.live_error, offline.offline) == ("cache", None, True)
    assert server.counts["/switch.json"] == 3  # the seed's fetch and the two attempts


def test_copies_are_an_error_only_when_neither_can_be_read(server: CatalogServer) -> None:
    server.mode = "500"
    with pytest.raises(CatalogError, match="no cached copy of that catalog to compare with"):
        read_catalog_copies(server.url("/switch.json"), backoff_s=0.01)
    with pytest.raises(CatalogError, match="--offline: there is no cached copy"):
        read_catalog_copies(server.url("/switch.json"), offline=True)
    with pytest.raises(CatalogError, match="cannot read the catalog file"):
        read_catalog_copies("/nonexistent/api.json")
    copies = read_catalog_copies(str(FIXTURE_CATALOG), offline=True)
    assert (copies.compared_with, copies.cached) == ("file", None)


# --- credentials in the URL -------------------------------------------------------------------


def test_a_password_in_the_catalog_url_is_never_shown_or_stored(
    server: CatalogServer, tmp_path: Path
) -> None:
    secret_url = server.url("/private.json", auth=f"{USER}:{PASSWORD}@")
    catalog = fetch(secret_url)
    assert catalog.model_count == 5276
    assert catalog.source == server.url("/private.json", auth=f"{USER}:***@")
    assert server.requests[0][1]["Authorization"].startswith("Basic ")
    cached = fetch(secret_url)
    assert cached.from_cache is True and PASSWORD not in cached.source
    for path in (tmp_path / "cache").iterdir():
        text = path.read_bytes().decode("utf-8", "replace")
        assert PASSWORD not in text, path
        if path.name.endswith(".meta.json"):
            assert f"{USER}:***@127.0.0.1" in text
    # In error messages, and in anything scrubbed (the command line's --debug tracebacks).
    for path in ("/down.json", "/loop.json", "/truncated.json"):
        with pytest.raises(CatalogError) as info:
            fetch(server.url(path, auth=f"{USER}:{PASSWORD}@"))
        assert PASSWORD not in info.value.message
        assert f"{USER}:***@" in info.value.message
    assert scrub(f"GET {secret_url} failed; password was {PASSWORD}") == (
        f"GET {server.url('/private.json', auth=f'{USER}:***@')} failed; password was ***"
    )


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


def test_parse_rejects_entries_of_the_wrong_shape() -> None:
    with pytest.raises(CatalogError, match="openai/m is not an object"):
        parse_catalog(b'{"openai": {"models": {"m": 3}}}')
    with pytest.raises(CatalogError, match="the cost of openai/m is not an object"):
        parse_catalog(b'{"openai": {"models": {"m": {"cost": "cheap"}}}}')
    with pytest.raises(CatalogError, match="not valid JSON"):
        parse_catalog(b"\xff\xfe")
    assert parse_catalog('{"p": {"models": {}}}') == {"p": {}}
