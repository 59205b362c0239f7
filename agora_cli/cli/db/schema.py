"""`agora db provision|upgrade|status|check|sql`: the agent schema, made, moved on, described."""

from __future__ import annotations

# internal on purpose: the operator's commands import the store's private modules (cli/__init__.py)
import enum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agora_cli.cli.options import DbOpt, JsonOpt, open_db
from agora_cli.cli.output import (
    Col,
    emit_json,
    finish,
    out_console,
    render_table,
    safe_text,
    say,
)
from agora_cli.store._dialects import DIALECT_CHOICES

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

LockTimeoutOpt = Annotated[
    float,
    typer.Option(
        "--lock-timeout",
        metavar="SECONDS",
        help=(
            "Give up (exit 3, naming the table and who holds it) after waiting this long for a "
            "table lock another session holds; more than 0, at most 3600."
        ),
    ),
]


def provision(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the statements it would run; run none.")
    ] = False,
    convert_collation: Annotated[
        bool,
        typer.Option(
            "--convert-collation",
            help=(
                "MySQL/MariaDB: convert agent tables that are not InnoDB in utf8mb4_bin (as the "
                "runtime's migrations make them), dropping their foreign keys first and "
                "re-creating them after. Rewrites each such table, blocking its writes meanwhile."
            ),
        ),
    ] = False,
    lock_timeout: LockTimeoutOpt = 10.0,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create or repair the agent tables, columns, indexes and foreign keys, idempotently.

    Safe from many processes at once; against a current schema it issues no DDL and takes no
    lock. DDL waits at most --lock-timeout for another session's open transaction (SQLite: for
    the database's write lock). Never drops data or narrows anything; widens columns narrower
    than the schema (INT token counts to BIGINT, MySQL TEXT to LONGTEXT: each rewrites its
    table). Refuses (exit 1, creating nothing) an expected index name taken by another table, a
    column of another type, rows a foreign key to add would reject, or a MySQL agent table that
    is not InnoDB in utf8mb4_bin unless --convert-collation is given.

    Example: agora db provision --db mysql://root@db.internal/app --convert-collation --dry-run
    """
    from agora_cli.store._provision import ensure_agent_tables, table_lock_timeout

    seconds = table_lock_timeout(lock_timeout)
    report = ensure_agent_tables(
        open_db(db, create=True),
        dry_run=dry_run,
        table_lock_timeout_s=seconds,
        convert_collation=convert_collation,
    )
    if as_json:
        emit_json(
            {
                "dialect": report.dialect,
                "created_tables": report.created_tables,
                "added_columns": report.added_columns,
                "created_indexes": report.created_indexes,
                "converted_tables": report.converted_tables,
                "widened_columns": report.widened_columns,
                "added_foreign_keys": report.added_foreign_keys,
                "dropped_indexes": report.dropped_indexes,
                "statements": report.statements,
                "already_current": report.already_current,
                "sql": report.sql,
                "dry_run": report.dry_run,
                "notes": report.notes,
            }
        )
        return
    console = out_console()
    if report.already_current:
        console.print(f"The agent schema on {report.dialect} is current: nothing to do.")
        return
    if dry_run:
        console.print(f"-- would run {report.statements} statement(s) on {report.dialect}")
        for statement in report.sql:
            console.print(statement + ";", markup=False)
        return
    repaired = [
        f"{len(items)} {what}"
        for items, what in (
            (report.converted_tables, "table(s) converted"),
            (report.widened_columns, "column(s) widened"),
            (report.added_foreign_keys, "foreign key(s) added"),
            (report.dropped_indexes, "retired index(es) dropped"),
        )
        if items
    ]
    console.print(
        f"Provisioned {report.dialect}: {len(report.created_tables)} table(s) created, "
        f"{len(report.added_columns)} column(s) added, {len(report.created_indexes)} index(es) "
        f"created{''.join(', ' + r for r in repaired)} ({report.statements} statement(s))."
    )
    for note in report.notes:
        say(f"note: {note}", style="yellow")


def _upgrade_target(db: str | None) -> str | None:
    """``--sql`` only prints: a SQLite file that does not exist yet is never created for it;
    the SQL printed is what a new database would get (an in-memory one answers)."""
    from agora_cli.store._engine import normalize_url, resolve_url, sqlite_path

    path = sqlite_path(normalize_url(resolve_url(db)))
    if path is not None and not path.exists():
        say(f"note: no database at {path} yet: the SQL is what a new database would get")
        return "sqlite://"
    return db


def upgrade(
    revision: Annotated[
        str,
        typer.Argument(
            help="Target: agent@head (default), documents@head, rag@head, rollup@head or a "
            "revision."
        ),
    ] = "agent@head",
    sql: Annotated[
        bool, typer.Option("--sql", help="Print the SQL instead of running it.")
    ] = False,
    lock_timeout: LockTimeoutOpt = 10.0,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Upgrade through agora's versioned, forward-only Alembic migrations.

    Runs under the provisioning lock, with the version table agent_alembic_version (an
    application's own alembic_version is never touched). The optional branches are applied by
    name: documents and rag (PostgreSQL only), rollup (spend fold's per-model rollup, every
    dialect). Every lock wait gives up after --lock-timeout (exit 3).

    Example: agora db upgrade --db postgresql://app@db.internal/app && agora db upgrade rag@head
    """
    from agora_cli.store._migrate import (
        MAIN_BRANCH,
        applies_main_revisions,
        pending_notices,
        target_branch,
    )
    from agora_cli.store._migrate import upgrade as run_upgrade
    from agora_cli.store._provision import table_lock_timeout

    seconds = table_lock_timeout(lock_timeout)
    engine = open_db(_upgrade_target(db) if sql else db, create=True)
    if not sql and applies_main_revisions(engine, revision):
        for notice in pending_notices(revision):
            say(f"note: {notice}", style="yellow")
    result = run_upgrade(engine, revision, sql=sql, table_lock_timeout_s=seconds)
    if sql:
        if as_json:
            emit_json(
                {
                    "from": result.from_revision,
                    "to": result.to_revision,
                    "applied": [],
                    "sql": result.sql,
                }
            )
        else:
            console = out_console()
            for statement in result.sql:
                console.print(statement + ";", markup=False)
        return
    branch = target_branch(revision)
    if branch == MAIN_BRANCH:
        _refuse_drift(engine, result.to_revision)
    if as_json:
        emit_json(
            {"from": result.from_revision, "to": result.to_revision, "applied": result.applied}
        )
        return
    if not result.applied:
        out_console().print(f"Already at {result.to_revision}: nothing to apply.")
    else:
        applied = ", ".join(result.applied)
        if result.from_revision is None and branch != MAIN_BRANCH:
            out_console().print(f"Applied the {branch} branch ({applied}).")
            return
        start = result.from_revision or "an unversioned database"
        out_console().print(f"Upgraded {start} → {result.to_revision} (applied {applied}).")


