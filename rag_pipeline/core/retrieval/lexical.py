"""Lexical analysis for BM25: words lower-cased, English stop words dropped, Snowball-stemmed, and
code identifiers kept whole beside their parts.

Prose follows Lucene's English setup in spirit (stop words, a Porter-family stemmer), so that BM25
figures stay comparable with published Lucene baselines. Documentation is also searched by exact
names, which a stemmer alone merges: `PYTEST_ADDOPTS` and `pytest_addoption` both stem to
`pytest_addopt`. So a code identifier, as written in the text, gives:

- its whole form, lower-cased and never stemmed: `pytest_addopts`, `tmp_path_retention_policy`,
  `httpx.asyncclient`, `--log-level`, `-p`;
- its parts, analysed as words (stemmed, stop words and one-letter parts dropped): `pytest`,
  `addopt`; `tmp`, `path`, `retent`, `polici`; a dotted name gives every run of two components or
  more (`request.url.copy_with` gives `request.url` and `url.copy_with`), and its components are
  identifiers in turn (`response.raise_for_status` gives `raise_for_status`, `rais` and `status`).

A whole form counts as many times as it has parts (a dotted run: components), so an exact name
weighs as much as its words together: a query naming `tmp_path_retention_policy` ranks the page
that holds it above a page that repeats "tmp", "path", "retention" and "policy" in prose.

Identifiers are `snake_case` and `SCREAMING_CASE` (any word holding `_`), `camelCase` and
`PascalCase` with an inner capital (`HTTPClient`; a plural acronym like `URLs` stays a word),
`dotted.names` whose components start with a letter and, after the first, are two characters or
more (`r.headers` is a name; `e.g.`, `U.S.` and `3.5` stay words), and command-line flags `--long-flag` / `-p` that do not follow a word
character or hyphen (so `well-known` stays two words). One analyzer serves documents and queries,
so a query's identifier matches the same way: the page holding `PYTEST_ADDOPTS` outscores the one
holding only `pytest_addoption` on the whole form, and a query in words (`tmp path retention
policy`) still finds the identifier through its parts.

`ANALYZER_RULES` names these rules; with the stemmer's version it is `analyzer_identity()`, part of
the chunking fingerprint and of the served chunks: change either, and the next run posts every
chunk again.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache

# Bump when a rule of this module changes what a text analyses to: served postings are rebuilt.
ANALYZER_RULES = "words+identifiers/1"

# A flag (not after a word character or hyphen), a dotted name, or a word.
_TOKEN = re.compile(r"(?<![\w-])--?[^\W\d_][\w-]*|[^\W\d]\w*(?:\.[^\W\d]\w*)+|\w+", re.UNICODE)
_MIN_PART = 2

# A short, conventional English stop-word list (articles, auxiliaries, prepositions, pronouns).
STOP_WORDS = frozenset(
    """a an and are as at be but by for if in into is it no not of on or such that the their then
    there these they this to was will with""".split()
)


@lru_cache(maxsize=1)
def _stemmer():
    import Stemmer

    return Stemmer.Stemmer("english")


@lru_cache(maxsize=1)
def analyzer_identity() -> str:
    """The rules and the stemmer's release: what the postings of a chunk were built with."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        stemmer = version("PyStemmer")
    except PackageNotFoundError:  # pragma: no cover - installed with the project
        stemmer = "unknown"
    return f"{ANALYZER_RULES}; snowball english (PyStemmer {stemmer})"


def _camel_parts(token: str) -> list[str]:
    """`HTTPClient` -> [HTTP, Client], `addOption` -> [add, Option]: split before an inner capital
    that follows a small letter or a digit, or that starts a word after capitals. [] unless two
    parts have two characters or more: a plain word, `URLs` (a plural acronym), `mRNA`, `IgG`."""
    bounds = [0]
    for i in range(1, len(token)):
        before, here, rest = token[i - 1], token[i], token[i + 1:]
        if not here.isupper():
            continue
        if before.islower() or before.isdigit():
            bounds.append(i)
        elif before.isupper() and rest[:1].islower() and rest != "s":
            bounds.append(i)
    parts = [token[a:b] for a, b in zip(bounds, bounds[1:] + [len(token)])]
    return parts if sum(1 for p in parts if len(p) >= _MIN_PART) >= 2 else []


def _whole_and_parts(whole: str, parts: list[str], out: list[tuple[str, str | None]]) -> None:
    """An identifier's whole form, counted as often as it has parts kept (so an exact name weighs as
    much as its words together, in a document and in a query alike), then those parts, to be stemmed."""
    kept = [p for p in parts if len(p) >= _MIN_PART and p not in STOP_WORDS]
    out.extend([(whole, whole)] * max(len(kept), 1))
    out.extend((p, None) for p in kept)


def _word_or_identifier(token: str, out: list[tuple[str, str | None]]) -> None:
    """The entries of one `\\w+` token: a word to stem, or an identifier's whole form and parts."""
    lowered = token.lower()
    if "_" in token and lowered.strip("_"):
        _whole_and_parts(lowered, [p for p in lowered.split("_") if p], out)
        return
    camel = _camel_parts(token)
    if camel:
        _whole_and_parts(lowered, [p.lower() for p in camel], out)
    elif lowered not in STOP_WORDS:
        out.append((lowered, None))


def _entries(text: str) -> list[tuple[str, str | None]]:
    """Every term in order, as (surface as written lower-cased, its term, or None: stem the surface)."""
    out: list[tuple[str, str | None]] = []
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token.startswith("-"):
            whole = token.lower().rstrip("-")
            _whole_and_parts(whole, whole.lstrip("-").split("-"), out)
            continue
        components = token.split(".")
        if len(components) == 1 or min(len(c) for c in components[1:]) < _MIN_PART:  # e.g. i.e. U.S: words
            for component in components:
                _word_or_identifier(component, out)
            continue
        lowered = [c.lower() for c in components]
        # Every run of two components or more, weighed by its length: `request.url` is written in
        # `request.url.copy_with`.
        for size in range(len(lowered), 1, -1):
            for first in range(len(lowered) - size + 1):
                out.extend([(".".join(lowered[first:first + size]),) * 2] * size)
        for component in components:
            _word_or_identifier(component, out)
    return out


def analyze_words(text: str) -> list[tuple[str, str]]:
    """(word as written, lower-cased; its term) for every term `analyze` gives, in order."""
    entries = _entries(text)
    stems = iter(_stemmer().stemWords([surface for surface, term in entries if term is None]))
    return [(surface, term if term is not None else next(stems)) for surface, term in entries]


def analyze(text: str) -> list[str]:
    """Terms of a text in order: stemmed words, and identifiers whole and by parts (module docstring)."""
    return [term for _, term in analyze_words(text)]


# Words that make a question a question, not what it is about (stemmed like the index's terms).
QUESTION_WORDS = frozenset(analyze(
    "what which who whom whose when where why how do does did done can could would should shall may might "
    "must am have has had i me my we us our you your name kind type many much"
))


def content_terms(question: str) -> list[str]:
    """A question's distinct terms, in order, without the words that only make it a question."""
    return [t for t in dict.fromkeys(analyze(question)) if t not in QUESTION_WORDS]


def term_frequencies(text: str) -> Counter[str]:
    return Counter(analyze(text))


def count_tokens(text: str) -> int:
    """Whitespace-separated words: the unit of chunk sizes and of a context's cost."""
    return len(text.split())
