"""Profiles: saved connections and report defaults, chosen by `--profile NAME`/`AGORA_PROFILE`.

The file is ``config.toml`` in the platform's config folder (``~/.config/agora/config.toml`` on
Linux, from ``platformdirs``), or ``AGORA_CONFIG``::

    [profiles.prod]
    db = "postgresql://agora@db.internal/app"
    read_db = "postgresql://agora@standby.internal/app"
    catalog = "https://models.dev/api.json"
    tenant = "acme"
    tz = "Europe/Berlin"
    by = "day,model"
    last = "7d"
    operator = "ops-lead"

Precedence, for every setting: the command's flag, then the environment variable, then the
profile, then the built-in default. A profile fills the environment variables that are unset
(``db`` → ``AGORA_DATABASE_URL``, ``read_db`` → ``AGORA_READ_DATABASE_URL``, ``catalog`` →
``AGORA_MODELS_DEV_URL``, ``tenant`` → ``AGORA_TENANT``, ``tz`` → ``AGORA_TZ``, the reports'
zone) for the one command, so everything below reads one place; ``by`` and ``last`` are defaults
of ``agora spend``, ``operator`` the name ``agora proposals review`` records as deciding;
``read_db`` (the reports' standby) is used where it is as explicit as the database
(``options.read_url``). The
environment is put back when the command ends (the CLI runs in-process in tests and in scripts
that import it).

A bad file is exit 2 with the file and the line: a TOML syntax error, a profile that does not
exist, an unknown key, a value of the wrong type or out of its set. Choosing a profile when the
file does not exist is exit 2 naming the path.
"""

from __future__ import annotations

# internal on purpose: the operator's commands import the store's private modules (cli/__init__.py)
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "ENV_KEYS",
    "PROFILE_KEYS",
    "Profile",
    "ProfileError",
    "activate",
    "active",
    "config_path",
    "deactivate",
    "exposed_secrets",
    "load_profile",
    "profile_default",
]

# The settings a profile may hold, and the environment variable each one fills.
ENV_KEYS: dict[str, str] = {
    "db": "AGORA_DATABASE_URL",
    "read_db": "AGORA_READ_DATABASE_URL",
    "catalog": "AGORA_MODELS_DEV_URL",
    "tenant": "AGORA_TENANT",
    "tz": "AGORA_TZ",
}
PROFILE_KEYS: tuple[str, ...] = (*ENV_KEYS, "by", "last", "operator")
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_MAX_BYTES = 1 << 20


class ProfileError(Exception):
    """A config file or profile that cannot be used; the message names the file and line."""


@dataclass(frozen=True)
class Profile:
    """A loaded profile: its values, the file, and the line each value is on."""

    name: str
    path: Path
    values: dict[str, str]
    lines: dict[str, int] = field(default_factory=dict)

    def where(self, key: str) -> str:
        line = self.lines.get(key)
        return f"{self.path}:{line}" if line else str(self.path)


_STATE: dict[str, Any] = {"profile": None, "set_env": {}}


