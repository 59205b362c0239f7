"""Turn every failure into one ``error: …`` line on stderr and the documented exit code.

This is the only place that does. Commands never ``try``: an ``AgoraError`` (or a driver error
that ``store.engine.translate_error`` recognises) raised anywhere below the root group
(``agora_cli.cli.AgoraGroup``, which runs every command line through ``run_command`` and
``invoke_command``) ends here, and so do Typer's own usage errors, which get the same one-line
style instead of a boxed panel.
With ``--json`` the error is also one JSON document on stdout::

    {"error": {"exit_code": 2, "kind": "invalid_input", "message": "…"}}

``--debug`` (or ``AGORA_DEBUG=1``) prints the traceback instead (locals hidden, credentials
scrubbed). A reader that leaves early (``agora … | head``) ends the command quietly with 141,
whatever was being printed; a closed stdout (``>&-``) discards the output quietly.
"""

from __future__ import annotations

# internal on purpose: the operator's commands import the store's private modules (cli/__init__.py)
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

import typer

from agora_cli.cli.output import safe_text
from agora_cli.store._errors import AgoraError, InvalidInput
from agora_cli.store._masking import scrub

__all__ = [
    "OUTPUT_ERROR",
    "OutputError",
    "debug_enabled",
    "error_line",
    "fail",
    "invoke_command",
    "remember_json",
    "run_command",
    "set_debug",
]

_STATE: dict[str, Any] = {"debug": False, "json": False, "argv": []}
# Library parameters whose flag is not simply ``--`` + the name with dashes.
_FLAGS = {"table_lock_timeout_s": "--lock-timeout", "lock_timeout_s": "--lock-timeout"}
_BROKEN_PIPE = 141
# The output could not be written (a full disk, /dev/full, an I/O error): not "the answer is
# negative" (1), which a script must be able to tell apart.
OUTPUT_ERROR = 4
_COMMAND_OPTIONS = ("--db", "--json", "--csv")


def debug_enabled() -> bool:
    return _STATE["debug"] or os.environ.get("AGORA_DEBUG", "") not in ("", "0", "false", "no")


def set_debug(on: bool) -> None:
    _STATE["debug"] = on


def remember_json(value: bool) -> bool:
    """Option callback of ``--json``: errors of this command are JSON documents too."""
    if value:
        _STATE["json"] = True
    return value


def error_line(message: str) -> None:
    """Write ``error: message`` (one line, credentials scrubbed, controls escaped) to stderr."""
    first = safe_text(" ".join(scrub(message).split())) or "unknown error"
    typer.echo(f"error: {first}", err=True)


def _kind(exc: BaseException) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(exc).__name__).lower()


