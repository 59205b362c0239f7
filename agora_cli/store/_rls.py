"""Row-level security on PostgreSQL: tenants kept apart by the database itself.

``enable_rls`` enables and *forces* row-level security on every agent table that holds tenant
data, with one policy per table named ``agent_tenant_isolation`` (tenancy.md, docs/tenancy.md),
``USING`` (what a session sees, updates, deletes) and ``WITH CHECK`` (what it may write):

- threads: a row is visible and writable when ``tenant_ref`` equals the session setting
  ``agora.tenant``; untenanted rows (``tenant_ref`` NULL) only while the setting is unset or
  empty. The daily fold of the ledger and the tenants' keys follow the same rule on their
  ``tenant_key`` (``''`` is untenanted);
- token usage, runs and action proposals: visible on their own ``tenant_ref``, or, NULL (the
  upstream runtime writes its ledger rows so), when their thread is visible: an ``EXISTS`` on
  ``agent_thread`` under the thread's own policy. Queued messages: their own ``tenant_ref`` (or
  NULL) and their thread;
- tables without ``tenant_ref`` follow their parent, through an ``EXISTS`` on the parent table,
  whose own policy applies inside it: messages, generated-UI calls and confirmation tokens through
  their thread, tool calls through their message;
- the operator's acts on proposals (revision 0009): their own ``tenant_ref`` (the proposal's),
  else (NULL) their proposal's, through an ``EXISTS`` on ``agent_action_proposal``;
- stream frames (revision 0007 gave them ``tenant_ref``, filled by the frame writer from the
  run): their own tenant, else (NULL) their run's. A frame whose run is gone is visible to no
  session of the app role, whatever its tenant setting (issue 24, finding 5).

**A child row carries its parent's tenant (issue 24, finding 1).** ``WITH CHECK`` of every table
with a parent (thread, run, message) requires the parent to be visible under its own policy, and
the row's ``tenant_ref`` to be the session's or NULL: a session cannot write a row naming its own
tenant on another tenant's thread. Chosen over a composite foreign key ``(thread_id,
tenant_ref)``: the upstream runtime writes children with a NULL ``tenant_ref``, which a
composite key does not check at all (``MATCH SIMPLE``), nor can it match an untenanted thread
(NULL); it would also need unique ``(id, tenant_ref)`` indexes on every parent, a ``tenant_ref``
on messages and tool calls, and the same change on MySQL and SQLite, which have no row-level
security to need it. The ``EXISTS`` is checked before any foreign key: a parent of another tenant
and a parent that does not exist fail alike, with the policy's error.

**Tables from the live catalog (finding 8).** Every table of the schema with a tenant column
(``tenant_ref``, ``tenant_key``) or a foreign key (transitively) to such a table must be
protected or declared shared (``SHARED_TABLES``, each with its reason): a table added later
shows as unprotected in ``status``, ``db check`` and ``verify``.

**Policies compared by their expressions.** Each policy carries a comment: a mark (a hash of the
expressions this agora installs) and the md5 of its expressions as PostgreSQL deparsed them when
``enable`` installed them (``pg_policies.qual`` and ``with_check``: PostgreSQL's own normal
form). ``status`` and ``db check`` compare both with the live policy: an older agora's policy, or
one edited by hand that keeps its comment (``ALTER POLICY … USING (true)``), is outdated, and
``enable`` replaces its expressions in place (``ALTER POLICY``).

**The app role (finding 4).** ``enable``/``verify`` refuse an app role that could switch the
policies off: a superuser or ``BYPASSRLS`` role, the owner of an agent table or a member of the
owning role, a role with ``CREATE`` on the schema, and ``PUBLIC``. It may only read prices,
budgets, tenant keys and the fold's tables (the fold is privileged: finding 6, which ``verify``
flags when re-granted by hand).

``enable`` also builds ``agent_token_usage_thread_tenant_idx (thread_id, tenant_ref)`` — an
extra index (schema.md allows them), built ``CONCURRENTLY`` before the policies' transaction so
that ledger writes go on meanwhile: under the policy a thread's ledger read is an equality on
both columns, and without it PostgreSQL merges the thread index with the tenant's whole range
(``threads show`` of 500 messages: 1.62× with RLS on; 1.1× with the index). ``disable`` drops it.
The tenant comparisons are plain equalities on a STABLE expression, so the tenant indexes stay
usable. No ``SECURITY DEFINER`` helper is left: the frames' old ``agent_rls_run_absent``
(executable by everyone, answering for every tenant's runs) is dropped by ``enable``.

``tenant_session(conn, tenant)`` and ``open_engine(..., tenant=…)`` / ``AGORA_TENANT`` set
``agora.tenant`` per transaction (``set_config(…, true)``, i.e. ``SET LOCAL``).
``verify_isolation`` is the per-table isolation test, everything it writes rolled back.
MySQL/MariaDB and SQLite have no row-level security: the commands refuse there
(``RlsUnsupported``); ``tenant_session`` does nothing there.

Every statement this module and ``rls_verify.py`` run — catalog reads, settings, and the DDL
templates — is named once in ``rls_sql.py``; the policies' expressions are built here.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.engine import Engine

from agora_cli.store import _rls_sql as sql
from agora_cli.store._dialects import dialect_of
from agora_cli.store._errors import InvalidInput, SchemaDrift
from agora_cli.store._problems import Problem
from agora_cli.store._schema import metadata
from agora_cli.store._tenant_session import SETTING_SQL, TENANT_SQL, transaction_tenant

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection


__all__ = [
    "POLICY_NAME",
    "PROTECTED_TABLES",
    "SHARED_TABLES",
    "RlsPlan",
    "RlsStatus",
    "RlsTableState",
    "disable_rls",
    "enable_rls",
    "policy_problems",
    "rls_status",
]

POLICY_NAME = "agent_tenant_isolation"

_UNSET = f"coalesce({SETTING_SQL}, '') = ''"


def _direct(column: str = "tenant_ref") -> str:
    # Two plain branches rather than one CASE or IS NOT DISTINCT FROM: `tenant_ref = <stable>`
    # is an index condition, so the tenant indexes stay usable under the policy.
    return f"({column} = {TENANT_SQL} OR ({column} IS NULL AND {_UNSET}))"


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
        f"(tenant_ref = {TENANT_SQL} OR "
        f"(tenant_ref IS NULL AND {_through(table, 'thread_id', 'agent_thread')}))"
    )


def _own_on_parent(table: str, column: str = "thread_id", parent: str = "agent_thread") -> str:
    # WITH CHECK of a row that has a tenant_ref and a parent (issue 24, finding 1): the row's
    # tenant is the session's (or NULL: the parent's) AND its parent is visible under the
    # parent's own policy. A parent of another tenant and a parent that does not exist fail
    # alike, with the policy's error, before any foreign key is checked: the error does not tell
    # whether another tenant's thread exists.
    return (
        f"((tenant_ref = {TENANT_SQL} OR tenant_ref IS NULL) AND {_through(table, column, parent)})"
    )


# table -> (USING, WITH CHECK), parents before children. USING says which rows a session sees
# (and may update or delete); WITH CHECK which rows it may write: a child row only on a parent
# the session sees, so a child always carries its parent's tenant.
POLICIES: dict[str, tuple[str, str]] = {
    "agent_thread": (_direct(), _direct()),
    "agent_token_usage": (
        _own_or_threads("agent_token_usage"),
        _own_on_parent("agent_token_usage"),
    ),
    "agent_run": (_own_or_threads("agent_run"), _own_on_parent("agent_run")),
    "agent_queued_message": (
        _own_on_parent("agent_queued_message"),
        _own_on_parent("agent_queued_message"),
    ),
    "agent_action_proposal": (
        _own_or_threads("agent_action_proposal"),
        # The idempotency key is unique per tenant_key (revision 0008): a row must carry its own
        # tenant's, or a raw insert under another tenant's would learn from the duplicate-key
        # error whether that tenant uses a key. RLS checks run before unique indexes.
        f"({_own_on_parent('agent_action_proposal')} AND tenant_key = coalesce(tenant_ref, ''))",
    ),
    # The operator's acts on a proposal (revision 0009): their own tenant (the proposal's), else
    # (NULL) their proposal's, under the proposal's own policy; written only on a proposal the
    # session sees.
    "agent_action_proposal_event": (
        f"(tenant_ref = {TENANT_SQL} OR (tenant_ref IS NULL AND "
        f"{_through('agent_action_proposal_event', 'proposal_id', 'agent_action_proposal')}))",
        _own_on_parent("agent_action_proposal_event", "proposal_id", "agent_action_proposal"),
    ),
    "agent_usage_daily": (
        f"(tenant_key = coalesce({SETTING_SQL}, ''))",
        f"(tenant_key = coalesce({SETTING_SQL}, ''))",
    ),
    "agent_tenant_key": (
        f"(tenant_key = coalesce({SETTING_SQL}, ''))",
        f"(tenant_key = coalesce({SETTING_SQL}, ''))",
    ),
    "agent_message": (
        _through("agent_message", "thread_id", "agent_thread"),
        _through("agent_message", "thread_id", "agent_thread"),
    ),
    "agent_genui_call": (
        _through("agent_genui_call", "thread_id", "agent_thread"),
        _through("agent_genui_call", "thread_id", "agent_thread"),
    ),
    "agent_confirm_token": (
        _through("agent_confirm_token", "thread_id", "agent_thread"),
        _through("agent_confirm_token", "thread_id", "agent_thread"),
    ),
    "agent_tool_call": (
        _through("agent_tool_call", "message_id", "agent_message"),
        _through("agent_tool_call", "message_id", "agent_message"),
    ),
    # A frame's own tenant (revision 0007: the frame writer fills it from its run), else (NULL:
    # written before 0007, or by the runtime) its run's. A frame whose run is gone is visible to
    # no session of the app role: only roles that bypass row-level security (the owner, who
    # purges) see it. It is written only on a run the session sees.
    "agent_stream_frame": (
        f"(tenant_ref = {TENANT_SQL} OR (tenant_ref IS NULL AND "
        f"{_through('agent_stream_frame', 'run_id', 'agent_run')}))",
        _own_on_parent("agent_stream_frame", "run_id", "agent_run"),
    ),
}
PROTECTED_TABLES: tuple[str, ...] = tuple(POLICIES)

# Tables found in the catalog that hold no tenant's rows, each with the reason: `status`,
# `check` and `verify` accept them unprotected. Every other table with a tenant column
# (tenant_ref, tenant_key) or a foreign key to such a table must have its policy.
SHARED_TABLES: dict[str, str] = {
    "agent_model_pricing": "prices are the same for every tenant (the runtime only reads them)",
    "agent_channel_state": "the runtime's transport state, keyed by channel, no tenant data",
    "agent_budget": "limits the operator sets; the runtime only reads them",
    "agent_usage_fold": "the fold's list of folded days: no tenant data, written by the fold",
    "agent_usage_model_daily": "the rollup: every tenant summed per model; no grant to the app",
    "agent_document": "the optional shared knowledge base (documents branch)",
    "agent_document_node": "the optional shared knowledge base (documents branch)",
    "agent_rag_chunk": "the optional shared knowledge base (rag branch)",
}
TENANT_COLUMNS = ("tenant_ref", "tenant_key")


def _marker(using: str, check: str) -> str:
    digest = hashlib.sha256(f"{using}\n{check}".encode()).hexdigest()[:16]
    return f"agora {POLICY_NAME} {digest}"


# The policy's comment: its mark (which expressions `enable` installed) and the md5 of the
# expressions as PostgreSQL deparsed them when it installed them (pg_policies.qual and
# with_check: PostgreSQL's own normal form, which differs from our text and by server version).
# `status` and `db check` compare both with the live policy: a policy without the mark (an older
# agora's) or with another, or whose live expressions are not the ones installed (a hand edit
# such as `ALTER POLICY … USING (true)`, which keeps the comment), is outdated, and `enable`
# replaces its expressions in place (ALTER POLICY). The md5: rls_sql.DEPARSED_MD5.
POLICY_MARKS: dict[str, str] = {t: _marker(*e) for t, e in POLICIES.items()}
# Built by `enable` outside its transaction (CONCURRENTLY), dropped by `disable`.
THREAD_TENANT_INDEX = "agent_token_usage_thread_tenant_idx"
# Tables whose rows with no tenant_ref belong to their thread's tenant (_own_or_threads; queued
# messages follow their thread anyway): `verify` probes that case on each.
THREADS_TENANT_TABLES = (
    "agent_token_usage",
    "agent_run",
    "agent_queued_message",
    "agent_action_proposal",
    "agent_action_proposal_event",  # NULL: its proposal's tenant (which may be its thread's)
)
# The fold's tables: written only by the privileged fold (issue 24, finding 6); the app role
# may read them, and `verify` fails when it holds any other privilege on them.
FOLD_TABLES = ("agent_usage_daily", "agent_usage_fold")
# The runtime reads these and never writes them: the app role gets SELECT only.
READ_ONLY_TABLES = frozenset(
    {"agent_model_pricing", "agent_budget", "agent_tenant_key", *FOLD_TABLES}
)
_DML = ("SELECT", "INSERT", "UPDATE", "DELETE")
# Before issue 24 a SECURITY DEFINER helper of the frames' policy; `enable` drops it.
RUN_ABSENT_FUNCTION = "agent_rls_run_absent"


class RlsUnsupported(InvalidInput):
    """Row-level security needs PostgreSQL."""


def _require_postgresql(bind: Engine | Connection) -> None:
    d = dialect_of(bind)
    if not d.has_row_level_security:
        where = d.label
        raise RlsUnsupported(
            f"{where} has no row-level security: isolate tenants by database there "
            "(one database per tenant); `agora db rls` needs PostgreSQL"
        )


def _quote(conn: Connection, name: str) -> str:
    return str(conn.dialect.identifier_preparer.quote_identifier(name))


_ROLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


# Names PostgreSQL reads as something else than a role: PUBLIC is every role (a grant to it is
# a grant to all; issue 25: `--app-role public` passed --dry-run and failed for real).
_RESERVED_ROLES = frozenset({"public", "none", "current_user", "session_user", "current_role"})


def _check_role_name(role: str) -> str:
    if not isinstance(role, str) or not _ROLE_NAME.match(role) or role.lower().startswith("pg_"):
        raise InvalidInput(
            f"app_role {role!r} is not a usable role name (letters, digits and _, at most 63 "
            "characters, not starting with a digit or pg_)",
            param="app_role",
        )
    if role.lower() in _RESERVED_ROLES:
        raise InvalidInput(
            f"app_role {role!r} is a reserved name ({role.upper()} is not one role: a grant to "
            "PUBLIC is a grant to every role); choose another, e.g. agora_app",
            param="app_role",
        )
    return role


# --- catalog ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RlsTableState:
    """One table's row-level security as the catalog describes it."""

    table: str
    protected: bool  # agora installs a policy on it (PROTECTED_TABLES)
    exists: bool
    enabled: bool
    forced: bool
    policy: bool
    # the policy is the one this agora installs, as installed: its mark (POLICY_MARKS) and its
    # live expressions (pg_policies, deparsed) as `enable` left them; False without a policy
    policy_current: bool = False
    # found in the live catalog holding tenant data (a tenant column, or a foreign key to a
    # table that has one) or a protected table
    tenant_data: bool = False
    shared: bool = False  # declared shared (SHARED_TABLES)

    @property
    def unprotected(self) -> bool:
        """Tenant data that agora neither protects nor declares shared (a table added later)."""
        return self.exists and self.tenant_data and not self.protected and not self.shared


