"""Job ids: time-ordered, and strictly increasing within a process, so a key's rows of
one version run in the order the process enqueued them (every store reads a chain in
`(version, id)` order)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest

from jobledger.core import ids
from jobledger.core.ids import is_job_id, new_id, new_token


@pytest.fixture(autouse=True)
def fresh_generator() -> Iterator[None]:
    """Each test starts with no last id (its fixed milliseconds lie before the real
    clock's, which other tests' ids carry) and leaves the generator as it found it."""
    kept = ids._last
    ids._last = (-1, 0)
    yield
    ids._last = kept


def test_ids_of_one_millisecond_increase_in_the_order_they_are_made() -> None:
    made = [new_id(1_765_000_000_000) for _ in range(5_000)]
    assert made == sorted(made)
    assert len(set(made)) == len(made)
    assert all(is_job_id(i) for i in made)


def test_an_id_carries_its_millisecond_when_the_clock_moves_on() -> None:
    new_id(1_765_000_000_000)
    later = new_id(1_765_000_000_123)
    assert int(later[:12], 16) == 1_765_000_000_123


def test_a_clock_that_steps_back_still_gives_larger_ids() -> None:
    first = new_id(1_765_000_100_000)
    after = [new_id(1_765_000_100_000 - back) for back in (1, 1_000, 3_600_000)]
    assert [first, *after] == sorted([first, *after])
    assert all(int(i[:12], 16) == 1_765_000_100_000 for i in after)


def test_the_random_part_does_not_overflow_into_the_millisecond() -> None:
    ids._last = (1_765_000_200_000, (1 << 80) - 1)  # the last id of its millisecond
    following = new_id(1_765_000_200_000)
    assert int(following[:12], 16) == 1_765_000_200_001
    assert following > f"{1_765_000_200_000:012x}{(1 << 80) - 1:020x}"


def test_threads_get_distinct_ids_each_in_increasing_order() -> None:
    made: dict[int, list[str]] = {}

    def make(n: int) -> None:
        made[n] = [new_id(1_765_000_300_000) for _ in range(2_000)]

    threads = [threading.Thread(target=make, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [i for run in made.values() for i in run]
    assert len(set(every)) == len(every) == 8_000
    assert all(run == sorted(run) for run in made.values())


def test_a_forked_child_starts_from_fresh_random_bits() -> None:
    """After a fork the child has no last id: its next id in the same millisecond is
    not a step after the parent's (which the parent may take as well)."""
    parent_last = new_id(1_765_000_400_000)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its state, then leave without pytest's teardown
        os.write(write, repr(ids._last).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child_last = pipe.read()
    os.waitpid(pid, 0)
    assert child_last == repr((-1, 0))
    assert ids._last[0] == int(parent_last[:12], 16)


def test_tokens_are_128_random_bits_in_hex() -> None:
    tokens = {new_token() for _ in range(1_000)}
    assert len(tokens) == 1_000
    assert all(len(t) == 32 and int(t, 16) >= 0 for t in tokens)
