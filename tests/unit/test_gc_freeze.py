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
