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
    config,
    db,
    demo,
    frames,
    prices,
    proposals,
    quota,
    runs,
    spend,
    threads,
    tools,
)
from agora_cli.cli.errors import AgoraGroup, set_debug

__all__ = ["app", "lazy_root", "main", "startup_done"]

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
app.command("demo")(demo.demo)
app.add_typer(config.app, name="config")


def lazy_root() -> AgoraGroup:
    """The root group with every command registered above, each built when first used.

    Typer builds the whole tree of Click commands before parsing anything (~40 ms, most of the
    CPU an `agora spend` spends outside its imports and its query); this builds the root alone,
    and each command from the same registration, as `app` itself would, on first use (a test
    holds the two trees equal).
    """
    import copy
    from functools import partial

    from typer.main import get_command, get_command_from_info, get_command_name, get_group_from_info

    shell = copy.copy(app)
    shell.registered_commands = []
    shell.registered_groups = []
    root = get_command(shell)
    assert isinstance(root, AgoraGroup)
    for info in app.registered_commands:
        assert info.callback is not None
        name = info.name or get_command_name(info.callback.__name__)
        root.lazy[name] = partial(
            get_command_from_info,
            info,
            pretty_exceptions_short=app.pretty_exceptions_short,
            rich_markup_mode=app.rich_markup_mode,
        )
    for group in app.registered_groups:
        assert group.name
        root.lazy[group.name] = partial(
            get_group_from_info,
            group,
            pretty_exceptions_short=app.pretty_exceptions_short,
            rich_markup_mode=app.rich_markup_mode,
            suggest_commands=app.suggest_commands,
        )
    return root


def main() -> None:
    """Console-script entry point.

    The cyclic garbage collector is off while the process starts (imports allocate hundreds of
    thousands of objects, none of them garbage, and each collection walks them all: ~15% of a
    short command's CPU); ``open_db`` turns it back on, with what was built so far frozen out of
    its walks, before any real work (``startup_done``).
    """
    import gc

    gc.disable()
    try:
        lazy_root().main(prog_name="agora")
    finally:
        startup_done()


def startup_done() -> None:
    """Freeze the objects the start-up built and turn the garbage collector back on."""
    import gc

    if not gc.isenabled():
        gc.freeze()
        gc.enable()
