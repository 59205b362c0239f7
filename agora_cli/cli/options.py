"""Options every command shares, written after its name: ``--db``, ``--read-db``, ``--json``,
``--csv``.

It is also the one home of the **session tenant** (``AGORA_TENANT``, a profile's ``tenant``):
every command that opens a database goes through ``open_db``, which looks the command up in
``TENANCY`` and either scopes it to the session tenant or refuses it (exit 2).
"""

from __future__ import annotations

# internal on purpose: the operator's commands import the store's private modules (cli/__init__.py)
import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agora_cli.cli.errors import remember_json

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from agora_cli.store._windows import DefaultWindow, Window

__all__ = [
    "TENANCY",
    "CsvOpt",
    "DbOpt",
    "FromOpt",
    "JsonOpt",
    "LastOpt",
    "NoPagerOpt",
    "ReadDbOpt",
    "ToOpt",
    "TzOpt",
    "WindowFromOpt",
    "WindowToOpt",
    "command_tenancy",
    "days_window",
    "given_on_command_line",
    "open_db",
    "open_read_db",
    "read_url",
    "refuse_unscoped",
    "remember_command",
    "reset_session",
    "scoped_tenant",
    "session_tenant",
    "startup_done",
    "window_now",
]

# What a session tenant (AGORA_TENANT, a profile's `tenant`) does for each command, by its path.
# "scoped": the command filters every read by it and refuses a write outside it, on every dialect
# (and on PostgreSQL also sets `agora.tenant`, for row-level security). "cross": the command works
# across tenants by nature, so a session tenant is refused (exit 2) unless `--all-tenants` says to
# ignore it. "none": the command opens no database. A command missing here is refused too, and
# tests/cli/test_tenant_setting.py fails until it has a decision (README, "One tenant setting").
TENANCY: dict[str, str] = {
    "budgets list": "cross",  # budgets are platform settings, not tenant data (no RLS policy)
    "budgets remove": "cross",
    "budgets set": "cross",
    "config show": "none",
    "db backfill": "cross",
    "db check": "cross",
    "db downgrade": "cross",
    "db history": "cross",
    "db provision": "cross",
    "db redact": "scoped",  # --tenant, else the session tenant's rows only
    "db rls disable": "cross",
    "db rls enable": "cross",
    "db rls status": "cross",
    "db rls verify": "cross",
    "db seal": "scoped",  # its --tenant must be the session tenant
    "db sql": "none",
    "db stamp": "cross",
    "db status": "cross",
    "db upgrade": "cross",
    "demo": "cross",  # writes acme and globex
    "frames close": "cross",  # frames are keyed by run, across tenants
    "frames purge": "scoped",  # the session tenant's frames only (issue 24: a tenant's worker)
    "frames stats": "cross",
    "frames tail": "cross",
    "keys create": "scoped",
    "keys destroy": "scoped",  # its --tenant must be the session tenant
    "keys list": "scoped",
    "keys rotate": "scoped",
    "metrics": "cross",  # every tenant's figures (on PostgreSQL: a role that bypasses RLS)
    "metrics serve": "cross",
    "keys status": "scoped",
    "prices list": "cross",  # prices are shared by every tenant
    "prices reprice": "cross",
    "prices resolve": "cross",
    "prices seed": "cross",
    "prices set": "cross",
    "prices status": "cross",
    "proposals claim": "scoped",  # the scope's tenant must be the session tenant
    "proposals claim-next": "cross",  # the worker serves every tenant's queue
    "proposals cancel": "scoped",  # across scopes, within the session tenant's proposals
    "proposals create": "scoped",  # the document's tenant_ref must be the session tenant
    "proposals decide": "scoped",  # without scope options: across scopes, as proposals cancel
    "proposals expire": "cross",
    "proposals inbox": "scoped",
    "proposals list": "scoped",
    "proposals renew": "cross",  # a lease token, not a tenant's scope
    "proposals review": "scoped",  # the inbox it walks, and each decision: the session tenant's
    "proposals requeue": "scoped",  # as proposals cancel
    "proposals settle": "cross",
    "proposals show": "scoped",
    "quota": "scoped",  # only the session tenant's windows (not --actor, not --all)
    "runs list": "scoped",
    "runs show": "scoped",  # another tenant's run is "no run"
    "spend": "scoped",
    "spend fold": "cross",  # the fold is every tenant's (issue 24: privileged)
    "threads delete": "scoped",  # another tenant's thread is "no thread"
    "threads list": "scoped",
    "threads show": "scoped",
    "tools stats": "scoped",
}

