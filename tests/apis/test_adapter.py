"""The adapter seam's own helpers: where the block may go, and chat-shaped messages."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.apis.adapter import SYSTEM, TURN, Position, chat_messages, place
from proxy.apis.anthropic_messages import ANTHROPIC_MESSAGES
from proxy.apis.openai_chat import OPENAI_CHAT
from proxy.apis.openai_responses import RESPONSES
from proxy.defaults import MEMORY_POSITION


class TurnTaking:
    """An adapter stand-in with both places."""

    positions: frozenset[Position] = frozenset({SYSTEM, TURN})


@pytest.mark.parametrize("api", [OPENAI_CHAT, RESPONSES, ANTHROPIC_MESSAGES])
def test_every_api_has_the_system_place_and_falls_back_to_it(api: Any) -> None:
    assert SYSTEM in api.positions
    assert place(api, SYSTEM) == SYSTEM
    assert place(api, TURN) == (TURN if TURN in api.positions else SYSTEM)


def test_a_position_the_api_has_is_kept() -> None:
    assert place(TurnTaking(), TURN) == TURN  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ([{"role": "user", "content": "hi"}], [{"role": "user", "content": "hi"}]),
        ([{"role": "user"}, "stray"], []),
        ("hi", []),
        (None, []),
        ([], []),
    ],
)
def test_chat_messages(value: object, expected: list[Any]) -> None:
    assert chat_messages(value) == expected


@pytest.mark.parametrize("api", [OPENAI_CHAT, RESPONSES, ANTHROPIC_MESSAGES])
def test_every_api_takes_the_default_position_turn(api: Any) -> None:
    """The cache-friendly place is the default for every API memproxy serves memory on."""
    assert MEMORY_POSITION == TURN
    assert place(api, MEMORY_POSITION) == TURN
