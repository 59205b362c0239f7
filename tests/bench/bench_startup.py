"""startup: `agora --help` wall time vs `python -c pass` and `alembic --help`; lazy imports;
and the process cost of one command: the CPU (user + system) of `agora spend --json` against a
demo database on PostgreSQL and on SQLite, over the CPU of a process that merely imports
SQLAlchemy, psycopg, Typer and Rich (issue 19; goal <= 1.2x on both). The runs alternate, so a
busy machine slows both sides alike; medians of REPEAT runs.

Run: python tests/bench/bench_startup.py [--cost-only]
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


def cpu_of(cmd: list[str], env: dict[str, str] | None = None) -> float:
    """CPU seconds (user + system) one run of ``cmd`` used."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, capture_output=True, check=True, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def process_cost() -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from _common import create_database, drop_database

    imports = "import sqlalchemy, psycopg, typer, rich"
    probes = {
        "imports alone": imports,
        # the same imports with the garbage collector off, as agora starts: what agora costs
        # over this is its own work (its modules, the dialect, the connection, the query)
        "imports, collector off": f"import gc; gc.disable()\n{imports}",
    }
    agora = str(BIN / "agora")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGORA_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's agora runs from its bytecode cache
    print(
        f"process cost: CPU (user + system) of one `agora spend --json`, over the CPU of a"
        f" process importing SQLAlchemy, psycopg, Typer and Rich (median of {REPEAT}"
        f" alternating runs)"
    )
    for dialect in ("postgresql", "sqlite"):
        name, url = create_database(dialect)
        try:
            subprocess.run([agora, "demo", "--db", url], capture_output=True, check=True, env=env)
            argv = ["spend", "--json", "--db", url]
            # agora as it was before the collector was turned off at start-up
            collector_on = (
                f"import sys; sys.argv = ['agora', *{argv!r}]\n"
                "from agora_cli.cli import lazy_root\nlazy_root().main(prog_name='agora')"
            )
            commands = {
                "agora spend --json": [agora, *argv],
                "the same, collector on": [sys.executable, "-c", collector_on],
                **{label: [sys.executable, "-c", code] for label, code in probes.items()},
            }
            samples: dict[str, list[float]] = {label: [] for label in commands}
            for command in commands.values():  # warm the page cache
                cpu_of(command, env)
            for _ in range(REPEAT):
                for label, command in commands.items():
                    samples[label].append(cpu_of(command, env))
            cpu = {label: statistics.median(values) for label, values in samples.items()}
            ours, base = cpu["agora spend --json"], cpu["imports alone"]
            print(f"  {dialect}")
            for label, value in cpu.items():
                print(f"    {label:24s} {value * 1000:6.1f} ms  {value / base:.2f}x imports alone")
            print(
                f"    agora / imports with the collector off as well:"
                f" {ours / cpu['imports, collector off']:.2f}x"
            )
        finally:
            drop_database(dialect, name)


def main() -> None:
    if "--cost-only" in sys.argv:
        process_cost()
        return
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
    process_cost()


if __name__ == "__main__":
    main()
