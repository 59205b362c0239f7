"""`agora prices …`: exit codes and the JSON documents of cli.md, stdout and stderr apart.

The catalog comes from the fixture snapshot, as a file or served over HTTP by a server on
127.0.0.1 in a thread of this process; ``AGORA_MODELS_DEV_URL`` and ``AGORA_CACHE_DIR`` point at
local things so that nothing here can reach the real network.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from helpers import FIXTURE_CATALOG, no_data, run_agora
from sqlalchemy import func, select

from agora_cli.store import _schema as schema
from agora_cli.store._engine import open_engine

# No network, no shared cache: AGORA_CACHE_DIR in tmp_path, the fixture file as the catalog.
pytestmark = pytest.mark.usefixtures("offline_catalog")

SNAPSHOT = FIXTURE_CATALOG.read_bytes()
ISO_MS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
SEED_KEYS = {
    "model",
    "catalog_id",
    "input_per_1m",
    "output_per_1m",
    "cache_read_per_1m",
    "cache_write_per_1m",
    "tiers",
    "action",
}
RESOLVE_KEYS = {"model_id", "matched", "rule", "price", "provider", "route", "date", "explanation"}
PRICE_KEYS = {
    "model",
    "input_per_1m",
    "output_per_1m",
    "cache_read_per_1m",
    "cache_write_per_1m",
    "tiers",
    "source",
    "effective_from",
    "is_current",
}


class Server:
    """Serves the snapshot (ETag + 304) at /api.json, 500 at /down.json, half of it at /cut.json,
    one byte every half second at /drip.json, a redirect loop at /loop.json, and at /switch.json
    the snapshot or a 500 as ``mode`` says."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []
        self.mode = "ok"
        self.stop = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                outer.seen.append({"path": self.path, **dict(self.headers.items())})
                try:
                    self._answer()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up, as it should

            def _answer(self) -> None:
                if self.path == "/drip.json":
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(SNAPSHOT)))
                    self.end_headers()
                    for i in range(len(SNAPSHOT)):
                        if outer.stop.wait(0.5):
                            return
                        self.wfile.write(SNAPSHOT[i : i + 1])
                        self.wfile.flush()
                    return
                if self.path == "/loop.json":
                    self.send_response(302)
                    self.send_header("Location", "/loop.json")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.path == "/switch.json" and outer.mode != "ok":
                    self.send_response(500)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.path == "/api.json" and self.headers.get("If-None-Match") == '"v1"':
                    self.send_response(304)
                    self.end_headers()
                    return
                status, body = {
                    "/api.json": (200, SNAPSHOT),
                    "/switch.json": (200, SNAPSHOT),
                    "/down.json": (500, b"down"),
                    "/cut.json": (200, SNAPSHOT[:1000]),
                }.get(self.path, (404, b""))
                self.send_response(status)
                self.send_header("ETag", '"v1"')
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()

    def url(self, path: str = "/api.json") -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server()
    yield srv
    srv.stop.set()
    srv.httpd.shutdown()
    srv.httpd.server_close()


def count_prices(url: str) -> int:
    engine = open_engine(url)
    with engine.connect() as conn:
        n = conn.execute(select(func.count()).select_from(schema.model_pricing)).scalar_one()
    engine.dispose()
    return int(n)


def add_ledger(url: str, rows: list[tuple[str, int, float | None, str | None]]) -> None:
    """Ledger rows ``(model_id, created_at, cost_usd, cost_source)`` on one thread."""
    engine = open_engine(url)
    with engine.begin() as conn:
        conn.execute(
            schema.thread.insert().values(
                id="t1", actor_ref="alice", title="t", created_at=0, updated_at=0
            )
        )
        conn.execute(
            schema.token_usage.insert(),
            [
                {
                    "id": f"u{i}",
                    "thread_id": "t1",
                    "actor_ref": "alice",
                    "model_id": model,
                    "purpose": "chat",
                    "input_tokens": 1_000_000,
                    "output_tokens": 500_000,
                    "cost_usd": cost,
                    "cost_source": source,
                    "created_at": at,
                }
                for i, (model, at, cost, source) in enumerate(rows)
            ],
        )
    engine.dispose()


def assert_error(r: Any, code: int, text: str) -> None:
    assert r.exit_code == code, (r.stdout, r.stderr)
    assert no_data(r)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert text in lines[0]


# --- seed -------------------------------------------------------------------------------------


