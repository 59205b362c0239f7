"""A real Prometheus (Debian's `prometheus` package) scrapes `agora metrics serve` on the demo's
data, evaluates examples/alerts.yml over what it scraped, and answers PromQL through its HTTP API.

Both processes listen on 127.0.0.1 on ports chosen at run time, and are stopped however the test
ends. Skipped without /usr/bin/prometheus unless AGORA_TEST_REQUIRE lists ``prometheus``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import ROOT, run_cli, unavailable

pytestmark = pytest.mark.slow


@pytest.fixture
def prometheus(tmp_path: Path, free_port: Any, http_get: Any) -> Iterator[Any]:
    """``start(target)``: Prometheus scraping ``target`` (host:port) every second with
    examples/alerts.yml loaded; its base URL once it is ready."""
    binary = shutil.which("prometheus") or "/usr/bin/prometheus"
    if not Path(binary).exists():
        unavailable("prometheus", "prometheus not found (apt-get install prometheus)")
    running: list[subprocess.Popen[bytes]] = []

    def start(target: str) -> str:
        shutil.copy(ROOT / "examples" / "alerts.yml", tmp_path / "alerts.yml")
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "rule_files: [alerts.yml]\n"
            "scrape_configs:\n"
            f"  - job_name: agora\n    static_configs:\n      - targets: ['{target}']\n"
        )
        port = free_port()
        log = (tmp_path / "prometheus.log").open("wb")
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        running.append(process)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert process.poll() is None, (tmp_path / "prometheus.log").read_text()
            try:
                if http_get(url + "/-/ready")[0] == 200:
                    return url
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError("Prometheus was not ready in 60 s")

    yield start
    for process in running:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _query(base: str, promql: str) -> list[dict[str, Any]]:
    from urllib.request import urlopen

    with urlopen(f"{base}/api/v1/query?query={urllib.parse.quote(promql)}", timeout=10) as got:
        status, body = got.status, got.read().decode()
    assert status == 200, body
    doc = json.loads(body)
    assert doc["status"] == "success", doc
    return list(doc["data"]["result"])


def _until(what: str, fn: Any, seconds: float = 60) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        found = fn()
        if found:
            return found
        assert time.monotonic() < deadline, f"{what}: not seen in {seconds} s"
        time.sleep(0.5)


def test_prometheus_scrapes_serve_and_answers_promql(
    demo_url: str, serve: Any, prometheus: Any, http_get: Any
) -> None:
    served = serve(demo_url, "--interval", "5s")
    base = prometheus(served.url.removeprefix("http://"))
    up = _until("the target up", lambda: _query(base, 'up{job="agora"} == 1'))
    assert up[0]["value"][1] == "1"
    # what `agora metrics --json` says the demo holds, now through PromQL
    doc = run_cli("metrics", "--json", "--db", demo_url).json()
    spend = next(f for f in doc["families"] if f["name"] == "agora_spend_turns")
    month_turns = sum(s["value"] for s in spend["samples"] if s["labels"]["period"] == "month")
    got = _until("month's turns", lambda: _query(base, 'sum(agora_spend_turns{period="month"})'))
    assert float(got[0]["value"][1]) == month_turns > 0
    states = {r["metric"]["state"]: r["value"][1] for r in _query(base, "agora_budgets")}
    assert states == {"ok": "1", "warning": "1", "exhausted": "1"}
    stuck = _query(base, 'agora_executions{state="stuck"}')
    assert [(r["metric"]["tool"], r["value"][1]) for r in stuck] == [
        ("update_invoice_address", "1")
    ]
    assert _query(base, "agora_metrics_up")[0]["value"][1] == "1"

    # ... and the example rules fire over it: the demo's exhausted day budget (no `for:`)
    def firing() -> list[dict[str, Any]]:
        status, _, body = http_get(f"{base}/api/v1/alerts")
        assert status == 200
        alerts = json.loads(body)["data"]["alerts"]
        return [a for a in alerts if a["state"] == "firing"]

    fired = _until("AgoraBudgetExhausted firing", firing)
    assert {a["labels"]["alertname"] for a in fired} >= {"AgoraBudgetExhausted"}
    exhausted = next(a for a in fired if a["labels"]["alertname"] == "AgoraBudgetExhausted")
    assert exhausted["labels"]["scope"] == "actor" and exhausted["labels"]["ref"] == "alice"
