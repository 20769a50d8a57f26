"""Topic discovery by keyword clusters: the offline, deterministic proposer behind `nexus discover`.

A conversation is *about* a term when the person says it and it comes up in at least two of its
messages; boilerplate an assistant adds to every reply ("feel free to ask") never is. Terms that
the same conversations are about are clustered, and a cluster that enough conversations are about
becomes a DRAFT topic for a person to review, with those conversations as its evidence. At most
a handful are proposed, best supported first. Pure: no I/O, no clock, no randomness; the same
runs and existing topics give the same proposals.

Terms that are already keywords of an existing topic are left out, so a proposal never repeats
an existing topic's keywords, and a second run over the same runs proposes nothing new.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from nexus_assets.core.models import ExtractionPolicy, Run, Topic
from nexus_assets.ingest.scope import keyword_pattern, node_text

TEXT_NODE_TYPES = ("user_message", "assistant_message")

# English function words and chat filler; topic keywords are content words.
STOPWORDS = frozenset(
    """
    a about above across after again against all almost also although always am among an and another any anything
    are aren around as ask asked at away back be because become becomes became been before being below between
    both but by call called can cannot could did didn do does doesn doing don done down during each either else
    end ends enough even ever every exactly few find first for found from further get gets getting give given go
    goes going gone good got great had has have having he hello help helpful her here hers herself hi him himself
    his how however i idea if in instead into is isn it its itself just keep keeps kept kind know last later least
    less let like likely longer look looks lot lots made make makes many may maybe me mean means might more most
    much must my myself need needs never new next no nor not nothing now of off often ok okay old on once one only
    or other others our ours ourselves out over own part per perhaps please probably put quite rather re really
    right same say says see seem seems she should show shows simply since so some something sort still such sure
    create creates created happen happens happened prove proves proved
    take takes tell than thank thanks that the their theirs them themselves then there these they thing things
    think this those though thought through thus to together too try turn turns two under until up upon us use
    used uses using usually ve very via want wants was wasn way we well were what whatever when where whether
    which while who whom whose why will with within without won work works would yes yet you your yours yourself
    """.split()
)

_WORD = re.compile(r"[^\W\d_]+(?:['-][^\W\d_]+)*")
MIN_TERM_LEN, MAX_TERM_LEN = 3, 24
# A keyword found in most runs matches everything: it cannot tell one topic from another.
MAX_RUN_SHARE = 0.5
# Two terms belong together when many conversations that mention either mention both (Jaccard),
# at least MIN_LIFT times as often as if they were independent.
MIN_COOCCURRENCE = 0.3
MIN_LIFT = 3.0
MAX_TERMS = 4
# A handful: a person reads every proposal, and a real export once gave 100 of them.
MAX_PROPOSALS = 5
# A subject is proposed once this many conversations are about it (of the runs looked at).
MIN_EVIDENCE_RUNS = 3
MIN_EVIDENCE_SHARE = 0.03
# Two clusters whose evidence is this much the same conversations are one subject.
SAME_SUBJECT = 0.5


def stem(word: str) -> str:
    """A crude plural fold, so `brick` and `bricks` count as one term."""
    if len(word) > 5 and word.endswith(("sses", "shes", "ches", "xes", "zes")):
        return word[:-2]
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def terms(text: str) -> list[str]:
    """Content words of `text`, NFKC-normalised and casefolded (whole words, hyphenated ones kept whole)."""
    words = _WORD.findall(unicodedata.normalize("NFKC", text).casefold())
    return [
        w
        for w in words
        if MIN_TERM_LEN <= len(w) <= MAX_TERM_LEN and w not in STOPWORDS and stem(w) not in STOPWORDS
    ]


def keyword_stems(keywords: Iterable[str]) -> frozenset[str]:
    return frozenset(stem(t) for k in keywords for t in (terms(k) or [k.casefold().strip()]) if t)


@dataclass(frozen=True)
class Proposal:
    topic: Topic
    evidence: tuple[str, ...]  # run_ids where the cluster's terms meet in one message
    runs_considered: int


def duplicate_of(keywords: Iterable[str], existing: Sequence[Topic]) -> str | None:
    """The existing topic whose keyword set this one repeats (equal, contained, or mostly shared)."""
    mine = keyword_stems(keywords)
    if not mine:
        return None
    for t in existing:
        theirs = keyword_stems(t.extraction_policy.required_keywords or ())
        if not theirs:
            continue
        shared = len(mine & theirs)
        if mine <= theirs or theirs <= mine or shared / len(mine | theirs) >= 0.5:
            return t.topic_id
    return None


def slug(words: Iterable[str]) -> str:
    """A topic_id from words: ASCII letters and digits joined by hyphens, at most 64 characters ("" if none)."""
    ascii_words = (unicodedata.normalize("NFKD", w).encode("ascii", "ignore").decode().lower() for w in words)
    text = "-".join(re.sub(r"[^a-z0-9]+", "-", w) for w in ascii_words)
    return re.sub(r"-{2,}", "-", text).strip("-")[:64].rstrip("-")


def _run_messages(run: Run) -> list[tuple[bool, str]]:
    """(said by the person?, text) of the run's messages."""
    out = []
    for node in run.nodes:
        if node.node_type in TEXT_NODE_TYPES:
            text = node_text(run, node)
            if text and text.strip():
                out.append((node.node_type == "user_message", text))
    return out


