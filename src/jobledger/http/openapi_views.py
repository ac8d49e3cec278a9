"""The OpenAPI parts of the operator views (dashboard, schedule history), kept beside
`openapi.py`, which assembles the document."""

from __future__ import annotations

from typing import Any

from jobledger.http.dashboard import DEPTH_NAMES, OUTCOME_NAMES, RANGES
from jobledger.http.openapi import (
    _NTIME,
    _OUTCOMES,
    _STR,
    _TIME,
    PREFIX,
    TEXT,
    _obj,
    _op,
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
}


def paths() -> dict[str, Any]:
    return {
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
