"""Dialect differences live in one home: ``agora_cli/store/_dialects.py``.

Everywhere else asks the impl (``dialect_of(conn).pads_spaces``) instead of comparing a dialect
name. ``store/engine.py`` may name dialects where it picks the driver from a URL. SQLAlchemy's own
per-dialect API (``@compiles(X, "mysql")``, ``with_hint(..., "mysql")``, ``mysql_engine=``) passes
a name as an argument, which this test does not count.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "agora_cli"
NAMES = frozenset({"postgresql", "postgres", "mysql", "mariadb", "sqlite"})
# The home and the URL rules, public or private (``_dialects.py``) as the modules are named.
HOME = frozenset({"dialects", "engine"})


def _at_home(path: Path) -> bool:
    return path.parent == ROOT / "store" and path.stem.lstrip("_") in HOME


def _names_in(node: ast.AST) -> list[str]:
    """The dialect names ``node`` spells: a string literal, or a tuple/list/set of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value] if node.value.lower() in NAMES else []
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [name for element in node.elts for name in _names_in(element)]
    return []


def _pattern_names(pattern: ast.pattern) -> list[str]:
    if isinstance(pattern, ast.MatchValue):
        return _names_in(pattern.value)
    if isinstance(pattern, ast.MatchOr):
        return [name for p in pattern.patterns for name in _pattern_names(p)]
    if isinstance(pattern, ast.MatchAs) and pattern.pattern is not None:
        return _pattern_names(pattern.pattern)
    return []


def dialect_dispatch(source: str, filename: str = "<source>") -> list[str]:
    """Every place ``source`` compares against a dialect name or keys a literal by one."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        names: list[str] = []
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                names += _names_in(operand)
        elif isinstance(node, ast.match_case):
            names += _pattern_names(node.pattern)
        elif isinstance(node, ast.Dict):
            for key in node.keys:
                if key is not None:
                    names += _names_in(key)
        elif isinstance(node, ast.Set):
            names += _names_in(node)
        elif isinstance(node, ast.DictComp | ast.SetComp):
            for generator in node.generators:
                names += _names_in(generator.iter)
        if names:
            line = getattr(node, "lineno", getattr(getattr(node, "pattern", None), "lineno", 0))
            found.append(f"{filename}:{line}: {', '.join(sorted(set(names)))}")
    return found


def _sources() -> list[Path]:
    """agora_cli's modules, and the migrations shipped with it (``agora_cli.migrations``)."""
    shipped = [*ROOT.rglob("*.py"), *(ROOT.parent / "migrations").rglob("*.py")]
    return sorted(p for p in shipped if not _at_home(p))


def test_no_module_outside_the_home_compares_a_dialect_name() -> None:
    found = [
        hit
        for path in _sources()
        for hit in dialect_dispatch(path.read_text(), str(path.relative_to(ROOT.parent)))
    ]
    assert not found, "ask dialects.dialect_of(...) instead:\n" + "\n".join(found)


def test_the_scan_covers_the_store_and_the_cli() -> None:
    scanned = {p.relative_to(ROOT.parent).parts[:2] for p in _sources()}
    assert {("agora_cli", "store"), ("agora_cli", "cli"), ("migrations", "versions")} <= scanned
    assert any(p.stem.lstrip("_") == "threads" for p in _sources())
    assert not any(p.stem.lstrip("_") == "dialects" for p in _sources())


@pytest.mark.parametrize(
    "source",
    [
        'if dialect == "sqlite":\n    pass\n',
        'ok = dialect_name(conn) != "postgresql"\n',
        'ok = name in ("mysql", "mariadb")\n',
        'ok = "mariadb" not in names\n',
        'reader = {"postgresql": 1, "mysql": 2}[name]\n',
        'names = {"sqlite", "mysql"}\n',
        'choices = {v: v for v in ("postgresql", "sqlite")}\n',
        'match name:\n    case "mysql" | "mariadb":\n        pass\n',
        'match name:\n    case "sqlite":\n        pass\n',
    ],
)
def test_the_scan_finds_dialect_dispatch(source: str) -> None:
    assert dialect_dispatch(source)


@pytest.mark.parametrize(
    "source",
    [
        '@compiles(ExactEq, "mysql")\ndef f(): pass\n',
        'q = q.with_hint(t, "USE INDEX (i)", "mysql")\n',
        'doc = {"dialect": name}\n',
        "if d.pads_spaces:\n    pass\n",
        'ok = kind == "index"\n',
    ],
)
def test_the_scan_leaves_other_code_alone(source: str) -> None:
    assert not dialect_dispatch(source)


def test_every_name_has_one_impl() -> None:
    from agora_cli.store._dialects import (
        DIALECT_CHOICES,
        MySQLDialect,
        PostgresDialect,
        SQLiteDialect,
        dialect_of,
    )
    from agora_cli.store._errors import UnknownDialect

    assert {type(dialect_of(name)) for name in DIALECT_CHOICES} == {
        PostgresDialect,
        MySQLDialect,
        SQLiteDialect,
    }
    assert dialect_of("mariadb") is dialect_of("mysql")
    assert dialect_of("postgres") is dialect_of("postgresql")
    with pytest.raises(UnknownDialect):
        dialect_of("oracle")
