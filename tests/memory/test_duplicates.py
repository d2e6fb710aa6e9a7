"""Write hygiene's rule: same words in the same order, whatever the case, forms and punctuation."""

from __future__ import annotations

import pytest

from proxy.memory.duplicates import normal_form, same_memory


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("I live in Porto.", "I live in Porto."),
        ("I live in Porto.", "i live in  porto"),
        ("I live in Porto.", "I live in Porto!!"),
        ("\uff29 live in Porto", "I live in Porto"),  # a fullwidth I: NFKC
        ("STRASSE", "strasse"),
        ("User's daughter: Ana", "user s daughter ana"),
    ],
)
def test_the_same_memory(a: str, b: str) -> None:
    assert same_memory(a, b)
    assert same_memory(b, a)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("I live in Porto.", "I live in Lisbon."),
        ("I have two cats.", "I have three cats."),
        ("User prefers dark mode.", "User prefers light mode."),
        ("Porto is where I live", "I live in Porto"),  # other words: a reconciliation matter
        ("...", "!!!"),  # no words at all is never a duplicate
    ],
)
def test_not_the_same_memory(a: str, b: str) -> None:
    assert not same_memory(a, b)


def test_normal_form() -> None:
    assert normal_form("  Hello,\tWorld! ") == "hello world"
