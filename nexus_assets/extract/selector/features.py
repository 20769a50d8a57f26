"""What the selector knows about one candidate sentence (pure: text in, numbers out).

Two parts: the sentence's MiniLM vector (computed elsewhere, once per fingerprint) and the scalars
below, in `SCALARS` order. Scores that come from a model (relevance, example similarity) are
rounded to `SCORE_DECIMALS` before they enter a row, so floating-point noise between machines never
reaches a decision (docs/invariants.md inv. 3); form features are exact functions of the text.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

SCORE_DECIMALS = 3

NODE_TYPES = ("user_message", "assistant_message", "tool_message", "tool_call", "system_message", "other")
KINDS = ("prose", "item", "heading", "table", "code")

# The agent narrating what it is about to do or just did ("I'll update…", "Now update the config…",
# "Let me check…", "Here's the plan:"), and its framing of a turn. Chatter, not a note.
_NARRATION = re.compile(
    r"(?:i(?:'|’)ll|i will|i(?:'|’)m going to|i am going to|let me|let(?:'|’)s|now(?:,)? (?:i|let|we|update|add|run|check|let(?:'|’)s|the)"
    r"|next,? (?:i|we|let)|first,? (?:i|let)|i(?:'|’)ve|i have (?:now )?(?:updated|created|added|made|fixed|changed|implemented|removed|written)"
    r"|here(?:'|’)s|here is|here are|great[,!]|perfect[,!]|done[.!]|all (?:other|tests|the tests)|the (?:changes|updates) )",
    re.IGNORECASE,
)
_CHATTER = re.compile(
    r"(?:sure|certainly|of course|absolutely|great question|good question|happy to help|glad to help|i can help"
    r"|i hope|hope (?:this|that|it) helps|good luck|feel free|let me know|don(?:'|’)t hesitate|would you like|do you want"
    r"|thank you|thanks|you(?:'|’)re welcome|no problem|i(?:'|’)m sorry|i apologi[sz]e|my apologies)\b",
    re.IGNORECASE,
)
# A request or rule given to someone: a verb first ("Keep the retry count at three"), or a must.
_IMPERATIVE_VERBS = frozenset(
    """use keep make add remove set don't dont do never always ensure avoid change create put store move write run
    please try install replace rename delete update fix include exclude check call send let go stop start switch
    turn give take build deploy configure enable disable allow limit prefer skip show hide return save load
    open close read follow note remember consider""".split()
)
_MODAL = re.compile(r"\b(?:must|should|need to|needs to|have to|has to|required|requires|mustn't|shouldn't|never|always)\b", re.IGNORECASE)
_FIRST_PERSON = re.compile(r"\b(?:i|i'm|i’m|i've|i’ve|i'd|i’d|my|me|mine|we|our|us|we're|we’re)\b", re.IGNORECASE)
_SECOND_PERSON = re.compile(r"\b(?:you|your|you're|you’re|yours)\b", re.IGNORECASE)
_NUMBER = re.compile(r"\d")
_DATE = re.compile(
    r"\b(?:\d{4}-\d{2}(?:-\d{2})?|\d{1,2}[/.]\d{1,2}[/.]\d{2,4}|(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.? \d{1,2}"
    r"|\d{1,2} (?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*|monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b",
    re.IGNORECASE,
)
_NAME = re.compile(r"(?<=[a-z,;:] )[A-Z][a-z]+")
_PATH = re.compile(r"(?:[\w.-]+/)+[\w.-]+|\b[\w-]+\.(?:py|js|ts|tsx|jsx|json|md|yaml|yml|toml|html|css|sh|txt|go|rs|java|rb|sql|env)\b")
_TOOL_OUTPUT = re.compile(
    r"\x1b\[|^\s*\d+\s*→|successfully|^\s*(?:error|warning|traceback|info|debug)\b[:\s]|^\s*[-drwx]{10}\s|\bexit code\b|^\s*at \S+ \(|^\s*\$ ",
    re.IGNORECASE | re.MULTILINE,
)
_CODE = re.compile(
    r"[{;]\s*$|^\s*[}\])]|=>|::|==|!=|&&|\|\||\+=|\w\(\)|\w\[\w*\]|^\s*(?:def|class|import|from|return|const|let|var"
    r"|function|public|private|static|async|await|SELECT|INSERT|UPDATE|DELETE|CREATE)\s+[\w.*]+\s*(?:[(=:{,]|\bimport\b|$)"
    r"|^\s*[\w.]+\s*=\s*\S|\$\{|\b(?:null|undefined)\s*[,;)}]|`"
)
_MARKUP = re.compile(r"</?[A-Za-z][\w:-]*(?:\s+[\w:-]+(?:\s*=\s*(?:\"[^\"]*\"|'[^']*'|[^\s>]+))?)*\s*/?>")
_WORD = re.compile(r"\w+")
_QUESTION = "?？؟"
_CLOSERS = "\"'”’»)]}*_`」』）】"
_UNSPACED = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\u0e00-\u0e7f]")
_STOP = frozenset(
    """the a an and or of to in on for with is are was were be been it this that these those as at by from
    i you we they he she my your our their me us them not no yes do does did so but if then than there here
    can will would should could have has had just also very""".split()
)


def is_narration(text: str) -> bool:
    """The agent narrating what it is about to do or just did ("I'll update…", "Now let me…",
    "I've added…", "Here's the plan:"): never a note when the assistant says it (LABELLING.md)."""
    return bool(_NARRATION.match(text.lstrip(_CLOSERS + "\"'“‘(*_#>- ")))


def words_of(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def content_words(text: str) -> set[str]:
    return {w for w in words_of(text) if w not in _STOP and len(w) > 2}


def restatement(sentence: str, previous_turn: str | None) -> float:
    """The share of the sentence's content words that the previous turn (the other speaker's
    message before this one) already holds: an assistant echoing a request scores high."""
    mine = content_words(sentence)
    if not mine or not previous_turn:
        return 0.0
    return round(len(mine & content_words(previous_turn)) / len(mine), SCORE_DECIMALS)


FORM = (
    "words_log", "chars_log", "terminated", "question", "narration", "chatter", "imperative", "modal",
    "first_person", "second_person", "number", "date", "name", "path", "tool_output", "code", "markup",
    "letters", "digits", "upper", "unspaced", "emoji",
)


def form_features(text: str) -> list[float]:
    """How the sentence is written, in `FORM` order."""
    words = text.split()
    opening = text.lstrip(_CLOSERS + "\"'“‘(*_#>- ")
    first = words_of(opening[:40])[:1]
    body = text.rstrip(_CLOSERS + " ")
    chars = len(text)
    visible = max(1, sum(not c.isspace() for c in text))
    tags = sum(m.end() - m.start() for m in _MARKUP.finditer(text))
    return [
        math.log1p(len(words)),
        math.log1p(chars),
        float(bool(body) and body[-1] in ".!…。！"),
        float(bool(body) and body[-1] in _QUESTION),
        float(bool(_NARRATION.match(opening))),
        float(bool(_CHATTER.match(opening))),
        float(bool(first) and first[0] in _IMPERATIVE_VERBS),
        float(bool(_MODAL.search(text))),
        float(bool(_FIRST_PERSON.search(text))),
        float(bool(_SECOND_PERSON.search(text))),
        float(bool(_NUMBER.search(text))),
        float(bool(_DATE.search(text))),
        float(bool(_NAME.search(text))),
        float(bool(_PATH.search(text))),
        float(bool(_TOOL_OUTPUT.search(text))),
        float(bool(_CODE.search(text))),
        min(1.0, tags / chars) if chars else 0.0,
        sum(c.isalpha() for c in text) / visible,
        sum(c.isdigit() for c in text) / visible,
        sum(c.isupper() for c in text) / visible,
        float(bool(_UNSPACED.search(text))),
        float(sum(1 for c in text if ord(c) >= 0x2600) > 0),
    ]


CONTEXT = (
    "relevance", "message_relevance", "relevance_gap", "conversation_relevance", "keyword",
    "relevance_rank_in_conversation", "relevance_over_conversation_mean",
    "position_in_message", "first_in_message", "last_in_message", "sentences_in_message_log", "position_in_conversation",
    "restatement", "keep_example", "drop_example", "has_keep_examples", "has_drop_examples",
)
SCALARS = (*CONTEXT, *(f"node_{t}" for t in NODE_TYPES), *(f"kind_{k}" for k in KINDS), *FORM)


@dataclass(frozen=True)
class Context:
    """Where a sentence sits and how it scores against the topic (every score already rounded)."""

    relevance: float
    message_relevance: float
    conversation_relevance: float
    keyword: bool
    rank_in_conversation: float  # share of the conversation's scored candidates less relevant than this one
    conversation_mean: float  # mean relevance of the conversation's scored candidates
    index_in_message: int
    sentences_in_message: int
    node_position: int
    nodes_in_conversation: int
    node_type: str
    kind: str
    restatement: float
    keep_example: float | None  # best cosine to a keep example; None when the topic has none
    drop_example: float | None


def scalar_features(text: str, ctx: Context) -> list[float]:
    """The sentence's scalars, in `SCALARS` order."""
    n = ctx.sentences_in_message
    return [
        ctx.relevance,
        ctx.message_relevance,
        round(ctx.message_relevance - ctx.relevance, SCORE_DECIMALS),
        ctx.conversation_relevance,
        float(ctx.keyword),
        ctx.rank_in_conversation,
        round(ctx.relevance - ctx.conversation_mean, SCORE_DECIMALS),
        ctx.index_in_message / (n - 1) if n > 1 else 0.0,
        float(ctx.index_in_message == 0),
        float(ctx.index_in_message == n - 1),
        math.log1p(n),
        ctx.node_position / (ctx.nodes_in_conversation - 1) if ctx.nodes_in_conversation > 1 else 0.0,
        ctx.restatement,
        ctx.keep_example if ctx.keep_example is not None else 0.0,
        ctx.drop_example if ctx.drop_example is not None else 0.0,
        float(ctx.keep_example is not None),
        float(ctx.drop_example is not None),
        *(float(ctx.node_type == t) for t in NODE_TYPES),
        *(float(ctx.kind == k) for k in KINDS),
        *form_features(text),
    ]