def _refuse_drift(engine: Engine, revision: str | None) -> None:
    """After an upgrade of the main chain: the live schema must be what the revision says. A
    difference ``db check`` sees (a column dropped by hand) is exit 1, naming the command that
    repairs it. (An optional branch's upgrade answers for its own tables only.)"""
    from agora_cli.store._errors import SchemaDrift
    from agora_cli.store._provision import check_agent_tables

    problems = check_agent_tables(engine)
    if problems:
        first = problems[0].detail
        raise SchemaDrift(
            f"the database is at revision {revision} but its schema differs "
            f"({len(problems):,} problem(s), e.g. {first}): `agora db check` lists them, "
            "`agora db provision` adds what is missing"
        )


def status(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Show the migration revision, whether the schema is current, and table sizes.

    Row counts of large tables are catalog estimates, marked as such. On PostgreSQL it says
    whether a connection pooler (PgBouncer) stands in between, and whether it pools
    transactions; on a Galera node, the cluster's state.

    Example: agora db status --json
    """
    from agora_cli.store._engine import describe_url
    from agora_cli.store._status import schema_status

    st = schema_status(open_db(db, readonly=True))
    doc: dict[str, Any] = {
        "database": describe_url(db),
        "dialect": st.dialect,
        "server_version": st.server_version,
        "revision": st.revision,
        "head": st.head,
        "branches": st.branches,
        "schema_current": st.schema_current,
        "legacy_proposals": st.legacy_proposals,
        "tables": {name: c.rows for name, c in st.tables.items()},
        "estimated": sorted(name for name, c in st.tables.items() if c.estimated),
        "cluster": None
        if st.cluster is None
        else {
            "kind": "galera",
            "nodes": st.cluster.cluster_size,
            "state": st.cluster.state,
            "synced": st.cluster.synced,
            "primary": st.cluster.cluster_status == "Primary",
            "summary": st.cluster.describe(),
        },
        "pooler": None
        if st.pooler is None
        else {
            "detected": True,
            "transaction_pooling": st.pooler.transaction_pooling,
            "summary": st.pooler.describe(),
        },
    }
    if as_json:
        emit_json(doc)
        return
    console = out_console()
    console.print(f"database         {safe_text(doc['database'])}", markup=False)
    console.print(f"dialect          {doc['dialect']} {safe_text(doc['server_version'])}")
    if st.cluster is not None:
        console.print(f"cluster          {safe_text(st.cluster.describe())}")
    if st.pooler is not None:
        console.print(f"pooler           {st.pooler.describe()}")
    console.print(f"revision         {doc['revision'] or '(migrations never run)'}")
    console.print(f"head             {doc['head']}")
    console.print(f"branches         {', '.join(doc['branches']) or '—'}")
    if not st.schema_current:
        current = f"no ({len(st.problems)} problem(s): agora db check)"
    elif st.revision is not None and st.revision != st.head:
        # The tables match, but the recorded revision is behind: never "current" below head.
        # (A database `db provision` made records none: it is current when the tables match.)
        current = f"no: revision {st.revision}, head {st.head} (agora db upgrade)"
    else:
        current = "yes"
    console.print(f"schema current   {current}")
    legacy = st.legacy_proposals
    console.print(f"legacy proposals {legacy:,}" + ("  (agora db backfill)" if legacy else ""))
    rows = [
        {"table": name, "rows": c.rows, "note": "estimate" if c.estimated else ""}
        for name, c in sorted(st.tables.items())
    ]
    render_table(rows, [Col("table"), Col("rows", justify="right"), Col("note")])


def check(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Compare the live schema with the expected one; exit 1 on any difference.

    Reports missing tables, columns, indexes and foreign keys (compared by shape, not name),
    columns narrower than the schema or of another type (wrong_type: INT token counts, MySQL
    TEXT JSON), and on MySQL a wrong engine or collation. Extra indexes are not drift. On a
    Galera cluster node, also what the cluster cannot replicate: tables without a primary key
    or not in InnoDB, and binlog_format or membership problems.

    Example: agora db check --db mysql://root@127.0.0.1/app --json
    """
    from agora_cli.store._engine import dialect_name
    from agora_cli.store._provision import check_agent_tables

    engine = open_db(db, readonly=True)
    problems = check_agent_tables(engine)
    if as_json:
        emit_json(
            {
                "dialect": dialect_name(engine),
                "ok": not problems,
                "problems": [
                    {"kind": p.kind, "table": p.table, "detail": p.detail} for p in problems
                ],
            }
        )
    elif not problems:
        out_console().print("ok: the live schema matches the agent schema.")
    else:
        render_table(
            [{"kind": p.kind, "table": p.table, "detail": p.detail} for p in problems],
            [Col("kind"), Col("table"), Col("detail")],
            title=f"{len(problems)} difference(s)",
        )
        convert = any(p.kind in ("wrong_collation", "wrong_engine") for p in problems)
        flag = " --convert-collation" if convert else ""
        say(f"`agora db provision{flag}` adds what is missing (it never drops anything).")
    if problems:
        raise typer.Exit(1)


DialectChoice = enum.StrEnum(  # type: ignore[misc]
    "DialectChoice", {v: v for v in DIALECT_CHOICES}
)


def sql(
    dialect: Annotated[
        DialectChoice,
        typer.Option("--dialect", help="The dialect (mariadb is mysql).", case_sensitive=False),
    ],
    as_json: JsonOpt = False,
) -> None:
    """Print the full DDL of the agent schema for one dialect, without a database.

    Example: agora db sql --dialect mysql > agent-schema.sql
    """
    from agora_cli.store._provision import create_table_statements

    name = str(dialect.value)
    statements = create_table_statements(name)
    finish(
        {"dialect": name, "statements": statements},
        as_json=as_json,
        show=lambda: _print_statements(statements),
    )


def _print_statements(statements: list[str]) -> None:
    console = out_console()
    for statement in statements:
        console.print(statement + ";\n", markup=False)
