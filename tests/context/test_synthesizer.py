"""Table and property tests for the memory synthesizer."""

from __future__ import annotations

import pytest

from proxy.context.synthesizer import (
    MemorySynthesizer,
    fragment_score,
    render_line,
)
from proxy.tokenizer import count_tokens

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