@dataclass(frozen=True)
class _Catalog:
    schema: str
    tables: dict[str, RlsTableState]
    function: bool  # RUN_ABSENT_FUNCTION, which `enable` now drops
    index: str  # THREAD_TENANT_INDEX: "valid", "invalid" (a failed concurrent build) or "missing"

    @property
    def unprotected(self) -> list[str]:
        return [s.table for s in self.tables.values() if s.unprotected]


def _tenant_tables(columns: dict[str, set[str]], keys: list[tuple[str, str]]) -> set[str]:
    """The tables holding tenant data: a tenant column, or a foreign key (transitively) to one."""
    found = {t for t, cols in columns.items() if cols & set(TENANT_COLUMNS)} | set(POLICIES)
    while True:
        more = {child for child, parent in keys if parent in found and child not in found}
        if not more:
            return found
        found |= more


def _read_catalog(conn: Connection) -> _Catalog:
    """Every table of the schema (the live catalog, not a fixed list) and its policy."""
    schema = str(conn.execute(text(sql.CURRENT_SCHEMA)).scalar())
    rows = conn.execute(text(sql.TABLES), {"policy": POLICY_NAME, "schema": schema}).all()
    keys = [
        (str(r[0]), str(r[1])) for r in conn.execute(text(sql.FOREIGN_KEYS), {"schema": schema})
    ]
    live = {str(r[0]): (bool(r[1]), bool(r[2]), bool(r[3]), r[4], r[5]) for r in rows}
    tenant = _tenant_tables({str(r[0]): set(r[6]) for r in rows}, keys)
    tables: dict[str, RlsTableState] = {}
    for name in sorted(set(live) | set(PROTECTED_TABLES)):
        enabled, forced, policy, comment, deparsed = live.get(
            name, (False, False, False, None, None)
        )
        if not (name.startswith("agent_") or name in tenant):
            continue  # another application's table, with no tenant data
        mark, _, installed = str(comment or "").rpartition(" ")
        tables[name] = RlsTableState(
            table=name,
            protected=name in POLICIES,
            exists=name in live,
            enabled=enabled,
            forced=forced,
            policy=policy,
            policy_current=policy
            and mark == POLICY_MARKS.get(name)
            and deparsed is not None
            and installed == deparsed,
            tenant_data=name in tenant,
            shared=name in SHARED_TABLES,
        )
    function = bool(
        conn.execute(
            text(sql.FUNCTION_EXISTS), {"name": RUN_ABSENT_FUNCTION, "schema": schema}
        ).scalar()
    )
    valid = conn.execute(
        text(sql.INDEX_VALID), {"name": THREAD_TENANT_INDEX, "schema": schema}
    ).scalar()
    index = "missing" if valid is None else "valid" if valid else "invalid"
    return _Catalog(schema, tables, function, index)


