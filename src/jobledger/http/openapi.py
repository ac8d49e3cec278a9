"""The admin API's OpenAPI 3.1 document, written by hand next to the routes it describes.

`tests/unit/test_http_openapi.py` checks that every route of the app is documented and
runs schemathesis against this document, so a drift between the two fails a test.
"""

from __future__ import annotations

from typing import Any

from jobledger.admin.jobs import BULK_LIMIT
from jobledger.domain.failures import FailureReason
from jobledger.domain.jobs import JobStatus
from jobledger.http.queries.dashboard_numbers import DEPTH_NAMES, OUTCOME_NAMES, RANGES
from jobledger.http.queries.finished_jobs import FINISHED_STATUSES, SCAN_LIMIT
from jobledger.http.queries.open_jobs import COUNT_CAP
from jobledger.projections.stats import OUTCOMES

PREFIX = "/api/v1"

_STR = {"type": "string"}
_NSTR = {"type": ["string", "null"]}
#: query text: no stored name holds U+0000, and a NUL is refused with 400
TEXT = {"type": "string", "pattern": "^[^\\x00]*$"}
_TIME = {"type": "string", "format": "date-time"}
_NTIME = {"type": ["string", "null"], "format": "date-time"}
_INT = {"type": "integer"}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(props: dict[str, Any], *, optional: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": [k for k in props if k not in optional],
    }


ACTOR = {
    "type": ["object", "null"],
    "properties": {"id": _NSTR, "via": _STR, "role": _NSTR},
    "required": ["id", "via", "role"],
}

JOB_PROPS: dict[str, Any] = {
    "_id": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
    "code": _STR,
    "target": _STR,
    "lane": {"type": "string", "enum": ["fast", "long"]},
    "key": _NSTR,
    "partition": {"type": "integer", "minimum": 0},
    "version": _INT,
    "dedupe_key": _STR,
    "status": {"type": "string", "enum": [s.value for s in JobStatus]},
    "attempts": {"type": "integer", "minimum": 0},
    "next_run_at": _TIME,
    "last_error": _NSTR,
    "dead_reason": _NSTR,
    "claimed_by": _NSTR,
    "lease_until": _NTIME,
    "claim_token": _NSTR,
    "outcome_token": _NSTR,
    "running_code": _NSTR,
    "closed_at": _NTIME,
    "trace_id": _NSTR,
    "actor": _ref("Actor"),
    "headers": {"type": ["object", "null"], "additionalProperties": {"type": "string"}},
    "created_at": _TIME,
    "updated_at": _TIME,
}

EVENT = _obj(
    {
        "position": {"type": ["integer", "null"]},
        "stream": _STR,
        "version": {"type": "integer", "minimum": 1},
        "type": _STR,
        "data": {"type": "object"},
        "at": _TIME,
        "actor": _ref("Actor"),
        "trace_id": _NSTR,
        "prev_hash": _STR,
        "hash": _STR,
    }
)

SCHEDULE = _obj(
    {
        "code": _STR,
        "cron": _STR,
        "cron_override": _NSTR,
        "effective_cron": _STR,
        "timezone": _STR,
        "enabled": {"type": "boolean"},
        "missed_slot_policy": {"type": "string", "enum": ["run_once", "skip"]},
        "retry_count": _INT,
        "next_run_at": _NTIME,
        "last_run_at": _NTIME,
        "last_skipped_at": _NTIME,
        "created_at": _TIME,
        "updated_at": _TIME,
    }
)

_COUNTS = _obj({s.value: {"type": "integer", "minimum": 0} for s in JobStatus})
_OUTCOME_PROPS = {o: {"type": "integer", "minimum": 0} for o in OUTCOMES.values()}
_OUTCOMES = _obj(_OUTCOME_PROPS)
_OPEN_PROPS = {s.value.lower(): {"type": "integer", "minimum": 0} for s in JobStatus}