def config_path() -> Path:
    """``AGORA_CONFIG``, else ``config.toml`` in the platform's config folder for agora."""
    explicit = os.environ.get("AGORA_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    import platformdirs

    return Path(platformdirs.user_config_dir("agora", appauthor=False)) / "config.toml"


def _line_of(text: str, name: str, key: str | None) -> int | None:
    """The line of ``[profiles.NAME]`` (or of ``key`` inside it), 1-based, by a plain scan."""
    header = re.compile(r"^\s*\[\s*profiles\s*\.\s*(\"?)" + re.escape(name) + r"\1\s*\]\s*(#.*)?$")
    inside = False
    found = None
    for n, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("["):
            inside = bool(header.match(line))
            if inside and key is None:
                return n
            continue
        if inside and key is not None and re.match(rf"^\"?{re.escape(key)}\"?\s*=", stripped):
            found = n
    return found


def _key_line(text: str, table: str, key: str) -> int | None:
    """The line of ``key = …`` directly under ``[table]``, 1-based, by a plain scan."""
    inside = False
    for n, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("["):
            header = r"\[\s*" + re.escape(table) + r"\s*\]\s*(#.*)?"
            inside = re.fullmatch(header, stripped) is not None
        elif inside and re.match(rf"^\"?{re.escape(key)}\"?\s*=", stripped):
            return n
    return None


def load_profile(name: str, path: Path | None = None) -> Profile:
    """Read and check profile ``name``; ``ProfileError`` names the file and line of a fault."""
    import tomllib

    path = path or config_path()
    if not _NAME.match(name):
        raise ProfileError(f"profile name {name!r}: letters, digits, '.', '_' and '-' only")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ProfileError(
            f"profile {name!r}: no config file at {path} (create it, or set AGORA_CONFIG)"
        ) from None
    except OSError as exc:
        raise ProfileError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if len(raw) > _MAX_BYTES:
        raise ProfileError(f"{path}: larger than 1 MiB; is it the right file?")
    try:
        text = raw.decode("utf-8")
        doc = tomllib.loads(text)
    except UnicodeDecodeError:
        raise ProfileError(f"{path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: {exc}") from None
    except RecursionError:  # `a = [[[[…` ten thousand deep: tomllib recurses per level
        raise ProfileError(f"{path}: nested too deeply to be a config file") from None
    profiles = doc.get("profiles")
    if "profiles" in doc and not isinstance(profiles, dict):
        raise ProfileError(f"{path}: profiles = … is not a table; write [profiles.{name}]")
    if isinstance(profiles, dict) and name in profiles and not isinstance(profiles[name], dict):
        line = _key_line(text, "profiles", name)
        at = f"{path}:{line}" if line else str(path)
        raise ProfileError(
            f"{at}: {name} = … under [profiles] is a value, not a profile; write [profiles.{name}]"
            ' and its keys (db = "…") under it'
        )
    if not isinstance(profiles, dict) or not isinstance(profiles.get(name), dict):
        known = sorted(profiles) if isinstance(profiles, dict) else []
        listed = ", ".join(known) if known else "none"
        raise ProfileError(f"{path}: no profile {name!r} (profiles: {listed})")
    table = profiles[name]
    values: dict[str, str] = {}
    lines: dict[str, int] = {}
    for key, value in table.items():
        line = _line_of(text, name, key)
        at = f"{path}:{line}" if line else str(path)
        if key not in PROFILE_KEYS:
            raise ProfileError(
                f"{at}: unknown key {key!r} in [profiles.{name}] (known: {', '.join(PROFILE_KEYS)})"
            )
        if not isinstance(value, str) or not value.strip():
            raise ProfileError(f"{at}: {key} must be a non-empty string")
        _check_value(key, value, at)
        values[key] = value
        if line:
            lines[key] = line
    return Profile(name=name, path=path, values=values, lines=lines)


def _check_value(key: str, value: str, at: str) -> None:
    if "\x00" in value:
        raise ProfileError(f"{at}: {key} holds a NUL character")
    if key == "by":
        from agora_cli.store._windows import SPEND_GROUPINGS

        if value not in SPEND_GROUPINGS:
            raise ProfileError(f"{at}: by = {value!r} is not one of {', '.join(SPEND_GROUPINGS)}")
    elif key == "last":
        if not re.fullmatch(r"[1-9][0-9]{0,3}[hdwm]", value):
            raise ProfileError(f"{at}: last = {value!r} is not like 24h, 7d, 4w or 3m")
    elif key == "operator":
        from agora_cli.store._errors import InvalidInput
        from agora_cli.store._values import check_identity

        try:
            check_identity("operator", value)
        except InvalidInput as exc:
            raise ProfileError(f"{at}: {exc.message}") from None
    elif key == "tz":
        from agora_cli.store._errors import InvalidInput
        from agora_cli.store._windows import check_zone

        try:
            check_zone(value)
        except InvalidInput:
            raise ProfileError(f"{at}: tz = {value!r} is not an IANA time zone") from None


def activate(name: str) -> Profile:
    """Make ``name`` the profile of this command: fill the unset environment variables."""
    current: Profile | None = _STATE["profile"]
    if current is not None and current.name == name:
        return current
    deactivate()
    profile = load_profile(name)
    set_env: dict[str, str] = {}
    for key, var in ENV_KEYS.items():
        if key in profile.values and not os.environ.get(var):
            os.environ[var] = profile.values[key]
            set_env[var] = key
    _STATE.update(profile=profile, set_env=set_env)
    return profile


def _mode(path: Path | str) -> int | None:
    try:
        return os.stat(path).st_mode & 0o777
    except OSError:
        return None


def exposed_secrets(profile: Profile | None) -> list[str]:
    """Warnings for secrets in files others can read: a ``config.toml`` holding a password
    that group or others may read, an ``AGORA_KEK_FILE`` that group or others may read or
    write (``0666``). Nothing is refused: the file may be meant so; the warning says how to fix."""
    from agora_cli.store._masking import mask_url

    found = []
    if profile is not None and any(
        mask_url(profile.values[key]) != profile.values[key]
        for key in ("db", "read_db", "catalog")
        if key in profile.values
    ):
        mode = _mode(profile.path)
        if mode is not None and mode & 0o044:
            found.append(
                f"warning: {profile.path} holds a password and others can read it "
                f"(mode {mode:04o}): chmod 600 {profile.path}"
            )
    kek_file = os.environ.get("AGORA_KEK_FILE")
    if kek_file:
        mode = _mode(kek_file)
        if mode is not None and mode & 0o077:
            found.append(
                f"warning: AGORA_KEK_FILE {kek_file} is open to others (mode {mode:04o}): "
                f"chmod 600 {kek_file}"
            )
    return found


def deactivate() -> None:
    """Put the environment back as it was before ``activate``."""
    for var in _STATE["set_env"]:
        os.environ.pop(var, None)
    _STATE.update(profile=None, set_env={})


def active() -> tuple[Profile | None, dict[str, str]]:
    """The active profile, and the environment variables it set (variable → profile key)."""
    return _STATE["profile"], dict(_STATE["set_env"])


def profile_default(key: str) -> str | None:
    """A command's default (``by``, ``last``, ``operator``) from the active profile, if any."""
    profile: Profile | None = _STATE["profile"]
    return None if profile is None else profile.values.get(key)
