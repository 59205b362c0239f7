"""The public surface of ``agora_cli.store``: one name, one meaning, every name real and typed."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import agora_cli.store as store

ROOT = Path(__file__).resolve().parents[1]


def test_all_is_sorted_unique_and_every_name_resolves_once() -> None:
    names = list(store.__all__)
    assert len(names) == len(set(names))
    assert set(names) == set(store._EXPORTS)
    for name in names:
        module = importlib.import_module(f"agora_cli.store.{store._EXPORTS[name]}")
        value = getattr(store, name)  # resolves through __getattr__, no fallback search
        assert value is getattr(module, name), name
        assert name in dir(store)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError):
        store.no_such_thing  # noqa: B018


def test_one_name_one_meaning() -> None:
    from agora_cli.store import ModelCatalog, SchemaCatalog, UnpricedRows, UnpricedSpend

    assert ModelCatalog is not SchemaCatalog and UnpricedRows is not UnpricedSpend
    assert "Catalog" not in store.__all__ and "UnpricedModel" not in store.__all__
    # The old spellings still import from their modules.
    from agora_cli.store.catalog import Catalog
    from agora_cli.store.ledger import UnpricedModel as LedgerUnpriced
    from agora_cli.store.provision import Catalog as ProvisionCatalog
    from agora_cli.store.usage import UnpricedModel as UsageUnpriced

    assert (Catalog, ProvisionCatalog) == (ModelCatalog, SchemaCatalog)
    assert (UsageUnpriced, LedgerUnpriced) == (UnpricedRows, UnpricedSpend)


def test_every_module_name_is_public_through_the_package() -> None:
    for module_name in set(store._EXPORTS.values()):  # every module that exports something
        module = importlib.import_module(f"agora_cli.store.{module_name}")
        for name in module.__all__:
            assert name in store.__all__, f"{module_name}.{name} is not exported"


@pytest.mark.slow
def test_mypy_strict_sees_real_types_for_public_names(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from agora_cli.store import ActionProposalStore, ModelCatalog, open_engine, spend\n"
        "reveal_type(open_engine)\n"
        "reveal_type(ActionProposalStore.claim_next)\n"
        "reveal_type(ModelCatalog)\n"
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
