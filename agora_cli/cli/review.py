"""`agora proposals review`: the inbox one item at a time, each decided with one key.

The walk reads the pending inbox (``ActionProposalStore.inbox``: proposals soonest to expire
first, then the runtime's own tool-call approvals) a page at a time, reads each proposal again
just before showing it (someone else may have decided it since the page was read), and decides
it through ``record_decision``: the store's ``decide`` in the row's own scope, the walk's one
write. A tool-call approval is shown but never decided here (``DECIDED_IN_THE_APP``).

The UI is Rich's console, which every agora command that prints already loads, and one key read
in cbreak mode (``termios``, standard library): nothing new to import or install, nothing for
``agora --help`` to load, and any terminal drives it with plain keystrokes (the tests drive it
in tmux). It needs a person: a stdin or stdout that is not a terminal is exit 2, pointing at
``proposals inbox`` and ``proposals decide``.
"""

from __future__ import annotations

# internal on purpose: the operator's commands import the store's private modules (cli/__init__.py)
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Protocol

import typer

from agora_cli.cli.options import DbOpt, open_db, scoped_tenant
from agora_cli.cli.output import (
    out_console,
    relative_text,
    safe_text,
    say,
    short_ids,
    table_time,
)
from agora_cli.cli.proposal_views import DECIDED_IN_THE_APP, pretty_json
from agora_cli.store._clock import iso_ms
from agora_cli.store._errors import AgoraError, InvalidInput
from agora_cli.store._values import check_identity

if TYPE_CHECKING:
    from rich.console import Console

    from agora_cli.store._proposals import (
        ActionProposalStore,
        DecideResult,
        Inbox,
        Proposal,
        ToolCallApproval,
    )

__all__ = ["record_decision", "review"]

# Items read per inbox page; a page past the first also re-reads the ones skipped so far.
PAGE = 50
# The inbox's own bound on one read: a walk that skipped this many stops there.
MAX_READ = 1000
# An input or card longer than this many lines is cut here (proposals show --json has it all).
MAX_LINES = 40
INTERRUPTED = 130  # Ctrl-C, as a shell reports a command ended by SIGINT
NOT_INTERACTIVE = (
    "agora proposals review is interactive and needs a terminal on stdin and stdout; in a "
    "script, list what waits with agora proposals inbox --json and decide each with agora "
    "proposals decide ID --approve|--reject --by WHO"
)
PROPOSAL_KEYS = {"a": "approve", "r": "reject", "s": "skip", "o": "open thread", "q": "quit"}
TOOL_CALL_KEYS = {"s": "skip", "o": "open thread", "q": "quit"}
_QUIT_KEYS = ("\x04",)  # Ctrl-D: quit, as q


# --- the one write ----------------------------------------------------------------------------


def record_decision(
    store: ActionProposalStore,
    proposal: Proposal,
    decision: str,
    operator: str,
    note: str | None,
) -> DecideResult:
    """Decide ``proposal`` for ``operator``: the store's ``decide`` in the row's own scope
    (tenant, actor, thread), as ``proposals decide ID`` without scope options does, so it
    answers ``applied``, ``unchanged``, ``conflict``, ``expired`` or ``not_found``; an applied
    decision is recorded in the proposal's history as the operator's (``operator_decision``).
    The walk's only write."""
    return store.decide_as_operator(proposal.id, decision, operator, note)


# --- the terminal -----------------------------------------------------------------------------


class Terminal(Protocol):
    """Where the walk reads keys and lines (a real TTY; a script in the in-process tests)."""

    def key(self) -> str:
        """One key as typed (``"\\x04"`` at the end of input)."""

    def line(self, prompt: str) -> str | None:
        """One line typed after ``prompt``, echoed and editable; ``None`` at the end of input."""

    def cooked(self) -> Any:
        """A context in which another program (the pager) owns the terminal as usual."""


