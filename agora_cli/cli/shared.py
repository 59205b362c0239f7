"""Options every command takes, wherever it sits in the tree: ``--profile``, ``--no-color`` and
``--all-tenants``.

They are added to every command and group once, when the root group is built (``AgoraGroup``),
so a command written later has them too, and ``--help`` lists them. Both are eager: a profile
fills the environment before ``--db`` and the others read it (see ``profiles.py``).
"""

from __future__ import annotations

import copy
import functools
from typing import Annotated, Any

import typer

from agora_cli.cli import output
from agora_cli.cli.errors import fail
from agora_cli.cli.options import remember_command, reset_session

__all__ = ["add_shared_options", "reset_shared_state"]

_MARK = "_agora_shared_options"


def _profile(ctx: typer.Context, value: str | None) -> None:
    if not value or ctx.resilient_parsing:
        return
    from agora_cli.cli.profiles import ProfileError, activate, exposed_secrets

    try:
        profile = activate(value)
    except ProfileError as exc:
        raise fail(str(exc), 2, "invalid_input") from None
    for warning in exposed_secrets(profile):
        output.say(warning, style="yellow")


def _no_color(ctx: typer.Context, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        output.set_no_color(True)


def _all_tenants(ctx: typer.Context, value: bool) -> None:
    # Called for every command and group of the invocation, given or not: the last one (the
    # command that runs) leaves its path for open_db, which decides what the tenant does.
    if ctx.resilient_parsing:
        return
    names: list[str] = []
    node: Any = ctx
    while node is not None and node.parent is not None:
        names.append(node.info_name or "")
        node = node.parent
    remember_command(" ".join(reversed(names)), value)


def _template(
    profile: Annotated[
        str | None,
        typer.Option(
            "--profile",
            metavar="NAME",
            envvar="AGORA_PROFILE",
            show_envvar=True,
            expose_value=False,
            is_eager=True,
            callback=_profile,
            help="Use the settings of this profile in config.toml (agora config show).",
            show_default=False,
        ),
    ] = None,
    no_color: Annotated[
        bool,
        typer.Option(
            "--no-color",
            expose_value=False,
            is_eager=True,
            callback=_no_color,
            help="No colour (also NO_COLOR=1; FORCE_COLOR=1 forces it).",
        ),
    ] = False,
    all_tenants: Annotated[
        bool,
        typer.Option(
            "--all-tenants",
            expose_value=False,
            is_eager=True,
            callback=_all_tenants,
            help="Ignore the session tenant (AGORA_TENANT, the profile's tenant) for this command.",
        ),
    ] = False,
) -> None:
    """The shared options, as Typer builds them."""


@functools.cache
def _options() -> tuple[Any, ...]:
    app = typer.Typer(add_completion=False)
    app.command()(_template)
    wanted = {"--profile", "--no-color", "--all-tenants"}
    return tuple(p for p in typer.main.get_command(app).params if wanted & set(p.opts))


def add_shared_options(command: Any) -> None:
    """Add the shared options to ``command`` and every command below it."""
    if not getattr(command, _MARK, False):
        taken = {opt for p in command.params for opt in getattr(p, "opts", [])}
        command.params.extend(copy.copy(p) for p in _options() if not taken & set(p.opts))
        setattr(command, _MARK, True)
    for sub in getattr(command, "commands", {}).values():
        add_shared_options(sub)


def reset_shared_state(*_: Any) -> None:
    """Undo what the shared options did for one command (the CLI may run again in-process)."""
    from agora_cli.cli.profiles import deactivate

    deactivate()
    reset_session()
    output.set_no_color(False)
    output.set_display_zone(None)