SCHEMAS: dict[str, Any] = {
    "Error": {
        **_obj(
            {
                "statusCode": _INT,
                "code": _STR,
                "message": {"type": "array", "items": _STR},
            }
        ),
        "example": {"statusCode": 404, "code": "not_found", "message": ["job … not found"]},
    },
    "Actor": ACTOR,
    "Job": {**_obj(JOB_PROPS), "additionalProperties": False},
    "JobDetail": _obj(
        {
            **JOB_PROPS,
            "status": {
                "type": "string",
                "enum": [s.value for s in JobStatus]
                + ["SUCCEEDED", "SKIPPED", "CANCELLED", "EXPIRED", "CLOSED"],
            },
            "payload": {},
            "open": {"type": "boolean"},
            "history": {"type": "array", "items": _ref("Event")},
            "attempt_history": {"type": "array", "items": _ref("Attempt")},
        }
    ),
    "Attempt": _obj(
        {
            "version": _INT,
            "at": _TIME,
            "event": _STR,
            "outcome": {
                "type": "string",
                "enum": ["succeeded", "failed", "dead", "deferred", "requeued", "reclaimed"],
            },
            "reason": {
                "type": ["string", "null"],
                "enum": [*(r.value for r in FailureReason), None],
            },
            "error_class": _NSTR,
            "message": _NSTR,
            "traceback": _NSTR,
            "attempt": {"type": ["integer", "null"]},
            "duration_ms": {"type": ["number", "null"]},
            "next_run_at": _NSTR,
            "recorded": {"type": "boolean"},
        }
    ),
    "Skipped": _obj({"_id": _STR, "skipped": {"const": True}}),
    "Cancelled": _obj({"_id": _STR, "cancelled": {"const": True}}),
    "Schedule": SCHEDULE,
    "Event": EVENT,
    "EventPage": _obj(
        {
            "data": {"type": "array", "items": _ref("Event")},
            "after": {"type": "integer", "minimum": 0},
            "next": {"type": "integer", "minimum": 0},
            "limit": {"type": "integer", "minimum": 1},
        }
    ),
    "Stats": _obj(
        {
            "as_of": _TIME,
            "position": {"type": "integer", "minimum": 0},
            "caught_up": {"type": "boolean"},
            "since": _STR,
            "hours": {"type": "array", "items": _ref("HourlyOutcomes")},
            "minutes": {"type": "array", "items": _ref("MinuteOutcomes")},
            "totals": _OUTCOMES,
            "queue": {"type": "object", "additionalProperties": _ref("QueueDepth")},
            "by_status": _COUNTS,
        }
    ),
    "HourlyOutcomes": _obj({"hour": _STR, "target": _STR, "code": _STR, **_OUTCOME_PROPS}),
    "MinuteOutcomes": _obj({"minute": _STR, "target": _STR, **_OUTCOME_PROPS}),
    "OpenCounts": _obj(_OPEN_PROPS),
    "QueueDepth": _obj(
        {
            **_OPEN_PROPS,
            "codes": {"type": "object", "additionalProperties": _ref("OpenCounts")},
            "oldest_pending_age_s": {"type": ["number", "null"]},
        }
    ),
    "CronOverride": {
        **_obj({"cron_override": {"type": "string", "example": "*/5 * * * *"}}),
    },
}

_ERRORS = {
    400: "Validation failed (`validation_failed`, `invalid_cron`)",
    401: "No valid API key (`unauthorized`)",
    403: "The key's role may not do this (`forbidden`)",
    404: "Unknown or malformed id (`not_found`)",
    409: "Not in a state that allows this, or a concurrent change won (`invalid_status`)",
    413: "The request body is over 64 KiB (`payload_too_large`)",
    429: "Too many failed authentications from this client (`too_many_requests`)",
}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _op(
    summary: str,
    ok: dict[str, Any],
    *,
    errors: tuple[int, ...],
    params: list[dict[str, Any]] | None = None,
    body: dict[str, Any] | None = None,
    tag: str,
    description: str = "",
) -> dict[str, Any]:
    responses: dict[str, Any] = {"200": {"description": "OK", **_json(ok)}}
    for status in sorted({401, 413, 429, *errors}):
        responses[str(status)] = {"description": _ERRORS[status], **_json(_ref("Error"))}
    op: dict[str, Any] = {
        "summary": summary,
        "tags": [tag],
        "security": [{"bearer": []}],
        "responses": responses,
    }
    if description:
        op["description"] = description
    if params:
        op["parameters"] = params
    if body is not None:
        op["requestBody"] = {"required": True, **_json(body)}
    return op


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


