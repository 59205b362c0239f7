"""review: how soon `agora proposals review` shows its first item, on a real terminal (a pty).

Side by side, in rotated rounds against one demo database (SQLite, or the server given): the wall
time from start to the first item's key prompt, and the time of `agora proposals inbox` (the same
read, printed as a table, to its end) on the same kind of terminal; plus `agora --help` and
`agora proposals review --help`. Prints medians with their ranges and the ratio review / inbox:
what the walk adds over the inbox it reads (its extra re-read of the item, the item's layout, the
terminal mode) should be small.

Run: python tests/bench/bench_review.py [sqlite|postgresql|mysql]
"""

from __future__ import annotations

import os
import select
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROUNDS = int(os.environ.get("AGORA_BENCH_REPEAT", "11"))
AGORA = str(Path(sys.executable).with_name("agora"))
PROMPT = "uit ›".encode()  # "[q]uit ›", its key in bold between the two


def on_a_pty(argv: list[str], env: dict[str, str], until: bytes | None) -> float:
    """Seconds from start until ``until`` shows on the terminal (then ``q`` ends it), or until
    the process ends when ``until`` is None."""
    import pty

    master, slave = pty.openpty()
    os.set_blocking(master, False)
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    seen = b""
    elapsed = None
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 30)
            if not ready:
                raise RuntimeError(f"nothing on the terminal for 30 s: {seen[-300:]!r}")
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
            if until is not None and until in seen and elapsed is None:
                elapsed = time.perf_counter() - start
                os.write(master, b"q")
        proc.wait(timeout=30)
    finally:
        os.close(master)
    return elapsed if elapsed is not None else time.perf_counter() - start


def main() -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from _common import create_database, drop_database

    dialect = sys.argv[1] if len(sys.argv) > 1 else "sqlite"
    name, url = create_database(dialect, prefix="agora_bench_review")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGORA_")}
    env.update(AGORA_CONFIG="/nonexistent/config.toml", AGORA_PAGER="cat", TERM="xterm")
    try:
        subprocess.run([AGORA, "demo", "--db", url], capture_output=True, check=True, env=env)
        cases = {
            "agora --help": ([AGORA, "--help"], None),
            "agora proposals review --help": ([AGORA, "proposals", "review", "--help"], None),
            "agora proposals inbox (to its end)": (
                [AGORA, "proposals", "inbox", "--db", url],
                None,
            ),
            "agora proposals review (first item)": (
                [AGORA, "proposals", "review", "--db", url, "--by", "bench"],
                PROMPT,
            ),
        }
        samples: dict[str, list[float]] = {label: [] for label in cases}
        for argv, until in cases.values():  # warm the page cache and the bytecode
            on_a_pty(argv, env, until)
        labels = list(cases)
        for n in range(ROUNDS):
            for label in labels[n % len(labels) :] + labels[: n % len(labels)]:
                argv, until = cases[label]
                samples[label].append(on_a_pty(argv, env, until))
        print(f"{dialect}: median of {ROUNDS} rotated rounds on a pty (range)")
        for label, values in samples.items():
            ms = [v * 1000 for v in values]
            print(f"  {label:38s} {statistics.median(ms):7.1f} ms ({min(ms):.1f}–{max(ms):.1f})")
        review = statistics.median(samples["agora proposals review (first item)"])
        inbox = statistics.median(samples["agora proposals inbox (to its end)"])
        print(f"  first item / inbox: {review / inbox:.2f}")
    finally:
        drop_database(dialect, name)


if __name__ == "__main__":
    main()
