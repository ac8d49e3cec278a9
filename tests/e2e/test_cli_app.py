"""`--app module:attr` as a user runs it: a module in the current directory, no
PYTHONPATH, the same App object for a script that enqueues, `worker` and `serve`."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.e2e.procs import enqueue_with, user_env

CLI = str(Path(sys.executable).with_name("jobledger"))

APP = """
import jobledger

app = jobledger.App(store="sqlite:///jobs.db")


@app.target("mail:welcome", lane="long", delivery_mode="at_least_once")
def send(job):                                  # a plain def: runs in a thread
    with open("delivered.txt", "a") as out:
        out.write(f"{job.payload['user']}\\n")
"""

ENQUEUE = """
import asyncio
from myjobs import app

async def main():
    await app.start(workers=False)               # an enqueue-only process
    async with app.transaction() as tx:
        await app.enqueue("mail:welcome", {"user": 7}, tx=tx, dedupe_key="welcome:7")
    await app.stop()

asyncio.run(main())
"""


def test_worker_app_from_the_current_directory_delivers(tmp_path: Path) -> None:
    enqueue_with(tmp_path, APP, ENQUEUE)
    assert not (tmp_path / "delivered.txt").exists()
    worker = subprocess.Popen(
        [CLI, "worker", "--app", "myjobs"],
        cwd=tmp_path,
        env=user_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (tmp_path / "delivered.txt").exists():
            assert worker.poll() is None, worker.communicate()[0]
            time.sleep(0.05)
    finally:
        worker.send_signal(signal.SIGTERM)
        output = worker.communicate(timeout=30)[0]
    assert (tmp_path / "delivered.txt").read_text() == "7\n", output
    assert worker.returncode == 0, output


def test_serve_loads_the_same_app_and_stops(tmp_path: Path) -> None:
    (tmp_path / "myjobs.py").write_text(APP)
    serve = subprocess.Popen(
        [CLI, "serve", "--app", "myjobs:app", "--port", "0"],
        cwd=tmp_path,
        env=user_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert serve.stdout is not None
    seen = []
    try:
        for line in serve.stdout:
            seen.append(line)
            if line.startswith("jobledger serving"):
                break
    finally:
        serve.send_signal(signal.SIGTERM)
        rest = serve.communicate(timeout=30)[0]
    assert seen[-1].startswith("jobledger serving http://127.0.0.1:"), "".join(seen) + rest
    assert "store sqlite · workers on" in seen[-1]
    assert serve.returncode == 0, rest


def test_an_enqueue_only_declaration_refuses_to_run_workers(tmp_path: Path) -> None:
    (tmp_path / "producer.py").write_text(
        "import jobledger\napp = jobledger.App(store='sqlite:///jobs.db')\n"
        "app.declare_target('mail:welcome', lane='long')\n"
    )
    done = subprocess.run(
        [CLI, "worker", "--app", "producer"],
        cwd=tmp_path,
        env=user_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("jobledger: invalid_config: target 'mail:welcome' has no handler")
    assert "Traceback" not in done.stderr


def test_app_errors_are_one_line(tmp_path: Path) -> None:
    for spec, message in [
        ("nosuchmodule", "no module 'nosuchmodule' here"),
        ("myjobs:nothing", "myjobs has no attribute 'nothing'"),
    ]:
        (tmp_path / "myjobs.py").write_text(APP)
        done = subprocess.run(
            [CLI, "worker", "--app", spec],
            cwd=tmp_path,
            env=user_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        assert message in done.stderr
        assert "Traceback" not in done.stderr
