"""Every table keeps its meaning at any width (issue 28, friction 3).

Each command that draws a table renders the demo data set at 60, 80 and 120 columns, and again
at 1,000 (where nothing is wrapped, cut or hidden: the reference). At every width: no line is
wider than the width; every cell is whole words of the reference's cell in that column (a word
that does not fit ends in `…`, never folded: `claude-3-5-so│nnet-20241022` cannot happen); the
key column (an id, a scope) is whole; the columns missing from the table are exactly those
stderr names. The clock is fixed, so the two renderings show the same instant.

On SQLite (rendering does not depend on the dialect), in-process with COLUMNS set, which lays a
table out as a terminal of that width would; one test runs the real program on a real terminal
(a pseudo-terminal) and one into a real pipe.
"""

from __future__ import annotations

import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from helpers import CliResult, examples, run_agora, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.cells import cell_len

from agora_cli.cli.output import Col, table_layout

NOW = int(datetime(2026, 12, 4, 16, 20, tzinfo=UTC).timestamp() * 1000)
WIDTHS = (60, 80, 120)
WIDE = "1000"
SCOPE = ("--actor", "bob", "--thread", "demo-thread-05", "--tenant", "acme")
# Every command that draws a table (and config show's borderless one), on the demo data set.
TABLES: list[tuple[str, ...]] = [
    ("spend", "--by", "model", "--last", "3m"),
    ("spend", "--by", "actor", "--last", "3m"),
    ("spend", "--by", "thread", "--last", "3m"),
    ("spend", "--by", "day,model", "--last", "7d"),
    ("quota", "--all"),
    ("quota", "--actor", "alice", "--day-usd", "0.01"),
    ("budgets", "list"),
    ("frames", "stats"),
    ("runs", "list"),
    ("runs", "show", "demo-run-12-2"),
    ("tools", "stats", "--from", "2026-11-01"),
    ("threads", "list", "--include-deleted", "--include-transient"),
    ("proposals", "inbox"),
    ("proposals", "inbox", "--state", "queued"),
    ("proposals", "inbox", "--state", "running"),
    ("proposals", "inbox", "--state", "failed"),
    ("proposals", "list", *SCOPE),
    ("proposals", "show", "{proposal}", *SCOPE),
    ("prices", "list", "--history"),
    ("prices", "resolve", "gpt-4o-mini-2024-07-18"),
    ("db", "status"),
    ("keys", "list"),
]
# First columns that name the row (an id, a scope, a table): never cut, at any width.
KEY_HEADERS = {"id", "scope", "table", "tenant", "agent", "period", "day", "field", "what"}
NOTE = re.compile(r"^note: (.+) hidden to fit (\d+) columns; (--json|--csv) has every column$")


@pytest.fixture(scope="module", autouse=True)
def fixed_clock() -> Iterator[None]:
    from agora_cli.store._clock import SystemClock

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SystemClock, "now_ms", lambda self: NOW)
        yield


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('widths') / 'demo.db'}"
    assert run_cli("demo", "--db", url).exit_code == 0
    return url


def _render(argv: tuple[str, ...], demo: str, columns: str) -> CliResult:
    if "{proposal}" in argv:  # bob's pending proposal, by its short id
        inbox = run_cli("proposals", "inbox", "--db", demo, "--json").json()["proposals"]
        [found] = [p["id"][:12] for p in inbox if p["thread_id"] == "demo-thread-05"]
        argv = tuple(found if a == "{proposal}" else a for a in argv)
    return run_cli(*argv, "--db", demo, env={"COLUMNS": columns})


def _drawn(stdout: str) -> list[str]:
    """The lines of stdout that are tables (their borders, headers and rows)."""
    return [line for line in stdout.splitlines() if line[:1] in set("┏┃┡│├└")]


class Table:
    """A box-drawn table parsed back: its headers, and its body lines cut into cells."""

    def __init__(self, top: str) -> None:
        self.edges = [i for i, c in enumerate(top) if c in "┏┳┓"]
        self.head: list[list[str]] = []
        self.lines: list[list[str]] = []

    def cells(self, line: str) -> list[str]:
        return [line[a + 1 : b].strip() for a, b in zip(self.edges, self.edges[1:], strict=False)]

    @property
    def headers(self) -> list[str]:
        return [" ".join(w for w in col if w) for col in zip(*self.head, strict=True)]

    def column(self, header: str) -> list[str]:
        at = self.headers.index(header)
        return [line[at] for line in self.lines]


def _tables(stdout: str) -> list[Table]:
    tables: list[Table] = []
    for line in stdout.splitlines():
        if line.startswith("┏"):
            tables.append(Table(line))
        elif line.startswith("┃"):
            tables[-1].head.append(tables[-1].cells(line))
        elif line.startswith("│"):
            tables[-1].lines.append(tables[-1].cells(line))
    return tables