_SESSION: dict[str, Any] = {"command": None, "all_tenants": False, "sources": {}}


def remember_command(path: str, all_tenants: bool) -> None:
    """Record the running command's path (``"spend fold"``) and its ``--all-tenants``."""
    _SESSION["command"] = path
    _SESSION["all_tenants"] = bool(_SESSION["all_tenants"]) or all_tenants


def reset_session() -> None:
    """Forget the command (the CLI may run again in-process)."""
    _SESSION.update(command=None, all_tenants=False, sources={})


def command_tenancy() -> str | None:
    """The running command's decision in ``TENANCY`` (``None`` outside the CLI)."""
    command = _SESSION["command"]
    if not isinstance(command, str):
        return None
    return TENANCY.get(command, "undecided")


def session_tenant() -> str | None:
    """The session tenant: ``AGORA_TENANT`` (a profile fills it), unless ``--all-tenants``."""
    if _SESSION["all_tenants"]:
        return None
    return os.environ.get("AGORA_TENANT") or None


def _session_words(tenant: str) -> str:
    return f"the session tenant {tenant!r} (AGORA_TENANT or the profile's tenant)"


def scoped_tenant(given: str | None, *, what: str = "--tenant") -> str | None:
    """The tenant a scoped command works for: its own ``given`` tenant, else the session's.

    A ``given`` tenant other than the session tenant is exit 2: a session tenant scopes every
    read and write of the command, so it cannot reach another tenant's rows.
    """
    from agora_cli.store._errors import InvalidInput

    session = session_tenant()
    if session is None or given is None:
        return given if given is not None else session
    if given != session:
        raise InvalidInput(
            f"{what} {given!r} is outside {_session_words(session)}: drop one of them, or "
            "pass --all-tenants to ignore the session tenant"
        )
    return given


# What a refusal adds for a command that must also run as a particular role.
_CROSS_HINTS = {
    "spend fold": " (the fold runs as a superuser or a BYPASSRLS role with no tenant)",
}


def refuse_unscoped(what: str) -> None:
    """Refuse ``what`` (an option reaching past one tenant) while a session tenant is set."""
    from agora_cli.store._errors import InvalidInput

    session = session_tenant()
    if session is not None:
        raise InvalidInput(
            f"{what} reaches past {_session_words(session)}: drop it, or pass --all-tenants "
            "to ignore the session tenant"
        )


def _check_tenancy() -> None:
    from agora_cli.store._errors import InvalidInput

    decision = command_tenancy()
    session = session_tenant()
    if session is None or decision in (None, "scoped", "none"):
        return
    command = f"agora {_SESSION['command']}"
    if decision == "cross":
        hint = _CROSS_HINTS.get(str(_SESSION["command"]), "")
        raise InvalidInput(
            f"`{command}` works across tenants, so {_session_words(session)} cannot scope it: "
            "pass --all-tenants to run it for every tenant, or give each tenant its own "
            f"database{hint}"
        )
    raise InvalidInput(f"`{command}` has no tenant decision: unset AGORA_TENANT or --all-tenants")


