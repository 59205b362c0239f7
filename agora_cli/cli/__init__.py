"""The ``agora`` command line: the root group (``AgoraGroup``), the root Typer app and its
command groups, one module (or package, ``db/``) per group, named for it.

Commands are thin: parse the options, call the store library, render. Nothing here imports
SQLAlchemy or httpx at module level, so ``agora --help`` stays fast.

The commands are agora's own front end over the store: where they need what a runtime does not
(provisioning internals, catalog reads, the fold, sealing), they import the store's private
modules on purpose, and each such module says so in a comment (``tests/test_public_api.py``).
Names a runtime also uses come from the public ``agora_cli.store``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from agora_cli import __version__
from agora_cli.cli import (
    budgets,
    config,
    db,
    demo,
    frames,
    keys,
    metrics,
    prices,
    proposals,
    quota,
    runs,
    spend,
    threads,
    tools,
)
from agora_cli.cli.errors import invoke_command, run_command, set_debug
from agora_cli.cli.options import startup_done
from agora_cli.cli.output import say
from agora_cli.cli.shared import add_shared_options, reset_shared_state

__all__ = ["AgoraGroup", "app", "lazy_root", "main", "startup_done"]


class AgoraGroup(TyperGroup):
    """The root command group: the shared options on every command, each command built when
    first used, and every command line run through ``errors`` (where failures become exit
    codes)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        add_shared_options(self)
        # name -> builder of a command not yet built (``lazy_root``): a command line builds
        # only the branch it runs, not the whole tree of ~60 commands.
        self.lazy: dict[str, Callable[[], Any]] = {}

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        build = self.lazy.get(cmd_name)
        if build is not None and cmd_name not in self.commands:
            command = build()
            add_shared_options(command)
            self.commands[cmd_name] = command
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: Any) -> list[str]:
        # In the order of COMMANDS (the panels' order in `agora --help`), not commands first:
        # Typer keeps the two lists apart.
        names = dict.fromkeys([*self.lazy, *super().list_commands(ctx)])
        order = {name: i for i, (name, _, _) in enumerate(COMMANDS)}
        return sorted(names, key=lambda name: order.get(name, len(order)))

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and args[0] not in self.lazy and args[0] not in self.commands:
            for name in list(self.lazy):  # unknown: build them all, for "did you mean"
                self.get_command(ctx, name)
        return super().resolve_command(ctx, args)

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)

        def call() -> Any:
            if os.environ.get("AGORA_KEK_FILE"):
                from agora_cli.cli.profiles import exposed_secrets

                for warning in exposed_secrets(None):
                    say(warning, style="yellow")
            return super(AgoraGroup, self).main(
                args=argv,
                prog_name=prog_name,
                complete_var=complete_var,
                standalone_mode=False,
                **extra,
            )

        try:
            code = run_command(argv, call)
        finally:
            reset_shared_state()
        if standalone_mode:
            sys.exit(code)
        return code

    def invoke(self, ctx: Any) -> Any:
        return invoke_command(lambda: super(AgoraGroup, self).invoke(ctx))


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


# `agora --help` lists the commands grouped by the job they do, in the order an operator meets
# them (issue 28); this table is both the registration and that order.
SET_UP, WATCH, DECIDE, MONEY, MAINTENANCE = "Set up", "Watch", "Decide", "Money", "Maintenance"
COMMANDS: tuple[tuple[str, str, typer.Typer | Callable[..., Any]], ...] = (
    ("demo", SET_UP, demo.demo),
    ("db", SET_UP, db.app),
    ("config", SET_UP, config.app),
    ("runs", WATCH, runs.app),
    ("tools", WATCH, tools.app),
    ("threads", WATCH, threads.app),
    ("metrics", WATCH, metrics.app),
    ("proposals", DECIDE, proposals.app),
    ("spend", MONEY, spend.app),
    ("quota", MONEY, quota.quota),
    ("budgets", MONEY, budgets.app),
    ("prices", MONEY, prices.app),
    ("frames", MAINTENANCE, frames.app),
    ("keys", MAINTENANCE, keys.app),
)
for _name, _panel, _target in COMMANDS:
    if isinstance(_target, typer.Typer):
        app.add_typer(_target, name=_name, rich_help_panel=_panel)
    else:
        app.command(_name, rich_help_panel=_panel)(_target)


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
