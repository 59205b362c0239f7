"""Turn agora errors into one ``error: …`` line on stderr and the documented exit code.

This is the only place that does. Commands never ``try``: an ``AgoraError`` (or a driver error
that ``store.engine.translate_error`` recognises) raised anywhere below the root group ends here.
``--debug`` (or ``AGORA_DEBUG=1``) re-raises instead, for a traceback with locals hidden.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import typer
from typer.core import TyperGroup

from agora_cli.store.errors import AgoraError

__all__ = ["AgoraGroup", "debug_enabled", "error_line"]

_DEBUG = {"on": False}


def debug_enabled() -> bool:
    return _DEBUG["on"] or os.environ.get("AGORA_DEBUG", "") not in ("", "0", "false", "no")


def set_debug(on: bool) -> None:
    _DEBUG["on"] = on


def error_line(message: str) -> None:
    """Write ``error: message`` (one line, password-masked) to stderr."""
    from agora_cli.store.engine import mask_url

    first = " ".join(mask_url(message).split()) or "unknown error"
    typer.echo(f"error: {first}", err=True)


def _translate(exc: BaseException) -> AgoraError | None:
    if isinstance(exc, AgoraError):
        return exc
    if "sqlalchemy" in sys.modules:
        from agora_cli.store.engine import translate_error

        return translate_error(exc)
    return None


class AgoraGroup(TyperGroup):
    """The root command group: the single place where errors become exit codes."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except BrokenPipeError:
            # `agora … | head`: the reader left; stop quietly, as other Unix tools do.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise typer.Exit(141) from None
        except Exception as exc:
            if type(exc).__module__.startswith("typer."):
                raise
            if debug_enabled():
                raise
            err = _translate(exc)
            if err is None:
                name = type(exc).__name__
                error_line(f"unexpected {name}: {exc} (`agora --debug …` shows a traceback)")
                raise typer.Exit(1) from None
            error_line(err.message)
            raise typer.Exit(err.exit_code) from None
