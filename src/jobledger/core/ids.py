"""Job ids and tokens: 32 lowercase hex characters, time-ordered like a MongoDB ObjectId
(48 bits of milliseconds, then 80 random bits), so "newest first" is an id sort.

The random part comes from `os.urandom`, the source `secrets` reads, called directly:
`secrets.token_hex` adds three Python calls on the path of every enqueue."""

from __future__ import annotations

import os
import re
import time

_ID = re.compile(r"^[0-9a-f]{32}$")


def new_id(now_ms: int | None = None) -> str:
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    return f"{ms & 0xFFFFFFFFFFFF:012x}{os.urandom(10).hex()}"


def is_job_id(text: str) -> bool:
    return bool(_ID.fullmatch(text))  # not match: "$" would let a trailing newline in


def new_token() -> str:
    """128 random bits as 32 hex characters (a uuid4's entropy, without building one)."""
    return os.urandom(16).hex()