def test_seed_json_over_http(cli: Any, db_url: str, server: Server) -> None:
    r = cli(
        "prices", "seed", "openai/gpt-4o-mini", "--catalog", server.url(), "--db", db_url, "--json"
    )
    assert r.exit_code == 0, r.stderr
    assert r.stderr == ""
    assert r.json() == {
        "catalog": server.url(),
        "prices": [
            {
                "model": "gpt-4o-mini",
                "catalog_id": "openai/gpt-4o-mini",
                "input_per_1m": 0.15,
                "output_per_1m": 0.6,
                "cache_read_per_1m": 0.075,
                "cache_write_per_1m": None,
                "tiers": None,
                "action": "inserted",
            }
        ],
    }
    assert server.seen[0]["User-Agent"].startswith("agora/")
    # again: a conditional request answered 304 from the cache; nothing changes
    r = cli(
        "prices", "seed", "openai/gpt-4o-mini", "--catalog", server.url(), "--db", db_url, "--json"
    )
    assert r.exit_code == 0, r.stderr
    assert r.json()["prices"][0]["action"] == "unchanged"
    assert server.seen[1]["If-None-Match"] == '"v1"'
    assert count_prices(db_url) == 1


def test_seed_tiers_and_slashes_in_json(cli: Any, db_url: str) -> None:
    r = cli(
        "prices",
        "seed",
        "google/gemini-2.5-pro",
        "openrouter/anthropic/claude-sonnet-4",
        "--db",
        db_url,
        "--json",
    )
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert set(doc) == {"catalog", "prices"} and doc["catalog"] == str(FIXTURE_CATALOG)
    gemini, sonnet = doc["prices"]
    assert set(gemini) == SEED_KEYS
    assert gemini["tiers"] == [
        {
            "input": 2.5,
            "output": 15.0,
            "cache_read": 0.25,
            "tier": {"type": "context", "size": 200000},
        }
    ]
    assert (sonnet["model"], sonnet["catalog_id"]) == (
        "anthropic/claude-sonnet-4",
        "openrouter/anthropic/claude-sonnet-4",
    )


def test_seed_for_people_shows_old_and_new_rates(cli: Any, db_url: str) -> None:
    assert (
        cli(
            "prices", "set", "gpt-4o-mini", "--input", "0.1", "--output", "0.4", "--db", db_url
        ).exit_code
        == 0
    )
    r = cli("prices", "seed", "openai/gpt-4o-mini", "--db", db_url)
    assert r.exit_code == 0, r.stderr
    assert "updated" in r.stdout
    assert "input 0.1 → 0.15" in r.stdout and "output 0.4 → 0.6" in r.stdout
    assert "5,276 models" in r.stderr  # the catalog and its age, on stderr
    assert "last changed" in r.stderr


def test_seed_dry_run_writes_nothing(cli: Any, db_url: str) -> None:
    r = cli("prices", "seed", "openai/gpt-4o-mini", "--dry-run", "--db", db_url, "--json")
    assert r.exit_code == 0, r.stderr
    assert [p["action"] for p in r.json()["prices"]] == ["inserted"]
    assert count_prices(db_url) == 0
    r = cli("prices", "seed", "openai/gpt-4o-mini", "--dry-run", "--db", db_url)
    assert "nothing was written" in r.stderr
    assert count_prices(db_url) == 0


def test_seed_a_missing_or_unpriced_model_is_exit_1_and_writes_nothing(
    cli: Any, db_url: str
) -> None:
    r = cli("prices", "seed", "openai/gpt-4o-mini", "openai/gpt-4o-mni", "--db", db_url, "--json")
    assert_error(r, 1, "openai/gpt-4o-mni is not in the catalog (did you mean openai/gpt-4o-mini")
    r = cli("prices", "seed", "openai/gpt-image-1", "--db", db_url)
    assert_error(r, 1, "openai/gpt-image-1 has no price in the catalog")
    r = cli("prices", "seed", "nosuchprovider/x", "--db", db_url)
    assert_error(r, 1, "provider 'nosuchprovider' is not in the catalog")
    assert count_prices(db_url) == 0


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["gpt-4o-mini"], "is not PROVIDER/MODEL"),
        (["openai/"], "is not PROVIDER/MODEL"),
        ([], "or use --missing"),
        (["openai/gpt-4o", "--missing"], "not both"),
        (["openai/gpt-4o", "--timeout", "0"], "--timeout must be a number of seconds above 0"),
        (["openai/" + "x" * 256], "is 256 UTF-16 code units long; the limit is 255"),
    ],
)
def test_seed_usage_errors_are_exit_2(cli: Any, db_url: str, args: list[str], text: str) -> None:
    assert_error(cli("prices", "seed", *args, "--db", db_url), 2, text)
    assert count_prices(db_url) == 0


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "0", "-1", "601"])
def test_seed_timeout_out_of_range_is_exit_2_before_anything_is_done(
    cli: Any, server: Server, tmp_path: Path, value: str
) -> None:
    # No database and a catalog server that records requests: neither is touched.
    r = cli(
        "prices",
        "seed",
        "openai/gpt-4o-mini",
        "--timeout",
        value,
        "--catalog",
        server.url(),
        "--db",
        f"sqlite:///{tmp_path / 'absent.db'}",
        "--json",
    )
    assert_error(r, 2, "--timeout must be a number of seconds above 0 and at most 600")
    assert r.json()["error"]["kind"] == "invalid_input"
    assert server.seen == []
    assert not (tmp_path / "absent.db").exists()