@contextmanager
def _without_env_tenant() -> Iterator[None]:
    # open_engine falls back to AGORA_TENANT (the library's default); the CLI decides here.
    saved = os.environ.pop("AGORA_TENANT", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["AGORA_TENANT"] = saved


def _remember_source(ctx: typer.Context, param: typer.CallbackParam, value: Any) -> Any:
    """Option callback: where the option's value came from (the command line, the environment
    or the default), for ``open_read_db``'s precedence and ``given_on_command_line``."""
    if not ctx.resilient_parsing and param.name:
        source = ctx.get_parameter_source(param.name)
        _SESSION["sources"][param.name] = None if source is None else source.name
    return value


def given_on_command_line(name: str) -> bool:
    """Whether the option ``name`` (``"read_db"``) of the running command was typed."""
    return bool(_SESSION["sources"].get(name) == "COMMANDLINE")


DbOpt = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="Database URL (else the environment, else the profile's db, else sqlite:///agora.db).",
        envvar="AGORA_DATABASE_URL",
        show_envvar=True,
        show_default=False,
        metavar="URL",
        callback=_remember_source,
    ),
]
ReadDbOpt = Annotated[
    str | None,
    typer.Option(
        "--read-db",
        help="Read from this database instead: a hot standby or replica (else the "
        "environment, else the profile's read_db). Used when given at least as explicitly as "
        "--db: a typed --db beats the environment's and the profile's, AGORA_DATABASE_URL "
        "beats the profile's. A replay lag over 1 s is noted on stderr.",
        envvar="AGORA_READ_DATABASE_URL",
        show_envvar=True,
        show_default=False,
        metavar="URL",
        callback=_remember_source,
    ),
]
YesOpt = Annotated[
    bool, typer.Option("--yes", "-y", help="Do not ask (required without a terminal).")
]
JsonOpt = Annotated[
    bool,
    typer.Option(
        "--json",
        help="Print one JSON document on stdout (errors too).",
        callback=remember_json,
    ),
]
CsvOpt = Annotated[bool, typer.Option("--csv", help="Print CSV on stdout.")]
NoPagerOpt = Annotated[
    bool,
    typer.Option(
        "--no-pager",
        help="Print straight to the terminal (else through AGORA_PAGER, PAGER or less).",
    ),
]
FromOpt = Annotated[
    str | None,
    typer.Option(
        "--from",
        metavar="YYYY-MM-DD",
        help="First day (UTC, or --tz), inclusive.",
        show_default=False,
    ),
]
ToOpt = Annotated[
    str | None,
    typer.Option(
        "--to", metavar="YYYY-MM-DD", help="Last day (UTC, or --tz), inclusive.", show_default=False
    ),
]
# The report windows (issue 28): days in the report's zone, relative forms, hours.
WINDOW_FROM_HELP = (
    "First day, inclusive, in the report's zone: YYYY-MM-DD, YYYYMMDD, YYYY-MM (its first "
    "day), today, yesterday, -7d, -2w, -3m (that long before today), or -24h (an instant: "
    "24 hours ago)."
)
WINDOW_TO_HELP = (
    "Last day, inclusive (the same forms; YYYY-MM is its last day; -24h an instant). "
    "Default: today."
)
WindowFromOpt = Annotated[
    str | None,
    typer.Option("--from", metavar="DAY", help=WINDOW_FROM_HELP, show_default=False),
]
WindowToOpt = Annotated[
    str | None,
    typer.Option("--to", metavar="DAY", help=WINDOW_TO_HELP, show_default=False),
]
LastOpt = Annotated[
    str | None,
    typer.Option(
        "--last",
        metavar="24h|7d|4w|3m",
        help="Instead of --from/--to: the last N hours (up to now), days (today included), "
        "weeks (from Monday) or months (from the 1st).",
        show_default=False,
    ),
]


