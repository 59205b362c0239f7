"""The ``agora`` command line: the root Typer app and its command groups.

Commands are thin: parse the options, call the store library, render. Nothing here imports
SQLAlchemy or httpx at module level, so ``agora --help`` stays fast.
"""

from __future__ import annotations

from typing import Annotated

import typer

from agora_cli import __version__
from agora_cli.cli import (
    budgets,
    db,
    demo,
    frames,
    keys,
    prices,
    proposals,
    quota,
    runs,
    spend,
    threads,
    tools,
)
from agora_cli.cli.errors import AgoraGroup, set_debug

__all__ = ["app", "main"]

app = typer.Typer(
    name="agora",
    cls=AgoraGroup,
    help=(
        "The operator's command line for a governed AI agent's durable state: threads, "
        "messages, runs, the token-usage ledger, prices, stream frames and action proposals, "
        "in your own PostgreSQL, MySQL/MariaDB or SQLite database.\n\n"
        "Example: agora demo && agora spend --by model"
    ),
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    # Markdown joins a docstring's wrapped lines into paragraphs (plain "rich" keeps the breaks).
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"agora {__version__}")
        raise typer.Exit(0)


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
    debug: Annotated[
        bool,
        typer.Option(
            "--debug",
            help="Show tracebacks (locals hidden) instead of one-line errors.",
            envvar="AGORA_DEBUG",
            show_envvar=True,
        ),
    ] = False,
) -> None:
    """agora: provision, inspect and operate an AI agent's durable state."""
    set_debug(debug)


app.add_typer(db.app, name="db")
app.add_typer(prices.app, name="prices")
app.add_typer(spend.app, name="spend")
app.command("quota")(quota.quota)
app.add_typer(budgets.app, name="budgets")
app.add_typer(frames.app, name="frames")
app.add_typer(proposals.app, name="proposals")
app.add_typer(threads.app, name="threads")
app.add_typer(runs.app, name="runs")
app.add_typer(tools.app, name="tools")
app.add_typer(keys.app, name="keys")
app.command("demo")(demo.demo)


def main() -> None:
    """Console-script entry point."""
    app(prog_name="agora")
