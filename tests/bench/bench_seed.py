"""Benchmark: seeding 500 models from the full models.dev snapshot vs parsing the snapshot alone.

The snapshot is served over HTTP by a server on 127.0.0.1 in a thread of this process, so the real
client runs (download, ETag revalidation, parse, shape checks). For each dialect (SQLite file,
PostgreSQL and MariaDB in their own throw-away databases) it measures, side by side in one run:

- parse: ``parse_catalog`` of the bytes already in memory (the floor);
- fetch: a full download + parse (empty cache), and a 304 revalidation from the cache;
- seed: ``seed_prices_from_models_dev`` of N models in one transaction (all inserted), then the same
  again (all unchanged) and again with every rate changed (all updated);
- end to end: ``agora prices seed`` of the N names as the CLI runs it (in-process), from the cache.

It prints one line per figure; the ratios to ``parse`` are what count on a noisy machine.

    python tests/bench/bench_seed.py                      # 500 models, 5 repeats
    BENCH_SEED_MODELS=100 BENCH_REPEAT=2 python tests/bench/bench_seed.py
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from _common import create_database, drop_database
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT_PATH = ROOT / "tests" / "fixtures" / "models-dev-api.json"
N_MODELS = int(os.environ.get("BENCH_SEED_MODELS", "500"))
REPEAT = int(os.environ.get("BENCH_REPEAT", "5"))
RUNNER = CliRunner()


def serve(snapshot: bytes) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            if self.headers.get("If-None-Match") == '"bench"':
                self.send_response(304)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("ETag", '"bench"')
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(snapshot)))
            self.end_headers()
            self.wfile.write(snapshot)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def timed(fn: Callable[[], Any], *, setup: Callable[[], Any] | None = None) -> float:
    """Median wall time in ms over REPEAT runs after one warm-up (``setup`` runs untimed first)."""
    samples = []
    for i in range(REPEAT + 1):
        if setup is not None:
            setup()
        started = time.perf_counter()
        fn()
        if i:
            samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def pick_names(catalog: Any, n: int) -> list[str]:
    """N ``provider/model`` names with a usable price and distinct stored model ids."""
    from agora_cli.store._pricing import price_from_catalog

    names, taken = [], set()
    for provider in sorted(catalog.providers):
        for model_id, entry in sorted(catalog.providers[provider].items()):
            if model_id in taken or price_from_catalog(entry, model_id) is None:
                continue
            taken.add(model_id)
            names.append(f"{provider}/{model_id}")
            if len(names) == n:
                return names
    return names


def databases() -> list[tuple[str, str, Callable[[], None]]]:
    """(dialect, url, drop) for SQLite and each reachable server."""
    out: list[tuple[str, str, Callable[[], None]]] = []
    for dialect in ("sqlite", "postgresql", "mysql"):
        try:
            name, url = create_database(dialect, "agora_bench_seed")
        except Exception as exc:
            print(f"{dialect}: skipped ({str(exc).splitlines()[0]})")
            continue
        out.append((dialect, url, lambda d=dialect, n=name: drop_database(d, n)))
    return out


def main() -> None:
    from agora_cli.store._catalog import fetch_catalog, parse_catalog
    from agora_cli.store._engine import open_engine
    from agora_cli.store._pricing import seed_prices_from_models_dev
    from agora_cli.store._provision import ensure_agent_tables
    from agora_cli.store._schema import model_pricing

    snapshot = SNAPSHOT_PATH.read_bytes()
    httpd = serve(snapshot)
    url = f"http://127.0.0.1:{httpd.server_address[1]}/api.json"
    cache = Path(tempfile.mkdtemp(prefix="agora_bench_cache_"))
    os.environ["AGORA_CACHE_DIR"] = str(cache)
    os.environ["AGORA_MODELS_DEV_URL"] = url

    print(f"snapshot: {len(snapshot):,} bytes; models: {N_MODELS}; repeat: {REPEAT} (median)")
    parse_ms = timed(lambda: parse_catalog(snapshot))
    print(f"parse_only_ms={parse_ms:.1f}")
    json_ms = timed(lambda: json.loads(snapshot))
    print(f"json_loads_only_ms={json_ms:.1f}")

    def clear_cache() -> None:
        for p in cache.iterdir():
            p.unlink()

    import httpx

    client_ms = timed(lambda: httpx.Client().close())
    print(f"httpx_client_with_tls_context_ms={client_ms:.1f} (a fixed cost of any https fetch)")
    full_ms = timed(lambda: fetch_catalog(url, cache_dir=cache), setup=clear_cache)
    print(f"fetch_full_download_ms={full_ms:.1f} ratio_to_parse={full_ms / parse_ms:.2f}")
    fetch_catalog(url, cache_dir=cache)
    cached_ms = timed(lambda: fetch_catalog(url, cache_dir=cache))
    print(f"fetch_304_from_cache_ms={cached_ms:.1f} ratio_to_parse={cached_ms / parse_ms:.2f}")

    catalog = fetch_catalog(url, cache_dir=cache)
    names = pick_names(catalog, N_MODELS)
    bumped = json.loads(snapshot)
    for name in names:
        provider, model = name.split("/", 1)
        cost = bumped[provider]["models"][model]["cost"]
        cost["input"] = float(cost["input"]) + 1.0
    bumped_catalog = type(catalog)(
        source=url, providers=parse_catalog(json.dumps(bumped)), downloaded_at=0
    )

    from agora_cli.cli import app

    for dialect, db_url, drop in databases():
        try:
            engine = open_engine(db_url)
            ensure_agent_tables(engine)

            def wipe(engine: Any = engine) -> None:
                with engine.begin() as conn:
                    conn.execute(model_pricing.delete())

            def seed(cat: Any, engine: Any = engine) -> None:
                with engine.begin() as conn:
                    result = seed_prices_from_models_dev(conn, names, catalog=cat)
                assert len(result.prices) == len(names)

            insert_ms = timed(lambda: seed(catalog), setup=wipe)
            print(
                f"{dialect}: seed_{len(names)}_inserted_ms={insert_ms:.1f} "
                f"ratio_to_parse={insert_ms / parse_ms:.2f}"
            )
            seed(catalog)
            same_ms = timed(lambda: seed(catalog))
            print(
                f"{dialect}: seed_{len(names)}_unchanged_ms={same_ms:.1f} "
                f"ratio_to_parse={same_ms / parse_ms:.2f}"
            )

            def reset(engine: Any = engine) -> None:
                wipe(engine)
                seed(catalog, engine)

            update_ms = timed(lambda: seed(bumped_catalog), setup=reset)
            print(
                f"{dialect}: seed_{len(names)}_updated_ms={update_ms:.1f} "
                f"ratio_to_parse={update_ms / parse_ms:.2f}"
            )
            args = ["prices", "seed", *names, "--db", db_url, "--json"]

            def cli(args: list[str] = args) -> None:
                r = RUNNER.invoke(app, args, catch_exceptions=False)
                assert r.exit_code == 0, r.stderr

            cli_ms = timed(cli, setup=wipe)
            print(
                f"{dialect}: cli_seed_{len(names)}_end_to_end_ms={cli_ms:.1f} "
                f"ratio_to_parse={cli_ms / parse_ms:.2f} "
                f"db_share={insert_ms / cli_ms:.0%}"
            )
            engine.dispose()
        finally:
            drop()
    httpd.shutdown()


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
