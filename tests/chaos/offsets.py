"""Which offsets of one partition the recorder read, and the holes it must read again.

A consumer returns a partition's records in offset order, so an offset it jumped over is
a hole: a record the broker assigned (an at-most-once send was acknowledged with it) that
the fetch did not return. In a long run the recorder never read `chaos.amo` partition 1
offset 1777 of broker generation 2, and the job sent there counted as lost. Now the
recorder seeks back to the first hole and reads again (first on the same consumer, then
on a fresh one); a hole that `MAX_REREADS` re-reads went past without returning it is
given up, and the run reports it as a problem (fails closed): the record there could not
be checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_REREADS = 3


@dataclass
class PartitionRead:
    seen: set[int] = field(default_factory=set)
    next: int = 0  # one past the highest offset read
    holes: dict[int, int] = field(default_factory=dict)  # offset -> re-reads that passed it
    given_up: list[int] = field(default_factory=list)
    found: int = 0  # holes found, filled or not
    rereading_from: int | None = None  # a seek back to this hole is under way

    def accept(self, offset: int) -> bool:
        """Note one record read; False for an offset read before (a re-read)."""
        if offset in self.seen:
            return False
        self.seen.add(offset)
        if offset in self.given_up:  # turned up after all
            self.given_up.remove(offset)
        if self.holes.pop(offset, None) is None and offset > self.next:
            self.holes.update(dict.fromkeys(range(self.next, offset), 0))
            self.found += offset - self.next
        self.next = max(self.next, offset + 1)
        return True

    def after_batch(self, last: int) -> int | None:
        """After a batch whose highest offset was `last`: a re-read that went past a hole
        without returning it counts against the hole; one passed `MAX_REREADS` times is
        given up. Returns the offset to seek back to (the first hole left), or None."""
        if self.rereading_from is not None:
            for offset in [o for o in self.holes if self.rereading_from <= o < last]:
                self.holes[offset] += 1
                if self.holes[offset] >= MAX_REREADS:
                    del self.holes[offset]
                    self.given_up.append(offset)
        self.rereading_from = min(self.holes) if self.holes else None
        return self.rereading_from

    @property
    def retried(self) -> bool:
        """A re-read on the same consumer already went past a hole: use a fresh one."""
        return any(self.holes.values())

    def position(self) -> int:
        """Where a new consumer starts: the first hole, else after the last record read."""
        self.rereading_from = min(self.holes) if self.holes else None
        return self.next if self.rereading_from is None else self.rereading_from

    def read_up_to(self, end: int) -> bool:
        return self.next >= end and not self.holes
