"""Row-level security on PostgreSQL: tenants kept apart by the database itself.

``enable_rls`` enables and *forces* row-level security on every agent table that holds tenant
data, with one policy per table named ``agent_tenant_isolation`` (tenancy.md):

- threads: a row is visible and writable when ``tenant_ref`` equals the session setting
  ``agora.tenant``; untenanted rows (``tenant_ref`` NULL) only while the setting is unset or
  empty. The daily fold of the ledger follows the same rule on its ``tenant_key`` (``''`` is
  untenanted);
- token usage, runs and action proposals: the same on their own ``tenant_ref``, but a row whose
  ``tenant_ref`` is NULL belongs to its thread's tenant (the upstream runtime writes its ledger
  rows so): visible iff its thread is, through an ``EXISTS`` on ``agent_thread`` under the
  thread's own policy — never to another tenant nor to an untenanted session when the thread is
  a tenant's. Queued messages: their own ``tenant_ref`` (or NULL) and their thread;
- tables without ``tenant_ref`` follow their parent, through an ``EXISTS`` on the parent table,
  whose own policy applies inside it: messages, generated-UI calls and confirmation tokens through
  their thread, tool calls through their message, stream frames through their run. A frame whose
  run has no row is visible only to untenanted sessions; whether the run row exists at all is
  asked of ``agent_rls_run_absent``, a ``SECURITY DEFINER`` function owned by the role that ran
  ``enable`` (which must bypass row-level security for that answer: otherwise the function
  answers "not absent", and such frames are visible to no one but roles that bypass RLS);
- tenants' data keys (``agent_tenant_key``) follow their ``tenant_key``: a session sees only
  its own tenant's wrapped keys (the runtime role may only read them);
- prices, channel state, budgets and the fold's day list carry no policy; the fold's optional
  per-model rollup (every tenant's rows summed per model; not an agent table) carries none
  either, and the app role gets no grant on it (reports under row-level security read
  ``agent_usage_daily``).

``enable`` also builds ``agent_token_usage_thread_tenant_idx (thread_id, tenant_ref)`` — an
extra index (schema.md allows them), built ``CONCURRENTLY`` before the policies' transaction so
that ledger writes go on meanwhile: under the policy a thread's ledger read is an equality on
both columns, and without it PostgreSQL merges the thread index with the tenant's whole range
(``threads show`` of 500 messages: 1.62× with RLS on; 1.1× with the index). ``disable`` drops it.

``WITH CHECK`` is the same expression, so a session cannot write a row for another tenant, nor
a row with no ``tenant_ref`` on another tenant's thread. The tenant comparisons are plain
equalities on a STABLE expression, so the tenant indexes stay usable.

Each policy carries a comment, its mark (``POLICY_MARKS``: a hash of the expression ``enable``
installs). PostgreSQL stores the expression deparsed, in a text that differs from ours and by
server version, so the mark is what ``status`` and ``db check`` compare: a policy without it (an
older agora's) or with another is outdated, and ``enable`` replaces its expressions in place
(``ALTER POLICY``). A policy edited by hand that keeps its mark is not noticed: ``verify`` is the
test of what the policies do.

``tenant_session(conn, tenant)`` and ``open_engine(..., tenant=…)`` / ``AGORA_TENANT`` set
``agora.tenant`` per transaction (``set_config(…, true)``, i.e. ``SET LOCAL``).
``verify_isolation`` is the per-table isolation test, everything it writes rolled back.
MySQL/MariaDB and SQLite have no row-level security: the commands refuse there
(``RlsUnsupported``); ``tenant_session`` does nothing there.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from agora_cli.store.engine import dialect_name
from agora_cli.store.errors import InvalidInput, SchemaDrift
from agora_cli.store.values import check_identity

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine
    from sqlalchemy.sql.schema import Table

    from agora_cli.store.provision import Problem

__all__ = [
    "POLICY_NAME",
    "PROTECTED_TABLES",
    "TENANT_SETTING",
    "RlsPlan",
    "RlsStatus",
    "RlsTableCheck",
    "RlsTableState",
    "RlsVerifyReport",
    "disable_rls",
    "enable_rls",
    "install_tenant_setting",
    "policy_problems",
    "rls_status",
    "tenant_session",
    "verify_isolation",
]

TENANT_SETTING = "agora.tenant"
POLICY_NAME = "agent_tenant_isolation"
RUN_ABSENT_FUNCTION = "agent_rls_run_absent"

_SETTING = f"current_setting('{TENANT_SETTING}', true)"
_UNSET = f"coalesce({_SETTING}, '') = ''"
_TENANT = f"nullif({_SETTING}, '')"


def _direct(column: str = "tenant_ref") -> str:
    # Two plain branches rather than one CASE or IS NOT DISTINCT FROM: `tenant_ref = <stable>`
    # is an index condition, so the tenant indexes stay usable under the policy.
    return f"({column} = {_TENANT} OR ({column} IS NULL AND {_UNSET}))"


def _through(table: str, column: str, parent: str) -> str:
    # The parent's own policy applies inside the EXISTS: the child is visible iff its parent is.
    # OFFSET 0 keeps it a lookup by the parent's primary key per row: without it the planner may
    # hash every parent row of the tenant instead (measured: a 500-message thread of a tenant
    # with 2,000 threads read all 2,000 of them for each `threads show`).
    return f"EXISTS (SELECT 1 FROM {parent} p WHERE p.id = {table}.{column} OFFSET 0)"


def _own_or_threads(table: str) -> str:
    # A row's own tenant, else (tenant_ref NULL) its thread's: the upstream runtime writes ledger
    # rows with no tenant_ref, the tenant being the thread's. The thread is looked up under the
    # thread's own policy, so the row is visible iff its thread is: to the thread's tenant, and
    # to untenanted sessions only when the thread is untenanted. thread_id is NOT NULL with a
    # foreign key, so "the thread is not visible" means "another tenant's": no SECURITY DEFINER
    # lookup is needed, and the planner sees a primary-key probe. The first branch stays a plain
    # equality, and the second starts with `tenant_ref IS NULL`: both are index conditions.
    return (
        f"(tenant_ref = {_TENANT} OR "
        f"(tenant_ref IS NULL AND {_through(table, 'thread_id', 'agent_thread')}))"
    )


# table -> the policy's expression (USING and WITH CHECK alike), parents before children.
POLICY_EXPRESSIONS: dict[str, str] = {
    "agent_thread": _direct(),
    "agent_token_usage": _own_or_threads("agent_token_usage"),
    "agent_run": _own_or_threads("agent_run"),
    "agent_queued_message": (
        f"((tenant_ref = {_TENANT} OR tenant_ref IS NULL) AND "
        f"{_through('agent_queued_message', 'thread_id', 'agent_thread')})"
    ),
    "agent_action_proposal": _own_or_threads("agent_action_proposal"),
    "agent_usage_daily": f"(tenant_key = coalesce({_SETTING}, ''))",
    "agent_tenant_key": f"(tenant_key = coalesce({_SETTING}, ''))",
    "agent_message": _through("agent_message", "thread_id", "agent_thread"),
    "agent_genui_call": _through("agent_genui_call", "thread_id", "agent_thread"),
    "agent_confirm_token": _through("agent_confirm_token", "thread_id", "agent_thread"),
    "agent_tool_call": _through("agent_tool_call", "message_id", "agent_message"),
    "agent_stream_frame": (
        f"({_through('agent_stream_frame', 'run_id', 'agent_run')} OR "
        f"({_UNSET} AND {RUN_ABSENT_FUNCTION}(agent_stream_frame.run_id)))"
    ),
}
PROTECTED_TABLES: tuple[str, ...] = tuple(POLICY_EXPRESSIONS)


def _marker(expression: str) -> str:
    return f"agora {POLICY_NAME} {hashlib.sha256(expression.encode()).hexdigest()[:16]}"


# The policy's comment says which expression `enable` installed: PostgreSQL keeps a policy's
# expression deparsed (its text differs from ours, and by server version), so the catalog is
# compared with this mark. A policy without it (made by an older agora) or with another one is
# outdated: `enable` replaces its expressions in place (ALTER POLICY) and marks it.
POLICY_MARKS: dict[str, str] = {t: _marker(e) for t, e in POLICY_EXPRESSIONS.items()}
# Built by `enable` outside its transaction (CONCURRENTLY), dropped by `disable`.
THREAD_TENANT_INDEX = "agent_token_usage_thread_tenant_idx"
_ONLINE = "CONCURRENTLY"  # statements that run outside the transaction, in autocommit
# Tables whose rows with no tenant_ref belong to their thread's tenant (_own_or_threads; queued
# messages follow their thread anyway): `verify` probes that case on each.
THREADS_TENANT_TABLES = (
    "agent_token_usage",
    "agent_run",
    "agent_queued_message",
    "agent_action_proposal",
)
# The runtime reads these and never writes them: the app role gets SELECT only. The fold's
# tables are written by the privileged `spend fold` alone (a tenant's fold would bend everyone's).
READ_ONLY_TABLES = frozenset(
    {
        "agent_model_pricing",
        "agent_budget",
        "agent_tenant_key",
        "agent_usage_daily",
        "agent_usage_fold",
    }
)
_DML = ("SELECT", "INSERT", "UPDATE", "DELETE")


class RlsUnsupported(InvalidInput):
    """Row-level security needs PostgreSQL."""


def _require_postgresql(bind: Engine | Connection) -> None:
    name = dialect_name(bind)
    if name != "postgresql":
        where = "MySQL/MariaDB" if name == "mysql" else "SQLite"
        raise RlsUnsupported(
            f"{where} has no row-level security: isolate tenants by database there "
            "(one database per tenant); `agora db rls` needs PostgreSQL"
        )


def _quote(conn: Connection, name: str) -> str:
    return str(conn.dialect.identifier_preparer.quote_identifier(name))


_ROLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def _check_role_name(role: str) -> str:
    if not isinstance(role, str) or not _ROLE_NAME.match(role) or role.lower().startswith("pg_"):
        raise InvalidInput(
            f"app_role {role!r} is not a usable role name (letters, digits and _, at most 63 "
            "characters, not starting with a digit or pg_)",
            param="app_role",
        )
    return role


# --- catalog ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RlsTableState:
    """One agent table's row-level security as the catalog describes it."""

    table: str
    protected: bool
    exists: bool
    enabled: bool
    forced: bool
    policy: bool
    # the policy carries the current expression (its mark: POLICY_MARKS); False without a policy
    policy_current: bool = False


