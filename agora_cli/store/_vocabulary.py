"""The runtime's words for tool calls and per-turn usage, in one place.

The upstream runtime (adonis-agent's Lucid stores) writes these values, and agora reads and
writes the same tables; its vocabulary comes first. Earlier agora versions wrote other words
(``awaiting_approval``, ``completed``; snake_case usage JSON): readers accept both, writers use
the runtime's.

Tool-call statuses (``agent_tool_call.status``), upstream's ``ToolCallStatus``:
``auto_executed`` (a read tool, recorded before it runs), ``pending_approval`` (an action tool
waiting for a person), ``executed``, ``rejected``, ``failed``. Tool types: ``read``, ``action``
(and ``agent`` for a delegation, which upstream records as ``read``).

Per-turn usage (``agent_message.usage``), upstream's ``MessageUsage``: ``inputTokens``,
``outputTokens``, ``cacheWriteTokens?``, ``cacheReadTokens?``, ``reasoningTokens?``,
``costUsd?`` (``null``: unknown, never 0).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "RUN_STATUSES",
    "TOOL_STATUSES",
    "TOOL_STATUS_ALIASES",
    "TOOL_STATUS_GROUPS",
    "TOOL_TYPES",
    "USAGE_KEYS",
    "canonical_tool_status",
    "statuses_of",
    "usage_from_json",
    "usage_to_json",
]

# A run's status (``agent_run.status``): running, then one of the three terminal ones.
RUN_STATUSES = ("running", "completed", "failed", "cancelled")
TOOL_STATUSES = ("auto_executed", "pending_approval", "executed", "rejected", "failed")
TOOL_TYPES = ("read", "action", "agent")

# Words other writers (earlier agora, other runtimes) used for the same states.
TOOL_STATUS_ALIASES: dict[str, str] = {
    "awaiting_approval": "pending_approval",
    "completed": "executed",
    "succeeded": "executed",
    "success": "executed",
    "error": "failed",
    "denied": "rejected",
    "running": "auto_executed",
}


def canonical_tool_status(status: str) -> str:
    """The runtime's word for ``status`` (an unknown word is returned as it is)."""
    return TOOL_STATUS_ALIASES.get(status, status)


def statuses_of(canonical: str) -> tuple[str, ...]:
    """Every stored word that means ``canonical`` (itself first)."""
    return (canonical, *(k for k, v in TOOL_STATUS_ALIASES.items() if v == canonical))


# What the console counts: each group with every word that means it, the runtime's first.
# ``running`` is ``auto_executed``: recorded, not settled yet (still executing, or its process
# died before it wrote the outcome). A word in no group is counted as ``other``.
TOOL_STATUS_GROUPS: dict[str, tuple[str, ...]] = {
    "succeeded": statuses_of("executed"),
    "failed": statuses_of("failed"),
    "rejected": statuses_of("rejected"),
    "pending_approval": statuses_of("pending_approval"),
    "running": statuses_of("auto_executed"),
}


# Usage JSON: the runtime's camelCase key -> agora's field name.
USAGE_KEYS: dict[str, str] = {
    "inputTokens": "input_tokens",
    "outputTokens": "output_tokens",
    "cacheWriteTokens": "cache_write_tokens",
    "cacheReadTokens": "cache_read_tokens",
    "reasoningTokens": "reasoning_tokens",
    "costUsd": "cost_usd",
}


def usage_from_json(value: Any) -> dict[str, Any] | None:
    """A stored usage object, either spelling, as agora's snake_case fields (unknown keys kept).

    ``None`` for anything that is not a JSON object. Where both spellings of a key are present,
    the runtime's camelCase wins.
    """
    if not isinstance(value, Mapping):
        return None
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key not in USAGE_KEYS:
            out.setdefault(str(key), item)
    for camel, snake in USAGE_KEYS.items():
        if camel in value:
            out[snake] = value[camel]
    return out


def usage_to_json(usage: Mapping[str, Any]) -> dict[str, Any]:
    """agora's usage fields in the runtime's camelCase (``None`` values left out, except a
    ``cost_usd`` of ``None``, which the runtime reads as "unknown")."""
    reverse = {snake: camel for camel, snake in USAGE_KEYS.items()}
    out: dict[str, Any] = {}
    for key, item in usage.items():
        camel = reverse.get(key, key)
        if item is None and camel != "costUsd":
            continue
        out[camel] = item
    return out
