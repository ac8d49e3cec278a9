"""The runtimes of one process share one gc.freeze: the first start freezes, the last
stop gives the objects back to the collector."""

from __future__ import annotations

import gc

from jobledger.reactors import gc_freeze


def test_the_last_release_unfreezes() -> None:
    assert gc.get_freeze_count() == 0
    gc_freeze.hold()
    frozen = gc.get_freeze_count()
    assert frozen > 0
    gc_freeze.hold()  # a second runtime in the same process
    gc_freeze.release()
    assert gc.get_freeze_count() == frozen  # still held by the first
    gc_freeze.release()
    assert gc.get_freeze_count() == 0
    gc_freeze.release()  # an extra release is harmless
    assert gc.get_freeze_count() == 0


def test_a_held_freeze_raises_the_young_threshold_and_gives_it_back() -> None:
    before = gc.get_threshold()
    gc_freeze.hold()
    assert gc.get_threshold() == (max(before[0], gc_freeze.YOUNG_THRESHOLD), *before[1:])
    gc_freeze.hold()
    gc_freeze.release()
    assert gc.get_threshold()[0] == max(before[0], gc_freeze.YOUNG_THRESHOLD)
    gc_freeze.release()
    assert gc.get_threshold() == before
