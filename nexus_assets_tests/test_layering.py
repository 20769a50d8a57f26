"""DESIGN §11 layering: `vault/` is the base. Nothing under it imports a phase or the composition
root, not even inside a function or for a type hint; the phases' stores stand on it."""

from __future__ import annotations

import ast
from pathlib import Path
from nexus_assets_tests.project import REPO

PACKAGE = REPO / "nexus_assets"


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return {n for n in names if n == "nexus_assets" or n.startswith("nexus_assets.")}


def test_the_vault_layer_imports_only_itself():
    outside = {
        f"{path.relative_to(PACKAGE.parent)}: {name}"
        for path in (PACKAGE / "vault").rglob("*.py")
        for name in imported(path)
        if not name.startswith("nexus_assets.vault")
    }
    assert not outside, sorted(outside)


def test_each_phase_store_stands_on_the_vault_layer_and_no_store_imports_the_root():
    stores = list(PACKAGE.glob("*/records.py"))
    assert len(stores) >= 10
    for path in stores:
        names = imported(path)
        assert "nexus_assets.store" not in names, path
    assert "nexus_assets.vault.records" in imported(PACKAGE / "publish" / "records.py")
