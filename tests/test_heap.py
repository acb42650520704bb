"""gateway.heap: the cyclic collector's settings once something long-lived is loaded."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gateway.heap import YOUNG_THRESHOLD, freeze_long_lived


@pytest.fixture
def collector() -> Iterator[None]:
    before = gc.get_threshold()
    try:
        yield
    finally:
        gc.set_threshold(*before)


def test_young_generation_collected_less_often(collector: None) -> None:
    gc.set_threshold(700, 10, 10)
    freeze_long_lived("test")
    # A pack's few thousand live objects no longer set off collections inside it.
    assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)
    assert gc.get_freeze_count() > 0


def test_a_higher_threshold_stays(collector: None) -> None:
    gc.set_threshold(YOUNG_THRESHOLD * 2, 5, 7)
    freeze_long_lived("test")
    assert gc.get_threshold() == (YOUNG_THRESHOLD * 2, 5, 7)