def _role_kind(conn: Connection, role: str | None = None) -> tuple[str, str]:
    """(role name, kind): ``superuser`` and ``bypassrls`` bypass the policies; ``subject``
    roles (the owner too: the policies are forced) see only their tenant's rows."""
    row = conn.execute(text(sql.ROLE), {"role": role}).first()
    if row is None:
        return (role or "", "missing")
    kind = "superuser" if row[1] else "bypassrls" if row[2] else "subject"
    return (str(row[0]), kind)


def _app_role_refusal(conn: Connection, role: str, cat: _Catalog) -> str | None:
    """Why ``role`` cannot be the app role (issue 24, finding 4), or None.

    The policies bind the app role only while it can change none of them: it must not bypass
    row-level security, own an agent table or be a member of a role that owns one (the owner
    can run ``ALTER TABLE … NO FORCE ROW LEVEL SECURITY``), nor hold CREATE on the schema (it
    could create objects there and, with an owner's help, re-own tables).
    """
    _, kind = _role_kind(conn, role)
    if kind == "missing":
        return None
    if kind != "subject":
        return f"role {role!r} is a {kind} role and bypasses row-level security"
    names = sorted(t.table for t in cat.tables.values() if t.exists)
    owns = conn.execute(
        text(sql.OWNED_TABLE), {"schema": cat.schema, "tables": names, "role": role}
    ).first()
    if owns is not None:
        owner = str(owns[1])
        how = "owns" if owner == role else f"is a member of {owner!r}, which owns"
        return f"role {role!r} {how} {owns[0]} and could switch its row-level security off"
    if conn.execute(text(sql.SCHEMA_CREATE), {"role": role, "schema": cat.schema}).scalar():
        return f"role {role!r} has CREATE on schema {cat.schema!r} and could re-own its tables"
    return None


