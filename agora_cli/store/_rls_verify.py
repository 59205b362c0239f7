"""Prove row-level security holds: `db rls verify` writes a fixture row per protected table as
one tenant and tries to read and change it as another, then rolls everything back."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sqlalchemy import BigInteger, Double, Integer, and_, func, select, text, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from agora_cli.store import _rls_sql as sql
from agora_cli.store._errors import InvalidInput, SchemaDrift
from agora_cli.store._masking import scrub
from agora_cli.store._schema import metadata

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection
    from sqlalchemy.sql.schema import Table
from agora_cli.store._rls import (
    FOLD_TABLES,
    PROTECTED_TABLES,
    READ_ONLY_TABLES,
    THREADS_TENANT_TABLES,
    _Catalog,
    _check_role_name,
    _grant_sql_for_new_role,
    _quote,
    _read_catalog,
    _refuse_app_role,
    _require_postgresql,
    _role_kind,
)

__all__ = [
    "RlsTableCheck",
    "RlsVerifyReport",
    "verify_isolation",
]


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
    # Tables with a parent (a thread, run or message): A cannot write a row carrying its own
    # tenant on B's parent, and a parent that does not exist fails with the same error (the
    # error does not tell whether B's parent exists). None for tables without a parent.
    parent_blocked: bool | None = None

    @property
    def ok(self) -> bool:
        return (
            self.sees_own
            and self.hides_other
            and self.update_blocked
            and self.delete_blocked
            and self.insert_blocked
            and self.thread_tenant is not False
            and self.parent_blocked is not False
        )


@dataclass(frozen=True)
class RlsVerifyReport:
    """What ``verify_isolation`` found; ``ok`` when every table kept the tenants apart."""

    role: str
    temporary_role: bool
    tables: list[RlsTableCheck]
    # what is wrong beyond one table's probes: the app role's writes on the fold's tables
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.tables) and not self.problems

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
    "agent_action_proposal_event": ("proposal_id", "agent_action_proposal"),
    "agent_tool_call": ("message_id", "agent_message"),
    "agent_stream_frame": ("run_id", "agent_run"),
}
_TENANT_COLUMN = {"agent_usage_daily": "tenant_key", "agent_tenant_key": "tenant_key"}


def _fixture_row(
    table: Table, tag: str, tenant: str, parents: dict[str, dict[str, Any]], n: int
) -> dict[str, Any]:
    """A valid row of ``table`` for ``tenant``: every NOT NULL column without a default filled."""
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
    return and_(*(c == row[c.name] for c in table.primary_key.columns))


def verify_isolation(engine: Engine, *, app_role: str | None = None) -> RlsVerifyReport:
    """The per-table isolation test; runnable against production, nothing it writes survives.

    In one transaction that is rolled back: rows for two throw-away tenants A and B in every
    protected table, written as the connected role (each under its own ``agora.tenant``); then
    ``SET LOCAL ROLE`` to ``app_role`` — or, without one, to a throw-away ``NOBYPASSRLS`` role
    created in the same transaction with the runtime's grants — and, as tenant A, for every
    table: A sees its row and none of B's, cannot update or delete B's, cannot insert a row for
    B, nor a row of its own tenant on B's parent (nor on a parent that does not exist, with the
    same error). Each probe runs in a savepoint, so one table's failure cannot disturb the next.

    Tables found in the catalog holding tenant data that agora neither protects nor declares
    shared fail; so does an app role that may write the fold's tables. ``app_role`` is refused
    (``InvalidInput``) when it could switch the policies off: see ``enable_rls``.
    """
    _require_postgresql(engine)
    if app_role is not None:
        _check_role_name(app_role)
    tag = f"agora-verify-{secrets.token_hex(4)}"
    tenants = {"a": f"{tag}-a", "b": f"{tag}-b"}
    setter = text(sql.SET_TENANT)
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
                conn.exec_driver_sql(sql.CREATE_ROLE.format(role=_quote(conn, role)))
                for statement in _grant_sql_for_new_role(conn, role, cat):
                    conn.exec_driver_sql(statement)
                _, me = _role_kind(conn)
                if me != "superuser":
                    conn.exec_driver_sql(sql.GRANT_ROLE_TO_ME.format(role=_quote(conn, role)))
            else:
                _, kind = _role_kind(conn, role)
                if kind == "missing":
                    raise InvalidInput(f"role {role!r} does not exist", param="app_role")
                _refuse_app_role(conn, role, cat)
            problems = _fold_writes(conn, role, cat)
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
            # A's own tenant on B's parent (finding 1 of issue 24), and on a parent that does
            # not exist: both must fail, alike.
            crossing: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
            for n, name in enumerate(PROTECTED_TABLES):
                link = _PARENT.get(name)
                if link is None:
                    continue
                cross = _fixture_row(tables[name], f"{tag}-c", tenants["a"], rows["a"], 30_000 + n)
                cross[link[0]] = rows["b"][link[1]]["id"]
                ghost = {**cross, link[0]: f"{tag}-no-such-parent"}
                ghost.update(_fresh_key(tables[name], cross, "-g"))
                crossing[name] = (cross, ghost)
            # Rows with no tenant_ref on A's thread (as the upstream runtime writes its ledger),
            # written as A; and the same shape with a fresh key for the intruders to try.
            conn.execute(setter, {"t": tenants["a"]})
            unowned: dict[str, dict[str, Any] | str] = {}
            for n, name in enumerate(THREADS_TENANT_TABLES):
                row = _fixture_row(tables[name], f"{tag}-n", tenants["a"], rows["a"], 20_000 + n)
                row["tenant_ref"] = None
                unowned[name] = _insert_or_why(conn, tables[name], row)
            conn.exec_driver_sql(sql.SET_ROLE.format(role=_quote(conn, role)))
            for name in PROTECTED_TABLES:
                check = _check_table(
                    conn, tables[name], rows["a"][name], rows["b"][name], intruders[name]
                )
                if name in unowned:
                    check = _check_threads_tenant(conn, tables[name], check, unowned[name], tenants)
                if name in crossing:
                    check = _check_parent(conn, tables[name], check, *crossing[name])
                checks.append(check)
            for name in cat.unprotected:
                checks.append(_unprotected_check(name))
        finally:
            conn.rollback()
    return RlsVerifyReport(role=role, temporary_role=temporary, tables=checks, problems=problems)


def _fresh_key(table: Table, row: dict[str, Any], suffix: str) -> dict[str, Any]:
    """``row``'s primary key made unique again (text columns suffixed, integers shifted)."""
    key: dict[str, Any] = {}
    for column in table.primary_key.columns:
        value = row[column.name]
        key[column.name] = value + 1 if isinstance(value, int) else f"{value}{suffix}"
    return key