@pytest.mark.slow
def test_seed_timeout_bounds_a_dripping_catalog(cli: Any, db_url: str, server: Server) -> None:
    started = time.monotonic()
    r = cli(
        "prices",
        "seed",
        "openai/gpt-4o-mini",
        "--catalog",
        server.url("/drip.json"),
        "--timeout",
        "2",
        "--db",
        db_url,
    )
    assert time.monotonic() - started < 3.5
    assert_error(r, 3, "timed out after 2 s")
    assert count_prices(db_url) == 0


def test_seed_a_catalog_path_that_never_ends_is_exit_3(cli: Any, db_url: str) -> None:
    r = cli("prices", "seed", "openai/gpt-4o-mini", "--catalog", "/dev/zero", "--db", db_url)
    assert_error(r, 3, "the catalog file /dev/zero is larger than 64 MiB")
    assert count_prices(db_url) == 0


def test_seed_a_redirect_loop_is_exit_3_naming_it(cli: Any, db_url: str, server: Server) -> None:
    r = cli(
        "prices",
        "seed",
        "openai/gpt-4o-mini",
        "--catalog",
        server.url("/loop.json"),
        "--db",
        db_url,
        "--json",
    )
    assert_error(r, 3, "redirects too many times (a redirect loop?)")
    assert r.json()["error"]["kind"] == "catalog_error"


