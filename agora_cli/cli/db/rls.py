"""`agora db rls enable|disable|status|verify`: row-level security (PostgreSQL)."""

from __future__ import annotations

# internal on purpose: the operator's commands import the store's private modules (cli/__init__.py)
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agora_cli.cli.options import DbOpt, JsonOpt, open_db
from agora_cli.cli.output import Col, finish, out_console, render_table, say
from agora_cli.store._dialects import RLS_DIALECT

if TYPE_CHECKING:
    from agora_cli.store._rls import RlsPlan

__all__ = ["app"]

app = typer.Typer(
    help=(
        "Row-level security on PostgreSQL: tenants kept apart by the database itself.\n\n"
        "Example: agora db rls enable --app-role agora_app && agora db rls verify"
    ),
    no_args_is_help=True,
)

AppRoleOpt = Annotated[
    str | None,
    typer.Option(
        "--app-role",
        metavar="NAME",
        help=(
            "The runtime's role (NOLOGIN NOBYPASSRLS; created if missing, granted the DML). "
            "Refused when it owns an agent table (or is a member of its owner), bypasses RLS, "
            "has CREATE on the schema, or is PUBLIC."
        ),
        show_default=False,
    ),
]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the SQL; run none.")]
LockTimeoutOpt = Annotated[
    float,
    typer.Option(
        "--lock-timeout",
        metavar="SECONDS",
        min=0.001,
        max=3600,
        help="Give up (exit 3) after waiting this long for a table lock.",
    ),
]


def _plan_doc(plan: RlsPlan) -> dict[str, Any]:
    return {
        "action": plan.action,
        "dialect": RLS_DIALECT,
        "app_role": plan.app_role,
        "role_created": plan.role_created,
        "role_dropped": plan.role_dropped,
        "dry_run": plan.dry_run,
        "changed": plan.changed,
        "statements": len(plan.sql),
        "sql": plan.sql,
        "notes": plan.notes,
    }


def _show_plan(plan: RlsPlan, done: str) -> None:
    console = out_console()
    if not plan.sql:
        console.print(f"Nothing to do: row-level security is already {done}.")
    elif plan.dry_run:
        console.print(f"-- would run {len(plan.sql)} statement(s)", markup=False)
        for statement in plan.sql:
            console.print(statement + ";", markup=False, soft_wrap=True)
    else:
        role = ""
        if plan.role_created:
            role = f"; role {plan.app_role} created"
        elif plan.role_dropped:
            role = f"; role {plan.app_role} dropped"
        console.print(
            f"Row-level security {done} ({len(plan.sql)} statement(s){role}).",
            markup=False,
            soft_wrap=True,
        )
    for note in plan.notes:
        say(f"note: {note}", style="yellow")


