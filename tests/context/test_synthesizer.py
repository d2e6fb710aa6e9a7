"""Table and property tests for the memory synthesizer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.context.synthesizer import (
    STOPWORDS,
    MemorySynthesizer,
    dedup_order,
    dedup_words,
    fragment_score,
    idf_weights,
    jaccard,
    keyword_overlap,
    normalise_words,
    overlap_matcher,
    render_line,
    weighted_overlap,
)
from proxy.context.tokens import count_tokens
from proxy.errors import ConfigError

QUERY = "How do I fix Docker networking?"


def seed_synthesizer(max_tokens: int = 4_500) -> MemorySynthesizer:
    synth = MemorySynthesizer(max_tokens=max_tokens)
    synth.add_fragments(
        "learnings", ["always check ports first", "use --verbose for debugging"], base_relevance=0.7
    )
    synth.add_fragments("playbook", ["rsync deploy: shell_exec then file_write"], 0.6)
    synth.add_fragments("summaries", ["discussed Docker networking and port mapping"], 0.4)
    return synth


@pytest.mark.parametrize(
    ("source", "base"),
    [("learnings", 0.7), ("playbook", 0.6), ("conversation", 0.5), ("summaries", 0.4)],
)
def test_source_base_relevance(source: str, base: float) -> None:
    synth = MemorySynthesizer()
    synth.add_fragments(source, ["unrelated words entirely"])
    [fragment] = synth.ranked("query")
    assert fragment.relevance == pytest.approx(base * 0.5)


@pytest.mark.parametrize(
    ("base", "overlap", "expected"), [(0.7, 1.0, 0.85), (0.4, 0.0, 0.2), (0.5, 0.5, 0.5)]
)
def test_score_formula(base: float, overlap: float, expected: float) -> None:
    assert fragment_score(base, overlap) == pytest.approx(expected)


def test_seed_example_ranks_the_docker_summary_first() -> None:
    ranked = seed_synthesizer().ranked(QUERY)
    assert ranked[0].content == "discussed Docker networking and port mapping"
    # 2 of the 6 query words (docker, networking) appear: 0.4 * 0.5 + 2/6 * 0.5.
    assert ranked[0].relevance == pytest.approx(0.2 + 1 / 6)
    block = seed_synthesizer().synthesize(QUERY)
    assert block.splitlines()[0] == "[summaries] discussed Docker networking and port mapping"
    assert len(block.splitlines()) == 4


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("networking?", {"networking"}),
        ("Docker, NETWORKING!", {"docker", "networking"}),
        ("snake_case and dash-word", {"snake", "case", "and", "dash", "word"}),
        ("  ", set()),
    ],
)
def test_words_are_normalised(text: str, words: set[str]) -> None:
    assert normalise_words(text) == words


def test_stopwords_and_stems_are_optional() -> None:
    words = normalise_words("How do I fix the networks?", stopwords=STOPWORDS, stemmed=True)
    assert words == {"fix", "network"}
    assert keyword_overlap(words, normalise_words("networking fixes", stemmed=True)) == 1.0


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("a b c d e", "a b c d e", 1.0),
        ("a b", "c d", 0.0),
        ("a b c d", "a b c d e", 0.8),
        ("", "", 1.0),
    ],
)
def test_jaccard(a: str, b: str, expected: float) -> None:
    assert jaccard(normalise_words(a), normalise_words(b)) == pytest.approx(expected)


def test_duplicates_keep_the_higher_score() -> None:
    synth = MemorySynthesizer()
    text = "User prefers YAML over JSON for config files in every project"
    synth.add_fragments("summaries", [text])
    synth.add_fragments("learnings", [text.lower() + "."])
    ranked = synth.ranked("yaml config")
    assert [f.source for f in ranked] == ["learnings"]


def test_exactly_08_jaccard_is_not_a_duplicate() -> None:
    synth = MemorySynthesizer()
    synth.add_fragments("learnings", ["a b c d", "a b c d e"])
    assert len(synth.ranked("a")) == 2


def test_budget_uses_the_real_tokenizer() -> None:
    code = "def f(x): return {k: v for k, v in x.items() if v is not None}"
    synth = MemorySynthesizer(max_tokens=60)
    synth.add_fragments("learnings", [f"{code} # {n}" for n in range(10)])
    block = synth.synthesize("items")
    lines = block.splitlines()
    assert 0 < count_tokens(block) <= 60
    # The budget is full by the real count: one more line would not fit.
    next_line = render_line("learnings", f"{code} # {len(lines)}")
    assert count_tokens(block + "\n" + next_line) > 60


@pytest.mark.parametrize("max_tokens", [0, 5, 20, 50, 200])
def test_block_never_exceeds_max_tokens(max_tokens: int) -> None:
    block = seed_synthesizer(max_tokens).synthesize(QUERY)
    assert count_tokens(block) <= max_tokens


def test_newlines_in_content_stay_on_one_line() -> None:
    assert render_line("playbook", "step one\nstep  two") == "[playbook] step one step two"


@pytest.mark.parametrize("threshold", [-0.1, 1.0, 1.5])
def test_bad_threshold_is_rejected(threshold: float) -> None:
    with pytest.raises(ConfigError):
        dedup_order([], [], threshold)


vocab = st.sampled_from([f"w{n}" for n in range(12)])
word_sets = st.lists(st.frozensets(vocab, max_size=8), max_size=30)


def brute_force(sets: list[frozenset[str]], threshold: float) -> list[int]:
    kept: list[int] = []
    for i, words in enumerate(sets):
        if all(jaccard(words, sets[j]) <= threshold for j in kept):
            kept.append(i)
    return kept


@settings(max_examples=300)
@given(word_sets, st.sampled_from([0.0, 0.3, 0.5, 0.8, 0.9]))
def test_prefix_filter_dedup_equals_all_pairs(sets: list[frozenset[str]], threshold: float) -> None:
    kept, dropped = dedup_order(sets, range(len(sets)), threshold)
    assert kept == brute_force(sets, threshold)
    assert sorted(kept + dropped) == list(range(len(sets)))


@given(word_sets)
def test_dedup_is_idempotent(sets: list[frozenset[str]]) -> None:
    kept, _ = dedup_order(sets, range(len(sets)))
    survivors = [sets[i] for i in kept]
    again, dropped = dedup_order(survivors, range(len(survivors)))
    assert again == list(range(len(survivors)))
    assert dropped == []


plain_words = st.sampled_from(
    ["docker", "networking", "network", "networks", "port", "fixed", "fix", "yaml", "the", "a"]
)


@given(st.lists(plain_words, max_size=8), st.lists(plain_words, max_size=20))
def test_overlap_matcher_equals_word_set_overlap(query: list[str], content: list[str]) -> None:
    for stemmed in (False, True):
        query_words = normalise_words(" ".join(query), stopwords=STOPWORDS, stemmed=stemmed)
        text = ", ".join(content).upper() + "?"
        expected = keyword_overlap(query_words, normalise_words(text, stemmed=stemmed))
        assert overlap_matcher(query_words, stemmed=stemmed)(text) == expected


@pytest.mark.parametrize(
    ("text", "words"),
    [("Hello, World!", {"hello", "world"}), ("it\u2019s—fine", {"it", "s", "fine"})],
)
def test_dedup_words(text: str, words: set[str]) -> None:
    assert dedup_words(text) == words


def test_idf_weights_favour_rare_words() -> None:
    matches = [{"caroline", "lgbtq"}, {"caroline"}, {"caroline"}, {"caroline"}, set()]
    weights = idf_weights(matches)
    assert set(weights) == {"caroline", "lgbtq"}
    assert weights["lgbtq"] > weights["caroline"] > 0
    assert weighted_overlap({"caroline", "lgbtq"}, weights) == pytest.approx(1.0)
    assert weighted_overlap({"lgbtq"}, weights) > 0.5 > weighted_overlap({"caroline"}, weights)
    assert weighted_overlap(set(), {}) == 0.0
