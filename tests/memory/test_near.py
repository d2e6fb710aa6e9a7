"""The pieces of ``search_near``: the order of a search's hits."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.context.records import Candidate
from proxy.memory.near import ranked
from tests.memory.support import record


@pytest.mark.parametrize(
    ("hits", "expected"),
    [
        ([], []),
        ([("b", 0.5), ("a", 0.9)], ["a", "b"]),
        ([("b", 0.5), ("a", 0.5), ("c", 0.5)], ["a", "b", "c"]),  # ties by id
        ([("z", 0.2), ("b", 0.7), ("a", 0.2), ("c", 0.7)], ["b", "c", "a", "z"]),
        ([("a", 0.0), ("b", 1.0)], ["b", "a"]),
    ],
)
def test_ranked_is_by_similarity_then_id(
    hits: list[tuple[str, float]], expected: list[str]
) -> None:
    got = ranked([Candidate(record(memory_id), similarity) for memory_id, similarity in hits])
    assert [hit.record.id for hit in got] == expected


@given(st.lists(st.tuples(st.sampled_from("abcdef"), st.sampled_from([0.0, 0.25, 0.5, 1.0]))))
def test_ranked_equals_one_sort_on_the_pair(hits: list[tuple[str, float]]) -> None:
    candidates = [Candidate(record(memory_id), similarity) for memory_id, similarity in hits]
    expected = sorted(candidates, key=lambda hit: (-hit.similarity, hit.record.id))
    assert ranked(candidates) == expected