@dataclass(frozen=True)
class _Catalog:
    schema: str
    tables: dict[str, RlsTableState]
    function: bool
    index: str  # THREAD_TENANT_INDEX: "valid", "invalid" (a failed concurrent build) or "missing"


def _read_catalog(conn: Connection) -> _Catalog:
    from sqlalchemy import text

    schema = str(conn.execute(text("SELECT current_schema()")).scalar())
    rows = conn.execute(
        text(
            "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity, p.oid IS NOT NULL, "
            "obj_description(p.oid, 'pg_policy') "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "LEFT JOIN pg_policy p ON p.polrelid = c.oid AND p.polname = :policy "
            "WHERE n.nspname = :schema AND c.relkind IN ('r', 'p') "
            "AND c.relname LIKE 'agent\\_%'"
        ),
        {"policy": POLICY_NAME, "schema": schema},
    ).all()
    live = {str(r[0]): (bool(r[1]), bool(r[2]), bool(r[3]), r[4]) for r in rows}
    tables: dict[str, RlsTableState] = {}
    for name in sorted(set(live) | set(PROTECTED_TABLES)):
        enabled, forced, policy, mark = live.get(name, (False, False, False, None))
        tables[name] = RlsTableState(
            table=name,
            protected=name in POLICY_EXPRESSIONS,
            exists=name in live,
            enabled=enabled,
            forced=forced,
            policy=policy,
            policy_current=policy and mark is not None and mark == POLICY_MARKS.get(name),
        )
    function = bool(
        conn.execute(
            text(
                "SELECT EXISTS (SELECT 1 FROM pg_proc f JOIN pg_namespace n "
                "ON n.oid = f.pronamespace WHERE f.proname = :name AND n.nspname = :schema)"
            ),
            {"name": RUN_ABSENT_FUNCTION, "schema": schema},
        ).scalar()
    )
    valid = conn.execute(
        text(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relname = :name AND n.nspname = :schema"
        ),
        {"name": THREAD_TENANT_INDEX, "schema": schema},
    ).scalar()
    index = "missing" if valid is None else "valid" if valid else "invalid"
    return _Catalog(schema, tables, function, index)


