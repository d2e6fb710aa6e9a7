"""Backend-neutral scoping conditions (translated by each store; the contract suite runs both)."""

from __future__ import annotations

import numpy as np
import pytest

from proxy.memory.filters import list_conditions, scope_conditions
from proxy.memory.store import SearchQuery


@pytest.mark.parametrize(
    ("user", "sources", "expected"),
    [
        ("u1", None, [("tenant", ("t1",)), ("user", ("u1", ""))]),
        ("", None, [("tenant", ("t1",)), ("user", ("",))]),  # shared only, once
        (
            "u1",
            ("learnings", "facts"),
            [("tenant", ("t1",)), ("user", ("u1", "")), ("source", ("learnings", "facts"))],
        ),
    ],
)
def test_scope_conditions(
    user: str, sources: tuple[str, ...] | None, expected: list[tuple[str, tuple[str, ...]]]
) -> None:
    query = SearchQuery(np.zeros(2, dtype=np.float32), "", user, sources, 5)
    assert scope_conditions("t1", query) == expected


@pytest.mark.parametrize(
    ("user", "source", "expected"),
    [
        (None, None, [("tenant", ("t1",))]),
        ("u1", None, [("tenant", ("t1",)), ("user", ("u1",))]),
        (None, "facts", [("tenant", ("t1",)), ("source", ("facts",))]),
        ("", "facts", [("tenant", ("t1",)), ("user", ("",)), ("source", ("facts",))]),
    ],
)
def test_list_conditions(
    user: str | None, source: str | None, expected: list[tuple[str, tuple[str, ...]]]
) -> None:
    assert list_conditions("t1", user, source) == expected
