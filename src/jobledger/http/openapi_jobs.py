"""The OpenAPI parts of the jobs listing (keyset cursors, capped total) and of the bulk
actions, kept beside `openapi.py`, which assembles the document."""

from __future__ import annotations

from typing import Any

from jobledger.admin.jobs import BULK_LIMIT
from jobledger.domain.jobs import JobStatus
from jobledger.http.finished import FINISHED_STATUSES, SCAN_LIMIT
from jobledger.http.listing import COUNT_CAP
from jobledger.http.openapi import JOB_PROPS, PREFIX, TEXT, _op, _query, _ref

_ID = {"type": "string", "pattern": "^[0-9a-f]{32}$"}
_NID = {"type": ["string", "null"], "pattern": "^[0-9a-f]{32}$"}


_COUNT = {"type": "integer", "minimum": 0}

_NSTR = {"type": ["string", "null"]}

SCHEMAS: dict[str, Any] = {
    "FinishedJob": {
        "type": "object",
        "properties": {
            **JOB_PROPS,
            "status": {"type": "string", "enum": FINISHED_STATUSES},
            "ended": {
                "type": "object",
                "properties": {
                    "type": {"type": "string"},
                    "position": {"type": ["integer", "null"]},
                    "at": {"type": "string", "format": "date-time"},
                    "actor": _ref("Actor"),
                    "reason": _NSTR,
                },
                "required": ["type", "position", "at", "actor", "reason"],
            },
        },
        "required": [*JOB_PROPS, "ended"],
        "additionalProperties": False,
    },
    "FinishedPage": {
        "type": "object",
        "properties": {
            "data": {"type": "array", "items": _ref("FinishedJob")},
            "next": {
                "type": ["integer", "null"],
                "description": "pass as `before` to read on; null: the log's start",
            },
            "scanned": {**_COUNT, "description": "log events this call read"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100},
        },
        "required": ["data", "next", "scanned", "limit"],
    },
    "BulkResult": {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["retry", "skip"]},
            "matched": {**_COUNT, "description": "DEAD jobs found"},
            "changed": {**_COUNT, "description": "of them retried or skipped"},
            "conflicts": {**_COUNT, "description": "of them changed meanwhile (not an error)"},
            "more": {"type": "boolean", "description": "stopped at `limit`: call again"},
        },
        "required": ["action", "matched", "changed", "conflicts", "more"],
    },
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
    _query("target", TEXT, "exact target name"),
    _query("code", TEXT, "exact job code"),
    _query("key", TEXT, "exact ordering key"),
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

BULK_PARAMS = [
    *FILTERS[1:],
    _query(
        "expect",
        {"type": "integer", "minimum": 0, "maximum": BULK_LIMIT},
        "the count the caller confirmed: 409 when another number of DEAD jobs matches",
    ),
    _query(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": BULK_LIMIT, "default": BULK_LIMIT},
        "DEAD jobs acted on at most (newest first); `more` says some are left",
    ),
]


FINISHED_PARAMS = [
    _query("status", {"type": "string", "enum": FINISHED_STATUSES}, "how it ended"),
    *FILTERS[1:],
    _query("id", TEXT, "one job by id (a search, not a scan)"),
    _query("dedupe_key", TEXT, "one job by dedupe key (a search)"),
    _query(
        "before",
        {"type": "integer", "minimum": 1, "maximum": 2**63 - 1},
        "log position to read back from: a page's `next`",
    ),
    _query(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": 100, "default": 50},
        "rows per page",
    ),
]


def finished_path() -> dict[str, Any]:
    return {
        f"{PREFIX}/finished": {
            "get": _op(
                "Jobs that left the queue (SUCCEEDED, SKIPPED, CANCELLED, EXPIRED), newest first",
                _ref("FinishedPage"),
                errors=(400,),
                tag="jobs",
                params=FINISHED_PARAMS,
                description="Read back from the log while it keeps them (log retention):"
                f" at most {SCAN_LIMIT} events per call, so a rare filter may answer fewer"
                " rows than `limit` with a `next` to read on. Each row is the job as it was"
                " before it ended, `closed_at` when it ended, `ended` the closing event.",
            )
        }
    }


def paths() -> dict[str, Any]:
    """The bulk routes (every DEAD job matching the filters, each its own event) and
    the finished jobs."""
    what = {
        "retry": "DEAD → PENDING (JobRetried)",
        "skip": "DEAD → gone (JobSkipped, reason admin)",
    }
    return {
        f"{PREFIX}/bulk/{action}": {
            "post": _op(
                f"Every DEAD job matching the filters: {summary}",
                _ref("BulkResult"),
                errors=(400, 403, 409),
                tag="jobs",
                params=BULK_PARAMS,
                description="Each job's transition is its own event under the caller as"
                " actor and its own compare-and-set; safe to repeat (a second call finds"
                " only what is DEAD then).",
            )
        }
        for action, summary in what.items()
    } | finished_path()
