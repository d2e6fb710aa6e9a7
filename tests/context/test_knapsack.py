"""Property tests for the knapsack solvers."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.context.knapsack import select_greedy, select_optimal
from tests.context.strategies import knapsack_instances as instances


def brute_force(values: list[float], weights: list[int], capacity: int) -> float:
    best = 0.0
    if capacity <= 0:
        return best
    for r in range(len(values) + 1):
        for combo in itertools.combinations(range(len(values)), r):
            if sum(weights[i] for i in combo) <= capacity:
                best = max(best, sum(values[i] for i in combo))
    return best


@settings(max_examples=300, deadline=None)
@given(instances)
def test_optimal_is_exact_and_never_below_greedy(
    instance: tuple[list[float], list[int], int],
) -> None:
    values, weights, budget = instance
    greedy = select_greedy(values, weights, budget)
    optimal = select_optimal(values, weights, budget)
    assert optimal.value >= greedy.value
    assert optimal.proven_optimal
    assert optimal.value == pytest.approx(brute_force(values, weights, budget), abs=1e-9)
    assert optimal.upper_bound >= optimal.value - 1e-12


@settings(max_examples=200, deadline=None)
@given(instances, st.integers(min_value=0, max_value=5))
def test_node_budget_fallback_is_feasible_bounded_and_beats_greedy(
    instance: tuple[list[float], list[int], int], node_limit: int
) -> None:
    values, weights, budget = instance
    limited = select_optimal(values, weights, budget, node_limit=node_limit, dp_cells=8)
    assert limited.weight == sum(weights[i] for i in limited.indices) <= max(budget, 0)
    assert limited.value >= select_greedy(values, weights, budget).value
    assert limited.upper_bound >= brute_force(values, weights, budget) - 1e-9
