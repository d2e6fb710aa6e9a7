"""The seed documents' public names stay importable where the seeds put them, over the engine."""

from __future__ import annotations

import importlib

import pytest

from proxy.context import allocation, ranking, shortlist

SEED_NAMES = {
    "budget": [
        "DEFAULT_CONTEXT_WINDOW",
        "MODEL_CONTEXT_WINDOWS",
        "RESPONSE_RESERVE_MAX",
        "RESPONSE_RESERVE_MIN",
        "RESPONSE_RESERVE_RATIO",
        "SAFETY_BUFFER_RATIO",
        "TokenBudget",
        "TokenBudgetCalculator",
    ],
    "scorer": [
        "ACCESS_FREQUENCY_CAP",
        "RECENCY_DECAY_LAMBDA",
        "WEIGHT_CONFIDENCE",
        "WEIGHT_FREQUENCY",
        "WEIGHT_RECENCY",
        "WEIGHT_RELEVANCE",
        "WEIGHT_USEFULNESS",
        "MemoryScorer",
        "ScoredMemory",
    ],
    "packer": ["MAX_CONSECUTIVE_SKIPS", "GreedyKnapsackPacker", "PackedMemories"],
    "synthesizer": ["MemoryFragment", "MemorySynthesizer"],
    "bundle": [
        "AddResult",
        "BundleAccumulator",
        "BundleConfig",
        "BundleStats",
        "ContextItem",
        "ContextItemType",
        "calculate_priority_score",
        "calculate_recency_score",
    ],
}


@pytest.mark.parametrize(
    ("module", "name"), [(m, n) for m, names in SEED_NAMES.items() for n in names]
)
def test_seed_name_is_importable(module: str, name: str) -> None:
    assert hasattr(importlib.import_module(f"proxy.context.{module}"), name)


def test_seed_types_are_the_engines() -> None:
    from proxy.context import budget, bundle, scorer

    assert issubclass(budget.TokenBudgetCalculator, allocation.BudgetCalculator)
    assert budget.TokenBudget is allocation.TokenBudget
    assert scorer.ScoredMemory is ranking.ScoredMemory
    assert (bundle.BundleConfig, bundle.BundleStats) == (
        shortlist.BundleConfig,
        shortlist.BundleStats,
    )
