"""`agora prices status`, and the rest of "are my prices current?" (issue 28, item 7).

Before issue 28 nothing answered it: `prices list` showed no effective date (and lost its Source
column at 60 columns), there was no `prices status`, and offline `prices seed --missing
--dry-run` retried a connection that could not be made (8 s of backoff, then exit 3).

The live catalog is served by a real HTTP server on 127.0.0.1 (a free port), whose body a test
changes to play the catalog moving on; stopping it makes the port refuse, as offline.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from helpers import FIXTURE_CATALOG, no_data

from agora_cli.store import _schema as schema
from agora_cli.store._engine import open_engine

# No network, no shared cache: AGORA_CACHE_DIR in tmp_path, the fixture file as the catalog.
pytestmark = pytest.mark.usefixtures("offline_catalog")

SNAPSHOT = FIXTURE_CATALOG.read_bytes()
STATUS_KEYS = {"current", "catalog", "from", "to", "prices", "new_models", "unpriced", "counts"}
CATALOG_KEYS = {"source", "compared_with", "live_error", "modified_at", "downloaded_at", "cache"}
COUNT_KEYS = {
    "unchanged",
    "changed",
    "missing",
    "no_price",
    "not_from_catalog",
    "new_models",
    "unpriced_models",
    "unpriced_turns",
}
ISO_MS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


class CatalogServer:
    """Serves ``body`` at /api.json with an ETag (304 when the client has it); ``stop()``
    closes the port, so that a later fetch is refused."""

    def __init__(self, body: bytes = SNAPSHOT) -> None:
        self.body = body
        self.seen: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                outer.seen.append(self.path)
                etag = '"' + hashlib.sha256(outer.body).hexdigest()[:16] + '"'
                if self.headers.get("If-None-Match") == etag:
                    self.send_response(304)
                    self.end_headers()
                    return
                self.send_response(200 if self.path == "/api.json" else 404)
                body = outer.body if self.path == "/api.json" else b""
                self.send_header("ETag", etag)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/api.json"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()
        self.stopped = False

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.httpd.shutdown()
            self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[CatalogServer]:
    srv = CatalogServer()
    yield srv
    srv.stop()


def moved_on(doc: dict[str, Any]) -> bytes:
    """The snapshot a month later: GPT-4o dearer and without its cache rate, Claude Sonnet 4.5
    gone from Anthropic's listing, two new OpenAI models, one from a provider agora never priced
    (the ledger's brand-new-model) and one nobody asked about."""
    doc = json.loads(json.dumps(doc))
    openai = doc["openai"]["models"]
    openai["gpt-4o"]["cost"] = {"input": 3.0, "output": 10.0}
    openai["gpt-9"] = {"id": "gpt-9", "cost": {"input": 9.0, "output": 90.0}}
    del doc["anthropic"]["models"]["claude-sonnet-4-5"]
    doc["somecorp"] = {
        "id": "somecorp",
        "models": {
            "brand-new-model": {"id": "brand-new-model", "cost": {"input": 1.0, "output": 2.0}},
            "other-model": {"id": "other-model", "cost": {"input": 1.0, "output": 2.0}},
        },
    }
    return json.dumps(doc).encode()


def add_ledger(url: str, rows: list[tuple[str, float | None]]) -> None:
    """Ledger rows ``(model_id, cost_usd)``, today, on one thread."""
    import time

    now = int(time.time() * 1000)
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
                    "input_tokens": 1000,
                    "output_tokens": 500,
                    "cost_usd": cost,
                    "cost_source": None if cost is None else "estimate",
                    "created_at": now - i,
                }
                for i, (model, cost) in enumerate(rows)
            ],
        )
    engine.dispose()


def seed(cli: Any, db_url: str, url: str, *names: str) -> None:
    r = cli("prices", "seed", *names, "--catalog", url, "--db", db_url)
    assert r.exit_code == 0, r.stderr


def assert_error(r: Any, code: int, text: str) -> None:
    assert r.exit_code == code, (r.stdout, r.stderr)
    assert no_data(r)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert text in lines[0], lines[0]


# --- prices status ----------------------------------------------------------------------------


