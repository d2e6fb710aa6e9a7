"""Exact 0/1 knapsack on plain values and token counts: the packers' engine.

``select_greedy`` is the seed's walk (score order, skip what does not fit, stop after 3
consecutive skips). ``select_optimal`` is exact: trivial cases, an incumbent (the better of the
greedy and a value-per-token fill), reduction by Dantzig bounds (items fixed in or out), then
depth-first branch and bound on the remaining core; if its node budget runs out, a DP on token
counts rounded up to a coarse grid (always feasible) and the best of all candidates, flagged
``proven_optimal=False`` with the Dantzig ``upper_bound``. It never scores below the greedy.
Pure functions; indices refer to the input order.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

PackerKind = Literal["optimal", "greedy"]  # select_optimal (the default) or the seed's greedy
PACKER_KINDS: tuple[PackerKind, ...] = ("optimal", "greedy")
MAX_CONSECUTIVE_SKIPS = 3
NODE_LIMIT = 4_000  # branch-and-bound nodes before the DP fallback (a few ms in CPython)
DP_CELLS = 1_024  # capacity grid of the fallback DP
RELATIVE_EPSILON = 1e-12
POSITIVE = (0.0).__lt__  # False for NaN, as ``v > 0`` is


@dataclass(frozen=True, slots=True)
class KnapsackSolution:
    """Chosen indices (ascending), their value and weight, and how they were found."""

    indices: tuple[int, ...]
    value: float
    weight: int
    proven_optimal: bool
    upper_bound: float
    nodes: int = 0
    method: str = "greedy"


def total_value(values: Sequence[float], indices: Sequence[int]) -> float:
    """Sum of values in index order, so equal sets always give equal totals."""
    return math.fsum(values[i] for i in sorted(indices))


def select_greedy(
    values: Sequence[float],
    weights: Sequence[int],
    capacity: int,
    max_skips: int = MAX_CONSECUTIVE_SKIPS,
) -> KnapsackSolution:
    """The seed's greedy in input order: skip what does not fit, stop after ``max_skips``."""
    chosen: list[int] = []
    used = 0
    skips = 0
    if capacity > 0:
        for i, weight in enumerate(weights):
            if used + weight <= capacity:
                chosen.append(i)
                used += weight
                skips = 0
                continue
            skips += 1
            if skips >= max_skips:
                break
    value = total_value(values, chosen)
    bound = dantzig_root_bound(values, weights, capacity)
    return KnapsackSolution(tuple(chosen), value, used, value >= bound, bound)


def dantzig_root_bound(values: Sequence[float], weights: Sequence[int], capacity: int) -> float:
    """The fractional-knapsack optimum: no 0/1 packing can score more."""
    if capacity <= 0:  # no budget, no memories: not even zero-token ones
        return 0.0
    inf = math.inf
    # Indices sorted by a list of ratios: no tuple and no key call an item (a stable sort, so
    # equal ratios keep the input order either way).
    ratios = [v / w if w > 0 else inf for v, w in zip(values, weights, strict=True)]
    positive = [i for i, v in enumerate(values) if v > 0]
    room = float(capacity)
    total = 0.0
    for i in sorted(positive, key=ratios.__getitem__, reverse=True):
        value, weight = values[i], weights[i]
        if weight <= room:
            total += value
            room -= weight
        else:
            total += value * room / weight
            break
    return total


