"""Split a run's in-scope nodes into chunks that each fit one request.

Token counts are estimates: ceil(UTF-8 bytes / 4). About four bytes per token holds for English
text and JSON under the common BPE tokenizers; counting bytes rather than characters keeps the
estimate from collapsing on non-Latin text (a CJK character is three bytes and roughly one token).
No tokenizer is needed, and the estimate is the same on every machine, so chunk boundaries (and
therefore call keys) never depend on which tokenizer happens to be installed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from nexus_assets.core.fingerprint import canonical_json
from nexus_assets.core.models import Node, Run
from nexus_assets.llm.prompt import node_entry

# Fragment tokens per request. Small enough for an 8k-context local model once the system
# prompt (~700 tokens) and max_output_tokens are added; raise it for large-context models.
DEFAULT_TOKEN_BUDGET = 3000


def token_budget_from_env(environ: Mapping[str, str]) -> int:
    """NEXUS_LLM_TOKEN_BUDGET of `environ` (`Settings.as_env()`), else DEFAULT_TOKEN_BUDGET;
    ValueError unless a whole number of at least 1."""
    text = environ.get("NEXUS_LLM_TOKEN_BUDGET", "").strip()
    if not text:
        return DEFAULT_TOKEN_BUDGET
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"NEXUS_LLM_TOKEN_BUDGET={text!r} is not a whole number of at least 1")
    return value


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text.encode("utf-8", "surrogatepass")) / 4)


def _bytes(value: object) -> int:
    return len(canonical_json(value).encode("utf-8", "surrogatepass"))


def chunk_nodes(run: Run, nodes: list[Node], *, token_budget: int) -> list[list[Node]]:
    """Consecutive groups of `nodes` (order kept) whose rendered fragment stays within
    `token_budget` estimated tokens. A node is never split; a node too large on its own
    becomes a chunk by itself. Nodes that are not strings in the run are dropped, as the
    fragment would drop them anyway.
    """
    if token_budget < 1:
        raise ValueError(f"token_budget must be at least 1, got {token_budget}")
    # The fragment is canonical JSON, so its size is exactly: envelope + entries + commas.
    envelope = _bytes({"run_id": run.run_id, "nodes": []})
    budget_bytes = token_budget * 4
    chunks: list[list[Node]] = []
    current: list[Node] = []
    size = envelope
    for node in nodes:
        entry = node_entry(run, node)
        if entry is None:
            continue
        cost = _bytes(entry) + (1 if current else 0)
        if current and size + cost > budget_bytes:
            chunks.append(current)
            current, size, cost = [], envelope, cost - 1
        current.append(node)
        size += cost
    if current:
        chunks.append(current)
    return chunks