def test_seed_falls_back_to_the_cached_catalog_with_a_warning(
    cli: Any, db_url: str, server: Server
) -> None:
    url = server.url("/switch.json")
    seed = ("prices", "seed", "openai/gpt-4o-mini", "--catalog", url, "--db", db_url)
    r = cli(*seed, "--json")
    assert r.exit_code == 0 and r.stderr == ""
    assert set(r.json()) == {"catalog", "prices"}  # a fresh catalog: the documented keys only
    server.mode = "down"
    r = cli(*seed, "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert doc["catalog"] == url
    assert doc["catalog_stale"] is True and 0 <= doc["catalog_age_s"] < 10
    assert "after 3 attempt(s): HTTP 500" in doc["catalog_error"]
    assert doc["prices"][0]["action"] == "unchanged"
    assert re.match(r"warning: using the cached catalog from \d seconds? ago: could not", r.stderr)
    assert "HTTP 500" in r.stderr
    r = cli(*seed)
    assert r.exit_code == 0 and "warning: using the cached catalog" in r.stderr


def test_seed_offline_uses_only_the_cache(
    cli: Any, db_url: str, server: Server, tmp_path: Path
) -> None:
    url = server.url("/switch.json")
    seed = ("prices", "seed", "openai/gpt-4o-mini", "--catalog", url, "--offline", "--db", db_url)
    r = cli(*seed, "--json")
    assert_error(r, 3, "--offline: there is no cached copy of the catalog from " + url)
    assert server.seen == []
    assert cli("prices", "seed", "openai/gpt-4o", "--catalog", url, "--db", db_url).exit_code == 0
    r = cli(*seed, "--json")
    assert r.exit_code == 0, r.stderr
    assert len(server.seen) == 1
    doc = r.json()
    assert (doc["catalog_stale"], doc["catalog_error"]) == (True, None)
    assert doc["prices"][0]["action"] == "inserted"
    r = cli(*seed)
    assert r.exit_code == 0 and "(--offline)" in r.stderr and len(server.seen) == 1


PASSWORD = "s3cret-Pa55word"


def test_a_password_in_the_catalog_url_is_never_printed(
    cli: Any, db_url: str, server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = server.url().replace("127.0.0.1", f"agent:{PASSWORD}@127.0.0.1")
    masked = server.url().replace("127.0.0.1", "agent:***@127.0.0.1")
    outputs = []
    r = cli("prices", "seed", "openai/gpt-4o-mini", "--catalog", secret, "--db", db_url, "--json")
    assert r.exit_code == 0 and r.json()["catalog"] == masked
    outputs.append(r)
    r = cli("prices", "seed", "openai/gpt-4o-mini", "--catalog", secret, "--db", db_url)
    assert r.exit_code == 0 and f"catalog {masked}:" in r.stderr
    outputs.append(r)
    monkeypatch.setenv("AGORA_MODELS_DEV_URL", secret.replace("/api.json", "/down.json"))
    for before, after in (((), ("--json",)), ((), ()), (("--debug",), ())):
        r = cli(*before, "prices", "seed", "openai/gpt-4o-mini", "--db", db_url, *after)
        assert r.exit_code == 3
        assert "agent:***@127.0.0.1" in r.stderr
        outputs.append(r)
    assert "Traceback" in outputs[-1].stderr  # --debug: the traceback, scrubbed
    for r in outputs:
        assert PASSWORD not in r.stdout + r.stderr
    for path in (tmp_path / "cache").iterdir():
        assert PASSWORD not in path.read_text(encoding="utf-8", errors="replace")


def test_seed_catalog_failures_are_exit_3_and_write_nothing(
    cli: Any, db_url: str, server: Server, tmp_path: Path
) -> None:
    r = cli(
        "prices", "seed", "openai/gpt-4o-mini", "--catalog", server.url("/cut.json"), "--db", db_url
    )
    assert_error(r, 3, "is not valid JSON")
    r = cli(
        "prices",
        "seed",
        "openai/gpt-4o-mini",
        "--catalog",
        str(tmp_path / "nope.json"),
        "--db",
        db_url,
    )
    assert_error(r, 3, "cannot read the catalog file")
    r = cli(
        "prices",
        "seed",
        "openai/gpt-4o-mini",
        "--catalog",
        server.url("/down.json"),
        "--db",
        db_url,
        "--json",
    )
    assert_error(r, 3, "after 3 attempt(s): HTTP 500")
    assert sum(1 for s in server.seen if s["path"] == "/down.json") == 3
    assert count_prices(db_url) == 0


def test_seed_missing_json(cli: Any, db_url: str) -> None:
    gov = "us-gov.anthropic.claude-3-5-sonnet-20240620-v1:0"
    add_ledger(
        db_url,
        [
            ("gpt-4o-mini-2024-07-18", 1, None, None),
            ("us.anthropic.claude-haiku-4-5-20251001-v1:0", 2, None, None),
            (gov, 3, None, None),
            ("MiniMax-M1", 4, None, None),
            ("gpt-4o", 5, None, None),
        ],
    )
    assert (
        cli("prices", "set", "gpt-4o", "--input", "9", "--output", "9", "--db", db_url).exit_code
        == 0
    )
    r = cli("prices", "seed", "--missing", "--db", db_url, "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert set(doc) == {"catalog", "prices", "skipped"}
    assert [(p["model"], p["catalog_id"], p["action"]) for p in doc["prices"]] == [
        ("gpt-4o-mini", "openai/gpt-4o-mini", "inserted"),
        (
            "us.anthropic.claude-haiku-4-5-20251001-v1:0",
            "amazon-bedrock/us.anthropic.claude-haiku-4-5-20251001-v1:0",
            "inserted",
        ),
    ]
    assert all(set(p) == SEED_KEYS for p in doc["prices"])
    assert doc["skipped"] == [
        {
            "model_id": "MiniMax-M1",
            "reason": "ambiguous",
            "candidates": ["302ai/MiniMax-M1", "nano-gpt/MiniMax-M1"],
        },
        {"model_id": gov, "reason": "govcloud", "candidates": []},
    ]
    r = cli("prices", "list", "--model", "gpt-4o", "--db", db_url, "--json")
    assert [p["input_per_1m"] for p in r.json()["prices"]] == [9.0]  # never overwritten
    r = cli("prices", "seed", "--missing", "--db", db_url)
    assert r.exit_code == 0
    assert "skipped   MiniMax-M1: providers disagree" in r.stdout
    assert "GovCloud" in r.stdout


# --- set, list, resolve -----------------------------------------------------------------------


def test_set_list_and_history_json(cli: Any, db_url: str) -> None:
    r = cli(
        "prices",
        "set",
        "my-model",
        "--input",
        "3",
        "--output",
        "15",
        "--cache-read",
        "0.3",
        "--db",
        db_url,
        "--json",
    )
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert set(doc) == PRICE_KEYS | {"action"}
    assert (doc["model"], doc["action"], doc["source"], doc["is_current"]) == (
        "my-model",
        "inserted",
        "manual",
        True,
    )
    assert (
        doc["input_per_1m"],
        doc["output_per_1m"],
        doc["cache_read_per_1m"],
        doc["cache_write_per_1m"],
    ) == (3.0, 15.0, 0.3, None)
    assert ISO_MS.match(doc["effective_from"])
    again = cli(
        "prices",
        "set",
        "my-model",
        "--input",
        "3",
        "--output",
        "15",
        "--cache-read",
        "0.3",
        "--db",
        db_url,
        "--json",
    )
    assert again.json()["action"] == "unchanged"
    assert again.json()["effective_from"] == doc["effective_from"]
    r = cli("prices", "set", "my-model", "--input", "4", "--output", "15", "--db", db_url)
    assert r.exit_code == 0 and "input 3 → 4" in r.stdout

    current = cli("prices", "list", "--db", db_url, "--json").json()
    assert set(current) == {"prices"}
    assert [(p["model"], p["input_per_1m"], p["is_current"]) for p in current["prices"]] == [
        ("my-model", 4.0, True)
    ]
    assert set(current["prices"][0]) == PRICE_KEYS
    history = cli(
        "prices", "list", "--history", "--model", "my-model", "--db", db_url, "--json"
    ).json()
    assert [(p["input_per_1m"], p["is_current"]) for p in history["prices"]] == [
        (4.0, True),
        (3.0, False),
    ]
    assert cli("prices", "list", "--model", "other", "--db", db_url, "--json").json() == {
        "prices": []
    }
    table = cli("prices", "list", "--history", "--db", db_url)
    assert table.exit_code == 0 and "my-model" in table.stdout


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["m", "--input", "-1", "--output", "1"], "--input must be a number from 0 to 1e+06"),
        (["m", "--input", "1", "--output", "nan"], "--output must be a finite number"),
        (["m", "--input", "x", "--output", "1"], "Invalid value for '--input'"),
        (["m", "--input", "1"], "Missing option '--output'"),
        (["m", "--input", "1e300", "--output", "1"], "--input must be a number from 0 to 1e+06"),
        (["m", "--input", "1", "--output", "inf"], "--output must be a finite number"),
        (["m", "--input", "1", "--output", "1", "--cache-read", "2e6"], "--cache-read must be"),
        (["m", "--input", "1", "--output", "1", "--cache-write", "-0.5"], "--cache-write must"),
        (["x" * 256, "--input", "1", "--output", "1"], "model_id is 256 UTF-16 code units"),
    ],
)
def test_set_bad_input_is_exit_2(cli: Any, db_url: str, args: list[str], text: str) -> None:
    r = cli("prices", "set", *args, "--db", db_url, "--json")
    assert_error(r, 2, text)
    assert count_prices(db_url) == 0


