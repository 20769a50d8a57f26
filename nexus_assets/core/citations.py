"""Claim-citation coverage (DESIGN §8): every sentence of an answer cites the bricks it rests on.

A citation is a brick id, or a prefix of 8+ hex characters of one, in square brackets: `[3f9a1c2e]`.
CCC = sentences with at least one valid citation / all sentences. Pure: no I/O.
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

    @property
    def cited(self) -> bool:
        return bool(self.brick_ids)


def resolve_citation(token: str, allowed: list[str]) -> str | None:
    matches = [b for b in allowed if b.startswith(token)]
    return matches[0] if len(matches) == 1 else None


def split_answer(answer: str, allowed: list[str]) -> list[CitedSentence]:
    """The answer's sentences, each with the recalled bricks it cites (unknown ids do not count).
    A citation standing alone after a sentence's full stop belongs to that sentence."""
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
        ids = []
        for token in CITATION.findall(s):
            b = resolve_citation(token, allowed)
            if b is not None and b not in ids:
                ids.append(b)
        out.append(CitedSentence(CITATION.sub("", s).strip().replace("  ", " "), tuple(ids)))
    return out


def ccc(parts: list[CitedSentence]) -> float:
    return sum(p.cited for p in parts) / len(parts) if parts else 0.0


def extractive_answer(bricks: list[tuple[str, str]], limit: int = 5) -> str:
    """An answer made only of verbatim brick text, each sentence citing its brick: CCC 1.0 by construction."""
    lines = []
    for brick_id, content in bricks[:limit]:
        text = " ".join(content.split())
        if text and text[-1] not in ".!?":
            text += "."
        lines.append(f"{text} [{brick_id[:12]}]")
    return " ".join(lines)
