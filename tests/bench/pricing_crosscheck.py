"""Pricing cross-check: what agora makes of model ids as real ledgers spell them.

For each of ~120 real-world ids (OpenAI, Anthropic, Bedrock ids / ARNs / inference profiles incl.
GovCloud, Vertex and Gemini, OpenRouter, Groq, Together, Mistral, DeepSeek, xAI, Fireworks,
Azure, fine-tunes, junk) it writes one ledger row, runs ``seed --missing`` against the models.dev
snapshot (``tests/fixtures/models-dev-api.json``) and resolves the id as the ledger writer would:
the spelling whose price it gets, by which rule, from which provider and why (first party,
hyperscaler, agreement, the only listing, the route), the rates, and the cost of one turn of
100k input tokens (40k of them cache reads) and 2k output tokens — or why it stays unpriced.

    python tests/bench/pricing_crosscheck.py          # the table, as Markdown, on stdout
    python tests/bench/pricing_crosscheck.py --write  # and into results/pricing-crosscheck.md

``tests/store/test_pricing_crosscheck.py`` pins every row, on every dialect, so that a change in
the rules or the seeding cannot move a price unnoticed.
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "models-dev-api.json"
REPORT = ROOT / "tests" / "bench" / "results" / "pricing-crosscheck.md"
SONNET = "anthropic.claude-sonnet-4-5-20250929-v1:0"
HAIKU = "anthropic.claude-haiku-4-5-20251001-v1:0"
GOV_SONNET = "us-gov.anthropic.claude-3-5-sonnet-20240620-v1:0"

# (group, ledger id), in the order of the report.
LEDGER_IDS: tuple[tuple[str, str], ...] = (
    ("OpenAI", "gpt-4o"),
    ("OpenAI", "gpt-4o-mini"),
    ("OpenAI", "gpt-4o-mini-2024-07-18"),
    ("OpenAI", "gpt-4o-2024-05-13"),
    ("OpenAI", "gpt-4o-2024-08-06"),
    ("OpenAI", "gpt-4o-2024-11-20"),
    ("OpenAI", "chatgpt-4o-latest"),
    ("OpenAI", "gpt-4.1"),
    ("OpenAI", "gpt-4.1-2025-04-14"),
    ("OpenAI", "gpt-4.1-mini-2025-04-14"),
    ("OpenAI", "gpt-4.1-nano"),
    ("OpenAI", "gpt-4-turbo-2024-04-09"),
    ("OpenAI", "gpt-4-0613"),
    ("OpenAI", "gpt-3.5-turbo-0125"),
    ("OpenAI", "o1"),
    ("OpenAI", "o1-2024-12-17"),
    ("OpenAI", "o3-mini"),
    ("OpenAI", "o3-2025-04-16"),
    ("OpenAI", "gpt-5"),
    ("OpenAI", "gpt-5-mini-2025-08-07"),
    ("OpenAI", "gpt-5.4"),
    ("OpenAI", "gpt-5.4-mini-2026-03-17"),
    ("OpenAI", "gpt-5.4-pro"),
    ("OpenAI", "openai/gpt-4o-mini"),
    ("Fine-tunes", "ft:gpt-4o-mini-2024-07-18:acme::A1b2C3d4"),
    ("Fine-tunes", "ft:gpt-3.5-turbo-0125:acme:support:9xYz"),
    ("Fine-tunes", "ft:gpt-4.1-2025-04-14:acme::B2c3D4e5"),
    ("Anthropic", "claude-3-5-sonnet-20241022"),
    ("Anthropic", "claude-3-5-sonnet-latest"),
    ("Anthropic", "claude-3-7-sonnet-20250219"),
    ("Anthropic", "claude-3-5-haiku-20241022"),
    ("Anthropic", "claude-3-haiku-20240307"),
    ("Anthropic", "claude-3-opus-20240229"),
    ("Anthropic", "claude-sonnet-4-20250514"),
    ("Anthropic", "claude-sonnet-4-5"),
    ("Anthropic", "claude-sonnet-4-5-20250929"),
    ("Anthropic", "claude-opus-4-1-20250805"),
    ("Anthropic", "claude-haiku-4-5-20251001"),
    ("Anthropic", "anthropic/claude-sonnet-4-5-20250929"),
    ("Bedrock", SONNET),
    ("Bedrock", f"us.{SONNET}"),
    ("Bedrock", f"eu.{SONNET}"),
    ("Bedrock", f"apac.{SONNET}"),
    ("Bedrock", f"jp.{SONNET}"),
    ("Bedrock", f"au.{SONNET}"),
    ("Bedrock", f"global.{SONNET}"),
    ("Bedrock", HAIKU),
    ("Bedrock", f"eu.{HAIKU}"),
    ("Bedrock", f"apac.{HAIKU}"),
    ("Bedrock", f"arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.{SONNET}"),
    ("Bedrock", f"arn:aws:bedrock:eu-central-1:123456789012:inference-profile/eu.{SONNET}"),
    ("Bedrock", f"arn:aws:bedrock:us-west-2::foundation-model/{HAIKU}"),
    ("Bedrock", f"bedrock/us.{HAIKU}"),
    ("Bedrock", f"bedrock_converse/eu.{SONNET}"),
    ("Bedrock", "anthropic.claude-3-haiku-20240307-v1:0"),
    ("Bedrock", "amazon.nova-pro-v1:0"),
    ("Bedrock", "us.amazon.nova-lite-v1:0"),
    ("Bedrock", "meta.llama3-3-70b-instruct-v1:0"),
    ("Bedrock", "us.meta.llama4-maverick-17b-instruct-v1:0"),
    ("Bedrock", "mistral.mistral-large-2402-v1:0"),
    ("Bedrock", "us.deepseek.r1-v1:0"),
    ("Bedrock", "openai.gpt-oss-120b-1:0"),
    ("Bedrock GovCloud", GOV_SONNET),
    ("Bedrock GovCloud", "us-gov.anthropic.claude-3-haiku-20240307-v1:0"),
    (
        "Bedrock GovCloud",
        f"arn:aws-us-gov:bedrock:us-gov-west-1:1234:inference-profile/{GOV_SONNET}",
    ),
    ("Bedrock GovCloud", f"arn:aws:bedrock:us-gov-east-1:123456789012:foundation-model/{HAIKU}"),
    ("Bedrock GovCloud", f"bedrock/{GOV_SONNET}"),
    ("Vertex / Gemini", "gemini-2.5-pro"),
    ("Vertex / Gemini", "gemini-2.5-flash"),
    ("Vertex / Gemini", "gemini-2.0-flash"),
    ("Vertex / Gemini", "gemini-2.0-flash-001"),
    ("Vertex / Gemini", "gemini-1.5-pro-002"),
    ("Vertex / Gemini", "gemini/gemini-2.5-pro"),
    ("Vertex / Gemini", "gemini/gemini-2.0-flash"),
    ("Vertex / Gemini", "vertex_ai/gemini-2.5-pro"),
    ("Vertex / Gemini", "vertex_ai/gemini-2.0-flash-001"),
    ("Vertex / Gemini", "vertex_ai/claude-sonnet-4-5@20250929"),
    ("Vertex / Gemini", "claude-sonnet-4-5@20250929"),
    ("Vertex / Gemini", "claude-3-5-sonnet-v2@20241022"),
    ("Vertex / Gemini", "google/gemini-2.5-flash"),
    ("OpenRouter", "openrouter/openai/gpt-4o-mini"),
    ("OpenRouter", "openrouter/openai/gpt-4o-mini-2024-07-18"),
    ("OpenRouter", "openrouter/anthropic/claude-sonnet-4"),
    ("OpenRouter", "openrouter/google/gemini-2.5-pro"),
    ("OpenRouter", "openrouter/meta-llama/llama-3.3-70b-instruct"),
    ("OpenRouter", "openrouter/deepseek/deepseek-chat"),
    ("OpenRouter", "openrouter/x-ai/grok-4"),
    ("Groq", "groq/llama-3.3-70b-versatile"),
    ("Groq", "llama-3.3-70b-versatile"),
    ("Groq", "groq/openai/gpt-oss-120b"),
    ("Groq", "groq/meta-llama/llama-4-scout-17b-16e-instruct"),
    ("Together", "together_ai/meta-llama/Llama-3.3-70B-Instruct-Turbo"),
    ("Together", "together_ai/deepseek-ai/DeepSeek-V3"),
    ("Together", "togetherai/Qwen/Qwen2.5-7B-Instruct-Turbo"),
    ("Together", "meta-llama/Llama-3.3-70B-Instruct-Turbo"),
    ("Mistral", "mistral-large-latest"),
    ("Mistral", "mistral/mistral-large-latest"),
    ("Mistral", "mistralai/mistral-small-latest"),
    ("Mistral", "codestral-latest"),
    ("Mistral", "mistral-small-2503"),
    ("DeepSeek", "deepseek-chat"),
    ("DeepSeek", "deepseek-reasoner"),
    ("DeepSeek", "deepseek/deepseek-chat"),
    ("DeepSeek", "deepseek-r1"),
    ("DeepSeek", "deepseek-r1-0528"),
    ("xAI", "grok-4.3"),
    ("xAI", "x-ai/grok-4.3"),
    ("xAI", "xai/grok-4.3"),
    ("xAI", "grok-4-1-fast-reasoning"),
    ("Fireworks", "fireworks_ai/accounts/fireworks/models/gpt-oss-120b"),
    ("Fireworks", "accounts/fireworks/models/deepseek-v4-flash"),
    ("Azure", "azure/gpt-4o"),
    ("Azure", "azure_ai/gpt-4o"),
    ("Azure", "gpt-5-chat"),
    ("Azure", "phi-4"),
    ("Others", "command-a-03-2025"),
    ("Others", "kimi-k2.5"),
    ("Others", "MiniMax-M1"),
    ("Junk", "unknown"),
    ("Junk", "my-local-model"),
    ("Junk", "gpt-4o-mini-latest"),
    ("Junk", "GPT-4O"),
    ("Junk", "gpt-4o "),
    ("Junk", "claude-3-5-sonnet@20241022"),
    ("Junk", "gpt-4o-2024-02-30"),
    ("Junk", "o1-2024-12-17-2024-12-17"),
    ("Junk", "ollama/llama3.1:8b"),
    ("Junk", "openai/gpt-4o/extra"),
)

# One turn: 100k input tokens of which 40k are cache reads, and 2k output tokens.
MIX = {"input_tokens": 100_000, "cache_read_tokens": 40_000, "output_tokens": 2_000}


@dataclass(frozen=True)
class CrossCheckRow:
    """What agora makes of one ledger id (``matched`` None: unpriced, ``why`` says why)."""

    group: str
    ledger_id: str
    matched: str | None
    rule: str | None
    source: str | None
    choice: str | None
    rates: tuple[float, float, float | None, float | None] | None
    mix_usd: float | None
    why: str | None


def crosscheck(engine: Any, catalog: Any) -> list[CrossCheckRow]:
    """Write one ledger row per id into ``engine``'s (provisioned, empty) database, run ``seed
    --missing`` with ``catalog``, and resolve each id."""
    from agora_cli.store import _schema as schema
    from agora_cli.store._pricing import (
        CatalogMatch,
        estimate_cost,
        match_catalog_price,
        resolve_current_price,
        seed_missing_prices,
    )

    with engine.begin() as conn:
        conn.execute(
            schema.thread.insert().values(
                id="crosscheck", actor_ref="auditor", title="", created_at=0, updated_at=0
            )
        )
        conn.execute(
            schema.token_usage.insert(),
            [
                {
                    "id": f"row-{i:03d}",
                    "thread_id": "crosscheck",
                    "actor_ref": "auditor",
                    "model_id": ledger_id,
                    "purpose": "chat",
                    "input_tokens": MIX["input_tokens"],
                    "output_tokens": MIX["output_tokens"],
                    "cache_read_tokens": MIX["cache_read_tokens"],
                    "created_at": 1,
                }
                for i, (_group, ledger_id) in enumerate(LEDGER_IDS)
            ],
        )
    with engine.begin() as conn:
        seeded = seed_missing_prices(conn, catalog=catalog)
    skipped = {s.model_id: s for s in seeded.skipped}
    rows = []
    with engine.connect() as conn:
        for group, ledger_id in LEDGER_IDS:
            res = resolve_current_price(conn, ledger_id)
            if res.price is None:
                s = skipped.get(ledger_id)
                why = "unpriced" if s is None else s.reason
                if s is not None and s.candidates:
                    why += f" ({', '.join(s.candidates[:3])})"
                rows.append(
                    CrossCheckRow(group, ledger_id, None, None, None, None, None, None, why)
                )
                continue
            match = match_catalog_price(ledger_id, catalog)
            p = res.price
            if (
                isinstance(match, CatalogMatch)
                and match.model_id == res.matched
                and p.source == match.price.source
            ):
                choice = match.choice
            else:  # it resolves to a price stored for another ledger id
                s = skipped.get(ledger_id)
                choice = "shared" if s is None else f"shared; {s.reason}"
            rows.append(
                CrossCheckRow(
                    group,
                    ledger_id,
                    res.matched,
                    res.rule,
                    p.source,
                    choice,
                    (p.input_per_1m, p.output_per_1m, p.cache_read_per_1m, p.cache_write_per_1m),
                    round(estimate_cost(p, **MIX), 10),
                    None,
                )
            )
    return rows


def _rate(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(rows: list[CrossCheckRow]) -> str:
    """The report: a summary, then one table row per ledger id."""
    priced = [r for r in rows if r.matched is not None]
    by_rule: dict[str, int] = {}
    for r in priced:
        by_rule[str(r.rule)] = by_rule.get(str(r.rule), 0) + 1
    by_choice: dict[str, int] = {}
    for r in priced:
        key = str(r.choice).split(";", 1)[0]
        by_choice[key] = by_choice.get(key, 0) + 1
    why: dict[str, int] = {}
    for r in rows:
        if r.matched is None:
            key = str(r.why).split(" ", 1)[0]
            why[key] = why.get(key, 0) + 1
    lines = [
        "## Pricing cross-check (`pricing_crosscheck`)",
        "",
        "Command: `python tests/bench/pricing_crosscheck.py --write` (SQLite; the models.dev"
        " snapshot in `tests/fixtures/`). One ledger row per id, `seed --missing`, then each id"
        " resolved.",
        "`tests/store/test_pricing_crosscheck.py` pins every row on all three dialects.",
        "",
        f"{len(rows)} ids: {len(priced)} priced "
        f"({', '.join(f'{n} {k}' for k, n in sorted(by_rule.items()))}), "
        f"{len(rows) - len(priced)} left unpriced "
        f"({', '.join(f'{n} {k}' for k, n in sorted(why.items()))}).",
        "Listings chosen: "
        + ", ".join(f"{n} {k}" for k, n in sorted(by_choice.items(), key=lambda kv: -kv[1]))
        + ".",
        "",
        "Rates are USD per 1M tokens (input / output / cache read / cache write); the turn is 100k"
        " input tokens (40k cache reads) and 2k output tokens. *choice*: why that provider's"
        " listing (`route`: the id's route named it; `only`: the one provider listing the"
        " spelling; `first-party`, `hyperscaler`, `agreement`); `shared`: the id resolves to a"
        " price stored for another ledger id (`spelling_conflict`: its own catalog price would"
        " have repriced another id, so it was not written — price it by hand).",
        "",
        "| group | ledger id | priced as | rule | source | choice | rates | turn USD |",
        "| --- | --- | --- | --- | --- | --- | --- | ---: |",
    ]
    for r in rows:
        if r.matched is None:
            lines.append(
                f"| {r.group} | `{_cell(r.ledger_id)}` | — | — | — | {_cell(str(r.why))} | — | — |"
            )
            continue
        assert r.rates is not None
        rates = " / ".join(_rate(x) for x in r.rates)
        lines.append(
            f"| {r.group} | `{_cell(r.ledger_id)}` | `{_cell(str(r.matched))}` | {r.rule} | "
            f"{r.source} | {r.choice} | {rates} | {r.mix_usd:.6f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    from agora_cli.store._catalog import fetch_catalog
    from agora_cli.store._engine import open_engine
    from agora_cli.store._provision import ensure_agent_tables

    with tempfile.TemporaryDirectory(prefix="agora_crosscheck_") as tmp:
        engine = open_engine(f"sqlite:///{tmp}/agora.db", create=True)
        ensure_agent_tables(engine)
        rows = crosscheck(engine, fetch_catalog(str(FIXTURE)))
        engine.dispose()
    text = markdown(rows)
    sys.stdout.write(text)
    if "--write" in argv:
        REPORT.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
