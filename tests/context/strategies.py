"""Hypothesis strategies shared by the packer and knapsack tests."""

from __future__ import annotations

from hypothesis import strategies as st

# (values, weights, budget): up to 10 items, budgets that can be negative, zero or roomy.
knapsack_instances = st.integers(min_value=0, max_value=10).flatmap(
    lambda n: st.tuples(
        st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=n, max_size=n),
        st.lists(st.integers(min_value=0, max_value=120), min_size=n, max_size=n),
        st.integers(min_value=-5, max_value=400),
    )
)