def _role_kind(conn: Connection, role: str | None = None) -> tuple[str, str]:
    """(role name, kind): ``superuser`` and ``bypassrls`` bypass the policies; ``subject``
    roles (the owner too: the policies are forced) see only their tenant's rows."""
    from sqlalchemy import text

    row = conn.execute(
        text(
            "SELECT rolname, rolsuper, rolbypassrls FROM pg_roles "
            "WHERE rolname = coalesce(:role, current_user)"
        ),
        {"role": role},
    ).first()
    if row is None:
        return (role or "", "missing")
    kind = "superuser" if row[1] else "bypassrls" if row[2] else "subject"
    return (str(row[0]), kind)


# --- status -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RlsStatus:
    """What ``agora db rls status`` reports."""

    role: str
    role_kind: str  # superuser | bypassrls | subject
    tenant: str | None  # agora.tenant in this session (None: unset or empty)
    enabled: bool  # every protected table enabled, forced and with its policy
    partial: bool  # some but not all of it
    function: bool
    tables: list[RlsTableState]
    thread_tenant_index: str = "missing"  # THREAD_TENANT_INDEX: valid | invalid | missing
    # protected tables whose policy is not the current expression (an older agora's: `enable`
    # upgrades it)
    outdated: list[str] = field(default_factory=list)

    @property
    def bypasses_rls(self) -> bool:
        return self.role_kind in ("superuser", "bypassrls")


def rls_status(conn: Connection) -> RlsStatus:
    """Row-level security on every agent table, and which kind of role is connected."""
    from sqlalchemy import text

    _require_postgresql(conn)
    cat = _read_catalog(conn)
    role, kind = _role_kind(conn)
    tenant = conn.execute(text(f"SELECT {_TENANT}")).scalar()
    protected = [s for s in cat.tables.values() if s.protected]
    complete = [s for s in protected if s.exists and s.enabled and s.forced and s.policy]
    touched = [s for s in protected if s.enabled or s.forced or s.policy]
    return RlsStatus(
        role=role,
        role_kind=kind,
        tenant=None if tenant is None else str(tenant),
        enabled=len(complete) == len(protected) and cat.function,
        partial=bool(touched) and len(complete) < len(protected),
        function=cat.function,
        tables=list(cat.tables.values()),
        thread_tenant_index=cat.index,
        outdated=[s.table for s in protected if s.policy and not s.policy_current],
    )


def policy_problems(bind: Engine | Connection) -> list[Problem]:
    """``missing_policy`` problems for ``db check``: once row-level security is enabled on any
    agent table, every protected table must have it enabled, forced and with its policy.

    Nothing on MySQL/SQLite, nor on a PostgreSQL database where RLS was never enabled.
    """
    from sqlalchemy.engine import Engine

    from agora_cli.store.provision import Problem

    if dialect_name(bind) != "postgresql":
        return []
    if isinstance(bind, Engine):
        with bind.connect() as conn:
            cat = _read_catalog(conn)
            conn.rollback()
    else:
        cat = _read_catalog(bind)
    states = [s for s in cat.tables.values() if s.exists]
    if not any(s.enabled for s in states):
        return []
    problems: list[Problem] = []
    for s in states:
        if not s.protected:
            continue
        missing = [
            what
            for what, ok in (
                ("row-level security is not enabled", s.enabled),
                ("row-level security is not forced", s.forced),
                (f"policy {POLICY_NAME} is missing", s.policy),
            )
            if not ok
        ]
        if s.policy and not s.policy_current:
            missing.append(
                f"policy {POLICY_NAME} is outdated (not the expression this agora installs)"
            )
        if missing:
            problems.append(
                Problem(
                    "missing_policy",
                    s.table,
                    f"{s.table}: {', '.join(missing)} (row-level security is enabled on agent "
                    "tables; `agora db rls enable` repairs it)",
                )
            )
    if not cat.function and any(s.table == "agent_stream_frame" and s.policy for s in states):
        problems.append(
            Problem(
                "missing_policy",
                "agent_stream_frame",
                f"function {RUN_ABSENT_FUNCTION} used by the frames' policy is missing",
            )
        )
    return problems


