"""`agora db redact`: settled tool I/O replaced by keyed hashes, for good."""

from __future__ import annotations

# internal on purpose: the operator's commands import the store's private modules (cli/__init__.py)
import sys
from typing import Annotated

import typer

from agora_cli.cli.options import DbOpt, JsonOpt, YesOpt, open_db, scoped_tenant
from agora_cli.cli.output import finish, progress, say
from agora_cli.store._errors import InvalidInput

__all__ = ["redact"]


def _stdin_is_terminal() -> bool:
    """Whether a person can be asked (tests stand in a terminal here)."""
    return sys.stdin.isatty()


def redact(
    tool_io: Annotated[
        bool,
        typer.Option(
            "--tool-io",
            help="Redact tool I/O: calls, messages' tool parts, proposals, frames (required).",
        ),
    ] = False,
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            metavar="DURATION",
            help="Only work settled before this long ago: 30d, 12h, 4w (m is minutes).",
            show_default=False,
        ),
    ] = None,
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="Only this tenant's rows.", show_default=False)
    ] = None,
    batch: Annotated[
        int, typer.Option("--batch", min=1, max=10_000, help="Rows per transaction (1-10000).")
    ] = 500,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count; change nothing.")] = False,
    yes: YesOpt = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Replace settled tool I/O with keyed hashes (HMAC-SHA-256), for good.

    Tool calls' input and output, messages' tool parts and outcome, settled proposals' input,
    card and result, and the frames of finished runs, when their run finished (or, without a
    run, they were created) before the cutoff. Each value becomes
    `agora:redacted:v1:<tag>:<hmac>` under its tenant's key, derived from the KEK (AGORA_KEK /
    AGORA_KEK_FILE, required; exit 3 without): a guess cannot be checked without it. Errors
    keep their first line; tool names, states, times and counts stay. Bounded batches, each
    its own transaction: an interrupted run resumes; only values not exactly in the redacted
    form are changed, and counted. Asks on a terminal; without one needs --yes (else exit 2).

    Example: agora db redact --tool-io --older-than 30d --yes --json
    """
    from agora_cli.store._clock import iso_ms
    from agora_cli.store._redact import redact_cutoff, redact_tool_io, redaction_kek

    if not tool_io:
        raise InvalidInput("say what to redact: --tool-io (tool calls' input and output)")
    if older_than is None:
        raise InvalidInput("--older-than is required (e.g. --older-than 30d)")
    cutoff = redact_cutoff(older_than)
    if not (yes or dry_run) and not _stdin_is_terminal():
        raise InvalidInput("not redacting without --yes: there is no terminal to ask on")
    tenant = scoped_tenant(tenant)
    if not dry_run:
        redaction_kek()  # exit 3 before asking: hashing needs the key-encryption key
    engine = open_db(db, tenant=tenant)
    if not (yes or dry_run):
        counted = redact_tool_io(engine, cutoff_ms=cutoff, tenant=tenant, dry_run=True)
        if not counted.matched:
            yes = True  # nothing to ask about
        elif not typer.confirm(
            f"Replace the tool I/O of {counted.matched:,} settled row(s) older than {older_than} "
            "with keyed hashes? This cannot be undone.",
            default=False,
            err=True,
        ):
            say("nothing redacted.")
            raise typer.Exit(1)
    with progress("redacting", None) as advance:
        report = redact_tool_io(
            engine,
            cutoff_ms=cutoff,
            tenant=tenant,
            batch=batch,
            dry_run=dry_run,
            on_batch=lambda b: advance(b.redacted),
        )
    doc = {
        "kind": "tool_io",
        "older_than": older_than,
        "cutoff": iso_ms(report.cutoff),
        "tenant": tenant,
        "dry_run": report.dry_run,
        "matched": report.matched,
        "redacted": report.redacted,
        "inputs": report.inputs,
        "outputs": report.outputs,
        "errors_trimmed": report.errors_trimmed,
        "batches": report.batches,
        "remaining": report.remaining,
        "tables": {
            name: {"matched": n.matched, "redacted": n.redacted, "remaining": n.remaining}
            for name, n in report.tables.items()
        },
        "values": report.values,
    }
    if dry_run:
        sentence = f"Would redact {report.matched:,} row(s) (dry run: nothing changed)."
    else:
        sentence = (
            f"Redacted {report.redacted:,} row(s) in {report.batches} batch(es): "
            f"{sum(report.values.values()):,} value(s) hashed; {report.remaining:,} remain."
        )
    finish(doc, as_json=as_json, show=sentence)
