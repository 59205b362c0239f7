"""Every statement row-level security runs (``rls.py``, ``rls_verify.py``), each defined once.

Two kinds, like ``proposals/queries.py``. Catalog reads and settings are SQL text with bind
parameters (``:name``), run through ``text()``. Statements on identifiers — DDL, grants, roles —
are templates whose ``{fields}`` take identifiers already quoted by the caller (``rls._quote``)
or, for the policies' expressions, the texts of ``rls.POLICIES``; each is rendered with
``str.format`` and run on the driver (``exec_driver_sql``). PostgreSQL only: the other dialects
have no row-level security and never reach these.
"""

from __future__ import annotations

from agora_cli.store._tenant_setting import TENANT_SETTING

__all__ = [
    "ALTER_POLICY",
    "COMMENT_POLICY",
    "CREATE_POLICY",
    "CREATE_ROLE",
    "CREATE_THREAD_TENANT_INDEX",
    "CURRENT_SCHEMA",
    "DEPARSED_MD5",
    "DISABLE_RLS",
    "DROP_FUNCTION",
    "DROP_POLICY",
    "DROP_ROLE",
    "DROP_THREAD_TENANT_INDEX",
    "ENABLE_RLS",
    "FOLD_WRITES",
    "FORCE_RLS",
    "FOREIGN_KEYS",
    "FUNCTION_EXISTS",
    "GRANT",
    "GRANT_ROLE_TO_ME",
    "GRANT_USAGE",
    "INDEX_VALID",
    "LOCK_TIMEOUT_LOCAL",
    "LOCK_TIMEOUT_SESSION",
    "NO_FORCE_RLS",
    "ONLINE",
    "OWNED_TABLE",
    "RESET_LOCK_TIMEOUT",
    "REVOKE",
    "REVOKE_ALL",
    "REVOKE_USAGE",
    "ROLE",
    "ROLE_ELSEWHERE",
    "SCHEMA_CREATE",
    "SCHEMA_USAGE",
    "SET_ROLE",
    "SET_TENANT",
    "TABLES",
    "TABLE_PRIVILEGES",
]

# The expression the policies are compared by: the md5 of a pg_policies row's expressions as
# PostgreSQL deparsed them (qual, with_check: its own normal form), command, kind and roles.
DEPARSED_MD5 = (
    "md5(coalesce(qual, '') || chr(10) || coalesce(with_check, '') || chr(10) || cmd "
    "|| chr(10) || permissive || chr(10) || array_to_string(roles, ','))"
)
# Statements that run outside the transaction, in autocommit (the index's build and drop).
ONLINE = "CONCURRENTLY"

# --- the catalog (rls._read_catalog) ----------------------------------------------------------

# The session's schema (no parameters).
CURRENT_SCHEMA = "SELECT current_schema()"
# Every table of :schema: name, RLS enabled, forced, the policy :policy exists, its comment, its
# deparsed md5 (DEPARSED_MD5) and the table's column names.
TABLES = (
    "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity, p.oid IS NOT NULL, "
    "obj_description(p.oid, 'pg_policy'), "
    f"(SELECT {DEPARSED_MD5} FROM pg_policies s WHERE s.schemaname = n.nspname "
    "AND s.tablename = c.relname AND s.policyname = p.polname), "
    "ARRAY(SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid = c.oid "
    "AND a.attnum > 0 AND NOT a.attisdropped) "
    "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "LEFT JOIN pg_policy p ON p.polrelid = c.oid AND p.polname = :policy "
    "WHERE n.nspname = :schema AND c.relkind IN ('r', 'p') AND NOT c.relispartition"
)
# Every foreign key of :schema as (child table, parent table).
FOREIGN_KEYS = (
    "SELECT c.relname, f.relname FROM pg_constraint k "
    "JOIN pg_class c ON c.oid = k.conrelid JOIN pg_class f ON f.oid = k.confrelid "
    "JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE k.contype = 'f' AND n.nspname = :schema"
)
# Whether function :name exists in :schema.
FUNCTION_EXISTS = (
    "SELECT EXISTS (SELECT 1 FROM pg_proc f JOIN pg_namespace n "
    "ON n.oid = f.pronamespace WHERE f.proname = :name AND n.nspname = :schema)"
)
# Index :name of :schema: valid (true), invalid (false: a failed concurrent build), or no row.
INDEX_VALID = (
    "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
    "JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE c.relname = :name AND n.nspname = :schema"
)

# --- roles and privileges ---------------------------------------------------------------------