def select_optimal(
    values: Sequence[float],
    weights: Sequence[int],
    capacity: int,
    *,
    node_limit: int = NODE_LIMIT,
    dp_cells: int = DP_CELLS,
) -> KnapsackSolution:
    """Maximum total value within ``capacity``; exact unless the node budget runs out."""
    if values and capacity > 0 and min(weights) > 0 and all(map(POSITIVE, values)):
        weight = sum(weights)
        if weight <= capacity:
            # Everything fits (the common case of a priced block): the packing is every item,
            # which the greedy finds too, proven optimal; no bound or search is needed.
            chosen = tuple(range(len(values)))
            value = total_value(values, chosen)
            return KnapsackSolution(chosen, value, weight, True, value, 0, "greedy")
    greedy = select_greedy(values, weights, capacity)
    if capacity <= 0:
        return greedy
    free = [i for i, w in enumerate(weights) if w <= 0 and values[i] > 0]
    items = [i for i, w in enumerate(weights) if 0 < w <= capacity and values[i] > 0]
    if sum(weights[i] for i in items) <= capacity:
        chosen = tuple(sorted(free + items))
        value = total_value(values, chosen)
        weight = sum(weights[i] for i in chosen)
        return best_of(
            values, greedy, KnapsackSolution(chosen, value, weight, True, value, 0, "all")
        )
    items.sort(key=lambda i: values[i] / weights[i], reverse=True)
    bound = greedy.upper_bound  # ``dantzig_root_bound(values, weights, capacity)``
    members = set(items)
    from_greedy = [i for i in greedy.indices if i in members]
    incumbent = max(
        (from_greedy, ratio_fill(weights, capacity, items)), key=lambda c: total_value(values, c)
    )
    lower = total_value(values, incumbent)
    fixed, core = reduce_items(values, weights, capacity, items, lower)
    room = capacity - sum(weights[i] for i in fixed)
    fixed_value = math.fsum(values[i] for i in fixed)
    found, nodes, exhausted = branch_and_bound(
        values, weights, room, core, lower - fixed_value, node_limit
    )
    chosen = tuple(sorted(incumbent if found is None else fixed + found))
    value = total_value(values, chosen)
    search = KnapsackSolution(
        chosen,
        value,
        sum(weights[i] for i in chosen),
        not exhausted,
        bound if exhausted else value,
        nodes,
        "branch_and_bound",
    )
    if not exhausted:
        return best_of(values, greedy, with_free(values, weights, search, free))
    grid = dp_on_grid(values, weights, room, core, dp_cells)
    merged = tuple(sorted(fixed + list(grid.indices)))
    grid = KnapsackSolution(
        merged, total_value(values, merged), sum(weights[i] for i in merged), False, bound, 0, "dp"
    )
    return best_of(
        values,
        greedy,
        with_free(values, weights, search, free),
        with_free(values, weights, grid, free),
    )


def ratio_fill(weights: Sequence[int], capacity: int, items: Sequence[int]) -> list[int]:
    """Take items in the given (value/token) order, skipping what does not fit."""
    chosen: list[int] = []
    room = capacity
    for i in items:
        if weights[i] <= room:
            chosen.append(i)
            room -= weights[i]
    return chosen


def reduce_items(
    values: Sequence[float],
    weights: Sequence[int],
    capacity: int,
    items: Sequence[int],
    lower: float,
) -> tuple[list[int], list[int]]:
    """Fix items whose forced exclusion (or inclusion) bounds below ``lower``: (fixed in, core).

    Items are in value/token order; every packing better than ``lower`` takes the fixed items
    and none of the excluded ones, so the search runs on the core alone.
    """
    v = [values[i] for i in items]
    w = [weights[i] for i in items]
    n = len(items)
    prefix_w = [0] * (n + 1)
    prefix_v = [0.0] * (n + 1)
    for k in range(n):
        prefix_w[k + 1] = prefix_w[k] + w[k]
        prefix_v[k + 1] = prefix_v[k] + v[k]
    critical = bisect.bisect_right(prefix_w, capacity) - 1
    threshold = lower - abs(lower) * RELATIVE_EPSILON - RELATIVE_EPSILON
    fixed: list[int] = []
    core: list[int] = []
    for k in range(n):
        if k < critical:  # in the fractional optimum: bound the packings without it
            target = capacity + w[k]
            j = bisect.bisect_right(prefix_w, target) - 1
            bound = prefix_v[j] - v[k] + ((target - prefix_w[j]) * v[j] / w[j] if j < n else 0.0)
            if bound < threshold:
                fixed.append(items[k])
                continue
        else:  # outside it: bound the packings with it
            target = capacity - w[k]
            j = bisect.bisect_right(prefix_w, target) - 1
            bound = v[k] + prefix_v[j] + ((target - prefix_w[j]) * v[j] / w[j] if j < n else 0.0)
            if bound < threshold:
                continue
        core.append(items[k])
    return fixed, core


def with_free(
    values: Sequence[float], weights: Sequence[int], solution: KnapsackSolution, free: list[int]
) -> KnapsackSolution:
    """Add the zero-token items, which every optimal packing takes."""
    if not free:
        return solution
    chosen = tuple(sorted(set(solution.indices) | set(free)))
    return KnapsackSolution(
        chosen,
        total_value(values, chosen),
        sum(weights[i] for i in chosen),
        solution.proven_optimal,
        solution.upper_bound + math.fsum(values[i] for i in free),
        solution.nodes,
        solution.method,
    )