def fail(message: str, exit_code: int, kind: str) -> typer.Exit:
    """Print the one-line error (and its JSON document with ``--json``); the exit to raise."""
    error_line(message)
    if _STATE["json"]:
        doc = {"error": {"exit_code": exit_code, "kind": kind, "message": scrub(message)}}
        _write_stdout(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    return typer.Exit(exit_code)


def _write_stdout(text: str) -> None:
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except (BrokenPipeError, ValueError, OSError, OutputError):
        _silence_stdout()


def _translate(exc: BaseException) -> AgoraError | None:
    if isinstance(exc, AgoraError):
        return exc
    if isinstance(exc, RecursionError):
        return InvalidInput("the input is nested too deeply")
    if isinstance(exc, ValueError) and "embedded null" in str(exc):  # os.fspath / open()
        return InvalidInput("a file name or path holds a NUL character (\\x00)")
    if "sqlalchemy" in sys.modules:
        from agora_cli.store._engine import translate_error

        return translate_error(exc)
    return None


def _as_typed(err: AgoraError) -> str:
    """The error's message, naming the flag the operator typed rather than the library's
    parameter (``lease_ms must be …`` → ``--lease-ms must be …``, ``actor_ref`` → ``--actor``).

    A name is replaced only as a whole word that is not already a flag (``--last`` stays, never
    ``----last``), and only by a flag on the command line: a column named in a schema message
    (``tenant_ref of agent_run``) is left alone when no ``--tenant`` was typed."""
    typed = {arg.split("=", 1)[0] for arg in _STATE["argv"] if arg.startswith("--")}
    message = err.message
    names = set(_INTERNAL_NAME_RE.findall(message))
    param = getattr(err, "param", None)
    if param:
        names.add(param)
    for name in names:
        for flag in _flags_of(name):
            if flag in typed:
                pattern = r"(?<![\w-])" + re.escape(name) + r"(?![\w-])"
                message = re.sub(pattern, flag, message)
                break
    return message


_INTERNAL_NAME_RE = re.compile(r"(?<![\w-])[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?![\w-])")


def _flags_of(name: str) -> list[str]:
    """The flags a library parameter may have been given by: ``_FLAGS``, the name with dashes,
    and without a ``_ref``/``_usd``/``limit_`` decoration (``actor_ref`` → ``--actor``)."""
    flags = [_FLAGS[name]] if name in _FLAGS else []
    flags.append("--" + name.replace("_", "-"))
    short = re.sub(r"^limit_|_ref$|_id$", "", name)
    if short != name:
        flags.append("--" + short.replace("_", "-"))
    return flags


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that nothing more (not even Python's last flush) fails."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _rich_broken_pipe(exc: SystemExit) -> bool:
    """Whether ``exc`` is Rich's exit on a broken pipe (a console we did not make: Typer's help);
    Rich has already pointed stdout at /dev/null."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_name == "on_broken_pipe"


class OutputError(Exception):
    """stdout refused what the command wrote (not a closed pipe: that is a quiet 141)."""


class _Stdout:
    """stdout as the command sees it: a write or flush that fails with anything but a broken
    pipe becomes ``OutputError`` (exit 4), wherever it happens (Rich, JSON, CSV, Typer)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def _guard(self, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError(exc.strerror or str(exc)) from exc

    def write(self, text: str) -> int:
        return int(self._guard(lambda: self._stream.write(text)))

    def flush(self) -> None:
        self._guard(self._stream.flush)


def _output_failed(exc: OutputError) -> int:
    _silence_stdout()
    return fail(f"the output could not be written: {exc}", OUTPUT_ERROR, "output_error").exit_code


def _print_traceback(exc: BaseException) -> None:
    import traceback

    text = "".join(traceback.format_exception(exc))
    sys.stderr.write(scrub(text))
    sys.stderr.flush()


def _invalid_utf8(args: Sequence[str]) -> str | None:
    for arg in args:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            return arg.encode("utf-8", "surrogateescape").decode("ascii", "backslashreplace")
    return None


def _non_ascii_number(args: Sequence[str]) -> str | None:
    """An argument that Python would read as a number but that is not written in ASCII digits
    (``٣``, ``１２``): ``int()`` accepts them, so Click's number options would too."""
    for arg in args:
        value = arg.split("=", 1)[1] if arg.startswith("--") and "=" in arg else arg
        if value.isascii():
            continue
        try:
            float(value)
        except ValueError:
            continue
        return value
    return None


def _misplaced_option(args: Sequence[str]) -> tuple[str, list[str]] | None:
    """A per-command option written before the command (``agora --db URL spend``), and the
    command's words as typed after it."""
    for i, arg in enumerate(args):
        name = arg.split("=", 1)[0]
        if name in _COMMAND_OPTIONS:
            rest = list(args[i + 1 :])
            if name == "--db" and "=" not in arg and rest:
                rest = rest[1:]  # its value
            words = []
            for word in rest:
                if word.startswith("-"):
                    break
                words.append(word)
            return name, words
        if not arg.startswith("-"):
            return None
    return None


def run_command(argv: list[str], call: Callable[[], Any]) -> int:
    """Run one command line and return its exit code: ``call`` is Click's ``main`` without its
    own error handling, and every failure of it (the output's too) ends here."""
    _STATE["json"] = "--json" in argv
    _STATE["argv"] = argv
    if sys.stdout is None:  # started with stdout closed (`agora … >&-`)
        sys.stdout = open(os.devnull, "w")  # lives as long as the process
    real_stdout = sys.stdout
    sys.stdout = _Stdout(real_stdout)
    try:
        return _flush(_run(argv, call))
    finally:
        sys.stdout = real_stdout


def _run(argv: list[str], call: Callable[[], Any]) -> int:
    bad = _invalid_utf8(argv)
    if bad is not None:
        return fail(f"argument '{bad}' is not valid UTF-8", 2, "invalid_input").exit_code
    number = _non_ascii_number(argv)
    if number is not None:
        message = f"{number!r} is a number in other than ASCII digits; write it with 0-9"
        return fail(message, 2, "invalid_input").exit_code
    try:
        rv = call()
    except typer.Exit as exc:
        return exc.exit_code
    except typer.TyperException as exc:  # Typer's usage errors: the same one-line style
        return _usage_error(exc, argv).exit_code
    except typer.Abort:
        typer.echo("aborted", err=True)
        return 1
    except BrokenPipeError:
        _silence_stdout()
        return _BROKEN_PIPE
    except OutputError as exc:
        return _output_failed(exc)
    except SystemExit as exc:
        if _rich_broken_pipe(exc):  # Typer's help (`agora --help | head -1`)
            return _BROKEN_PIPE
        raise
    return rv if isinstance(rv, int) and not isinstance(rv, bool) else 0


def _usage_error(exc: typer.TyperException, argv: list[str]) -> typer.Exit:
    message = exc.format_message().strip()
    if not message:  # no arguments: the help was printed, as `no_args_is_help` asks
        return typer.Exit(exc.exit_code)
    misplaced = _misplaced_option(argv)
    if misplaced is not None and "No such option" in message:
        option, words = misplaced
        shown = "--db URL" if option == "--db" else option
        message = f"options go after the command: agora {' '.join(words or ['spend'])} {shown}"
    else:
        ctx = getattr(exc, "ctx", None)
        if ctx is not None:
            message += f" (see `{ctx.command_path} --help`)"
    return fail(message, exc.exit_code, "usage")


def _flush(code: int) -> int:
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
        return _BROKEN_PIPE
    except OutputError as exc:
        return _output_failed(exc)
    except (OSError, ValueError):
        _silence_stdout()
    return code


def invoke_command(call: Callable[[], Any]) -> Any:
    """Invoke the command (``call``): an ``AgoraError``, or a driver error that
    ``translate_error`` recognises, becomes ``error: …`` and its exit code; anything else is
    ``unexpected …`` (exit 1), or its traceback under ``--debug``."""
    try:
        return call()
    except (typer.Exit, typer.Abort, KeyboardInterrupt, OutputError):
        raise
    except BrokenPipeError:
        # `agora … | head`: the reader left; stop quietly, as other Unix tools do.
        _silence_stdout()
        raise typer.Exit(_BROKEN_PIPE) from None
    except Exception as exc:
        if isinstance(exc, typer.TyperException):
            raise
        if debug_enabled():
            _print_traceback(exc)
            err = _translate(exc)
            raise typer.Exit(err.exit_code if err is not None else 1) from None
        err = _translate(exc)
        if err is None:
            name = type(exc).__name__
            raise fail(
                f"unexpected {name}: {exc} (`agora --debug …` shows a traceback)",
                1,
                "unexpected",
            ) from None
        raise fail(_as_typed(err), err.exit_code, _kind(err)) from None
