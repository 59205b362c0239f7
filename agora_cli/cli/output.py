"""The one output module: data on stdout (Rich tables, JSON, CSV), talk on stderr.

``--json`` prints exactly one JSON document and nothing else on stdout; progress bars and
spinners go to stderr, and only when stderr is a terminal.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "Col",
    "emit_csv",
    "emit_json",
    "err_console",
    "out_console",
    "progress",
    "render_table",
    "say",
]


@dataclass(frozen=True)
class Col:
    """A table/CSV column: the row key, its header, and how a person should see the value."""

    key: str
    header: str | None = None
    justify: str = "left"
    fmt: Callable[[Any], str] | None = None
    no_wrap: bool = False

    def show(self, value: Any) -> str:
        if self.fmt is not None:
            return self.fmt(value)
        if value is None:
            return "—"
        if isinstance(value, float):
            return f"{value:,.4f}"
        if isinstance(value, int) and not isinstance(value, bool):
            return f"{value:,}"
        return str(value)


def out_console() -> Console:
    """A Rich console on the current stdout (created per call: tests swap the streams).

    On a terminal it takes the terminal's width; piped or redirected it is 200 columns wide
    (or ``$COLUMNS``) so that tables in logs and files are never cut to 80.
    """
    from rich.console import Console

    width = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS") or 200)
    return Console(file=sys.stdout, highlight=False, soft_wrap=False, width=width)


def err_console() -> Console:
    from rich.console import Console

    return Console(file=sys.stderr, highlight=False, stderr=True, soft_wrap=True)


def emit_json(doc: Any) -> None:
    """Print exactly one JSON document on stdout."""
    sys.stdout.write(json.dumps(doc, indent=2, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def emit_csv(rows: Sequence[dict[str, Any]], columns: Sequence[Col]) -> None:
    """Print a header line and one CSV line per row (raw values, no formatting)."""
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow([c.key for c in columns])
    for row in rows:
        writer.writerow(["" if row.get(c.key) is None else row.get(c.key) for c in columns])


def render_table(
    rows: Sequence[dict[str, Any]],
    columns: Sequence[Col],
    *,
    title: str | None = None,
    footer_rows: Sequence[dict[str, Any]] = (),
    row_styles: Sequence[str | None] | None = None,
    empty: str = "nothing to show",
) -> None:
    """Print rows as a Rich table for people (``footer_rows`` after a rule, e.g. a total)."""
    from rich.table import Table
    from rich.text import Text

    console = out_console()
    if not rows and not footer_rows:
        console.print(empty)
        return
    table = Table(title=title, show_footer=False, header_style="bold")
    for col in columns:
        table.add_column(
            col.header or col.key,
            justify=col.justify,  # type: ignore[arg-type]
            no_wrap=col.no_wrap,
            overflow="fold",  # a narrow terminal folds a value; it never hides it behind "…"
        )
    for i, row in enumerate(rows):
        style = row_styles[i] if row_styles else None
        # Text(), not a str: cell values are data, never Rich markup.
        table.add_row(*[Text(col.show(row.get(col.key))) for col in columns], style=style)
    for j, row in enumerate(footer_rows):
        table.add_row(
            *[Text(col.show(row.get(col.key))) for col in columns],
            style="bold",
            end_section=j == len(footer_rows) - 1,
        )
        if j == 0:
            table.rows[len(rows) - 1 if rows else 0].end_section = True
    console.print(table)


def say(message: str, *, style: str | None = None) -> None:
    """A sentence for people, on stderr (never mixed into data on stdout)."""
    err_console().print(message, style=style, highlight=False)


@contextmanager
def progress(description: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr when it is a terminal; yields ``advance(n)``."""
    if not sys.stderr.isatty():
        yield lambda n: None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=err_console(),
        transient=True,
    ) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)
