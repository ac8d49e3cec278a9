"""Who holds a dedupe key: the read after an enqueue whose key was already in the log
(issue 20 item 8), shared by the async store and the sync enqueue path."""

from __future__ import annotations

import functools
from collections.abc import Iterable


@functools.cache
def holders_sql(quoted: str) -> str:
    """`(dedupe_key, stream)` of the events holding the keys `%(keys)s` (served by the
    log's unique dedupe index); `quoted` is `Statements.schema`, the quoted name."""
    return (
        f"SELECT dedupe_key, stream FROM {quoted}.events WHERE dedupe_key = ANY(%(keys)s::text[])"
    )


def holders_of(rows: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The job id by dedupe key, from `holders_sql`'s rows."""
    return {key: stream.removeprefix("job:") for key, stream in rows}
