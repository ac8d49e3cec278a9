"""The admin page's bulk buttons: retry or skip every DEAD job matching the list's
filters. The form carries the count the confirmation showed (`expect`); when another
number matches by the time it is posted, nothing changes and the page says so."""

from __future__ import annotations

from starlette.requests import Request

from jobledger.admin.jobs import BULK_LIMIT
from jobledger.config.api_keys import Principal
from jobledger.domain.errors import InvalidArgument
from jobledger.http.routes._guard import services
from jobledger.http.routes.bulk import check_expected
from jobledger.storage.port import JobFilter

DONE = {"retry": "retried (PENDING, attempts 0)", "skip": "skipped"}


def form_filter(form: dict[str, str]) -> JobFilter:
    if any("\x00" in value for value in form.values()):
        raise InvalidArgument("filters must not contain U+0000")
    return JobFilter(
        target=form.get("target") or None,
        code=form.get("code") or None,
        key=form.get("key") or None,
    )


def form_expect(form: dict[str, str]) -> int | None:
    text = form.get("expect", "")
    if text.isascii() and text.isdigit() and len(text) <= 6:
        return int(text)
    return None


async def _bulk(request: Request, form: dict[str, str], action: str) -> str:
    flt = form_filter(form)
    admin = services(request).jobs
    await check_expected(admin, flt, form_expect(form))
    result = await admin.bulk(action, flt)
    text = f"{result.changed} of {result.matched} DEAD jobs {DONE[action]}."
    if result.conflicts:
        text += f" {result.conflicts} changed meanwhile and were left as they are."
    if result.more:
        text += f" Stopped after {BULK_LIMIT}: more DEAD jobs match, press again."
    return text


async def retry_all(request: Request, principal: Principal, form: dict[str, str]) -> str:
    return await _bulk(request, form, "retry")


async def skip_all(request: Request, principal: Principal, form: dict[str, str]) -> str:
    return await _bulk(request, form, "skip")
