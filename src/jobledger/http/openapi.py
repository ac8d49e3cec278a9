"""The admin API's OpenAPI 3.1 document, written by hand next to the routes it describes.

`tests/unit/test_http_openapi.py` checks that every route of the app is documented and
runs schemathesis against this document, so a drift between the two fails a test.
"""

from __future__ import annotations

from typing import Any

from jobledger.domain.jobs import JobStatus
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


def document() -> dict[str, Any]:
    from jobledger.http import openapi_jobs, openapi_views  # they build on this module

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
            "schemas": {**SCHEMAS, **openapi_jobs.SCHEMAS, **openapi_views.SCHEMAS},
        },
        "paths": {
            f"{PREFIX}/jobs": {
                "get": _op(
                    "List open jobs, newest first, without payload",
                    _ref("JobList"),
                    errors=(400,),
                    tag="jobs",
                    params=openapi_jobs.LIST_PARAMS,
                    description=openapi_jobs.LIST_DESCRIPTION,
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
            **openapi_jobs.paths(),
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
            **openapi_views.paths(),
        },
    }
