"""Which passages a recall reads (DESIGN §3.1, §8): a topic's record, or every run's conversation.

Pure. A topic's record is every passage of the runs it is about, of the node types its scope reads
(the person's and the assistant's words unless `target_node_types` says otherwise; hidden messages
only with `include_hidden: true`; abandoned branches not with `branches: current`), plus a run's
tool calls and output where the topic's keywords occur only there (that is what a topic about the
code a person ran means), or everywhere when `target_node_types` names them. Recall without a topic
reads every run's conversational passages.
"""

from __future__ import annotations

from dataclasses import dataclass

NODE_TYPES = ("user_message", "assistant_message", "system_message", "tool_call", "tool_message", "other")
NODE_TYPE_CODE = {t: i for i, t in enumerate(NODE_TYPES)}
CONVERSATION = frozenset({"user_message", "assistant_message"})
TOOLS = frozenset({"tool_call", "tool_message"})
HIDDEN, OFF_CURRENT = 1, 2  # a row's flag bits


@dataclass(frozen=True)
class Part:
    """Passages of these runs (None: any run) and these node types, hidden ones too or not, the
    current branch only or every branch."""

    runs: frozenset[str] | None
    node_types: frozenset[str]
    hidden: bool = False
    current_only: bool = False


@dataclass(frozen=True)
class RecordFilter:
    """What a recall reads: the union of its parts."""

    parts: tuple[Part, ...]

    @property
    def empty(self) -> bool:
        return not self.parts or all(p.runs is not None and not p.runs for p in self.parts)


EVERY_CONVERSATION = RecordFilter((Part(None, CONVERSATION),))


@dataclass(frozen=True)
class TopicRecord:
    """A topic's record as the vault holds it: the runs it is about, and which of them it reads
    tool output of."""

    topic_id: str
    runs: frozenset[str]
    tool_runs: frozenset[str]
    target_node_types: frozenset[str] | None
    include_hidden: bool
    current_only: bool

    def parts(self) -> tuple[Part, ...]:
        asked = self.target_node_types
        plain = (asked - TOOLS) if asked else CONVERSATION
        tools = self.runs if asked and asked & TOOLS else self.tool_runs
        tool_types = (asked & TOOLS) if asked and asked & TOOLS else TOOLS
        out = []
        if self.runs and plain:
            out.append(Part(self.runs, frozenset(plain), self.include_hidden, self.current_only))
        if tools:
            out.append(Part(frozenset(tools), frozenset(tool_types), self.include_hidden, self.current_only))
        return tuple(out)


def record_filter(records: list[TopicRecord] | None) -> RecordFilter:
    """The filter of these topics' records together; None: every run's conversation."""
    if records is None:
        return EVERY_CONVERSATION
    return RecordFilter(tuple(p for r in records for p in r.parts()))


def admits(part: Part, run_id: str, node_type: str, flags: int) -> bool:
    """Whether one passage row is inside a part (the rule the indexes' own filters implement)."""
    return (
        (part.runs is None or run_id in part.runs)
        and node_type in part.node_types
        and (part.hidden or not flags & HIDDEN)
        and (not part.current_only or not flags & OFF_CURRENT)
    )
