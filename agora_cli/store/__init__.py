"""The agora store library: the agent schema and the stores a runtime writes and reads through.

This package is the public face: the names in ``__all__`` (pinned by
``tests/test_public_api.py``) are what agora promises to keep. Every module under it is private
(``_engine``, ``_proposals`` ...) and may change in any release; the command line reaches into
them on purpose, a runtime should not. A name that was public before 0.2.0 and is internal now
raises ``RetiredName`` with its new home, never a silent alias::

    from agora_cli.store import open_engine, ensure_agent_tables, ActionProposalStore

Cheap to import: every name is loaded on first use (a module ``__getattr__`` driven by the
name -> module map ``_EXPORTS``), while type checkers see the real definitions through the
``TYPE_CHECKING`` imports, as pydantic's ``__init__`` does. The error classes import nothing
heavy, so the command line can catch them without loading SQLAlchemy.
"""

from __future__ import annotations

import importlib as _importlib
import sys as _sys
import typing as _typing
from importlib.abc import MetaPathFinder as _MetaPathFinder

if _typing.TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

    from agora_cli.store._budgets import (
        BudgetStatus,
        scope_quota,
    )
    from agora_cli.store._clock import (
        Clock,
        ManualClock,
        SystemClock,
    )
    from agora_cli.store._engine import (
        open_engine,
    )
    from agora_cli.store._errors import (
        AgoraError,
        AmbiguousId,
        CatalogError,
        Conflict,
        DatabaseError,
        DatabaseUnreachable,
        DemoRefused,
        ExternalError,
        ForwardOnlyMigration,
        InvalidInput,
        KeyUnavailable,
        LockTimeout,
        MissingExtension,
        ModelNotInCatalog,
        NotFound,
        RetiredName,
        SchemaDrift,
        SealBroken,
        UnknownDialect,
        WrongKek,
    )
    from agora_cli.store._frames import (
        FrameWriter,
        PurgeReport,
        StreamFrame,
        follow,
        purge_expired,
        read_frames,
    )
    from agora_cli.store._ledger import (
        SpendReport,
        spend,
    )
    from agora_cli.store._pricing import (
        ModelPrice,
        set_price,
    )
    from agora_cli.store._problems import (
        Problem,
    )
    from agora_cli.store._proposals import (
        ActionProposalStore,
        ClaimResult,
        CreateResult,
        DecideResult,
        DeliveryResult,
        Lease,
        NewProposal,
        Proposal,
        RenewResult,
        Scope,
        Settlement,
        SettleResult,
        Work,
        WorkWaiter,
        default_idempotency_key,
        proposal_id,
    )
    from agora_cli.store._provision import (
        ProvisionReport,
        check_agent_tables,
        ensure_agent_tables,
    )
    from agora_cli.store._schema import (
        metadata,
    )
    from agora_cli.store._sealing import (
        SEALED_MARKER,
    )
    from agora_cli.store._steps import (
        complete_tool_call,
        end_run,
        record_tool_call,
        start_run,
    )
    from agora_cli.store._tenant_session import (
        tenant_session,
    )
    from agora_cli.store._thread_model import (
        Message,
        Run,
        RunEnd,
        Thread,
        ThreadTurn,
        ToolCall,
    )
    from agora_cli.store._threads import (
        append_message,
        create_thread,
        find_thread,
        get_thread,
        list_messages,
        load_thread_for_turn,
    )
    from agora_cli.store._usage import (
        UsageRecord,
        record_usage,
    )

__all__ = [
    "SEALED_MARKER",
    "ActionProposalStore",
    "AgoraError",
    "AmbiguousId",
    "BudgetStatus",
    "CatalogError",
    "ClaimResult",
    "Clock",
    "Conflict",
    "CreateResult",
    "DatabaseError",
    "DatabaseUnreachable",
    "DecideResult",
    "DeliveryResult",
    "DemoRefused",
    "ExternalError",
    "ForwardOnlyMigration",
    "FrameWriter",
    "InvalidInput",
    "KeyUnavailable",
    "Lease",
    "LockTimeout",
    "ManualClock",
    "Message",
    "MissingExtension",
    "ModelNotInCatalog",
    "ModelPrice",
    "NewProposal",
    "NotFound",
    "Problem",
    "Proposal",
    "ProvisionReport",
    "PurgeReport",
    "RenewResult",
    "RetiredName",
    "Run",
    "RunEnd",
    "SchemaDrift",
    "Scope",
    "SealBroken",
    "SettleResult",
    "Settlement",
    "SpendReport",
    "StreamFrame",
    "SystemClock",
    "Thread",
    "ThreadTurn",
    "ToolCall",
    "UnknownDialect",
    "UsageRecord",
    "Work",
    "WorkWaiter",
    "WrongKek",
    "append_message",
    "check_agent_tables",
    "complete_tool_call",
    "create_thread",
    "default_idempotency_key",
    "end_run",
    "ensure_agent_tables",
    "find_thread",
    "follow",
    "get_thread",
    "list_messages",
    "load_thread_for_turn",
    "metadata",
    "open_engine",
    "proposal_id",
    "purge_expired",
    "read_frames",
    "record_tool_call",
    "record_usage",
    "scope_quota",
    "set_price",
    "spend",
    "start_run",
    "tenant_session",
]

