"""Relevance for an answer (`relevant`): the brick's cosine with the question (`similarity` on each
result) is at least ANSWER_MIN_SIMILARITY and the brick shares a content word with the question,
or its cosine is at least ANSWER_STRONG_SIMILARITY. `ask` (services/answers.py) answers only from
relevant bricks and refuses when there are none (docs/recall.md)."""

from __future__ import annotations

import re

# Cosine of a question and a brick below which the brick does not answer it. Measured with
# all-MiniLM-L6-v2 (benchmarks/bench_ask_refusal.py): on the sample and a real export, the best
# brick for an unrelated question scored at most 0.2x, for a related one at least 0.3x.
ANSWER_MIN_SIMILARITY = 0.30
# ... and it must share a content word with the question (`shares_a_word`), unless its cosine is at
# least this: the English MiniLM scores any two Dutch sentences 0.4-0.6, related or not, so on a
# Dutch export the cosine alone answered "Wat is de hoofdstad van Australie?" from a sentence on
# tetrahedra.
ANSWER_STRONG_SIMILARITY = 0.65


# Function words of the languages people here write in (en, nl, de, fr, it, es): a question and a
# brick that share only these share nothing.
STOPWORDS = frozenset("""
a an and are as at be been but by can could did do does for from had has have how i if in into is it its me
my no not of on or our should so than that the their them then there these they this those to was we were
what when where which who whom why will with would you your about after also any before being both each
few more most much many other over same some such very just only own too under until while again further
all tell told said say says know want need like get got make made use used
de het een en of is zijn was waren wat wie waar wanneer hoe hoeveel welke welk waarom ik je jij u we wij
ze zij hij mijn jouw uw ons onze hun dit dat die deze daar hier er niet geen wel ook maar als dan om te
van voor met op aan bij in uit naar over door tot tegen moet moeten kan kunnen mag mogen wil willen zou
zal heb hebt heeft hebben ben bent word wordt worden had per nog al
der die das ein eine und oder ist sind wer wie wo wann warum ich du sie wir mit von zu auf fur nicht
le la les un une des et ou est sont qui que quoi quand comment pourquoi je tu il elle nous vous avec pour
il lo gli una uno e o che chi come quando perche sono con per non el los las y es son como cuando por
""".split())
_WORD = re.compile(r"\w+", re.UNICODE)


def _content_words(text: str) -> set[str]:
    """Lowercased words that carry meaning, a plural 's' off: 'quotes' and 'quote' are one word."""
    out = set()
    for w in _WORD.findall(text.casefold()):
        if len(w) < 3 or w in STOPWORDS or w.isdigit() and len(w) < 4:
            continue
        out.add(w[:-1] if len(w) > 4 and w.endswith("s") else w)
    return out


def shares_a_word(question: str, content: str) -> bool:
    """Whether a brick says one of the question's content words: the same word, or two long
    words with the same first six letters ('deploy' and 'deployment')."""
    asked, said = _content_words(question), _content_words(content)
    if asked & said:
        return True
    stems = {w[:6] for w in said if len(w) >= 6}
    return any(len(w) >= 6 and w[:6] in stems for w in asked)


def relevant(question: str, result: dict) -> bool:
    """Whether a recalled brick is relevant enough for an answer to rest on it (docs/recall.md)."""
    similarity = result["similarity"]
    return similarity >= ANSWER_STRONG_SIMILARITY or (
        similarity >= ANSWER_MIN_SIMILARITY and shares_a_word(question, result["content"])
    )