def _refuse_app_role(conn: Connection, role: str, cat: _Catalog) -> None:
    why = _app_role_refusal(conn, role, cat)
    if why is not None:
        raise InvalidInput(
            f"{why}: the app role must be a plain NOLOGIN NOBYPASSRLS role that owns nothing "
            "(choose another, e.g. --app-role agora_app)",
            param="app_role",
        )


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
    # protected tables whose policy is not the current expression (an older agora's, or edited
    # by hand: `enable` replaces it)
    outdated: list[str] = field(default_factory=list)
    # tables holding tenant data that agora neither protects nor declares shared
    unprotected: list[str] = field(default_factory=list)

    @property
    def bypasses_rls(self) -> bool:
        return self.role_kind in ("superuser", "bypassrls")


def rls_status(conn: Connection) -> RlsStatus:
    """Row-level security on every agent table, and which kind of role is connected."""
    _require_postgresql(conn)
    cat = _read_catalog(conn)
    role, kind = _role_kind(conn)
    tenant = transaction_tenant(conn)
    protected = [s for s in cat.tables.values() if s.protected]
    complete = [s for s in protected if s.exists and s.enabled and s.forced and s.policy]
    touched = [s for s in protected if s.enabled or s.forced or s.policy]
    return RlsStatus(
        role=role,
        role_kind=kind,
        tenant=tenant,
        enabled=len(complete) == len(protected),
        partial=bool(touched) and len(complete) < len(protected),
        function=cat.function,
        tables=list(cat.tables.values()),
        thread_tenant_index=cat.index,
        outdated=[s.table for s in protected if s.policy and not s.policy_current],
        unprotected=cat.unprotected,
    )


