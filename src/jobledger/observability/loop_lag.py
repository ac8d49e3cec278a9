"""The event loop's probe and watchdog: how late the loop runs, and which handler held it.

Every handler of both lanes runs on one event loop; an `async def` handler that blocks
(`time.sleep(2)`, a synchronous HTTP client, a long computation) stops every other
partition, the heartbeat and the wake path for as long as it blocks. `LoopMonitor`
sees it two ways:

- a **probe** task on the loop sleeps `interval_s` at a time and reports how much later
  than asked it woke (`observers.loop_lag`, the `jobledger_event_loop_lag_seconds`
  histogram), and when it last ran (`stalled_s`, read by `/healthz` and by the
  `jobledger_event_loop_stalled_seconds` gauge at scrape time);
- a **watchdog** thread wakes every `interval_s`; when the probe has not run for
  `threshold_s`, the loop is stuck now, and the task it is stuck in is the loop's
  current task. The monitor is an observer: `run_started` / `run_ended` (around every
  handler, in the handler's task) tell it which job each task is running, so the
  watchdog names the target and the job. Each stall past the threshold is counted
  (`observers.loop_blocked`); the warning is written once per target (and once per
  task name for a stall outside any handler), so a handler that always blocks does not
  flood the log.

A blocking handler inside a task of its own (one it made with `asyncio.create_task`)
is not in the map; with exactly one handler running, that one is named.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from time import monotonic

from jobledger.core.tasks import cancel_and_wait
from jobledger.domain.jobs import Job
from jobledger.observability.observe import Observer

logger = logging.getLogger("jobledger.loop")

#: longest sleep of the probe and the watchdog between two looks (s)
MAX_INTERVAL_S = 0.25


class LoopMonitor(Observer):
    """Started and stopped as a reactor of the pod (`start` / `stop` on the loop)."""

    def __init__(
        self, observers: Observer, threshold_s: float, *, interval_s: float | None = None
    ) -> None:
        self.observers = observers
        self.threshold_s = threshold_s
        self.interval_s = interval_s or min(max(threshold_s / 4, 0.01), MAX_INTERVAL_S)
        self._running: dict[asyncio.Task[object], Job] = {}
        self._warned: set[str] = set()
        self._last = monotonic()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._probe: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    @property
    def watching(self) -> bool:
        return self._probe is not None and not self._probe.done()

    def stalled_s(self) -> float:
        """Seconds since the probe last ran on the loop (0 while it is not watching)."""
        return max(monotonic() - self._last, 0.0) if self.watching else 0.0

    # --- Observer: which job each task runs ------------------------------------------
    def run_started(self, job: Job) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._running[task] = job

    def run_ended(self, job: Job) -> None:
        task = asyncio.current_task()
        if task is not None and self._running.get(task) is job:
            del self._running[task]

    # --- reactor ------------------------------------------------------------------------
    async def start(self) -> None:
        if self.threshold_s <= 0 or self.watching:
            return
        self._loop = asyncio.get_running_loop()
        self._last = monotonic()
        self._stop.clear()
        self._probe = asyncio.create_task(self._run_probe(), name="jobledger-loop-probe")
        self._thread = threading.Thread(
            target=self._watch, args=(self._loop,), name="jobledger-loop-watchdog", daemon=True
        )
        self._thread.start()

    async def stop(self) -> None:
        self._stop.set()
        if self._probe is not None:
            await cancel_and_wait(self._probe)
            self._probe = None
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 2.0)
            self._thread = None
        self._running.clear()

    # --- the probe (on the loop) -------------------------------------------------------
    async def _run_probe(self) -> None:
        interval = self.interval_s
        while True:
            asked = monotonic()
            await asyncio.sleep(interval)
            now = monotonic()
            self._last = now
            self.observers.loop_lag(max(now - asked - interval, 0.0))

    # --- the watchdog (its own thread) -------------------------------------------------
    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        stall_seen = 0.0  # the probe time of the stall already reported (one per stall)
        while not self._stop.wait(self.interval_s):
            last = self._last
            if monotonic() - last < self.threshold_s or last == stall_seen:
                continue
            stall_seen = last
            try:
                self._report(loop, monotonic() - last)
            except Exception:  # the watchdog must outlive whatever it meets
                logger.exception("event-loop watchdog: reporting a stall failed")

    def _report(self, loop: asyncio.AbstractEventLoop, stalled: float) -> None:
        task = asyncio.current_task(loop)
        job = self._running.get(task) if task is not None else None
        if job is None and task is not None:
            with contextlib.suppress(RuntimeError):  # the loop may move on meanwhile
                running = list(self._running.values())
                job = running[0] if len(running) == 1 else None
        self.observers.loop_blocked(
            job.target if job is not None else None, job.id if job is not None else None, stalled
        )
        if job is not None:
            if job.target in self._warned:
                return
            self._warned.add(job.target)
            logger.warning(
                "handler blocked the event loop target=%s job_id=%s blocked_s=%.1f so far"
                " (an async def handler must not block: use a plain def, which runs in a"
                " thread, or an async client; reported once per target)",
                job.target,
                job.id,
                stalled,
                extra={"target": job.target, "job_id": job.id, "blocked_s": round(stalled, 3)},
            )
            return
        name = task.get_name() if task is not None else "no task (a callback)"
        if name in self._warned:
            return
        self._warned.add(name)
        logger.warning(
            "event loop blocked for %.1f s so far in %s, not in a handler (reported once per task)",
            stalled,
            name,
            extra={"task": name, "blocked_s": round(stalled, 3)},
        )
