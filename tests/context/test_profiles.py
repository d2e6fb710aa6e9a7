"""Tests for the per-text profile the assembler reads (match words, signature, match bases)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.context import words
from proxy.context.assembler import assemble
from proxy.context.dedup import split_signature, text_signature
from proxy.context.profiles import prepare, split_profile, text_profile
from proxy.context.records import Candidate, MemoryRecord
from proxy.context.words import (
    MATCH_SUFFIXES,
    match_bases,
    query_forms,
    query_matcher,
    split_text_words,
    text_words,
    unambiguous,
)
from proxy.defaults import RECORD_CACHE_ENTRIES, TEXT_PROFILES_MEMOISED
from tests.context.support import block_tokens

NOW = datetime(2026, 1, 15, tzinfo=UTC)
TOKENS = block_tokens("o200k_base")
letters = st.text(alphabet=st.sampled_from("abegins"), min_size=1, max_size=7)


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=st.sampled_from("ab cd,.'\t\x01\x7f_-é東"), max_size=40)
    | st.sampled_from(
        [
            "Melanie: I ran a charity race for mental health last Saturday.",
            "Caroline\x01: the pottery class",
            "Café crème — naïve façade",
        ]
    )
)
def test_a_texts_profile_is_its_match_set_signature_and_bases(text: str) -> None:
    found, made, bases = split_profile(text)
    assert found == split_text_words(text)
    assert made == split_signature(text)
    assert bases == match_bases(found)


def test_a_new_texts_profile_fills_no_other_memo() -> None:
    text = "Melanie: the charity race on Saturday raised money for a shelter, she said."
    before = (text_words.cache_info().currsize, text_signature.cache_info().currsize)
    split_profile(text)
    assert (text_words.cache_info().currsize, text_signature.cache_info().currsize) == before


@given(st.frozensets(letters, max_size=12), letters)
def test_a_word_is_a_base_exactly_when_one_of_its_forms_is_a_text_word(
    text: frozenset[str], word: str
) -> None:
    assert (word in match_bases(text)) == any(word + end in text for end in MATCH_SUFFIXES)


@given(
    st.frozensets(
        st.text(st.sampled_from("sedging") | st.characters(), min_size=1, max_size=7).filter(
            lambda w: w.split() == [w]  # no whitespace, as ``word_runs``' words
        ),
        max_size=12,
    )
)
def test_match_bases_strip_each_suffix_from_any_words(text: frozenset[str]) -> None:
    # Backwards, a suffix follows a space whatever the word's characters; the old forward
    # ``\b...\b`` pattern gave no base for a word starting with punctuation ("-s").
    stripped = {w[: -len(end)] for w in text for end in MATCH_SUFFIXES[1:] if w.endswith(end)}
    assert match_bases(text) == text | (stripped - {""})


def test_match_bases_without_a_suffix_are_the_words_themselves() -> None:
    found = frozenset({"park", "beach", "went"})
    assert match_bases(found) is found  # no copy kept beside the words


@pytest.mark.parametrize(
    ("text", "bases"),
    [
        ("tests", {"tests", "test"}),
        ("goes", {"goes", "goe", "go"}),
        ("testing tested", {"testing", "test", "tested"}),
        ("s es ing ed", {"s", "es", "e", "ing", "ed"}),  # never an empty base
        ("class", {"class", "clas"}),  # forms add -s blindly, so the base strips it blindly
        ("-s :ed", {"-s", "-", ":ed", ":"}),  # any characters but whitespace
    ],
)
def test_match_bases_table(text: str, bases: set[str]) -> None:
    assert match_bases(frozenset(text.split())) == bases


@settings(max_examples=300)
@given(st.frozensets(letters, min_size=1, max_size=5), st.lists(letters, max_size=12))
def test_unambiguous_queries_find_their_words_among_the_bases(
    query: frozenset[str], text_list: list[str]
) -> None:
    text = " ".join(text_list)
    for stemmed in (True, False):
        forms, _ = query_forms(query, stemmed=stemmed)
        if unambiguous(query, forms, stemmed=stemmed):
            own = match_bases(text_words(text)) if stemmed else text_words(text)
            assert query & own == query_matcher(query, stemmed=stemmed)(text)


def test_a_query_word_that_is_a_form_of_another_is_ambiguous() -> None:
    query = frozenset({"bus", "bu"})  # "bu" + "s" is "bus"
    forms, _ = query_forms(query, stemmed=True)
    assert not unambiguous(query, forms, stemmed=True)
    assert unambiguous(query, frozenset(query), stemmed=False)
    # The longer word wins the shared form: "bus" finds only "bus", not "bu" as the bases do.
    assert query_matcher(query, stemmed=True)("bus") == {"bus"}
    assert query & match_bases(frozenset({"bus"})) == {"bus", "bu"}


def memory(name: str, content: str, context: str = "") -> Candidate:
    made = MemoryRecord(
        id=name,
        tenant="t",
        user="u",
        source="conversation",
        content=content,
        created_at=NOW,
        context=context,
    )
    return Candidate(made, 0.5)


def test_an_ambiguous_query_scores_as_the_forms_lookup_does() -> None:
    pool = [memory("a", "the bus was late"), memory("b", "a bu again"), memory("c", "none")]
    result = assemble(pool, "bus bu", 500, now=NOW, tokens=TOKENS)
    overlaps = {m.id: m.overlap for m in result.candidates}
    # Each memory finds one of the two words, and each word is in one memory: equal shares.
    assert overlaps["a"] == overlaps["b"] > 0.0
    assert overlaps["c"] == 0.0


def test_prepared_records_are_profiled_before_their_first_request() -> None:
    text_profile.cache_clear()
    pool = [
        memory("a", "Caroline went to the support group on Tuesday."),
        memory("b", "It was great!", context="Melanie: how was the support group?"),
    ]
    assert prepare([c.record for c in pool]) == 3  # two contents, one context
    assert prepare([c.record for c in pool]) == 0  # profiled once per text
    misses = text_profile.cache_info().misses
    result = assemble(pool, "What did Melanie ask about the group?", 500, now=NOW, tokens=TOKENS)
    assert text_profile.cache_info().misses == misses  # nothing left to compute
    assert {m.id for m in result.candidates if m.overlap > 0} == {"a", "b"}


def test_the_profile_memo_holds_its_own_default_not_the_record_caches() -> None:
    # adr/0182: a profile costs ~3x a decoded record; the record cache grew, this memo did not.
    assert text_profile.cache_info().maxsize == words.TEXTS_MEMOISED == TEXT_PROFILES_MEMOISED
    assert TEXT_PROFILES_MEMOISED < RECORD_CACHE_ENTRIES
