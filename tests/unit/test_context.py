"""The handler context: the enqueuer's trace, its actor `via: system`, fresh ids."""

from __future__ import annotations

import os
import re

import pytest

from jobledger.core import context
from jobledger.domain.events import Actor


def test_a_handler_runs_under_the_enqueuers_trace_as_the_system() -> None:
    actor = Actor(id="alice", via="http", role="admin")
    with context.job_context(None, "00-" + "a" * 32 + "-" + "b" * 16 + "-01", actor) as ctx:
        assert ctx.trace_id == "a" * 32
        assert ctx.actor == Actor(id="alice", via="system", role="admin")
        assert context.current() is ctx
    assert context.current() == context.RequestContext()
    token = context.enter_job("t" * 32, None, None)
    assert context.current().actor == Actor(id=None, via="system")
    context.leave(token)


def test_trace_ids_are_32_hex_digits_and_differ() -> None:
    ids = {context.new_trace_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_worker_does_not_repeat_its_parents_trace_ids() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.write(write, context.new_trace_id().encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(read, 64).decode()
    os.close(read)
    os.close(write)
    assert child != context.new_trace_id()
