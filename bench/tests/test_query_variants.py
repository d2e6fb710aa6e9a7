"""Tests of the candidate-generation variants the LoCoMo variants bench measures (pure parts)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.lib import query_variants as qv
from proxy.context.records import Candidate, MemoryRecord

AT = datetime(2026, 1, 2, tzinfo=UTC)


def hit(
    memory_id: str, content: str, *, source: str = "conversation", user: str = "u1"
) -> Candidate:
    record = MemoryRecord(memory_id, "t1", user, source, content, AT)
    return Candidate(record, 0.5)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("What does Melanie do to destress?", ["melanie", "destress"]),
        ("I ran 5 km in 2023, ran again", ["ran", "again"]),  # digits, "km", repeats
        ("the and of", []),  # stopwords only
        ("Pottery: pottery!", ["pottery"]),  # case-folded, once
    ],
)
def test_content_words(text: str, words: list[str]) -> None:
    assert qv.content_words(text) == words


def test_feedback_text_is_the_question_then_the_first_hits() -> None:
    hits = [hit("a", "yoga at dawn"), hit("b", "pottery class"), hit("c", "unused")]
    assert qv.feedback_text("how to relax?", hits, 2) == "how to relax? yoga at dawn pottery class"
    assert qv.feedback_text("how to relax?", hits, 0) == "how to relax?"


def test_rare_words_come_from_the_best_ranked_rarest_first() -> None:
    ranked = [hit("a", "pottery class with the kids"), hit("b", "kids swim")]
    pool = [*ranked, hit("c", "kids again"), hit("d", "a class")]
    # Of "a"'s words the question lacks: pottery (1 of 4 texts), class (2), kids (3).
    assert qv.rare_words("what about kids?", ranked, pool, top=1, count=2) == ["pottery", "class"]
    assert qv.rare_words("what about kids?", ranked, pool, top=1, count=0) == []
    # The question's own words are never added, even when rare.
    assert "pottery" not in qv.rare_words("pottery?", ranked, pool, top=2, count=5)
    # From the first two hits: "swim" (1 of 4) joins.
    assert set(qv.rare_words("what?", ranked, pool, top=2, count=2)) == {"pottery", "swim"}


def unit_rows(table: dict[str, list[float]]) -> Callable[[Sequence[str]], np.ndarray]:
    """Word vectors from ``table``, L2-normalised, one row per word."""

    def vectors(words: Sequence[str]) -> np.ndarray:
        rows = np.array([table[word] for word in words], dtype=np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    return vectors


def test_similar_words_are_the_pool_words_near_a_question_word() -> None:
    table = {
        "destress": [1.0, 0.0, 0.0],
        "relax": [0.9, 0.1, 0.0],  # cosine ~0.99 with destress
        "yoga": [0.6, 0.8, 0.0],  # cosine 0.6
        "banker": [0.0, 0.0, 1.0],  # cosine 0
    }
    pool = [hit("a", "Relax with yoga"), hit("b", "banker"), hit("c", "destress")]
    vectors = unit_rows(table)
    assert qv.similar_words("destress?", pool, vectors, 0.9) == ["relax"]
    assert qv.similar_words("destress?", pool, vectors, 0.59) == ["relax", "yoga"]
    assert qv.similar_words("the?", pool, vectors, 0.0) == []  # no question word


def test_fused_seeds_keep_the_given_order_and_take_the_users_turns() -> None:
    found = [
        hit("l1", "a learning", source="learnings"),
        hit("t9", "turn nine"),
        hit("x1", "another user's turn", user="u2"),
        hit("t2", "turn two"),
        hit("t5", "turn five"),
    ]
    assert [c.record.id for c in qv.fused_seeds(found, "u1", 2)] == ["t9", "t2"]
    assert qv.fused_seeds(found, "u1", 0) == []


@given(st.lists(st.sampled_from(["cat", "dog", "the", "kids", "2023", "ok"]), max_size=12))
def test_content_words_are_unique_and_never_stopwords(words: list[str]) -> None:
    found = qv.content_words(" ".join(words))
    assert len(found) == len(set(found))
    assert not {"the", "2023", "ok"} & set(found)
    assert set(found) <= set(words)