def policy_problems(bind: Engine | Connection) -> list[Problem]:
    """``missing_policy`` problems for ``db check``: once row-level security is enabled on any
    agent table, every protected table must have it enabled, forced and with its policy (the
    expressions this agora installs), and every table of the live catalog holding tenant data
    must be protected or declared shared.

    Nothing on MySQL/SQLite, nor on a PostgreSQL database where RLS was never enabled.
    """
    if not dialect_of(bind).has_row_level_security:
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
        if s.unprotected:
            problems.append(
                Problem(
                    "missing_policy",
                    s.table,
                    f"{s.table}: holds tenant data (a tenant column or a foreign key to a "
                    "table with one) but has no tenant policy and is not declared shared: "
                    "every session of the app role reads every tenant's rows",
                )
            )
            continue
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
                f"policy {POLICY_NAME} is outdated (its expressions are not the ones this "
                "agora installs)"
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


def _privileges(conn: Connection, role: str, tables: list[str]) -> dict[str, set[str]]:
    """The DML privileges ``role`` holds on each of ``tables`` (schema-qualified by search_path)."""
    rows = conn.execute(
        text(sql.TABLE_PRIVILEGES), {"tables": tables, "privs": list(_DML), "role": role}
    ).all()
    held: dict[str, set[str]] = {t: set() for t in tables}
    for t, p in rows:
        held[str(t)].add(str(p))
    return held