def test_resolve_json_exit_0_either_way(cli: Any, db_url: str) -> None:
    cli("prices", "set", "gpt-4o-mini", "--input", "0.15", "--output", "0.6", "--db", db_url)
    r = cli(
        "prices", "resolve", "openrouter/openai/gpt-4o-mini-2024-07-18", "--db", db_url, "--json"
    )
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert set(doc) == RESOLVE_KEYS
    assert (doc["model_id"], doc["matched"], doc["rule"]) == (
        "openrouter/openai/gpt-4o-mini-2024-07-18",
        "gpt-4o-mini",
        "prefix+date",
    )
    assert (doc["route"], doc["date"], doc["provider"]) == (
        "openrouter/openai/",
        "-2024-07-18",
        None,
    )
    assert doc["explanation"] == (
        "openrouter/openai/gpt-4o-mini-2024-07-18 is priced as gpt-4o-mini (the route "
        "'openrouter/openai/' was dropped and the date '-2024-07-18' was dropped); the price was "
        "set by hand."
    )
    assert set(doc["price"]) == PRICE_KEYS and doc["price"]["input_per_1m"] == 0.15
    r = cli("prices", "resolve", "gpt-4o-mini-latest", "--db", db_url, "--json")
    assert r.exit_code == 0
    assert r.json() == {
        "model_id": "gpt-4o-mini-latest",
        "matched": None,
        "rule": None,
        "price": None,
        "provider": None,
        "route": None,
        "date": None,
        "explanation": "gpt-4o-mini-latest has no price: its ledger rows have no cost.",
    }
    r = cli("prices", "resolve", "gpt-4o-mini-latest", "--db", db_url)
    assert r.exit_code == 0 and "no price" in r.stdout and "agora prices" in r.stderr


def test_resolve_says_plainly_what_was_dropped_and_whose_price_it_is(
    cli: Any, db_url: str, server: Server
) -> None:
    assert cli("prices", "seed", "openai/gpt-4o", "--db", db_url).exit_code == 0
    r = cli("prices", "resolve", "gpt-4o-2024-05-13", "--db", db_url)
    assert r.exit_code == 0, r.stderr
    said = " ".join(r.stdout.split())
    assert "gpt-4o-2024-05-13 is priced as gpt-4o (the date '-2024-05-13' was dropped)" in said
    assert "the price is openai's (models.dev)" in said
    assert "models.dev:openai" in said
    # --catalog: what the catalog says, and that seed --missing would price the dated id itself
    catalog = ("--catalog", server.url())
    r = cli("prices", "resolve", "gpt-4o-2024-05-13", *catalog, "--db", db_url, "--json")
    assert r.exit_code == 0, r.stderr
    assert r.json()["catalog"] == {
        "source": server.url(),
        "matched": "gpt-4o-2024-05-13",
        "catalog_id": "openai/gpt-4o-2024-05-13",
        "rule": "exact",
        "provider": "openai",
        "choice": "only",
        "agreeing": ["openai"],
        "passed_over": [],
        "price": {
            "model": "gpt-4o-2024-05-13",
            "input_per_1m": 5.0,
            "output_per_1m": 15.0,
            "cache_read_per_1m": None,
            "cache_write_per_1m": None,
            "tiers": None,
            "source": "models.dev:openai",
        },
        "seed_missing_would_price": True,
        "seed_missing_skipped": None,
    }
    r = cli("prices", "resolve", "gpt-4o-2024-05-13", *catalog, "--db", db_url)
    assert "agora prices seed --missing would price gpt-4o-2024-05-13" in " ".join(r.stderr.split())
    # under (c) every agreeing provider is named; a reseller passed over is named too
    r = cli("prices", "resolve", "claude-3-5-haiku-20241022", *catalog, "--db", db_url)
    assert "providers agree: 302ai, nano-gpt" in " ".join(r.stdout.split())
    r = cli("prices", "resolve", "gpt-5.4-mini-2026-03-17", *catalog, "--db", db_url, "--json")
    assert r.json()["catalog"]["passed_over"] == ["302ai/gpt-5.4-mini-2026-03-17"]
    assert r.json()["catalog"]["choice"] == "first-party"
    r = cli("prices", "resolve", "gpt-4o", *catalog, "--db", db_url, "--json")
    assert r.json()["catalog"]["seed_missing_would_price"] is False
    r = cli("prices", "resolve", "x", "--catalog", server.url("/down.json"), "--db", db_url)
    assert_error(r, 3, "could not fetch the models.dev catalog")


