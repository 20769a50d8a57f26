"""A topic's scope: which nodes of a run an extractor may look at at all.

Applied before any extractor runs, so an LLM never sees (or bills for) out-of-scope text, and
again by the gate, so a pointer at a node the extractor was never shown compiles nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import get_args

from nexus_assets.core.keywords import DEFAULT_KEYWORD_FORMS, KeywordPattern, keyword_pattern
from nexus_assets.core.models import ExtractionPolicy, Node, NodeType, Run, Topic
from nexus_assets.core.paths import value_at
from nexus_assets.ingest.formats.limits import max_node_chars


def node_text(run: Run, node: Node) -> str | None:
    if node.text is not None:
        return node.text
    try:
        value = value_at(run.document, node.steps)
    except (KeyError, IndexError, TypeError):
        return None
    return value if isinstance(value, str) else None


# What an assistant addresses to a tool and what the tool returns: read only by a topic whose
# target_node_types name them (docs/inputs.md: a person does not keep tool output as a note, but a topic
# may ask for it, e.g. the warnings a code interpreter printed).
TOOL_TYPES: frozenset[str] = frozenset({"tool_call", "tool_message"})
# The node types a topic without target_node_types reads.
DEFAULT_NODE_TYPES: frozenset[str] = frozenset(get_args(NodeType)) - TOOL_TYPES


# A line of tool output worth judging: at least two words of two letters (not a bare path, number,
# prompt or box-drawing line).
_WORDY = re.compile(r"[^\W\d_]{2,}")


def is_tool_line(line: str) -> bool:
    """A line of tool output that says something: two words or more."""
    return len(_WORDY.findall(line)) >= 2


@dataclass(frozen=True)
class Scope:
    """The nodes of a run a topic compiles: what extractors are shown, and all the gate accepts."""

    node_types: frozenset[str] | None
    include_hidden: bool
    current_only: bool
    pattern: KeywordPattern | None
    longest: int

    @classmethod
    def of(cls, policy: ExtractionPolicy, topic: Topic | None = None) -> Scope:
        """Hidden messages, abandoned branches, tool calls and tool output are in scope only when
        `topic` asks for them; without a topic, hidden messages are left out and every branch is
        kept (the topic defaults)."""
        return cls(
            node_types=frozenset(policy.target_node_types) if policy.target_node_types else DEFAULT_NODE_TYPES,
            include_hidden=topic.include_hidden if topic is not None else False,
            current_only=topic is not None and topic.branches == "current",
            pattern=keyword_pattern(
                policy.required_keywords or (), topic.keyword_forms if topic is not None else DEFAULT_KEYWORD_FORMS
            ),
            # Ingestion recorded the skip; an over-long node is never handed to an extractor.
            longest=max_node_chars(),
        )

    def excludes_node(self, node: Node) -> str | None:
        """Why the node is out of scope by its kind alone, else None."""
        if node.hidden and not self.include_hidden:
            return "a hidden message (the topic does not set include_hidden: true)"
        if self.current_only and node.branch != "current":
            return f"on {'a subagent sidechain' if node.branch == 'sidechain' else 'an abandoned branch'} (the topic compiles branches: current)"
        if self.node_types is not None and node.node_type not in self.node_types:
            if self.node_types is DEFAULT_NODE_TYPES:
                return f"a {node.node_type} (tool calls and output are read only by a topic whose target_node_types name them)"
            return f"a {node.node_type} (not in the topic's target_node_types)"
        return None

    def excludes_text(self, text: str | None) -> str | None:
        """Why the node's text is out of scope, else None."""
        if not text or not text.strip():
            return "empty"
        if len(text) > self.longest:
            return f"over the {self.longest:,}-character node limit"
        if self.pattern is not None and not self.pattern.search(text):
            return "without any of the topic's required keywords"
        return None


def in_scope_nodes(
    policy: ExtractionPolicy, run: Run, topic: Topic | None = None
) -> list[tuple[Node, str]]:
    """The run's text nodes in the topic's scope (see `Scope`), with their text."""
    scope = Scope.of(policy, topic)
    kept = []
    for node in run.nodes:
        if scope.excludes_node(node) is not None:
            continue
        text = node_text(run, node)
        if scope.excludes_text(text) is None:
            kept.append((node, text))
    return kept