def _grant_sql(conn: Connection, role: str, cat: _Catalog, *, revoke: bool) -> list[str]:
    agent = sorted(t.name for t in metadata.sorted_tables if cat.tables.get(t.name, None))
    agent = [t for t in agent if cat.tables[t].exists]
    held = _privileges(conn, role, agent)
    qrole = _quote(conn, role)
    statements: list[str] = []
    has_usage = bool(
        conn.execute(text(sql.SCHEMA_USAGE), {"role": role, "schema": cat.schema}).scalar()
    )
    for table in agent:
        want = {"SELECT"} if table in READ_ONLY_TABLES else set(_DML)
        qt = _quote(conn, table)
        if revoke:
            if held[table]:
                statements.append(sql.REVOKE_ALL.format(table=qt, role=qrole))
        else:
            if not want <= held[table]:
                privs = ", ".join(p for p in _DML if p in want)
                statements.append(sql.GRANT.format(privileges=privs, tables=qt, role=qrole))
            if held[table] - want:  # an older agora's grant (the fold's tables)
                extra = ", ".join(p for p in _DML if p in held[table] - want)
                statements.append(sql.REVOKE.format(privileges=extra, table=qt, role=qrole))
    if not revoke and not has_usage:
        statements.insert(0, sql.GRANT_USAGE.format(schema=_quote(conn, cat.schema), role=qrole))
    return statements


