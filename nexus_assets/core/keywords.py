"""A topic's `required_keywords` as text is matched against them (docs/inputs.md "Keywords").

A keyword matches as a whole word, in any case, and (under the `inflected` rule, a topic's default)
so do its regular inflections: a topic that lists `simulation` reads "simulations", "simulation's"
and "simulations'", so nobody has to list plurals. The forms are English's regular noun endings,
derived from the keyword alone, so the same keywords always match the same words:

- plural `-s` (sync → syncs); `-es` after s, x, z, ch and sh (bus → buses, box → boxes), both
  after o (photos, potatoes); consonant + y → `-ies` as well as `-s` (policies; the Kennedys);
- possessive `'s` and `s'` of the word and its plurals, with a straight (') or typographic (’)
  apostrophe (brick's, bricks', buses’).

Only a keyword that ends in a letter of the Latin script is inflected; the same endings are the
regular plurals of Spanish, French and Portuguese too (gato → gatos, ciudad → ciudades). A keyword
in any other script (CJK, Cyrillic, Greek, Arabic, Hebrew, Devanagari, Thai, …), or ending in a
digit or a sign (`c++`, `v5`), is matched exactly as written. Irregular plurals (children, indices,
analyses) and other inflections (-ed, -ing, German -en) are not derived: list them. A keyword is
never stemmed backwards: list the singular, and its plural comes with it.

`exact` is the rule every topic had before the inflections existed: a topic compiled under it keeps
it until `nexus sync --reselect` moves it (or its file sets `keyword_forms`), so an upgrade never
changes an existing vault's bricks by itself (topics/records.py).
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Literal

KeywordForms = Literal["inflected", "exact"]
# What a topic file that does not say gets: this release's rule.
DEFAULT_KEYWORD_FORMS: KeywordForms = "inflected"

_APOSTROPHES = ("'", "\u2019")
_SIBILANTS = ("s", "x", "z", "ch", "sh")
_VOWELS = frozenset("aeiouy")


def _latin_letter(ch: str) -> bool:
    # By the character's Unicode name: the same answer on every machine and Python version.
    return ch.isalpha() and unicodedata.name(ch, "").startswith("LATIN ")


def keyword_forms(keyword: str, forms: KeywordForms = DEFAULT_KEYWORD_FORMS) -> tuple[str, ...]:
    """The words that count as `keyword` under `forms`: the keyword first, then its inflections
    (module docstring). Suffixes are lowercase; matching ignores case."""
    word = keyword.strip()
    if not word or forms == "exact" or not _latin_letter(word[-1]):
        return (word,) if word else ()
    low = word.lower()
    # A sibilant takes -es only (buses, not "buss"); -o takes both (photos, potatoes); a consonant and
    # -y both (policies, and names: the Kennedys).
    plurals = [] if low.endswith(_SIBILANTS) else [word + "s"]
    if low.endswith((*_SIBILANTS, "o")):
        plurals.append(word + "es")
    if len(word) > 1 and low[-1] == "y" and _latin_letter(word[-2]) and low[-2] not in _VOWELS:
        plurals.append(word[:-1] + "ies")
    possessives = [word + a + "s" for a in _APOSTROPHES]
    if low.endswith("s"):
        possessives += [word + a for a in _APOSTROPHES]
    possessives += [p + a for p in plurals for a in _APOSTROPHES]
    return tuple(dict.fromkeys([word, *plurals, *possessives]))


class KeywordPattern:
    """Whole words, any case, as a regex: lookarounds instead of \\b so keywords like 'c++' still work.

    The regex tries its lookbehind at every character (7% of a sync's time). For ASCII text, a
    case-insensitive match can only start where one of the forms occurs in the lowered text, and
    every form starts with a keyword or its `-ies` stem, so substring search (C speed) over those
    few finds where the regex has to start, or that it need not run at all. Its lookbehind still
    sees the character before that start. Non-ASCII text ('ſ' matches 's' and 'K' matches 'k'
    under IGNORECASE) or keywords are searched by the regex alone.
    """

    def __init__(self, words: list[str]) -> None:
        # Longest first, so a match covers the whole form ("brick's", not "brick").
        alternatives = "|".join(re.escape(w) for w in sorted(set(words), key=lambda w: (-len(w), w)))
        self.regex = re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE)
        starts = _prefix_free({w.lower() for w in words})
        self._lowered = tuple(starts) if all(w.isascii() for w in starts) else None

    def search(self, text: str) -> re.Match[str] | None:
        if self._lowered is None or not text.isascii():
            return self.regex.search(text)
        lowered = text.lower()
        first = min((at for w in self._lowered if (at := lowered.find(w)) >= 0), default=-1)
        return None if first < 0 else self.regex.search(text, first)


def _prefix_free(words: set[str]) -> list[str]:
    """The words no shorter one of them begins: where any of them occurs, one of these does."""
    kept: list[str] = []
    for w in sorted(words, key=lambda w: (len(w), w)):
        if not any(w.startswith(k) for k in kept):
            kept.append(w)
    return sorted(kept)


@lru_cache(maxsize=1024)
def keyword_pattern(keywords: tuple[str, ...], forms: KeywordForms = DEFAULT_KEYWORD_FORMS) -> KeywordPattern | None:
    """The matcher of a topic's keywords under `forms`; None when there are none (no pre-filter)."""
    words = [f for k in keywords for f in keyword_forms(k, forms)]
    return KeywordPattern(words) if words else None
