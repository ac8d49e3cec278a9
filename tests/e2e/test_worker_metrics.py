"""`jobledger worker --metrics-port` as an operator runs it: a real worker process on a
SQLite app serves its own /metrics, /healthz and /readyz, and the counters follow the
jobs it ran (delivered, failed, dead, deferred, per target and lane)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.procs import enqueue_with, user_env

CLI = str(Path(sys.executable).with_name("jobledger"))

APP = """
import time

import jobledger
from jobledger.domain.errors import TargetUnreachable

app = jobledger.App(store="sqlite:///jobs.db")


@app.target("mail:ok", lane="fast", delivery_mode="at_least_once")
async def ok(job):
    return None


@app.target("mail:refused", lane="fast", delivery_mode="at_least_once", max_attempts=1)
async def refused(job):
    raise RuntimeError("partner said no")


@app.target("mail:down", lane="fast", delivery_mode="at_least_once")
async def down(job):
    raise TargetUnreachable("no route to the partner")


@app.target("report:build", lane="long", delivery_mode="at_least_once")
async def build(job):
    return None


@app.target("report:blocking", lane="long", delivery_mode="at_least_once")
async def blocking(job):
    time.sleep(0.8)
"""

ENQUEUE = """
import asyncio
from myjobs import app

async def main():
    await app.start(workers=False)
    async with app.transaction() as tx:
        for n in range(3):
            await app.enqueue("mail:ok", {"n": n}, tx=tx)
        await app.enqueue("mail:refused", {"n": 1}, tx=tx)
        await app.enqueue("mail:down", {"n": 1}, tx=tx)
        await app.enqueue("report:build", {"n": 1}, tx=tx)
        await app.enqueue("report:blocking", {"n": 1}, tx=tx)
    await app.stop()

asyncio.run(main())
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def wait_until(check: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError("timed out")


def test_worker_serves_metrics_health_and_readiness(tmp_path: Path) -> None:
    enqueue_with(tmp_path, APP, ENQUEUE)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    worker = subprocess.Popen(
        [CLI, "worker", "--app", "myjobs", "--metrics-port", str(port)],
        cwd=tmp_path,
        env=user_env(JOBLEDGER_LOOP_BLOCK_WARN_S="0.3"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(lambda: _answers(f"{base}/readyz"))
        status, body = get(f"{base}/readyz")
        ready = json.loads(body)
        assert status == 200 and ready["status"] == "ready", body
        assert ready["checks"]["store"] == "ok" and ready["checks"]["lanes"] == "started"
        status, body = get(f"{base}/healthz")
        assert status == 200 and json.loads(body)["status"] == "ok"

        def ran_all() -> bool:
            found = samples(get(f"{base}/metrics")[1])
            return (
                value(found, "jobledger_jobs_delivered_total", target="mail:ok", lane="fast") == 3
                and value(
                    found, "jobledger_jobs_delivered_total", target="report:blocking", lane="long"
                )
                == 1
                and value(found, "jobledger_jobs_deferred_total", target="mail:down", lane="fast")
                == 1
            )

        wait_until(ran_all)
        found = samples(get(f"{base}/metrics")[1])
        fast = {"lane": "fast"}
        assert (
            value(found, "jobledger_jobs_delivered_total", target="report:build", lane="long") == 1
        )
        assert value(found, "jobledger_jobs_dead_total", target="mail:refused", **fast) == 1
        assert (
            value(found, "jobledger_job_runs_total", target="mail:refused", result="dead", **fast)
            == 1
        )
        assert value(found, "jobledger_jobs_failed_total", target="mail:ok", **fast) == 0
        assert value(found, "jobledger_targets_paused") == 1  # mail:down answered unreachable
        assert value(found, "jobledger_target_paused", target="mail:down") == 1
        assert (
            value(found, "jobledger_job_run_duration_seconds_count", target="mail:ok", **fast) == 3
        )
        assert value(found, "jobledger_job_start_delay_seconds_count", lane="long") == 2
        assert sum(v for (n, _), v in found.items() if n == "jobledger_partitions_owned") == 64
        assert value(found, "jobledger_event_loop_blocked_total", target="report:blocking") == 1
        assert value(found, "jobledger_event_loop_lag_seconds_count") > 0
        assert value(found, "jobledger_store_errors_total") == 0
        assert get(f"{base}/nothing")[0] == 404
    finally:
        worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=30)
    assert worker.returncode == 0, output
    assert f"metrics on http://127.0.0.1:{port}" in output
    assert output.count("handler blocked the event loop target=report:blocking") == 1


def _answers(url: str) -> bool:
    try:
        return get(url)[0] == 200
    except OSError:
        return False


def test_a_taken_metrics_port_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "myjobs.py").write_text(APP)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [CLI, "worker", "--app", "myjobs", "--metrics-port", str(port)],
            cwd=tmp_path,
            env=user_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 2, done.stderr
    assert f"cannot serve metrics on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr
