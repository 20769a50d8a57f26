"""JSON paths: resolve a pointer's path to exactly one node, and name it in RFC 9535 normalized form.

jsonpath-ng parses the (lenient) syntax extractors write; the normalized form is built from the
match's own context chain so that `$.messages[-1].content` and `$['messages'][3]['content']`
give one address for one node. Paths with backslash escapes go to jsonpath-rfc9535, which
reads them as the RFC says.
"""

from __future__ import annotations

import re
from functools import lru_cache
from types import ModuleType
from typing import Any, Iterator

Steps = tuple[str | int, ...]


class PathError(Exception):
    """A path that does not name exactly one string node; `reason` is a rejection code."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


_NEEDS_ESCAPE = re.compile(r"[\\'\x00-\x1f]")


def _escape(key: str) -> str:
    if not _NEEDS_ESCAPE.search(key):
        return key
    out = []
    for ch in key:
        if ch == "\\":
            out.append("\\\\")
        elif ch == "'":
            out.append("\\'")
        elif ch == "\b":
            out.append("\\b")
        elif ch == "\f":
            out.append("\\f")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


# Runs share their shapes ($['messages'][3]['content'] in every run), so paths repeat: both
# directions are cached.
@lru_cache(maxsize=16384)
def format_path(steps: Steps) -> str:
    """RFC 9535 normalized path: `$['messages'][12]['content']`."""
    parts = ["$"]
    for step in steps:
        if isinstance(step, int):
            parts.append(f"[{step}]")
        else:
            parts.append(f"['{_escape(step)}']")
    return "".join(parts)


@lru_cache(maxsize=None)
def _library(name: str) -> ModuleType:
    """The JSONPath parsers are loaded on first use: stored paths are normalized and read directly,
    and the read-only commands should not pay ~60 ms to import parsers they never call."""
    import importlib

    return importlib.import_module(name)


@lru_cache(maxsize=65536)
def _parse(path: str):
    return _library("jsonpath_ng").parse(path)


def _steps_of(datum) -> Steps:
    jsonpath = _library("jsonpath_ng.jsonpath")
    chain = []
    node = datum
    while node is not None:
        chain.append(node)
        node = node.context
    steps: list[str | int] = []
    for node in reversed(chain):
        step = node.path
        if isinstance(step, (jsonpath.Root, jsonpath.This)):
            continue
        if isinstance(step, jsonpath.Fields) and len(step.fields) == 1:
            steps.append(step.fields[0])
        elif isinstance(step, jsonpath.Index) and len(step.indices) == 1:
            index = step.indices[0]
            parent = node.context.value if node.context is not None else None
            if index < 0 and isinstance(parent, list):
                index += len(parent)
            steps.append(index)
        else:
            raise PathError("path_not_singular", f"path step {step!s} does not name a single node")
    return tuple(steps)


@lru_cache(maxsize=4096)
def _parse_rfc9535(path: str):
    return _library("jsonpath_rfc9535").compile(path)


def _resolve_escaped(document: Any, path: str) -> tuple[Steps, Any]:
    """Paths with backslash escapes (`$['a\\nb']`, as format_path writes control characters):
    jsonpath-ng reads `\\n` as `n`, so these go to an RFC 9535 implementation instead."""
    try:
        query = _parse_rfc9535(path)
    except _library("jsonpath_rfc9535").JSONPathError as exc:
        raise PathError("malformed_pointer", f"json_path {path!r} is not valid JSONPath: {exc}") from None
    matches = query.find(document)
    if not matches:
        raise PathError("path_not_found", f"json_path {path!r} matches no node")
    if len(matches) > 1:
        raise PathError("path_not_singular", f"json_path {path!r} matches {len(matches)} nodes")
    return tuple(matches[0].location), matches[0].value


# Normalized paths without escapes (`$['mapping']['9f…']['parts'][0]`) are what the vault stores
# and the embedded extractor emits. Their steps can be read off directly; a general JSONPath
# parse costs ~0.8 ms, and export paths are nearly all distinct, so a cache does not help.
_NORMALIZED = re.compile(r"\$(?:\[(?:'[^'\\]*'|0|[1-9][0-9]*)\])*\Z")
_NORMALIZED_STEP = re.compile(r"\[(?:'([^'\\]*)'|([0-9]+))\]")


def _resolve_normalized(document: Any, path: str) -> tuple[Steps, Any]:
    steps = tuple(key if index == "" else int(index) for key, index in _NORMALIZED_STEP.findall(path))
    try:
        return steps, value_at(document, steps)
    except (KeyError, IndexError, TypeError):
        raise PathError("path_not_found", f"json_path {path!r} matches no node") from None


_ANY_NORMALIZED = re.compile(r"\$(?:\[(?:'(?:[^'\\]|\\(?:[\\'bfnrt]|u[0-9a-f]{4}))*'|0|[1-9][0-9]*)\])*\Z")
_ANY_STEP = re.compile(r"\[(?:'((?:[^'\\]|\\(?:[\\'bfnrt]|u[0-9a-f]{4}))*)'|([0-9]+))\]")
_UNESCAPE = re.compile(r"\\(?:([\\'bfnrt])|u([0-9a-f]{4}))")
_SIMPLE = {"\\": "\\", "'": "'", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


@lru_cache(maxsize=16384)
def parse_normalized(path: str) -> Steps | None:
    """The steps of a path in the normalized form `format_path` writes (escapes included), or None
    for any other syntax. The inverse of `format_path`."""
    if not _ANY_NORMALIZED.match(path):
        return None
    return tuple(
        _UNESCAPE.sub(lambda m: _SIMPLE[m[1]] if m[1] else chr(int(m[2], 16)), key) if index == "" else int(index)
        for key, index in _ANY_STEP.findall(path)
    )


def resolve_steps(document: Any, path: str) -> tuple[Steps, Any]:
    """The single node `path` names in `document`, as (normalized steps, value)."""
    if not isinstance(path, str) or not path.strip():
        raise PathError("malformed_pointer", "json_path is empty")
    if _NORMALIZED.match(path):
        return _resolve_normalized(document, path)
    if "\\" in path:
        return _resolve_escaped(document, path)
    try:
        parsed = _parse(path)
    except Exception as exc:  # jsonpath-ng raises bare Exception subclasses for syntax errors
        raise PathError("malformed_pointer", f"json_path {path!r} is not valid JSONPath: {exc}") from None
    try:
        matches = parsed.find(document)
    except Exception as exc:
        raise PathError("path_not_found", f"json_path {path!r} could not be evaluated: {exc}") from None
    if not matches:
        raise PathError("path_not_found", f"json_path {path!r} matches no node")
    if len(matches) > 1:
        raise PathError("path_not_singular", f"json_path {path!r} matches {len(matches)} nodes")
    return _steps_of(matches[0]), matches[0].value


def resolve_string(document: Any, path: str) -> tuple[Steps, str]:
    steps, value = resolve_steps(document, path)
    if not isinstance(value, str):
        raise PathError(
            "node_not_string",
            f"json_path {path!r} names a {type(value).__name__}, not a string",
        )
    return steps, value


def value_at(document: Any, steps: Steps) -> Any:
    """Follow already-normalized steps; KeyError/IndexError/TypeError when they no longer fit."""
    node = document
    for step in steps:
        if isinstance(step, int) and not isinstance(node, list):
            raise TypeError("index into a non-array")
        if isinstance(step, str) and not isinstance(node, dict):
            raise TypeError("key into a non-object")
        node = node[step]
    return node


def string_leaves(document: Any) -> Iterator[tuple[Steps, str]]:
    """Every string value in document order (pre-order, object keys in file order)."""
    stack: list[tuple[Steps, Any]] = [((), document)]
    while stack:
        steps, node = stack.pop()
        if isinstance(node, str):
            yield steps, node
        elif isinstance(node, dict):
            stack.extend((steps + (k,), v) for k, v in reversed(list(node.items())))
        elif isinstance(node, list):
            stack.extend((steps + (i,), v) for i, v in reversed(list(enumerate(node))))


def depth_of(document: Any) -> int:
    """Nesting depth (a scalar is 0), without recursion so hostile input cannot blow the stack."""
    deepest = 0
    stack = [(document, 0)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    return deepest
