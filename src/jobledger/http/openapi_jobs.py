"""The OpenAPI parts of the jobs listing (keyset cursors, capped total), kept beside
`openapi.py`, which assembles the document."""

from __future__ import annotations

from typing import Any

from jobledger.domain.jobs import JobStatus
from jobledger.http.listing import COUNT_CAP
from jobledger.http.openapi import _query, _ref

_ID = {"type": "string", "pattern": "^[0-9a-f]{32}$"}
_NID = {"type": ["string", "null"], "pattern": "^[0-9a-f]{32}$"}


SCHEMAS: dict[str, Any] = {
    "JobList": {
        "type": "object",
        "properties": {
            "data": {"type": "array", "items": _ref("Job")},
            "total": {"type": "integer", "minimum": 0, "maximum": COUNT_CAP},
            "page": {"type": "integer", "minimum": 1},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100},
            "total_capped": {
                "type": "boolean",
                "description": f"more than {COUNT_CAP} rows match: `total` is {COUNT_CAP}"
                " and means at least that many",
            },
            "next": {**_NID, "description": "pass as `before` for the older rows"},
            "prev": {**_NID, "description": "pass as `after` for the newer rows"},
        },
        "required": ["data", "total", "page", "limit", "total_capped", "next", "prev"],
    },
}

FILTERS = [
    _query(
        "status",
        {"type": "string", "enum": [s.value for s in JobStatus]},
        "PENDING, RUNNING or DEAD",
    ),
    _query("target", {"type": "string"}, "exact target name"),
    _query("code", {"type": "string"}, "exact job code"),
    _query("key", {"type": "string"}, "exact ordering key"),
]

LIST_PARAMS = [
    *FILTERS,
    _query(
        "page",
        {"type": "integer", "minimum": 1, "maximum": 1_000_000, "default": 1},
        "1-based page (offset paging, as in the reference; the cursors cost less)",
    ),
    _query(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": 100, "default": 100},
        "rows per page",
    ),
    _query("before", _ID, "keyset cursor: rows older than this job id (a page's `next`)"),
    _query("after", _ID, "keyset cursor: rows newer than this job id (a page's `prev`)"),
]

LIST_DESCRIPTION = (
    "Newest first. A page is a keyset read on the id; `total` counts the matching rows"
    f" up to {COUNT_CAP} (`total_capped` says when more match), so the cost of a call"
    " does not grow with the table. With `after`, the page is the oldest rows newer"
    " than it (shown newest first); `page` skips whole pages from the cursor."
)
