"""`verify`: every stream's hash chain, read a page at a time, on the memory store.

The memory store's log is a plain list, so these tests edit it directly, as someone
with write access to the database would.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from jobledger.core.clock import FakeClock
from jobledger.domain.events import event_hash
from jobledger.projections.audit import verify_log
from jobledger.storage.memory import MemoryStore
from tests.contract.projections.test_replay_workload import generate


@pytest.fixture
async def filled(clock: FakeClock) -> MemoryStore:
    store = MemoryStore()
    await store.open()
    await generate(store, clock, jobs_count=24)
    return store


@pytest.mark.parametrize("page", [1, 7, 2000])
async def test_an_untouched_log_verifies_at_any_page_size(filled: MemoryStore, page: int) -> None:
    report = await verify_log(filled, page=page)
    assert report.ok, report.problems
    assert report.events == len(filled.tables.events) == 24 // 8 * 32
    assert report.streams == 24
    assert report.position == len(filled.tables.events)


@pytest.mark.parametrize("page", [1, 5, 2000])
async def test_an_edited_event_is_named(filled: MemoryStore, page: int) -> None:
    index = next(i for i, e in enumerate(filled.tables.events) if e.type == "JobFailed")
    victim = filled.tables.events[index]
    filled.tables.events[index] = replace(victim, data={**victim.data, "error": "nothing happened"})

    report = await verify_log(filled, page=page)
    assert report.problems == [
        f"{victim.stream} v{victim.version} (position {victim.position}):"
        " content does not match its hash"
    ]
    assert "1 problems" in report.lines()[-1]


async def test_an_edit_with_a_recomputed_hash_breaks_the_next_link(filled: MemoryStore) -> None:
    index = next(i for i, e in enumerate(filled.tables.events) if e.type == "JobDispatched")
    victim = filled.tables.events[index]
    data = {**victim.data, "pod": "someone-else"}
    forged = replace(
        victim,
        data=data,
        hash=event_hash(
            stream=victim.stream,
            version=victim.version,
            type=victim.type,
            data=data,
            at=victim.at,
            actor=victim.actor,
            trace_id=victim.trace_id,
            prev_hash=victim.prev_hash,
        ),
    )
    filled.tables.events[index] = forged
    successor = next(e for e in filled.tables.events[index + 1 :] if e.stream == victim.stream)

    report = await verify_log(filled, page=3)
    assert report.problems == [
        f"{successor.stream} v{successor.version} (position {successor.position}):"
        f" prev_hash does not name v{victim.version}"
    ]


async def test_a_removed_event_is_reported(filled: MemoryStore) -> None:
    index = next(i for i, e in enumerate(filled.tables.events) if e.type == "JobLeaseRenewed")
    removed = filled.tables.events.pop(index)
    filled.tables.events[:] = [
        replace(e, position=i + 1) for i, e in enumerate(filled.tables.events)
    ]
    successor = next(e for e in filled.tables.events[index:] if e.stream == removed.stream)

    report = await verify_log(filled, page=4)
    assert len(report.problems) == 2
    assert report.problems[0].startswith(f"{successor.stream} v{successor.version} ")
    assert report.problems[0].endswith(f"follows v{removed.version - 1}")
    assert report.problems[1].endswith(f"prev_hash does not name v{removed.version - 1}")


@pytest.mark.parametrize("page", [1, 6, 2000])
async def test_a_stream_whose_first_event_was_deleted_is_reported(
    filled: MemoryStore, page: int
) -> None:
    # The archive removes whole streams only: a stream that starts above v1 lost events
    # that no remaining link names.
    index = next(i for i, e in enumerate(filled.tables.events) if e.version == 1)
    removed = filled.tables.events.pop(index)
    filled.tables.events[:] = [
        replace(e, position=i + 1) for i, e in enumerate(filled.tables.events)
    ]
    first_kept = next(e for e in filled.tables.events if e.stream == removed.stream)

    report = await verify_log(filled, page=page)
    assert report.problems == [
        f"{first_kept.stream} v2 (position {first_kept.position}):"
        " the stream starts here; v1..v1 are missing"
    ]
    assert not report.ok


def _tamper(store: MemoryStore, how: str) -> None:
    """Edit the log one of the ways the tests above do, on a bigger log."""
    log = store.tables.events
    if how == "edit":
        index = next(i for i, e in enumerate(log) if e.type == "JobFailed")
        log[index] = replace(log[index], data={**log[index].data, "error": "edited"})
        return
    if how == "remove-middle":
        index = next(i for i, e in enumerate(log) if e.type == "JobLeaseRenewed")
    elif how == "remove-first":
        index = [i for i, e in enumerate(log) if e.version == 1][50]
    elif how == "remove-last":
        index = max(i for i, e in enumerate(log) if e.type == "JobSucceeded")
    else:
        assert how == "none"
        return
    log.pop(index)
    log[:] = [replace(e, position=i + 1) for i, e in enumerate(log)]


@pytest.mark.parametrize("how", ["none", "edit", "remove-middle", "remove-first", "remove-last"])
@pytest.mark.parametrize("kept", [1, 2, 5, 40])
async def test_a_bounded_map_of_streams_reports_what_an_unbounded_one_does(
    clock: FakeClock, how: str, kept: int
) -> None:
    # verify keeps the last event of at most `streams_kept` streams and reads the
    # predecessor of a forgotten stream back from the store: same counts, same problems
    store = MemoryStore()
    await store.open()
    await generate(store, clock, jobs_count=96)
    _tamper(store, how)
    unbounded = await verify_log(store, page=7, streams_kept=10**9)
    reads: list[int] = []
    bounded = await verify_log(store, page=7, streams_kept=kept, on_page=reads.append)
    assert (bounded.events, bounded.streams, bounded.position) == (
        unbounded.events,
        unbounded.streams,
        unbounded.position,
    )
    assert bounded.problems == unbounded.problems
    assert bounded.ok == (how in ("none", "remove-last"))
    assert unbounded.streams == 96
    assert sum(reads) == len(store.tables.events) and max(reads) == 7
