"""Query text: the last user messages, latest first, never the memory block."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.context.render import BLOCK_CLOSE, BLOCK_OPEN, render_block
from proxy.pipeline.query import content_text, query_text, strip_block


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


@pytest.mark.parametrize(
    ("messages", "window", "expected"),
    [
        ([], 2, ""),
        ([user("a")], 2, "a"),
        ([user("a"), {"role": "assistant", "content": "x"}, user("b")], 2, "b\na"),
        ([user("a"), user("b"), user("c")], 2, "c\nb"),
        ([user("a"), user("b"), user("c")], 1, "c"),
        ([user("a"), user("b")], 0, "b"),
        ([{"role": "system", "content": "sys"}, user("q")], 3, "q"),
        ([user([{"type": "text", "text": "part"}, {"type": "image_url"}])], 1, "part"),
        ([user("a"), user("   ")], 1, "a"),
        ([user(None), "junk", user("z")], 2, "z"),
    ],
)
def test_query_text(messages: list[Any], window: int, expected: str) -> None:
    assert query_text(messages, window) == expected


def test_query_is_capped_keeping_the_latest() -> None:
    text = query_text([user("old " * 1000), user("latest question")], 2, max_chars=50)
    assert text.startswith("latest question")
    assert len(text) == 50


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("plain", "plain"),
        (f"a {BLOCK_OPEN}x{BLOCK_CLOSE} b", "a  b"),
        (f"{BLOCK_OPEN}x{BLOCK_CLOSE}{BLOCK_OPEN}y{BLOCK_CLOSE}", ""),
        (f"keep {BLOCK_OPEN} unclosed", "keep "),
    ],
)
def test_strip_block(text: str, expected: str) -> None:
    assert strip_block(text) == expected


@given(st.lists(st.text(max_size=40), max_size=5), st.text(max_size=40))
def test_the_block_never_becomes_query_text(lines: list[str], question: str) -> None:
    block = render_block([f"[learnings] SECRET-{i} {line}" for i, line in enumerate(lines)])
    messages = [{"role": "system", "content": block}, user(f"{question}\n\n{block}")]
    query = query_text(messages, 3)
    assert BLOCK_OPEN not in query
    assert "SECRET-" not in query or "SECRET-" in question


def test_content_text_of_odd_shapes() -> None:
    assert content_text(None) == ""
    assert content_text(42) == ""
    assert content_text([{"type": "text", "text": 3}]) == ""
