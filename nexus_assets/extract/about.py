"""Which runs a topic is about (DESIGN §3.1): the runs whose every passage is the topic's record.

Pure. A topic is about a run its `sources` admit when the run as a whole is on the topic: one of
its `required_keywords` (or, as the topic's `keyword_forms` says, one of their plurals and
possessives: core/keywords.py) occurs anywhere in the run's conversational text (the person's and
the assistant's words, in the node types and branches the topic reads; hidden messages only with
`include_hidden: true`). A topic with no keywords is a catch-all: it is about every run its sources
admit. A run whose keywords occur only in tool calls or tool output (the code a person ran, what
it printed, what was browsed) is about the topic too, and the topic reads those nodes of that run.
A run whose keywords occur only in hidden messages is not, and says so. The contract's other way in,
the conversation's relevance to the topic, is not taken: docs/recall.md says why (its cost, no
calibrated bar for the fast model yet).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nexus_assets.core.fingerprint import canonical_json, sha256_hex
from nexus_assets.core.models import Run, Topic
from nexus_assets.ingest.scope import TOOL_TYPES
from nexus_assets.ingest.passages import CONVERSATIONAL, passage_spans

ABOUT_VERSION = "about-v1"
# The verdict of a run the topic's keywords are in only through hidden messages (stored as its
# `why`; `hidden_messages` reads the count back, so the sync can say how many without reading a run).
HIDDEN_ONLY = "a required keyword occurs only in {n} hidden message(s); include_hidden: true reads them"
HIDDEN_ONLY_LIKE = "a required keyword occurs only in % hidden message(s)%"  # the same, as SQL LIKE
_HIDDEN_ONLY = re.compile(r"a required keyword occurs only in (\d+) hidden message\(s\)")


@dataclass(frozen=True)
class About:
    about: bool
    reads_tools: bool
    why: str


def definition_digest(topic: Topic) -> str:
    """What a verdict depends on besides the run: a changed keyword list asks every run again."""
    policy = topic.extraction_policy
    keywords = sorted(k.strip() for k in policy.required_keywords or () if k.strip())
    return sha256_hex(canonical_json({
        "version": ABOUT_VERSION,
        "keywords": keywords,
        "node_types": sorted(policy.target_node_types) if policy.target_node_types else None,
        "include_hidden": topic.include_hidden,
        "branches": topic.branches,
        # Only the inflected rule enters: verdicts recorded before it existed matched exact words.
        **({"keyword_forms": topic.keyword_forms} if keywords and topic.keyword_forms != "exact" else {}),
    }))


def about_run(topic: Topic, run: Run) -> About:
    """Whether the topic is about the run (its `sources` already admitted it), and why."""
    policy = topic.extraction_policy
    pattern = topic.keyword_pattern()
    if pattern is None:
        return About(True, False, "the topic has no required_keywords: it is about every run its sources admit")
    asked = set(policy.target_node_types or ()) - TOOL_TYPES or set(CONVERSATIONAL)
    hidden_hits = 0
    tool_hit = False
    for node in run.nodes:
        if topic.branches == "current" and node.branch != "current":
            continue
        text = node.text or ""
        if node.node_type in TOOL_TYPES:
            tool_hit = tool_hit or bool(pattern.search(text))
            continue
        if node.node_type not in asked:
            continue
        if not any(pattern.search(text[s.start : s.end]) for s in passage_spans(text, node.node_type, run.format)):
            continue
        if node.hidden and not topic.include_hidden:
            hidden_hits += 1
            continue
        return About(True, False, "a required keyword is said in the conversation")
    if tool_hit:
        return About(True, True, "a required keyword occurs only in tool calls or tool output: those nodes are read too")
    if hidden_hits:
        return About(False, False, HIDDEN_ONLY.format(n=hidden_hits))
    return About(False, False, "no required keyword occurs in the conversation")


def hidden_messages(why: str) -> int:
    """The hidden messages a verdict's `why` counts (0 for a run left out for another reason)."""
    found = _HIDDEN_ONLY.match(why)
    return int(found.group(1)) if found else 0


@dataclass(frozen=True)
class HiddenOnly:
    """A topic whose keywords occur in some runs only in hidden messages (a Claude Code hook's text,
    thinking, what an export hides) gets nothing from those runs until its file sets
    `include_hidden: true`; a new user cannot guess that, so the sync says it for the topic."""

    runs: int
    messages: int

    def note(self, topic_id: str) -> str:
        messages = f"{self.messages} hidden message{'s mention' if self.messages != 1 else ' mentions'}"
        runs = f"{self.runs} run{'s' if self.runs != 1 else ''}"
        return (
            f"{topic_id}: {messages} this topic's keywords, in {runs} it otherwise gets nothing from; "
            "`include_hidden: true` in its topic file reads them"
        )

    def as_dict(self, topic_id: str) -> dict:
        return {"runs": self.runs, "messages": self.messages, "note": self.note(topic_id)}
