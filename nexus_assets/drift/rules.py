"""Drift (invariant 9): does a source address still hold the text it was lifted from?"""

from __future__ import annotations

from typing import Any

from nexus_assets.core.fingerprint import node_checksum
from nexus_assets.core.models import SourceAddress
from nexus_assets.core.paths import PathError, resolve_string


class NodeCache:
    """Each node of one document resolved and hashed once, however many addresses point into it
    (a long message holds thousands of bricks; hashing it per address is quadratic)."""

    def __init__(self, document: Any):
        self.document = document
        self._nodes: dict[str, tuple[str, str] | PathError] = {}

    def node(self, json_path: str) -> tuple[str, str]:
        """(text, checksum) of the node at `json_path`; PathError when it does not resolve."""
        found = self._nodes.get(json_path)
        if found is None:
            try:
                _, text = resolve_string(self.document, json_path)
                found = (text, node_checksum(text))
            except PathError as exc:
                found = exc
            self._nodes[json_path] = found
        if isinstance(found, PathError):
            raise found
        return found


def _cache(document: Any, cache: NodeCache | None) -> NodeCache:
    return cache if cache is not None and cache.document is document else NodeCache(document)


def address_problem(document: Any, address: SourceAddress, cache: NodeCache | None = None) -> str | None:
    """None when `document` still yields the address's node checksum; else what changed."""
    cache = _cache(document, cache)
    try:
        node, checksum = cache.node(address.json_path)
    except PathError as exc:
        return f"{address.json_path} no longer resolves ({exc.reason})"
    if checksum != address.node_checksum:
        return f"{address.json_path} changed (checksum {address.node_checksum[:12]}… no longer matches)"
    if len(node) < address.end:
        return f"{address.json_path} is shorter than offset {address.end}"
    return None


def slice_problem(document: Any, address: SourceAddress, content: str, cache: NodeCache | None = None) -> str | None:
    """None when the address still holds exactly `content` (invariant 1); else what is wrong."""
    cache = _cache(document, cache)
    problem = address_problem(document, address, cache)
    if problem:
        return problem
    node, _ = cache.node(address.json_path)
    if node[address.start : address.end] != content:
        return f"stored text differs from {address.json_path}[{address.start}:{address.end}]"
    return None