# --- enable / disable -------------------------------------------------------------------------


@dataclass(frozen=True)
class RlsPlan:
    """What ``enable_rls`` / ``disable_rls`` ran (or, dry, would run)."""

    action: str  # enable | disable
    app_role: str | None
    role_created: bool
    role_dropped: bool
    dry_run: bool
    sql: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.sql)


def _function_sql(conn: Connection, schema: str) -> str:
    q = _quote(conn, schema)
    return (
        f"CREATE OR REPLACE FUNCTION {q}.{RUN_ABSENT_FUNCTION}(p_run_id text) RETURNS boolean "
        f"LANGUAGE sql STABLE SECURITY DEFINER SET search_path = {q}, pg_temp AS $$ "
        "SELECT NOT EXISTS (SELECT 1 FROM agent_run WHERE id = p_run_id) "
        "AND EXISTS (SELECT 1 FROM pg_roles WHERE rolname = current_user "
        "AND (rolsuper OR rolbypassrls)) $$"
    )


def _privileges(conn: Connection, role: str, tables: list[str]) -> dict[str, set[str]]:
    """The DML privileges ``role`` holds on each of ``tables`` (schema-qualified by search_path)."""
    from sqlalchemy import text

    rows = conn.execute(
        text(
            "SELECT t, p FROM unnest(CAST(:tables AS text[])) t, unnest(CAST(:privs AS text[])) p "
            "WHERE has_table_privilege(:role, quote_ident(t), p)"
        ),
        {"tables": tables, "privs": list(_DML), "role": role},
    ).all()
    held: dict[str, set[str]] = {t: set() for t in tables}
    for t, p in rows:
        held[str(t)].add(str(p))
    return held


def _grant_sql(conn: Connection, role: str, cat: _Catalog, *, revoke: bool) -> list[str]:
    from sqlalchemy import text

    from agora_cli.store.schema import metadata

    agent = sorted(t.name for t in metadata.sorted_tables if cat.tables.get(t.name, None))
    agent = [t for t in agent if cat.tables[t].exists]
    held = _privileges(conn, role, agent)
    qrole = _quote(conn, role)
    statements: list[str] = []
    has_usage = bool(
        conn.execute(
            text("SELECT has_schema_privilege(:role, :schema, 'USAGE')"),
            {"role": role, "schema": cat.schema},
        ).scalar()
    )
    for table in agent:
        want = {"SELECT"} if table in READ_ONLY_TABLES else set(_DML)
        qt = _quote(conn, table)
        if revoke:
            if held[table]:
                statements.append(f"REVOKE ALL ON {qt} FROM {qrole}")
        else:
            if not want <= held[table]:
                privs = ", ".join(p for p in _DML if p in want)
                statements.append(f"GRANT {privs} ON {qt} TO {qrole}")
            if held[table] - want:  # an older agora's grant (the fold's tables)
                extra = ", ".join(p for p in _DML if p in held[table] - want)
                statements.append(f"REVOKE {extra} ON {qt} FROM {qrole}")
    if not revoke and not has_usage:
        statements.insert(0, f"GRANT USAGE ON SCHEMA {_quote(conn, cat.schema)} TO {qrole}")
    return statements


def _run(engine: Engine, build: Any, *, dry_run: bool, lock_timeout_s: float) -> RlsPlan:
    from sqlalchemy import text

    _require_postgresql(engine)
    with engine.connect() as conn:
        plan: RlsPlan = build(conn)
        conn.rollback()  # a concurrent index build waits for every open snapshot: ours too
    if dry_run or not plan.sql:
        return plan
    ms = {"ms": f"{int(lock_timeout_s * 1000)}ms"}
    online = [s for s in plan.sql if _ONLINE in s]
    before = online if plan.action == "enable" else []
    after = [] if plan.action == "enable" else online
    _run_online(engine, before, ms)
    with engine.connect() as conn:
        # The catalog read again, inside the transaction that applies what it found missing.
        again: RlsPlan = build(conn)
        applied = [s for s in again.sql if _ONLINE not in s]
        if applied:
            conn.execute(text("SELECT set_config('lock_timeout', :ms, true)"), ms)
            for statement in applied:
                conn.exec_driver_sql(statement)
        conn.commit()
    _run_online(engine, after, ms)
    return replace(again, sql=before + applied + after)


def _run_online(engine: Engine, statements: list[str], ms: dict[str, str]) -> None:
    """Index builds and drops ``CONCURRENTLY``: in autocommit, writers go on meanwhile.

    ``lock_timeout`` bounds the wait for older transactions; a build that fails leaves an
    invalid index, which the next ``enable`` drops and builds again.
    """
    from sqlalchemy import text

    if not statements:
        return
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("SELECT set_config('lock_timeout', :ms, false)"), ms)
        for statement in statements:
            conn.exec_driver_sql(statement)


