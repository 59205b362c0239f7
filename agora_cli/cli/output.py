"""The one output module: data on stdout (Rich tables, JSON, CSV), talk on stderr.

``--json`` prints exactly one JSON document and nothing else on stdout; progress bars and
spinners go to stderr, and only when stderr is a terminal.
"""

from __future__ import annotations

# internal on purpose: the operator's commands import the store's private modules (cli/__init__.py)
import functools
import itertools
import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "ELLIPSIS",
    "MONEY_DECIMALS",
    "PIPE_WIDTH",
    "SHORT_ID",
    "UNKNOWN",
    "Col",
    "color_forced_off",
    "columns_env",
    "csv_cell",
    "display_zone",
    "duration_text",
    "emit_csv",
    "emit_json",
    "err_console",
    "finish",
    "first_line",
    "fit",
    "money",
    "money_text",
    "one_format",
    "out_console",
    "progress",
    "relative_text",
    "render_table",
    "safe_text",
    "say",
    "script_value",
    "series_marks",
    "set_display_zone",
    "set_no_color",
    "short_ids",
    "table_time",
]

# Money is summed in the database as doubles; on output it is rounded to this many decimal
# places, which keeps every real price (fractions of a cent per token) and drops float noise
# such as 0.033190950000000004.
MONEY_DECIMALS = 10
# The one word a person reads for an amount nobody knows (JSON says null).
UNKNOWN = "unknown"
# C0 and C1 control characters, DEL, and the Unicode controls that reorder or break lines
# (bidi overrides and isolates, line/paragraph separators): stored data a terminal would obey.
_CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_BODY_KEEP = frozenset("\n\t")
_CSV_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_CSV_INNER_FORMULA_RE = re.compile("([\r\n])([=+\\-@\t])")
# Tables show ids this long (or longer, to tell apart two ids of the same table that share the
# first 12 characters); every command that takes an id takes such a prefix (git-style).
SHORT_ID = 12
# Piped or redirected, output is laid out for a terminal this wide ($COLUMNS overrides it).
PIPE_WIDTH = 120
MIN_WIDTH, MAX_WIDTH = 20, 10_000
# A word (a model, a tool, an id) never breaks: its column gets its longest word, counting up to
# this many characters when columns compete for the width (a longer one shows whole when there
# is room) ...
WORD_CAP = 40
# ... and when the table is still too wide, a word column gives up characters (the word then
# ends in "…") down to this width, its header's longest word, or its longest word if shorter.
CUT_WIDTH = 12
# A column of prose (Col.text: an error, a title) counts its words up to this many characters.
PROSE_WORD = 16
# Text of several words gets at least this width (or its own, if less): one word a line is not
# read, it is deciphered.
TEXT_WIDTH = 20
# What stands for the end of a cut word.
ELLIPSIS = "…"
# Glyphs that tell a chart's series apart without colour (--no-color, NO_COLOR, a pipe), in the
# order the series are drawn; the last one is for "other".
SERIES_GLYPHS = ("█", "▓", "▒", "░", "#", "=", "+")
OTHER_GLYPH = ":"


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def safe_text(value: object, *, body: bool = False) -> str:
    """``value`` as text a terminal shows but never obeys: control characters become visible
    escapes (``\\x1b``). ``body=True`` keeps newlines and tabs (a message's text)."""
    text = str(value)
    if body:
        return _CONTROL_RE.sub(lambda m: m[0] if m[0] in _BODY_KEEP else _escape(m[0]), text)
    return _CONTROL_RE.sub(lambda m: _escape(m[0]), text)


def money(value: float | None) -> float | None:
    """An amount of USD as scripts get it: rounded to ``MONEY_DECIMALS`` (``None`` stays)."""
    if value is None or not math.isfinite(value):
        return None
    return round(value, MONEY_DECIMALS) + 0.0  # never -0.0


