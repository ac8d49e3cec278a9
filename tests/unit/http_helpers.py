"""A real admin application over a real store for the HTTP tests: engine, scheduler,
admin keys, and jobs brought into every state by the domain's own commands."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
from starlette.applications import Starlette

from jobledger.admin.jobs import JobAdmin
from jobledger.config.api_keys import parse_api_keys
from jobledger.core import context
from jobledger.core.clock import FakeClock
from jobledger.domain import job_commands, job_outcomes, jobs
from jobledger.domain.events import SYSTEM
from jobledger.domain.job_outcomes import Result, RunResult
from jobledger.domain.jobs import Job, Stamp
from jobledger.engine import Engine
from jobledger.http.app import create_app
from jobledger.http.auth import ApiKeys
from jobledger.http.services import Services
from jobledger.reactors.scheduler import Scheduler
from jobledger.storage.port import Store

ADMIN_KEY = "admin-key-0001"
VIEWER_KEY = "viewer-key-0001"
KEYS = f"{ADMIN_KEY}:admin:alice,{VIEWER_KEY}:viewer:bob"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
VIEWER = {"Authorization": f"Bearer {VIEWER_KEY}"}


async def _noop(job: Job) -> None:
    return None


async def _slot(run: Any) -> None:
    return None


@dataclass
class World:
    store: Store
    clock: FakeClock
    engine: Engine
    scheduler: Scheduler
    app: Starlette

    async def enqueue(self, target: str = "mail:welcome", **kw: Any) -> str:
        async with self.engine.transaction() as tx:
            done = await self.engine.enqueue(target, kw.pop("payload", {"n": 1}), tx=tx, **kw)
        assert done.job_id is not None
        return done.job_id

    async def job(self, job_id: str) -> Job:
        row = await self.store.admin.get_job(job_id)
        assert row is not None
        return row

    def stamp(self) -> Stamp:
        return Stamp(self.clock.now(), SYSTEM, context.new_trace_id())

    async def dead(self, target: str = "mail:welcome", **kw: Any) -> str:
        job_id = await self.enqueue(target, **kw)
        policy = job_outcomes.OutcomePolicy(jobs.DeliveryMode.AT_MOST_ONCE, 6, (1, 2))
        outcome = job_outcomes.decide_outcome(
            await self.job(job_id), RunResult(Result.DEAD_NOW, "boom"), policy, self.stamp()
        )
        assert (await self.store.writes.apply([outcome.change])) == [True]
        return job_id

    async def running(self, target: str = "report:build", **kw: Any) -> str:
        job_id = await self.enqueue(target, **kw)
        change = job_commands.claim(
            await self.job(job_id),
            token="t" * 32,
            pod="pod-1",
            lease=timedelta(minutes=5),
            exclusive=False,
            stamp=self.stamp(),
        )
        assert (await self.store.writes.apply([change])) == [True]
        return job_id

    async def inflight(self, target: str = "kafka:orders", **kw: Any) -> str:
        job_id = await self.enqueue(target, **kw)
        change = job_commands.dispatch(
            await self.job(job_id), token="f" * 32, pod="pod-1", stamp=self.stamp()
        )
        assert (await self.store.writes.apply([change])) == [True]
        return job_id


@asynccontextmanager
async def world(store: Store, clock: FakeClock) -> AsyncIterator[World]:
    engine = Engine(store, clock=clock)
    engine.targets.register("mail:welcome", "fast", _noop)
    engine.targets.register("kafka:orders", "fast", _noop)
    engine.targets.register("report:build", "long", _noop)
    scheduler = Scheduler(engine)
    scheduler.declare("nightly_report", "0 2 * * *", _slot)
    scheduler.declare("cleanup", "*/10 * * * *", _slot)
    await scheduler.sync()
    services = Services(
        store, clock, JobAdmin(store, clock), scheduler, max_attempts=engine.targets.max_attempts
    )
    app = create_app(services, ApiKeys(parse_api_keys(KEYS)), csrf_secret=b"s" * 32)
    yield World(store, clock, engine, scheduler, app)


@asynccontextmanager
async def client(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
        yield http


_HIDDEN = re.compile(r'<input type="hidden" name="(csrf|next)" value="([^"]*)">')


async def signin_form(http: httpx.AsyncClient, path: str = "/admin/login") -> dict[str, str]:
    """The sign-in form's hidden fields (its CSRF token, bound to the pre-session cookie
    the same answer sets), as a browser that loaded the form would post them."""
    page = await http.get(path)
    assert page.status_code == 200, page.status_code
    return {name: html.unescape(value) for name, value in _HIDDEN.findall(page.text)}


async def sign_in(http: httpx.AsyncClient, key: str = ADMIN_KEY, nxt: str = "/admin") -> None:
    """Sign in through the form as a browser does: load it, post it with the key."""
    form = await signin_form(http)
    response = await http.post("/admin/login", data={**form, "key": key, "next": nxt})
    assert response.status_code == 303, response.status_code
