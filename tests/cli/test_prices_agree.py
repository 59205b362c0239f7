"""The two pricing defects the cross-check against LiteLLM found (issue 28, item 7), through the
real CLI, with the models.dev snapshot served over HTTP from 127.0.0.1 (``served_catalog``).

(a) ``meta-llama/Llama-3.3-70B-Instruct-Turbo`` is listed by DeepInfra and Together at different
    prices, so ``seed --missing`` calls it ambiguous — yet it was priced: the ledger's
    ``together_ai/…`` spelling stored Together's price under the bare id, which the bare id
    then resolved to exactly. An ambiguous spelling stays unpriced; the routed id that would
    have priced it is a ``spelling_conflict``.
(b) ``prices resolve --catalog`` decided "would ``seed --missing`` price it?" for the id alone,
    and ``seed --missing`` for the whole ledger: beside the ledger's ``google/gemini-2.5-pro``,
    resolve said ``openrouter/google/gemini-2.5-pro`` would be priced and the seed skipped it.
    Both now read one plan (``plan_missing_prices``).
"""

from __future__ import annotations

from typing import Any

import pytest

from agora_cli.store import _schema as schema
from agora_cli.store._catalog import ModelCatalog
from agora_cli.store._engine import open_engine

# No network, no shared cache: AGORA_CACHE_DIR in tmp_path.
pytestmark = pytest.mark.usefixtures("offline_catalog")

LLAMA = "meta-llama/Llama-3.3-70B-Instruct-Turbo"
GEMINI = "openrouter/google/gemini-2.5-pro"


def add_ledger(url: str, model_ids: list[str]) -> None:
    engine = open_engine(url)
    with engine.begin() as conn:
        conn.execute(
            schema.thread.insert().values(
                id="t1", actor_ref="alice", title="t", created_at=0, updated_at=0
            )
        )
        conn.execute(
            schema.token_usage.insert(),
            [
                {
                    "id": f"u{i}",
                    "thread_id": "t1",
                    "actor_ref": "alice",
                    "model_id": model_id,
                    "purpose": "chat",
                    "input_tokens": 1000,
                    "output_tokens": 500,
                    "created_at": 1 + i,
                }
                for i, model_id in enumerate(model_ids)
            ],
        )
    engine.dispose()


def test_an_ambiguous_id_stays_unpriced_beside_its_routed_spelling(
    cli: Any, db_url: str, served_catalog: ModelCatalog
) -> None:
    add_ledger(db_url, [f"together_ai/{LLAMA}", LLAMA])
    url = served_catalog.source
    r = cli("prices", "seed", "--missing", "--catalog", url, "--db", db_url, "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json()
    assert doc["prices"] == []
    skipped = {s["model_id"]: s for s in doc["skipped"]}
    assert skipped[LLAMA] == {
        "model_id": LLAMA,
        "reason": "ambiguous",
        "candidates": [f"deepinfra/{LLAMA}", f"togetherai/{LLAMA}"],
    }
    assert skipped[f"together_ai/{LLAMA}"] == {
        "model_id": f"together_ai/{LLAMA}",
        "reason": "spelling_conflict",
        "candidates": [f"togetherai/{LLAMA}", LLAMA],
    }
    for model_id in (LLAMA, f"together_ai/{LLAMA}"):
        r = cli("prices", "resolve", model_id, "--db", db_url, "--json")
        assert (r.exit_code, r.json()["matched"]) == (0, None), r.stdout
    assert cli("prices", "list", "--db", db_url, "--json").json() == {"prices": []}
    # Priced by hand under its own id, the routed spelling no longer touches the bare one.
    set_ = ("prices", "set", f"together_ai/{LLAMA}", "--input", "0.88", "--output", "0.88")
    assert cli(*set_, "--db", db_url).exit_code == 0
    r = cli("prices", "seed", "--missing", "--catalog", url, "--db", db_url, "--json")
    assert [s["model_id"] for s in r.json()["skipped"]] == [LLAMA]
    assert cli("prices", "resolve", LLAMA, "--db", db_url, "--json").json()["matched"] is None


LEDGER = [
    GEMINI,
    "google/gemini-2.5-pro",
    f"together_ai/{LLAMA}",
    LLAMA,
    "openrouter/deepseek/deepseek-chat",
    "deepseek/deepseek-chat",
    "gpt-4o-2024-05-13",
    "eu.anthropic.claude-sonnet-4-5-20250929-v1:0",
    "claude-3-5-haiku-20241022",
    "chatgpt-4o-latest",
    "my-local-model",
]


def test_resolve_and_seed_missing_agree_on_every_ledger_id(
    cli: Any, db_url: str, served_catalog: ModelCatalog
) -> None:
    add_ledger(db_url, LEDGER)
    url = served_catalog.source
    assert cli("prices", "seed", "openai/gpt-4o", "--catalog", url, "--db", db_url).exit_code == 0
    said = {}
    for model_id in LEDGER:
        r = cli("prices", "resolve", model_id, "--catalog", url, "--db", db_url, "--json")
        assert r.exit_code == 0, r.stderr
        said[model_id] = r.json()["catalog"]
    # The case the cross-check found: the catalog prices the OpenRouter spelling, but its price
    # stored under google/gemini-2.5-pro would reprice the ledger's own google/gemini-2.5-pro.
    assert said[GEMINI]["matched"] == "google/gemini-2.5-pro"
    assert said[GEMINI]["seed_missing_would_price"] is False
    assert said[GEMINI]["seed_missing_skipped"] == {
        "reason": "spelling_conflict",
        "candidates": [f"{GEMINI}", "google/gemini-2.5-pro"],
    }
    r = cli("prices", "resolve", GEMINI, "--catalog", url, "--db", db_url)
    assert "seed --missing would not price it" in " ".join(r.stderr.split())

    r = cli("prices", "seed", "--missing", "--catalog", url, "--db", db_url, "--json")
    assert r.exit_code == 0, r.stderr
    seeded = r.json()
    skipped = {s["model_id"]: s for s in seeded["skipped"]}
    written = {p["model"] for p in seeded["prices"]}
    for model_id in LEDGER:
        now = cli("prices", "resolve", model_id, "--db", db_url, "--json").json()
        if said[model_id].get("seed_missing_would_price"):
            assert model_id not in skipped, (model_id, skipped.get(model_id))
            assert said[model_id]["matched"] in written, model_id
            assert now["matched"] == said[model_id]["matched"], model_id
        else:
            held = said[model_id].get("seed_missing_skipped")
            reason = held["reason"] if held else said[model_id].get("skipped")
            if reason is None:  # it needed no price from the catalog
                assert model_id not in skipped, model_id
            else:
                assert skipped[model_id]["reason"] == reason, model_id
    # and a second run finds nothing more to do for the ids resolve said it would price
    again = cli("prices", "seed", "--missing", "--catalog", url, "--db", db_url, "--json").json()
    assert again["prices"] == []


def test_resolve_answers_for_an_id_the_ledger_has_not_seen_as_if_it_had(
    cli: Any, db_url: str, served_catalog: ModelCatalog
) -> None:
    add_ledger(db_url, ["google/gemini-2.5-pro"])
    url = served_catalog.source
    for model_id, would in ((GEMINI, False), ("gpt-4o-mini-2024-07-18", True)):
        r = cli("prices", "resolve", model_id, "--catalog", url, "--db", db_url, "--json")
        assert r.json()["catalog"]["seed_missing_would_price"] is would, model_id
