"""Table and property tests for the greedy and optimal packers (seed milestone 3.5.5)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings

from proxy.context.budget import TokenBudgetCalculator
from proxy.context.packer import (
    GreedyKnapsackPacker,
    OptimalKnapsackPacker,
    make_packer,
)
from proxy.context.records import Candidate, MemoryRecord
from proxy.context.scorer import ScoredMemory
from tests.context.strategies import knapsack_instances as instances


def scored(score: float, tokens: int, name: str = "") -> ScoredMemory:
    memory = {"id": name or f"{score}-{tokens}", "content": "x"}
    return ScoredMemory(memory, score, score, 0.5, 0.5, 0.8, 0.0, tokens)


def ids(packed: list[ScoredMemory]) -> list[str]:
    return [s.memory["id"] for s in packed]


@pytest.mark.parametrize("packer", [GreedyKnapsackPacker(), OptimalKnapsackPacker()])
def test_includes_everything_that_fits(packer: GreedyKnapsackPacker) -> None:
    memories = [scored(0.9, 10, "a"), scored(0.8, 20, "b"), scored(0.7, 30, "c")]
    result = packer.pack(memories, 100)
    assert ids(result.memories) == ["a", "b", "c"]
    assert (result.total_tokens, result.skipped_count, result.was_budget_reached) == (60, 0, False)
    assert result.total_score == pytest.approx(2.4)


def test_skip_and_continue_past_a_large_memory() -> None:
    memories = [scored(0.9, 10, "a"), scored(0.85, 500, "big"), scored(0.8, 20, "b")]
    result = GreedyKnapsackPacker().pack(memories, 100)
    assert ids(result.memories) == ["a", "b"]
    assert result.skipped_count == 1
    assert result.was_budget_reached


def test_stops_after_three_consecutive_skips() -> None:
    memories = [
        scored(0.9, 90, "a"),
        scored(0.8, 50, "s1"),
        scored(0.7, 50, "s2"),
        scored(0.6, 50, "s3"),
        scored(0.5, 5, "never-reached"),
    ]
    result = GreedyKnapsackPacker().pack(memories, 100)
    assert ids(result.memories) == ["a"]
    assert result.skipped_count == 4  # three skipped plus the one never looked at
    optimal = OptimalKnapsackPacker().pack(memories, 100)
    assert ids(optimal.memories) == ["s1", "s2"]  # 1.5 beats a + never-reached (1.4)


def test_skip_counter_resets_after_a_fit() -> None:
    memories = [
        scored(0.9, 60, "a"),
        scored(0.8, 50, "s1"),
        scored(0.7, 50, "s2"),
        scored(0.6, 10, "fits"),
        scored(0.5, 50, "s3"),
        scored(0.4, 5, "also"),
    ]
    assert ids(GreedyKnapsackPacker().pack(memories, 100).memories) == ["a", "fits", "also"]


@pytest.mark.parametrize(
    ("budget", "memories", "expected_skipped"),
    [(0, [scored(0.5, 1)], 1), (-5, [scored(0.5, 1)], 1), (100, [], 0)],
)
def test_empty_or_zero_budget(
    budget: int, memories: list[ScoredMemory], expected_skipped: int
) -> None:
    for packer in (GreedyKnapsackPacker(), OptimalKnapsackPacker()):
        result = packer.pack(memories, budget)
        assert result.memories == []
        assert (result.total_tokens, result.skipped_count) == (0, expected_skipped)
        assert not result.was_budget_reached


def test_memories_stay_in_score_order() -> None:
    memories = [
        scored(0.9, 80, "a"),
        scored(0.6, 30, "b"),
        scored(0.55, 30, "c"),
        scored(0.5, 40, "d"),
    ]
    result = OptimalKnapsackPacker().pack(memories, 100)
    assert ids(result.memories) == ["b", "c", "d"]
    assert result.proven_optimal
    assert result.total_score == pytest.approx(1.65)


def test_token_counts_come_with_the_memory() -> None:
    class Counting:
        calls = 0

        def count_tokens(self, text: str, model: str) -> int:
            Counting.calls += 1
            return 7

    record = MemoryRecord(
        "m",
        "t",
        "u",
        "learnings",
        "some text",
        datetime(2026, 1, 1, tzinfo=UTC),
        tokens={"o200k_base": 3},
    )
    typed = ScoredMemory(Candidate(record, 0.5), 0.5, 0.5, 0.5, 0.5, 0.5, 0.0)
    dict_with_count = ScoredMemory({"content": "abc", "tokens": 4}, 0.5, 0.5, 0.5, 0.5, 0.5, 0.0)
    dict_without = ScoredMemory({"content": "abc"}, 0.5, 0.5, 0.5, 0.5, 0.5, 0.0)
    result = GreedyKnapsackPacker(Counting()).pack([typed, dict_with_count, dict_without], 100)
    assert result.total_tokens == 3 + 4 + 7
    assert Counting.calls == 1


def test_seed_constructor_with_budget_calculator() -> None:
    packer = GreedyKnapsackPacker(TokenBudgetCalculator())
    memory = ScoredMemory({"content": "Hello world"}, 0.5, 0.5, 0.5, 0.5, 0.5, 0.0)
    assert packer.pack([memory], 10, "gpt-4o").total_tokens == 2


@pytest.mark.parametrize(
    ("kind", "cls"), [("greedy", GreedyKnapsackPacker), ("optimal", OptimalKnapsackPacker)]
)
def test_make_packer(kind: str, cls: type) -> None:
    packer = make_packer(kind)  # type: ignore[arg-type]
    assert type(packer) is cls
    assert packer.kind == kind


@settings(max_examples=300, deadline=None)
@given(instances)
def test_packed_tokens_within_budget_and_equal_the_sum(
    instance: tuple[list[float], list[int], int],
) -> None:
    values, weights, budget = instance
    memories = [scored(v, w, str(i)) for i, (v, w) in enumerate(zip(values, weights, strict=True))]
    for packer in (GreedyKnapsackPacker(), OptimalKnapsackPacker()):
        result = packer.pack(memories, budget)
        assert result.total_tokens <= max(budget, 0)
        assert result.total_tokens == sum(m.tokens or 0 for m in result.memories)
        assert result.skipped_count == len(memories) - len(result.memories)


@settings(max_examples=100, deadline=None)
@given(instances)
def test_packer_total_score_never_below_greedy(
    instance: tuple[list[float], list[int], int],
) -> None:
    values, weights, budget = instance
    memories = [
        scored(round(v, 6), w, str(i)) for i, (v, w) in enumerate(zip(values, weights, strict=True))
    ]
    greedy = GreedyKnapsackPacker().pack(memories, budget)
    optimal = OptimalKnapsackPacker().pack(memories, budget)
    assert optimal.total_score >= greedy.total_score