def _run(engine: Engine, build: Any, *, dry_run: bool, lock_timeout_s: float) -> RlsPlan:
    _require_postgresql(engine)
    with engine.connect() as conn:
        plan: RlsPlan = build(conn)
        conn.rollback()  # a concurrent index build waits for every open snapshot: ours too
    if dry_run or not plan.sql:
        return plan
    ms = {"ms": f"{int(lock_timeout_s * 1000)}ms"}
    online = [s for s in plan.sql if sql.ONLINE in s]
    before = online if plan.action == "enable" else []
    after = [] if plan.action == "enable" else online
    _run_online(engine, before, ms)
    with engine.connect() as conn:
        # The catalog read again, inside the transaction that applies what it found missing.
        again: RlsPlan = build(conn)
        applied = [s for s in again.sql if sql.ONLINE not in s]
        if applied:
            conn.execute(text(sql.LOCK_TIMEOUT_LOCAL), ms)
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
    if not statements:
        return
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        # A session setting, the one exception to "transaction-local only": a concurrent build
        # cannot run inside a transaction (nor a pipeline), so nothing scopes the bound to it.
        # Reset after each build; behind a transaction pooler run this command through a
        # session-mode pool or directly (docs/scaling.md).
        for statement in statements:
            conn.execute(text(sql.LOCK_TIMEOUT_SESSION), ms)
            try:
                conn.exec_driver_sql(statement)
            finally:
                if not conn.invalidated:
                    conn.exec_driver_sql(sql.RESET_LOCK_TIMEOUT)


