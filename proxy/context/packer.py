"""Seed compatibility: the greedy knapsack packer of seed milestone 3.5.5, and the optimal one.

``GreedyKnapsackPacker`` is the seed exactly: walk memories in score order, take what fits,
skip what does not, stop after 3 consecutive skips. ``OptimalKnapsackPacker`` maximises the
total score (branch and bound with a DP fallback, never below the greedy; ADR-0041). Both are
thin: ``pack`` reads each memory's token count and score and calls the engine's
``knapsack.select_greedy``/``select_optimal`` on plain values and weights, as the assembler does.
Token counts come with each memory (``ScoredMemory.tokens``, a dict's ``tokens`` or the
record's stored count) and are counted only as a fallback, with the given budget calculator or
else the process's tokenizer. ``make_packer(kind)`` returns the packer for
``"optimal"|"greedy"``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from proxy.context.knapsack import (
    MAX_CONSECUTIVE_SKIPS,
    PACKER_KINDS,
    KnapsackSolution,
    PackerKind,
    select_greedy,
    select_optimal,
)
from proxy.context.ranking import ScoredMemory
from proxy.context.records import Candidate
from proxy.context.tokens import Count
from proxy.tokenizer import tiktoken_tokenizer

__all__ = [
    "MAX_CONSECUTIVE_SKIPS",
    "PACKER_KINDS",
    "GreedyKnapsackPacker",
    "KnapsackSolution",
    "OptimalKnapsackPacker",
    "PackedMemories",
    "PackerKind",
    "TokenCounter",
    "make_packer",
    "memory_tokens",
    "select_greedy",
    "select_optimal",
]


@dataclass(frozen=True, slots=True)
class PackedMemories:
    """The packed memories in score order and the seed's figures about them."""

    memories: list[ScoredMemory[Any]]
    total_tokens: int
    total_score: float
    skipped_count: int  # memories that were not packed
    was_budget_reached: bool  # True if any memory was left out for lack of room
    proven_optimal: bool = False
    upper_bound: float | None = None  # no packing can score above this


class TokenCounter(Protocol):
    """Anything with the seed budget calculator's ``count_tokens``."""

    def count_tokens(self, text: str, model: str) -> int:
        """Tokens of ``text`` for ``model``."""
        ...


def memory_tokens(scored: ScoredMemory[Any], model: str, counter: TokenCounter | None) -> int:
    """The memory's stored token count; counted only when none came with it."""
    if scored.tokens is not None:
        return scored.tokens
    memory = scored.memory
    if isinstance(memory, Mapping) and isinstance(memory.get("tokens"), int):
        return int(memory["tokens"])
    count = fallback_count(model, counter)
    if isinstance(memory, Candidate):
        return memory.record.token_count(tiktoken_tokenizer().encoding_for_model(model), count)
    content = str(memory.get("content", "")) if isinstance(memory, Mapping) else str(memory)
    return count(content)


def fallback_count(model: str, counter: TokenCounter | None) -> Count:
    """Counting for ``model``: the given calculator's, else the process tokenizer's."""
    if counter is not None:
        return lambda text: counter.count_tokens(text, model)
    tokenizer = tiktoken_tokenizer()
    return tokenizer.counter(tokenizer.encoding_for_model(model))


class GreedyKnapsackPacker:
    """The seed's greedy 0/1 knapsack with skip-and-continue and the 3-skip stop."""

    kind: PackerKind = "greedy"

    def __init__(self, budget_calculator: TokenCounter | None = None) -> None:
        self._budget_calc = budget_calculator

    def select(
        self, values: Sequence[float], weights: Sequence[int], budget: int
    ) -> KnapsackSolution:
        """Choose indices for plain values and weights."""
        return select_greedy(values, weights, budget)

    def pack(
        self, scored_memories: Sequence[ScoredMemory[Any]], token_budget: int, model: str = "gpt-4o"
    ) -> PackedMemories:
        """Pack memories (sorted by score, highest first) into ``token_budget`` tokens."""
        if token_budget <= 0 or not scored_memories:
            return PackedMemories([], 0, 0.0, len(scored_memories), False)
        weights = [memory_tokens(s, model, self._budget_calc) for s in scored_memories]
        values = [s.composite_score for s in scored_memories]
        solution = self.select(values, weights, token_budget)
        packed = [scored_memories[i] for i in solution.indices]
        skipped = len(scored_memories) - len(packed)
        return PackedMemories(
            memories=packed,
            total_tokens=sum(weights[i] for i in solution.indices),
            total_score=round(solution.value, 6),
            skipped_count=skipped,
            was_budget_reached=skipped > 0,
            proven_optimal=solution.proven_optimal,
            upper_bound=round(solution.upper_bound, 6),
        )


class OptimalKnapsackPacker(GreedyKnapsackPacker):
    """Maximises the total score: branch and bound, DP fallback, never below greedy."""

    kind: PackerKind = "optimal"

    def select(
        self, values: Sequence[float], weights: Sequence[int], budget: int
    ) -> KnapsackSolution:
        """Choose indices for plain values and weights."""
        return select_optimal(values, weights, budget)


def make_packer(
    kind: PackerKind, budget_calculator: TokenCounter | None = None
) -> GreedyKnapsackPacker:
    """The packer for ``kind`` (``"optimal"`` is the default everywhere)."""
    if kind == "greedy":
        return GreedyKnapsackPacker(budget_calculator)
    return OptimalKnapsackPacker(budget_calculator)
