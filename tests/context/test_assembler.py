"""Table and property tests for the assembler (score -> bundle -> dedup -> pack -> render)."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.context.assembler import (
    BLOCK_CLOSE,
    BLOCK_NOTICE,
    BLOCK_OPEN,
    AssemblerConfig,
    assemble,
)
from proxy.context.bundle import BundleConfig
from proxy.context.profiles import text_profile
from proxy.context.ranking import score_candidate
from proxy.context.records import Candidate
from proxy.errors import ConfigError
from proxy.tokenizer import count_tokens
from tests.context import support
from tests.context.support import block_tokens

NOW = datetime(2026, 1, 15, tzinfo=UTC)
ENC = "o200k_base"
TOKENS = block_tokens(ENC)


def cand(
    name: str,
    content: str,
    similarity: float = 0.5,
    source: str = "learnings",
    age_days: float = 1.0,
) -> Candidate:
    return support.candidate(name, content, similarity, now=NOW, source=source, age_days=age_days)


CANDIDATES = [
    cand("docker", "Docker networking broke when port 8080 was already bound", 0.6),
    cand("yaml", "User prefers YAML over JSON for config files", 0.7, "conversation"),
    cand("dup", "user prefers yaml over json for config files!", 0.65, "summaries"),
    cand("rsync", "Use rsync with --checksum for reliable deployments", 0.2, "playbook"),
]


def test_pipeline_keeps_every_intermediate_figure() -> None:
    result = assemble(CANDIDATES, "How do I fix Docker networking?", 500, now=NOW, tokens=TOKENS)
    by_id = {m.id: m for m in result.candidates}
    assert by_id["dup"].status == "duplicate"
    assert result.dropped["duplicate"] == ("dup",)
    assert {m.id for m in result.packed} == {"docker", "yaml"}
    # At the default price (0.033, adr/0142) a weak match with no shared word does not pay for
    # its line (at similarity 0.3 it would since lines lost their labels, adr/0130); the other
    # two are similar enough to.
    assert result.dropped["floor"] == ("rsync",)
    assert result.packed[0].id == "docker"  # keyword overlap lifts it above higher similarity
    # Absolute IDF overlap: "fix", in no candidate, weighs what an unseen word does.
    docker, network = (math.log(1 + (4 - 1 + 0.5) / 1.5),) * 2
    unseen = math.log(1 + 4.5 / 0.5)
    assert by_id["docker"].overlap == pytest.approx(
        (docker + network) / (docker + network + unseen)
    )
    fill = AssemblerConfig(token_price=0.0, absolute_overlap=False)
    relative = assemble(
        CANDIDATES, "How do I fix Docker networking?", 500, now=NOW, tokens=TOKENS, config=fill
    )
    # The old rule's overlap counts only query words some candidate has.
    assert next(m for m in relative.candidates if m.id == "docker").overlap == 1.0
    plain = assemble(
        CANDIDATES,
        "How do I fix Docker networking?",
        500,
        now=NOW,
        tokens=TOKENS,
        config=AssemblerConfig(idf_overlap=False),
    )
    plain_docker = next(m for m in plain.candidates if m.id == "docker")
    assert plain_docker.overlap == pytest.approx(2 / 3)  # fix, docker, network(ing)
    assert by_id["docker"].scored.relevance_score == 0.6
    assert result.rendered_tokens == count_tokens(result.block, ENC) <= 500
    lines = result.block.splitlines()
    assert lines[0] == BLOCK_OPEN
    assert lines[1] == BLOCK_NOTICE
    assert lines[-1] == BLOCK_CLOSE
    assert lines[2:4] == ["[learnings]", "Docker networking broke when port 8080 was already bound"]
    entry = by_id["docker"].to_dict()
    assert set(entry["score"]) >= {"composite", "relevance", "recency", "usefulness"}
    assert entry["status"] == "packed"
    explained = result.explain()
    assert explained["candidates"] == 4
    assert [m["id"] for m in explained["memories"]] == [m.id for m in result.packed]
    assert explained["dropped"]["duplicate"] == ["dup"]
    assert explained["rendered_tokens"] == result.rendered_tokens
    assert result.bundle_stats is not None
    assert result.bundle_stats.size == 4


@pytest.mark.parametrize("budget", [0, 10, 30, 45, 60, 80, 120])
def test_block_never_exceeds_the_budget(budget: int) -> None:
    result = assemble(CANDIDATES, "yaml docker", budget, now=NOW, tokens=TOKENS)
    assert result.rendered_tokens == count_tokens(result.block, ENC) <= budget
    if not result.packed:
        assert result.block == ""


def test_cap_limits_the_budget() -> None:
    config = AssemblerConfig(max_tokens=40)
    result = assemble(CANDIDATES, "yaml", 10_000, now=NOW, tokens=TOKENS, config=config)
    assert result.effective_budget == 40
    assert result.rendered_tokens <= 40


def test_bundle_cap_drops_the_lowest() -> None:
    many = [cand(str(n), f"fact number {n} about topic {n}", n / 100) for n in range(30)]
    config = AssemblerConfig(bundle=BundleConfig(max_items=5, min_salience_threshold=0.0))
    result = assemble(many, "facts", 5_000, now=NOW, tokens=TOKENS, config=config)
    assert len(result.dropped["bundle"]) == 25
    assert {m.id for m in result.packed} == {"29", "28", "27", "26", "25"}


def test_greedy_and_optimal_configs() -> None:
    long_text = "alpha " * 60
    items = [cand("long", long_text, 0.9)] + [
        cand(f"s{n}", f"short note {n} on beta", 0.5) for n in range(6)
    ]
    greedy = assemble(
        items,
        "beta",
        90,
        now=NOW,
        tokens=TOKENS,
        config=AssemblerConfig(packer="greedy"),
    )
    optimal = assemble(items, "beta", 90, now=NOW, tokens=TOKENS)
    assert optimal.total_value >= greedy.total_value
    assert optimal.packer == "optimal"
    assert greedy.packer == "greedy"


@pytest.mark.parametrize(
    "bad",
    [
        {"packer": "fast"},
        {"value_exponent": 0},
        {"dedup_threshold": 1.0},
        {"composite_weight": -1},
        {"token_price": -0.1},
        {"token_price": float("nan")},
        {"token_price": float("inf")},
    ],
)
def test_bad_config_is_rejected(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        AssemblerConfig(**bad)  # type: ignore[arg-type]


def test_empty_candidates() -> None:
    result = assemble([], "anything", 1_000, now=NOW, tokens=TOKENS)
    assert (result.block, result.rendered_tokens, result.packed) == ("", 0, ())


texts = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=80
)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(texts, st.floats(min_value=0, max_value=1)), max_size=25),
    st.integers(min_value=0, max_value=400),
    st.sampled_from(["o200k_base", "cl100k_base"]),
)
def test_rendered_block_fits_exactly(
    items: list[tuple[str, float]], budget: int, encoding: str
) -> None:
    candidates = [cand(str(n), text, sim) for n, (text, sim) in enumerate(items)]
    result = assemble(candidates, "query words", budget, now=NOW, tokens=block_tokens(encoding))
    assert result.rendered_tokens == count_tokens(result.block, encoding) <= budget
    statuses = {m.status for m in result.candidates}
    assert statuses <= {"packed", "bundle", "duplicate", "floor", "packer", "trimmed"}
    assert len(result.packed) == sum(m.status == "packed" for m in result.candidates)


WORDS = ["docker", "yaml", "json", "port", "networking", "config", "the", "deploys", "rsync"]


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.sampled_from(WORDS), max_size=8),
            st.sampled_from([0.2, 0.5, 0.5, 0.9]),
            st.sampled_from(["learnings", "playbook", "conversation", "summaries"]),
        ),
        max_size=30,
    ),
    st.booleans(),
    st.booleans(),
)
def test_ranking_matches_the_reference_formulas(
    specs: list[tuple[list[str], float, str]], idf: bool, absolute: bool
) -> None:
    # The assembler inlines the overlap and sorts indices; it must equal the plain formulas.
    from proxy.context.scorer import MemoryScorer
    from proxy.context.synthesizer import (
        BASE_RELEVANCE,
        STOPWORDS,
        fragment_score,
        idf_weights,
        normalise_words,
        query_matcher,
        weighted_overlap,
    )

    query = "docker networking deploy config ports"
    pool = [cand(f"m{i}", " ".join(w), sim, src) for i, (w, sim, src) in enumerate(specs)]
    config = AssemblerConfig(idf_overlap=idf, absolute_overlap=absolute)
    result = assemble(pool, query, 4_500, now=NOW, tokens=TOKENS, config=config)
    query_words = normalise_words(query, stopwords=STOPWORDS, stemmed=True)
    matches = [query_matcher(query_words, stemmed=True)(c.record.content) for c in pool]
    weights = idf_weights(matches)
    # Absolute overlap: a query word no candidate has weighs what df = 0 gives, ln(1 + (N+.5)/.5).
    unseen = math.log(1 + (len(pool) + 0.5) / 0.5)
    mass = math.fsum(weights.values()) + (
        len(query_words - set(weights)) * unseen if absolute else 0
    )
    expected = []
    for position, (candidate, found) in enumerate(zip(pool, matches, strict=True)):
        share = math.fsum(weights[w] for w in found) / mass if mass else 0.0
        relative = weighted_overlap(found, weights)
        overlap = (share if absolute else relative) if idf else len(found) / len(query_words)
        synth = fragment_score(BASE_RELEVANCE[candidate.record.source], overlap)
        composite = MemoryScorer.score_candidate(candidate, now=NOW).composite_score
        final = 0.2 * composite + 0.8 * synth
        expected.append((-final, position, candidate.record.id, overlap, synth))
    expected.sort()
    got = [(-m.final_score, m.id, m.overlap, m.synth_score) for m in result.candidates]
    assert got == [(f, name, o, s) for f, _, name, o, s in expected]


def test_each_candidate_text_is_looked_up_once() -> None:
    # Its match set and dedup signature come from one memo entry (dedup.text_profile).
    text_profile.cache_clear()
    assemble(CANDIDATES, "How do I fix Docker networking?", 500, now=NOW, tokens=TOKENS)
    info = text_profile.cache_info()
    assert (info.misses, info.hits) == (len(CANDIDATES), 0)
    assemble(CANDIDATES, "Which config format does the user prefer?", 500, now=NOW, tokens=TOKENS)
    info = text_profile.cache_info()
    assert (info.misses, info.hits) == (len(CANDIDATES), len(CANDIDATES))


def test_explanations_are_built_on_the_first_read_only() -> None:
    result = assemble(CANDIDATES, "How do I fix Docker networking?", 500, now=NOW, tokens=TOKENS)
    assert result.ranked.built == []  # injecting the block needs none of them
    assert result.packed_ids == tuple(m.id for m in result.packed)
    first = result.candidates
    assert result.candidates is first
    assert [m.id for m in first] == [c.record.id for c in result.ranked.candidates]
    assert all(m is first[row] for m, row in zip(result.packed, result.packed_rows, strict=True))
    # Each explanation's score is the ranking's, at the assembly's time.
    for m in first:
        assert m.scored == score_candidate(m.candidate, NOW)


def turn(name: str, content: str, context: str = "", similarity: float = 0.5) -> Candidate:
    hit = cand(name, content, similarity, "conversation")
    return Candidate(replace(hit.record, context=context), hit.similarity)


@pytest.mark.parametrize(
    ("context", "overlapping"),
    [
        ("", False),  # its own words share none with the question
        ("What do your kids like these days?", True),  # the turn before it does (adr/0142)
        ("Let us talk about the weather.", False),
    ],
)
def test_a_dialog_turn_is_scored_with_the_turn_before_it(context: str, overlapping: bool) -> None:
    query = "What do Melanie's kids like?"
    said = "They were stoked for the dinosaur exhibit!"
    result = assemble([turn("t", said, context)], query, 500, now=NOW, tokens=TOKENS)
    (scored,) = result.candidates
    assert (scored.overlap > 0) is overlapping
    # Packed or not, the block and its tokens are the turn's own text.
    if overlapping:
        assert scored.status == "packed"
        assert said in result.block
        assert context not in result.block
        assert scored.tokens == count_tokens(said, ENC)


def test_a_turns_context_does_not_make_it_a_duplicate() -> None:
    # Dedup compares the turns' own texts: two replies to one long question both stay (their
    # joined texts share nearly every word and would be duplicates).
    question = (
        "Where did you and the whole family go on holiday last summer with the kids and the dog?"
    )
    hits = [turn("a", "The lake", question, 0.6), turn("b", "Paris", question, 0.5)]
    result = assemble(hits, "holiday kids summer", 500, now=NOW, tokens=TOKENS)
    assert result.dropped["duplicate"] == ()
    assert set(result.packed_ids) == {"a", "b"}
