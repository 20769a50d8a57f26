"""How a line is written, for the rules that read text (the offline extractor, the conflict rules):
pure, no I/O."""

from __future__ import annotations

# Words a title leaves in lower case.
SMALL_WORDS = frozenset("a an and as at but by for from in into of on or the to vs via with".split())
_MARKS = "\"'“”‘’«»()[]{}*_#`"


def is_title_case(words: list[str]) -> bool:
    """Most words capitalised, as a title is written ("The Pure Gardening Company Difference"),
    small words like 'of' and 'the' aside; fewer than three words are no title."""
    if len(words) < 3:
        return False
    significant = [w for w in words if w.strip(_MARKS).casefold() not in SMALL_WORDS]
    capital = sum(1 for w in significant if w.lstrip(_MARKS)[:1].isupper())
    return bool(significant) and capital >= 0.8 * len(significant)
