"""The serving process's garbage-collector settings."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from proxy.app import create_app
from proxy.gc_tuning import GEN0_THRESHOLD, tune_gc_for_serving
from tests.conftest import proxy_settings


@pytest.fixture
def restore_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("restore_gc")
def test_tuning_freezes_start_up_objects_and_raises_the_threshold() -> None:
    tune_gc_for_serving()
    assert gc.get_threshold()[0] == GEN0_THRESHOLD
    assert gc.get_freeze_count() > 0


def in_sight(obj: object) -> bool:
    """Whether the collector still scans ``obj`` (a frozen object is in no generation)."""
    return any(found is obj for found in gc.get_objects())


@pytest.mark.usefixtures("restore_gc")
@pytest.mark.parametrize("serving", [True, False])
async def test_a_serving_lifespan_freezes_the_services_it_opened(serving: bool) -> None:
    app = create_app(proxy_settings("http://127.0.0.1:9/v1"), serving=serving)
    async with app.router.lifespan_context(app):
        # Opened by the lifespan, long after the imports were frozen: a serving process's
        # collections must not walk it (nor the store and caches it holds) again and again.
        assert in_sight(app.state.services) is not serving