class Tty:
    """The process's terminal: cbreak mode (one key at a time, no echo; Ctrl-C still
    interrupts) for the whole walk, the saved mode back for a typed line, the pager and the
    end, however the walk ends."""

    def __init__(self) -> None:
        import termios  # lazy: POSIX only, and only a walk needs it

        self._fd = sys.stdin.fileno()
        self._saved = termios.tcgetattr(self._fd)

    def __enter__(self) -> Tty:
        self._cbreak()
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()

    def _cbreak(self) -> None:
        import tty  # lazy: as termios

        tty.setcbreak(self._fd)

    def _restore(self) -> None:
        import termios  # lazy: as above

        termios.tcsetattr(self._fd, termios.TCSADRAIN, self._saved)

    def key(self) -> str:
        sys.stdout.flush()
        data = os.read(self._fd, 1)
        if not data:
            return "\x04"
        if data == b"\x1b" or data[0] >= 0x80:  # an escape sequence or a multi-byte key
            import select  # lazy: as termios

            while select.select([self._fd], [], [], 0.02)[0]:
                data += os.read(self._fd, 16)
        return data.decode("utf-8", errors="replace")

    def line(self, prompt: str) -> str | None:
        with self.cooked():
            sys.stdout.write(prompt)
            sys.stdout.flush()
            data = os.read(self._fd, 4096)  # canonical mode: at most one line
        if not data:
            sys.stdout.write("\n")
            return None
        return data.decode("utf-8", errors="replace").rstrip("\r\n")

    @contextmanager
    def cooked(self) -> Iterator[None]:
        self._restore()
        try:
            yield
        finally:
            self._cbreak()


