"""``ReopeningStore``: a store down at start is opened in the background, with backoff."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np
import pytest

from proxy.errors import ConfigError
from proxy.memory.reopening import Backoff, ReopeningStore, StoreReopening
from tests.fakes.store import FailingOpener
from tests.memory.support import record

FAST = Backoff(first_s=0.01, max_s=0.04)


class Gauge:
    def __init__(self) -> None:
        self.up: list[bool] = []
        self.retries = 0

    def set_backend_up(self, backend: str, up: bool) -> None:
        assert backend == "store"
        self.up.append(up)

    def count_backend_retry(self, backend: str) -> None:
        self.retries += 1


async def wait_for(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):
        while not condition():  # noqa: ASYNC110 - the store under test has no event to wait on
            await asyncio.sleep(0.005)


async def test_calls_fail_fast_until_the_store_opens_then_go_through() -> None:
    opener = FailingOpener(failures=4)  # one at start (the caller's), three retries
    gauge = Gauge()
    first = ConnectionRefusedError("down")
    store = ReopeningStore(opener, first_error=first, gauge=gauge, backoff=FAST)
    opener.calls = 1  # the caller's own first attempt
    store.start()
    with pytest.raises(StoreReopening, match=r"retrying \(1 failed attempts"):
        await store.count("t")
    with pytest.raises(StoreReopening):
        await store.ready()
    await wait_for(lambda: store.opened is not None)
    assert opener.calls == 5
    assert gauge.retries == 3
    assert gauge.up == [False, True]
    assert store.failed_attempts == 4
    assert await store.ready() is True
    assert await store.count("t") == 0
    await store.close()
    assert opener.store.closed


async def test_a_configuration_error_stops_the_retries() -> None:
    opener = FailingOpener(failures=10, error=ConfigError("vectors of another size"))
    store = ReopeningStore(opener, first_error=OSError(), gauge=Gauge(), backoff=FAST)
    store.start()
    await wait_for(lambda: store.gave_up)
    calls = opener.calls
    await asyncio.sleep(0.1)
    assert opener.calls == calls == 1
    with pytest.raises(StoreReopening, match="not retrying: vectors of another size"):
        await store.search("t", None)  # type: ignore[arg-type]
    await store.close()


async def test_close_stops_the_retries() -> None:
    opener = FailingOpener(failures=1000)
    store = ReopeningStore(opener, first_error=OSError(), gauge=Gauge(), backoff=FAST)
    store.start()
    await wait_for(lambda: opener.calls >= 2)
    await store.close()
    calls = opener.calls
    await asyncio.sleep(0.1)
    assert opener.calls == calls


def test_backoff_doubles_up_to_its_cap_with_jitter_in_the_upper_half() -> None:
    next_delay = Backoff(first_s=1.0, max_s=8.0).delays()
    waits = [next_delay() for _ in range(6)]
    for wait, nominal in zip(waits, [1, 2, 4, 8, 8, 8], strict=True):
        assert nominal / 2 <= wait <= nominal


async def test_writes_reach_the_store_once_open() -> None:
    opener = FailingOpener(failures=1)
    store = ReopeningStore(opener, first_error=OSError(), gauge=Gauge(), backoff=FAST)
    opener.calls = 1
    store.start()
    await wait_for(lambda: store.opened is not None)
    await store.add([record("a", tenant="t")], np.ones((1, opener.store.dimensions), np.float32))
    assert await store.count("t") == 1
    await store.close()
