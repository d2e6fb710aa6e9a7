"""Parsing a whole SSE body for completion hooks."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy.sse import LINES_PER_SLICE, iter_events, read_events
from tests.fakes.ticker import loop_ticks


def test_iter_events_skips_done_comments_and_garbage() -> None:
    raw = b': keep-alive\n\ndata: {"a": 1}\n\ndata: not json\n\ndata: [1]\n\ndata: [DONE]\n\n'
    assert iter_events(raw) == [{"a": 1}]


LINES = [
    b"",
    b": keep-alive",
    b'data: {"a": 1}',
    b"data:{}",
    b"data: not json",
    b"data: [1]",
    b"data: [DONE]",
    b"event: x",
    b'data:  {"b": "\\u00e9"}  ',
]


@given(st.lists(st.sampled_from(LINES), max_size=400))
async def test_read_events_reads_what_iter_events_reads(lines: list[bytes]) -> None:
    raw = b"\n".join(lines)
    assert await read_events(raw) == iter_events(raw)


async def test_read_events_lets_the_loop_run_between_slices() -> None:
    # A long answer's events parsed in one go held the event loop for tens of milliseconds.
    event = b'data: {"choices": [{"index": 0, "delta": {"content": "w"}}]}\n\n'
    raw = event * (LINES_PER_SLICE * 3)  # two lines an event: six slices
    async with loop_ticks() as ticks:
        events = await read_events(raw)
    assert len(events) == LINES_PER_SLICE * 3
    assert ticks.count >= 5
