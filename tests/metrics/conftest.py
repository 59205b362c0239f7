"""Fixtures of the metrics tests: a demo database, free ports, `agora metrics serve` as a real
process (stopped however the test ends), and promtool."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import run_cli, unavailable

AGORA = str(Path(sys.executable).with_name("agora"))


@pytest.fixture(name="free_port")
def free_port_fixture() -> Any:
    """``free_port()``: see below."""
    return free_port


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (chosen by the kernel)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(name="http_get")
def http_get_fixture() -> Any:
    """``http_get(url, accept=None)``: see below."""
    return http_get


def http_get(url: str, accept: str | None = None, timeout: float = 5) -> tuple[int, str, str]:
    """(status, content type, body) of a GET."""
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read().decode("utf-8")
            return response.status, response.headers.get("Content-Type", ""), body
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode("utf-8")


@pytest.fixture
def promtool() -> str:
    """promtool's path; the test is skipped without it, unless AGORA_TEST_REQUIRE lists
    ``prometheus`` (Debian's prometheus package ships it; `.ci/run` installs it)."""
    found = shutil.which("promtool")
    if found is None:
        unavailable("prometheus", "promtool not found (apt-get install prometheus)")
    assert found is not None
    return found


@pytest.fixture
def demo_url(dialect: str, databases: Any) -> str:
    """A new database of the dialect holding `agora demo`'s data set."""
    url = str(databases.new(dialect))
    made = run_cli("demo", "--db", url)
    assert made.exit_code == 0, made.stderr
    return url


@dataclass
class Served:
    """A running `agora metrics serve`: its URL, process and stderr file."""

    url: str
    process: subprocess.Popen[bytes]
    stderr: Path

    def get(self, path: str = "/metrics", accept: str | None = None) -> tuple[int, str, str]:
        return http_get(self.url + path, accept)

    def said(self) -> str:
        return self.stderr.read_text(encoding="utf-8", errors="replace")

    def stop(self, timeout: float = 15) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return int(self.process.returncode)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    """Start `agora metrics serve` on a free port (``serve(db_url, "--interval", "5s")``) and
    wait until it answers; every process started is stopped when the test ends."""
    started: list[Served] = []

    def start(db_url: str, *args: str) -> Served:
        port = free_port()
        err = tmp_path / f"serve-{port}.err"
        with err.open("wb") as sink:
            process = subprocess.Popen(
                [AGORA, "metrics", "serve", "--port", str(port), *args, "--db", db_url],
                stdout=subprocess.DEVNULL,
                stderr=sink,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        served = Served(f"http://127.0.0.1:{port}", process, err)
        started.append(served)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise AssertionError(f"serve ended with {process.returncode}: {served.said()}")
            try:
                if served.get()[0] == 200:
                    return served
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"serve did not answer in 60 s: {served.said()}")

    yield start
    for served in started:
        served.stop()
