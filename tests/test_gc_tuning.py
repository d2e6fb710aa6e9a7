"""The serving process's garbage-collector settings."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from proxy.gc_tuning import GEN0_THRESHOLD, tune_gc_for_serving


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