def _whole_words(shown: str, reference: list[str]) -> bool:
    """Whether ``shown`` is a run of whole words of one of ``reference``'s cells, its last word
    possibly cut and marked with "…"."""
    words = shown.split()
    for cell in reference:
        have = cell.split()
        for start in range(len(have) - len(words) + 1):
            run = have[start : start + len(words)]
            if run[:-1] != words[:-1]:
                continue
            last = words[-1]
            if run[-1] == last or (last.endswith("…") and run[-1].startswith(last[:-1])):
                return True
    return False


def _hidden_in_notes(stderr: str, width: int) -> list[str]:
    names: list[str] = []
    for line in stderr.splitlines():
        found = NOTE.match(line)
        if found:
            assert int(found[2]) == width
            names += found[1].split(", ")
    return names


@pytest.mark.parametrize("argv", TABLES, ids=" ".join)
def test_every_table_keeps_its_meaning_at_60_80_and_120_columns(
    argv: tuple[str, ...], demo: str
) -> None:
    wide = _render(argv, demo, WIDE)
    assert wide.exit_code in (0, 1), wide
    reference = _tables(wide.stdout)
    assert reference, f"{argv} drew no table"
    assert _hidden_in_notes(wide.stderr, 1000) == []
    for width in WIDTHS:
        narrow = _render(argv, demo, str(width))
        assert narrow.exit_code == wide.exit_code, (width, narrow)
        too_wide = [line for line in _drawn(narrow.stdout) if cell_len(line) > width]
        assert too_wide == [], (width, too_wide)
        tables = _tables(narrow.stdout)
        assert len(tables) == len(reference), width
        hidden: list[str] = []
        for table, full in zip(tables, reference, strict=True):
            assert all(h in full.headers for h in table.headers), (width, table.headers)
            hidden += [h for h in full.headers if h not in table.headers]
            for header in table.headers:
                cells = full.column(header)
                broken = [c for c in table.column(header) if c and not _whole_words(c, cells)]
                assert broken == [], (width, header, broken)
            key = table.headers[0]
            if key in KEY_HEADERS:  # the key column: every value whole, none cut
                assert {c for c in full.column(key) if c} <= set(table.column(key)), (width, key)
                assert not any(c.endswith("…") for c in table.column(key))
        assert sorted(_hidden_in_notes(narrow.stderr, width)) == sorted(hidden), width


def test_quota_all_at_60_columns_keeps_its_scope_and_state(demo: str) -> None:
    """The issue's table: `scope` shrank to nothing and lost its border at 60 columns."""
    result = _render(("quota", "--all"), demo, "60")
    [table] = _tables(result.stdout)
    assert table.headers[0] == "scope" and "state" in table.headers
    assert {"actor alice", "tenant acme", "global"} <= set(table.column("scope"))
    assert all(len(line) == len(table.edges) - 1 for line in table.lines)


def test_the_narrow_inbox_keeps_what_deciding_needs(demo: str) -> None:
    """At 60 columns the inbox keeps the id, the tool and the thread (the rest of the scope and
    the times go, and stderr says so)."""
    wide = _tables(_render(("proposals", "inbox"), demo, WIDE).stdout)[0]
    result = _render(("proposals", "inbox"), demo, "60")
    [table] = _tables(result.stdout)
    assert table.headers[:3] == ["id", "tool", "thread"]
    assert table.column("thread") == wide.column("thread")
    assert table.column("tool") == wide.column("tool")
    hidden = {"created", "kind", "tenant", "actor", "expires"}
    assert set(_hidden_in_notes(result.stderr, 60)) == hidden


def test_a_pipe_gets_the_table_of_a_120_column_terminal(demo: str) -> None:
    """Into a pipe (a real one: a process's stdout) a table is never wider than 120 columns
    (it was drawn 172 and more), unless COLUMNS asks for another width."""
    env = {"COLUMNS": "", "AGORA_DATABASE_URL": demo}
    piped = run_agora("runs", "list", env=env)
    assert piped.exit_code == 0
    widths = [cell_len(line) for line in piped.stdout.splitlines()]
    assert max(widths) <= 120 and max(widths) > 100
    assert piped.stderr.startswith("note: ") and "hidden to fit 120 columns" in piped.stderr
    wider = run_agora("runs", "list", env={**env, "COLUMNS": "200"})
    assert max(cell_len(line) for line in wider.stdout.splitlines()) > 120
    assert wider.stderr == ""


def _on_a_terminal(argv: list[str], columns: int, env: dict[str, str]) -> tuple[str, str]:
    """Run agora with stdout on a pseudo-terminal ``columns`` wide, stderr into a pipe."""
    main, secondary = os.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    exe = Path(sys.executable).with_name("agora")
    environment = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen(
        [str(exe), *argv],
        stdout=secondary,
        stderr=subprocess.PIPE,
        env={**environment, "TERM": "xterm", "NO_COLOR": "1", **env},
    )
    os.close(secondary)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the other end closed: the process ended
            break
        if not chunk:
            break
        chunks.append(chunk)
    _, err = proc.communicate(timeout=60)
    os.close(main)
    out = b"".join(chunks).decode().replace("\r\n", "\n")
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out), err.decode()