def enable_rls(
    engine: Engine,
    *,
    app_role: str | None = None,
    dry_run: bool = False,
    lock_timeout_s: float = 10.0,
) -> RlsPlan:
    """Enable and force row-level security with its policies, idempotently, in one transaction.

    Only what is missing is created and outdated policies (another mark: an older agora's) are
    replaced in place (an already enabled, current schema runs nothing). With ``app_role``,
    the role is created if missing (``NOLOGIN NOBYPASSRLS``) and granted the runtime's DML on
    the agent tables (SELECT only on prices, budgets and tenant keys); a role that bypasses RLS
    is refused. ``dry_run`` returns the statements and runs none.
    """
    if app_role is not None:
        _check_role_name(app_role)

    def build(conn: Connection) -> RlsPlan:
        cat = _read_catalog(conn)
        missing = [t for t in PROTECTED_TABLES if not cat.tables[t].exists]
        if missing:
            raise SchemaDrift(
                f"the agent schema lacks {', '.join(missing)}: run `agora db provision` first"
            )
        sql: list[str] = []
        notes: list[str] = []
        index = f"{_quote(conn, cat.schema)}.{_quote(conn, THREAD_TENANT_INDEX)}"
        if cat.index == "invalid":
            sql.append(f"DROP INDEX {_ONLINE} IF EXISTS {index}")
        if cat.index != "valid":
            sql.append(
                f"CREATE INDEX {_ONLINE} IF NOT EXISTS {_quote(conn, THREAD_TENANT_INDEX)} "
                f"ON {_quote(conn, 'agent_token_usage')} (thread_id, tenant_ref)"
            )
        if not cat.function:
            sql.append(_function_sql(conn, cat.schema))
        for table in PROTECTED_TABLES:
            state = cat.tables[table]
            qt = _quote(conn, table)
            if not state.enabled:
                sql.append(f"ALTER TABLE {qt} ENABLE ROW LEVEL SECURITY")
            if not state.forced:
                sql.append(f"ALTER TABLE {qt} FORCE ROW LEVEL SECURITY")
            expr = POLICY_EXPRESSIONS[table]
            if not state.policy:
                sql.append(
                    f"CREATE POLICY {POLICY_NAME} ON {qt} AS PERMISSIVE FOR ALL "
                    f"USING ({expr}) WITH CHECK ({expr})"
                )
            elif not state.policy_current:  # an older agora's expression: replaced in place
                sql.append(f"ALTER POLICY {POLICY_NAME} ON {qt} USING ({expr}) WITH CHECK ({expr})")
            if not state.policy_current:
                sql.append(f"COMMENT ON POLICY {POLICY_NAME} ON {qt} IS '{POLICY_MARKS[table]}'")
        created = False
        if app_role is not None:
            _, kind = _role_kind(conn, app_role)
            if kind == "missing":
                created = True
                sql.append(f"CREATE ROLE {_quote(conn, app_role)} NOLOGIN NOBYPASSRLS")
                sql += _grant_sql_for_new_role(conn, app_role, cat)
            elif kind != "subject":
                raise InvalidInput(
                    f"role {app_role!r} is a {kind} role and bypasses row-level security: "
                    "the app role must not (choose another name)",
                    param="app_role",
                )
            else:
                sql += _grant_sql(conn, app_role, cat, revoke=False)
        _, me = _role_kind(conn)
        if me == "subject":
            notes.append(
                "the connected role does not bypass row-level security: run cross-tenant "
                "reports as a superuser or a BYPASSRLS role, and note that frames of runs "
                "without a run row are then visible to no one but such roles"
            )
        return RlsPlan("enable", app_role, created, False, dry_run, sql, notes)

    return _run(engine, build, dry_run=dry_run, lock_timeout_s=lock_timeout_s)


