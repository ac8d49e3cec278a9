"""cli/progress.py: a line on a terminal, nothing when piped, log lines never glued on."""

from __future__ import annotations

import asyncio
import io
import logging
import os

import pytest

from jobledger.cli.progress import CLEAR, Progress, ticking


class Terminal(io.StringIO):
    """What a terminal receives (isatty is the only thing Progress asks of it)."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _term(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "xterm")


def test_piped_writes_nothing() -> None:
    out = io.StringIO()
    with Progress("verify", unit="events", stream=out, interval=0) as progress:
        for _ in range(5):
            progress.advance(1000)
    assert progress.done == 5000
    assert out.getvalue() == ""


def test_dumb_terminal_writes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "dumb")
    out = Terminal()
    with Progress("verify", stream=out, interval=0) as progress:
        progress.advance(10)
    assert out.getvalue() == ""


def test_terminal_counter_redraws_in_place_and_erases_at_the_end() -> None:
    out = Terminal()
    with Progress("verify", unit="events", stream=out, interval=0) as progress:
        progress.advance(1500)
        progress.advance(1500)
    text = out.getvalue()
    assert "\n" not in text  # one line, redrawn
    assert "verify: 3,000 events" in text
    assert text.endswith(CLEAR)


def test_terminal_bar_with_a_total() -> None:
    out = Terminal()
    with Progress("archive", total=200, unit="streams", stream=out, interval=0, width=10) as p:
        p.update(50)
        assert p.line().startswith("archive [##........] 50/200 streams  25%")
    assert "left" in out.getvalue()


def test_redraws_are_throttled() -> None:
    out = Terminal()
    with Progress("replay", stream=out, interval=3600) as progress:
        for _ in range(100):
            progress.advance(1)
    assert out.getvalue().count(CLEAR) <= 3  # first draw on entry, erase on exit


def test_a_log_line_is_written_on_a_line_of_its_own_then_the_bar_comes_back() -> None:
    out = Terminal()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger = logging.getLogger("jobledger.test_progress")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        with Progress("verify", unit="events", stream=out, interval=0) as progress:
            progress.advance(7)
            logger.warning("something happened")
            progress.advance(1)
        assert logger.handlers == [handler]  # restored
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    text = out.getvalue()
    before, _, after = text.partition("WARNING something happened\n")
    assert after, text
    assert before.endswith(CLEAR)  # the bar's line was erased first
    assert after.startswith(CLEAR + "verify: 7 events")  # and drawn again after


def test_the_last_resort_handler_is_wrapped_and_restored() -> None:
    out = Terminal()
    before = logging.lastResort
    with Progress("verify", stream=out, interval=0):
        assert logging.lastResort is not before
    assert logging.lastResort is before


def test_echo_prints_above_the_bar_and_plainly_when_piped() -> None:
    piped = io.StringIO()
    with Progress("x", stream=piped) as progress:
        progress.echo("hello")
    assert piped.getvalue() == "hello\n"
    term = Terminal()
    with Progress("x", stream=term, interval=0) as progress:
        progress.echo("hello")
    assert CLEAR + "hello\n" + CLEAR + "x: 0" in term.getvalue()


def test_a_real_pseudo_terminal_counts_as_a_terminal() -> None:
    master, slave = os.openpty()
    try:
        with open(slave, "w", closefd=False) as stream:
            assert Progress("x", stream=stream).enabled
    finally:
        os.close(master)
        os.close(slave)


def test_a_note_follows_the_counts() -> None:
    term = Terminal()
    with Progress("demo", total=4, unit="jobs", stream=term, interval=0) as progress:
        progress.note = "1 ok · 1 dead"
        progress.update(2)
    assert "2/4 jobs  50%" in term.getvalue()
    assert term.getvalue().split(CLEAR)[-2].endswith(" · 1 ok · 1 dead")


async def test_ticking_shows_the_time_spent_on_a_terminal_only() -> None:
    term = Terminal()
    async with ticking("migrate", stream=term):
        await asyncio.sleep(0.7)  # one redraw at 0.5 s
    drawn = term.getvalue().split(CLEAR)
    assert drawn.count("migrate: working · 0s") >= 2  # at entry and by the ticker
    assert drawn[-1] == ""  # erased at the end
    piped = io.StringIO()
    async with ticking("migrate", stream=piped):
        await asyncio.sleep(0.6)
    assert piped.getvalue() == ""