def test_status_finds_what_changed_what_is_gone_what_is_new_and_what_has_no_cost(
    cli: Any, db_url: str, server: CatalogServer
) -> None:
    seed(cli, db_url, server.url, "openai/gpt-4o", "anthropic/claude-sonnet-4-5", "openai/o3")
    assert cli("prices", "set", "my-model", "--input", "1", "--output", "2", "--db", db_url)
    add_ledger(db_url, [("gpt-4o", 0.01), ("brand-new-model", None), ("brand-new-model", None)])
    server.body = moved_on(json.loads(SNAPSHOT))

    r = cli("prices", "status", "--catalog", server.url, "--db", db_url, "--json")
    assert r.exit_code == 1, r.stderr
    assert r.stderr == ""
    doc = r.json()
    assert set(doc) == STATUS_KEYS and set(doc["catalog"]) == CATALOG_KEYS
    assert set(doc["counts"]) == COUNT_KEYS
    assert doc["current"] is False
    cat = doc["catalog"]
    assert (cat["source"], cat["compared_with"], cat["live_error"]) == (server.url, "live", None)
    assert ISO_MS.match(cat["downloaded_at"]) and ISO_MS.match(cat["cache"]["downloaded_at"])
    assert 0 <= cat["cache"]["age_s"] < 600
    by_model = {p["model"]: p for p in doc["prices"]}
    assert set(by_model) == {"gpt-4o", "claude-sonnet-4-5", "o3", "my-model"}
    gpt = by_model["gpt-4o"]
    assert (gpt["state"], gpt["catalog_id"], gpt["source"]) == (
        "changed",
        "openai/gpt-4o",
        "models.dev:openai",
    )
    assert gpt["changes"] == [
        {"field": "input_per_1m", "stored": 2.5, "catalog": 3.0},
        {"field": "cache_read_per_1m", "stored": 1.25, "catalog": None},
    ]
    assert ISO_MS.match(gpt["effective_from"])
    assert (by_model["claude-sonnet-4-5"]["state"], by_model["claude-sonnet-4-5"]["changes"]) == (
        "missing",
        [],
    )
    assert by_model["o3"]["state"] == "unchanged"
    assert (by_model["my-model"]["state"], by_model["my-model"]["catalog_id"]) == (
        "not_from_catalog",
        None,
    )
    # New since the cached copy: OpenAI's (a provider priced here) and the listing the ledger's
    # unpriced id needs; somecorp's other model concerns nobody here.
    assert doc["new_models"] == [
        {
            "catalog_id": "openai/gpt-9",
            "provider": "openai",
            "model": "gpt-9",
            "input_per_1m": 9.0,
            "output_per_1m": 90.0,
            "ledger_ids": [],
        },
        {
            "catalog_id": "somecorp/brand-new-model",
            "provider": "somecorp",
            "model": "brand-new-model",
            "input_per_1m": 1.0,
            "output_per_1m": 2.0,
            "ledger_ids": ["brand-new-model"],
        },
    ]
    assert doc["unpriced"] == [{"model_id": "brand-new-model", "turns": 2, "priced_as": None}]
    assert doc["counts"] == {
        "unchanged": 1,
        "changed": 1,
        "missing": 1,
        "no_price": 0,
        "not_from_catalog": 1,
        "new_models": 2,
        "unpriced_models": 1,
        "unpriced_turns": 2,
    }
    # A question, not a refresh: the cache is not written, so asking again answers the same.
    again = cli("prices", "status", "--catalog", server.url, "--db", db_url, "--json")
    assert again.exit_code == 1 and again.json()["new_models"] == doc["new_models"]

    r = cli("prices", "status", "--catalog", server.url, "--db", db_url)
    assert r.exit_code == 1
    out = " ".join(r.stdout.split())
    assert f"compared with the live catalog {server.url}; new models since the cache from" in out
    assert "input 2.5 → 3" in out and "cache read 1.25 → —" in out
    assert "no longer listed" in out and "somecorp/brand-new-model" in out
    assert "prices are not current: 1 unchanged, 1 changed, 1 no longer listed" in out
    assert "2 turn(s) of 1 model id(s) with no cost" in out
    err = " ".join(r.stderr.split())
    assert "agora prices seed openai/gpt-4o" in err


