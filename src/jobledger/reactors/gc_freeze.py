"""Keep the garbage collector off the objects a pod booted with.

CPython's collector walks every tracked object of a generation when it collects it; a
worker's old generation holds its imports, settings, pools and, on the memory store,
the whole queue. Those objects live as long as the pod, so scanning them again and again
finds nothing (≈ 15-20 % of a busy lane's CPU, measured in bench/drain.py and
bench/kafka_delivery.py). `gc.freeze()` moves everything tracked so far into a permanent
generation that collections skip; garbage created later is collected as usual.

The youngest generation's threshold is raised as well (700 → `YOUNG_THRESHOLD` net
allocations) while a runtime holds the freeze: a busy lane keeps thousands of rows,
events and changes alive between a page read and its commit, and at 700 the collector
walks them over and over, promoting them to older generations that it then walks
again (≈ 10 % of a PostgreSQL drain's CPU, and its longest event-loop stalls:
bench/drain.py, docs/performance.md). Cyclic garbage is still collected, in larger and
fewer collections.

Runtimes in one process (tests, several pods) share one freeze: the first start freezes,
the last stop unfreezes and puts the thresholds back.

Freezing tunes the collector of the whole process, so it is done only where jobledger
owns the process: `jobledger worker` and `jobledger serve` turn the `gc_freeze` setting
on unless it says otherwise (`own_process`); an `App` or `Runtime` started inside
another program (a web application) leaves that program's collector alone unless its
settings ask for the freeze (decision D29).
"""

from __future__ import annotations

import dataclasses
import gc

from jobledger.config.settings import Settings

#: the youngest generation's threshold while a runtime runs (CPython's default is 700)
YOUNG_THRESHOLD = 10_000

_holders = 0
_thresholds: tuple[int, int, int] | None = None  # what they were before the first hold


def own_process(settings: Settings) -> Settings:
    """`settings` for a process jobledger owns (its CLI): `gc_freeze` on unless set."""
    if settings.gc_freeze is None:
        return dataclasses.replace(settings, gc_freeze=True)
    return settings


def hold() -> None:
    """A runtime starts: freeze what exists now (once per process)."""
    global _holders, _thresholds
    if _holders == 0:
        gc.freeze()
        young, middle, old = gc.get_threshold()
        _thresholds = (young, middle, old)
        if young:  # 0: the collector is off, leave it so
            gc.set_threshold(max(young, YOUNG_THRESHOLD), middle, old)
    _holders += 1


def release() -> None:
    """A runtime stopped: the last one gives the frozen objects back to the collector."""
    global _holders
    if _holders == 0:
        return
    _holders -= 1
    if _holders == 0:
        gc.unfreeze()
        if _thresholds is not None:
            gc.set_threshold(*_thresholds)
