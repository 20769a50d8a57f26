"""A topic's pre-filter: which nodes of a run an extractor may look at at all.

Applied before any extractor runs, so an LLM never sees (or bills for) out-of-scope text.
"""

from __future__ import annotations

import re
from functools import lru_cache

from nexus_assets.core.formats.limits import max_node_chars
from nexus_assets.core.models import ExtractionPolicy, Node, Run, Topic
from nexus_assets.core.paths import value_at


@lru_cache(maxsize=1024)
def keyword_pattern(keywords: tuple[str, ...]) -> re.Pattern[str] | None:
    """Whole words, any case. Lookarounds instead of \\b so keywords like 'c++' still work."""
    words = [k.strip() for k in keywords if k.strip()]
    if not words:
        return None
    alternatives = "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
    return re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE)


def node_text(run: Run, node: Node) -> str | None:
    if node.text is not None:
        return node.text
    try:
        value = value_at(run.document, node.steps)
    except (KeyError, IndexError, TypeError):
        return None
    return value if isinstance(value, str) else None


def in_scope_nodes(
    policy: ExtractionPolicy, run: Run, topic: Topic | None = None
) -> list[tuple[Node, str]]:
    """The run's text nodes that pass the node-type and keyword pre-filters, with their text.

    Hidden messages and abandoned branches pass only when `topic` asks for them; without a
    topic, hidden messages are left out and every branch is kept (the topic defaults).
    """
    pattern = keyword_pattern(policy.required_keywords or ())
    # Ingestion recorded the skip; an over-long node is never handed to an extractor.
    longest = max_node_chars()
    include_hidden = topic.include_hidden if topic is not None else False
    current_only = topic is not None and topic.branches == "current"
    kept = []
    for node in run.nodes:
        if node.hidden and not include_hidden:
            continue
        if current_only and node.branch != "current":
            continue
        if policy.target_node_types and node.node_type not in policy.target_node_types:
            continue
        text = node_text(run, node)
        if not text or len(text) > longest or not text.strip():
            continue
        if pattern is not None and not pattern.search(text):
            continue
        kept.append((node, text))
    return kept
