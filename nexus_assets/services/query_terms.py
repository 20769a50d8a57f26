"""Who said it and when (docs/recall.md): the filters a recall is given (`--speaker`, `--since`,
`--until`), and the speakers and the day or month a query names itself, which recall ranks by."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date


@dataclass(frozen=True)
class Filters:
    """Who said it and when (docs/recall.md): given, they filter; read from the query, they rank."""

    speaker: str | None = None
    since: str | None = None  # YYYY-MM-DD, inclusive
    until: str | None = None

    def __bool__(self) -> bool:
        return bool(self.speaker or self.since or self.until)

    def admits(self, facts: list[tuple]) -> bool:
        """Whether a brick with these (speaker, date) sources passes: one source must pass all."""
        for speaker, day in facts:
            if self.speaker and (speaker or "").casefold() != self.speaker.casefold():
                continue
            if (self.since or self.until) and day is None:
                continue
            if self.since and day < self.since:
                continue
            if self.until and day > self.until:
                continue
            return True
        return False

    def as_json(self) -> dict:
        return {"speaker": self.speaker, "since": self.since, "until": self.until}


def parse_day(text: str | None, what: str) -> str | None:
    """A --since/--until value as YYYY-MM-DD; ValueError naming it otherwise."""
    if text is None or not str(text).strip():
        return None
    try:
        return date.fromisoformat(str(text).strip()[:10]).isoformat()
    except ValueError:
        raise ValueError(f"{what} must be a date as YYYY-MM-DD, not {text!r}") from None


MONTHS = {m: i for i, m in enumerate(
    ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november", "december"], 1)}
MONTHS.update({m[:3]: i for m, i in list(MONTHS.items())})
_MONTH = r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:tember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
_DATES = [
    (re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b"), lambda m: (int(m[1]), int(m[2]), int(m[3]))),
    (re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+{_MONTH},?\s+(\d{{4}})\b", re.I), lambda m: (int(m[3]), MONTHS[m[2].lower()[:3]], int(m[1]))),
    (re.compile(rf"\b{_MONTH}\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.I), lambda m: (int(m[3]), MONTHS[m[1].lower()[:3]], int(m[2]))),
    (re.compile(rf"\b{_MONTH},?\s+(\d{{4}})\b", re.I), lambda m: (int(m[2]), MONTHS[m[1].lower()[:3]], None)),
    (re.compile(r"\b(\d{4})-(\d{2})\b"), lambda m: (int(m[1]), int(m[2]), None)),
]


def dates_in(query: str) -> tuple[str, str] | None:
    """The day or month a query names ("on 8 May 2023", "in March 2024", "2024-03-05"), as an
    inclusive (since, until); None when it names none."""
    for pattern, parts in _DATES:
        m = pattern.search(query)
        if not m:
            continue
        try:
            year, month, day = parts(m)
            if day is not None:
                d = date(year, month, day).isoformat()
                return d, d
            first = date(year, month, 1)
            last = date(year + (month == 12), month % 12 + 1, 1).toordinal() - 1
            return first.isoformat(), date.fromordinal(last).isoformat()
        except (ValueError, KeyError):
            continue
    return None


def speakers_in(query: str, known: list[str]) -> list[str]:
    """The known speakers a query names by name (whole words, any case); roles are not names."""
    words = query.casefold()
    return [s for s in known if s.casefold() not in ROLES and len(s) > 1
            and re.search(rf"(?<!\w){re.escape(s.casefold())}(?!\w)", words)]


ROLES = {"user", "assistant", "system", "tool", "human", "developer", "function"}
