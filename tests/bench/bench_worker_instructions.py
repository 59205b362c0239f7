"""Benchmark: the worker's client instructions a job, agora against the bare loops (issue 29).

``bench_worker_queues`` times jobs a second and CPU seconds; on this machine those move by a
fifth from run to run of the same code, and a change of the client's work by a few percent is
lost in them. This counts instead the instructions the worker process executes (valgrind's
callgrind: the same count for the same code and input, whatever else the machine is doing), a
job: the count of a run of ``n2`` jobs less that of a run of ``n1``, over ``n2 - n1`` — start-up,
imports and the connection fall out. One worker (``bench_worker_queues``' own worker loops:
agora's, holding its connection, and the bare ``SKIP LOCKED`` loops), each run in a fresh
database, ``PYTHONHASHSEED=0`` (string hashes, and with them every dict's probing, the same each
run); every job must run exactly once. Each measurement is made ``--repeat`` times (default 2)
and printed each time: the counts repeat to within a few instructions a job.

Instructions are not time (a cache miss or a system call costs more than its count), and the
server's work is not counted at all: the jobs-a-second figures stay with ``bench_worker_queues``.
What this settles is whether a change to the client's hot path made it do less, and by how much.

    python tests/bench/bench_worker_instructions.py                  # both servers, every loop
    python tests/bench/bench_worker_instructions.py --dialects mysql --only "k=100"

Needs valgrind (Debian's ``valgrind``) and the local servers.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_worker_queues import contenders, load_agora  # noqa: E402

# (n1, n2) jobs for a loop that takes k at a time: enough batches that the difference is the
# loop's, few enough that a run under valgrind (some 50 times slower) takes seconds
RUNS = {1: (200, 1_200), 10: (1_000, 5_000), 100: (3_000, 13_000)}
_COLLECTED = re.compile(r"Collected : (\d+)")


def instructions(dialect: str, system: str, k: int, mode: str, n: int) -> int:
    """The instructions one worker executes draining ``n`` queued jobs, in a fresh database."""
    from _common import create_database, drop_database

    name, url = create_database(dialect, f"agora_bwi_{system}")
    try:
        load_agora(url, n)
        worker = [sys.executable, str(HERE / "bench_worker_queues.py"), "_worker"]
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--callgrind-out-file=/dev/null",
                *worker,
                system,
                url,
                str(k),
                mode,
                "w0",
            ],
            input="go\n",
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
            timeout=1_800,
        )
    finally:
        drop_database(dialect, name)
    if done.returncode != 0:
        raise SystemExit(f"{system} k={k} {mode}: the worker failed: {done.stderr[-2000:]}")
    ran = json.loads(done.stdout.strip().splitlines()[-1])["ran"]
    if len(ran) != n or len(set(ran)) != n:
        raise SystemExit(f"{system} k={k} {mode}: {len(ran)} jobs ran, {len(set(ran))} distinct")
    found = _COLLECTED.search(done.stderr)
    if found is None:
        raise SystemExit(f"{system} k={k} {mode}: no instruction count from valgrind")
    return int(found.group(1))


def per_job(dialect: str, system: str, k: int, mode: str) -> float:
    n1, n2 = RUNS[k]
    small = instructions(dialect, system, k, mode, n1)
    large = instructions(dialect, system, k, mode, n2)
    return (large - small) / (n2 - n1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dialects", default="postgresql,mysql")
    parser.add_argument("--only", default="", help="comma-separated label parts to run")
    parser.add_argument("--skip", default="", help="comma-separated label parts to leave out")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    only = [o.strip() for o in args.only.split(",") if o.strip()]
    skip = [o.strip() for o in args.skip.split(",") if o.strip()]
    print(
        f"worker_instructions: one worker, instructions a job (callgrind; the difference of "
        f"runs of n1 and n2 jobs: {', '.join(f'k={k}: {a}/{b}' for k, (a, b) in RUNS.items())}), "
        f"each measured {args.repeat} times, PYTHONHASHSEED=0",
        flush=True,
    )
    for dialect in args.dialects.split(","):
        counts: dict[str, tuple[str, int, list[float]]] = {}  # label: system, k, counts
        for group in contenders(dialect):
            for label, (system, k, mode) in group:
                if system not in ("agora", "bare") or (only and not any(o in label for o in only)):
                    continue
                if any(o in label for o in skip):
                    continue
                each = [per_job(dialect, system, k, mode) for _ in range(args.repeat)]
                counts[label] = (system, k, each)
                shown = ", ".join(f"{c:,.0f}" for c in each)
                print(f"  {dialect} {label:<40} {shown} instructions a job", flush=True)
        bare = {k: each for system, k, each in counts.values() if system == "bare"}
        for label, (system, k, each) in counts.items():
            if system == "agora" and k in bare:
                ratio = statistics.median(each) / statistics.median(bare[k])
                pair = f"{label} / bare loop k={k}"
                print(f"  {dialect} ratio instructions a job {pair}: {ratio:.2f}")


if __name__ == "__main__":
    main()
