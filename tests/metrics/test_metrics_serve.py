"""`agora metrics serve` as a real process on every dialect: a scrape answers from the last
collection (never a query), a failing group shows in the figures while the endpoint stays up,
and SIGTERM stops it cleanly."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest
from helpers import exec_sql, run_cli

pytestmark = pytest.mark.slow


def _families(text: str) -> dict[str, Any]:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(families: dict[str, Any], name: str, **labels: str) -> float | None:
    family = families.get(name)
    for sample in [] if family is None else family.samples:
        if all(sample.labels.get(k) == v for k, v in labels.items()):
            return float(sample.value)
    return None


OPENMETRICS = "application/openmetrics-text; version=1.0.0"


def _until(served: Any, check: Any, seconds: float = 30) -> dict[str, Any]:
    """Scrape until ``check(families)`` holds (the collection runs every 5 s)."""
    deadline = time.monotonic() + seconds
    while True:
        status, _, body = served.get(accept=OPENMETRICS)
        assert status == 200
        found = _families(body)
        if check(found):
            return found
        assert time.monotonic() < deadline, f"not seen in {seconds} s: {served.said()}"
        time.sleep(0.5)


def test_serve_answers_from_the_last_collection_and_shows_a_failing_group(
    demo_url: str, serve: Any
) -> None:
    served = serve(demo_url, "--interval", "5s")
    status, kind, body = served.get(accept=OPENMETRICS)
    assert status == 200 and kind.startswith("application/openmetrics-text")
    first = _families(body)
    assert _value(first, "agora_metrics_up") == 1.0
    assert _value(first, "agora_budgets", state="warning") == 1.0
    # A scrape never queries: it answers from the last collection, whose instant moves only
    # every interval (5 s), however often it is scraped.
    began = time.monotonic()
    stamps = sorted(
        {
            _value(
                _families(served.get(accept=OPENMETRICS)[2]),
                "agora_metrics_last_collect_timestamp_seconds",
            )
            or 0.0
            for _ in range(10)
        }
    )
    elapsed = time.monotonic() - began
    assert len(stamps) <= 2 + int(elapsed // 5)
    assert all(b - a >= 4.5 for a, b in itertools.pairwise(stamps))
    plain = served.get()  # no Accept: the Prometheus text format
    assert plain[0] == 200 and plain[1].startswith("text/plain; version=0.0.4")
    assert "agora_metrics_collections_total" in plain[2] and "# EOF" not in plain[2]
    only = _families(served.get("/metrics?name[]=agora_metrics_up", accept=OPENMETRICS)[2])
    assert set(only) == {"agora_metrics_up"}  # prometheus-client's name filter
    assert served.get("/")[0] == 200 and "/metrics" in served.get("/")[2]
    assert served.get("/nope")[0] == 404
    # The database loses a table: the group fails, the endpoint stays up and says so.
    from agora_cli.store._engine import open_engine

    engine = open_engine(demo_url)
    exec_sql(engine, "DROP TABLE agent_budget")
    engine.dispose()
    broken = _until(served, lambda f: _value(f, "agora_metrics_group_up", group="budgets") == 0)
    assert _value(broken, "agora_metrics_up") == 0.0
    assert _value(broken, "agora_metrics_group_up", group="spend") == 1.0
    assert "agora_budgets" not in broken and "agora_budget_used_ratio" not in broken
    assert (_value(broken, "agora_metrics_errors", group="budgets") or 0) >= 1
    success = _value(broken, "agora_metrics_last_success_timestamp_seconds") or 0
    collected = _value(broken, "agora_metrics_last_collect_timestamp_seconds") or 0
    assert 0 < success < collected
    assert "metrics group budgets failed: table agent_budget does not exist" in served.said()
    # ... and recovers once the table is back.
    assert run_cli("db", "provision", "--db", demo_url).exit_code == 0
    _until(served, lambda f: _value(f, "agora_metrics_up") == 1.0)
    assert "metrics group budgets read again" in served.said()
    assert served.stop() == 0
    assert served.said().rstrip().endswith("stopped")
