"""Tests of the real-text generator on a small hand-made corpus (no LoCoMo needed)."""

from __future__ import annotations

import itertools
import json
import random
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench.lib import realtext

ITEMS = (
    ("conversation", "Ann: I adopted a cat last week, she is called Tom."),
    ("conversation", "Bob: Nice! I went hiking in the hills with my sister."),
    ("conversation", "Ann: The cat sleeps on my desk all day."),
    ("learnings", "Ann adopted a cat called Tom."),
    ("learnings", "Bob went hiking with his sister in May."),
    ("summaries", "Ann and Bob talked about a new cat and a hiking trip in the hills."),
)
QUESTIONS = (
    "What is the name of Ann's cat?",
    "Where did Bob go hiking?",
    "Who did Bob go hiking with?",
    "What did Ann adopt?",
)
CORPUS = realtext.Corpus(ITEMS, QUESTIONS)
NOW = datetime(2026, 11, 23, tzinfo=UTC)


def corpus_words() -> set[str]:
    return {w for _, text in ITEMS for w in text.split()}


def test_real_items_come_first_then_generated_ones() -> None:
    source = realtext.RealText(CORPUS, seed=1)
    texts = list(source.texts(20))
    assert sorted(texts[: len(ITEMS)]) == sorted(ITEMS)
    for kind, text in texts[len(ITEMS) :]:
        assert kind in {"conversation", "learnings", "summaries"}
        assert text
        assert set(text.split()) <= corpus_words()


def test_streams_are_deterministic_and_sliceable() -> None:
    one = list(realtext.RealText(CORPUS, seed=3).texts(30))
    assert one == list(realtext.RealText(CORPUS, seed=3).texts(30))
    assert one != list(realtext.RealText(CORPUS, seed=4).texts(30))
    source = realtext.RealText(CORPUS, seed=3)
    assert list(source.texts(10, start=20)) == one[20:30]


def test_chain_walks_only_observed_transitions() -> None:
    chain = realtext.Chain([text for _, text in ITEMS], order=2)
    rng = random.Random(0)
    for _ in range(50):
        words = [realtext.START, realtext.START, *chain.walk(rng).split(), realtext.END]
        for i in range(2, len(words)):
            assert words[i] in chain.followers[(words[i - 2], words[i - 1])]


def test_chain_stops_at_max_words() -> None:
    chain = realtext.Chain(["a a a a a a a a a a a a"], order=1)
    assert len(chain.walk(random.Random(0), max_words=5).split()) <= 5


def test_questions_start_with_the_real_ones_and_never_repeat() -> None:
    source = realtext.RealText(CORPUS, seed=2)
    asked = list(itertools.islice(source.questions(), 6))  # 2 new ones exist
    assert sorted(asked[: len(QUESTIONS)]) == sorted(QUESTIONS)
    assert len(set(asked)) == len(asked)


def test_questions_report_an_exhausted_chain() -> None:
    tiny = realtext.RealText(realtext.Corpus(ITEMS, ("Why?",)), seed=2)
    with pytest.raises(RuntimeError, match="exhausted"):
        list(itertools.islice(tiny.questions(), 5))


def test_question_bodies_are_chat_requests_with_new_questions() -> None:
    questions = realtext.RealText(CORPUS, seed=2).questions()
    first = realtext.QuestionBodies(questions, model="m", stream=True)
    second = realtext.QuestionBodies(questions, model="m", stream=True)  # another cell
    parsed = [json.loads(cell(0)) for cell in (first, second) for _ in range(3)]  # 4 real, 2 new
    assert all(b["model"] == "m" and b["stream"] is True for b in parsed)
    asked = [b["messages"][-1]["content"] for b in parsed]
    assert len(set(asked)) == len(asked)
    assert all(b["messages"][0]["role"] == "system" for b in parsed)


def test_memories_have_the_write_shape() -> None:
    items = realtext.RealText(CORPUS, seed=5).memories(12, "u", NOW)
    assert len(items) == 12
    for item in items:
        assert item["user"] == "u"
        assert item["content"]
        assert datetime.fromisoformat(item["created_at"]) <= NOW
        assert 0.5 <= item["confidence"] <= 1.0


@pytest.mark.parametrize(
    ("texts", "rate"),
    [
        (["a b c d e", "x y z"], 0.0),
        (["a b c d e f g h i j", "a b c d e f g h i j", "x y"], 1 / 3),
        (["a b c d e f g h i j", "a b c d e f g h i k"], 1 / 2),  # Jaccard 9/11 > 0.8
        (["a b c d e f g h", "a b c d e f g x"], 0.0),  # Jaccard 7/9 < 0.8
    ],
)
def test_near_duplicate_rate(texts: list[str], rate: float) -> None:
    assert realtext.near_duplicate_rate(texts) == pytest.approx(rate)


def test_text_stats_counts_lengths_vocabulary_and_top_words() -> None:
    figures = realtext.text_stats(["the cat sat", "the dog sat down"])
    assert figures["vocabulary"] == 5
    assert figures["words_p50"] == pytest.approx(3.5)
    assert figures["top10_share"] == pytest.approx(1.0)
    assert figures["hapax_share"] == pytest.approx(3 / 5)


def test_missing_data_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(realtext.RealTextUnavailable):
        realtext.load_corpus(tmp_path / "absent.json")
