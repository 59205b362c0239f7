"""Benchmark `table_layout`: what laying a table out to the width costs, side by side.

Two systems draw the same table (the columns of `agora runs list`: an id, names, times, numbers,
an error's first line) into memory at 60 and 120 columns:

- **agora**: `render_table` — `table_layout` (measure every cell, hide, cut, distribute) and
  Rich drawing the columns at the widths it chose;
- **rich**: Rich's own `Table` with the same cells and the same column settings, left to find
  its widths (what agora did before issue 28: the same drawing, folding words).

Rounds rotate the order of the two; each figure is the median ratio agora/rich over
``BENCH_TABLE_ROUNDS`` rounds (default 15) with its range, for a page of 50 rows and one of
1,000 (the most `runs list --limit` shows), and the share of agora's time spent in
`table_layout` alone. Run: ``python tests/bench/bench_table_layout.py``. No database.
"""

from __future__ import annotations

import io
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from agora_cli.cli.output import Col, render_table, table_layout

ROUNDS = int(os.environ.get("BENCH_TABLE_ROUNDS", "15"))
COLUMNS = [
    Col("id", wrap=False),
    Col("agent", drop=4),
    Col("actor", drop=3),
    Col("status", wrap=False),
    Col("started", "started (UTC)", wrap=False, drop=5),
    Col.number("duration"),
    Col.number("steps", drop=1),
    Col.number("tokens", drop=2),
    Col.number("cost", drop=6),
    Col.text("error"),
]
ERRORS = [
    None,
    "claude-3-5-sonnet-20241022: 529 overloaded, no retries left …",
    "step 2: lookup_order: orders-api: 504 Gateway Timeout after 30 s …",
]


def _rows(n: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"run_0192a8f3c4d2e7b8{i:06d}",
            "agent": "support" if i % 3 else "billing-assistant",
            "actor": f"actor-{i % 17}",
            "status": ("completed", "failed", "running")[i % 3],
            "started": f"2026-12-{1 + i % 28:02d} 10:{i % 60:02d}:00",
            "duration": f"{i % 50}.{i % 10} s",
            "steps": i % 9,
            "tokens": 1000 + 37 * i,
            "cost": f"${(i % 97) / 1000:.4f}",
            "error": ERRORS[i % 3],
        }
        for i in range(n)
    ]


def _agora(rows: list[dict[str, Any]], width: int) -> Callable[[], None]:
    def draw() -> None:
        os.environ["COLUMNS"] = str(width)
        out, err = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
        try:
            render_table(rows, COLUMNS)
        finally:
            sys.stdout, sys.stderr = out, err

    return draw


def _rich(rows: list[dict[str, Any]], width: int) -> Callable[[], None]:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    def draw() -> None:
        console = Console(file=io.StringIO(), width=width, color_system=None)
        table = Table(header_style="bold")
        for col in COLUMNS:
            table.add_column(col.header or col.key, justify=col.justify, no_wrap=not col.wrap)
        for row in rows:
            table.add_row(*(Text(col.show(row.get(col.key))) for col in COLUMNS))
        console.print(table)

    return draw


def _layout_only(rows: list[dict[str, Any]], width: int) -> Callable[[], None]:
    def lay() -> None:
        cells = [[col.show(row.get(col.key)) for col in COLUMNS] for row in rows]
        table_layout(COLUMNS, cells, width)

    return lay


def _seconds(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    for n in (50, 1000):
        rows = _rows(n)
        for width in (60, 120):
            systems = {
                "agora": _agora(rows, width),
                "rich": _rich(rows, width),
                "layout": _layout_only(rows, width),
            }
            for fn in systems.values():
                fn()  # warm up
            times: dict[str, list[float]] = {name: [] for name in systems}
            names = list(systems)
            for r in range(ROUNDS):
                for name in names[r % 3 :] + names[: r % 3]:  # rotate who goes first
                    times[name].append(_seconds(systems[name]))
            ratios = [a / b for a, b in zip(times["agora"], times["rich"], strict=True)]
            shares = [a / b for a, b in zip(times["layout"], times["agora"], strict=True)]
            print(
                f"{n:>5} rows at {width:>3} columns: agora/rich "
                f"{statistics.median(ratios):.2f} (range {min(ratios):.2f}-{max(ratios):.2f}); "
                f"agora {statistics.median(times['agora']) * 1000:.1f} ms, "
                f"rich {statistics.median(times['rich']) * 1000:.1f} ms; "
                f"table_layout alone {statistics.median(shares):.0%} of agora's"
            )
    os.environ.pop("COLUMNS", None)


if __name__ == "__main__":
    main()