def test_list_shows_whose_price_it_is_and_prints_csv(cli: Any, db_url: str) -> None:
    assert cli("prices", "seed", "google/gemini-2.5-pro", "--db", db_url).exit_code == 0
    assert (
        cli("prices", "set", "=cmd", "--input", "1", "--output", "2", "--db", db_url).exit_code == 0
    )
    engine = open_engine(db_url)
    with engine.begin() as conn:  # a price seeded before the provider was recorded
        conn.execute(
            schema.model_pricing.insert().values(
                id="old",
                model_id="old-model",
                input_price_per_1m=1.0,
                output_price_per_1m=2.0,
                source="models.dev",
                effective_from=0,
                is_current=1,
            )
        )
    engine.dispose()
    r = cli("prices", "list", "--db", db_url)
    assert r.exit_code == 0, r.stderr
    assert "models.dev:google, tiered" in r.stdout
    assert "models.dev (provider not recorded)" in r.stdout
    r = cli("prices", "list", "--db", db_url, "--json")
    assert [p["source"] for p in r.json()["prices"]] == [
        "manual",
        "models.dev:google",
        "models.dev",
    ]
    r = cli("prices", "list", "--db", db_url, "--csv")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == (
        "model,input_per_1m,output_per_1m,cache_read_per_1m,cache_write_per_1m,tiers,source,"
        "effective_from,is_current"
    )
    assert lines[1].startswith("'=cmd,1.0,2.0,,,,manual,")  # a formula cell is neutralised
    gemini = next(line for line in lines if line.startswith("gemini-2.5-pro,"))
    assert gemini.startswith('gemini-2.5-pro,1.25,10.0,0.125,,"[{""input"": 2.5')
    assert gemini.endswith(",1") and "models.dev:google" in gemini
    r = cli("prices", "list", "--db", db_url, "--csv", "--json")
    assert_error(r, 2, "choose one of --json and --csv")


def test_list_model_is_exact(cli: Any, db_url: str) -> None:
    for model, rate in (("a", "1"), ("a ", "2")):
        r = cli("prices", "set", model, "--input", rate, "--output", "1", "--db", db_url)
        assert r.exit_code == 0, r.stderr
    for model, rate in (("a", 1.0), ("a ", 2.0)):
        r = cli("prices", "list", "--model", model, "--db", db_url, "--json")
        assert [(p["model"], p["input_per_1m"]) for p in r.json()["prices"]] == [(model, rate)]


# --- hostile text -----------------------------------------------------------------------------

EVIL = "evil\x1b[2J\x1b]0;pwned\x07[bold]x[/bold]\u202e"
SHOWN = "evil\\x1b[2J\\x1b]0;pwned\\x07[bold]x[/bold]\\u202e"


def assert_harmless(r: Any) -> None:
    """Nothing a terminal would obey reached it, and the id is still there, escaped."""
    for stream in (r.stdout, r.stderr):
        assert "\x1b" not in stream and "\x07" not in stream and "\u202e" not in stream
    assert SHOWN in r.stdout + r.stderr


