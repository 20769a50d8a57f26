"""The record's splitter (DESIGN §3.1, invariant 17): every passage is the exact, trimmed slice of its
node, in order, never overlapping; its id is sha256(run_id:json_path:start:end); private reasoning
and the harness's text are not the person's or the assistant's words."""

from __future__ import annotations

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from nexus_assets.ingest.passages import (
    MAX_PASSAGE_CHARS,
    is_conversational,
    passage_id,
    passage_spans,
)

NODE_TYPES = ["user_message", "assistant_message", "system_message", "tool_call", "tool_message", "other"]
FORMATS = ["nexus", "chatgpt", "claude", "claude-code", "codex"]
# Text with the shapes the splitter cuts at: sentence ends, list markers, headings, fences, tables,
# code, CJK, emoji, tags, long runs without a space.
PIECES = st.sampled_from([
    "The vault is one file.", " It keeps history.", "\n- a list item", "\n1. first step", "\n# A heading\n", "\n```py\nx = 1\n```\n",
    "| a | b |\n|---|---|\n| 1 | 2 |", "这是一个句子。", "还有一个！", "🍛 spicy?", "<antThinking>private</antThinking>", " ", "\n\n",
    "e.g. this", "Dr. Who", "x" * 50, "\t", "…", "<system-reminder>harness</system-reminder>",
])


@settings(max_examples=300, deadline=None)
@given(st.lists(PIECES, max_size=30).map("".join), st.sampled_from(NODE_TYPES), st.sampled_from(FORMATS))
def test_every_passage_is_its_nodes_exact_trimmed_slice_in_order(text, node_type, run_format):
    spans = passage_spans(text, node_type, run_format)
    last = 0
    for s in spans:
        piece = text[s.start : s.end]
        assert piece and piece == piece.strip(), "a passage is never empty and never begins or ends with whitespace"
        assert s.start >= last, "passages are in order and never overlap"
        assert len(piece) <= MAX_PASSAGE_CHARS
        last = s.end


def test_a_long_span_is_cut_into_pieces_that_cover_it():
    text = ("word " * 3000).strip()
    spans = passage_spans(text, "assistant_message", "nexus")
    assert len(spans) > 1 and all(s.end - s.start <= MAX_PASSAGE_CHARS for s in spans)
    assert " ".join(text[s.start : s.end] for s in spans) == text


def test_claude_reasoning_is_never_a_passage_and_tool_output_is_read_by_the_line():
    text = "<antThinking>I should keep this private.</antThinking> The vault is one file."
    said = [text[s.start : s.end] for s in passage_spans(text, "assistant_message", "claude")]
    assert not any("private" in p for p in said) and "The vault is one file." in said
    lines = [s.kind for s in passage_spans("Error: disk full\nretrying in 5 s\n", "tool_message", "codex")]
    assert lines == ["line", "line"]


def test_only_the_persons_words_of_a_harness_wrapped_prompt_are_passages():
    text = "<ide_opened_file>The user opened src/app.ts</ide_opened_file>Keep the retry count at three."
    said = [text[s.start : s.end] for s in passage_spans(text, "user_message", "claude-code")]
    assert said == ["Keep the retry count at three."]


def test_passage_ids_follow_the_contract():
    assert passage_id("r1", "$['messages'][0]['content']", 3, 9) == hashlib.sha256(b"r1:$['messages'][0]['content']:3:9").hexdigest()


def test_what_counts_as_the_conversation():
    assert is_conversational("user_message", False) and is_conversational("assistant_message", False)
    assert not is_conversational("assistant_message", True), "a hidden message is read only when a topic asks"
    assert not any(is_conversational(t, False) for t in ("tool_message", "tool_call", "system_message", "other"))
