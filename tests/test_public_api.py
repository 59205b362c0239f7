"""The public face of ``agora_cli.store``: the names a runtime imports, pinned; the rest private.

Like httpx's ``tests/test_exported_members.py``: a new export fails here until it is added on
purpose. Like pydantic's ``test_public_internal``: nothing private is reachable as a public name,
and a name that was public before 0.2.0 raises ``RetiredName`` with its home instead of aliasing.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import agora_cli.store as store
from agora_cli.store import RetiredName, _retired

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "agora_cli" / "store"

EXPORTED = [
    "SEALED_MARKER",
    "ActionProposalStore",
    "AgoraError",
    "AmbiguousId",
    "BudgetStatus",
    "CatalogError",
    "ClaimResult",
    "Clock",
    "Conflict",
    "CreateResult",
    "DatabaseError",
    "DatabaseUnreachable",
    "DecideResult",
    "DeliveryResult",
    "DemoRefused",
    "ExternalError",
    "ForwardOnlyMigration",
    "FrameWriter",
    "InvalidInput",
    "KeyUnavailable",
    "Lease",
    "LockTimeout",
    "ManualClock",
    "Message",
    "MissingExtension",
    "ModelNotInCatalog",
    "ModelPrice",
    "NewProposal",
    "NotFound",
    "Problem",
    "Proposal",
    "ProvisionReport",
    "PurgeReport",
    "RenewResult",
    "RetiredName",
    "Run",
    "RunEnd",
    "SchemaDrift",
    "Scope",
    "SealBroken",
    "SettleResult",
    "Settlement",
    "SpendReport",
    "StreamFrame",
    "SystemClock",
    "Thread",
    "ThreadTurn",
    "ToolCall",
    "UnknownDialect",
    "UsageRecord",
    "Work",
    "WorkWaiter",
    "WrongKek",
    "append_message",
    "check_agent_tables",
    "complete_tool_call",
    "create_thread",
    "default_idempotency_key",
    "end_run",
    "ensure_agent_tables",
    "find_thread",
    "follow",
    "get_thread",
    "list_messages",
    "load_thread_for_turn",
    "metadata",
    "open_engine",
    "proposal_id",
    "purge_expired",
    "read_frames",
    "record_tool_call",
    "record_usage",
    "scope_quota",
    "set_price",
    "spend",
    "start_run",
    "tenant_session",
]


def test_the_exported_names_are_pinned_and_few() -> None:
    assert store.__all__ == EXPORTED  # sorted, no duplicates, nothing new by accident
    assert len(EXPORTED) < 80
    assert set(store._EXPORTS) == set(EXPORTED)


def test_every_name_resolves_to_its_private_definition() -> None:
    for name in EXPORTED:
        module = importlib.import_module(f"agora_cli.store.{store._EXPORTS[name]}")
        value = getattr(store, name)
        assert value is getattr(module, name), name
        assert store._EXPORTS[name].startswith("_"), name
        assert name in dir(store)


def test_every_module_of_the_store_is_private() -> None:
    entries = [p for p in STORE.iterdir() if p.name != "__pycache__"]
    public = [
        p.name
        for p in entries
        if not p.name.startswith("_") and (p.suffix == ".py" or (p / "__init__.py").exists())
    ]
    assert public == []
    assert (STORE / "__init__.py").exists()


def test_no_private_name_is_reachable_as_a_public_one() -> None:
    # Load every private module (as the command line does), then look at the package again:
    # a submodule import binds ``_name`` on the package, never a public attribute.
    for path in STORE.rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        importlib.import_module(".".join(parts))
    public = {n for n in vars(store) if not n.startswith("_")} - {"annotations"}
    assert public <= set(EXPORTED), public - set(EXPORTED)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError):
        store.no_such_thing  # noqa: B018
    assert not hasattr(store, "no_such_thing")


def test_a_retired_name_raises_and_names_its_home() -> None:
    assert len(_retired.RETIRED) > 200
    for name, home in _retired.RETIRED.items():
        assert name not in EXPORTED
        module = importlib.import_module(f"agora_cli.store.{home}")
        assert hasattr(module, name), f"{name} is not in {home}: the message would lie"
        expected = "use " if name in _retired.REPLACED else rf"agora_cli\.store\.{home}\b"
        with pytest.raises(RetiredName, match=expected):
            getattr(store, name)
    with pytest.raises(RetiredName, match=r"escape_like is internal since agora 0\.2\.0"):
        from agora_cli.store import escape_like  # noqa: F401


def test_a_retired_name_with_a_successor_names_it() -> None:
    with pytest.raises(RetiredName, match="use scope_quota"):
        from agora_cli.store import quota  # noqa: F401
    for name in ("Catalog", "UnpricedModel"):
        with pytest.raises(RetiredName, match=r"retired in agora 0\.2\.0"):
            getattr(store, name)


def test_a_retired_module_path_raises_and_names_the_private_one() -> None:
    for code in (
        "import agora_cli.store.engine",
        "from agora_cli.store.engine import open_engine",
        "from agora_cli.store import engine",
        "import agora_cli.store.proposals.leases",
    ):
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False
        )
        assert proc.returncode == 1, code
        assert "RetiredName" in proc.stderr and "agora_cli.store._" in proc.stderr, proc.stderr
    assert _retired.RETIRED_MODULES >= {"engine", "proposals", "threads", "sealing"}


def test_no_old_alias_lives_on_in_a_module() -> None:
    # One name, one meaning: the 0.1 spellings are gone from the modules too.
    from agora_cli.store import _catalog, _ledger, _provision, _usage

    assert not hasattr(_catalog, "Catalog") and not hasattr(_provision, "Catalog")
    assert not hasattr(_usage, "UnpricedModel") and not hasattr(_ledger, "UnpricedModel")


def test_the_command_line_says_where_it_reaches_inside() -> None:
    marker = "# internal on purpose: the operator's commands import the store's private modules"
    unmarked = [
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / "agora_cli" / "cli").rglob("*.py"))
        if "agora_cli.store._" in p.read_text() and marker not in p.read_text()
    ]
    assert unmarked == []


@pytest.mark.slow
def test_mypy_strict_sees_real_types_for_public_names(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from agora_cli.store import ActionProposalStore, open_engine, spend, scope_quota\n"
        "reveal_type(open_engine)\n"
        "reveal_type(ActionProposalStore.claim_next)\n"
        "reveal_type(scope_quota)\n"
        "reveal_type(spend)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(probe)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    revealed = [line for line in proc.stdout.splitlines() if "Revealed type" in line]
    assert len(revealed) == 4, proc.stdout + proc.stderr
    assert not any('"Any"' in line for line in revealed), revealed
    assert "def (url: str | None =" in revealed[0] and "Engine" in revealed[0]
    assert "ClaimResult" in revealed[1]