@pytest.mark.slow
def test_on_a_real_terminal_60_columns_wide(demo: str) -> None:
    """A pseudo-terminal of 60 columns, no COLUMNS: the terminal's own width lays it out."""
    out, err = _on_a_terminal(["quota", "--all"], 60, {"AGORA_DATABASE_URL": demo})
    assert max(cell_len(line) for line in out.splitlines()) <= 60
    [table] = _tables(out)
    assert {"actor alice", "tenant acme", "global"} <= set(table.column("scope"))
    assert "hidden to fit 60 columns" in err
    inbox, _ = _on_a_terminal(["proposals", "inbox"], 60, {"AGORA_DATABASE_URL": demo})
    assert "update_invoice_address" in inbox and "demo-thread-05" in inbox


def test_a_stacked_chart_without_colour_has_a_glyph_per_series(demo: str) -> None:
    result = run_cli(
        "spend", "--by", "day,model", "--last", "7d", "--chart", "--no-color", "--db", demo,
        env={"COLUMNS": "120"},
    )  # fmt: skip
    assert result.exit_code == 0
    legend = result.stdout.split("legend:", 1)[1].split("TOTAL", 1)[0]
    glyphs = re.findall(r"(\S) [\w(]", legend)
    assert len(glyphs) >= 4 and len(set(glyphs)) == len(glyphs), legend
    bars = [line for line in result.stdout.splitlines() if re.match(r"\d{4}-\d\d-\d\d ", line)]
    drawn = {c for line in bars for c in line[11:].split("$")[0].strip()}
    assert len(drawn) >= 3 and drawn <= set(glyphs)
    assert max(cell_len(line) for line in bars) <= 120


def test_a_chart_label_is_cut_with_a_marker(demo: str) -> None:
    result = run_cli(
        "spend", "--by", "model", "--last", "3m", "--chart", "--db", demo, env={"COLUMNS": "60"}
    )
    assert "openrouter/anthropic/claud…" in result.stdout
    bars = result.stdout.split("TOTAL", 1)[0].splitlines()[1:]
    assert len(bars) == 6 and max(cell_len(line) for line in bars) <= 60


# --- the layout alone -------------------------------------------------------------------------

WORDS = st.text("abcdefghij-_./0123456789", min_size=1, max_size=50)
CELLS = st.lists(WORDS, min_size=1, max_size=4).map(" ".join)


@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=examples(200))
@given(
    st.lists(
        st.tuples(st.booleans(), st.sampled_from([None, 1, 2, 3, 4]), st.booleans()),
        min_size=1,
        max_size=9,
    ),
    st.data(),
    st.integers(min_value=20, max_value=200),
)
def test_a_layout_never_exceeds_the_width(specs: Any, data: Any, width: int) -> None:
    """Whatever the columns and cells: the table fits, unless its first column alone cannot;
    a `wrap=False` column shown is at its full width; a hidden column is never shown."""
    columns = [
        Col(f"c{i}", wrap=wrap, drop=drop, prose=prose)
        for i, (wrap, drop, prose) in enumerate(specs)
    ]
    rows = data.draw(
        st.lists(st.lists(CELLS, min_size=len(columns), max_size=len(columns)), max_size=6)
    )
    layout = table_layout(columns, rows, width)
    assert set(layout.shown).isdisjoint(layout.hidden)
    assert sorted([*layout.shown, *layout.hidden]) == list(range(len(columns)))
    assert 0 in layout.shown
    total = sum(layout.widths) + 3 * len(layout.shown) + 1
    for i, w in zip(layout.shown, layout.widths, strict=True):
        if not columns[i].wrap:
            assert w == max(cell_len(x) for x in [f"c{i}", *(r[i] for r in rows)])
    first_alone = layout.widths[0] + 4
    assert total <= width or (layout.shown == (0,) and first_alone > width)


def test_a_key_column_of_ids_is_never_cut() -> None:
    ids = ["run_0192a8f3c4d2e7b8a9", "run_0192a8f3c4d2e7b8b0"]
    columns = [
        Col("id", wrap=False),
        Col("model"),
        Col.number("cost", drop=1),
        Col.text("error"),
    ]
    rows = [[i, "openrouter/anthropic/claude-3.5-haiku", "$0.0012", "529 overloaded"] for i in ids]
    layout = table_layout(columns, rows, 60)
    assert layout.widths[0] == len(ids[0]) and layout.hidden == (2,)
    model = layout.widths[layout.shown.index(1)]
    assert model < 37  # the model is cut (with "…" when drawn), the id is not
