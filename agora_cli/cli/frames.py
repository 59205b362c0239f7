"""`agora frames`: read, tail and purge the SQL token sink's stream frames."""

from __future__ import annotations

# internal on purpose: the operator's commands import the store's private modules (cli/__init__.py)
import json as jsonlib
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agora_cli.cli.options import DbOpt, JsonOpt, TzOpt, open_db, scoped_tenant
from agora_cli.cli.output import (
    Col,
    emit_json,
    finish,
    out_console,
    progress,
    render_table,
    safe_text,
    say,
    script_value,
    table_time,
)
from agora_cli.store._clock import iso_ms
from agora_cli.store._errors import NotFound
from agora_cli.store._values import BIGINT_MAX

if TYPE_CHECKING:
    from rich.console import Console

    from agora_cli.store._frames import StreamFrame

__all__ = ["app"]

app = typer.Typer(
    help="Read, tail and purge the SQL token sink's stream frames.", no_args_is_help=True
)

TtlOpt = Annotated[
    int,
    typer.Option(
        "--ttl",
        min=1,
        max=1_000_000_000,
        metavar="SECONDS",
        help="A run lapses this long after its last write (at least 1).",
    ),
]
RunIdArg = Annotated[str, typer.Argument(metavar="RUN_ID", help="The run whose frames to use.")]

# Structural frames people need not see in a reassembled transcript.
_QUIET = frozenset(
    {"text-start", "text-end", "reasoning-start", "reasoning-end", "start-step", "finish-step"}
)


@app.command("purge")
def purge(
    ttl: TtlOpt = 3600,
    batch: Annotated[
        int,
        typer.Option("--batch", min=1, max=10000, help="Runs deleted per transaction (1-10000)."),
    ] = 100,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Count what would be purged; delete nothing.")
    ] = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Purge the runs whose last write is older than the TTL, in short bounded transactions.

    A run still being written is never purged, however old its first rows are. The cost follows
    the rows that aged out, not the size of the table: run it from cron as often as you like.

    Example: agora frames purge --ttl 3600 --db postgresql://app@db.internal/app --json
    """
    from agora_cli.store._frames import purge_expired

    tenant = scoped_tenant(None)  # the session tenant: its frames only, on every dialect
    engine = open_db(db, tenant=tenant)
    with progress("purging frames", None) as advance:
        report = purge_expired(
            engine,
            ttl,
            batch,
            dry_run=dry_run,
            on_batch=lambda runs, rows: advance(runs),
            tenant=tenant,
        )
    if as_json:
        emit_json(
            {
                "cutoff": iso_ms(report.cutoff),
                "runs_purged": report.runs_purged,
                "rows_deleted": report.rows_deleted,
                "runs_still_active": report.runs_still_active,
            }
        )
        return
    verb = "Would purge" if dry_run else "Purged"
    out_console().print(
        f"{verb} {report.runs_purged:,} run(s), {report.rows_deleted:,} row(s), idle since "
        f"before {iso_ms(report.cutoff)}; kept {report.runs_still_active:,} run(s) with old "
        "rows that are still being written."
    )


@app.command("close")
def close(run_id: RunIdArg, db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Delete one run's rows at once (a finished stream nobody will replay).

    Idempotent: closing a run with no rows deletes nothing and exits 0. A reader following the
    run ends.

    Example: agora frames close run_01HF3Z --json
    """
    from agora_cli.store._frames import close as close_run

    with open_db(db).begin() as conn:
        deleted = close_run(conn, run_id)
    finish(
        {"run_id": run_id, "rows_deleted": deleted},
        as_json=as_json,
        show=f"Closed run {run_id}: {deleted:,} row(s) deleted.",
    )


@app.command("stats")
def stats(
    ttl: TtlOpt = 3600, tz: TzOpt = "UTC", db: DbOpt = None, as_json: JsonOpt = False
) -> None:
    """Show the sink at a glance: runs, rows, ended runs, the oldest row, runs past the TTL.

    Reads the whole table once (an operator's question, not a hot path).

    Example: agora frames stats --ttl 900 --json
    """
    from agora_cli.store._frames import frame_stats

    with open_db(db, readonly=True).connect() as conn:
        st = frame_stats(conn, ttl_s=ttl)
    doc = {
        "runs": st.runs,
        "rows": st.rows,
        "ended_runs": st.ended_runs,
        "oldest": iso_ms(st.oldest),
        "expired_runs": st.expired_runs,
    }
    if as_json:
        emit_json(doc)
        return
    labels = {
        "runs": "runs",
        "rows": "rows",
        "ended_runs": "ended runs",
        "oldest": "oldest row",
        "expired_runs": f"runs past the TTL ({ttl:,} s)",
    }
    render_table(
        [
            {
                "what": labels[key],
                "value": table_time(str(value)) if key == "oldest" and value else value,
            }
            for key, value in doc.items()
        ],
        [Col("what", ""), Col("value", "", justify="right")],
    )
    if st.expired_runs:
        say(f"`agora frames purge --ttl {ttl}` deletes the {st.expired_runs:,} expired run(s).")