def _unprotected_check(table: str) -> RlsTableCheck:
    return RlsTableCheck(
        table,
        sees_own=False,
        hides_other=False,
        update_blocked=False,
        delete_blocked=False,
        insert_blocked=False,
        detail=(
            "holds tenant data (a tenant column or a foreign key to a table with one) but has "
            "no tenant policy and is not declared shared"
        ),
    )


def _fold_writes(conn: Connection, role: str, cat: _Catalog) -> list[str]:
    """The fold's tables ``role`` may write (issue 24, finding 6: the fold is privileged)."""
    present = [t for t in FOLD_TABLES if t in cat.tables and cat.tables[t].exists]
    rows = conn.execute(
        text(sql.FOLD_WRITES),
        {"tables": present, "privs": ["INSERT", "UPDATE", "DELETE", "TRUNCATE"], "role": role},
    ).all()
    return [
        f"role {role} holds {privs} on {table}: the fold is privileged, a tenant session could "
        f"fold only its own rows for everyone (REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON "
        f"{table} FROM {role})"
        for table, privs in rows
    ]


def _check_parent(
    conn: Connection,
    table: Table,
    check: RlsTableCheck,
    cross: dict[str, Any],
    ghost: dict[str, Any],
) -> RlsTableCheck:
    """As A: a row of A's tenant on B's parent, and on no parent, fail with the same error."""
    details = [check.detail] if check.detail else []
    errors: list[str | None] = []
    for row in (cross, ghost):
        savepoint = conn.begin_nested()
        try:
            conn.execute(table.insert().values(**row))
            errors.append(None)
        except DBAPIError as exc:
            errors.append(_error_kind(exc))
        finally:
            savepoint.rollback()
    ok = True
    if errors[0] is None:
        ok = False
        details.append("tenant A wrote a row of its own tenant on tenant B's parent")
    elif errors[0] != errors[1]:
        ok = False
        details.append(
            "writing on B's parent and on a parent that does not exist fail differently "
            f"({errors[0]} vs {errors[1] or 'success'}): the error tells whether B's parent exists"
        )
    return replace(check, parent_blocked=ok, detail="; ".join(details) or None)


def _error_kind(exc: Any) -> str:
    orig = getattr(exc, "orig", exc)
    if _is_rls_violation(exc):
        return "row-level security"
    return str(getattr(orig, "sqlstate", None) or type(orig).__name__)


def _check_table(
    conn: Connection,
    table: Table,
    own: dict[str, Any],
    other: dict[str, Any],
    intruder: dict[str, Any],
) -> RlsTableCheck:
    """As tenant A under the app role: the five probes on one table, each in a savepoint."""
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
    details = [check.detail] if check.detail else []
    if isinstance(row, str):
        details.append(f"tenant A could not write a row with no tenant_ref on its thread: {row}")
        return replace(check, thread_tenant=False, detail="; ".join(details))
    setter = text(sql.SET_TENANT)
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
    text = str(getattr(exc, "orig", exc)).strip()
    return scrub(text.splitlines()[0] if text else type(exc).__name__)