def test_model_ids_from_the_database_are_shown_escaped(cli: Any, db_url: str) -> None:
    r = cli("prices", "set", EVIL, "--input", "1", "--output", "2", "--db", db_url)
    assert r.exit_code == 0
    assert_harmless(r)
    wide = {"COLUMNS": "200"}  # the escaped id is 48 characters: whole, not cut with "…"
    assert_harmless(cli("prices", "list", "--db", db_url, env=wide))
    assert_harmless(cli("prices", "list", "--history", "--model", EVIL, "--db", db_url, env=wide))
    r = cli("prices", "resolve", f"openrouter/{EVIL}", "--db", db_url)
    assert r.exit_code == 0 and "(rule: prefix; priced as" in r.stdout
    assert_harmless(r)
    r = cli("prices", "resolve", f"{EVIL}-latest", "--db", db_url)
    assert r.exit_code == 0 and "no price" in r.stdout
    assert_harmless(r)
    # --json keeps the exact text (JSON escapes it; a parser gets it back byte for byte)
    r = cli("prices", "list", "--db", db_url, "--json")
    assert [p["model"] for p in r.json()["prices"]] == [EVIL]
    r = cli("prices", "resolve", EVIL, "--db", db_url, "--json")
    assert (r.json()["model_id"], r.json()["matched"]) == (EVIL, EVIL)


def test_model_ids_from_the_catalog_are_shown_escaped(
    cli: Any, db_url: str, tmp_path: Path
) -> None:
    catalog = tmp_path / "cat\x1b]0;t\x07.json"
    catalog.write_text(
        json.dumps(
            {
                "prov": {
                    "models": {
                        EVIL: {"cost": {"input": 1, "output": 2}},
                        f"{EVIL}-twin": {"cost": {"input": 1, "output": 2}},
                    }
                },
                "other": {"models": {f"{EVIL}-twin": {"cost": {"input": 5, "output": 2}}}},
            }
        )
    )
    seed = ("prices", "seed", "--catalog", str(catalog), "--db", db_url)
    r = cli(*seed, f"prov/{EVIL}")
    assert r.exit_code == 0 and "inserted" in r.stdout
    assert_harmless(r)
    assert "cat\\x1b]0;t\\x07.json" in r.stderr
    r = cli(*seed, f"prov/{EVIL}", "--json")
    assert r.json()["catalog"] == str(catalog)
    assert (r.json()["prices"][0]["model"], r.json()["prices"][0]["catalog_id"]) == (
        EVIL,
        f"prov/{EVIL}",
    )
    r = cli(*seed, f"prov/{EVIL}x")  # not in the catalog: the error line is escaped too
    assert r.exit_code == 1
    assert_harmless(r)
    add_ledger(db_url, [(f"{EVIL}-twin", 1, None, None)])
    r = cli("prices", "seed", "--missing", "--catalog", str(catalog), "--db", db_url)
    said = " ".join(r.stdout.split())  # the sentence may wrap at the console width
    assert r.exit_code == 0 and "skipped" in said and "providers disagree" in said
    assert_harmless(r)
    r = cli("prices", "reprice", "--db", db_url)
    assert r.exit_code == 0
    assert_harmless(r)


# --- reprice ----------------------------------------------------------------------------------


def test_reprice_json(cli: Any, db_url: str) -> None:
    nov_30_last = 1_796_083_199_999  # 2026-11-30T23:59:59.999Z
    add_ledger(
        db_url,
        [
            ("gpt-4o-mini-2024-07-18", nov_30_last, None, None),
            ("gpt-4o-mini", nov_30_last, 0.77, "provider"),
            ("gpt-4-0613", nov_30_last, None, None),
            ("gpt-4o-mini", nov_30_last + 1, None, None),  # 2026-12-01
        ],
    )
    cli("prices", "set", "gpt-4o-mini", "--input", "0.15", "--output", "0.6", "--db", db_url)
    window = ["--from", "2026-11-30", "--to", "2026-11-30"]
    r = cli("prices", "reprice", *window, "--dry-run", "--db", db_url, "--json")
    assert r.exit_code == 0, r.stderr
    expected = {
        "repriced": 1,
        "still_unpriced": 1,
        "unpriced_models": [{"model_id": "gpt-4-0613", "rows": 1}],
    }
    assert r.json() == expected
    r = cli("prices", "reprice", *window, "--db", db_url, "--json")
    assert r.json() == expected
    r = cli("prices", "reprice", *window, "--db", db_url, "--json")
    assert r.json()["repriced"] == 0
    r = cli("prices", "reprice", "--db", db_url)
    assert r.exit_code == 0 and "1 row(s) repriced" in r.stdout and "gpt-4-0613" in r.stdout
    engine = open_engine(db_url)
    with engine.connect() as conn:
        costs = dict(
            conn.execute(select(schema.token_usage.c.id, schema.token_usage.c.cost_usd)).all()
        )
    engine.dispose()
    assert costs == {"u0": pytest.approx(0.45), "u1": 0.77, "u2": None, "u3": pytest.approx(0.45)}


