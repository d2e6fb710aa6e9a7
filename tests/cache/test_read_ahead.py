"""Values a request read ahead: taken once, only inside the request's scope, shared with the
tasks it starts."""

from __future__ import annotations

import asyncio

from proxy.cache.read_ahead import offer, read_ahead, take


def test_a_value_read_ahead_is_taken_once() -> None:
    with read_ahead():
        offer("k", b"7")
        assert take("k") == b"7"
        assert take("k") is None  # the next read goes to the cache


def test_nothing_is_kept_outside_a_scope_or_past_it() -> None:
    offer("k", b"7")
    assert take("k") is None
    with read_ahead():
        offer("k", b"7")
    with read_ahead():
        assert take("k") is None  # another request's scope


def test_an_absent_value_is_not_kept() -> None:
    with read_ahead():
        offer("k", None)
        assert take("k") is None


async def test_tasks_the_request_starts_share_its_values() -> None:
    async def search() -> bytes | None:
        await asyncio.sleep(0)
        return take("k")

    with read_ahead():
        offer("k", b"7")
        assert await asyncio.ensure_future(search()) == b"7"  # a task of its own
        assert take("k") is None
