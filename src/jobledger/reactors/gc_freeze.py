"""Keep the garbage collector off the objects a pod booted with.

CPython's collector walks every tracked object of a generation when it collects it; a
worker's old generation holds its imports, settings, pools and, on the memory store,
the whole queue. Those objects live as long as the pod, so scanning them again and again
finds nothing (≈ 15-20 % of a busy lane's CPU, measured in bench/drain.py and
bench/kafka_delivery.py). `gc.freeze()` moves everything tracked so far into a permanent
generation that collections skip; garbage created later is collected as usual.

Runtimes in one process (tests, several pods) share one freeze: the first start freezes,
the last stop unfreezes.
"""

from __future__ import annotations

import gc

_holders = 0


def hold() -> None:
    """A runtime starts: freeze what exists now (once per process)."""
    global _holders
    if _holders == 0:
        gc.freeze()
    _holders += 1


def release() -> None:
    """A runtime stopped: the last one gives the frozen objects back to the collector."""
    global _holders
    if _holders == 0:
        return
    _holders -= 1
    if _holders == 0:
        gc.unfreeze()