def test_reprice_estimates_json(cli: Any, db_url: str) -> None:
    nov_30 = 1_796_083_199_999  # 2026-11-30T23:59:59.999Z
    add_ledger(
        db_url,
        [
            ("gpt-4o-2024-05-13", nov_30, 2.5 * 1.0 + 10.0 * 0.5, "estimate"),  # 1M in, 0.5M out
            ("gpt-4o-2024-05-13", nov_30, 7.5, "estimate"),
            ("gpt-4o-2024-05-13", nov_30 - 86_400_000, 7.5, "estimate"),  # 2026-11-29
            ("gpt-4o-2024-05-13", nov_30, 0.5, "provider"),
            ("gpt-4o", nov_30, 7.5, "estimate"),
            ("gpt-4o-2024-05-13", nov_30, None, None),
        ],
    )
    seed = ("prices", "seed", "openai/gpt-4o", "openai/gpt-4o-2024-05-13", "--db", db_url)
    assert cli(*seed).exit_code == 0
    window = ["--from", "2026-11-30", "--to", "2026-11-30"]
    reprice = ("prices", "reprice", *window, "--estimates", "--batch", "1", "--db", db_url)
    r = cli(*reprice, "--dry-run", "--json")
    assert r.exit_code == 0, r.stderr
    expected = {
        "repriced": 1,
        "still_unpriced": 0,
        "unpriced_models": [],
        "recomputed": 2,  # two $7.50 estimates at $5 + $7.50 = $12.50 each
        "before_usd": 22.5,
        "after_usd": 32.5,
    }
    assert r.json() == expected
    r = cli(*reprice, "--json")
    assert r.json() == expected
    r = cli(*reprice, "--json")
    # again: nothing left to do; the window's estimates now total $45 (u5 was filled above)
    assert r.json() == {
        **expected,
        "repriced": 0,
        "recomputed": 0,
        "before_usd": 45.0,
        "after_usd": 45.0,
    }
    engine = open_engine(db_url)
    with engine.connect() as conn:
        costs = dict(
            conn.execute(select(schema.token_usage.c.id, schema.token_usage.c.cost_usd)).all()
        )
    engine.dispose()
    assert costs == {"u0": 12.5, "u1": 12.5, "u2": 7.5, "u3": 0.5, "u4": 7.5, "u5": 12.5}
    r = cli("prices", "reprice", "--estimates", "--db", db_url)
    assert r.exit_code == 0, r.stderr
    said = " ".join(r.stdout.split())
    # 29 November's row, the only one left
    assert "1 of 5 estimated row(s) recomputed; their estimated total $52.5000 → $57.5000" in said
    r = cli("prices", "reprice", "--estimates", "--batch", "0", "--db", db_url)
    assert r.exit_code == 2


def test_seed_missing_names_whose_price_and_for_which_ledger_id(cli: Any, db_url: str) -> None:
    add_ledger(
        db_url,
        [
            ("gpt-5.4-mini-2026-03-17", 1, None, None),
            ("together_ai/meta-llama/Llama-3.3-70B-Instruct-Turbo", 2, None, None),
        ],
    )
    r = cli("prices", "seed", "--missing", "--db", db_url)
    assert r.exit_code == 0, r.stderr
    said = " ".join(r.stdout.split())
    assert "gpt-5.4-mini (openai/gpt-5.4-mini; openai, first party)" in said
    assert "for the ledger's gpt-5.4-mini-2026-03-17" in said
    assert "togetherai, named by the id's route" in said
    assert "agora prices reprice --estimates" in r.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--from", "2026-13-01"],
        ["--to", "30/11/2026"],
        ["--from", "2026-12-02", "--to", "2026-12-01"],
    ],
)
def test_reprice_bad_dates_are_exit_2(cli: Any, db_url: str, args: list[str]) -> None:
    r = cli("prices", "reprice", *args, "--db", db_url, "--json")
    assert r.exit_code == 2 and no_data(r)
    assert r.stderr.startswith("error: ")


# --- a real subprocess ------------------------------------------------------------------------


@pytest.mark.slow
def test_installed_agora_seeds_from_the_env_catalog(server: Server, tmp_path: Path) -> None:
    from agora_cli.store._provision import ensure_agent_tables

    db_url = f"sqlite:///{tmp_path / 'agora.db'}"
    engine = open_engine(db_url)
    ensure_agent_tables(engine)
    engine.dispose()
    env = {"AGORA_MODELS_DEV_URL": server.url(), "AGORA_CACHE_DIR": str(tmp_path / "c")}
    seed = ("prices", "seed", "anthropic/claude-3-5-sonnet-20241022", "--db", db_url, "--json")
    r = run_agora(*seed, env=env)
    assert r.exit_code == 0, r.stderr
    assert r.json()["catalog"] == server.url()
    assert r.json()["prices"][0]["action"] == "inserted"
    r = run_agora(
        "prices", "resolve", "claude-3-5-sonnet-20241022", "--db", db_url, "--json", env=env
    )
    assert (r.exit_code, r.json()["rule"]) == (0, "exact")
    assert [s.get("User-Agent", "").split("/")[0] for s in server.seen] == ["agora"]
