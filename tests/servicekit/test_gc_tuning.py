"""servicekit.gc_tuning: what the services set before serving (thresholds, the frozen start-up heap)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from servicekit import gc_tuning


@pytest.fixture
def restored_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("restored_gc")
def test_serving_freezes_the_start_up_heap_and_raises_the_thresholds() -> None:
    alive = [[index] for index in range(1000)]  # long-lived containers built at start-up
    gc_tuning.tune_for_serving()
    assert gc.get_threshold() == gc_tuning.REQUEST_HEAVY
    assert gc.get_freeze_count() >= len(alive)  # out of every later collection's scan


@pytest.mark.usefixtures("restored_gc")
def test_the_extenders_profile_keeps_young_collections_small() -> None:
    gc_tuning.tune_for_serving(gc_tuning.ANSWER_CACHING)
    assert gc.get_threshold() == gc_tuning.ANSWER_CACHING
    assert gc_tuning.ANSWER_CACHING.young < gc_tuning.REQUEST_HEAVY.young  # young collections scan little
    assert gc_tuning.ANSWER_CACHING.old >= 100 * gc.get_threshold()[1]  # full collections are rare


@pytest.mark.usefixtures("restored_gc")
def test_frozen_objects_are_still_freed_by_reference_counting() -> None:
    import weakref

    class Held:
        pass

    held = Held()
    gone = weakref.ref(held)
    gc_tuning.tune_for_serving()
    del held
    assert gone() is None
