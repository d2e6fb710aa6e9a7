"""BM25 sparse vectors of proxy.memory.lexical."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.memory.lexical import encode_document, encode_query


def test_query_terms_weigh_one_each_and_skip_stop_words() -> None:
    indices, values = encode_query("When did Caroline go to the LGBTQ support group?")
    assert values == [1.0] * len(values)
    # "when", "did", "to", "the" are stop words; caroline, go, lgbtq, support, group remain.
    assert len(indices) == 5


@pytest.mark.parametrize(
    ("document", "query"),
    [
        ("Melanie adopted a greyhound", "adopting greyhounds"),
        ("Caroline ran the marathon", "running marathons"),
        ("She painted a SUNRISE", "sunrise painting"),
    ],
)
def test_stemmed_and_lowercased_terms_meet(document: str, query: str) -> None:
    doc, _ = encode_document(document)
    asked, _ = encode_query(query)
    assert set(doc) & set(asked)


def test_repeated_terms_weigh_more_but_saturate() -> None:
    once = dict(zip(*encode_document("oscar"), strict=True))
    twice = dict(zip(*encode_document("oscar oscar"), strict=True))
    many = dict(zip(*encode_document(" ".join(["oscar"] * 50)), strict=True))
    (term,) = once
    assert once[term] < twice[term] < many[term] < 1.2 + 1  # BM25's (k + 1) ceiling


def test_only_stop_words_encode_to_nothing() -> None:
    assert encode_query("the and of to") == ([], [])
    assert encode_document("") == ([], [])


@given(st.text(max_size=200))
def test_encoding_is_deterministic_and_well_formed(text: str) -> None:
    indices, values = encode_document(text)
    assert (indices, values) == encode_document(text)
    assert len(indices) == len(values) == len(set(indices))
    assert all(0 <= i < 2**32 for i in indices)
    assert all(v > 0 for v in values)