def on_a_terminal() -> bool:
    """Whether a person is there to answer: stdin and stdout both terminals."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def open_terminal() -> Any:
    """The terminal to walk on, as a context manager (``Tty``; the tests put a script here)."""
    return Tty()


# --- the walk ---------------------------------------------------------------------------------


@dataclass
class Tally:
    """What the walk did: the summary at its end."""

    approved: int = 0
    rejected: int = 0
    skipped: int = 0
    elsewhere: int = 0  # decided, expired or gone by someone else's hand meanwhile

    def sentence(self) -> str:
        said = f"approved {self.approved}, rejected {self.rejected}, skipped {self.skipped}"
        if self.elsewhere:
            said += f"; {self.elsewhere} decided or expired elsewhere"
        return said + "."


@dataclass
class Walk:
    """One walk through the pending inbox (see the module docs)."""

    store: ActionProposalStore
    terminal: Terminal
    db: str | None
    operator: str | None
    filters: dict[str, str | None]
    tally: Tally = field(default_factory=Tally)
    seen: set[str] = field(default_factory=set)
    skipped: set[str] = field(default_factory=set)

    console: Console = field(default_factory=out_console)

    def run(self) -> str:
        """Walk until the inbox has nothing unseen (``done``), ``q`` (``quit``) or Ctrl-C
        (``interrupted``); the terminal is put back either way."""
        try:
            return "done" if self._walk() else "quit"
        except KeyboardInterrupt:
            self.console.print()
            return "interrupted"

    def _walk(self) -> bool:
        first = True
        while True:
            page = self._read()
            items = [e.proposal for e in page.entries if e.proposal.id not in self.seen]
            calls = [c for c in page.tool_calls if c.id not in self.seen]
            if first:
                self._opening(page, len(items), len(calls))
                first = False
            if not items and not calls:
                return True
            total = len(self.seen) + len(items) + len(calls)
            more = "+" if page.more else ""
            ids = short_ids([p.id for p in items] + [c.id for c in calls])
            if self.operator is None and items:
                self.operator = ask_operator(self.terminal)
            for p in items:
                self.seen.add(p.id)
                if not self._proposal(p, f"{len(self.seen)} of {total}{more}", ids[p.id]):
                    return False
            for c in calls:
                self.seen.add(c.id)
                if not self._tool_call(c, f"{len(self.seen)} of {total}{more}", ids[c.id]):
                    return False
            if len(self.skipped) + PAGE > MAX_READ:
                say(
                    f"note: {len(self.skipped):,} skipped; the walk stops here (run it again, or "
                    "narrow it with --tenant, --actor or --tool)",
                    style="yellow",
                )
                return True

    def _read(self) -> Inbox:
        return self.store.inbox(
            "pending",
            tenant_ref=self.filters["tenant"],
            actor_ref=self.filters["actor"],
            tool_name=self.filters["tool"],
            limit=min(MAX_READ, len(self.skipped) + PAGE),
        )

    def _opening(self, page: Inbox, proposals: int, calls: int) -> None:
        if page.past_expiry:
            say(
                f"note: {page.past_expiry:,} pending proposal(s) are past their expiry and can "
                "no longer be decided: agora proposals expire marks them",
                style="yellow",
            )
        if not proposals and not calls:
            self.console.print("nothing waiting for a decision.", markup=False)
            return
        parts = []
        if proposals:
            parts.append(
                f"{proposals}{'+' if page.more else ''} proposal(s), soonest to expire first"
            )
        if calls:
            parts.append(f"{calls} runtime tool-call approval(s), oldest first")
        self.console.print(safe_text("Waiting for a decision: " + "; then ".join(parts) + "."))

    # --- a proposal ---

    def _proposal(self, listed: Proposal, place: str, short: str) -> bool:
        p = self.store.find(listed.id, listed.scope)
        if p is None or p.decision != "pending":
            self._gone(listed, p)
            return True
        self._show_proposal(p, place, short)
        while True:
            key = self._ask(PROPOSAL_KEYS)
            if key == "q":
                return False
            if key == "s":
                self._skip(p.id)
                return True
            if key == "o":
                self._open(p.thread_id)
                self._show_proposal(p, place, short)
                continue
            note = None
            if key == "r":
                note = self.terminal.line("reason (recorded as the note; empty: back): ")
                if not note or not note.strip():
                    self.console.print("not rejected: a rejection needs a reason.", markup=False)
                    continue
            decision = "approved" if key == "a" else "rejected"
            assert self.operator is not None  # asked before the first proposal
            self._outcome(record_decision(self.store, p, decision, self.operator, note), decision)
            return True

    def _gone(self, listed: Proposal, now: Proposal | None) -> None:
        self.tally.elsewhere += 1
        if now is None:
            said = f"{listed.id} is gone (deleted with its thread?); moving on."
        else:
            said = f"{now.id} was {_audit(now)} meanwhile; moving on."
        self.console.print(safe_text(said), style="yellow", markup=False)

    def _show_proposal(self, p: Proposal, place: str, short: str) -> None:
        from rich.table import Table
        from rich.text import Text

        console = self.console
        now = self.store.clock.now_ms()
        console.print()
        console.rule(Text(safe_text(f"{place} · proposal {short}")), align="left")
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column(overflow="fold")
        grid.add_row("tool", Text(safe_text(p.tool_name)))
        grid.add_row("scope", Text(_scope_text(p.tenant_ref, p.actor_ref, p.thread_id)))
        grid.add_row("created", Text(_when(p.created_at, now)))
        expiry = "never" if p.expires_at is None else _when(p.expires_at, now)
        grid.add_row("expires", Text(expiry))
        if p.run_id is not None:
            grid.add_row("run", Text(safe_text(p.run_id)))
        grid.add_row("id", Text(safe_text(p.id)))
        sealed = _SEAL_NOTES.get(p.seal_state)
        if sealed:
            grid.add_row("sealed", Text(sealed, style="yellow"))
        if p.card is not None:
            grid.add_row("card", _card(p.card_value))
        grid.add_row("input", Text(_lines(pretty_json(p.input_value))))
        console.print(grid)

    def _outcome(self, result: DecideResult, decision: str) -> None:
        p = result.proposal
        if result.outcome == "applied" and p is not None:
            if decision == "approved":
                self.tally.approved += 1
                said, style = f"approved by {p.decided_by}: queued for a worker.", "green"
            else:
                self.tally.rejected += 1
                said, style = f"rejected by {p.decided_by}: {p.decision_note}", "red"
        else:
            self.tally.elsewhere += 1
            style = "yellow"
            if p is None:
                said = "not_found: it is gone (deleted with its thread?); nothing written."
            elif result.outcome == "expired":
                said = f"expired: it expired {iso_ms(p.expires_at)}; nothing written."
            else:
                said = f"{result.outcome}: it was already {_audit(p)}; nothing written."
        self.console.print(safe_text(said), style=style, markup=False)

    # --- a tool call ---

    def _tool_call(self, c: ToolCallApproval, place: str, short: str) -> bool:
        self._show_tool_call(c, place, short)
        while True:
            key = self._ask(TOOL_CALL_KEYS)
            if key == "q":
                return False
            if key == "s":
                self._skip(c.id)
                return True
            if c.thread_id is None:
                self.console.print("its message is gone: no thread to open.", markup=False)
                continue
            self._open(c.thread_id)
            self._show_tool_call(c, place, short)

    def _show_tool_call(self, c: ToolCallApproval, place: str, short: str) -> None:
        from rich.table import Table
        from rich.text import Text

        from agora_cli.store._sealing import SEALED_MARKER

        console = self.console
        now = self.store.clock.now_ms()
        console.print()
        console.rule(Text(safe_text(f"{place} · tool call {short}")), align="left")
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column(overflow="fold")
        grid.add_row("tool", Text(safe_text(c.tool_name)))
        grid.add_row("scope", Text(_scope_text(c.tenant_ref, c.actor_ref, c.thread_id)))
        grid.add_row("asked", Text(_when(c.created_at, now)))
        grid.add_row("expires", Text("never"))
        if c.run_id is not None:
            grid.add_row("run", Text(safe_text(c.run_id)))
        grid.add_row("id", Text(safe_text(c.id)))
        if c.input == SEALED_MARKER:
            grid.add_row("sealed", Text(_SEAL_NOTES["locked"], style="yellow"))
        grid.add_row("input", Text(_lines(pretty_json(c.input_value))))
        console.print(grid)
        console.print(
            safe_text(f"This is the runtime's own approval: {DECIDED_IN_THE_APP}."),
            style="yellow",
            markup=False,
        )

    # --- shared ---

    def _ask(self, keys: dict[str, str]) -> str:
        """Offer ``keys`` and return the one pressed (lower case); Ctrl-D is ``q``."""
        from rich.text import Text

        prompt = Text()
        for n, (key, word) in enumerate(keys.items()):
            if n:
                prompt.append("  ")
            rest = word[1:] if word.startswith(key) else f" {word}"
            prompt.append(f"[{key}]", style="bold cyan")
            prompt.append(rest)
        prompt.append(" › ")
        self.console.print(prompt, end="")
        while True:
            pressed = self.terminal.key()
            key = "q" if pressed in _QUIT_KEYS else pressed.lower()
            if key in keys:
                self.console.print(keys[key], markup=False)
                return key
            hint = ", ".join(keys)
            self.console.print(f"\npress one of {hint} › ", end="", markup=False)

    def _skip(self, item_id: str) -> None:
        self.tally.skipped += 1
        self.skipped.add(item_id)

    def _open(self, thread_id: str) -> None:
        """The thread's transcript, as ``threads show`` prints it (through the pager on a
        terminal); then back to the walk, whatever it said."""
        from agora_cli.cli import threads

        with self.terminal.cooked():
            try:
                threads.show(thread_id, db=self.db, read_db=None, as_json=False, no_pager=False)
            except typer.Exit:
                pass  # it showed the transcript and said what was wrong (a broken seal)
            except AgoraError as exc:
                say(f"error: {exc.message}")


def _when(at_ms: int, now_ms: int) -> str:
    return f"{table_time(iso_ms(at_ms))} UTC ({relative_text(at_ms, now_ms)})"


def _scope_text(tenant: str | None, actor: str | None, thread: str | None) -> str:
    return safe_text(f"tenant {tenant or '—'} · actor {actor or '—'} · thread {thread or '—'}")


def _audit(p: Proposal) -> str:
    """What became of a proposal: ``approved by X at T``, ``expired``."""
    said = str(p.decision)
    if p.decided_by:
        said += f" by {p.decided_by}"
    if p.decided_at is not None:
        said += f" at {iso_ms(p.decided_at)}"
    return said


_SEAL_NOTES = {
    "locked": "set AGORA_KEK or AGORA_KEK_FILE to read what is sealed",
    "broken": "broken: the sealed values do not open where they are stored",
    "shredded": "shredded: the tenant's data key was destroyed; the values are gone",
}


def _lines(text: str) -> str:
    """``text`` cut to ``MAX_LINES`` lines, saying how many more there were."""
    lines = text.splitlines()
    if len(lines) <= MAX_LINES:
        return text
    left = len(lines) - MAX_LINES
    return "\n".join([*lines[:MAX_LINES], f"… {left:,} more line(s): proposals show --json"])


def _card(card: Any) -> Any:
    """A card for people: its title in bold, its summary, any other keys as JSON."""
    from rich.text import Text

    if not isinstance(card, dict):
        return Text(
            _lines(safe_text(card, body=True) if isinstance(card, str) else pretty_json(card))
        )
    words = {k: card[k] for k in ("title", "summary") if isinstance(card.get(k), str)}
    rest = {k: v for k, v in card.items() if k not in words}
    shown = Text()
    if "title" in words:
        shown.append(safe_text(words["title"]), style="bold")
    if "summary" in words:
        shown.append(("\n" if shown else "") + safe_text(words["summary"], body=True))
    if rest:
        shown.append(("\n" if shown else "") + _lines(pretty_json(rest)))
    return shown


def ask_operator(terminal: Terminal) -> str:
    """The operator's name, asked once (no ``--by`` and no profile ``operator``)."""
    while True:
        given = terminal.line("Deciding as (recorded as decided_by; --by skips this): ")
        if given is None:
            raise InvalidInput("no operator given: pass --by WHO or set the profile's operator")
        given = given.strip()
        if not given:
            continue
        try:
            return check_identity("decided_by", given)
        except InvalidInput as exc:
            say(f"error: {exc.message}")


