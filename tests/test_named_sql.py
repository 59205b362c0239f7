"""SQL text is named once, at module level: no statement literal inside a function body.

Row-level security's statements live in ``agora_cli/store/_rls_sql.py`` (as the proposal store's
live in ``_proposals/queries.py``); ``_rls.py`` and ``_rls_verify.py`` run them by name
(``text(sql.TABLES)``, ``sql.ENABLE_RLS.format(...)``). A string literal or f-string inside a
function of those modules that starts like a statement fails here, so a new catalog read goes
where the others are.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

STORE = Path(__file__).resolve().parents[1] / "agora_cli" / "store"
# The modules that run only named statements (the operator's acts on proposals: issue 28).
NAMED = ("_rls.py", "_rls_verify.py", "_proposals/operator.py")
# A statement's first word followed by more (a privilege name alone, "SELECT", is no statement);
# a DO block by its dollar quote.
STATEMENT = re.compile(
    r"^\s*\(?\s*(?:(?:SELECT|INSERT|UPDATE|DELETE|CREATE|ALTER|DROP|SET|WITH|GRANT|REVOKE|RESET"
    r"|TRUNCATE|COMMENT)\s|DO\s+\$)",
    re.IGNORECASE,
)


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of every docstring's node: prose, not SQL."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _leading_text(node: ast.JoinedStr) -> str:
    """An f-string as far as it is literal, each replacement field shown as ``{}``."""
    return "".join(
        v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "{}"
        for v in node.values
    )


def inline_statements(source: str, filename: str = "<source>") -> list[str]:
    """Every string literal inside a function body of ``source`` that starts like SQL."""
    tree = ast.parse(source, filename)
    skip = _docstrings(tree)
    found: list[tuple[int, str]] = []
    seen: set[int] = set()
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        for node in ast.walk(function):
            if id(node) in seen or id(node) in skip:
                continue
            seen.add(id(node))
            if isinstance(node, ast.JoinedStr):
                seen.update(id(v) for v in node.values)  # its parts are not strings of their own
                literal = _leading_text(node)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                literal = node.value
            else:
                continue
            if STATEMENT.match(literal):
                found.append((node.lineno, f"{filename}:{node.lineno}: {literal[:60]!r}"))
    return [hit for _, hit in sorted(found)]


def test_the_finder_sees_statements_in_functions_only() -> None:
    source = '''
"""SELECT in a module's docstring is prose."""
NAMED = "SELECT 1"
def f(conn, t):
    """Insert a row: a docstring, not SQL."""
    conn.execute(text("select current_schema()"))
    conn.exec_driver_sql(f"ALTER TABLE {t} ENABLE ROW LEVEL SECURITY")
    conn.exec_driver_sql("DO $x$BEGIN NULL; END$x$")
    want = {"SELECT"}  # a privilege name
    probes = {"update_blocked": 1}
    g = lambda: "  (WITH x AS (SELECT 1) SELECT * FROM x)"
    return text(NAMED), f"{t} SELECT"
'''
    found = [hit.split(": ", 1)[0] for hit in inline_statements(source)]
    assert found == ["<source>:6", "<source>:7", "<source>:8", "<source>:11"]


@pytest.mark.parametrize("module", NAMED)
def test_no_statement_is_written_inside_a_function(module: str) -> None:
    path = STORE / module
    found = inline_statements(path.read_text(encoding="utf-8"), f"agora_cli/store/{module}")
    home = "_proposals/queries.py" if module.startswith("_proposals/") else "_rls_sql.py"
    assert found == [], f"SQL text belongs in agora_cli/store/{home}:\n" + "\n".join(found)


def test_each_named_statement_is_defined_once() -> None:
    from agora_cli.store import _rls_sql

    named = {name: getattr(_rls_sql, name) for name in _rls_sql.__all__}
    assert all(isinstance(v, str) for v in named.values())
    by_text: dict[str, list[str]] = {}
    for name, statement in named.items():
        by_text.setdefault(statement, []).append(name)
    assert [names for names in by_text.values() if len(names) > 1] == []
    assert sorted(_rls_sql.__all__) == _rls_sql.__all__
    tree = ast.parse((STORE / "_rls_sql.py").read_text(encoding="utf-8"))
    assigned = {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name) and target.id != "__all__"
    }
    assert assigned == set(named), "every statement is named in __all__"