_EXPORTS: dict[str, str] = {
    "ActionProposalStore": "_proposals",
    "AgoraError": "_errors",
    "AmbiguousId": "_errors",
    "BudgetStatus": "_budgets",
    "CatalogError": "_errors",
    "ClaimResult": "_proposals",
    "Clock": "_clock",
    "Conflict": "_errors",
    "CreateResult": "_proposals",
    "DatabaseError": "_errors",
    "DatabaseUnreachable": "_errors",
    "DecideResult": "_proposals",
    "DeliveryResult": "_proposals",
    "DemoRefused": "_errors",
    "ExternalError": "_errors",
    "ForwardOnlyMigration": "_errors",
    "FrameWriter": "_frames",
    "InvalidInput": "_errors",
    "KeyUnavailable": "_errors",
    "Lease": "_proposals",
    "LockTimeout": "_errors",
    "ManualClock": "_clock",
    "Message": "_thread_model",
    "MissingExtension": "_errors",
    "ModelNotInCatalog": "_errors",
    "ModelPrice": "_pricing",
    "NewProposal": "_proposals",
    "NotFound": "_errors",
    "Problem": "_problems",
    "Proposal": "_proposals",
    "ProvisionReport": "_provision",
    "PurgeReport": "_frames",
    "RenewResult": "_proposals",
    "RetiredName": "_errors",
    "Run": "_thread_model",
    "RunEnd": "_thread_model",
    "SEALED_MARKER": "_sealing",
    "SchemaDrift": "_errors",
    "Scope": "_proposals",
    "SealBroken": "_errors",
    "SettleResult": "_proposals",
    "Settlement": "_proposals",
    "SpendReport": "_ledger",
    "StreamFrame": "_frames",
    "SystemClock": "_clock",
    "Thread": "_thread_model",
    "ThreadTurn": "_thread_model",
    "ToolCall": "_thread_model",
    "UnknownDialect": "_errors",
    "UsageRecord": "_usage",
    "Work": "_proposals",
    "WorkWaiter": "_proposals",
    "WrongKek": "_errors",
    "append_message": "_threads",
    "check_agent_tables": "_provision",
    "complete_tool_call": "_steps",
    "create_thread": "_threads",
    "default_idempotency_key": "_proposals",
    "end_run": "_steps",
    "ensure_agent_tables": "_provision",
    "find_thread": "_threads",
    "follow": "_frames",
    "get_thread": "_threads",
    "list_messages": "_threads",
    "load_thread_for_turn": "_threads",
    "metadata": "_schema",
    "open_engine": "_engine",
    "proposal_id": "_proposals",
    "purge_expired": "_frames",
    "read_frames": "_frames",
    "record_tool_call": "_steps",
    "record_usage": "_usage",
    "scope_quota": "_budgets",
    "set_price": "_pricing",
    "spend": "_ledger",
    "start_run": "_steps",
    "tenant_session": "_tenant_session",
}


def _retired_message(name: str) -> str | None:
    if name.startswith("_"):
        return None
    _retired = _importlib.import_module("agora_cli.store._retired")

    if name in _retired.REPLACED:
        return f"agora_cli.store.{name} was retired in agora 0.2.0: use {_retired.REPLACED[name]}"
    if name in _retired.RETIRED:
        home = _retired.RETIRED[name]
        return (
            f"agora_cli.store.{name} is internal since agora 0.2.0 (it lives in "
            f"agora_cli.store.{home}, which promises nothing); the public names are "
            "agora_cli.store.__all__"
        )
    if name in _retired.RETIRED_MODULES:
        return (
            f"agora_cli.store.{name} is a private module since agora 0.2.0 "
            f"(agora_cli.store._{name}, which promises nothing); import public names from "
            "agora_cli.store itself"
        )
    return None


def __getattr__(name: str) -> _typing.Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        message = _retired_message(name)
        if message is not None:
            from agora_cli.store._errors import RetiredName  # lazy: only on a retired name

            raise RetiredName(message, name="agora_cli.store")
        raise AttributeError(f"module 'agora_cli.store' has no attribute {name!r}")
    value = getattr(_importlib.import_module(f"agora_cli.store.{module_name}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _RetiredModules(_MetaPathFinder):
    """Turn ``import agora_cli.store.engine`` (a 0.1 module path) into a ``RetiredName``."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        package, _, leaf = fullname.rpartition(".")
        if package == __name__ and not leaf.startswith("_"):
            message = _retired_message(leaf)
            if message is not None:
                from agora_cli.store._errors import RetiredName  # lazy: only on a retired path

                raise RetiredName(message, name=fullname)
        return None


if not any(isinstance(finder, _RetiredModules) for finder in _sys.meta_path):
    _sys.meta_path.insert(0, _RetiredModules())