def min_evidence(runs: int) -> int:
    """Conversations a subject must be the subject of before it is proposed as a topic."""
    return max(MIN_EVIDENCE_RUNS, math.ceil(MIN_EVIDENCE_SHARE * runs))


def _focal_terms(messages: list[tuple[bool, str]]) -> tuple[set[str], dict[str, str]]:
    """The stems a conversation is about: the person says them, and they come up in at least two
    of its messages. Boilerplate an assistant adds to every reply never qualifies."""
    said_by_person: set[str] = set()
    in_messages: Counter = Counter()
    form: dict[str, str] = {}
    for by_person, text in messages:
        stems = set()
        for w in terms(text):
            s = stem(w)
            stems.add(s)
            form.setdefault(s, w)
        in_messages.update(stems)
        if by_person:
            said_by_person |= stems
    return {s for s in said_by_person if in_messages[s] >= 2}, form


@dataclass(frozen=True)
class Survey:
    """What discovery read and what a proposal needs, for a person told that nothing was proposed
    (a bare "no new topics" leaves them guessing whether it read anything at all)."""

    runs: int
    # Runs an existing topic's keywords occur in (those keywords are never proposed again).
    runs_covered: int
    # The new term the most conversations are about (not an existing topic's, not an everyday
    # word), and how many: how far the runs are from a proposal.
    strongest: tuple[str, int] | None

    def needs(self) -> dict:
        need = min_evidence(self.runs)
        return {
            "min_conversations": need,
            "min_terms": 2,
            "max_term_share": MAX_RUN_SHARE,
            "rule": (
                f"a topic needs at least {need} of the {self.runs} conversations about one subject: a new term the "
                "person says that comes up in two of a conversation's messages, with another new term in the same "
                f"conversations (neither in more than {MAX_RUN_SHARE:.0%} of all of them)"
            ),
        }

    def strongest_dict(self) -> dict | None:
        return None if self.strongest is None else {"term": self.strongest[0], "conversations": self.strongest[1]}


def covered_runs(runs: Sequence[Run], topics: Sequence[Topic]) -> int:
    """How many runs an existing topic's keywords occur in (whole words, any case, as a sync reads them)."""
    pattern = keyword_pattern(tuple(sorted({k for t in topics for k in t.extraction_policy.required_keywords or ()})))
    if pattern is None:
        return 0
    return sum(any(pattern.search(text) for _, text in _run_messages(run)) for run in runs)


def propose_topics(runs: Sequence[Run], existing: Sequence[Topic], *, max_proposals: int | None = None) -> list[Proposal]:
    """At most `max_proposals` (default MAX_PROPOSALS) DRAFT topics: subjects that several
    conversations are about and that no existing topic covers, best supported first."""
    return survey(runs, existing, max_proposals=max_proposals)[0]


