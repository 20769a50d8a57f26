"""The embedded extractor (DESIGN §5): offline and deterministic.

It returns the whole sentences of in-scope nodes that contain a required keyword and read as a
statement a person would highlight: not a heading, table row or code block, not a question or a
lead-in to a list, not a one- or two-word line or a list fragment, not a bare reply to the last
turn ("Exactly — …"), a short line leaning on the one before ("It rejects it.") or a musing
("I was thinking …"). It speaks the same untrusted pointer
language an LLM does and goes through the same gate.
"""

from __future__ import annotations

import re

from nexus_assets.core.models import Run, Topic
from nexus_assets.extract.scope import in_scope_nodes, keyword_pattern
from nexus_assets.extract.sentences import ITEM, PROSE, sentence_units

# v2 keeps statements only (v1 kept every keyword sentence). A new identity makes a vault
# extracted by v1 ask v2 again, so `nexus eval --extractors` can score both on one gold.
EXTRACTOR_VERSION = "embedded-v2"

# Sentence ends, after any closing quotes, brackets or emphasis marks.
_CLOSERS = "\"'”’»)]}*_`」』）】"
_QUESTION = "?？؟⁇⁈"
_TERMINATED = ".!…‼。！｡．।॥۔։።" + _QUESTION
# Scripts written without spaces between words: a sentence in them is counted by characters.
_UNSPACED = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\u0e00-\u0e7f]")
# A reply set off by a dash ("Exactly — that still holds") answers the last turn rather than
# stating something; "Yes, the vault keeps history." still states it. Thinking aloud decides nothing.
_REPLY = re.compile(
    r"(?:yes|no|yeah|yep|nope|exactly|right|sure|ok|okay|thanks|thank you|great|good|correct|indeed)"
    r"\s*+(?:[—–]|-\s)",
    re.IGNORECASE,
)
_MUSING = re.compile(
    r"(?:i was thinking|i'm thinking|i am thinking|i think|i guess|i wonder|maybe|perhaps|what if|not sure)\b",
    re.IGNORECASE,
)

# A short sentence ending on a pronoun ("The compiler rejects it.") leans on the one before it.
_LEANING = frozenset({"it", "this", "that", "these", "those", "them"})
SHORT_WORDS = 5

MIN_WORDS = 3  # a shorter terminated sentence is a one- or two-word line ("Also sync.")
MIN_WORDS_UNTERMINATED = 5  # a list item or line without a full stop is a fragment below this
MIN_UNSPACED_CHARS = 6


def extract_embedded(topic: Topic, run: Run) -> list[dict]:
    policy = topic.extraction_policy
    pattern = keyword_pattern(policy.required_keywords or ())
    pointers = []
    for node, text in in_scope_nodes(policy, run, topic):
        for start, end, kind in sentence_units(text):
            sentence = text[start:end]
            if (pattern is None or pattern.search(sentence)) and is_statement(sentence, kind):
                pointers.append({"topic_id": topic.topic_id, "json_path": node.path, "verbatim_quote": sentence})
    return pointers


def is_statement(sentence: str, kind: str = PROSE) -> bool:
    """Whether a sentence reads as a statement a person would keep, not a heading, a question or
    a fragment. `kind` is its place in the markdown (`sentences.sentence_units`)."""
    if kind not in (PROSE, ITEM):
        return False
    body = sentence.rstrip(_CLOSERS)
    if not body:
        return False
    last = body[-1]
    if last in _QUESTION or last in ":：":
        return False
    terminated = last in _TERMINATED
    if _UNSPACED.search(sentence):
        return len(sentence) >= MIN_UNSPACED_CHARS
    words = [w for w in sentence.split() if any(c.isalnum() for c in w)]
    if len(words) < (MIN_WORDS if terminated else MIN_WORDS_UNTERMINATED):
        return False
    if len(words) < SHORT_WORDS and words[-1].strip(_TERMINATED + _CLOSERS).lower() in _LEANING:
        return False
    opening = sentence.lstrip(_CLOSERS + "\"'“‘(")
    return not (_REPLY.match(opening) or _MUSING.match(opening))