def _grant_sql_for_new_role(conn: Connection, role: str, cat: _Catalog) -> list[str]:
    from agora_cli.store.schema import metadata

    qrole = _quote(conn, role)
    names = [t.name for t in metadata.sorted_tables if cat.tables.get(t.name)]
    names = [t for t in names if cat.tables[t].exists]
    rw = [_quote(conn, t) for t in names if t not in READ_ONLY_TABLES]
    ro = [_quote(conn, t) for t in names if t in READ_ONLY_TABLES]
    sql = [f"GRANT USAGE ON SCHEMA {_quote(conn, cat.schema)} TO {qrole}"]
    if rw:
        sql.append(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {', '.join(rw)} TO {qrole}")
    if ro:
        sql.append(f"GRANT SELECT ON {', '.join(ro)} TO {qrole}")
    return sql


def disable_rls(
    engine: Engine,
    *,
    app_role: str | None = None,
    drop_role: bool = False,
    dry_run: bool = False,
    lock_timeout_s: float = 10.0,
) -> RlsPlan:
    """Remove exactly what ``enable_rls`` created: policies, forcing, RLS, the helper function.

    With ``app_role``, also revoke the grants on the agent tables (and the schema's USAGE); with
    ``drop_role`` as well, drop the role — refused while it holds privileges or objects in
    another database of the cluster.
    """
    from sqlalchemy import text

    if app_role is not None:
        _check_role_name(app_role)
    if drop_role and app_role is None:
        raise InvalidInput("drop_role needs app_role", param="drop_role")

    def build(conn: Connection) -> RlsPlan:
        cat = _read_catalog(conn)
        sql: list[str] = []
        for table in reversed(PROTECTED_TABLES):
            state = cat.tables[table]
            qt = _quote(conn, table)
            if state.policy:
                sql.append(f"DROP POLICY {POLICY_NAME} ON {qt}")
            if state.forced:
                sql.append(f"ALTER TABLE {qt} NO FORCE ROW LEVEL SECURITY")
            if state.enabled:
                sql.append(f"ALTER TABLE {qt} DISABLE ROW LEVEL SECURITY")
        if cat.function:
            sql.append(f"DROP FUNCTION {_quote(conn, cat.schema)}.{RUN_ABSENT_FUNCTION}(text)")
        dropped = False
        if app_role is not None:
            _, kind = _role_kind(conn, app_role)
            if kind != "missing":
                sql += _grant_sql(conn, app_role, cat, revoke=True)
                if conn.execute(
                    text("SELECT has_schema_privilege(:r, :s, 'USAGE')"),
                    {"r": app_role, "s": cat.schema},
                ).scalar():
                    sql.append(
                        f"REVOKE USAGE ON SCHEMA {_quote(conn, cat.schema)} "
                        f"FROM {_quote(conn, app_role)}"
                    )
                if drop_role:
                    elsewhere = conn.execute(
                        text(
                            "SELECT count(*) FROM pg_shdepend d JOIN pg_roles r "
                            "ON r.oid = d.refobjid AND d.refclassid = 'pg_authid'::regclass "
                            "WHERE r.rolname = :r AND d.dbid <> "
                            "(SELECT oid FROM pg_database WHERE datname = current_database())"
                        ),
                        {"r": app_role},
                    ).scalar()
                    if elsewhere:
                        raise InvalidInput(
                            f"role {app_role!r} holds privileges or objects in another "
                            "database: revoke them there first, or keep the role",
                            param="drop_role",
                        )
                    sql.append(f"DROP ROLE {_quote(conn, app_role)}")
                    dropped = True
        if cat.index != "missing":  # last: it runs after the transaction, in autocommit
            sql.append(
                f"DROP INDEX {_ONLINE} IF EXISTS "
                f"{_quote(conn, cat.schema)}.{_quote(conn, THREAD_TENANT_INDEX)}"
            )
        return RlsPlan("disable", app_role, False, dropped, dry_run, sql, [])

    return _run(engine, build, dry_run=dry_run, lock_timeout_s=lock_timeout_s)


# --- sessions ---------------------------------------------------------------------------------


@contextmanager
def tenant_session(conn: Connection, tenant: str | None) -> Iterator[Connection]:
    """Scope the current transaction of ``conn`` to ``tenant`` (``None`` or ``''``: untenanted).

    Runs ``set_config('agora.tenant', tenant, true)`` — ``SET LOCAL``: it ends with the
    transaction, so a pooled connection never carries it over — beginning the transaction if the
    caller has not, and restores the previous value on leaving the block while the transaction
    is still open. Does nothing on MySQL/MariaDB and SQLite, which have no row-level security.
    """
    from sqlalchemy import text

    if tenant:
        check_identity("tenant", tenant)
    if dialect_name(conn) != "postgresql":
        yield conn
        return
    setter = text(f"SELECT set_config('{TENANT_SETTING}', :t, true)")
    previous = conn.execute(text(f"SELECT coalesce({_SETTING}, '')")).scalar()
    conn.execute(setter, {"t": tenant or ""})
    try:
        yield conn
    finally:
        if conn.in_transaction() and not conn.invalidated:
            conn.execute(setter, {"t": previous or ""})


def install_tenant_setting(engine: Engine, tenant: str) -> None:
    """Make every transaction on ``engine`` begin with ``agora.tenant = tenant`` (SET LOCAL), and
    every autocommit connection carry it (``engine.install_tenant_hook``; PostgreSQL only)."""
    from agora_cli.store.engine import install_tenant_hook

    install_tenant_hook(engine, tenant)


# --- verify -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RlsTableCheck:
    """The isolation test of one table: tenant A against tenant B's rows."""

    table: str
    sees_own: bool
    hides_other: bool
    update_blocked: bool
    delete_blocked: bool
    insert_blocked: bool
    detail: str | None = None
    # Tables whose NULL tenant_ref means the thread's tenant (THREADS_TENANT_TABLES): a row with
    # no tenant_ref on A's thread is visible to A, hidden from B and from untenanted sessions,
    # and neither B nor an untenanted session can insert one on A's thread. None elsewhere.
    thread_tenant: bool | None = None

    @property
    def ok(self) -> bool:
        return (
            self.sees_own
            and self.hides_other
            and self.update_blocked
            and self.delete_blocked
            and self.insert_blocked
            and self.thread_tenant is not False
        )


@dataclass(frozen=True)
class RlsVerifyReport:
    """What ``verify_isolation`` found; ``ok`` when every table kept the tenants apart."""

    role: str
    temporary_role: bool
    tables: list[RlsTableCheck]

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.tables)

    @property
    def failed(self) -> list[str]:
        return [t.table for t in self.tables if not t.ok]


# table -> (column to its parent, parent table) for the fixture rows; `tenant_column` below
_PARENT: dict[str, tuple[str, str]] = {
    "agent_message": ("thread_id", "agent_thread"),
    "agent_genui_call": ("thread_id", "agent_thread"),
    "agent_confirm_token": ("thread_id", "agent_thread"),
    "agent_queued_message": ("thread_id", "agent_thread"),
    "agent_token_usage": ("thread_id", "agent_thread"),
    "agent_run": ("thread_id", "agent_thread"),
    "agent_action_proposal": ("thread_id", "agent_thread"),
    "agent_tool_call": ("message_id", "agent_message"),
    "agent_stream_frame": ("run_id", "agent_run"),
}
_TENANT_COLUMN = {"agent_usage_daily": "tenant_key", "agent_tenant_key": "tenant_key"}


