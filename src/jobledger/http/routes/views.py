"""The operator views beside the jobs list: the API reference page (and, as they land,
the dashboard and schedule history). `app.py` mounts `api_routes()` under /api/v1 and
`page_routes()` beside the other pages."""

from __future__ import annotations

from starlette.routing import BaseRoute, Route

from jobledger.http.routes.page_api import api_page


def api_routes() -> list[BaseRoute]:
    return []


def page_routes() -> list[BaseRoute]:
    return [Route("/admin/api", api_page, methods=["GET"])]
