"""examples/alerts.yml: valid rules (`promtool check rules`), their unit tests pass (`promtool
test rules tests/metrics/alerts_test.yml`), and every metric they name is one agora exports."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from helpers import ROOT

ALERTS = ROOT / "examples" / "alerts.yml"
TESTS = Path(__file__).with_name("alerts_test.yml")


def _promtool(promtool: str, *args: str) -> str:
    done = subprocess.run([promtool, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_rules_are_valid(promtool: str) -> None:
    out = _promtool(promtool, "check", "rules", str(ALERTS))
    assert "SUCCESS: 8 rules found" in out


def test_the_rules_pass_their_unit_tests(promtool: str) -> None:
    assert "SUCCESS" in _promtool(promtool, "test", "rules", str(TESTS))


def test_every_alert_is_tested() -> None:
    alerts = set(re.findall(r"- alert: (\w+)", ALERTS.read_text()))
    assert len(alerts) == 8
    assert alerts == set(re.findall(r"alertname: (\w+)", TESTS.read_text()))