def _path(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


# --- the jobs listing (keyset cursors, capped total), finished jobs, bulk actions ---------

_ID = {"type": "string", "pattern": "^[0-9a-f]{32}$"}
_NID = {"type": ["string", "null"], "pattern": "^[0-9a-f]{32}$"}
_COUNT = {"type": "integer", "minimum": 0}

JOB_SCHEMAS: dict[str, Any] = {
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
                " and means at least that many (a capped total is counted again after a"
                " second, not on every call)",
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


def job_paths() -> dict[str, Any]:
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


# --- the operator views (dashboard, schedule history) -------------------------------------

_AGE = {"type": ["number", "null"], "minimum": 0}

VIEW_SCHEMAS: dict[str, Any] = {
    "Dashboard": _obj(
        {
            "as_of": _TIME,
            "position": _COUNT,
            "caught_up": {"type": "boolean"},
            "range": {"type": "string", "enum": list(RANGES)},
            "step_s": {"type": "integer", "enum": [60, 3600]},
            "target": {"type": ["string", "null"]},
            "code": {"type": ["string", "null"]},
            "buckets": {"type": "array", "items": _STR},
            "outcomes": _obj({o: {"type": "array", "items": _COUNT} for o in OUTCOME_NAMES}),
            "totals": _OUTCOMES,
            "depth": _obj(
                {
                    s: {"type": "array", "items": {"type": ["integer", "null"], "minimum": 0}}
                    for s in DEPTH_NAMES
                }
            ),
            "queue": _obj({**{s: _COUNT for s in DEPTH_NAMES}, "oldest_pending_age_s": _AGE}),
            "paused_known": {"type": "boolean"},
            "workers": _obj(
                {
                    "live_s": {"type": "number"},
                    "partitions": _COUNT,
                    "pods": {
                        "type": "array",
                        "items": _obj(
                            {
                                "pod": _STR,
                                "live": {"type": "boolean"},
                                "partitions": _COUNT,
                                "paused": {
                                    "type": ["array", "null"],
                                    "items": _obj({"target": _STR, "since": _TIME}),
                                },
                            }
                        ),
                    },
                }
            ),
            "targets": {"type": "array", "items": _ref("DashboardTarget")},
            "notes": {"type": "array", "items": _STR},
        }
    ),
    "DashboardTarget": _obj(
        {
            "target": _STR,
            **{s: _COUNT for s in DEPTH_NAMES},
            "codes": {"type": "object", "additionalProperties": _ref("OpenCounts")},
            "last_hour": _OUTCOMES,
            "succeeded_per_minute": {"type": "array", "items": _COUNT},
            "paused_since": _NTIME,
            "oldest_pending_age_s": _AGE,
        }
    ),
    "HistoryEntry": {
        **_obj(
            {
                "kind": {"type": "string", "enum": ["slot", "missed", "change"]},
                "at": _TIME,
                "versions": {"type": "array", "items": {"type": "integer", "minimum": 1}},
                "slot": _STR,
                "outcome": {
                    "type": "string",
                    "description": "slot: ran, skipped, enqueued (no record yet), or its"
                    " job's state: pending, running, dead, skipped, cancelled, expired, unknown",
                },
                "reason": _NSTR,
                "detail": _NSTR,
                "stage": {"type": ["string", "null"], "enum": ["tick", "run", None]},
                "job_id": _NSTR,
                "attempts": {"type": ["integer", "null"]},
                "dropped": _COUNT,
                "count_exact": {"type": "boolean"},
                "first_slot": _STR,
                "newest_slot": _STR,
                "action": _STR,
                "event": _STR,
                "actor": _ref("Actor"),
            },
            optional=(
                "slot",
                "outcome",
                "reason",
                "detail",
                "stage",
                "job_id",
                "attempts",
                "dropped",
                "count_exact",
                "first_slot",
                "newest_slot",
                "action",
                "event",
                "actor",
            ),
        ),
    },
    "ScheduleHistory": _obj(
        {
            "code": _STR,
            "next_run_at": {
                **_NTIME,
                "description": "null when nothing will run (disabled, no future slot)",
            },
            "state": _STR,
            "entries": {"type": "array", "items": _ref("HistoryEntry")},
            "counts": _obj({k: _COUNT for k in ("ran", "skipped", "dead", "missed", "other")}),
            "first_version": {"type": ["integer", "null"]},
            "last_version": {"type": ["integer", "null"]},
            "stream_version": _COUNT,
            "next": {
                "type": ["integer", "null"],
                "description": "pass as `before` for the older events",
            },
            "limit": _COUNT,
        }
    ),
}


def view_paths() -> dict[str, Any]:
    return {
        f"{PREFIX}/schedules/{{code}}/history": {
            "get": _op(
                "A schedule's run history from the log, newest first",
                _ref("ScheduleHistory"),
                errors=(400, 404),
                tag="schedules",
                description="One entry per slot (ran, skipped with its reason, or its job's"
                " state when the slot's record is not in the page), per missed-slots record"
                " (how many slots were dropped and why) and per change (declared, synced,"
                " enabled, disabled, override). A page is `limit` events of the schedule's"
                " stream before version `before`, never the whole stream.",
                params=[
                    _path("code"),
                    _query(
                        "before",
                        {"type": "integer", "minimum": 1, "maximum": 2**62},
                        "stream version to page back from (the previous page's `next`)",
                    ),
                    _query(
                        "limit",
                        {"type": "integer", "minimum": 1, "maximum": 200, "default": 50},
                        "events per page",
                    ),
                ],
            )
        },
        f"{PREFIX}/dashboard": {
            "get": _op(
                "Queue depth, throughput and failures over time, per target and code",
                _ref("Dashboard"),
                errors=(400,),
                tag="feed",
                description="From the stats projection's counters (never a read of every job):"
                " `1h` is 60 one-minute buckets (per target), `24h` and `7d` hourly buckets"
                " (per target and code). `depth` is the queue at the end of each bucket (null"
                " before the oldest kept sample), the last bucket's is the queue now."
                " `paused_known` is false when this process runs no worker.",
                params=[
                    _query(
                        "range",
                        {"type": "string", "enum": list(RANGES), "default": "1h"},
                        "the time window",
                    ),
                    _query("target", TEXT, "only this target"),
                    _query("code", TEXT, "only this job code (hourly ranges)"),
                ],
            )
        },
    }


# --- the document ------------------------------------------------------------------------


def document() -> dict[str, Any]:
    job_id = [_path("id")]
    code = [_path("code")]
    write = (403, 404, 409)
    sched_write = (403, 404)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "jobledger admin API",
            "version": "1",
            "description": "Admin queries and commands over the jobs and schedules read models"
            " and the event log. Every route needs `Authorization: Bearer <key>`; writes"
            " need role admin. Errors are `{statusCode, code, message[]}`.",
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {**SCHEMAS, **JOB_SCHEMAS, **VIEW_SCHEMAS},
        },
        "paths": {
            f"{PREFIX}/jobs": {
                "get": _op(
                    "List open jobs, newest first, without payload",
                    _ref("JobList"),
                    errors=(400,),
                    tag="jobs",
                    params=LIST_PARAMS,
                    description=LIST_DESCRIPTION,
                )
            },
            f"{PREFIX}/jobs/{{id}}": {
                "get": _op(
                    "One job with its payload and its event history",
                    _ref("JobDetail"),
                    errors=(404,),
                    tag="jobs",
                    params=job_id,
                    description="Also answers for a job that already left the queue:"
                    " `open` is false and `status` says how it ended.",
                )
            },
            f"{PREFIX}/jobs/{{id}}/retry": {
                "post": _op(
                    "DEAD → PENDING, attempts 0, next run now",
                    _ref("Job"),
                    errors=write,
                    tag="jobs",
                    params=job_id,
                )
            },
            f"{PREFIX}/jobs/{{id}}/skip": {
                "post": _op(
                    "Remove a DEAD job (the log keeps JobSkipped)",
                    _ref("Skipped"),
                    errors=write,
                    tag="jobs",
                    params=job_id,
                )
            },
            f"{PREFIX}/jobs/{{id}}/cancel": {
                "post": _op(
                    "Remove a PENDING job that is not in flight (the log keeps JobCancelled)",
                    _ref("Cancelled"),
                    errors=write,
                    tag="jobs",
                    params=job_id,
                )
            },
            f"{PREFIX}/schedules": {
                "get": _op(
                    "Every schedule, sorted by code",
                    {"type": "array", "items": _ref("Schedule")},
                    errors=(),
                    tag="schedules",
                )
            },
            f"{PREFIX}/schedules/{{code}}/enable": {
                "post": _op(
                    "Enable; from disabled, next run is the next slot after now",
                    _ref("Schedule"),
                    errors=sched_write,
                    tag="schedules",
                    params=code,
                )
            },
            f"{PREFIX}/schedules/{{code}}/disable": {
                "post": _op(
                    "Disable: no new slots",
                    _ref("Schedule"),
                    errors=sched_write,
                    tag="schedules",
                    params=code,
                )
            },
            f"{PREFIX}/schedules/{{code}}/cron_override": {
                "put": _op(
                    "Set the admin cron override",
                    _ref("Schedule"),
                    errors=(400, *sched_write),
                    tag="schedules",
                    params=code,
                    body=_ref("CronOverride"),
                ),
                "delete": _op(
                    "Clear the override: back on the code's cron",
                    _ref("Schedule"),
                    errors=sched_write,
                    tag="schedules",
                    params=code,
                ),
            },
            **job_paths(),
            f"{PREFIX}/stats": {
                "get": _op(
                    "Hourly outcomes (stats projection) and the open queue per target",
                    _ref("Stats"),
                    errors=(400,),
                    tag="feed",
                    params=[
                        _query(
                            "hours",
                            {"type": "integer", "minimum": 1, "maximum": 24 * 35, "default": 24},
                            "how many hours back",
                        )
                    ],
                )
            },
            f"{PREFIX}/events": {
                "get": _op(
                    "The event log after a position, for auditors",
                    _ref("EventPage"),
                    errors=(400,),
                    tag="feed",
                    params=[
                        _query(
                            "after",
                            {"type": "integer", "minimum": 0, "maximum": 2**62, "default": 0},
                            "last position already read",
                        ),
                        _query(
                            "limit",
                            {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
                            "events per page",
                        ),
                    ],
                )
            },
            **view_paths(),
        },
    }