def best_of(values: Sequence[float], *solutions: KnapsackSolution) -> KnapsackSolution:
    """The highest-value solution (earlier wins ties); optimality and bound carried over."""
    best = solutions[0]
    for other in solutions[1:]:
        if other.value > best.value:
            best = other
    proven = any(s.proven_optimal for s in solutions[1:]) or best.proven_optimal
    bound = min(s.upper_bound for s in solutions)
    return KnapsackSolution(
        best.indices,
        best.value,
        best.weight,
        proven or best.value >= bound,
        max(bound, best.value),
        sum(s.nodes for s in solutions),
        best.method,
    )


def branch_and_bound(
    values: Sequence[float],
    weights: Sequence[int],
    capacity: int,
    items: list[int],
    lower: float,
    node_limit: int,
) -> tuple[list[int] | None, int, bool]:
    """Depth-first search (taking first) for a packing worth more than ``lower``.

    Items are in value/token order; each node is pruned by the Dantzig bound of what remains.
    Returns the best packing found (or ``None``), the nodes visited and whether the node budget
    ran out before the search space was exhausted.
    """
    v = [values[i] for i in items]
    w = [weights[i] for i in items]
    n = len(items)
    prefix_w = [0] * (n + 1)
    prefix_v = [0.0] * (n + 1)
    for k in range(n):
        prefix_w[k + 1] = prefix_w[k] + w[k]
        prefix_v[k + 1] = prefix_v[k] + v[k]
    best_value = lower
    best_chain: Any = None
    found = False
    nodes = 0
    # Each entry: next item, room left, value so far, chosen items as linked (start, stop) runs.
    stack: list[tuple[int, int, float, Any]] = [(0, capacity, 0.0, None)]
    while stack:
        nodes += 1
        if nodes > node_limit:
            break
        k, room, value, chain = stack.pop()
        target = prefix_w[k] + room
        j = bisect.bisect_right(prefix_w, target, lo=k) - 1  # items k..j-1 fit whole
        whole = value + prefix_v[j] - prefix_v[k]
        bound = whole + ((target - prefix_w[j]) * v[j] / w[j] if j < n else 0.0)
        margin = best_value + abs(best_value) * RELATIVE_EPSILON + RELATIVE_EPSILON
        if whole > margin:
            best_value, best_chain, found = whole, (k, j, chain), True
            margin = best_value + abs(best_value) * RELATIVE_EPSILON + RELATIVE_EPSILON
        if j >= n or bound <= margin:
            continue
        stack.append((k + 1, room, value, chain))  # without item k
        if w[k] <= room:  # with item k, explored first
            stack.append((k + 1, room - w[k], value + v[k], (k, k + 1, chain)))
    exhausted = nodes > node_limit
    return (list(decode(best_chain, items)) if found else None), nodes, exhausted


def decode(chain: Any, items: list[int]) -> tuple[int, ...]:
    """Turn the linked list of (first, stop, parent) runs into sorted input indices."""
    chosen: list[int] = []
    while chain is not None:
        start, stop, chain = chain
        chosen.extend(items[start:stop])
    return tuple(sorted(chosen))


def dp_on_grid(
    values: Sequence[float],
    weights: Sequence[int],
    capacity: int,
    items: list[int],
    cells: int,
) -> KnapsackSolution:
    """0/1 DP with token counts rounded up to ``capacity / cells`` (feasible), then a fill."""
    scale = max(1, math.ceil(capacity / cells))
    grid = capacity // scale
    coarse = [math.ceil(weights[i] / scale) for i in items]
    table = np.zeros(grid + 1)
    keep = np.zeros((len(items), grid + 1), dtype=bool)
    for row, (i, cost) in enumerate(zip(items, coarse, strict=True)):
        if cost > grid:
            continue
        candidate = table[: grid + 1 - cost] + values[i]
        better = candidate > table[cost:]
        keep[row, cost:] = better
        table[cost:] = np.where(better, candidate, table[cost:])
    cell = int(np.argmax(table))
    chosen: set[int] = set()
    for row in range(len(items) - 1, -1, -1):
        if keep[row, cell]:
            chosen.add(items[row])
            cell -= coarse[row]
    room = capacity - sum(weights[i] for i in chosen)
    for i in items:  # ratio order: fill what the rounding left
        if i not in chosen and weights[i] <= room:
            chosen.add(i)
            room -= weights[i]
    indices = tuple(sorted(chosen))
    value = total_value(values, indices)
    return KnapsackSolution(
        indices,
        value,
        capacity - room,
        False,
        dantzig_root_bound(values, weights, capacity),
        0,
        "dp",
    )