# Role :role (NULL: the connected one): its name, superuser, bypassrls; no row when missing.
ROLE = (
    "SELECT rolname, rolsuper, rolbypassrls FROM pg_roles "
    "WHERE rolname = coalesce(:role, current_user)"
)
# The first of :tables (text[]) in :schema that :role owns or is a member of its owner: (table,
# owner).
OWNED_TABLE = (
    "SELECT c.relname, pg_get_userbyid(c.relowner) FROM pg_class c "
    "JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = :schema AND c.relname = ANY(CAST(:tables AS text[])) "
    "AND pg_has_role(:role, c.relowner, 'MEMBER') ORDER BY c.relname LIMIT 1"
)
# Whether :role holds CREATE on schema :schema.
SCHEMA_CREATE = "SELECT has_schema_privilege(:role, :schema, 'CREATE')"
# Whether :role holds USAGE on schema :schema.
SCHEMA_USAGE = "SELECT has_schema_privilege(:role, :schema, 'USAGE')"
# (table, privilege) for each of :tables (text[]) and :privs (text[]) that :role holds.
TABLE_PRIVILEGES = (
    "SELECT t, p FROM unnest(CAST(:tables AS text[])) t, unnest(CAST(:privs AS text[])) p "
    "WHERE has_table_privilege(:role, quote_ident(t), p)"
)
# (table, its privileges joined by ', ') of :tables (text[]) on which :role holds any of :privs.
FOLD_WRITES = (
    "SELECT t, string_agg(p, ', ' ORDER BY p) FROM unnest(CAST(:tables AS text[])) t, "
    "unnest(CAST(:privs AS text[])) p WHERE has_table_privilege(:role, quote_ident(t), p) "
    "GROUP BY t ORDER BY t"
)
# How many privileges or objects role :r holds in the cluster's other databases.
ROLE_ELSEWHERE = (
    "SELECT count(*) FROM pg_shdepend d JOIN pg_roles r "
    "ON r.oid = d.refobjid AND d.refclassid = 'pg_authid'::regclass "
    "WHERE r.rolname = :r AND d.dbid <> "
    "(SELECT oid FROM pg_database WHERE datname = current_database())"
)

# --- settings ---------------------------------------------------------------------------------

# lock_timeout for this transaction (:ms, e.g. '10000ms').
LOCK_TIMEOUT_LOCAL = "SELECT set_config('lock_timeout', :ms, true)"
# lock_timeout for the session (:ms): only around a CONCURRENTLY build, reset after it.
LOCK_TIMEOUT_SESSION = "SELECT set_config('lock_timeout', :ms, false)"
# Back to the server's lock_timeout (no parameters).
RESET_LOCK_TIMEOUT = "RESET lock_timeout"
# agora.tenant for this transaction (:t; '' is untenanted).
SET_TENANT = f"SELECT set_config('{TENANT_SETTING}', :t, true)"

# --- templates: {fields} are quoted identifiers or policy expressions -------------------------

ENABLE_RLS = "ALTER TABLE {table} ENABLE ROW LEVEL SECURITY"
FORCE_RLS = "ALTER TABLE {table} FORCE ROW LEVEL SECURITY"
NO_FORCE_RLS = "ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY"
DISABLE_RLS = "ALTER TABLE {table} DISABLE ROW LEVEL SECURITY"
# {policy} on {table}, with its USING and WITH CHECK expressions.
CREATE_POLICY = (
    "CREATE POLICY {policy} ON {table} AS PERMISSIVE FOR ALL USING ({using}) WITH CHECK ({check})"
)
# An outdated policy's expressions (and roles) replaced in place.
ALTER_POLICY = "ALTER POLICY {policy} ON {table} TO PUBLIC USING ({using}) WITH CHECK ({check})"
DROP_POLICY = "DROP POLICY {policy} ON {table}"
# The policy's comment: {mark} and the md5 of its expressions as deparsed now. A DO block, since
# the deparsed text exists only once the policy does; {name} is the table's name (a literal).
COMMENT_POLICY = (
    "DO $agora$BEGIN EXECUTE 'COMMENT ON POLICY "
    "{policy} ON ' || quote_ident('{name}') || ' IS ' || quote_literal("
    f"'{{mark}} ' || (SELECT {DEPARSED_MD5} FROM pg_policies "
    "WHERE schemaname = current_schema() AND tablename = '{name}' "
    "AND policyname = '{policy}')); END$agora$"
)
# The thread-and-tenant index ({index}) on {table}, built and dropped in autocommit.
CREATE_THREAD_TENANT_INDEX = (
    f"CREATE INDEX {ONLINE} IF NOT EXISTS {{index}} ON {{table}} (thread_id, tenant_ref)"
)
DROP_THREAD_TENANT_INDEX = f"DROP INDEX {ONLINE} IF EXISTS {{schema}}.{{index}}"
# The frames' old SECURITY DEFINER helper {name}(text) in {schema}.
DROP_FUNCTION = "DROP FUNCTION IF EXISTS {schema}.{name}(text)"
CREATE_ROLE = "CREATE ROLE {role} NOLOGIN NOBYPASSRLS"
DROP_ROLE = "DROP ROLE {role}"
# The connected role made a member of {role} (so that it may SET ROLE to it).
GRANT_ROLE_TO_ME = "GRANT {role} TO CURRENT_USER"
# The rest of this transaction run as {role}.
SET_ROLE = "SET LOCAL ROLE {role}"
GRANT_USAGE = "GRANT USAGE ON SCHEMA {schema} TO {role}"
REVOKE_USAGE = "REVOKE USAGE ON SCHEMA {schema} FROM {role}"
# {privileges} (e.g. 'SELECT, INSERT') on {tables} (one table or several, comma-separated).
GRANT = "GRANT {privileges} ON {tables} TO {role}"
REVOKE = "REVOKE {privileges} ON {table} FROM {role}"
REVOKE_ALL = "REVOKE ALL ON {table} FROM {role}"