def test_status_answers_from_the_cache_when_the_live_catalog_is_unreachable(
    cli: Any, db_url: str, server: CatalogServer
) -> None:
    seed(cli, db_url, server.url, "openai/gpt-4o")
    add_ledger(db_url, [("gpt-4o", 0.01)])
    server.stop()  # the port now refuses, as a laptop offline
    r = cli("prices", "status", "--catalog", server.url, "--db", db_url, "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert doc["current"] is True
    assert doc["catalog"]["compared_with"] == "cache"
    # One attempt: a connection that cannot be made is not retried.
    assert "after 1 attempt(s): ConnectError" in doc["catalog"]["live_error"]
    assert doc["new_models"] is None  # nothing newer than the cache to compare
    assert [p["state"] for p in doc["prices"]] == ["unchanged"]
    r = cli("prices", "status", "--catalog", server.url, "--db", db_url)
    assert r.exit_code == 0
    out = " ".join(r.stdout.split())
    assert re.search(
        r"live catalog unreachable, compared with the cache from \d{4}-\d\d-\d\d \d\d:\d\d UTC "
        r"\(\d+ seconds? old\)",
        out,
    ), out
    assert "prices are current: 1 unchanged." in out
    assert "the live catalog: could not fetch" in " ".join(r.stderr.split())


def test_status_offline_reads_the_cache_without_a_request(
    cli: Any, db_url: str, server: CatalogServer
) -> None:
    r = cli("prices", "status", "--catalog", server.url, "--offline", "--db", db_url, "--json")
    assert_error(r, 3, "--offline: there is no cached copy of the catalog from " + server.url)
    assert server.seen == []
    seed(cli, db_url, server.url, "openai/gpt-4o")
    asked = len(server.seen)
    server.body = moved_on(json.loads(SNAPSHOT))
    r = cli("prices", "status", "--catalog", server.url, "--offline", "--db", db_url, "--json")
    assert r.exit_code == 0, r.stderr
    assert len(server.seen) == asked
    doc = r.json()
    assert (doc["catalog"]["compared_with"], doc["catalog"]["live_error"]) == ("cache", None)
    assert doc["prices"][0]["state"] == "unchanged"  # the cache predates the change
    r = cli("prices", "status", "--catalog", server.url, "--offline", "--db", db_url)
    assert "--offline: compared with the cache from" in " ".join(r.stdout.split())


def test_status_revalidates_the_cache_and_an_unmoved_catalog_is_current(
    cli: Any, db_url: str, server: CatalogServer
) -> None:
    seed(cli, db_url, server.url, "openai/gpt-4o", "google/gemini-2.5-pro")
    add_ledger(db_url, [("gpt-4o", 0.01), ("gemini-2.5-pro", 0.02)])
    r = cli("prices", "status", "--catalog", server.url, "--db", db_url, "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert doc["current"] is True and doc["catalog"]["compared_with"] == "live"
    assert doc["new_models"] == [] and doc["unpriced"] == []
    assert {p["state"] for p in doc["prices"]} == {"unchanged"}  # tiers compared too


def test_status_counts_turns_a_reprice_would_fill_as_not_current(
    cli: Any, db_url: str, server: CatalogServer
) -> None:
    seed(cli, db_url, server.url, "openai/gpt-4o")
    add_ledger(db_url, [("gpt-4o-2024-11-20", None)])  # priced by date, cost not stored yet
    r = cli("prices", "status", "--catalog", server.url, "--db", db_url, "--json")
    assert r.exit_code == 1
    assert r.json()["unpriced"] == [
        {"model_id": "gpt-4o-2024-11-20", "turns": 1, "priced_as": "gpt-4o"}
    ]
    r = cli("prices", "status", "--catalog", server.url, "--db", db_url)
    assert "agora prices reprice" in r.stdout
    assert cli("prices", "reprice", "--db", db_url).exit_code == 0
    r = cli("prices", "status", "--catalog", server.url, "--db", db_url, "--json")
    assert r.exit_code == 0 and r.json()["unpriced"] == []


def test_status_is_exit_3_only_when_no_catalog_can_be_read(cli: Any, db_url: str) -> None:
    srv = CatalogServer()
    srv.stop()
    r = cli("prices", "status", "--catalog", srv.url, "--db", db_url)
    assert_error(r, 3, "and there is no cached copy of that catalog to compare with")
    assert "after 1 attempt(s)" in r.stderr
    r = cli("prices", "status", "--catalog", "/nonexistent/catalog.json", "--db", db_url)
    assert_error(r, 3, "cannot read the catalog file")


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (("--timeout", "0"), "--timeout must be a number of seconds above 0"),
        (("--last", "0d"), "--last '0d'"),
        (("--last", "soon"), "--last 'soon' is not a count and a unit"),
    ],
)
def test_status_bad_input_is_exit_2(
    cli: Any, db_url: str, args: tuple[str, ...], text: str
) -> None:
    assert_error(cli("prices", "status", *args, "--db", db_url), 2, text)


def test_status_from_the_environments_catalog_file(cli: Any, db_url: str) -> None:
    # offline_catalog points AGORA_MODELS_DEV_URL at the snapshot file: no cache beside a file.
    seed(cli, db_url, str(FIXTURE_CATALOG), "openai/gpt-4o")
    r = cli("prices", "status", "--db", db_url, "--json")
    assert r.exit_code == 0, r.stderr
    cat = r.json()["catalog"]
    assert (cat["compared_with"], cat["cache"], cat["source"]) == (
        "file",
        None,
        str(FIXTURE_CATALOG),
    )
    assert r.json()["new_models"] is None


