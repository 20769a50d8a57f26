"""docs/architecture.md layering: `vault/` is the base. Nothing under it imports a phase or the composition
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


PHASES = (
    "ingest", "topics", "extract", "gate", "resolve", "publish", "recall", "relate", "drift", "lifecycle", "forget",
    "search", "export", "trace", "eval", "discovery", "llm", "history", "teaching",
)
SHELLS = ("cli", "api", "mcp_server", "web")


def test_no_phase_imports_the_composition_root():
    """Each step names the stores it uses as a Protocol (docs/architecture.md#layers); not even a
    type hint reaches `store.py`."""
    reaching = sorted(
        str(path.relative_to(PACKAGE.parent))
        for phase in PHASES
        for path in (PACKAGE / phase).rglob("*.py")
        if "nexus_assets.store" in imported(path)
    )
    assert reaching == [], reaching


def test_the_services_import_no_shell():
    upward = sorted(
        f"{path.relative_to(PACKAGE.parent)}: {name}"
        for path in (PACKAGE / "services").rglob("*.py")
        for name in imported(path)
        if (name.split(".") + [""])[1] in SHELLS
    )
    assert upward == [], upward


def test_the_viewer_reads_through_the_services():
    """The viewer opens no vault and calls no phase: what it shows comes from services/pages.py."""
    names = set().union(*(imported(path) for path in (PACKAGE / "web").rglob("*.py")))
    assert not {n for n in names if n == "nexus_assets.store" or (n.split(".") + [""])[1] in PHASES}, sorted(names)


def test_no_import_cycles_anywhere_in_the_package():
    """No module reaches itself through its imports, counting imports inside functions too (grimp,
    which import-linter uses): a cycle is where layers stop meaning anything."""
    import grimp

    graph = grimp.build_graph("nexus_assets", cache_dir=None)
    seen: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan's strongly connected components
        seen[module] = low[module] = len(seen)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported not in seen:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], seen[imported])
        if low[module] == seen[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in seen:
            visit(module)
    assert cycles == [], cycles
