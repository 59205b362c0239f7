"""`agora config show`: the settings a command would use, and where each one came from."""

from __future__ import annotations

# internal on purpose: the operator's commands import the store's private modules (cli/__init__.py)
import os
from typing import Any

import typer

from agora_cli.cli.options import JsonOpt
from agora_cli.cli.output import Col, finish, out_console, render_table, safe_text

__all__ = ["app"]

app = typer.Typer(
    help=(
        "Profiles and settings: config.toml, the environment, the defaults.\n\n"
        "Example: agora --profile prod config show"
    ),
    no_args_is_help=True,
)

# setting -> (environment variable, profile key or None)
_SETTINGS: tuple[tuple[str, str, str | None], ...] = (
    ("db", "AGORA_DATABASE_URL", "db"),
    ("read_db", "AGORA_READ_DATABASE_URL", "read_db"),
    ("catalog", "AGORA_MODELS_DEV_URL", "catalog"),
    ("tenant", "AGORA_TENANT", "tenant"),
    ("tz", "AGORA_TZ", "tz"),  # the reports' zone (issue 28)
    ("cache_dir", "AGORA_CACHE_DIR", None),
    ("pager", "AGORA_PAGER", None),
)


_URLS = frozenset({"db", "read_db", "catalog"})


def _setting(name: str, value: str | None, source: str, env: str | None = None) -> dict[str, Any]:
    return {"name": name, "value": value, "source": source, "env": env}


def resolve() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The profile in use and every setting with its source: flag, environment, profile, default.

    Values that may carry a password (``db``, ``read_db``, ``catalog``) are masked by the URL's
    own parse.
    """
    from agora_cli.cli.pager import pager_command
    from agora_cli.cli.profiles import active, config_path
    from agora_cli.store._catalog import DEFAULT_CATALOG_URL, catalog_cache_dir
    from agora_cli.store._engine import DEFAULT_URL
    from agora_cli.store._masking import mask_url

    profile, filled = active()
    path = config_path()
    defaults: dict[str, str | None] = {
        "db": DEFAULT_URL,
        "read_db": None,
        "catalog": DEFAULT_CATALOG_URL,
        "tenant": None,
        "tz": "UTC",
        "cache_dir": str(catalog_cache_dir()),
        "pager": pager_command(),
    }
    settings: list[dict[str, Any]] = []
    for name, var, key in _SETTINGS:
        raw = os.environ.get(var) or None
        if raw is not None and var in filled and profile is not None and key is not None:
            source = f"profile {profile.name} ({profile.where(key)})"
        elif raw is not None:
            source = f"environment ({var})"
        elif name == "pager" and os.environ.get("PAGER"):
            raw, source = defaults[name], "environment (PAGER)"
        else:
            raw, source = defaults[name], "default"
        value = mask_url(raw) if raw is not None and name in _URLS else raw
        settings.append(_setting(name, value, source, var))
    for key, default in (("by", "model"), ("last", None)):
        if profile is not None and key in profile.values:
            source = f"profile {profile.name} ({profile.where(key)})"
            settings.append(_setting(f"spend.{key}", profile.values[key], source))
        else:
            settings.append(_setting(f"spend.{key}", default, "default"))
    if profile is not None and "operator" in profile.values:  # `proposals review`'s --by
        source = f"profile {profile.name} ({profile.where('operator')})"
        settings.append(_setting("operator", profile.values["operator"], source))
    else:
        settings.append(_setting("operator", None, "default (asked by proposals review)"))
    from agora_cli.cli.output import color_forced_off

    if color_forced_off():
        color = _setting("color", "off", "flag (--no-color)")
    elif os.environ.get("NO_COLOR"):
        color = _setting("color", "off", "environment (NO_COLOR)", "NO_COLOR")
    elif os.environ.get("FORCE_COLOR"):
        color = _setting("color", "on", "environment (FORCE_COLOR)", "FORCE_COLOR")
    else:
        color = _setting("color", "auto", "default")
    settings.append(color)
    head: dict[str, Any] = {
        "config_file": str(path),
        "config_file_exists": path.is_file(),
        "profile": None if profile is None else profile.name,
        "profile_source": _profile_source(profile),
    }
    return head, settings


def tenant_scope() -> dict[str, Any]:
    """What the session tenant does: the commands it scopes and those that refuse it (exit 2)."""
    from agora_cli.cli.options import TENANCY, session_tenant

    tenant = session_tenant()
    raw = os.environ.get("AGORA_TENANT") or None
    by = {kind: sorted(c for c, d in TENANCY.items() if d == kind) for kind in ("scoped", "cross")}
    return {
        "tenant": tenant,
        "ignored": raw if tenant is None else None,
        "scoped": by["scoped"] if tenant else [],
        "refused": by["cross"] if tenant else [],
    }


def _profile_source(profile: Any) -> str | None:
    if profile is None:
        return None
    if os.environ.get("AGORA_PROFILE") == profile.name:
        return "environment (AGORA_PROFILE)"
    return "flag (--profile)"


@app.command("show")
def show(as_json: JsonOpt = False) -> None:
    """Print the resolved settings and where each came from: the environment, the profile
    (file and line), or the default. Passwords are masked.

    A tenant (AGORA_TENANT, a profile's `tenant`) either scopes every read and write of a
    command or is refused by it (exit 2): the last lines (`tenant_scope` in JSON) say which.

    Precedence, for every setting: a command's own flag (`--db`, `--catalog`, `--by`, ...), then
    the environment variable, then the profile, then the default.

    Example: agora --profile staging config show --json
    """
    head, settings = resolve()
    scope = tenant_scope()
    doc = {
        **head,
        "settings": {s["name"]: {k: s[k] for k in ("value", "source", "env")} for s in settings},
        "tenant_scope": scope,
    }

    def render() -> None:
        console = out_console()
        exists = "" if head["config_file_exists"] else "  (not found)"
        console.print(f"config file: {safe_text(head['config_file'])}{exists}", markup=False)
        profile = head["profile"]
        if profile is None:
            console.print("profile: none (--profile NAME or AGORA_PROFILE)", markup=False)
        else:
            console.print(
                f"profile: {safe_text(profile)} from {head['profile_source']}", markup=False
            )
        render_table(
            [{**s, "value": "-" if s["value"] is None else s["value"]} for s in settings],
            [Col("name", "Setting", wrap=False), Col("value", "Value"), Col("source", "Source")],
            plain=True,
        )
        if scope["ignored"]:
            console.print(
                f"tenant {safe_text(scope['ignored'])}: ignored (--all-tenants)", markup=False
            )
        elif scope["tenant"]:
            tenant = safe_text(scope["tenant"])
            console.print(
                f"tenant {tenant} scopes every read and write of: {', '.join(scope['scoped'])}",
                markup=False,
            )
            console.print(
                f"tenant {tenant} is refused (exit 2; --all-tenants ignores it) by: "
                f"{', '.join(scope['refused'])}",
                markup=False,
            )

    finish(doc, as_json=as_json, show=render)
