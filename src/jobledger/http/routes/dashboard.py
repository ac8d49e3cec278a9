"""The stats dashboard: `GET /api/v1/dashboard` and the page `/admin/dashboard`, both
from `jobledger.http.queries.dashboard_numbers` (bounded: see there); the page draws its charts on the
server (`jobledger.http.svg_chart`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from jobledger.config.api_keys import Principal
from jobledger.http.errors import ValidationFailed
from jobledger.http.queries.dashboard_numbers import RANGES, Range, dashboard
from jobledger.http.routes._guard import api, services
from jobledger.http.routes.page_base import (
    error_page,
    filtered_page_principal,
    render,
)
from jobledger.http.svg_chart import Line, chart, sparkline

QUERY = ("range", "target", "code")
LIVE_S = "5"  # the page reloads itself every 5 s with ?live=5 (admin.js)
THROUGHPUT = ("succeeded", "failed", "dead", "skipped", "cancelled", "expired")
ALWAYS_SHOWN = ("succeeded", "failed", "dead")  # the others only when there were any


def _filters(request: Request) -> tuple[Range, str | None, str | None]:
    query = request.query_params
    name = query.get("range", "1h")  # present but empty is an error, as in the schema
    if name not in RANGES:
        raise ValidationFailed(f"range must be one of the following values: {', '.join(RANGES)}")
    return RANGES[name], query.get("target") or None, query.get("code") or None


def _paused(request: Request) -> dict[str, datetime] | None:
    source = services(request).paused
    found = source() if source is not None else None
    return dict(found) if found is not None else None


async def _numbers(request: Request) -> dict[str, Any]:
    span, target, code = _filters(request)
    svc = services(request)
    return await dashboard(
        svc.store,
        svc.clock.now(),
        span,
        target=target,
        code=code,
        paused=_paused(request),
        live_s=svc.worker_live_s,
    )


@api(query=QUERY)
async def get_dashboard(request: Request, principal: Principal) -> dict[str, Any]:
    return await _numbers(request)


def age_text(seconds: float | None) -> str:
    """`42 s`, `5 min`, `3 h 20 min`, `2 d 4 h`; `—` for none."""
    if seconds is None:
        return "—"
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def bucket_label(name: str, span: str) -> str:
    """`09:41` (1h), `09:00` (24h), `03-02 09h` (7d) from a bucket name."""
    return f"{name[5:10]} {name[11:13]}h" if span == "7d" else name[11:16]


async def dashboard_page(request: Request) -> Response:
    principal = await filtered_page_principal(request)
    if isinstance(principal, Response):
        return principal
    try:
        numbers = await _numbers(request)
    except ValidationFailed as exc:
        return error_page(request, principal, 400, "Bad filter", "; ".join(exc.messages))
    labels = [bucket_label(b, numbers["range"]) for b in numbers["buckets"]]
    per = "minute" if numbers["range"] == "1h" else "hour"
    outcomes, depth, totals = numbers["outcomes"], numbers["depth"], numbers["totals"]
    answered = totals["succeeded"] + totals["failed"] + totals["dead"]
    keep = {k: v for k, v in (("target", numbers["target"]), ("code", numbers["code"])) if v}
    live = request.query_params.get("live") == LIVE_S
    on = {"live": LIVE_S} if live else {}

    def link(**query: str) -> str:
        return "/admin/dashboard?" + urlencode({**keep, **query})

    return render(
        request,
        "dashboard.html",
        principal,
        {
            "title": "Dashboard",
            "nav": "dashboard",
            "d": numbers,
            "per": per,
            "live": LIVE_S if live else None,
            "live_link": link(range=numbers["range"])
            if live
            else link(range=numbers["range"], live=LIVE_S),
            "ranges": [(name, link(range=name, **on)) for name in RANGES],
            "failure_rate": f"{100 * (totals['failed'] + totals['dead']) / answered:.1f} %"
            if answered
            else "—",
            "oldest": age_text(numbers["queue"]["oldest_pending_age_s"]),
            "throughput_chart": chart(
                labels,
                [Line(o, outcomes[o]) for o in THROUGHPUT if o in ALWAYS_SHOWN or totals[o]],
                title=f"Jobs processed per {per}",
                bars=True,
            ),
            "depth_chart": chart(
                labels,
                [Line(s, depth[s]) for s in ("pending", "running", "dead")],
                title=f"Queue depth at the end of each {per}",
            ),
            "rows": [
                {
                    **row,
                    "age": age_text(row["oldest_pending_age_s"]),
                    "spark": sparkline(row["succeeded_per_minute"], "succeeded"),
                }
                for row in numbers["targets"]
            ],
        },
    )


def api_routes() -> list[BaseRoute]:
    """Mounted under /api/v1."""
    return [Route("/dashboard", get_dashboard, methods=["GET"])]


def page_routes() -> list[BaseRoute]:
    return [Route("/admin/dashboard", dashboard_page, methods=["GET"])]
