"""Claim-citation coverage (docs/recall.md): every sentence of an answer cites the bricks it rests on.

A citation is a brick id, or a prefix of 8+ hex characters of one, in square brackets: `[3f9a1c2e]`.
A sentence is cited when it cites at least one brick recalled for the question and nothing else:
an id that names no recalled brick (made up, ambiguous, or a brick the question did not recall)
makes the whole sentence uncited, whatever else it cites.
CCC = cited sentences / all sentences. Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nexus_assets.core.sentences import sentences

CITATION = re.compile(r"\[([0-9a-f]{8,64})\]")
LEADING = re.compile(r"^\s*(?:\[[0-9a-f]{8,64}\]\s*)+")
CCC_THRESHOLD = 0.95
MAX_REVISIONS = 3


@dataclass(frozen=True)
class CitedSentence:
    text: str
    brick_ids: tuple[str, ...]  # the recalled bricks it validly cites, in order
    unknown: tuple[str, ...] = ()  # citations that name no recalled brick, as written

    @property
    def cited(self) -> bool:
        return bool(self.brick_ids) and not self.unknown


def resolve_citation(token: str, allowed: list[str]) -> str | None:
    matches = [b for b in allowed if b.startswith(token)]
    return matches[0] if len(matches) == 1 else None


def split_answer(answer: str, allowed: list[str]) -> list[CitedSentence]:
    """The answer's sentences, each with the recalled bricks it cites and the ids it cites that name
    none. A citation standing alone after a sentence's full stop belongs to that sentence."""
    raw = [s for s in sentences(answer.strip()) if s.strip()]
    merged: list[str] = []
    for s in raw:
        # Citations that open a piece belong to the sentence before it ("…live? [id] Next …").
        lead = LEADING.match(s)
        if merged and lead:
            merged[-1] = merged[-1] + " " + lead.group(0).strip()
            s = s[lead.end():]
        if not s.strip():
            continue
        if merged and not CITATION.sub("", s).strip(" .;,"):
            merged[-1] = merged[-1] + " " + s
        else:
            merged.append(s)
    out = []
    for s in merged:
        ids, unknown = [], []
        for token in CITATION.findall(s):
            b = resolve_citation(token, allowed)
            if b is None:
                if token not in unknown:
                    unknown.append(token)
            elif b not in ids:
                ids.append(b)
        out.append(CitedSentence(CITATION.sub("", s).strip().replace("  ", " "), tuple(ids), tuple(unknown)))
    return out


def ccc(parts: list[CitedSentence]) -> float:
    return sum(p.cited for p in parts) / len(parts) if parts else 0.0


def coverage_refusal(parts: list[CitedSentence], revisions: int) -> str:
    """Why an answer below the CCC threshold is refused: counts only, never the answer's words,
    so the reason can go to the audit trail (invariant 16) as it is."""
    n = len(parts)
    bare = sum(1 for p in parts if not p.brick_ids and not p.unknown)
    stray = sum(1 for p in parts if p.unknown)
    why = ([f"{bare} of {n} sentences cite no brick"] if bare else []) + (
        [f"{stray} of {n} sentences cite an id that was not recalled for this question"] if stray else []
    )
    return f"claim-citation coverage {ccc(parts):.2f} < {CCC_THRESHOLD} after {revisions} revisions: " + "; ".join(why or ["no sentences"])


def revision_request(parts: list[CitedSentence]) -> str:
    """What the model is told when its answer falls short: the sentences to fix and why."""
    lines = []
    uncited = [p.text for p in parts if not p.brick_ids and not p.unknown]
    if uncited:
        lines.append("These sentences cite no brick:")
        lines += [f"- {u}" for u in uncited]
    stray = [p for p in parts if p.unknown]
    if stray:
        lines.append("These sentences cite ids that are not among the bricks listed; cite only those:")
        lines += [f"- {p.text} " + " ".join(f"[{t}]" for t in p.unknown) for p in stray]
    return "Revise the answer so every sentence cites the bricks it rests on, or leave the sentence out.\n" + "\n".join(lines)


def extractive_answer(bricks: list[tuple[str, str]], limit: int = 5) -> str:
    """An answer made only of verbatim brick text, each followed by its citation: CCC 1.0 by
    construction, and nothing added to any text, not even a full stop (invariant 16)."""
    return " ".join(f"{content} [{brick_id[:12]}]" for brick_id, content in bricks[:limit] if content)
