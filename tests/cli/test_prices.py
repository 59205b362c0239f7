"""`agora prices …`: exit codes and the JSON documents of cli.md, stdout and stderr apart.

The catalog comes from the fixture snapshot, as a file or served over HTTP by a server on
127.0.0.1 in a thread of this process; ``AGORA_MODELS_DEV_URL`` and ``AGORA_CACHE_DIR`` point at
local things so that nothing here can reach the real network.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from helpers import FIXTURE_CATALOG, no_data, run_agora
from sqlalchemy import func, select

from agora_cli.store import schema
from agora_cli.store.engine import open_engine

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
    """Serves the snapshot (ETag + 304) at /api.json, 500 at /down.json, half of it at /cut.json."""

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                outer.seen.append({"path": self.path, **dict(self.headers.items())})
                if self.path == "/api.json" and self.headers.get("If-None-Match") == '"v1"':
                    self.send_response(304)
                    self.end_headers()
                    return
                status, body = {
                    "/api.json": (200, SNAPSHOT),
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
    srv.httpd.shutdown()
    srv.httpd.server_close()


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGORA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("AGORA_MODELS_DEV_URL", str(FIXTURE_CATALOG))


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
        (["openai/gpt-4o", "--timeout", "0"], "--timeout"),
    ],
)
def test_seed_usage_errors_are_exit_2(cli: Any, db_url: str, args: list[str], text: str) -> None:
    assert_error(cli("prices", "seed", *args, "--db", db_url), 2, text)
    assert count_prices(db_url) == 0


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
        (
            "anthropic.claude-haiku-4-5-20251001-v1:0",
            "amazon-bedrock/anthropic.claude-haiku-4-5-20251001-v1:0",
            "inserted",
        ),
        ("gpt-4o-mini", "openai/gpt-4o-mini", "inserted"),
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
    ("args", "code"),
    [
        (["m", "--input", "-1", "--output", "1"], 2),
        (["m", "--input", "1", "--output", "nan"], 2),
        (["m", "--input", "x", "--output", "1"], 2),
        (["m", "--input", "1"], 2),
    ],
)
def test_set_bad_input_is_exit_2(cli: Any, db_url: str, args: list[str], code: int) -> None:
    r = cli("prices", "set", *args, "--db", db_url)
    assert r.exit_code == code and no_data(r)
    assert count_prices(db_url) == 0


def test_resolve_json_exit_0_either_way(cli: Any, db_url: str) -> None:
    cli("prices", "set", "gpt-4o-mini", "--input", "0.15", "--output", "0.6", "--db", db_url)
    r = cli(
        "prices", "resolve", "openrouter/openai/gpt-4o-mini-2024-07-18", "--db", db_url, "--json"
    )
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert set(doc) == {"model_id", "matched", "rule", "price"}
    assert (doc["model_id"], doc["matched"], doc["rule"]) == (
        "openrouter/openai/gpt-4o-mini-2024-07-18",
        "gpt-4o-mini",
        "prefix+date",
    )
    assert set(doc["price"]) == PRICE_KEYS and doc["price"]["input_per_1m"] == 0.15
    r = cli("prices", "resolve", "gpt-4o-mini-latest", "--db", db_url, "--json")
    assert r.exit_code == 0
    assert r.json() == {
        "model_id": "gpt-4o-mini-latest",
        "matched": None,
        "rule": None,
        "price": None,
    }
    r = cli("prices", "resolve", "gpt-4o-mini-latest", "--db", db_url)
    assert r.exit_code == 0 and "no price" in r.stdout and "agora prices" in r.stderr


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
    from agora_cli.store.provision import ensure_agent_tables

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
