"""Progress of a long command: a bar (or a counter) on a terminal, nothing when piped.

    with Progress("verify", unit="events") as progress:     # total unknown: a counter
        for page in pages:
            ...
            progress.advance(len(page))

    with Progress("archive", total=len(streams), unit="streams") as progress:
        progress.update(done)                               # or set the count outright

The line is drawn on standard error (standard output stays the command's result, e.g.
`export` writing JSON Lines), redrawn at most every `interval` seconds, and erased when
the block ends, so the command's own summary lines print on a clean line. When the
stream is not a terminal (a pipe, a file, CI) nothing is written at all.

Log lines never glue onto the bar: while a bar is shown, every logging handler that
writes to a terminal (the root's and other loggers', and `logging.lastResort`) is
wrapped so that the bar's line is erased before the record is written and the bar is
redrawn after it. `Progress.echo(text)` prints a line above the bar the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import AsyncIterator
from types import TracebackType
from typing import TextIO

CLEAR = "\r\x1b[K"  # back to the line's start, erase to its end


def is_terminal(stream: TextIO) -> bool:
    """Whether `stream` is an interactive terminal that understands `CLEAR`."""
    try:
        return stream.isatty() and os.environ.get("TERM", "") != "dumb"
    except (AttributeError, ValueError):  # closed or not a real file
        return False


def _count(n: float) -> str:
    """1234 -> '1,234'; rates get one decimal below 10."""
    return f"{n:,.0f}" if n >= 10 or n == int(n) else f"{n:.1f}"


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Progress:
    """One progress line for a long command; a context manager.

    `total`: the expected count when known (draws a bar, a percentage and the time
    left), else None (draws a counter and the rate). `enabled`: force the line on or
    off; by default it is on only when `stream` is a terminal.
    """

    def __init__(
        self,
        label: str,
        *,
        total: int | None = None,
        unit: str = "",
        stream: TextIO | None = None,
        enabled: bool | None = None,
        interval: float = 0.1,
        width: int = 24,
    ) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = is_terminal(self.stream) if enabled is None else enabled
        self.interval = interval
        self.width = width
        self.done = 0
        self.note = ""  # appended to the line (e.g. "3 ok · 1 dead")
        self.counting = True  # False: the line shows the time spent only
        self._started = time.monotonic()
        self._drawn_at = 0.0
        self._shown = False  # the bar's line is on the screen
        self._lock = threading.RLock()
        self._wrapped: list[tuple[logging.Logger | None, _ClearingHandler]] = []

    # --- counting ------------------------------------------------------------------------
    def advance(self, n: int = 1) -> None:
        self.update(self.done + n)

    def update(self, done: int, *, total: int | None = None) -> None:
        self.done = done
        if total is not None:
            self.total = total
        if self.enabled:
            now = time.monotonic()
            if now - self._drawn_at >= self.interval:
                self._drawn_at = now
                self.draw()

    def line(self) -> str:
        """The text of the progress line as it stands now."""
        note = f" · {self.note}" if self.note else ""
        return self._counts() + note

    def _counts(self) -> str:
        elapsed = max(time.monotonic() - self._started, 1e-9)
        if not self.counting:  # work that reports no counts (`ticking`)
            return f"{self.label}: working · {_duration(elapsed)}"
        rate = self.done / elapsed
        unit = f" {self.unit}" if self.unit else ""
        if self.total:
            share = min(self.done / self.total, 1.0)
            filled = round(self.width * share)
            left = (self.total - self.done) / rate if rate > 0 else 0.0
            return (
                f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}]"
                f" {_count(self.done)}/{_count(self.total)}{unit} {share:4.0%}"
                f" · {_count(rate)}/s · {_duration(left)} left"
            )
        return f"{self.label}: {_count(self.done)}{unit} · {_count(rate)}/s · {_duration(elapsed)}"

    # --- drawing -------------------------------------------------------------------------
    def draw(self) -> None:
        if not self.enabled:
            return
        with self._lock:
            self.stream.write(CLEAR + self.line())
            self.stream.flush()
            self._shown = True

    def clear(self) -> None:
        """Erase the bar's line (it is drawn again at the next update)."""
        with self._lock:
            if self._shown:
                self.stream.write(CLEAR)
                self.stream.flush()
                self._shown = False

    def echo(self, text: str) -> None:
        """Print `text` on a line of its own above the bar (plainly when piped)."""
        with self._lock:
            self.clear()
            self.stream.write(text + "\n")
            self.stream.flush()
            if self.enabled:
                self.draw()

    # --- life cycle ----------------------------------------------------------------------
    def __enter__(self) -> Progress:
        self._started = time.monotonic()
        if self.enabled:
            self._wrap_log_handlers()
            self.draw()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._unwrap_log_handlers()
        self.clear()

    def _wrap_log_handlers(self) -> None:
        loggers: list[logging.Logger] = [logging.getLogger()]
        loggers += [
            lg
            for lg in logging.Logger.manager.loggerDict.values()
            if isinstance(lg, logging.Logger)
        ]
        for logger in loggers:
            for i, handler in enumerate(list(logger.handlers)):
                if _writes_to_terminal(handler):
                    wrapper = _ClearingHandler(handler, self)
                    logger.handlers[i] = wrapper
                    self._wrapped.append((logger, wrapper))
        last = logging.lastResort
        if last is not None and not isinstance(last, _ClearingHandler):
            wrapper = _ClearingHandler(last, self)
            logging.lastResort = wrapper
            self._wrapped.append((None, wrapper))

    def _unwrap_log_handlers(self) -> None:
        for logger, wrapper in reversed(self._wrapped):
            if logger is None:
                if logging.lastResort is wrapper:
                    logging.lastResort = wrapper.inner
                continue
            handlers = logger.handlers
            for i, handler in enumerate(handlers):
                if handler is wrapper:
                    handlers[i] = wrapper.inner
        self._wrapped.clear()


@contextlib.asynccontextmanager
async def ticking(label: str, *, stream: TextIO | None = None) -> AsyncIterator[Progress]:
    """A line showing the time spent on work that reports no counts (a migration runs
    in one transaction), redrawn every half second on a terminal."""
    with Progress(label, stream=stream, interval=0.5) as progress:
        progress.counting = False
        progress.draw()

        async def tick() -> None:
            while True:
                await asyncio.sleep(progress.interval)
                progress.draw()

        task = asyncio.create_task(tick()) if progress.enabled else None
        try:
            yield progress
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


def _writes_to_terminal(handler: logging.Handler) -> bool:
    stream = getattr(handler, "stream", None)
    return isinstance(handler, logging.StreamHandler) and stream is not None and is_terminal(stream)


class _ClearingHandler(logging.Handler):
    """A handler in front of another: erase the bar, let it write, draw the bar again."""

    def __init__(self, inner: logging.Handler, progress: Progress) -> None:
        super().__init__(inner.level)
        self.inner = inner
        self.progress = progress

    def handle(self, record: logging.LogRecord) -> bool:
        with self.progress._lock:
            self.progress.clear()
            try:
                return bool(self.inner.handle(record))
            finally:
                self.progress.draw()

    def emit(self, record: logging.LogRecord) -> None:  # pragma: no cover - handle() does it
        self.inner.emit(record)
