"""Property tests for the knapsack solvers."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.context import knapsack
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


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(min_value=1e-9, max_value=1.0), st.integers(1, 60)),
        min_size=1,
        max_size=12,
    ),
    st.integers(0, 40),
)
def test_everything_fitting_is_the_search_result_without_the_search(
    items: list[tuple[float, int]], spare: int
) -> None:
    values, weights = [v for v, _ in items], [w for _, w in items]
    capacity = sum(weights) + spare
    fast = select_optimal(values, weights, capacity)
    # The same instance through the general path (an item of no value that does not fit
    # changes nothing but skips the shortcut); the result must agree field by field.
    general = select_optimal([*values, 0.0], [*weights, capacity + 1], capacity)
    assert fast.indices == general.indices == tuple(range(len(values)))
    assert (fast.value, fast.weight, fast.proven_optimal) == (
        general.value,
        general.weight,
        general.proven_optimal,
    )
    assert fast.upper_bound == general.upper_bound == fast.value


def test_everything_fitting_computes_no_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_bound(*_: object) -> float:
        raise AssertionError("the Dantzig bound was computed")

    monkeypatch.setattr(knapsack, "dantzig_root_bound", no_bound)
    solution = select_optimal([0.3, 0.2, 0.1], [10, 20, 30], 60)
    assert solution.indices == (0, 1, 2)
    assert solution.proven_optimal
    with pytest.raises(AssertionError):  # the spy sees the general path
        select_optimal([0.3, 0.2, 0.1], [10, 20, 30], 59)
