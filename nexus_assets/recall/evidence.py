"""How well a result's text answers a query by itself, whatever the other results are (pure): the
share of the query's content words it says, and its dense similarity on its model's own scale.
Recall's ranking is relative (reciprocal rank fusion: the first result is always near 1); this is
the absolute evidence its confidence is calibrated on, so a question the vault cannot answer
scores low (docs/recall.md)."""

from __future__ import annotations

import re

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


def content_words(text: str) -> set[str]:
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
    asked, said = content_words(question), content_words(content)
    if asked & said:
        return True
    stems = {w[:6] for w in said if len(w) >= 6}
    return any(len(w) >= 6 and w[:6] in stems for w in asked)



# Where each dense model's cosine starts to mean "about the same thing" and where it means it
# surely (the lowest unrelated and the usual related top result, measured: benchmarks/bench_ask_refusal.py
# for MiniLM on bricks, LoCoMo and the real-data questions for the static model on passages).
SIMILARITY_SCALE = {"all-MiniLM-L6-v2-int8": (0.15, 0.55), "minilm-static-256-int8": (0.45, 0.80)}


def coverage(query: str, text: str) -> float:
    """The share of the query's content words the text says (a plural 's' off; two long words with
    the same first six letters count as one: 'deploy' and 'deployment')."""
    asked, said = content_words(query), content_words(text)
    if not asked:
        return 0.0
    stems = {w[:6] for w in said if len(w) >= 6}
    return sum(1 for w in asked if w in said or (len(w) >= 6 and w[:6] in stems)) / len(asked)


def scaled_similarity(similarity: float, model: str) -> float:
    low, high = SIMILARITY_SCALE.get(model, (0.15, 0.55))
    return min(1.0, max(0.0, (similarity - low) / (high - low)))


def evidence(query: str, text: str, similarity: float, model: str) -> float:
    """In [0, 1]: the mean of the text's coverage of the query and its scaled similarity."""
    return round(0.5 * coverage(query, text) + 0.5 * scaled_similarity(similarity, model), 6)