def enable_rls(
    engine: Engine,
    *,
    app_role: str | None = None,
    dry_run: bool = False,
    lock_timeout_s: float = 10.0,
) -> RlsPlan:
    """Enable and force row-level security with its policies, idempotently, in one transaction.

    Only what is missing is created and outdated policies (an older agora's, or edited by hand)
    are replaced in place (an already enabled, current schema runs nothing). With ``app_role``,
    the role is created if missing (``NOLOGIN NOBYPASSRLS``) and granted the runtime's DML on
    the agent tables (SELECT only on prices, budgets, tenant keys and the fold's tables); a role
    that could switch the policies off (superuser, ``BYPASSRLS``, an agent table's owner or a
    member of it, ``CREATE`` on the schema, ``PUBLIC``) is refused with ``InvalidInput``, dry
    run or not. ``dry_run`` returns the statements and runs none.
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
        ddl: list[str] = []
        notes: list[str] = []
        schema = _quote(conn, cat.schema)
        index = _quote(conn, THREAD_TENANT_INDEX)
        if cat.index == "invalid":
            ddl.append(sql.DROP_THREAD_TENANT_INDEX.format(schema=schema, index=index))
        if cat.index != "valid":
            table = _quote(conn, "agent_token_usage")
            ddl.append(sql.CREATE_THREAD_TENANT_INDEX.format(index=index, table=table))
        for name in PROTECTED_TABLES:
            state = cat.tables[name]
            qt = _quote(conn, name)
            if not state.enabled:
                ddl.append(sql.ENABLE_RLS.format(table=qt))
            if not state.forced:
                ddl.append(sql.FORCE_RLS.format(table=qt))
            using, check = POLICIES[name]
            policy = {"policy": POLICY_NAME, "table": qt, "using": using, "check": check}
            if not state.policy:
                ddl.append(sql.CREATE_POLICY.format(**policy))
            elif not state.policy_current:  # an older agora's, or edited: replaced in place
                ddl.append(sql.ALTER_POLICY.format(**policy))
            if not state.policy_current:  # the DO block runs after the CREATE or ALTER POLICY
                mark = POLICY_MARKS[name]
                ddl.append(sql.COMMENT_POLICY.format(policy=POLICY_NAME, name=name, mark=mark))
        if cat.function:  # the frames' old helper (issue 24: it answered for every tenant),
            # dropped once no policy uses it any more
            ddl.append(sql.DROP_FUNCTION.format(schema=schema, name=RUN_ABSENT_FUNCTION))
        created = False
        if app_role is not None:
            _refuse_app_role(conn, app_role, cat)
            _, kind = _role_kind(conn, app_role)
            if kind == "missing":
                created = True
                ddl.append(sql.CREATE_ROLE.format(role=_quote(conn, app_role)))
                ddl += _grant_sql_for_new_role(conn, app_role, cat)
            else:
                ddl += _grant_sql(conn, app_role, cat, revoke=False)
        _, me = _role_kind(conn)
        if me == "subject":
            notes.append(
                "the connected role does not bypass row-level security: run cross-tenant "
                "reports, the fold and the purge of frames whose run is gone as a superuser "
                "or a BYPASSRLS role"
            )
        return RlsPlan("enable", app_role, created, False, dry_run, ddl, notes)

    return _run(engine, build, dry_run=dry_run, lock_timeout_s=lock_timeout_s)


def _grant_sql_for_new_role(conn: Connection, role: str, cat: _Catalog) -> list[str]:
    qrole = _quote(conn, role)
    names = [t.name for t in metadata.sorted_tables if cat.tables.get(t.name)]
    names = [t for t in names if cat.tables[t].exists]
    rw = [_quote(conn, t) for t in names if t not in READ_ONLY_TABLES]
    ro = [_quote(conn, t) for t in names if t in READ_ONLY_TABLES]
    ddl = [sql.GRANT_USAGE.format(schema=_quote(conn, cat.schema), role=qrole)]
    if rw:
        ddl.append(sql.GRANT.format(privileges=", ".join(_DML), tables=", ".join(rw), role=qrole))
    if ro:
        ddl.append(sql.GRANT.format(privileges="SELECT", tables=", ".join(ro), role=qrole))
    return ddl


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
    if app_role is not None:
        _check_role_name(app_role)
    if drop_role and app_role is None:
        raise InvalidInput("drop_role needs app_role", param="drop_role")

    def build(conn: Connection) -> RlsPlan:
        cat = _read_catalog(conn)
        ddl: list[str] = []
        schema = _quote(conn, cat.schema)
        for table in reversed(PROTECTED_TABLES):
            state = cat.tables[table]
            qt = _quote(conn, table)
            if state.policy:
                ddl.append(sql.DROP_POLICY.format(policy=POLICY_NAME, table=qt))
            if state.forced:
                ddl.append(sql.NO_FORCE_RLS.format(table=qt))
            if state.enabled:
                ddl.append(sql.DISABLE_RLS.format(table=qt))
        if cat.function:  # left by an agora before issue 24
            ddl.append(sql.DROP_FUNCTION.format(schema=schema, name=RUN_ABSENT_FUNCTION))
        dropped = False
        if app_role is not None:
            _, kind = _role_kind(conn, app_role)
            if kind != "missing":
                ddl += _grant_sql(conn, app_role, cat, revoke=True)
                qrole = _quote(conn, app_role)
                if conn.execute(
                    text(sql.SCHEMA_USAGE), {"role": app_role, "schema": cat.schema}
                ).scalar():
                    ddl.append(sql.REVOKE_USAGE.format(schema=schema, role=qrole))
                if drop_role:
                    elsewhere = conn.execute(text(sql.ROLE_ELSEWHERE), {"r": app_role}).scalar()
                    if elsewhere:
                        raise InvalidInput(
                            f"role {app_role!r} holds privileges or objects in another "
                            "database: revoke them there first, or keep the role",
                            param="drop_role",
                        )
                    ddl.append(sql.DROP_ROLE.format(role=qrole))
                    dropped = True
        if cat.index != "missing":  # last: it runs after the transaction, in autocommit
            index = _quote(conn, THREAD_TENANT_INDEX)
            ddl.append(sql.DROP_THREAD_TENANT_INDEX.format(schema=schema, index=index))
        return RlsPlan("disable", app_role, False, dropped, dry_run, ddl, [])

    return _run(engine, build, dry_run=dry_run, lock_timeout_s=lock_timeout_s)
