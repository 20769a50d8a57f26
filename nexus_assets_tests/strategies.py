"""Shared hypothesis strategies and builders for the compiler-core tests.

Everything here is pure: Nexus run documents, the paths that name their nodes in the several
syntaxes extractors write, pointers that quote those nodes, and small builders for occurrences.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from nexus_assets.core.models import Occurrence, Run
from nexus_assets.gate.rules import validate_pointer
from nexus_assets.ingest.formats.nexus import nexus_run

TOPIC = "nexus-server-sync"

# --- text -----------------------------------------------------------------------------------

WHITESPACE = " \t\n\r\u00a0\u2003\u3000"
ASCII = "abcdefXYZ019.,!?;:-_()"
QUOTES_AND_SLASHES = "'\"\\`"
COMBINING = "\u0301\u0308\u0327\u20dd"
CJK = "日本語中文字한국어ひらがなカタカナ"
ASTRAL = "😀🎉🧱👍🏽𝔘𐍈𝕏🀄\U0001f9ea\U00020000"
COMPAT = "ﬁﬂＡＢｃ①²ßẞİı\u200d\u200b"

_alphabet = st.one_of(
    st.sampled_from(ASCII),
    st.sampled_from(WHITESPACE),
    st.sampled_from(QUOTES_AND_SLASHES),
    st.sampled_from(COMBINING),
    st.sampled_from(CJK),
    st.sampled_from(ASTRAL),
    st.sampled_from(COMPAT),
    st.characters(codec="utf-8"),
)

#: Random unicode text: emoji, combining marks, CJK, astral-plane characters, whitespace runs.
unicode_text = st.text(alphabet=_alphabet, min_size=1, max_size=40)

# Object keys with quotes, backslashes, dots, dashes, spaces and unicode (no control characters:
# those are covered, on their own, by the path round-trip tests).
KEY_CHARS = "ab'\"\\.- üé日😀$*@[]()`"
RESERVED_MESSAGE_KEYS = {"role", "content", "timestamp"}
RESERVED_RUN_KEYS = {"run_id", "status", "started_at", "messages"}
weird_keys = st.text(alphabet=st.sampled_from(KEY_CHARS), min_size=1, max_size=6)

ROLES = ["user", "assistant", "system", "tool", "human", "developer", "narrator"]

TIMESTAMPS = [
    "2024-03-01T10:00:00Z",
    "2024-03-01T12:00:00+02:00",  # == 10:00Z, ties with the one above
    "2024-03-01T09:30:00",  # naive: taken as UTC
    "2024-02-29T23:59:59.5-05:00",
    1709287200,  # 2024-03-01T10:00:00Z as epoch seconds
    1709280000.25,
    "not a timestamp",  # unreadable: treated as missing
]


# --- paths ----------------------------------------------------------------------------------


def sq(key: str) -> str:
    """A single-quoted bracket selector (`['k']`) with `\\` and `'` escaped."""
    return "['" + key.replace("\\", "\\\\").replace("'", "\\'") + "']"


def dq(key: str) -> str:
    """A double-quoted bracket selector (`["k"]`) with `\\` and `"` escaped."""
    return '["' + key.replace("\\", "\\\\").replace('"', '\\"') + '"]'


def message_paths(index: int, count: int, key: str = "content") -> list[str]:
    """Every syntax an extractor might use for `messages[index][key]` in a run of `count` messages."""
    neg = index - count
    paths = [
        f"$['messages'][{index}]{sq(key)}",
        f'$["messages"][{index}]{dq(key)}',
        f"$['messages'][{neg}]{sq(key)}",
        f"$.messages[{index}]{sq(key)}",
        f"$.messages[{neg}]{dq(key)}",
    ]
    if key.isascii() and key.isidentifier():
        paths += [
            f"$.messages[{index}].{key}",
            f"$.messages[{neg}].{key}",
            f"messages[{index}].{key}",
        ]
    return paths


# --- runs -----------------------------------------------------------------------------------


@st.composite
def nexus_documents(draw, run_id: str | None = None, texts=unicode_text, max_messages: int = 5) -> dict:
    """A valid Nexus run document with random text, optional timestamps and oddly named extra keys."""
    if run_id is None:
        run_id = draw(st.text(alphabet=st.sampled_from("abcxyz0189-_.:"), min_size=1, max_size=12))
    messages = []
    for _ in range(draw(st.integers(1, max_messages))):
        message: dict[str, Any] = {"role": draw(st.sampled_from(ROLES)), "content": draw(texts)}
        if draw(st.booleans()):
            message["timestamp"] = draw(st.sampled_from(TIMESTAMPS))
        for key in draw(st.lists(weird_keys, max_size=2, unique=True)):
            if key not in RESERVED_MESSAGE_KEYS:
                message[key] = draw(texts)
        messages.append(message)
    document: dict[str, Any] = {"run_id": run_id, "status": draw(st.sampled_from(["OPEN", "CLOSED"]))}
    if draw(st.booleans()):
        document["started_at"] = draw(st.sampled_from(TIMESTAMPS))
    for key in draw(st.lists(weird_keys, max_size=2, unique=True)):
        if key not in RESERVED_RUN_KEYS:
            document[key] = draw(texts)
    document["messages"] = messages
    return document


@st.composite
def quotes_of(draw, text: str) -> str:
    """A non-blank substring of `text` (by code point)."""
    visible = [i for i, ch in enumerate(text) if not ch.isspace()]
    if not visible:
        return ""
    anchor = draw(st.sampled_from(visible))  # the quote contains at least this character
    start = draw(st.integers(0, anchor))
    end = draw(st.integers(anchor + 1, len(text)))
    return text[start:end]


@dataclass(frozen=True)
class Target:
    """One string node of a message, named in every syntax, and a quote lifted from it."""

    steps: tuple
    node: str
    quote: str
    paths: tuple[str, ...]


@st.composite
def quoting_targets(draw, document: dict) -> Target:
    """Pick a message string field (content or an extra key) and a non-blank quote from it."""
    messages = document["messages"]
    candidates = [
        (i, key)
        for i, m in enumerate(messages)
        for key, value in m.items()
        if isinstance(value, str) and value.strip() and key != "role"
    ]
    i, key = draw(st.sampled_from(candidates))
    node = messages[i][key]
    quote = draw(quotes_of(node))
    return Target(("messages", i, key), node, quote, tuple(message_paths(i, len(messages), key)))


def has_quotable_text(document: dict) -> bool:
    return any(
        isinstance(v, str) and v.strip() and k != "role" for m in document["messages"] for k, v in m.items()
    )


# --- occurrences ----------------------------------------------------------------------------


def make_run(run_id: str, contents: list[str] | str, *, status: str = "OPEN", started_at: Any = None,
             timestamps: list[Any] | None = None, roles: list[str] | None = None) -> Run:
    """A Nexus run with one message per content string."""
    if isinstance(contents, str):
        contents = [contents]
    messages = []
    for i, content in enumerate(contents):
        message: dict[str, Any] = {"role": (roles[i] if roles else ("user" if i % 2 == 0 else "assistant")),
                                   "content": content}
        if timestamps is not None and timestamps[i] is not None:
            message["timestamp"] = timestamps[i]
        messages.append(message)
    document: dict[str, Any] = {"run_id": run_id, "status": status, "messages": messages}
    if started_at is not None:
        document["started_at"] = started_at
    return nexus_run(document)


def pointer(quote: str, index: int = 0, topic_id: str = TOPIC, path: str | None = None) -> dict:
    return {
        "topic_id": topic_id,
        "json_path": path if path is not None else f"$.messages[{index}].content",
        "verbatim_quote": quote,
    }


def occ(run: Run, quote: str, index: int = 0, topic_id: str = TOPIC) -> Occurrence:
    """The occurrence the gate makes of `quote` in message `index` of `run` (must pass)."""
    result = validate_pointer(pointer(quote, index, topic_id), topic_id=topic_id, run=run)
    assert isinstance(result, Occurrence), result
    return result


def statuses(*runs: Run) -> dict[str, str]:
    return {r.run_id: r.status for r in runs}


# --- corpora for resolution -----------------------------------------------------------------

# A small vocabulary so that independent runs say the same thing (LINK), quote parts of each
# other (SUPERSEDE) and overlap partially (APPEND); variants differ only by case, width,
# ligatures or whitespace so they share a fingerprint.
WORDS = ["sync", "Sync", "SYNC", "ｓｙｎｃ", "brick", "bricks", "is", "runs", "nightly", "hourly",
         "ﬁne", "fine", "Straße", "STRASSE", "日本", "🧱", "e\u0301", "é"]
SEPARATORS = [" ", " ", "  ", "\t", "\n", "\u00a0"]
RUN_IDS = ["run-a", "run-b", "run-c", "run-d", "run-e"]


@st.composite
def sentences_of_words(draw) -> str:
    words = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=5))
    out = words[0]
    for w in words[1:]:
        out += draw(st.sampled_from(SEPARATORS)) + w
    return out + draw(st.sampled_from([".", "", "!", " ."]))


@st.composite
def word_quote(draw, text: str) -> str:
    """A quote starting and ending at word boundaries, sometimes with trailing whitespace."""
    import re

    spans = [m.span() for m in re.finditer(r"\S+", text)]
    i = draw(st.integers(0, len(spans) - 1))
    j = draw(st.integers(i, len(spans) - 1))
    start, end = spans[i][0], spans[j][1]
    if draw(st.integers(0, 3)) == 0:
        while end < len(text) and text[end].isspace():
            end += 1
    return text[start:end]


@dataclass
class Corpus:
    runs: dict[str, Run]
    pointers: list[tuple[str, dict]]  # (run_id, raw pointer)
    ingestion_seq: dict[str, int]

    def run_status(self) -> dict[str, str]:
        return {rid: r.status for rid, r in self.runs.items()}

    def occurrences(self, topic_id: str = TOPIC) -> list[Occurrence]:
        out = []
        for run_id, raw in self.pointers:
            result = validate_pointer(raw, topic_id=topic_id, run=self.runs[run_id])
            if isinstance(result, Occurrence):
                out.append(result)
        return out


@st.composite
def corpora(draw, max_runs: int = 4, max_pointers: int = 10, statuses=("OPEN", "CLOSED")) -> Corpus:
    """Several runs (OPEN/CLOSED, timestamps present, offset, naive, epoch, garbage or missing)
    and pointers quoting them at word boundaries, in assorted path syntaxes."""
    run_ids = draw(st.lists(st.sampled_from(RUN_IDS), min_size=1, max_size=max_runs, unique=True))
    runs: dict[str, Run] = {}
    for rid in run_ids:
        count = draw(st.integers(1, 3))
        document: dict[str, Any] = {
            "run_id": rid,
            "status": draw(st.sampled_from(statuses)),
            "messages": [
                {"role": draw(st.sampled_from(["user", "assistant"])), "content": draw(sentences_of_words())}
                for _ in range(count)
            ],
        }
        for m in document["messages"]:
            if draw(st.booleans()):
                m["timestamp"] = draw(st.sampled_from(TIMESTAMPS))
        if draw(st.booleans()):
            document["started_at"] = draw(st.sampled_from(TIMESTAMPS))
        runs[rid] = nexus_run(document)
    pointers = []
    for _ in range(draw(st.integers(1, max_pointers))):
        rid = draw(st.sampled_from(run_ids))
        messages = runs[rid].document["messages"]
        i = draw(st.integers(0, len(messages) - 1))
        quote = draw(word_quote(messages[i]["content"]))
        path = draw(st.sampled_from(message_paths(i, len(messages))))
        pointers.append((rid, {"topic_id": TOPIC, "json_path": path, "verbatim_quote": quote}))
    order = draw(st.permutations(run_ids))
    ingested = order[: draw(st.integers(0, len(order)))]
    return Corpus(runs, pointers, {rid: seq for seq, rid in enumerate(ingested)})
