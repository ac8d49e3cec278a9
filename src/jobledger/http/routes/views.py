"""The operator views beside the jobs list: the API reference page, the stats
dashboard and each schedule's run history. `app.py` mounts `api_routes()` under /api/v1 and
`page_routes()` beside the other pages."""

from __future__ import annotations

from starlette.routing import BaseRoute, Route

from jobledger.http.routes import dashboard, schedule_history
from jobledger.http.routes.page_api import api_page


def api_routes() -> list[BaseRoute]:
    return [
        Route("/dashboard", dashboard.get_dashboard, methods=["GET"]),
        Route("/schedules/{code}/history", schedule_history.get_history, methods=["GET"]),
    ]


def page_routes() -> list[BaseRoute]:
    return [
        Route("/admin/api", api_page, methods=["GET"]),
        Route("/admin/dashboard", dashboard.dashboard_page, methods=["GET"]),
        Route("/admin/schedules/{code}", schedule_history.schedule_page, methods=["GET"]),
    ]