def money_text(value: float | None) -> str:
    """An amount of USD for people: 4 decimals, more only when it would otherwise show as
    $0.0000; ``unknown`` when there is none (unpriced usage is never shown as $0)."""
    if value is None or not math.isfinite(value):
        return UNKNOWN
    if value == 0:
        value = 0.0  # never $-0.0000
    if value == 0 or abs(value) >= 0.00005:
        return f"${value:,.4f}"
    decimals = min(12, 1 - math.floor(math.log10(abs(value))))
    return f"${value:,.{decimals}f}"


def script_value(value: Any) -> Any:
    """A value as scripts get it: strict JSON, so a float is never NaN or infinite (→ null)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: script_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [script_value(v) for v in value]
    return value


def csv_cell(value: Any) -> Any:
    """A CSV cell: text that a spreadsheet would run as a formula gets a leading ``'``, and so
    does every line inside it (after a CR or LF) that would start one."""
    if value is None:
        return ""
    if isinstance(value, bool):  # as JSON spells it
        return "true" if value else "false"
    if isinstance(value, str):
        if value.startswith(_CSV_FORMULA_START):
            value = "'" + value
        return _CSV_INNER_FORMULA_RE.sub(r"\1'\2", value)
    return script_value(value)


def _csv_field(value: Any) -> str:
    """One CSV field as RFC 4180 writes it: quoted when it holds a comma, a quote, a CR or an LF
    (Python's writer leaves a bare CR unquoted when the line ends with LF alone)."""
    text = str(value)
    if any(c in text for c in ',"\r\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


@dataclass(frozen=True)
class Col:
    """A table/CSV column: the row key, its header, and how a person should see the value.

    ``wrap`` columns (the default: names, titles, free text) wrap between words and never
    inside one: a model, tool or thread id stays whole, or (when the table cannot give it its
    width) is cut at the end with ``…``; ``Col.text`` columns (prose) cut their long words
    sooner. ``wrap=False`` ones (numbers, times, and the ids a table is keyed by) are never
    wrapped or cut. ``drop`` orders the columns a narrow table hides, lowest first (``None``:
    never hidden; the first column never is); stderr then names them, and the output that has
    them all. ``table_layout`` is the whole layout.
    """

    key: str
    header: str | None = None
    justify: Literal["left", "right", "center"] = "left"
    fmt: Callable[[Any], str] | None = None
    wrap: bool = True
    drop: int | None = None
    prose: bool = False

    @classmethod
    def number(
        cls,
        key: str,
        header: str | None = None,
        *,
        drop: int | None = None,
        fmt: Callable[[Any], str] | None = None,
    ) -> Col:
        """A right-aligned column that never wraps (counts, money, times)."""
        return cls(key, header, justify="right", fmt=fmt, wrap=False, drop=drop)

    @classmethod
    def text(cls, key: str, header: str | None = None, *, drop: int | None = None) -> Col:
        """A column of prose (an error, a title, a note): it wraps between words, and its long
        words are cut (``…``) before a column is hidden for them (``PROSE_WORD``)."""
        return cls(key, header, drop=drop, prose=True)

    def show(self, value: Any) -> str:
        if self.fmt is not None:
            return safe_text(self.fmt(value))
        if value is None:
            return "—"
        if isinstance(value, float):
            return f"{value:,.4f}"
        if isinstance(value, int) and not isinstance(value, bool):
            return f"{value:,}"
        return safe_text(value)


_COLOR: dict[str, bool] = {"off": False}


def set_no_color(off: bool) -> None:
    """``--no-color``: consoles created after this print plain text: no colour and no other
    ANSI styles, over ``FORCE_COLOR`` (``NO_COLOR`` drops the colours and keeps bold)."""
    _COLOR["off"] = off


def color_forced_off() -> bool:
    """Whether ``--no-color`` was given to this command."""
    return _COLOR["off"]


def _no_color() -> bool | None:
    return True if _COLOR["off"] else None  # None: Rich reads NO_COLOR / FORCE_COLOR itself


def _plain() -> dict[str, Any]:
    """``--no-color``: no ANSI at all (no colour, no bold), whatever FORCE_COLOR says."""
    return {"color_system": None} if _COLOR["off"] else {}


def columns_env() -> int | None:
    """``$COLUMNS`` when it is a number of columns (bounded to 20-10,000), else ``None``."""
    text = os.environ.get("COLUMNS", "").strip()
    if not (text.isascii() and text.isdigit()):
        return None
    return min(max(int(text), MIN_WIDTH), MAX_WIDTH)


def out_console() -> Console:
    """A Rich console on the current stdout (created per call: tests swap the streams).

    ``$COLUMNS`` sets its width; else on a terminal it takes the terminal's, and piped or
    redirected it is ``PIPE_WIDTH`` (120) columns wide: a table in a log or a file is laid out
    as on a 120-column terminal, never wider.
    """
    width = columns_env() or (None if sys.stdout.isatty() else PIPE_WIDTH)
    return _console_class()(
        file=sys.stdout,
        highlight=False,
        soft_wrap=False,
        width=width,
        no_color=_no_color(),
        **_plain(),
    )


@functools.cache
def _console_class() -> type[Console]:
    from rich.console import Console

    class _Console(Console):
        def print(self, *objects: Any, **kwargs: Any) -> None:
            # The last guard for text built from input (a title holding a tenant, a window):
            # control characters are shown, never obeyed; newlines and tabs stay.
            shown = [safe_text(o, body=True) if isinstance(o, str) else o for o in objects]
            super().print(*shown, **kwargs)

        def on_broken_pipe(self) -> None:
            # Rich would exit 1 here; the root group turns a broken pipe into a quiet 141,
            # like JSON output and other Unix tools (`agora spend | head`).
            raise BrokenPipeError

    return _Console


def err_console() -> Console:
    return _console_class()(
        file=sys.stderr,
        highlight=False,
        stderr=True,
        soft_wrap=True,
        no_color=_no_color(),
        **_plain(),
    )


def emit_json(doc: Any) -> None:
    """Print exactly one JSON document on stdout (strict JSON: no NaN, no Infinity)."""
    text = json.dumps(script_value(doc), indent=2, ensure_ascii=False, default=str, allow_nan=False)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def emit_csv(rows: Sequence[dict[str, Any]], columns: Sequence[Col]) -> None:
    """Print a header line and one CSV line per row: raw values, and text that starts like a
    spreadsheet formula (``= + - @``, tab, CR) prefixed with ``'`` (OWASP). On a terminal, text
    cells show control characters as escapes (``safe_text``); into a pipe or a file they are
    byte-exact."""
    on_terminal = sys.stdout.isatty()

    def line(cells: Sequence[Any]) -> str:
        shown = (safe_text(c) if on_terminal and isinstance(c, str) else c for c in cells)
        return ",".join(_csv_field(c) for c in shown) + "\n"

    sys.stdout.write(line([c.key for c in columns]))
    for row in rows:
        sys.stdout.write(line([csv_cell(row.get(c.key)) for c in columns]))


@dataclass(frozen=True)
class TableLayout:
    """Where a table's columns go at one width: the columns ``shown`` with their ``widths``
    (cells, without padding), and those ``hidden`` (in the order they were hidden)."""

    shown: tuple[int, ...]
    widths: tuple[int, ...]
    hidden: tuple[int, ...]


def _frame(count: int, plain: bool) -> int:
    """The columns a table's borders and padding take around ``count`` columns of cells (a
    ``plain`` table: no borders, two spaces between columns)."""
    return 2 * (count - 1) if plain else 3 * count + 1


def table_layout(
    columns: Sequence[Col],
    cells: Sequence[Sequence[str]],
    width: int,
    *,
    plain: bool = False,
) -> TableLayout:
    """Lay a table out in ``width`` columns (borders included) without breaking a word.

    1. Everything fits at its natural width: done.
    2. Else every column needs its floor: a ``wrap=False`` column its widest value; a word column
       its longest word (up to ``WORD_CAP``, ``PROSE_WORD`` for prose) and at least
       ``TEXT_WIDTH`` for text of several words; a header wraps between its words. The ``drop``
       columns are hidden, lowest first, until the floors fit.
    3. Still too wide: word columns give up characters (their long words end in ``…``), the
       widest first, down to ``CUT_WIDTH``; then columns are hidden from the right (never the
       first: the row's key). A hidden column that fits in what is left comes back.
    4. What width is left gives cut words their width back, then makes columns whole (those
       nearest to it first), then goes to the text columns that still wrap.
    """
    from rich.cells import cell_len

    def longest(texts: Any) -> int:
        return max((cell_len(t) for t in texts), default=0)

    natural: list[int] = []
    whole_word: list[int] = []  # the width at which no word of the column is cut
    floor: list[int] = []
    least: list[int] = []
    for i, col in enumerate(columns):
        header = _zoned(col.header or col.key)
        lines = [line for row in cells for line in row[i].split("\n")]
        header_word = longest(header.split())
        natural.append(max(cell_len(header), longest(lines)))
        if col.wrap:
            cap = PROSE_WORD if col.prose else WORD_CAP
            words = longest(w for line in lines for w in line.split())
            whole_word.append(max(header_word, words, 1))
            text = min(longest(lines), TEXT_WIDTH)
            floor.append(max(header_word, min(words, cap), text, 1))
            least.append(min(floor[-1], max(header_word, CUT_WIDTH)))
        else:
            floor.append(max(header_word, longest(lines), 1))
            whole_word.append(floor[-1])
            least.append(floor[-1])
    shown = list(range(len(columns)))
    if sum(natural) + _frame(len(shown), plain) <= width:
        return TableLayout(tuple(shown), tuple(natural), ())
    hidden: list[int] = []

    def over() -> int:
        return sum(widths[i] for i in shown) + _frame(len(shown), plain) - width

    widths = list(floor)
    droppable = [(col.drop, i) for i, col in enumerate(columns) if col.drop is not None and i]
    for _, i in sorted(droppable):  # never the first column: the row's key
        if over() <= 0:
            break
        shown.remove(i)
        hidden.append(i)
    while over() > 0:
        givers = [i for i in shown if widths[i] > least[i]]
        if not givers:
            break
        i = max(givers, key=lambda k: (widths[k] - least[k], k))
        widths[i] -= min(over(), widths[i] - least[i])
    while over() > 0 and len(shown) > 1:
        hidden.append(shown.pop())
    # A column hidden early may fit in what hiding a wide one left: back it comes, the last
    # hidden (the most important) first.
    for i in reversed(list(hidden)):
        shown.append(i)
        shown.sort()
        if over() > 0:
            shown.remove(i)
        else:
            hidden.remove(i)
    extra = -over()
    # First words that were cut get their width back, then columns become whole (a header or a
    # value on one line), the nearest first each time; what is left goes to the text columns
    # that still wrap, the most wrapped first.
    for i in sorted(shown, key=lambda k: (whole_word[k] - widths[k], k)):
        give = max(0, min(whole_word[i], natural[i], widths[i] + extra) - widths[i])
        widths[i] += give
        extra -= give
    for i in sorted(shown, key=lambda k: (natural[k] - widths[k], k)):
        if 0 < natural[i] - widths[i] <= extra:
            extra -= natural[i] - widths[i]
            widths[i] = natural[i]
    while extra > 0:
        wanting = [i for i in shown if columns[i].wrap and widths[i] < natural[i]]
        if not wanting:
            break
        i = max(wanting, key=lambda k: (natural[k] - widths[k], -k))
        widths[i] += 1
        extra -= 1
    return TableLayout(tuple(shown), tuple(widths[i] for i in shown), tuple(hidden))


def render_table(
    rows: Sequence[dict[str, Any]],
    columns: Sequence[Col],
    *,
    title: str | None = None,
    footer_rows: Sequence[dict[str, Any]] = (),
    row_styles: Sequence[str | None] | None = None,
    empty: str = "nothing to show",
    fuller: str = "--csv",
    plain: bool = False,
) -> None:
    """Print rows as a Rich table for people (``footer_rows`` after a rule, e.g. a total;
    ``plain``: no borders).

    Every value goes through ``Col.show`` (control characters escaped) into a ``Text``: cell
    values are data, never Rich markup; ``title`` is plain text too. The table is laid out by
    ``table_layout`` in the console's width (a terminal's, ``$COLUMNS``, or 120 into a pipe or a
    file): never wider, no word broken, a cut word ending in ``…``; the columns it hides are
    named on stderr with ``fuller`` (the output that has every column).
    """
    from rich.table import Table
    from rich.text import Text

    console = out_console()
    if not rows and not footer_rows:
        console.print(empty, markup=False)
        return
    cells = [[col.show(row.get(col.key)) for col in columns] for row in [*rows, *footer_rows]]
    layout = table_layout(columns, cells, console.width, plain=plain)
    table = Table(title=Text(safe_text(title)) if title else None, header_style="bold")
    if plain:
        table.box, table.show_edge, table.pad_edge = None, False, False
    for i, width in zip(layout.shown, layout.widths, strict=True):
        col = columns[i]
        table.add_column(
            Text(_zoned(col.header or col.key), overflow="ellipsis"),
            justify=col.justify,
            width=width,
            overflow="ellipsis",  # a word is never folded: what does not fit ends in "…"
        )
    for n, line in enumerate(cells):
        footer = n >= len(rows)
        style = "bold" if footer else (row_styles[n] if row_styles else None)
        last_body = n == len(rows) - 1 and bool(footer_rows)
        table.add_row(
            *(
                Text(line[i], no_wrap=not columns[i].wrap, overflow="ellipsis")
                for i in layout.shown
            ),
            style=style,
            end_section=last_body,
        )
    console.print(table)
    if layout.hidden:
        names = ", ".join(columns[i].header or columns[i].key for i in layout.hidden)
        say(f"note: {names} hidden to fit {console.width} columns; {fuller} has every column")


def fit(text: str, width: int) -> str:
    """``text`` in at most ``width`` terminal columns: whole, or cut with ``…`` at its end."""
    from rich.cells import cell_len, set_cell_size

    if cell_len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    return set_cell_size(text, width - 1) + ELLIPSIS


def series_marks(console: Console, count: int) -> list[str]:
    """The glyph of each of ``count`` series of a chart: one block for every series when the
    console shows colour, distinct glyphs when it does not (a legend of identical blocks says
    nothing; ``OTHER_GLYPH`` past the last of ``SERIES_GLYPHS``)."""
    if console.color_system is not None and not console.no_color:
        return ["█"] * count
    return [SERIES_GLYPHS[i] if i < len(SERIES_GLYPHS) else OTHER_GLYPH for i in range(count)]


def _zoned(header: str) -> str:
    """A header that says ``(UTC)`` says the display zone instead (``--tz``)."""
    return header.replace("(UTC)", f"({_ZONE['name']})") if _ZONE["name"] != "UTC" else header


def one_format(as_json: bool, csv: bool) -> None:
    """Refuse ``--json`` with ``--csv`` (exit 2), before anything runs."""
    if as_json and csv:
        from agora_cli.store._errors import InvalidInput

        raise InvalidInput("choose one of --json and --csv")


def finish(
    doc: Any,
    *,
    as_json: bool,
    show: Callable[[], None] | str,
    csv: tuple[Sequence[dict[str, Any]], Sequence[Col]] | None = None,
    exit_code: int = 0,
) -> None:
    """The tail of a command: the JSON document for scripts, or with ``csv=(rows, columns)``
    those rows as CSV, or for people ``show`` — a rendering function, or a sentence printed as
    plain text (control characters escaped) — then ``exit_code`` (1: the answer is negative)."""
    if as_json:
        emit_json(doc)
    elif csv is not None:
        emit_csv(*csv)
    elif callable(show):
        show()
    else:
        out_console().print(safe_text(show), markup=False, soft_wrap=True)
    if exit_code:
        import typer

        raise typer.Exit(exit_code)


def say(message: str, *, style: str | None = None) -> None:
    """A sentence for people, on stderr (never mixed into data on stdout; never markup, and
    control characters shown, not obeyed)."""
    err_console().print(safe_text(message), style=style, highlight=False, markup=False)


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


def short_ids(ids: Sequence[str | None], width: int = SHORT_ID) -> dict[str, str]:
    """Each id as a table shows it: its shortest prefix of at least ``width`` characters that no
    other id of the list shares, when that is at least 8 characters shorter than the id, else
    the whole id (a prefix cut just short of the end would look like another, real id).

    Time-ordered ids made within a minute share their first 8 characters and within a
    millisecond their first 13, so one width for all would show them whole; each id gets the
    length it needs (one neighbour comparison in sorted order). A prefix unique in the list but
    not in the database makes the command that takes it list the matches (exit 2): never a
    wrong pick."""
    ordered = sorted({i for i in ids if i is not None})
    need = dict.fromkeys(ordered, width)
    for a, b in itertools.pairwise(ordered):
        common = len(os.path.commonprefix((a, b)))  # noqa: RUF071 (characters are meant)
        need[a] = max(need[a], common + 1)
        need[b] = max(need[b], common + 1)
    return {ident: ident[:n] if len(ident) >= n + 8 else ident for ident, n in need.items()}


def first_line(text: str | None, width: int = 80) -> str | None:
    """The first line of ``text``, cut to ``width`` characters; ``…`` marks what was left out."""
    if text is None:
        return None
    lines = text.strip().splitlines()
    line = lines[0] if lines else ""
    if len(line) > width:
        return line[: width - 1] + "…"
    return line + (" …" if len(lines) > 1 else "")


def duration_text(ms: float | None) -> str:
    """A duration for people: ``850 ms``, ``4.2 s``, ``3m 20s``, ``2h 05m``, ``3d 04h``."""
    if ms is None:
        return "—"
    if ms < 1000:
        return f"{ms:,.0f} ms" if float(ms).is_integer() else f"{ms:,.1f} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours:02d}h"


def relative_text(at_ms: int | None, now_ms: int) -> str:
    """An instant relative to now: ``in 3h 12m`` or ``5m 02s ago``."""
    if at_ms is None:
        return "—"
    if at_ms > now_ms:
        return f"in {duration_text(at_ms - now_ms)}"
    return f"{duration_text(now_ms - at_ms)} ago"


_ZONE: dict[str, str] = {"name": "UTC"}


def set_display_zone(name: str | None) -> None:
    """``--tz``: the zone tables show times in (``None``: UTC); JSON and CSV stay UTC."""
    _ZONE["name"] = name or "UTC"


def display_zone() -> str:
    """The zone tables show times in: ``--tz``, ``AGORA_TZ``, a profile's ``tz``, else UTC."""
    return _ZONE["name"]


def table_time(iso: str | None) -> str:
    """An ISO time as a table shows it: ``2026-11-02 13:00:05`` (UTC, to the second), or in
    the display zone with its offset: ``2026-11-02 14:00:05 +01:00``."""
    if iso is None:
        return "—"
    if _ZONE["name"] == "UTC" or not iso.endswith("Z"):
        return iso[:19].replace("T", " ")
    # lazy: only a table shown in a zone other than UTC needs them
    from datetime import datetime
    from zoneinfo import ZoneInfo

    try:
        utc = datetime.fromisoformat(iso[:19] + "+00:00")
        local = utc.astimezone(ZoneInfo(_ZONE["name"]))
    except (ValueError, OverflowError):
        return iso[:19].replace("T", " ")
    offset = local.isoformat()[19:]  # "+01:00" (no fraction: the second is whole)
    return f"{local.strftime('%Y-%m-%d %H:%M:%S')} {offset}"
