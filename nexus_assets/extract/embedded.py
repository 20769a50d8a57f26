"""The embedded extractor (docs/quality.md): offline and deterministic.

It returns the whole sentences of in-scope nodes that contain a required keyword, read as a
statement a person would highlight, and are about the topic:
- a statement: not a heading, label (`Title: …`), table row, code, markup or data dump, not a
  question or a lead-in to a list, not a one- or two-word line or a list fragment, not a bare reply
  to the last turn ("Exactly — …"), a short line leaning on the one before ("It rejects it."), a
  musing ("I was thinking …") or the assistant's framing of its turn ("Sure, I can help …",
  "Good luck with your marathons!");
- not inside an old Claude export's <antThinking> (private reasoning) or <antArtifact> span (an
  artifact, kept only for a topic whose target_node_types name `artifact`);
- about the topic (`relevance.py`): a keyword in a postal address is not the topic.
It speaks the same untrusted pointer language an LLM does and goes through the same gate.
"""

from __future__ import annotations

import re

from nexus_assets.core.models import Run, Topic
from nexus_assets.core.wording import is_title_case
from nexus_assets.extract.examples import example_verdicts, fit_taught, has_examples, taught_verdicts
from nexus_assets.extract.relevance import Vectors, relevant
from nexus_assets.core.sentences import tool_line_units
from nexus_assets.ingest.scope import TOOL_TYPES, in_scope_nodes, is_tool_line
from nexus_assets.core.sentences import ITEM, PROSE, sentence_units
from nexus_assets.ingest.formats.claude import ARTIFACT, region_of, tagged_regions
from nexus_assets.ingest.formats.harness import person_spans
from nexus_assets.ingest.formats.registry import names as format_names

# v2 kept statements only (v1 every keyword sentence); v3 also leaves out chatter, labels, code,
# markup and Claude's tagged reasoning, and keeps what is relevant to the topic. A new identity makes
# a vault extracted by an earlier version ask v3 again, so `nexus eval --extractors` can score both.
EXTRACTOR_VERSION = "embedded-v3"
# v3's reading with teaching that generalises (`examples.fit_taught`): the topic's keep and drop
# examples fitted as one scorer, so a drop moves the topic's other sentences like it, not only its
# near twins. Its own identity: a topic v3 selected keeps v3 until `nexus sync --reselect`.
TAUGHT_VERSION = "embedded-v6"

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


def candidate_pointers(topic: Topic, run: Run) -> list[dict]:
    """Every keyword statement of the run's in-scope nodes, before relevance is judged."""
    policy = topic.extraction_policy
    pattern = topic.keyword_pattern()
    artifacts = "artifact" in (policy.target_node_types or ())
    pointers = []
    for node, text in in_scope_nodes(policy, run, topic):
        if node.node_type in TOOL_TYPES:
            # In scope only because the topic named tool output or calls: judged as what they are,
            # line by line, not by the rules for what a person says.
            for start, end in tool_line_units(text):
                line = text[start:end]
                if (pattern is None or pattern.search(line)) and is_tool_line(line):
                    pointers.append({"topic_id": topic.topic_id, "json_path": node.path, "verbatim_quote": line})
            continue
        regions = tagged_regions(text) if run.format == "claude" else []
        for start, end, kind in _units(text, run.format, node.node_type):
            sentence = text[start:end]
            if regions and (inside := region_of(regions, start, end)) is not None and not (inside == ARTIFACT and artifacts):
                continue
            if (pattern is None or pattern.search(sentence)) and is_statement(sentence, kind):
                pointers.append({"topic_id": topic.topic_id, "json_path": node.path, "verbatim_quote": sentence})
    return pointers


def _units(text: str, run_format: str, node_type: str) -> list[tuple[int, int, str]]:
    """The sentence units of a node. In a coding agent's session, only the person's spans of a
    string the harness also wrote into (`harness.person_spans`: an answer given through a tool,
    a prompt after the IDE's context) are read, each at its own offsets."""
    if run_format not in format_names("session") or node_type != "user_message":
        return sentence_units(text)
    spans = person_spans(text)
    if spans == [(0, len(text))]:
        return sentence_units(text)
    return [(s + a, s + b, kind) for s, e in spans for a, b, kind in sentence_units(text[s:e])]


def extract_embedded(topic: Topic, run: Run, vectors: Vectors | None = None) -> list[dict]:
    """The run's pointers for the topic; with `vectors` (texts → unit vectors), only the relevant ones."""
    return keep_relevant(topic, candidate_pointers(topic, run), vectors)


def keep_relevant(topic: Topic, pointers: list[dict], vectors: Vectors | None) -> list[dict]:
    """The pointers to keep: what the topic's examples decide (`examples.py`: like a drop example,
    not kept; like a keep example, kept even below `min_relevance`), else relevance."""
    if not pointers:
        return pointers
    texts = [p["verbatim_quote"] for p in pointers]
    verdicts = example_verdicts(texts, topic.examples, vectors) if has_examples(topic.examples) else [None] * len(texts)
    if vectors is None or topic.min_relevance <= 0:
        keep = [True] * len(texts)
    else:
        undecided = [t for t, v in zip(texts, verdicts) if v is None]
        judged = iter(relevant(undecided, topic, vectors))
        keep = [next(judged) if v is None else True for v in verdicts]
    return [p for p, k, v in zip(pointers, keep, verdicts) if v != "drop" and (k or v == "keep")]


