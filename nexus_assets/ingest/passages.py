"""Passages (DESIGN §1, §3.1): every sentence and list item a run's text nodes hold, each with its
exact address, so that nothing said is lost whatever the extractor keeps (invariant 17).

Pure: a node's text in, spans out. The splitter is the offline extractor's (`core/sentences.py`),
so a brick's text and a passage's text align wherever the brick is a whole sentence. What a span
is read from follows how a person reads a conversation:
- user and assistant text by the sentence; in a coding agent's session only the person's spans of a
  string the harness also wrote into (`harness.person_spans`), each at its own offsets;
- an old Claude export's <antThinking> spans (private reasoning) are never passages;
- tool calls and tool output by the line (`tool_line_units`): they are passages too, but not
  *conversational* ones — recall reads them only for a topic that asks for them (§3.1);
- system and harness text, and hidden messages, likewise: stored, read only when a topic asks.

`passage_id = sha256(run_id + ":" + json_path + ":" + start + ":" + end)` over the normalized path,
so a passage keeps its id across run versions as long as its text stays where it was.
"""

from __future__ import annotations

from dataclasses import dataclass

from nexus_assets.core.fingerprint import sha256_hex
from nexus_assets.core.sentences import sentence_units, tool_line_units
from nexus_assets.ingest.formats.claude import THINKING, tagged_regions
from nexus_assets.ingest.formats.harness import person_spans
from nexus_assets.ingest.formats.registry import names as format_names

# The splitter's identity: passages built by another splitter are built again (a sync notices).
SPLITTER_VERSION = "passages-v1"
# Node types whose text is what was said between the person and the assistant.
CONVERSATIONAL = frozenset({"user_message", "assistant_message"})
TOOL_NODE_TYPES = frozenset({"tool_call", "tool_message"})
# A passage longer than this is cut into pieces at these many characters (a code block of a
# thousand lines is still recallable, and no one index entry holds a book).
MAX_PASSAGE_CHARS = 4_000


@dataclass(frozen=True)
class PassageSpan:
    start: int
    end: int
    kind: str  # prose | item | heading | table | code | line


def passage_id(run_id: str, json_path: str, start: int, end: int) -> str:
    return sha256_hex(f"{run_id}:{json_path}:{start}:{end}")


def is_conversational(node_type: str, hidden: bool) -> bool:
    """What every run's record holds for any question: the person's and the assistant's own words."""
    return node_type in CONVERSATIONAL and not hidden


def passage_spans(text: str, node_type: str, run_format: str) -> list[PassageSpan]:
    """The passages of one node's text, in order, non-overlapping, none empty, none with
    surrounding whitespace (text[start:end] is verbatim)."""
    if not text or not text.strip():
        return []
    if node_type in TOOL_NODE_TYPES:
        return _capped([(s, e, "line") for s, e in tool_line_units(text)], text)
    if node_type == "user_message" and run_format in format_names("session"):
        spans = person_spans(text)
        if spans != [(0, len(text))]:
            units = [(s + a, s + b, kind) for s, e in spans for a, b, kind in sentence_units(text[s:e])]
            return _capped(units, text)
    if run_format == "claude" and "<antThinking" in text:
        # The text between reasoning spans, each split on its own: a sentence never runs into one.
        units, at = [], 0
        for start, end, kind in tagged_regions(text) + [(len(text), len(text), THINKING)]:
            if kind != THINKING:
                continue
            units += [(at + a, at + b, k) for a, b, k in sentence_units(text[at:start])]
            at = end
        return _capped(units, text)
    return _capped(sentence_units(text), text)


def _capped(units: list[tuple[int, int, str]], text: str) -> list[PassageSpan]:
    out: list[PassageSpan] = []
    for start, end, kind in units:
        while end - start > MAX_PASSAGE_CHARS:
            cut = _cut(text, start, start + MAX_PASSAGE_CHARS)
            piece = _stripped(text, start, cut)
            if piece:
                out.append(PassageSpan(*piece, kind))
            start = cut
        piece = _stripped(text, start, end)
        if piece:
            out.append(PassageSpan(*piece, kind))
    return out


def _cut(text: str, start: int, limit: int) -> int:
    """Where an over-long span is cut: the last line break or space before `limit`, else `limit`."""
    for sep in ("\n", " "):
        at = text.rfind(sep, start + MAX_PASSAGE_CHARS // 2, limit)
        if at > start:
            return at
    return limit


def _stripped(text: str, start: int, end: int) -> tuple[int, int] | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None