def survey(
    runs: Sequence[Run], existing: Sequence[Topic], *, max_proposals: int | None = None, covering: Sequence[Topic] | None = None
) -> tuple[list[Proposal], Survey]:
    """`propose_topics`, and what was read and needed (`covering`: the topics whose runs count as
    covered; default `existing`)."""
    limit = MAX_PROPOSALS if max_proposals is None else max_proposals
    runs = sorted(runs, key=lambda r: r.run_id)
    claimed = set()
    for t in existing:
        claimed |= keyword_stems(t.extraction_policy.required_keywords or ())
    taken_ids = {t.topic_id for t in existing}
    forms, in_runs, about = _term_runs(runs)

    n = len(runs)
    need = min_evidence(n)
    max_runs = max(need, int(n * MAX_RUN_SHARE))
    # Terms no topic has, not everyday words: best supported first; those enough conversations are about are candidates.
    new_terms = sorted(
        (s for s in about if len(in_runs[s]) <= max_runs and s not in claimed), key=lambda s: (-len(about[s]), -len(in_runs[s]), s)
    )
    candidates = [s for s in new_terms if len(about[s]) >= need]
    strongest = (forms[new_terms[0]].most_common(1)[0][0], len(about[new_terms[0]])) if new_terms else None
    read = Survey(n, covered_runs(runs, existing if covering is None else covering), strongest)

    proposals: list[tuple[tuple, Proposal]] = []
    for cluster, evidence in _clusters(candidates, in_runs, about, n, need):
        keywords = sorted({w for s_ in cluster for w in forms[s_]}, key=lambda w: (cluster.index(stem(w)), w))
        display = [forms[s_].most_common(1)[0][0] for s_ in cluster]
        topic_id = next((c for c in (slug(display[:2]), slug(display[:3])) if c and c not in taken_ids), None)
        if topic_id is None or duplicate_of(keywords, existing):
            continue
        taken_ids.add(topic_id)
        topic = _draft(topic_id, display, keywords, len(evidence), n)
        rank = (-len(evidence), topic_id)
        proposals.append((rank, Proposal(topic, tuple(runs[i].run_id for i in sorted(evidence)), n)))
    proposals.sort(key=lambda p: p[0])
    return [p for _, p in proposals][:limit], read


def _term_runs(runs: Sequence[Run]) -> tuple[dict[str, Counter], dict[str, set[int]], dict[str, set[int]]]:
    """Per stem: the word forms seen (counted), the runs (by index) that mention it at all, and
    the runs that are about it (it is one of their focal terms)."""
    forms: dict[str, Counter] = defaultdict(Counter)
    in_runs: dict[str, set[int]] = defaultdict(set)
    about: dict[str, set[int]] = defaultdict(set)
    for ri, run in enumerate(runs):
        messages = _run_messages(run)
        mine, _ = _focal_terms(messages)
        for _, text in messages:
            for w in terms(text):
                forms[stem(w)][w] += 1
                in_runs[stem(w)].add(ri)
        for s_ in mine:
            about[s_].add(ri)
    return forms, in_runs, about


def _clusters(
    candidates: list[str], in_runs: dict[str, set[int]], about: dict[str, set[int]], n: int, need: int
) -> list[tuple[list[str], set[int]]]:
    """The candidate stems grouped into subjects (terms that come up in the same conversations),
    each with its evidence: at least `need` runs, and no subject twice."""

    def jaccard(a: set[int], b: set[int]) -> float:
        return len(a & b) / len(a | b)

    used: set[str] = set()
    clusters: list[tuple[list[str], set[int]]] = []
    for seed in candidates:
        if seed in used:
            continue
        cluster = [seed]
        for other in candidates:
            if other in used or other == seed:
                continue
            # Terms of one subject come up in the same conversations, far more often than chance
            # would put two everyday words together.
            a, b = in_runs[seed], in_runs[other]
            if jaccard(a, b) >= MIN_COOCCURRENCE and len(a & b) * n >= MIN_LIFT * len(a) * len(b):
                cluster.append(other)
                if len(cluster) >= MAX_TERMS:
                    break
        if len(cluster) < 2:
            continue
        used.update(cluster)
        # Evidence: conversations about one of its terms that mention another.
        evidence = {
            ri for s_ in cluster for ri in about[s_] if sum(ri in in_runs[t] for t in cluster) >= 2
        }
        if len(evidence) < need:
            continue
        # Two clusters about the same conversations are one subject seen twice: keep the first.
        if any(len(evidence & seen) >= SAME_SUBJECT * min(len(evidence), len(seen)) for _, seen in clusters):
            continue
        clusters.append((cluster, evidence))
    return clusters


def _draft(topic_id: str, display: list[str], keywords: list[str], evidence: int, n: int) -> Topic:
    """The DRAFT topic of one subject: its display words, its keywords, how many conversations back it."""
    names = [w[:1].upper() + w[1:] for w in display]
    return Topic(
        topic_id=topic_id,
        display_name=", ".join(names[:-1]) + " and " + names[-1],
        extraction_policy=ExtractionPolicy(
            scope_description=(
                f"What the conversations say about {', '.join(display[:-1])} and {display[-1]} "
                f"({evidence} of {n} recent conversations are about them)."
            ),
            target_node_types=TEXT_NODE_TYPES,
            required_keywords=tuple(keywords),
        ),
        ordering_rule="chronological",
        state="DRAFT",
    )