def _fixture_row(
    table: Table, tag: str, tenant: str, parents: dict[str, dict[str, Any]], n: int
) -> dict[str, Any]:
    """A valid row of ``table`` for ``tenant``: every NOT NULL column without a default filled."""
    from sqlalchemy import BigInteger, Double, Integer

    row: dict[str, Any] = {}
    for column in table.columns:
        if column.nullable and not column.primary_key:
            continue
        if column.server_default is not None and not column.primary_key:
            continue
        if isinstance(column.type, Integer | BigInteger):
            row[column.name] = n
        elif isinstance(column.type, Double):
            row[column.name] = 0.0
        else:
            row[column.name] = f"{tag}-{table.name}-{column.name}-{n}"
    if "tenant_ref" in table.columns:
        row["tenant_ref"] = tenant
    if table.name in _TENANT_COLUMN:
        row[_TENANT_COLUMN[table.name]] = tenant
    link = _PARENT.get(table.name)
    if link is not None:
        row[link[0]] = parents[link[1]]["id"]
    return row


def _pk_where(table: Table, row: dict[str, Any]) -> Any:
    from sqlalchemy import and_

    return and_(*(c == row[c.name] for c in table.primary_key.columns))


def verify_isolation(engine: Engine, *, app_role: str | None = None) -> RlsVerifyReport:
    """The per-table isolation test; runnable against production, nothing it writes survives.

    In one transaction that is rolled back: rows for two throw-away tenants A and B in every
    protected table, written as the connected role (each under its own ``agora.tenant``); then
    ``SET LOCAL ROLE`` to ``app_role`` — or, without one, to a throw-away ``NOBYPASSRLS`` role
    created in the same transaction with the runtime's grants — and, as tenant A, for every
    table: A sees its row and none of B's, cannot update or delete B's, cannot insert a row for
    B. Each probe runs in a savepoint, so one table's failure cannot disturb the next.
    """
    from sqlalchemy import text

    from agora_cli.store.schema import metadata

    _require_postgresql(engine)
    if app_role is not None:
        _check_role_name(app_role)
    tag = f"agora-verify-{secrets.token_hex(4)}"
    tenants = {"a": f"{tag}-a", "b": f"{tag}-b"}
    setter = text(f"SELECT set_config('{TENANT_SETTING}', :t, true)")
    checks: list[RlsTableCheck] = []
    with engine.connect() as conn:
        try:
            cat = _read_catalog(conn)
            missing = [t for t in PROTECTED_TABLES if not cat.tables[t].exists]
            if missing:
                raise SchemaDrift(
                    f"the agent schema lacks {', '.join(missing)}: run `agora db provision` first"
                )
            temporary = app_role is None
            role = app_role or f"agora_verify_{secrets.token_hex(6)}"
            if temporary:
                conn.exec_driver_sql(f"CREATE ROLE {_quote(conn, role)} NOLOGIN NOBYPASSRLS")
                for statement in _grant_sql_for_new_role(conn, role, cat):
                    conn.exec_driver_sql(statement)
                _, me = _role_kind(conn)
                if me != "superuser":
                    conn.exec_driver_sql(f"GRANT {_quote(conn, role)} TO CURRENT_USER")
            else:
                _, kind = _role_kind(conn, role)
                if kind == "missing":
                    raise InvalidInput(f"role {role!r} does not exist", param="app_role")
                if kind != "subject":
                    raise InvalidInput(
                        f"role {role!r} is a {kind} role: it bypasses row-level security, so "
                        "the test would prove nothing",
                        param="app_role",
                    )
            tables = {t.name: t for t in metadata.sorted_tables}
            rows: dict[str, dict[str, dict[str, Any]]] = {"a": {}, "b": {}}
            for key, tenant in tenants.items():
                conn.execute(setter, {"t": tenant})
                for n, name in enumerate(PROTECTED_TABLES, start=1):  # parents first
                    table = tables[name]
                    row = _fixture_row(table, f"{tag}-{key}", tenant, rows[key], n)
                    conn.execute(table.insert().values(**row))
                    rows[key][table.name] = row
            # The intruder's rows for B: a fresh key, B's tenant and B's parents.
            intruders = {
                name: _fixture_row(tables[name], f"{tag}-x", tenants["b"], rows["b"], 10_000 + n)
                for n, name in enumerate(PROTECTED_TABLES)
            }
            # Rows with no tenant_ref on A's thread (as the upstream runtime writes its ledger),
            # written as A; and the same shape with a fresh key for the intruders to try.
            conn.execute(setter, {"t": tenants["a"]})
            unowned: dict[str, dict[str, Any] | str] = {}
            for n, name in enumerate(THREADS_TENANT_TABLES):
                row = _fixture_row(tables[name], f"{tag}-n", tenants["a"], rows["a"], 20_000 + n)
                row["tenant_ref"] = None
                unowned[name] = _insert_or_why(conn, tables[name], row)
            conn.exec_driver_sql(f"SET LOCAL ROLE {_quote(conn, role)}")
            for name in PROTECTED_TABLES:
                check = _check_table(
                    conn, tables[name], rows["a"][name], rows["b"][name], intruders[name]
                )
                if name in unowned:
                    check = _check_threads_tenant(conn, tables[name], check, unowned[name], tenants)
                checks.append(check)
        finally:
            conn.rollback()
    return RlsVerifyReport(role=role, temporary_role=temporary, tables=checks)


