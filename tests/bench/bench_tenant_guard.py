"""Benchmark `tenant_guard`: the write path with the child-tenant check, on vs off (issue 24).

On each dialect it provisions a scratch database with two tenants' threads, then for
``BENCH_GUARD_ROUNDS`` rounds (default 10, ABBA order) times ``BENCH_GUARD_CALLS`` writes
(default 100) with the check on and with it replaced by a no-op: each write one transaction of
``record_usage`` and ``start_run`` for tenant ``acme`` on acme's thread. The check is one
primary-key read of the thread in the same transaction. Medians per write are compared.
Run: ``python tests/bench/bench_tenant_guard.py`` (``AGORA_BENCH_DIALECTS=sqlite`` for one).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _common import dialects, scratch_database


def main() -> None:
    from agora_cli.store import _tenant_guard as tenant_guard
    from agora_cli.store import _threads as threads
    from agora_cli.store._engine import open_engine
    from agora_cli.store._provision import ensure_agent_tables
    from agora_cli.store._steps import start_run
    from agora_cli.store._threads import create_thread
    from agora_cli.store._usage import record_usage

    rounds = int(os.environ.get("BENCH_GUARD_ROUNDS", "10"))
    calls = int(os.environ.get("BENCH_GUARD_CALLS", "100"))
    checked = tenant_guard.check_thread_tenant

    def unchecked(*_args: object) -> None:
        return None

    for dialect in dialects():
        with scratch_database(dialect) as url:
            engine = open_engine(url)
            ensure_agent_tables(engine)
            with engine.begin() as conn:
                for tenant in ("acme", "globex"):
                    create_thread(conn, actor_ref="a", tenant_ref=tenant, thread_id=f"t-{tenant}")
            samples: dict[str, list[float]] = {"on": [], "off": []}
            order = ["on", "off", "off", "on"]
            for n in range(rounds):
                mode = order[n % 4]
                guard = checked if mode == "on" else unchecked
                tenant_guard.check_thread_tenant = guard
                threads.check_thread_tenant = guard  # type: ignore[attr-defined]
                for _ in range(calls):
                    start = time.perf_counter()
                    with engine.begin() as conn:
                        record_usage(
                            conn, thread_id="t-acme", actor_ref="a", model_id="gpt-4o",
                            purpose="chat", input_tokens=10, output_tokens=5, tenant_ref="acme",
                            provider_cost_usd=0.001,
                        )  # fmt: skip
                        start_run(conn, thread_id="t-acme", actor_ref="a", tenant_ref="acme")
                    samples[mode].append(time.perf_counter() - start)
            tenant_guard.check_thread_tenant = checked
            threads.check_thread_tenant = checked  # type: ignore[attr-defined]
            on, off = (statistics.median(samples[m]) * 1000 for m in ("on", "off"))
            print(
                f"{dialect:<10} write (record_usage + start_run, one transaction): "
                f"check on {on:.3f} ms, off {off:.3f} ms, ratio {on / off:.2f}"
            )
            engine.dispose()


if __name__ == "__main__":
    main()
