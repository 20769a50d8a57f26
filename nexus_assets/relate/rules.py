"""Related bricks and conflicts (docs/conflicts.md, seed 000 Tier 2): the rules, pure (no I/O, no Dagster).

Two bricks of a topic are *related* when their embeddings are at least the topic's
`related_threshold` alike and neither text contains the other (that is the uniqueness gate's
business: LINK or SUPERSEDE). Each brick keeps its `MAX_RELATED` nearest related bricks; a pair
is shown when either brick keeps the other. Similarities are rounded to `SIMILARITY_DECIMALS`
before they are compared, and ties go to the smaller brick id, so float noise between two
embeddings of one text (another batch, another run order) cannot flip a relation.

A related pair is a *conflict candidate* when both texts state a value of the same kind for the
same thing and each states one the other does not: numbers, quoted names, identifiers and keys,
proper names, yes/no (a negation or an antonym on one side only). Nexus never picks between them;
a person reads both. What a person would not call a disagreement is left out (issue 40, judged on
real exports):
- headings, titles, labels, subject lines and numbered plan steps ("Week 15 (September 10): …")
  state no value;
- values are compared after folding case, possessives, plurals and ordinals ("gardening's" is
  "gardening", "10th" is "10");
- "the same thing" means the two texts say much the same around their values (their other words
  overlap); two sentences that differ in everything but a shared word are not about one thing.
Conflicts come from statements only (issue 49, judged on a new user's coding-agent sessions): never
from tool output (a file listing's timestamps, a test run, a file dump with line numbers), code, or
the assistant narrating its work ("I'll set …", "Now update …"); and two names or identifiers
disagree only when they stand in the same place of two otherwise alike sentences and are of one
kind ("1-mile" is a distance, not a name: it never disagrees with "resonance").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from difflib import SequenceMatcher

from nexus_assets.core.fingerprint import normalize
from nexus_assets.core.wording import is_title_case
from nexus_assets.extract.embedded import is_code_or_data

SIMILARITY_DECIMALS = 4
MAX_RELATED = 10  # nearest related bricks kept per brick: bounds the records of a topic of near-repeats


def round_similarity(value: float) -> float:
    return round(float(value), SIMILARITY_DECIMALS)


def contains_either(a_text: str, b_text: str) -> bool:
    """One brick's normalized text holds the other's: not an overlap but a containment."""
    a, b = normalize(a_text), normalize(b_text)
    return a in b or b in a


def nearest(brick_id: str, candidates: list[tuple[str, float]], limit: int = MAX_RELATED) -> list[tuple[str, float]]:
    """The `limit` nearest of a brick's related candidates (id, rounded similarity): highest first,
    ties by id. Pure: the same candidates give the same list in any order."""
    ranked = sorted(((r, s) for r, s in candidates if r != brick_id), key=lambda c: (-c[1], c[0]))
    return ranked[:limit]


# Values a sentence states --------------------------------------------------------------------

_LIST_MARK = re.compile(r"^\s*(?:[-*•]|\(?\d{1,2}[.)])\s+")
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:[.,:/]\d+)*(?:\s?%)?(?![\w])")
_QUOTED = re.compile(
    r"(?:(?<![\w])'([^'\n]{1,80})'(?![\w]))|\"([^\"\n]{1,80})\"|`([^`\n]{1,80})`|“([^”\n]{1,80})”|‘([^’\n]{1,80})’|«([^»\n]{1,80})»"
)
_WORD = re.compile(r"[^\W_][\w'’./:@+-]*[\w]|[^\W_]", re.UNICODE)
# Mixed letters and digits, snake_case, camelCase, dotted or slashed names, keys like sk-123, ALLCAPS.
_IDENTIFIER = re.compile(
    r"^(?=.*[A-Za-z])(?:(?=.*\d)[\w.:/@+-]+|\w+_\w+|[a-z]+[A-Z]\w*|[\w-]+(?:[./][\w-]+)+|[A-Z][A-Z0-9]{1,})$"
)
_NEGATIONS = frozenset(
    "not no never none nothing nobody nowhere neither nor cannot without "
    "can't don't doesn't didn't isn't aren't wasn't weren't won't wouldn't shouldn't mustn't haven't hasn't".split()
)
# Pairs a statement and its reverse use; one side each is a flat yes/no disagreement.
_ANTONYMS = (
    ("true", "false"), ("yes", "no"), ("enabled", "disabled"), ("enable", "disable"), ("on", "off"),
    ("allowed", "forbidden"), ("always", "never"), ("open", "closed"), ("up", "down"), ("required", "optional"),
    ("sync", "async"), ("synchronous", "asynchronous"), ("public", "private"), ("before", "after"),
    ("increase", "decrease"), ("more", "less"), ("accept", "reject"), ("accepted", "rejected"), ("works", "fails"),
    ("succeeds", "fails"), ("include", "exclude"), ("included", "excluded"), ("mutable", "immutable"),
)
_OPPOSITE = {w: o for a, b in _ANTONYMS for w, o in ((a, b), (b, a))}
# Words that start a sentence capitalised without being a name.
_STOP = frozenset(
    "a an the this that these those it its we i you he she they our your their my is are was were be been "
    "and or but so if then than of to in on at by for with from as into about actually also just only still "
    "currently now new old please note yes no ok okay".split()
)


# What a text says is read once per text, not once per pair: relating a new brick looks again at the
# pairs of each partner it is near (an agent's similar pushes: each earlier one), and reading the same
# texts again was most of a push's relating. Pure functions of the text, their results frozen.
_TEXTS_HELD = 4096


@dataclass(frozen=True)
class Values:
    numbers: frozenset[str]
    quoted: frozenset[str]
    identifiers: frozenset[str]
    names: frozenset[str]
    negated: bool
    words: frozenset[str]  # every word, casefolded: what the two texts share besides their values


def _apostrophes(text: str) -> str:
    return text.replace("’", "'")


@lru_cache(maxsize=_TEXTS_HELD)
def values_of(text: str) -> Values:
    body = _LIST_MARK.sub("", text)  # "2. Use X" numbers a list item, it states nothing
    body = _ORDINAL.sub(r"\1", _EMPHASIS.sub("", body))
    quoted = frozenset(_fold(next(g for g in m.groups() if g is not None).strip()) for m in _QUOTED.finditer(body))
    unquoted = _QUOTED.sub(" ", body)
    numbers = frozenset(m.group().replace(" ", "") for m in _NUMBER.finditer(unquoted))
    tokens = [t.rstrip(".:/") for t in _WORD.findall(unquoted)]
    # A token that starts with its digits is a quantity with its unit ("1-mile", "10km"): its number
    # is among the numbers, and it names nothing.
    identifiers = frozenset(t.casefold() for t in tokens if _IDENTIFIER.match(t) and not t[:1].isdigit())
    names = frozenset(
        _fold(t)
        for i, t in enumerate(tokens)
        if i > 0 and t[:1].isupper() and not _IDENTIFIER.match(t) and t.casefold() not in _STOP and not _sentence_start(unquoted, t)
    )
    words = frozenset(_fold(t) for t in tokens)
    negated = any(w in _NEGATIONS or w.endswith("n't") for w in words)
    return Values(numbers, quoted, identifiers, names, negated, words)


_EMPHASIS = re.compile(r"(?<!\w)[*_]{1,3}(?=\S)|(?<=\S)[*_]{1,3}(?!\w)")
_ORDINAL = re.compile(r"\b(\d{1,4})(?:st|nd|rd|th)\b", re.IGNORECASE)
_POSSESSIVE = re.compile(r"(?:'s|s')$")


def _fold(word: str) -> str:
    """A word as compared: casefolded, without a possessive or a plural 's' ("Gardening's",
    "gardenings" and "gardening" are one value)."""
    word = _POSSESSIVE.sub("", _apostrophes(word).casefold())
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")) and word.isalpha():
        word = word[:-1]
    return word


# A line "label: value" ("Week 11 (August 13): 16 miles", "**Cloud SQL**: …", "Title: …").
_LABEL_LINE = re.compile(
    r"^\s*(?:\*\*|__)?(?P<label>[^:：*_\n]{1,60}?)(?:\*\*|__)?\s*[:：](?=[\s*_])\s*(?:\*\*|__)?\s*(?P<value>\S.*)$", re.DOTALL
)
# Labels naming a field of a draft: the line names or titles something, it states no value.
_FIELD_LABELS = frozenset(
    "title subtitle subject headline heading tagline slogan caption name tag tags keywords hashtags description".split()
)
# Labels that place a line in a plan or schedule: a step, a day, a date, a time.
_STEP_LABEL = re.compile(
    r"\d|\b(?:step|week|day|phase|part|stage|month|session|round|level|option|lesson|chapter|section|module|episode|scene"
    r"|monday|tuesday|wednesday|thursday|friday|saturday|sunday|january|february|march|april|may|june|july|august"
    r"|september|october|november|december|morning|afternoon|evening|night)s?\b",
    re.IGNORECASE,
)
# A link's title as a search or citation lists it: "Customising Oscar — django-oscar 3.2 documentation (site.io)".
_CITATION = re.compile(r"\((?:www\.)?[\w-]+(?:\.[\w-]+)+\)\s*$")


@dataclass(frozen=True)
class Line:
    """A text as the conflict rules read it: its label (a step, a field, a list item's header) and
    the part that states something."""

    label: str | None
    kind: str  # "field" (states nothing), "step" (a place in a plan), "item" (a list item's header) or "plain"
    value: str


@lru_cache(maxsize=_TEXTS_HELD)
def line_of(text: str) -> Line:
    body = _EMPHASIS.sub("", _LIST_MARK.sub("", text).strip())
    m = _LABEL_LINE.match(_LIST_MARK.sub("", text).strip())
    if m and len(m.group("label").split()) <= 8:
        label = " ".join(_fold(w) for w in _ORDINAL.sub(r"\1", m.group("label")).replace("(", " ").replace(")", " ").split())
        value = m.group("value").strip()
        if label.split() and label.split()[0] in _FIELD_LABELS or label in _FIELD_LABELS:
            return Line(label, "field", value)
        return Line(label, "step" if _STEP_LABEL.search(label) else "item", value)
    return Line(None, "plain", body)


@lru_cache(maxsize=_TEXTS_HELD)
def states_no_value(text: str) -> bool:
    """A heading, a title, a field of a draft ("Subject: …"), a lead-in or a link's title: it names
    a thing, it does not state a value a second text could contradict."""
    line = line_of(text)
    if line.kind == "field":
        return True
    body = _LIST_MARK.sub("", text).strip()
    if body.startswith("#") or body.endswith((":", "：")) or _CITATION.search(body):
        return True
    stripped = body.strip("*_# ")
    if body.startswith(("**", "__")) and body.rstrip(".").endswith(("**", "__")) and len(stripped.split()) <= 12:
        return True  # a bold line on its own is a heading
    words = [w for w in stripped.split() if any(c.isalpha() for c in w)]
    # Title Case without a full stop
    return not stripped.endswith((".", "!", "?")) and line.kind == "plain" and is_title_case(words)


def _sentence_start(text: str, token: str) -> bool:
    """The token stands right after a sentence end (so its capital says nothing)."""
    at = text.find(token)
    before = text[:at].rstrip()
    return not before or before[-1] in ".!?:;\n"


def _differ(a: frozenset[str], b: frozenset[str]) -> tuple[str, str] | None:
    """Each side states a value the other does not: (a's, b's), shown sorted."""
    only_a, only_b = a - b, b - a
    if only_a and only_b:
        return ", ".join(sorted(only_a)), ", ".join(sorted(only_b))
    return None


# Tool output and narration: a listing line (`ls -l`), a file shown with line numbers ("74→…"),
# terminal colour codes, a traceback's frame, and the assistant saying what it does or did.
_LISTING = re.compile(r"^\s*(?:[-dlcbps][-rwxsStT]{9}[@+.]?\s+\d+\s|total\s+\d+\s*$|\d+\s*(?:→|\t))")
# A typed assignment or a keyword argument on its own line ("retries: int = 3", "timeout=30,").
_CODE_LINE = re.compile(r"^\s*[A-Za-z_][\w.]*\s*(?::\s*[\w.\[\], |]+)?=\s*[^=\s]|^\s*[\w.]+\(.*\)\s*$")
_TRACEBACK = re.compile(r"^\s*(?:File \"[^\"]*\", line \d+|at [\w.$<>]+\([^)]*:\d+\)|Traceback \(most recent call last\))")
_NARRATION = re.compile(
    r"^\s*(?:(?:now|next|then|first|finally|okay|ok|great|perfect)\b[,!.]?\s+)?"
    r"(?:i(?:'|’)ll|i will|i(?:'|’)m going to|i am going to|let me|let(?:'|’)s|i(?:'|’)ve|i have|i(?:'|’)m now|i am now"
    r"|i (?:added|updated|created|changed|fixed|removed|implemented|made|moved|renamed|set|wrote|ran|checked)"
    r"|now (?:update|add|create|run|fix|remove|change|set|write|check|test|implement|move|rename|make|let)"
    r"|here(?:'|’)s|here is|here are|all other|everything else)\b",
    re.IGNORECASE,
)


@lru_cache(maxsize=_TEXTS_HELD)
def states_nothing(text: str) -> bool:
    """Not a statement a person could disagree with: tool output, code, or narration."""
    body = _LIST_MARK.sub("", text).strip()
    return bool(
        "\x1b[" in text or _LISTING.match(text) or _TRACEBACK.match(body) or _CODE_LINE.match(body) or _NARRATION.match(body) or is_code_or_data(body)
    )


def conflict_between(a_text: str, b_text: str) -> str | None:
    """Why two related texts may contradict each other (one line), or None. Kinds, in order:
    number, quoted, identifier, name, negation, antonym."""
    if states_no_value(a_text) or states_no_value(b_text) or states_nothing(a_text) or states_nothing(b_text):
        return None
    line_a, line_b = line_of(a_text), line_of(b_text)
    if "step" in (line_a.kind, line_b.kind) or (line_a.kind == line_b.kind == "item"):
        # Two steps of a plan, or two items of a list, speak of one thing only under one label
        # ("Week 11 (August 13): 16 miles" / "… : 15 miles"); a step and a sentence never.
        if line_a.kind != line_b.kind or line_a.label != line_b.label:
            return None
        a_text, b_text = line_a.value, line_b.value
    a, b = values_of(a_text), values_of(b_text)
    if not (a.words - _STOP) & (b.words - _STOP):
        return None  # nothing in common to disagree about
    for kind, left, right in (
        ("number", a.numbers, b.numbers),
        ("quoted", a.quoted, b.quoted),
        # A thing is named either way ("Parquet" / "CSV"): identifiers and names are one kind.
        ("identifier", a.identifiers | a.names, b.identifiers | b.names),
    ):
        if kind == "identifier":
            # One name written inside the other ("highlights/drag", "rendering/highlights/drag") is one name.
            left, right = _unwritten(left, right), _unwritten(right, left)
        found = _differ(left, right)
        if found is not None and _same_thing(a, b):
            if kind == "identifier" and not _same_place(a_text, b_text, left - right, right - left):
                continue  # two names in different places of their sentences: two things, not two values
            if kind == "identifier" and not (a.identifiers | b.identifiers) - (a.identifiers & b.identifiers):
                kind = "name"
            return f"{kind}: {found[0]} ≠ {found[1]}"
    if a.negated != b.negated:
        rest_a = a.words - _NEGATIONS - {w for w in a.words if w.endswith("n't")}
        rest_b = b.words - _NEGATIONS - {w for w in b.words if w.endswith("n't")}
        if _jaccard(rest_a, rest_b) >= 0.5:
            said = "negated" if a.negated else "affirmed"
            return f"negation: first {said}, second {'affirmed' if a.negated else 'negated'}"
    for word in sorted(a.words - b.words):
        opposite = _OPPOSITE.get(word)
        if opposite is not None and opposite in b.words and opposite not in a.words and _jaccard(a.words - {word}, b.words - {opposite}) >= 0.5:
            return f"antonym: {word} ≠ {opposite}"
    return None


_TOKEN = re.compile(r"[^\s\"'`“”‘’«»()\[\]{},;!?]+")


def _same_place(a_text: str, b_text: str, only_a: frozenset[str], only_b: frozenset[str]) -> bool:
    """Some name only one text states stands where the other text states one of its own: the two
    sentences line up word by word and differ there ("Use Parquet for exports" / "Use CSV for
    exports"), so they give two values to one thing."""
    a_words = [_fold(t.rstrip(".:")) for t in _TOKEN.findall(a_text)]
    b_words = [_fold(t.rstrip(".:")) for t in _TOKEN.findall(b_text)]
    for op, i1, i2, j1, j2 in SequenceMatcher(None, a_words, b_words, autojunk=False).get_opcodes():
        if op == "replace" and _holds(a_words[i1:i2], only_a) and _holds(b_words[j1:j2], only_b):
            return True
    return False


def _unwritten(values: frozenset[str], others: frozenset[str]) -> frozenset[str]:
    """The values not written inside (nor holding) one of the other text's values."""
    return frozenset(v for v in values if not any(v != o and (v in o or o in v) for o in others))


def _holds(words: list[str], values: frozenset[str]) -> bool:
    return any(v == w or v in w for w in words for v in values)


SAME_THING = 0.5  # overlap of the words around the values, for two texts to speak of one thing


def _same_thing(a: Values, b: Values) -> bool:
    """The two texts say much the same around their values: their other words overlap."""
    values = a.numbers | b.numbers | a.quoted | b.quoted | a.identifiers | b.identifiers | a.names | b.names
    rest_a = a.words - _STOP - values
    rest_b = b.words - _STOP - values
    return _jaccard(rest_a, rest_b) >= SAME_THING


def _jaccard(a: frozenset[str] | set[str], b: frozenset[str] | set[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0