@app.command("tail")
def tail(
    run_id: RunIdArg,
    after: Annotated[
        int,
        typer.Option("--after", min=0, max=BIGINT_MAX, metavar="SEQ", help="Start after this seq."),
    ] = 0,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep polling until the end marker.")
    ] = False,
    poll_ms: Annotated[
        int,
        typer.Option("--poll-ms", min=10, max=60000, help="Polling interval with --follow."),
    ] = 250,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print a run's frames in order: text reassembled for people, JSON lines with --json.

    With --json each frame is one line {"seq", "created_at", "frame"}; the end marker has
    "frame": null. With --follow it polls every --poll-ms until the end marker (exit 0), or until
    the run has no rows left (closed or purged; exit 0, with a note on stderr). A run with no
    rows at all is exit 1. Ctrl-C ends a follow cleanly with exit 130 (what was printed stays
    whole: complete JSON lines).

    Example: agora frames tail run_01HF3Z --follow --json | jq -r .frame.delta
    """
    from agora_cli.store._frames import find_last_frame, read_frames
    from agora_cli.store._frames import follow as follow_frames

    engine = open_db(db, readonly=True)
    with engine.connect() as conn:
        rows = [] if follow else read_frames(conn, run_id, after=after)
        if not rows and find_last_frame(conn, run_id) is None:
            raise NotFound(f"run {run_id!r} has no frames (never written, closed or purged)")
    view = _JsonLines() if as_json else _Transcript(out_console())
    if not follow:
        view.show_all(rows)
        return
    with _ctrl_c_exits(view):
        view.show_all(follow_frames(engine, run_id, after=after, poll_ms=poll_ms))
    if not view.reached_end:
        say(f"run {safe_text(run_id)} has no rows left (closed or purged); stopped following.")


@contextmanager
def _ctrl_c_exits(view: _View) -> Iterator[None]:
    """Turn Ctrl-C during a follow into a clean exit 130 (no traceback, output left whole)."""
    try:
        yield
    except KeyboardInterrupt:
        view.finish()
        say("stopped (Ctrl-C).")
        raise typer.Exit(130) from None


class _View:
    reached_end = False

    def show_all(self, rows: Iterable[StreamFrame]) -> None:
        for row in rows:
            self.show(row)
            self.reached_end = row.is_end
        self.finish()

    def show(self, row: StreamFrame) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        sys.stdout.flush()


class _JsonLines(_View):
    """One JSON object per frame and line: {"seq", "created_at", "frame"}."""

    def show(self, row: StreamFrame) -> None:

        doc = {"seq": row.seq, "created_at": iso_ms(row.created_at), "frame": row.payload()}
        sys.stdout.write(jsonlib.dumps(script_value(doc), ensure_ascii=False) + "\n")
        sys.stdout.flush()


class _Transcript(_View):
    """Text and reasoning reassembled as people read them; other frames as one dim line each."""

    def __init__(self, console: Console) -> None:
        console.soft_wrap = True  # deltas arrive in pieces: never wrap (or break) a piece alone
        self.console = console
        self.part: tuple[str, Any] | None = None
        self.mid_line = False

    def _write(self, text: str, style: str | None = None) -> None:
        if text:
            self.console.print(text, end="", style=style, markup=False, highlight=False)
            self.mid_line = not text.endswith("\n")

    def _newline(self) -> None:
        if self.mid_line:
            self.console.print()
            self.mid_line = False

    def show(self, row: StreamFrame) -> None:
        frame = row.payload()
        if row.is_end:
            self._newline()
            self.console.print(f"[end of run · seq {row.seq}]", style="dim", markup=False)
            self.part = None
            return
        if not isinstance(frame, dict):
            self._newline()
            self.console.print(f"[seq {row.seq}] {safe_text(frame)}", style="dim", markup=False)
            self.part = None
            return
        kind = frame.get("type")
        if kind in ("text-delta", "reasoning-delta", "tool-input-delta"):
            part = (kind, frame.get("tool_call_id") or frame.get("id"))
            if part != self.part:
                self._newline()
                if kind == "reasoning-delta":
                    self._write("thinking: ", "dim")
                elif kind == "tool-input-delta":
                    self._write(f"tool input {safe_text(frame.get('tool_call_id'))}: ", "dim")
                self.part = part
            style = None if kind == "text-delta" else "dim"
            # The model's text keeps its newlines and tabs; any other control character (an
            # OSC-52 clipboard write, a screen clear) is shown, never obeyed.
            self._write(safe_text(frame.get("delta", ""), body=True), style)
            return
        if kind in _QUIET:
            return
        self._newline()
        self.part = None
        rest = {k: v for k, v in frame.items() if k != "type"}
        detail = jsonlib.dumps(rest, ensure_ascii=False) if rest else ""
        if len(detail) > 300:
            detail = detail[:299] + "…"
        self.console.print(safe_text(f"[{kind}] {detail}".rstrip()), style="dim", markup=False)

    def finish(self) -> None:
        self._newline()
        self.console.file.flush()
