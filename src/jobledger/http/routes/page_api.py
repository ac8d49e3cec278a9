"""`/admin/api`: the admin API's reference, rendered from the OpenAPI document."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from jobledger.http import openapi, openapi_html
from jobledger.http.routes.page_base import login_redirect, principal_of, render


async def api_page(request: Request) -> Response:
    principal = await principal_of(request)
    if principal is None:
        return login_redirect(request)
    document = openapi.document()
    return render(
        request,
        "api.html",
        principal,
        {
            "title": "API",
            "nav": "api",
            "info": document["info"],
            "base": str(request.base_url).rstrip("/"),
            "sections": openapi_html.sections(document),
            "schemas": openapi_html.schemas(document),
        },
    )


def page_routes() -> list[BaseRoute]:
    return [Route("/admin/api", api_page, methods=["GET"])]
