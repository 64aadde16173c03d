"""The lexical analyzer: prose as the stemmer has it, code identifiers whole as well as by parts."""

import re

import Stemmer

from rag_pipeline.core.retrieval.lexical import STOP_WORDS, analyze, analyze_words, analyzer_identity

PROSE = ("Tests are discovered in the folders given on the command line; a configuration file "
         "changes which directories are searched and how failures are reported.")


def _stemmed_words(text: str) -> list[str]:
    words = [w for w in re.findall(r"\w+", text.lower()) if w not in STOP_WORDS]
    return Stemmer.Stemmer("english").stemWords(words)


def test_prose_without_identifiers_is_the_stemmers_alone():
    assert analyze(PROSE) == _stemmed_words(PROSE)


def test_names_the_stemmer_merges_stay_apart_whole_and_share_their_parts():
    assert _stemmed_words("PYTEST_ADDOPTS") == _stemmed_words("pytest_addoption")  # the merge being fixed
    # The whole form counts once per part kept: an exact name weighs as much as its words together.
    assert analyze("PYTEST_ADDOPTS") == ["pytest_addopts"] * 2 + ["pytest", "addopt"]
    assert analyze("pytest_addoption") == ["pytest_addoption"] * 2 + ["pytest", "addopt"]
    assert analyze("tmp_path_retention_policy") == ["tmp_path_retention_policy"] * 4 + ["tmp", "path", "retent", "polici"]


def test_every_kind_of_identifier_gives_its_whole_form_and_its_parts():
    assert analyze("httpx.AsyncClient") == ["httpx.asyncclient"] * 2 + ["httpx"] + ["asyncclient"] * 2 + ["async", "client"]
    # Every run of two components or more, and the components as identifiers in turn.
    assert analyze("request.url.copy_with()") == (["request.url.copy_with"] * 3 + ["request.url"] * 2
                                                  + ["url.copy_with"] * 2 + ["request", "url", "copy_with", "copi"])
    assert analyze("HTTPClient addOption") == ["httpclient"] * 2 + ["http", "client"] + ["addoption"] * 2 + ["add", "option"]
    assert analyze("--log-level=DEBUG") == ["--log-level"] * 2 + ["log", "level", "debug"]
    assert analyze("run with -p no:cacheprovider") == ["run", "-p", "cacheprovid"]
    assert analyze("__init__.py") == ["__init__.py"] * 2 + ["__init__", "init", "py"]
    assert analyze("r.headers") == ["r.headers"] * 2 + ["r", "header"]


def test_what_only_looks_like_an_identifier_stays_words():
    for text in ("e.g. the U.S. in 3.5 years", "a well-known page of URLs and IDs", "mRNA and IgG levels"):
        assert analyze(text) == _stemmed_words(text), text


def test_surface_forms_name_each_term_as_written():
    assert analyze_words("PYTEST_ADDOPTS policies") == [("pytest_addopts", "pytest_addopts")] * 2 + [
        ("pytest", "pytest"), ("addopts", "addopt"), ("policies", "polici")]


def test_the_identity_names_the_rules_and_the_stemmer():
    assert "identifiers" in analyzer_identity() and "PyStemmer" in analyzer_identity()
