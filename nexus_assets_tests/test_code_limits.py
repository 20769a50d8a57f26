"""Small modules are a strength here: no file of the package over 500 lines, no function over 80
(docs/extending.md). The allow-list below is empty since issue 51 split the last long files by
meaning; nothing joins it (a file that grows past a limit is split, not listed)."""

import ast
import fnmatch
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "nexus_assets"
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80

# path (from the repository root, glob) -> why it is over a limit for now
ALLOWED: dict[str, str] = {}


def _allowed(rel: str) -> bool:
    return any(fnmatch.fnmatch(rel, pattern) for pattern in ALLOWED)


def _sources():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE.parent).as_posix(), path.read_text(encoding="utf-8")


def test_no_file_is_over_500_lines():
    long = [f"{rel}: {n} lines" for rel, text in _sources() if (n := len(text.splitlines())) > MAX_FILE_LINES and not _allowed(rel)]
    assert not long, f"over {MAX_FILE_LINES} lines (split by meaning): " + "; ".join(long)


def test_no_function_is_over_80_lines():
    long = []
    for rel, text in _sources():
        if _allowed(rel):
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{rel}:{node.lineno} {node.name}: {n} lines")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (split by what each part does): " + "; ".join(long)


def test_the_allow_list_names_only_files_that_exist():
    names = {rel for rel, _ in _sources()}
    stale = [pattern for pattern in ALLOWED if not any(fnmatch.fnmatch(n, pattern) for n in names)]
    assert not stale, f"allow-listed but gone (remove from ALLOWED): {stale}"
