"""The runtimes of one process share one gc.freeze: the first start freezes, the last
stop gives the objects back to the collector. Only a process jobledger owns freezes by
default (`jobledger worker`, `jobledger serve`); an App or Runtime embedded in another
program leaves that program's collector alone unless its settings ask (D29)."""

from __future__ import annotations

import gc

import pytest

from jobledger.config.load import load_settings
from jobledger.config.settings import Settings
from jobledger.core.clock import FakeClock
from jobledger.reactors import gc_freeze
from jobledger.reactors.runtime import Runtime
from jobledger.storage.memory import MemoryStore
from tests.contract.lanes_kit import make_engine


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


def test_the_setting_is_auto_unless_set_and_the_cli_turns_auto_on() -> None:
    assert Settings().gc_freeze is None
    assert load_settings(env={"JOBLEDGER_GC_FREEZE": "auto"}).gc_freeze is None
    assert load_settings(env={"JOBLEDGER_GC_FREEZE": "off"}).gc_freeze is False
    assert load_settings(env={"JOBLEDGER_GC_FREEZE": "on"}).gc_freeze is True
    assert gc_freeze.own_process(Settings()).gc_freeze is True
    assert gc_freeze.own_process(Settings(gc_freeze=False)).gc_freeze is False


@pytest.mark.parametrize(("asked", "frozen"), [(None, False), (False, False), (True, True)])
async def test_an_embedded_runtime_freezes_only_when_its_settings_ask(
    asked: bool | None, frozen: bool
) -> None:
    settings = {} if asked is None else {"gc_freeze": asked}  # None: the default
    engine = make_engine(MemoryStore(partitions=4), FakeClock(), **settings)
    runtime = Runtime(engine, pod_id="embedded")
    await runtime.start()
    try:
        assert (gc.get_freeze_count() > 0) is frozen
    finally:
        await runtime.stop()
    assert gc.get_freeze_count() == 0
