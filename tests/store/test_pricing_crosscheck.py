"""The pricing cross-check, pinned: what agora makes of ~130 real ledger ids, on every dialect.

``tests/bench/pricing_crosscheck.py`` writes one ledger row per id, runs ``seed --missing``
against the models.dev snapshot (served here over HTTP from 127.0.0.1) and resolves each id; this
test holds every outcome — the spelling priced, the rule, the provider, why that provider, the
rates — or the reason it stays unpriced, so that no change to the rules or the seeding can move a
price unnoticed. A deliberate change regenerates the report (``--write``) and updates this table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from bench.pricing_crosscheck import LEDGER_IDS, crosscheck, markdown
from helpers import ROOT

from agora_cli.store._catalog import ModelCatalog

ARN = "arn:aws:bedrock"
SONNET = "anthropic.claude-sonnet-4-5-20250929-v1:0"
HAIKU = "anthropic.claude-haiku-4-5-20251001-v1:0"
GOV = "us-gov.anthropic.claude-3-5-sonnet-20240620-v1:0"

EXPECTED: dict[str, tuple[Any, ...]] = {
    "gpt-4o": ("gpt-4o", "exact", "openai", "first-party", (2.5, 10.0, 1.25, None)),
    "gpt-4o-mini": ("gpt-4o-mini", "exact", "openai", "first-party", (0.15, 0.6, 0.075, None)),
    "gpt-4o-mini-2024-07-18": (
        "gpt-4o-mini",
        "date",
        "openai",
        "first-party",
        (0.15, 0.6, 0.075, None),
    ),
    "gpt-4o-2024-05-13": ("gpt-4o-2024-05-13", "exact", "openai", "only", (5.0, 15.0, None, None)),
    "gpt-4o-2024-08-06": ("gpt-4o-2024-08-06", "exact", "openai", "only", (2.5, 10.0, 1.25, None)),
    "gpt-4o-2024-11-20": (
        "gpt-4o-2024-11-20",
        "exact",
        "openai",
        "first-party",
        (2.5, 10.0, 1.25, None),
    ),
    "chatgpt-4o-latest": ("ambiguous",),
    "gpt-4.1": ("gpt-4.1", "exact", "openai", "first-party", (2.0, 8.0, 0.5, None)),
    "gpt-4.1-2025-04-14": ("gpt-4.1", "date", "openai", "first-party", (2.0, 8.0, 0.5, None)),
    "gpt-4.1-mini-2025-04-14": (
        "gpt-4.1-mini",
        "date",
        "openai",
        "first-party",
        (0.4, 1.6, 0.1, None),
    ),
    "gpt-4.1-nano": ("gpt-4.1-nano", "exact", "openai", "first-party", (0.1, 0.4, 0.025, None)),
    "gpt-4-turbo-2024-04-09": (
        "gpt-4-turbo",
        "date",
        "openai",
        "first-party",
        (10.0, 30.0, None, None),
    ),
    "gpt-4-0613": ("not_in_catalog",),
    "gpt-3.5-turbo-0125": (
        "gpt-3.5-turbo-0125",
        "exact",
        "azure",
        "hyperscaler",
        (0.5, 1.5, None, None),
    ),
    "o1": ("o1", "exact", "openai", "first-party", (15.0, 60.0, 7.5, None)),
    "o1-2024-12-17": ("o1", "date", "openai", "first-party", (15.0, 60.0, 7.5, None)),
    "o3-mini": ("o3-mini", "exact", "openai", "first-party", (1.1, 4.4, 0.55, None)),
    "o3-2025-04-16": ("o3", "date", "openai", "first-party", (2.0, 8.0, 0.5, None)),
    "gpt-5": ("gpt-5", "exact", "openai", "first-party", (1.25, 10.0, 0.125, None)),
    "gpt-5-mini-2025-08-07": (
        "gpt-5-mini",
        "date",
        "openai",
        "first-party",
        (0.25, 2.0, 0.025, None),
    ),
    "gpt-5.4": ("gpt-5.4", "exact", "openai", "first-party", (2.5, 15.0, 0.25, None)),
    "gpt-5.4-mini-2026-03-17": (
        "gpt-5.4-mini",
        "date",
        "openai",
        "first-party",
        (0.75, 4.5, 0.075, None),
    ),
    "gpt-5.4-pro": ("gpt-5.4-pro", "exact", "openai", "first-party", (30.0, 180.0, None, None)),
    "openai/gpt-4o-mini": (
        "openai/gpt-4o-mini",
        "exact",
        "openrouter",
        "shared",
        (0.15, 0.6, 0.075, None),
    ),
    "ft:gpt-4o-mini-2024-07-18:acme::A1b2C3d4": ("not_in_catalog",),
    "ft:gpt-3.5-turbo-0125:acme:support:9xYz": ("not_in_catalog",),
    "ft:gpt-4.1-2025-04-14:acme::B2c3D4e5": ("not_in_catalog",),
    "claude-3-5-sonnet-20241022": (
        "claude-3-5-sonnet-20241022",
        "exact",
        "anthropic",
        "only",
        (3.0, 15.0, 0.3, 3.75),
    ),
    "claude-3-5-sonnet-latest": ("not_in_catalog",),
    "claude-3-7-sonnet-20250219": (
        "claude-3-7-sonnet-20250219",
        "exact",
        "anthropic",
        "first-party",
        (3.0, 15.0, 0.3, 3.75),
    ),
    "claude-3-5-haiku-20241022": (
        "claude-3-5-haiku-20241022",
        "exact",
        "302ai",
        "agreement",
        (0.8, 4.0, None, None),
    ),
    "claude-3-haiku-20240307": (
        "claude-3-haiku-20240307",
        "exact",
        "anthropic",
        "first-party",
        (0.25, 1.25, 0.03, 0.3),
    ),
    "claude-3-opus-20240229": (
        "claude-3-opus-20240229",
        "exact",
        "anthropic",
        "only",
        (15.0, 75.0, 1.5, 18.75),
    ),
    "claude-sonnet-4-20250514": (
        "claude-sonnet-4-20250514",
        "exact",
        "anthropic",
        "first-party",
        (3.0, 15.0, 0.3, 3.75),
    ),
    "claude-sonnet-4-5": (
        "claude-sonnet-4-5",
        "exact",
        "anthropic",
        "first-party",
        (3.0, 15.0, 0.3, 3.75),
    ),
    "claude-sonnet-4-5-20250929": (
        "claude-sonnet-4-5-20250929",
        "exact",
        "anthropic",
        "first-party",
        (3.0, 15.0, 0.3, 3.75),
    ),
    "claude-opus-4-1-20250805": (
        "claude-opus-4-1-20250805",
        "exact",
        "anthropic",
        "first-party",
        (15.0, 75.0, 1.5, 18.75),
    ),
    "claude-haiku-4-5-20251001": (
        "claude-haiku-4-5-20251001",
        "exact",
        "anthropic",
        "first-party",
        (1.0, 5.0, 0.1, 1.25),
    ),
    "anthropic/claude-sonnet-4-5-20250929": (
        "claude-sonnet-4-5-20250929",
        "prefix",
        "anthropic",
        "route",
        (3.0, 15.0, 0.3, 3.75),
    ),
    "anthropic.claude-sonnet-4-5-20250929-v1:0": (
        "anthropic.claude-sonnet-4-5-20250929-v1:0",
        "exact",
        "amazon-bedrock",
        "only",
        (3.0, 15.0, 0.3, 3.75),
    ),
    "us.anthropic.claude-sonnet-4-5-20250929-v1:0": (
        "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "exact",
        "amazon-bedrock",
        "only",
        (3.0, 15.0, 0.3, 3.75),
    ),
    "eu.anthropic.claude-sonnet-4-5-20250929-v1:0": (
        "eu.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "exact",
        "amazon-bedrock",
        "only",
        (3.3, 16.5, 0.33, 4.125),
    ),
    "apac.anthropic.claude-sonnet-4-5-20250929-v1:0": (
        "anthropic.claude-sonnet-4-5-20250929-v1:0",
        "prefix",
        "amazon-bedrock",
        "only",
        (3.0, 15.0, 0.3, 3.75),
    ),
    "jp.anthropic.claude-sonnet-4-5-20250929-v1:0": (
        "jp.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "exact",
        "amazon-bedrock",
        "only",
        (3.0, 15.0, 0.3, 3.75),
    ),
    "au.anthropic.claude-sonnet-4-5-20250929-v1:0": (
        "au.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "exact",
        "amazon-bedrock",
        "only",
        (3.0, 15.0, 0.3, 3.75),
    ),
    "global.anthropic.claude-sonnet-4-5-20250929-v1:0": (
        "global.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "exact",
        "amazon-bedrock",
        "only",
        (3.0, 15.0, 0.3, 3.75),
    ),
    "anthropic.claude-haiku-4-5-20251001-v1:0": (
        "anthropic.claude-haiku-4-5-20251001-v1:0",
        "exact",
        "amazon-bedrock",
        "only",
        (1.0, 5.0, 0.1, 1.25),
    ),
    "eu.anthropic.claude-haiku-4-5-20251001-v1:0": (
        "eu.anthropic.claude-haiku-4-5-20251001-v1:0",
        "exact",
        "amazon-bedrock",
        "only",
        (1.1, 5.5, 0.11, 1.375),
    ),
    "apac.anthropic.claude-haiku-4-5-20251001-v1:0": (
        "anthropic.claude-haiku-4-5-20251001-v1:0",
        "prefix",
        "amazon-bedrock",
        "only",
        (1.0, 5.0, 0.1, 1.25),
    ),
    f"{ARN}:us-east-1:123456789012:inference-profile/us.{SONNET}": (
        "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "prefix",
        "amazon-bedrock",
        "route",
        (3.0, 15.0, 0.3, 3.75),
    ),
    f"{ARN}:eu-central-1:123456789012:inference-profile/eu.{SONNET}": (
        "eu.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "prefix",
        "amazon-bedrock",
        "route",
        (3.3, 16.5, 0.33, 4.125),
    ),
    "arn:aws:bedrock:us-west-2::foundation-model/anthropic.claude-haiku-4-5-20251001-v1:0": (
        "anthropic.claude-haiku-4-5-20251001-v1:0",
        "prefix",
        "amazon-bedrock",
        "route",
        (1.0, 5.0, 0.1, 1.25),
    ),
    "bedrock/us.anthropic.claude-haiku-4-5-20251001-v1:0": (
        "us.anthropic.claude-haiku-4-5-20251001-v1:0",
        "prefix",
        "amazon-bedrock",
        "route",
        (1.0, 5.0, 0.1, 1.25),
    ),
    "bedrock_converse/eu.anthropic.claude-sonnet-4-5-20250929-v1:0": (
        "eu.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "prefix",
        "amazon-bedrock",
        "route",
        (3.3, 16.5, 0.33, 4.125),
    ),
    "anthropic.claude-3-haiku-20240307-v1:0": ("not_in_catalog",),
    "amazon.nova-pro-v1:0": (
        "amazon.nova-pro-v1:0",
        "exact",
        "amazon-bedrock",
        "only",
        (0.8, 3.2, 0.2, None),
    ),
    "us.amazon.nova-lite-v1:0": (
        "amazon.nova-lite-v1:0",
        "prefix",
        "amazon-bedrock",
        "only",
        (0.06, 0.24, 0.015, None),
    ),
    "meta.llama3-3-70b-instruct-v1:0": (
        "meta.llama3-3-70b-instruct-v1:0",
        "exact",
        "amazon-bedrock",
        "only",
        (0.72, 0.72, None, None),
    ),
    "us.meta.llama4-maverick-17b-instruct-v1:0": (
        "us.meta.llama4-maverick-17b-instruct-v1:0",
        "exact",
        "amazon-bedrock",
        "only",
        (0.24, 0.97, None, None),
    ),
    "mistral.mistral-large-2402-v1:0": ("not_in_catalog",),
    "us.deepseek.r1-v1:0": (
        "us.deepseek.r1-v1:0",
        "exact",
        "amazon-bedrock",
        "only",
        (1.35, 5.4, None, None),
    ),
    "openai.gpt-oss-120b-1:0": (
        "openai.gpt-oss-120b-1:0",
        "exact",
        "amazon-bedrock",
        "only",
        (0.15, 0.6, None, None),
    ),
    "us-gov.anthropic.claude-3-5-sonnet-20240620-v1:0": ("govcloud",),
    "us-gov.anthropic.claude-3-haiku-20240307-v1:0": ("govcloud",),
    f"arn:aws-us-gov:bedrock:us-gov-west-1:1234:inference-profile/{GOV}": ("govcloud",),
    f"{ARN}:us-gov-east-1:123456789012:foundation-model/{HAIKU}": ("govcloud",),
    "bedrock/us-gov.anthropic.claude-3-5-sonnet-20240620-v1:0": ("govcloud",),
    "gemini-2.5-pro": (
        "gemini-2.5-pro",
        "exact",
        "google",
        "first-party",
        (1.25, 10.0, 0.125, None),
    ),
    "gemini-2.5-flash": (
        "gemini-2.5-flash",
        "exact",
        "google",
        "first-party",
        (0.3, 2.5, 0.03, None),
    ),
    "gemini-2.0-flash": ("gemini-2.0-flash", "exact", "google", "only", (0.1, 0.4, 0.025, None)),
    "gemini-2.0-flash-001": (
        "gemini-2.0-flash-001",
        "exact",
        "nano-gpt",
        "only",
        (0.1003, 0.408, None, None),
    ),
    "gemini-1.5-pro-002": ("not_in_catalog",),
    "gemini/gemini-2.5-pro": (
        "gemini-2.5-pro",
        "prefix",
        "google",
        "route",
        (1.25, 10.0, 0.125, None),
    ),
    "gemini/gemini-2.0-flash": (
        "gemini-2.0-flash",
        "prefix",
        "google",
        "route",
        (0.1, 0.4, 0.025, None),
    ),
    "vertex_ai/gemini-2.5-pro": (
        "gemini-2.5-pro",
        "prefix",
        "google",
        "shared",
        (1.25, 10.0, 0.125, None),
    ),
    "vertex_ai/gemini-2.0-flash-001": (
        "gemini-2.0-flash-001",
        "prefix",
        "nano-gpt",
        "shared; not_in_catalog",
        (0.1003, 0.408, None, None),
    ),
    "vertex_ai/claude-sonnet-4-5@20250929": (
        "claude-sonnet-4-5@20250929",
        "prefix",
        "google-vertex",
        "route",
        (3.0, 15.0, 0.3, 3.75),
    ),
    "claude-sonnet-4-5@20250929": (
        "claude-sonnet-4-5@20250929",
        "exact",
        "google-vertex",
        "hyperscaler",
        (3.0, 15.0, 0.3, 3.75),
    ),
    "claude-3-5-sonnet-v2@20241022": ("not_in_catalog",),
    "google/gemini-2.5-flash": (
        "gemini-2.5-flash",
        "prefix",
        "google",
        "route",
        (0.3, 2.5, 0.03, None),
    ),
    "openrouter/openai/gpt-4o-mini": (
        "openai/gpt-4o-mini",
        "prefix",
        "openrouter",
        "route",
        (0.15, 0.6, 0.075, None),
    ),
    "openrouter/openai/gpt-4o-mini-2024-07-18": (
        "openai/gpt-4o-mini-2024-07-18",
        "prefix",
        "openrouter",
        "route",
        (0.15, 0.6, 0.075, None),
    ),
    "openrouter/anthropic/claude-sonnet-4": (
        "anthropic/claude-sonnet-4",
        "prefix",
        "openrouter",
        "route",
        (3.0, 15.0, 0.3, 3.75),
    ),
    "openrouter/google/gemini-2.5-pro": (
        "google/gemini-2.5-pro",
        "prefix",
        "openrouter",
        "route",
        (1.25, 10.0, 0.125, 0.375),
    ),
    "openrouter/meta-llama/llama-3.3-70b-instruct": (
        "meta-llama/llama-3.3-70b-instruct",
        "prefix",
        "openrouter",
        "route",
        (0.1, 0.32, None, None),
    ),
    "openrouter/deepseek/deepseek-chat": (
        "deepseek-chat",
        "prefix",
        "deepseek",
        "shared; spelling_conflict",
        (0.14, 0.28, 0.0028, None),
    ),
    "openrouter/x-ai/grok-4": ("not_in_catalog",),
    "groq/llama-3.3-70b-versatile": (
        "llama-3.3-70b-versatile",
        "prefix",
        "abacus",
        "shared",
        (0.59, 0.79, None, None),
    ),
    "llama-3.3-70b-versatile": (
        "llama-3.3-70b-versatile",
        "exact",
        "abacus",
        "agreement",
        (0.59, 0.79, None, None),
    ),
    "groq/openai/gpt-oss-120b": (
        "openai/gpt-oss-120b",
        "prefix",
        "groq",
        "route",
        (0.15, 0.6, 0.075, None),
    ),
    "groq/meta-llama/llama-4-scout-17b-16e-instruct": (
        "meta-llama/llama-4-scout-17b-16e-instruct",
        "prefix",
        "groq",
        "route",
        (0.11, 0.34, None, None),
    ),
    # Together's price stored under the bare spelling would price the ledger's bare id, which
    # DeepInfra lists too at another price (issue 28): set its price by hand.
    "together_ai/meta-llama/Llama-3.3-70B-Instruct-Turbo": ("spelling_conflict",),
    "together_ai/deepseek-ai/DeepSeek-V3": (
        "deepseek-ai/DeepSeek-V3",
        "prefix",
        "togetherai",
        "route",
        (1.25, 1.25, None, None),
    ),
    "togetherai/Qwen/Qwen2.5-7B-Instruct-Turbo": (
        "Qwen/Qwen2.5-7B-Instruct-Turbo",
        "prefix",
        "togetherai",
        "route",
        (0.3, 0.3, None, None),
    ),
    "meta-llama/Llama-3.3-70B-Instruct-Turbo": ("ambiguous",),
    "mistral-large-latest": (
        "mistral-large-latest",
        "exact",
        "mistral",
        "first-party",
        (0.5, 1.5, None, None),
    ),
    "mistral/mistral-large-latest": (
        "mistral-large-latest",
        "prefix",
        "mistral",
        "route",
        (0.5, 1.5, None, None),
    ),
    "mistralai/mistral-small-latest": (
        "mistral-small-latest",
        "prefix",
        "mistral",
        "route",
        (0.15, 0.6, None, None),
    ),
    "codestral-latest": ("codestral-latest", "exact", "mistral", "only", (0.3, 0.9, None, None)),
    "mistral-small-2503": (
        "mistral-small-2503",
        "exact",
        "azure",
        "hyperscaler",
        (0.1, 0.3, None, None),
    ),
    "deepseek-chat": (
        "deepseek-chat",
        "exact",
        "deepseek",
        "first-party",
        (0.14, 0.28, 0.0028, None),
    ),
    "deepseek-reasoner": (
        "deepseek-reasoner",
        "exact",
        "deepseek",
        "first-party",
        (0.14, 0.28, 0.0028, None),
    ),
    "deepseek/deepseek-chat": (
        "deepseek-chat",
        "prefix",
        "deepseek",
        "route",
        (0.14, 0.28, 0.0028, None),
    ),
    "deepseek-r1": ("deepseek-r1", "exact", "azure", "hyperscaler", (1.35, 5.4, None, None)),
    "deepseek-r1-0528": (
        "deepseek-r1-0528",
        "exact",
        "azure",
        "hyperscaler",
        (1.35, 5.4, None, None),
    ),
    "grok-4.3": ("grok-4.3", "exact", "xai", "first-party", (1.25, 2.5, 0.2, None)),
    "x-ai/grok-4.3": ("grok-4.3", "prefix", "xai", "route", (1.25, 2.5, 0.2, None)),
    "xai/grok-4.3": ("grok-4.3", "prefix", "xai", "route", (1.25, 2.5, 0.2, None)),
    "grok-4-1-fast-reasoning": (
        "grok-4-1-fast-reasoning",
        "exact",
        "azure",
        "hyperscaler",
        (0.2, 0.5, 0.05, None),
    ),
    "fireworks_ai/accounts/fireworks/models/gpt-oss-120b": (
        "accounts/fireworks/models/gpt-oss-120b",
        "prefix",
        "fireworks-ai",
        "route",
        (0.15, 0.6, 0.015, None),
    ),
    "accounts/fireworks/models/deepseek-v4-flash": (
        "accounts/fireworks/models/deepseek-v4-flash",
        "exact",
        "fireworks-ai",
        "only",
        (0.14, 0.28, 0.028, None),
    ),
    "azure/gpt-4o": ("gpt-4o", "prefix", "openai", "shared", (2.5, 10.0, 1.25, None)),
    "azure_ai/gpt-4o": ("gpt-4o", "prefix", "openai", "shared", (2.5, 10.0, 1.25, None)),
    "gpt-5-chat": ("gpt-5-chat", "exact", "azure", "hyperscaler", (1.25, 10.0, 0.13, None)),
    "phi-4": ("phi-4", "exact", "azure", "hyperscaler", (0.125, 0.5, None, None)),
    "command-a-03-2025": ("command-a-03-2025", "exact", "cohere", "only", (2.5, 10.0, None, None)),
    "kimi-k2.5": ("kimi-k2.5", "exact", "azure", "hyperscaler", (0.6, 3.0, None, None)),
    "MiniMax-M1": ("ambiguous",),
    "unknown": ("not_in_catalog",),
    "my-local-model": ("not_in_catalog",),
    "gpt-4o-mini-latest": ("not_in_catalog",),
    "GPT-4O": ("not_in_catalog",),
    "gpt-4o ": ("not_in_catalog",),
    "claude-3-5-sonnet@20241022": ("not_in_catalog",),
    "gpt-4o-2024-02-30": ("not_in_catalog",),
    "o1-2024-12-17-2024-12-17": ("not_in_catalog",),
    "ollama/llama3.1:8b": ("not_in_catalog",),
    "openai/gpt-4o/extra": ("not_in_catalog",),
}


@pytest.fixture(scope="module")
def catalog(served_catalog: ModelCatalog) -> ModelCatalog:
    """The snapshot as fetched over HTTP (conftest.py), not read from its file."""
    return served_catalog


def test_the_list_is_large_and_varied() -> None:
    ids = [ledger_id for _group, ledger_id in LEDGER_IDS]
    assert len(ids) >= 80 and len(set(ids)) == len(ids)
    assert set(ids) == set(EXPECTED)
    groups = {group for group, _ in LEDGER_IDS}
    assert {"OpenAI", "Anthropic", "Bedrock", "Bedrock GovCloud", "Fine-tunes", "Junk"} <= groups


def test_every_resolution_is_pinned(engine: Any, catalog: ModelCatalog) -> None:
    rows = crosscheck(engine, catalog)
    got: dict[str, tuple[Any, ...]] = {}
    for row in rows:
        if row.matched is None:
            got[row.ledger_id] = (str(row.why).split(" ", 1)[0],)
        else:
            provider = str(row.source).removeprefix("models.dev:")
            got[row.ledger_id] = (row.matched, row.rule, provider, row.choice, row.rates)
    changed = {k: (EXPECTED[k], got[k]) for k in EXPECTED if got.get(k) != EXPECTED[k]}
    assert not changed, changed


def test_the_report_in_the_repository_is_current(catalog: ModelCatalog, tmp_path: Path) -> None:
    from agora_cli.store._engine import open_engine
    from agora_cli.store._provision import ensure_agent_tables

    engine = open_engine(f"sqlite:///{tmp_path / 'agora.db'}", create=True)
    ensure_agent_tables(engine)
    try:
        rows = crosscheck(engine, catalog)
    finally:
        engine.dispose()
    report = ROOT / "tests" / "bench" / "results" / "pricing-crosscheck.md"
    assert report.read_text() == markdown(rows), (
        "regenerate it: python tests/bench/pricing_crosscheck.py --write"
    )
