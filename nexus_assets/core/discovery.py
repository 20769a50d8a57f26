"""Topic discovery by keyword clusters: the offline, deterministic proposer behind `nexus discover`.

Terms are scored by how many runs use them, terms used together in the same messages are
clustered, and each cluster becomes a DRAFT topic for a person to review. Pure: no I/O, no clock,
no randomness; the same runs and existing topics give the same proposals.

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
from nexus_assets.core.scope import node_text

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
# Two terms belong together when most messages using either use both (Jaccard over messages).
MIN_COOCCURRENCE = 0.3
MAX_TERMS = 4


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


def _run_messages(run: Run) -> list[str]:
    texts = (node_text(run, node) for node in run.nodes if node.node_type in TEXT_NODE_TYPES)
    return [t for t in texts if t and t.strip()]


def propose_topics(runs: Sequence[Run], existing: Sequence[Topic], *, max_proposals: int | None = None) -> list[Proposal]:
    """DRAFT topics for clusters of co-occurring terms that no existing topic covers yet."""
    runs = sorted(runs, key=lambda r: r.run_id)
    claimed = set()
    for t in existing:
        claimed |= keyword_stems(t.extraction_policy.required_keywords or ())
    taken_ids = {t.topic_id for t in existing}

    messages: list[tuple[int, set[str]]] = []
    forms: dict[str, Counter] = defaultdict(Counter)
    in_messages: dict[str, set[int]] = defaultdict(set)
    in_runs: dict[str, set[int]] = defaultdict(set)
    for ri, run in enumerate(runs):
        for text in _run_messages(run):
            words = terms(text)
            mi = len(messages)
            messages.append((ri, {stem(w) for w in words}))
            for w in words:
                s = stem(w)
                forms[s][w] += 1
                in_messages[s].add(mi)
                in_runs[s].add(ri)

    n = len(runs)
    min_runs = max(2, math.ceil(0.02 * n))
    max_runs = max(min_runs, int(n * MAX_RUN_SHARE))
    candidates = [s for s, rs in in_runs.items() if min_runs <= len(rs) <= max_runs and s not in claimed]
    candidates.sort(key=lambda s: (-len(in_runs[s]), -len(in_messages[s]), s))

    def together(a: str, b: str) -> set[int]:
        return in_messages[a] & in_messages[b]

    used: set[str] = set()
    proposals: list[tuple[tuple, Proposal]] = []
    for seed in candidates:
        if seed in used:
            continue
        cluster = [seed]
        for other in candidates:
            if other in used or other == seed:
                continue
            both = together(seed, other)
            if len(both) / len(in_messages[seed] | in_messages[other]) < MIN_COOCCURRENCE:
                continue
            if len({messages[m][0] for m in both}) < min_runs:
                continue
            cluster.append(other)
            if len(cluster) >= MAX_TERMS:
                break
        if len(cluster) < 2:
            continue
        used.update(cluster)
        evidence = sorted({messages[m][0] for m in in_messages[seed] if sum(s in messages[m][1] for s in cluster) >= 2})
        keywords = sorted({w for s in cluster for w in forms[s]}, key=lambda w: (cluster.index(stem(w)), w))
        display = [forms[s].most_common(1)[0][0] for s in cluster]
        topic_id = next((c for c in (slug(display[:2]), slug(display[:3])) if c and c not in taken_ids), None)
        if topic_id is None or duplicate_of(keywords, existing):
            continue
        taken_ids.add(topic_id)
        names = [w[:1].upper() + w[1:] for w in display]
        topic = Topic(
            topic_id=topic_id,
            display_name=", ".join(names[:-1]) + " and " + names[-1],
            extraction_policy=ExtractionPolicy(
                scope_description=(
                    f"What the conversations say about {', '.join(display[:-1])} and {display[-1]} "
                    f"(these terms meet in {len(evidence)} of {n} recent runs)."
                ),
                target_node_types=TEXT_NODE_TYPES,
                required_keywords=tuple(keywords),
            ),
            ordering_rule="chronological",
            state="DRAFT",
        )
        rank = (-len(evidence), -sum(len(in_runs[s]) for s in cluster), topic_id)
        proposals.append((rank, Proposal(topic, tuple(runs[i].run_id for i in evidence), n)))
    proposals.sort(key=lambda p: p[0])
    chosen = [p for _, p in proposals]
    return chosen[:max_proposals] if max_proposals is not None else chosen
