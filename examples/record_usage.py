"""Record a turn's token usage through the store, as a Python agent runtime would.

The store decides the row's id and timestamp, and folds the cost: a provider-reported cost
wins, else an estimate from the model's current price, else NULL (unknown, never $0).

    python examples/record_usage.py --db sqlite:///agora.db
"""

from __future__ import annotations

import argparse
import os

from agora_cli.store import ensure_agent_tables, open_engine
from agora_cli.store._pricing import set_price
from agora_cli.store._threads import append_message, create_thread
from agora_cli.store._usage import record_usage


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=os.environ.get("AGORA_DATABASE_URL", "sqlite:///agora.db"))
    args = parser.parse_args()

    engine = open_engine(args.db)
    ensure_agent_tables(engine)  # idempotent: no DDL once the schema is current
    with engine.begin() as conn:  # one transaction for the whole turn
        set_price(
            conn, "gpt-4o-mini", input_per_1m=0.15, output_per_1m=0.60, cache_read_per_1m=0.075
        )
        thread = create_thread(conn, actor_ref="alice", tenant_ref="acme", title="Example")
        reply = append_message(conn, thread_id=thread.id, role="assistant", content="Hello!")
        priced = record_usage(
            conn,
            thread_id=thread.id,
            actor_ref="alice",
            tenant_ref="acme",
            model_id="gpt-4o-mini-2024-07-18",  # the dated id the provider reported
            purpose="turn",
            input_tokens=1_200,
            output_tokens=300,
            cache_read_tokens=200,
            message_id=reply.id,
        )
        unknown = record_usage(
            conn,
            thread_id=thread.id,
            actor_ref="alice",
            tenant_ref="acme",
            model_id="some-unpriced-model",
            purpose="turn",
            input_tokens=500,
            output_tokens=50,
        )
    print(f"{priced.model_id}: cost_usd={priced.cost_usd:.8f} ({priced.cost_source})")
    print(f"{unknown.model_id}: cost_usd={unknown.cost_usd} ({unknown.cost_source})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
