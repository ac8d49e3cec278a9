"""The OpenAPI parts of the operator views (dashboard, schedule history), kept beside
`openapi.py`, which assembles the document."""

from __future__ import annotations

from typing import Any

from jobledger.http.dashboard import DEPTH_NAMES, OUTCOME_NAMES, RANGES
from jobledger.http.openapi import (
    _NSTR,
    _NTIME,
    _OUTCOMES,
    _STR,
    _TIME,
    PREFIX,
    TEXT,
    _obj,
    _op,
    _path,
    _query,
    _ref,
)

_COUNT = {"type": "integer", "minimum": 0}
_AGE = {"type": ["number", "null"], "minimum": 0}

SCHEMAS: dict[str, Any] = {
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
                            {"pod": _STR, "live": {"type": "boolean"}, "partitions": _COUNT}
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


def paths() -> dict[str, Any]:
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