@app.command("enable")
def enable(
    app_role: AppRoleOpt = None,
    dry_run: DryRunOpt = False,
    lock_timeout: LockTimeoutOpt = 10.0,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Enable and force the tenant policy (agent_tenant_isolation) on every tenant-data table.

    Rows are visible and writable when their tenant equals the session setting agora.tenant
    (AGORA_TENANT); untenanted rows only while it is unset. A ledger, run, queued-message or
    proposal row with no tenant_ref belongs to its thread's tenant. Child tables follow their
    parent. Idempotent: only what is missing is created and an older agora's policies are
    upgraded, in one transaction. PostgreSQL only.

    Example: agora db rls enable --app-role agora_app --dry-run
    """
    from agora_cli.store._rls import enable_rls

    plan = enable_rls(open_db(db), app_role=app_role, dry_run=dry_run, lock_timeout_s=lock_timeout)
    finish(_plan_doc(plan), as_json=as_json, show=lambda: _show_plan(plan, "enabled"))


@app.command("disable")
def disable(
    app_role: AppRoleOpt = None,
    drop_role: Annotated[
        bool, typer.Option("--drop-role", help="Also drop the --app-role role.")
    ] = False,
    dry_run: DryRunOpt = False,
    lock_timeout: LockTimeoutOpt = 10.0,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Remove exactly what `db rls enable` created: policies, forcing, the helper function.

    With --app-role, also revoke that role's grants on the agent tables; with --drop-role as
    well, drop the role. PostgreSQL only.

    Example: agora db rls disable --app-role agora_app --drop-role
    """
    from agora_cli.store._rls import disable_rls

    plan = disable_rls(
        open_db(db),
        app_role=app_role,
        drop_role=drop_role,
        dry_run=dry_run,
        lock_timeout_s=lock_timeout,
    )
    finish(_plan_doc(plan), as_json=as_json, show=lambda: _show_plan(plan, "disabled"))


@app.command("status")
def status(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Show row-level security per agent table, and which kind of role is connected.

    Tables are read from the live catalog: one holding tenant data (a tenant_ref or tenant_key
    column, or a foreign key to such a table) with no policy and not declared shared shows as
    UNPROTECTED. A policy an older agora installed, or one edited by hand (its live expressions
    are compared, not its name), shows as "outdated" (`db rls enable` replaces it).
    A superuser or BYPASSRLS role sees every tenant (cross-tenant reports run as one); any
    other role, the tables' owner included (the policies are forced), sees only its tenant's rows.

    Example: agora db rls status --json
    """
    from agora_cli.store._rls import rls_status

    engine = open_db(db, readonly=True)
    with engine.connect() as conn:
        st = rls_status(conn)
        conn.rollback()
    doc = {
        "dialect": RLS_DIALECT,
        "role": st.role,
        "role_kind": st.role_kind,
        "bypasses_rls": st.bypasses_rls,
        "tenant": st.tenant,
        "enabled": st.enabled,
        "partial": st.partial,
        "function": st.function,
        "thread_tenant_index": st.thread_tenant_index,
        "outdated": st.outdated,
        "unprotected": st.unprotected,
        "tables": [
            {
                "table": t.table,
                "protected": t.protected,
                "exists": t.exists,
                "rls_enabled": t.enabled,
                "rls_forced": t.forced,
                "policy": t.policy,
                "policy_current": t.policy_current,
                "tenant_data": t.tenant_data,
                "shared": t.shared,
            }
            for t in st.tables
        ],
    }

    def show() -> None:
        console = out_console()
        state = "enabled" if st.enabled else "partly enabled" if st.partial else "not enabled"
        console.print(f"row-level security  {state}", markup=False)
        sees = "every tenant" if st.bypasses_rls else "only its tenant's rows"
        console.print(f"connected role      {st.role} ({st.role_kind}: sees {sees})", markup=False)
        console.print(
            f"agora.tenant        {st.tenant or '(unset: untenanted rows)'}", markup=False
        )
        index = {"valid": "built", "invalid": "INVALID (a failed build: `enable` rebuilds it)"}
        console.print(
            f"thread index        agent_token_usage_thread_tenant_idx "
            f"{index.get(st.thread_tenant_index, 'missing')}",
            markup=False,
        )
        if st.outdated:
            console.print(
                f"outdated policies   {', '.join(st.outdated)} (`agora db rls enable` upgrades "
                "them)",
                markup=False,
                soft_wrap=True,
            )
        if st.unprotected:
            console.print(
                f"UNPROTECTED         {', '.join(st.unprotected)} (tenant data without a "
                "policy: every tenant reads every row)",
                markup=False,
                soft_wrap=True,
            )
        yes = {True: "yes", False: "—"}
        render_table(
            [
                {
                    "table": t.table,
                    "tenant data": "yes"
                    if t.protected
                    else "UNPROTECTED"
                    if t.unprotected
                    else "shared"
                    if t.shared
                    else "no",
                    "enabled": yes[t.enabled],
                    "forced": yes[t.forced],
                    "policy": "outdated" if t.policy and not t.policy_current else yes[t.policy],
                }
                for t in st.tables
                if t.exists or t.protected
            ],
            [Col("table"), Col("tenant data"), Col("enabled"), Col("forced"), Col("policy")],
        )

    finish(doc, as_json=as_json, show=show)


@app.command("verify")
def verify(app_role: AppRoleOpt = None, db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Run the isolation test per table; exit 1 naming every table whose isolation fails.

    In one transaction that is rolled back, it writes rows for two throw-away tenants into every
    protected table, switches to the app role (SET LOCAL ROLE; without --app-role, a throw-away
    NOBYPASSRLS role made in the same transaction) and checks that tenant A sees its rows and
    none of B's, cannot update or delete B's, cannot insert a row for B, nor a row of its own
    tenant on B's thread, run or message (failing as on a parent that does not exist); and that
    a ledger, run, queued-message or proposal row with no tenant_ref on A's thread is A's alone.
    Tables of the live catalog holding tenant data without a policy fail, and so does an app
    role that may write the fold's tables. An --app-role that owns (or is a member of an owner
    of) an agent table, bypasses RLS or has CREATE on the schema is refused (exit 2). Nothing it
    writes survives: safe against production.

    Example: agora db rls verify --app-role agora_app --json
    """
    from agora_cli.store._rls_verify import verify_isolation

    report = verify_isolation(open_db(db), app_role=app_role)
    mark = {True: "ok", False: "FAIL"}
    doc = {
        "ok": report.ok,
        "role": report.role,
        "temporary_role": report.temporary_role,
        "failed": report.failed,
        "problems": report.problems,
        "tables": [
            {
                "table": t.table,
                "ok": t.ok,
                "sees_own": t.sees_own,
                "hides_other": t.hides_other,
                "update_blocked": t.update_blocked,
                "delete_blocked": t.delete_blocked,
                "insert_blocked": t.insert_blocked,
                "thread_tenant": t.thread_tenant,
                "parent_blocked": t.parent_blocked,
                "detail": t.detail,
            }
            for t in report.tables
        ],
    }

    def show() -> None:
        render_table(
            [
                {
                    "table": t.table,
                    "sees own": mark[t.sees_own],
                    "hides other": mark[t.hides_other],
                    "update": mark[t.update_blocked],
                    "delete": mark[t.delete_blocked],
                    "insert": mark[t.insert_blocked],
                    "thread's tenant": "—" if t.thread_tenant is None else mark[t.thread_tenant],
                    "parent": "—" if t.parent_blocked is None else mark[t.parent_blocked],
                    "detail": t.detail or "",
                }
                for t in report.tables
            ],
            [
                Col("table"),
                Col("sees own"),
                Col("hides other"),
                Col("update"),
                Col("delete"),
                Col("insert"),
                Col("thread's tenant"),
                Col("parent"),
                Col("detail"),
            ],
            title="Tenant isolation per table (tenant A against B's rows; all rolled back)",
        )
        for problem in report.problems:
            say(f"FAIL: {problem}")
        if report.ok:
            out_console().print(f"ok: {len(report.tables)} table(s) keep tenants apart.")
        elif report.failed:
            say(f"isolation fails on: {', '.join(report.failed)} (agora db rls enable repairs it)")

    finish(doc, as_json=as_json, show=show, exit_code=0 if report.ok else 1)