def _zone_option(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> str:
    """``--tz``'s callback: an IANA zone ``zoneinfo`` knows (else exit 2, naming it), which the
    tables then show times in."""
    if ctx.resilient_parsing:
        return value or "UTC"
    from agora_cli.cli.output import set_display_zone
    from agora_cli.store._errors import InvalidInput
    from agora_cli.store._windows import check_zone

    try:
        name = check_zone(value)
    except InvalidInput:
        raise typer.BadParameter(
            f"{value!r} is not an IANA time zone (e.g. Europe/Berlin, America/New_York, UTC)"
        ) from None
    set_display_zone(name)
    return name


TzOpt = Annotated[
    str,
    typer.Option(
        "--tz",
        metavar="ZONE",
        envvar="AGORA_TZ",
        show_envvar=True,
        callback=_zone_option,
        help="IANA time zone of the report's days, weeks, months and shown times (else the "
        "environment, else the profile's tz, else UTC). JSON instants stay UTC.",
        show_default=False,
    ),
]


def window_now(
    from_text: str | None,
    to_text: str | None,
    last: str | None,
    tz: str | None,
    *,
    default: DefaultWindow = "month",
) -> Window:
    """A report's window (``windows.resolve_window``) at the wall clock's now, in ``tz``."""
    from agora_cli.store._clock import SystemClock
    from agora_cli.store._windows import resolve_window

    return resolve_window(
        from_text,
        to_text,
        last,
        now_ms=SystemClock().now_ms(),
        tz=tz,
        default=default,
    )


def days_window(
    from_text: str | None,
    to_text: str | None,
    *,
    default_days: int | None = None,
    tz: str | None = None,
) -> tuple[int | None, int | None, date | None, date | None]:
    """``--from``/``--to`` as the first and last millisecond of those days (in zone ``tz``,
    UTC by default), and the days.

    With ``default_days``, a missing ``--to`` is today and a missing ``--from`` that many days
    back (today included); without, a missing bound stays open (``None``). ``--from`` after
    ``--to`` is exit 2.
    """
    from datetime import timedelta

    from agora_cli.store._clock import SystemClock, parse_day
    from agora_cli.store._errors import InvalidInput
    from agora_cli.store._windows import local_date, local_day_window, zone_of

    zone = zone_of(tz)
    start = parse_day(from_text, what="--from") if from_text is not None else None
    end = parse_day(to_text, what="--to") if to_text is not None else None
    if default_days is not None:
        if end is None:
            end = local_date(SystemClock().now_ms(), zone)
        if start is None:
            back = timedelta(days=default_days - 1)
            start = end - back if end > date.min + back else date.min
    if start is not None and end is not None and start > end:
        raise InvalidInput(f"--from {start.isoformat()} is after --to {end.isoformat()}")
    return (
        None if start is None else local_day_window(start, zone)[0],
        None if end is None else local_day_window(end, zone)[1],
        start,
        end,
    )


def open_db(
    db: str | None, *, create: bool = False, readonly: bool = False, tenant: str | None = None
) -> Engine:
    """Open (and prove) the engine for ``--db`` / ``AGORA_DATABASE_URL`` / the SQLite default.

    Only the commands that create a database pass ``create=True`` (``db provision``, ``db
    upgrade``, ``demo``); anything else refuses a SQLite file that does not exist. Reports pass
    ``readonly=True``: on SQLite they then never take the write lock.

    ``tenant`` is the command's tenant (``scoped_tenant``: its ``--tenant``, else the session
    tenant); every PostgreSQL transaction is scoped to it, for row-level security. A session
    tenant on a command that works across tenants is exit 2 (``TENANCY``), before any connection.
    """
    from agora_cli.store._engine import open_engine

    _check_tenancy()
    if tenant is None and command_tenancy() in ("scoped", None):
        tenant = session_tenant()
    with _without_env_tenant():
        engine = open_engine(db, create=create, readonly=readonly, tenant=tenant)
    startup_done()  # the heavy imports are done: the collector is back before any real work
    return engine


# How explicitly a URL was given: typed on the command line, the environment, a profile (which
# fills the environment variables left unset), nothing (the default).
_TYPED, _ENVIRONMENT, _PROFILE, _DEFAULT = 3, 2, 1, 0
# A lag up to this many seconds goes unsaid: a busy standby is always a little behind.
LAG_NOTE_S = 1.0


def _explicitness(name: str, value: str | None, var: str) -> int:
    if not value:
        return _DEFAULT
    source = _SESSION["sources"].get(name)
    if source == "ENVIRONMENT" or (source is None and value == os.environ.get(var)):
        from agora_cli.cli.profiles import active

        return _PROFILE if var in active()[1] else _ENVIRONMENT
    return _TYPED


def read_url(db: str | None, read_db: str | None) -> str | None:
    """The read database's URL when it was given at least as explicitly as ``db``, else
    ``None`` (the command reads ``db``, as every other command does).

    ``--read-db`` on the command line always wins; ``AGORA_READ_DATABASE_URL`` (or a profile's
    ``read_db``) wins over ``AGORA_DATABASE_URL`` and a profile's ``db``, but not over a typed
    ``--db``; a profile's ``read_db`` loses to ``AGORA_DATABASE_URL``.
    """
    if not read_db:
        return None
    ours = _explicitness("read_db", read_db, "AGORA_READ_DATABASE_URL")
    theirs = _explicitness("db", db, "AGORA_DATABASE_URL")
    return read_db if ours >= theirs else None


def open_read_db(db: str | None, read_db: str | None, *, tenant: str | None = None) -> Engine:
    """Open a report's database read-only: the read database (``--read-db``,
    ``AGORA_READ_DATABASE_URL``, a profile's ``read_db``) when ``read_url`` chooses it, else
    ``db`` as ``open_db`` does.

    On the read database, a replay lag of more than ``LAG_NOTE_S`` is one note on stderr,
    never on stdout: JSON and CSV stay exactly the data, whatever the lag.
    """
    from agora_cli.store._errors import DatabaseUnreachable

    url = read_url(db, read_db)
    if url is None:
        return open_db(db, readonly=True, tenant=tenant)
    try:
        engine = open_db(url, readonly=True, tenant=tenant)
    except DatabaseUnreachable as exc:
        raise DatabaseUnreachable(
            f"{exc.message} (the read database: --read-db, AGORA_READ_DATABASE_URL or the "
            "profile's read_db)"
        ) from exc
    from agora_cli.store._replica import replay_lag

    lag = replay_lag(engine)
    if lag is not None and lag > LAG_NOTE_S:
        from agora_cli.cli.output import duration_text, say

        behind = duration_text(lag * 1000)
        say(f"note: the read database is {behind} behind its primary (replay lag)", style="yellow")
    return engine


def startup_done() -> None:
    """Freeze the objects the start-up built and turn the garbage collector back on."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()