def _check_table(
    conn: Connection,
    table: Table,
    own: dict[str, Any],
    other: dict[str, Any],
    intruder: dict[str, Any],
) -> RlsTableCheck:
    """As tenant A under the app role: the five probes on one table, each in a savepoint."""
    from sqlalchemy import func, select, update
    from sqlalchemy.exc import DBAPIError

    count = select(func.count()).select_from(table)
    first = next(c for c in table.columns if not c.primary_key)
    probes: dict[str, Any] = {
        "sees_own": lambda: conn.execute(count.where(_pk_where(table, own))).scalar() == 1,
        "hides_other": lambda: conn.execute(count.where(_pk_where(table, other))).scalar() == 0,
        "update_blocked": lambda: (
            conn.execute(
                update(table).where(_pk_where(table, other)).values({first.name: first})
            ).rowcount
            == 0
        ),
        "delete_blocked": lambda: (
            conn.execute(table.delete().where(_pk_where(table, other))).rowcount == 0
        ),
        "insert_blocked": lambda: not conn.execute(table.insert().values(**intruder)).rowcount,
    }
    failures = {
        "sees_own": "tenant A cannot see its own row",
        "hides_other": "tenant A sees tenant B's row",
        "update_blocked": "tenant A updated tenant B's row",
        "delete_blocked": "tenant A deleted tenant B's row",
        "insert_blocked": "tenant A inserted a row for tenant B",
    }
    results: dict[str, bool] = {}
    details: list[str] = []
    for what, fn in probes.items():
        savepoint = conn.begin_nested()
        try:
            results[what] = bool(fn())
            if not results[what]:
                details.append(failures[what])
        except DBAPIError as exc:
            # The errors that are a pass: the policy refusing B's row on insert, and a write
            # to a table the runtime may only read (tenant keys) refused for want of the grant.
            results[what] = (what == "insert_blocked" and _is_rls_violation(exc)) or (
                table.name in READ_ONLY_TABLES
                and what.endswith("_blocked")
                and getattr(getattr(exc, "orig", exc), "sqlstate", None) == "42501"
            )
            if not results[what]:
                details.append(f"{what}: {_first_line(exc)}")
        finally:
            savepoint.rollback()
    return RlsTableCheck(table.name, **results, detail="; ".join(details) or None)


def _insert_or_why(conn: Connection, table: Table, row: dict[str, Any]) -> dict[str, Any] | str:
    """Insert ``row`` in a savepoint: the row, or why it could not be written."""
    from sqlalchemy.exc import DBAPIError

    savepoint = conn.begin_nested()
    try:
        conn.execute(table.insert().values(**row))
    except DBAPIError as exc:
        savepoint.rollback()
        return _first_line(exc)
    savepoint.commit()
    return row


def _check_threads_tenant(
    conn: Connection,
    table: Table,
    check: RlsTableCheck,
    row: dict[str, Any] | str,
    tenants: dict[str, str],
) -> RlsTableCheck:
    """As the app role: a row with no tenant_ref on A's thread is A's, and only A's."""
    from sqlalchemy import func, select, text
    from sqlalchemy.exc import DBAPIError

    details = [check.detail] if check.detail else []
    if isinstance(row, str):
        details.append(f"tenant A could not write a row with no tenant_ref on its thread: {row}")
        return replace(check, thread_tenant=False, detail="; ".join(details))
    setter = text(f"SELECT set_config('{TENANT_SETTING}', :t, true)")
    count = select(func.count()).select_from(table).where(_pk_where(table, row))
    # the same row with a fresh key, tried by B and by an untenanted session
    key = next(iter(table.primary_key.columns)).name
    intruder = {**row, key: f"{row[key]}-x"}
    insert = table.insert().values(**intruder)
    none = "row with no tenant_ref"
    probes: list[tuple[str, Any, str]] = [  # (agora.tenant, the probe, what its failure means)
        (tenants["a"], lambda: conn.execute(count).scalar() == 1, f"A cannot see its {none}"),
        (tenants["b"], lambda: conn.execute(count).scalar() == 0, f"B sees A's {none}"),
        ("", lambda: conn.execute(count).scalar() == 0, f"an untenanted session sees A's {none}"),
        (
            tenants["b"],
            lambda: not conn.execute(insert).rowcount,
            f"B inserted a {none} on A's thread",
        ),
        (
            "",
            lambda: not conn.execute(insert).rowcount,
            f"an untenanted session inserted a {none} on A's thread",
        ),
    ]
    ok = True
    for tenant, probe, failure in probes:
        savepoint = conn.begin_nested()  # its rollback restores A's setting too
        why: str | None = None
        try:
            conn.execute(setter, {"t": tenant})
            if not probe():
                why = failure
        except DBAPIError as exc:
            if not (" inserted " in failure and _is_rls_violation(exc)):
                why = f"could not check whether {failure}: {_first_line(exc)}"
        finally:
            savepoint.rollback()
        if why is not None:
            ok = False
            details.append(why)
    return replace(check, thread_tenant=ok, detail="; ".join(details) or None)


def _is_rls_violation(exc: Any) -> bool:
    orig = getattr(exc, "orig", exc)
    return getattr(orig, "sqlstate", None) == "42501" and "row-level security" in str(orig)


def _first_line(exc: Any) -> str:
    from agora_cli.store.masking import scrub

    text = str(getattr(exc, "orig", exc)).strip()
    return scrub(text.splitlines()[0] if text else type(exc).__name__)