# --- prices seed, offline ---------------------------------------------------------------------


def test_seed_missing_dry_run_offline_fails_at_once_or_uses_the_cache(
    cli: Any, db_url: str, server: CatalogServer
) -> None:
    add_ledger(db_url, [("gpt-4o-mini-2024-07-18", None)])
    refused = CatalogServer()
    refused.stop()
    r = cli("prices", "seed", "--missing", "--dry-run", "--catalog", refused.url, "--db", db_url)
    # One attempt, no backoff: the exit 3 is certain once the connection is refused.
    assert_error(r, 3, "after 1 attempt(s): ConnectError")
    seed_missing = ("prices", "seed", "--missing", "--dry-run", "--catalog", server.url)
    assert cli(*seed_missing, "--db", db_url).exit_code == 0  # caches the catalog
    server.stop()
    r = cli(*seed_missing, "--db", db_url, "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert doc["catalog_stale"] is True
    assert "after 1 attempt(s): ConnectError" in doc["catalog_error"]
    assert [p["model"] for p in doc["prices"]] == ["gpt-4o-mini"]
    assert "warning: using the cached catalog from" in r.stderr


# --- prices list ------------------------------------------------------------------------------


def _terminal(width: int) -> dict[str, str]:
    # A terminal of that width (Rich's TTY_COMPATIBLE), without colour codes (--no-color).
    return {"COLUMNS": str(width), "TTY_COMPATIBLE": "1"}


@pytest.mark.parametrize("width", [60, 80, 120])
def test_list_shows_source_and_effective_date_at_any_width(
    cli: Any, db_url: str, width: int
) -> None:
    names = ("openai/gpt-4o-mini", "anthropic/claude-haiku-4-5")
    seed(cli, db_url, str(FIXTURE_CATALOG), *names)
    for history in ((), ("--history",)):
        r = cli("prices", "list", *history, "--db", db_url, "--no-color", env=_terminal(width))
        assert r.exit_code == 0, r.stderr
        lines = r.stdout.splitlines()
        assert all(len(line) <= width for line in lines), r.stdout
        header = next(line for line in lines if "Model" in line)
        since = "Since"
        # Whose price it is at every width; since when at 80 columns and wider (at 60 the
        # note on stderr says the date was hidden, after the cache rates).
        assert "Source" in header, r.stdout
        for text in ("gpt-4o-mini", "models.dev:openai", "models.dev:anthropic"):
            assert text in r.stdout, (width, r.stdout)
        if width >= 80:
            assert since in header and re.search(r"│ \d{4}-\d\d-\d\d", r.stdout), r.stdout
        else:
            hidden = f"Cache write, Cache read, {'Current, ' if history else ''}{since}"
            note = f"note: {hidden} hidden to fit {width} columns; --csv has every column"
            assert note in r.stderr, r.stderr
        if width >= 120:
            assert "Cache read" in header and "Cache write" in header
        if history and width >= 120:
            assert "Current" in header
        elif history:  # whether a row is current gives way before since when it held
            assert "Current" not in header and "Current" in r.stderr, r.stderr


def test_the_help_example_runs_verbatim(cli: Any, db_url: str) -> None:
    from typer.main import get_command

    from agora_cli.cli import app

    help_text = str(get_command(app).commands["prices"].commands["status"].help)
    example = help_text.split("Example: ", 1)[1].split()
    assert example[:3] == ["agora", "prices", "status"]
    seed(cli, db_url, str(FIXTURE_CATALOG), "openai/gpt-4o")
    r = cli(*example[1:], "--db", db_url)
    assert r.exit_code == 0, r.stderr
    assert r.json()["current"] is True and r.json()["from"] < r.json()["to"]


def test_a_password_in_the_catalog_url_is_never_shown(
    cli: Any, db_url: str, server: CatalogServer
) -> None:
    secret = server.url.replace("127.0.0.1", "agent:s3cret-Pa55@127.0.0.1")
    masked = server.url.replace("127.0.0.1", "agent:***@127.0.0.1")
    seed(cli, db_url, secret, "openai/gpt-4o")
    outputs = [
        cli("prices", "status", "--catalog", secret, "--db", db_url, *a) for a in ((), ("--json",))
    ]
    assert outputs[1].json()["catalog"]["source"] == masked
    server.stop()
    outputs += [
        cli("prices", "status", "--catalog", secret, "--db", db_url, *a) for a in ((), ("--json",))
    ]
    assert outputs[3].json()["catalog"]["compared_with"] == "cache"
    assert masked in outputs[3].json()["catalog"]["live_error"]
    for r in outputs:
        assert r.exit_code == 0, r.stderr
        assert "s3cret-Pa55" not in r.stdout + r.stderr
