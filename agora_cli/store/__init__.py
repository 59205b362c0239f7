"""The agora store library: the agent schema, provisioning, and the stores built on it.

Importable without Typer or Rich. Names are re-exported lazily (a module ``__getattr__``) so
that ``import agora_cli.store`` stays cheap and the error classes can be imported without
SQLAlchemy: ``from agora_cli.store import open_engine, ensure_agent_tables``.
"""

from __future__ import annotations

import importlib
from typing import Any

from agora_cli.store.errors import *  # noqa: F403  (light: imports nothing heavy)
from agora_cli.store.errors import __all__ as _error_names

_MODULES = (
    "clock",
    "engine",
    "schema",
    "provision",
    "migrate",
    "threads",
    "usage",
    "pricing",
    "catalog",
    "ledger",
    "frames",
    "proposals",
)


def __getattr__(name: str) -> Any:
    for module_name in _MODULES:
        try:
            module = importlib.import_module(f"agora_cli.store.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"agora_cli.store.{module_name}":
                continue
            raise
        if name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            globals()[name] = value
            return value
    raise AttributeError(f"module 'agora_cli.store' has no attribute {name!r}")


__all__ = sorted(_error_names)
