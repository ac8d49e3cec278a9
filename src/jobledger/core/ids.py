"""Job ids and tokens: 32 lowercase hex characters, time-ordered like a MongoDB ObjectId
(48 bits of milliseconds, then 80 bits), so "newest first" is an id sort.

Ids also order a key's rows of one version (every store reads a chain in `(version,
id)` order, as the reference's `{key, version, _id}`), so a process never makes an id
below its last one: the first id of a millisecond takes 80 random bits, and an id made
in the same millisecond as the last one (or after the clock stepped back) is the last
one plus a random step of 1 to 2^32. Jobs a process enqueues for one key therefore run
in the order it enqueued them, within one transaction too. A child process starts with
no last id (`os.register_at_fork`), so it never walks the steps its parent walks.

The random bits come from `os.urandom`, the source `secrets` reads, called directly:
`secrets.token_hex` adds three Python calls on the path of every enqueue."""

from __future__ import annotations

import os
import re
import threading
import time

_ID = re.compile(r"^[0-9a-f]{32}$")
_MS = (1 << 48) - 1
_RANDOM_BITS = 80

_lock = threading.Lock()
_last: tuple[int, int] = (-1, 0)  # the (milliseconds, random part) of this process's last id


def new_id(now_ms: int | None = None) -> str:
    """A new job id: `now_ms` (the wall clock by default) and 80 bits, above every id
    this process made before."""
    global _last
    ms = (int(time.time() * 1000) if now_ms is None else now_ms) & _MS
    with _lock:
        last_ms, last_bits = _last
        if ms > last_ms:
            bits = int.from_bytes(os.urandom(10))
        else:  # the same millisecond, or the clock stepped back: after the last id
            ms = last_ms
            bits = last_bits + 1 + int.from_bytes(os.urandom(4))
            if bits >> _RANDOM_BITS:  # ~2^48 ids in one millisecond: borrow the next one
                ms, bits = ms + 1, int.from_bytes(os.urandom(10))
        _last = (ms, bits)
    return f"{ms:012x}{bits:020x}"


def _forget_last() -> None:
    global _last
    _last = (-1, 0)


os.register_at_fork(after_in_child=_forget_last)


def is_job_id(text: str) -> bool:
    return bool(_ID.fullmatch(text))  # not match: "$" would let a trailing newline in


def new_token() -> str:
    """128 random bits as 32 hex characters (a uuid4's entropy, without building one)."""
    return os.urandom(16).hex()
