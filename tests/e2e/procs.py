"""Run `jobledger …` as a real subprocess and find the address it prints."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLI = "from jobledger.cli import main; raise SystemExit(main())"


@dataclass
class Proc:
    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = re.search(pattern, self.output)
            if match:
                return match
            if self.process.poll() is not None and not self._reader_alive():
                break
            time.sleep(0.05)
        raise AssertionError(f"{pattern!r} not printed; output so far:\n{self.output}")

    def _reader_alive(self) -> bool:
        return any(
            t.name == f"reader-{self.process.pid}" and t.is_alive() for t in threading.enumerate()
        )


@contextmanager
def jobledger(*args: str, env: dict[str, str] | None = None) -> Iterator[Proc]:
    """Start `jobledger args…` (stdout and stderr merged); SIGTERM it on the way out."""
    process = subprocess.Popen(
        [sys.executable, "-c", CLI, *args],
        cwd=ROOT,
        env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    proc = Proc(process)

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            proc.lines.append(line)

    reader = threading.Thread(target=read, name=f"reader-{process.pid}", daemon=True)
    reader.start()
    try:
        yield proc
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        reader.join(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


def user_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: no JOBLEDGER_ setting, no PYTHONPATH (a module
    in the current directory must be found without it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBLEDGER_")}
    env.pop("PYTHONPATH", None)
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def enqueue_with(folder: Path, app: str, script: str) -> None:
    """Write the user's app module (`myjobs.py`) and enqueue script into `folder`, and
    run the script there as the user would."""
    (folder / "myjobs.py").write_text(app)
    (folder / "enqueue.py").write_text(script)
    done = subprocess.run(
        [sys.executable, "enqueue.py"], cwd=folder, env=user_env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
