"""Lexical analysis for BM25: lower-casing, word splitting, English stop words, Snowball stemming.

The analyzer mirrors what Lucene's English setup does in spirit (stop words, Porter-family stemmer),
so that BM25 figures are comparable with published Lucene baselines.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache

_WORD = re.compile(r"\w+", re.UNICODE)

# A short, conventional English stop-word list (articles, auxiliaries, prepositions, pronouns).
STOP_WORDS = frozenset(
    """a an and are as at be but by for if in into is it no not of on or such that the their then
    there these they this to was will with""".split()
)


@lru_cache(maxsize=1)
def _stemmer():
    import Stemmer

    return Stemmer.Stemmer("english")


def analyze(text: str) -> list[str]:
    """Terms of a text in order: lower-cased words minus stop words, Snowball-stemmed."""
    words = [w for w in _WORD.findall(text.lower()) if w not in STOP_WORDS]
    return _stemmer().stemWords(words) if words else []


def analyze_words(text: str) -> list[tuple[str, str]]:
    """(word as written, lower-cased; its term) for every word `analyze` keeps, in order."""
    words = [w for w in _WORD.findall(text.lower()) if w not in STOP_WORDS]
    return list(zip(words, _stemmer().stemWords(words))) if words else []


def term_frequencies(text: str) -> Counter[str]:
    return Counter(analyze(text))


def count_tokens(text: str) -> int:
    """Whitespace-separated words: the unit of chunk sizes and of a context's cost."""
    return len(text.split())