# --- the command ------------------------------------------------------------------------------


def review(
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            help="Who decides, recorded as decided_by (else the profile's operator, else asked "
            "once at the start).",
            show_default=False,
        ),
    ] = None,
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="Only this tenant's.", show_default=False)
    ] = None,
    actor: Annotated[
        str | None, typer.Option("--actor", help="Only this actor's.", show_default=False)
    ] = None,
    tool: Annotated[
        str | None, typer.Option("--tool", help="Only this tool's.", show_default=False)
    ] = None,
    db: DbOpt = None,
) -> None:
    """Walk the inbox one item at a time and decide each with one key (interactive).

    Pending proposals come soonest to expire first, then the runtime's own tool-call
    approvals. Each shows its tool, scope, age, expiry, card and input (sealed values opened
    with AGORA_KEK or AGORA_KEK_FILE), then asks for one key: a approve, r reject (asks a
    reason, recorded as the note), s skip, o open the thread's transcript, q quit. A tool call
    is decided in the app, not here: s, o and q only. Each decision is the store's decide in
    the proposal's own scope, by --by, else the profile's operator, else the name asked at the
    start; one decided or expired by someone else meanwhile shows its outcome, and the walk
    moves on. It ends with what was approved, rejected and skipped (exit 0; Ctrl-C 130).

    It needs a terminal on stdin and stdout (exit 2 otherwise): a script uses agora proposals
    inbox --json and agora proposals decide ID --approve|--reject --by WHO. No --json: there
    is no document to print.

    Example: agora proposals review --by ops-lead --tenant acme
    """
    from agora_cli.cli.profiles import profile_default

    if by is not None:
        check_identity("--by", by)
    operator = by if by is not None else profile_default("operator")
    tenant = scoped_tenant(tenant)
    if not on_a_terminal():
        raise InvalidInput(NOT_INTERACTIVE)
    from agora_cli.store._proposals import ActionProposalStore

    store = ActionProposalStore(open_db(db, tenant=tenant))
    filters = {"tenant": tenant, "actor": actor, "tool": tool}
    with open_terminal() as terminal:
        walk = Walk(store, terminal, db, operator, filters)
        ended = walk.run()
    if walk.seen or ended == "interrupted":
        said = walk.tally.sentence()
        out_console().print()
        out_console().print(said if ended == "done" else f"{ended}: {said}", markup=False)
    if ended == "interrupted":
        raise typer.Exit(INTERRUPTED)
