"""Benchmark: two versions of agora's worker side by side, and the bare loop (issue 29).

For a change to the worker's hot path, the question is "does this code beat that code", asked
on a machine whose speed swings by a third within minutes: so both run in one process of this
script, in rounds that rotate them with the bare ``FOR UPDATE SKIP LOCKED`` loop of
``bench_worker_queues`` (the same workers, loads, flushes and finish line), and each ratio is
taken within a round. Each version is a source tree of agora put first on the workers'
``PYTHONPATH`` (``--a``, ``--b``; ``-`` is the installed one), for example a worktree of the
commit before the change:

    git worktree add /tmp/agora-before HEAD~1
    python tests/bench/bench_worker_ab.py --a /tmp/agora-before --b - --k 10 --rounds 7

Prints each run's line (jobs/s from the first job, client CPU and the database server's CPU a
job), then per version the median (range) over the rounds of jobs/s against the bare loop's,
of client and server CPU a job, and of B's jobs/s against A's. Without ``--a``/``--b`` both are
the installed code (``make bench``): B / A is then the machine's own spread for the same code,
the floor under which a change's figure says nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_worker_queues as queues  # noqa: E402
from _common import create_database, drop_database  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", default="-", help="agora source tree A ('-': installed)")
    parser.add_argument("--b", default="-", help="agora source tree B ('-': installed)")
    parser.add_argument("--k", type=int, default=10, help="jobs a claim (1-1000)")
    parser.add_argument(
        "--mode", default="batch", choices=("batch", "batch-step", "single", "step")
    )
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dialect", default="mysql", choices=("mysql", "postgresql"))
    args = parser.parse_args()
    if not 1 <= args.k <= 1000 or not 1 <= args.rounds <= 100 or not 1 <= args.workers <= 64:
        parser.error("--k 1-1000, --rounds 1-100, --workers 1-64")
    if not 100 <= args.jobs <= 1_000_000:
        parser.error("--jobs 100-1,000,000")
    sources = {"A": args.a, "B": args.b}
    for label, src in sources.items():
        if src != "-" and not (Path(src) / "agora_cli" / "__init__.py").is_file():
            parser.error(f"--{label.lower()} {src}: no agora_cli there")
    me = [sys.executable, str(HERE / "bench_worker_queues.py"), "_worker"]
    systems = [("bare", "bare", "", None), *((f"agora {s}", "agora", args.mode, s) for s in "AB")]
    measured: dict[str, list[queues.Measured]] = {label: [] for label, *_ in systems}
    print(f"{args.dialect}, k={args.k} ({args.mode}), {args.jobs} jobs, {args.workers} workers")
    print(f"  A = {args.a}\n  B = {args.b}")
    for r in range(args.rounds):
        turn = r % len(systems)
        print(f"round {r + 1}: load average {os.getloadavg()[0]:.1f}", flush=True)
        for label, system, mode, version in systems[turn:] + systems[:turn]:
            name, url = create_database(args.dialect, "agora_bab")
            try:
                queues.load_agora(url, args.jobs)
                src = sources.get(version or "", "-")
                if src == "-":
                    os.environ.pop("PYTHONPATH", None)
                else:
                    os.environ["PYTHONPATH"] = src
                argv = [*me, system, url, str(args.k), mode]
                run = queues.run_system(
                    label, args.dialect, system, url, argv, args.jobs, args.workers
                )
                measured[label].append(run)
            finally:
                os.environ.pop("PYTHONPATH", None)
                drop_database(args.dialect, name)
    bare = measured["bare"]
    print("medians over the rounds (range):")
    for label in ("agora A", "agora B"):
        runs = measured[label]
        rates = [m.rate / b.rate for m, b in zip(runs, bare, strict=True)]
        cpu = [m.cpu_ms / b.cpu_ms for m, b in zip(runs, bare, strict=True)]
        servers = [m.server_ms for m in runs if m.server_ms is not None]
        served = f"; server {statistics.median(servers):.3f} ms/job" if servers else ""
        print(
            f"  {label}: jobs/s / bare {queues.spread(rates, '.2f')}; "
            f"client CPU / bare {queues.spread(cpu, '.2f')}; "
            f"client {statistics.median(m.cpu_ms for m in runs):.3f} ms/job{served}"
        )
    b_over_a = [
        b.rate / a.rate for a, b in zip(measured["agora A"], measured["agora B"], strict=True)
    ]
    print(f"  B / A, jobs/s: {queues.spread(b_over_a, '.2f')}")


if __name__ == "__main__":
    main()
