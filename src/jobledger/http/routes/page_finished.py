"""The admin page's finished jobs (`/admin?status=SUCCEEDED`, …, `FINISHED` for any):
read back from the log with `jobledger.http.queries.finished_jobs`, "Older" links carrying the log
position; and `/admin/find?q=`: a job id or dedupe key opens that job's page."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from jobledger.config.api_keys import Principal
from jobledger.core.ids import is_job_id
from jobledger.domain import jobs
from jobledger.domain.jobs import JobStatus
from jobledger.http.queries.finished_jobs import FINISHED_STATUSES, FinishedFilter, browse
from jobledger.http.routes._guard import services
from jobledger.http.routes.finished import finished_json
from jobledger.http.routes.page_base import error_page, login_redirect, principal_of, render

PAGE_SIZE = 50
ANY_FINISHED = "FINISHED"
_POSITION = re.compile(r"[0-9]{1,18}", re.ASCII)


def wants_finished(request: Request) -> bool:
    status = request.query_params.get("status")
    return status == ANY_FINISHED or status in FINISHED_STATUSES


async def finished_page(request: Request, principal: Principal) -> Response:
    query = request.query_params
    status = query.get("status")
    flt = FinishedFilter(
        status=status if status in FINISHED_STATUSES else None,
        target=query.get("target") or None,
        code=query.get("code") or None,
        key=query.get("key") or None,
    )
    text = query.get("before", "")
    before = int(text) if _POSITION.fullmatch(text) and int(text) > 0 else None
    page = await browse(services(request).store, flt, before=before, limit=PAGE_SIZE)
    filters = {"status": status or ANY_FINISHED} | {
        name: value for name in ("target", "code", "key") if (value := query.get(name))
    }
    context: dict[str, Any] = {
        "title": "Finished jobs",
        "nav": "jobs",
        "rows": [finished_json(row) for row in page.rows],
        "scanned": page.scanned,
        "short": len(page.rows) < PAGE_SIZE and page.next is not None,
        "next_link": "/admin?" + urlencode({**filters, "before": page.next}) if page.next else None,
        "filters": filters,
        "statuses": [s.value for s in JobStatus],
        "finished_statuses": FINISHED_STATUSES,
    }
    return render(request, "finished.html", principal, context)


async def find_page(request: Request) -> Response:
    """A job id or a dedupe key, open or finished: that job's page, or a 404 page."""
    principal = await principal_of(request)
    if principal is None:
        return login_redirect(request)
    wanted = request.query_params.get("q", "").strip()
    store = services(request).store
    job_id: str | None = None
    if wanted and "\x00" not in wanted:
        if is_job_id(wanted) and await store.log.read_stream(jobs.job_stream(wanted)):
            job_id = wanted
        else:
            job_id = await store.admin.dedupe_holder(wanted)
    if job_id is None:
        return error_page(
            request, principal, 404, "Not found", "No job has this id or dedupe key in the log."
        )
    return RedirectResponse(f"/admin/jobs/{quote(job_id)}", status_code=303)