def keep_taught(topic: Topic, pointers: list[dict], vectors: Vectors | None) -> list[dict]:
    """v6: what v3 keeps (`keep_relevant`), less what the topic's fitted examples pull toward drop;
    a near twin of a keep example (`EXAMPLE_BAR`) stays kept whatever the fit says."""
    kept = keep_relevant(topic, pointers, vectors)
    taught = fit_taught(topic.examples, vectors)
    if taught is None or not kept:
        return kept
    texts = [p["verbatim_quote"] for p in kept]
    twins = example_verdicts(texts, topic.examples, vectors)
    open_ = [i for i, v in enumerate(twins) if v != "keep"]
    drops = {open_[n] for n, v in enumerate(taught_verdicts([texts[i] for i in open_], taught, vectors)) if v == "drop"}
    return [p for i, p in enumerate(kept) if i not in drops]


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
    if _REPLY.match(opening) or _MUSING.match(opening) or _CHATTER.match(opening) or _LABEL.match(opening):
        return False
    if _LEANS_BACK.match(opening) or _POINTS_AWAY.search(body) or sentence.lstrip("*_ ")[:1] in _QUOTES:
        # "This command will start …" needs the text before it; a quoted line is drafted copy (a
        # tagline, a headline), not something said.
        return False
    if len(_EMOJI.findall(sentence)) >= 2:
        return False  # a post drafted for social media ("💚 Green Thumb Diaries … 🌿"); one emoji is just a message
    if not terminated and is_title_case(words):
        return False  # a heading written as a line ("The Pure Gardening Company Difference")
    return not (_markup(sentence) or _CODE.search(sentence) or _dump(sentence))


# The assistant's framing of its turn: what it is about to do, pleasantries, sign-offs.
_CHATTER = re.compile(
    r"(?:sure|certainly|of course|absolutely|great question|good question|happy to help|glad to help"
    r"|i(?:'d|’d| would) (?:be )?(?:happy|glad|love)|i can help|i'?m glad|i’m glad|let me|let's dive|let’s dive"
    r"|i hope|hope (?:this|that|it) helps|good luck|best of luck|feel free|let me know|don't hesitate|don’t hesitate"
    r"|would you like|do you want|thank you|thanks|you're welcome|you’re welcome|no problem|as an ai"
    r"|i'?m sorry|i’m sorry|i apologi[sz]e|my apologies|enjoy|have fun|congratulations|happy (?:running|gardening|coding))\b",
    re.IGNORECASE,
)
_LEANS_BACK = re.compile(r"(?:this|these|that|those|it|they|here|such)\b", re.IGNORECASE)
# "The schedule is set out below." frames what follows; it says nothing of its own.
_POINTS_AWAY = re.compile(r"\b(?:below|above|as follows|the following)\W*$", re.IGNORECASE)
_QUOTES = "\"'“‘«„"
_EMOJI = re.compile("[\U0001F300-\U0001FAFF\u2600-\u27BF]")
# A label and its value are a field of a form or a draft, not a statement ("Title: …", "Tags: …").
_LABEL = re.compile(
    r"[*_]*(?:title|subtitle|subject(?: line)?|headline|heading|tagline|slogan|caption|label|tags?|keywords|hashtags?"
    r"|meta (?:title|description)|cta|call to action|button(?: text)?|alt text|image|photo|url|link|email|phone|address"
    r"|name|date|time|location|price|cost|author|from|to|cc|re)[*_]*\s*[:：]",
    re.IGNORECASE,
)
# A tag of HTML or XML, opening, closing or empty ("<label for=…>", "</div>").
_MARKUP = re.compile(r"</?[A-Za-z][\w:-]*(?:\s+[\w:-]+(?:\s*=\s*(?:\"[^\"]*\"|'[^']*'|[^\s>]+))?)*\s*/?>")
# Code written as prose: statement ends, operators, calls and declarations no sentence has.
_CODE = re.compile(
    r"[{;]\s*$|^\s*[}\])]|=>|::|==|!=|&&|\|\||\+=|\w\(\)|\w\[\w*\]|^\s*(?:def|class|import|from|return|const|let|var"
    r"|function|public|private|static|async|await|SELECT|INSERT|UPDATE|DELETE|CREATE)\s+[\w.*]+\s*(?:[(=:{,]|\bimport\b|$)"
    r"|^\s*[\w.]+\s*=\s*\S|\$\{|\b(?:null|undefined)\s*[,;)}]"
)
_JSON_KEY = re.compile(r"[\"'][\w -]{1,40}[\"']\s*:")


def is_code_or_data(sentence: str) -> bool:
    """Code, markup or a data dump rather than a sentence (also what the conflict rules never read)."""
    return bool(_markup(sentence) or _CODE.search(sentence) or _dump(sentence))


def _markup(sentence: str) -> bool:
    """Mostly HTML or XML tags ("<label for=…>Input tokens</label>"); a sentence that mentions a
    tag in passing ("<script> is what a hostile export might contain; …") is still prose."""
    tagged = sum(m.end() - m.start() for m in _MARKUP.finditer(sentence))
    return tagged >= 0.2 * len(sentence) if tagged else False


def _dump(sentence: str) -> bool:
    """A data dump: JSON keys, or mostly digits and symbols rather than words."""
    if len(_JSON_KEY.findall(sentence)) >= 2:
        return True
    letters = sum(c.isalpha() for c in sentence)
    spaces = sum(c.isspace() for c in sentence)
    return letters < 0.55 * (len(sentence) - spaces)
