"""startup: `agora --help` wall time vs `python -c pass` and `alembic --help`; lazy imports.

Run: python tests/bench/bench_startup.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPEAT = int(os.environ.get("AGORA_BENCH_REPEAT", "15"))
BIN = Path(sys.executable).parent


def timed(cmd: list[str]) -> float:
    subprocess.run(cmd, capture_output=True, check=True)  # warm the page cache
    samples = []
    for _ in range(REPEAT):
        start = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    python = timed([sys.executable, "-c", "pass"])
    agora = timed([str(BIN / "agora"), "--help"])
    alembic = timed([str(BIN / "alembic"), "--help"])
    print(f"python -c pass   {python * 1000:7.1f} ms")
    print(f"agora --help     {agora * 1000:7.1f} ms  ({agora / python:.1f}x python)")
    print(f"alembic --help   {alembic * 1000:7.1f} ms  ({alembic / python:.1f}x python)")
    print(f"agora --help / alembic --help = {agora / alembic:.2f}")
    probe = (
        "import sys\nfrom agora_cli.cli import main\nsys.argv=['agora','--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('sqlalchemy','httpx','alembic') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout
    print(f"heavy modules imported by agora --help: {out.strip().splitlines()[-1]}")


if __name__ == "__main__":
    main()
