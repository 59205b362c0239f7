"""`agora demo`: provision a database and fill it with a realistic, reproducible data set."""

from __future__ import annotations

# internal on purpose: the operator's commands import the store's private modules (cli/__init__.py)
from typing import Annotated, Any

import typer

from agora_cli.cli.options import DbOpt, JsonOpt, open_db
from agora_cli.cli.output import emit_json, out_console
from agora_cli.store._masking import mask_url


def demo(
    ctx: typer.Context,
    seed: Annotated[int, typer.Option("--seed", help="Random seed: same seed, same data.")] = 7,
    days: Annotated[
        int, typer.Option("--days", min=1, max=365, help="Days of history, ending today (UTC).")
    ] = 30,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Replace a previous demo data set (rows with demo- ids) in place."
        ),
    ] = False,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Provision the database and write a sample data set, then show what to try next.

    Writes, through the store's own functions: threads and messages for four actors in two
    tenants (one thread soft-deleted, one transient), runs (completed, failed, one running) and
    tool calls with durations and failures, a ledger over several models and days (some priced,
    one unpriced, one dated model id, one provider-reported cost), pending, approved (queued,
    executed, failed, stuck), rejected and expired proposals, and the frames of finished,
    running and expired streams. Tenant globex has a data key: its messages are stored sealed,
    wrapped by the KEK in AGORA_KEK or AGORA_KEK_FILE; with neither set, a SQLite demo writes
    its own KEK to a file next to the database (DB.kek, mode 0600; reused by --force), and a
    server database gets no sealed tenant. Refuses (exit 1) a database that already holds
    agent data unless --force.

    Example: agora demo && agora spend --by model
    """
    from agora_cli.store._demo import demo_kek, write_demo_data

    engine = open_db(db, create=True)
    kek_file: list[str | None] = [None]

    def kek() -> Any:
        found, kek_file[0] = demo_kek(engine)
        return found

    summary = write_demo_data(engine, seed=seed, days=days, force=force, kek=kek)
    scope = f"--actor {summary.sample_actor} --thread {summary.sample_thread} " + (
        f"--tenant {summary.sample_tenant}" if summary.sample_tenant else "--no-tenant"
    )
    source = ctx.get_parameter_source("db")
    db_opt = _db_option(None if source is None or source.name != "COMMANDLINE" else db)
    try_next = [
        f"agora proposals inbox{db_opt}",
        f"agora runs list --status failed{db_opt}",
        f"agora tools stats --from {summary.first_day}{db_opt}",
        f"agora spend --by model{db_opt}",
        f"agora spend --by day --from {summary.first_day} --chart{db_opt}",
        f"agora quota --all{db_opt}",
        f"agora quota --actor alice --day-usd 0.01{db_opt}",
        f"agora prices resolve gpt-4o-mini-2024-07-18{db_opt}",
        f"agora threads show {summary.sample_thread}{db_opt}",
        *(
            [f"agora threads show {summary.sealed_thread}{db_opt}", f"agora keys list{db_opt}"]
            if summary.sealed_tenant
            else []
        ),
        f"agora proposals list {scope}{db_opt}",
        f"agora frames tail {summary.frame_runs.get('finished', '')}{db_opt}",
        f"agora db status{db_opt}",
    ]
    if as_json:
        doc: dict[str, Any] = {
            "seed": seed,
            "days": days,
            "from": summary.first_day,
            "to": summary.last_day,
            "threads": summary.threads,
            "messages": summary.messages,
            "tool_calls": summary.tool_calls,
            "runs": summary.runs,
            "failed_runs": summary.failed_runs,
            "running_runs": summary.running_runs,
            "budgets": summary.budgets,
            "usage_rows": summary.usage_rows,
            "priced_models": summary.priced_models,
            "unpriced_models": summary.unpriced_models,
            "proposals": summary.proposals,
            "frame_runs": summary.frame_runs,
            "sealed": {
                "tenant": summary.sealed_tenant,
                "thread": summary.sealed_thread or None,
                "messages": summary.sealed_messages,
                "kek_file": kek_file[0],
            },
            "try_next": try_next,
        }
        emit_json(doc)
        return
    console = out_console()
    proposals = ", ".join(f"{n} {state}" for state, n in sorted(summary.proposals.items()))
    console.print(
        f"Wrote the demo data set (seed {seed}, {summary.first_day} … {summary.last_day}):\n"
        f"  {summary.threads} threads, {summary.messages} messages, {summary.tool_calls} tool "
        f"calls, {summary.runs} runs ({summary.failed_runs} failed, {summary.running_runs} "
        "running)\n"
        f"  {summary.usage_rows} ledger rows over {len(summary.priced_models)} priced models "
        f"and 1 unpriced ({', '.join(summary.unpriced_models)})\n"
        f"  proposals: {proposals}\n"
        f"  budgets: {summary.budgets} (one ok, one at its warning, one exhausted)\n"
        f"  streams: {', '.join(summary.frame_runs)}",
        markup=False,
        soft_wrap=True,
    )
    if summary.sealed_tenant:
        import shlex

        opener = f"AGORA_KEK_FILE={shlex.quote(kek_file[0])} " if kek_file[0] else ""
        console.print(
            f"  sealed: tenant {summary.sealed_tenant}'s {summary.sealed_messages} messages "
            + (f"(its KEK is in {kek_file[0]}: keep it private)" if kek_file[0] else "")
            + f"; {opener}agora threads show {summary.sealed_thread} opens them",
            markup=False,
            soft_wrap=True,
        )
    else:
        console.print(
            "  sealed: none (set AGORA_KEK to give tenant globex a key and seal its messages)",
            markup=False,
            soft_wrap=True,
        )
    console.print("\nTry next:", style="bold")
    for command in try_next:
        console.print(f"  {command}", markup=False, soft_wrap=True)


def _db_option(db: str | None) -> str:
    """``--db`` as the "Try next" lines show it: never with a password in clear.

    A URL from the environment is left out (the commands find it there too); a URL with a
    password is shown masked, and the operator puts the password back; a profile in use is
    named.
    """
    import shlex

    from agora_cli.cli.profiles import active

    profile, _set = active()
    chosen = f" --profile {shlex.quote(profile.name)}" if profile is not None else ""
    if not db:
        return chosen
    return f" --db {shlex.quote(mask_url(db))}{chosen}"
