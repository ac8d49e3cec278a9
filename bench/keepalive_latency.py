"""Latency of sequential requests on one kept-alive connection to the admin server.

    .venv/bin/python bench/keepalive_latency.py                        # this tree only
    .venv/bin/python bench/keepalive_latency.py --baseline-src ../base  # and another tree

Each side is `jobledger serve --no-workers` on an in-memory store, started from its
own source tree (`--baseline-src DIR`: DIR or DIR/src holds the `jobledger` package) on
a free loopback port. The rounds take turns (this tree, the baseline, this tree, …):
each round opens one HTTP/1.1 connection (`http.client`), sends `--requests`
sequential `GET /api/v1/jobs?limit=1` with a bearer key on it, and keeps the time of
every request after the first (the first pays for the connection). Prints each
round's median and 90th percentile per request, the ratio baseline / this tree per
pair of rounds with their median and spread, and the load average before and after.

A request on a kept-alive connection whose server sends the response's head and body
in two writes waits ~40 ms when the server's socket has Nagle's algorithm on: the
second write waits for the ACK of the first, which the client delays. Performance
lives here, never in timed tests.
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from drain import source_dir

THIS_SRC = Path(__file__).resolve().parents[1] / "src"
KEY = "bench-keepalive-key-0123456789"
SERVE = "from jobledger.cli import main; raise SystemExit(main())"
READY = re.compile(r"jobledger serving http://([0-9.]+):([0-9]+)")


@dataclass
class Side:
    name: str
    src: Path
    host: str = ""
    port: int = 0
    rounds: list[list[float]] = field(default_factory=list)


@contextmanager
def served(side: Side) -> Iterator[None]:
    """`jobledger serve --no-workers` from `side.src` until the block ends."""
    env = {
        **os.environ,
        "PYTHONPATH": str(side.src),
        "PYTHONUNBUFFERED": "1",
        "JOBLEDGER_API_KEYS": f"{KEY}:admin:bench",
        "JOBLEDGER_LOG_LEVEL": "WARNING",
    }
    argv = [sys.executable, "-c", SERVE, "--store", "memory://", "serve", "--no-workers"]
    process = subprocess.Popen(
        [*argv, "--host", "127.0.0.1", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    found = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            match = READY.search(line)
            if match and not found.is_set():
                side.host, side.port = match.group(1), int(match.group(2))
                found.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        if not found.wait(60):
            raise SystemExit(f"{side.name}: the server did not start:\n{''.join(lines)}")
        yield
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        reader.join(timeout=5)


def one_round(side: Side, requests: int) -> list[float]:
    """Seconds per request after the first, on one connection."""
    conn = http.client.HTTPConnection(side.host, side.port, timeout=30)
    headers = {"Authorization": f"Bearer {KEY}"}
    times: list[float] = []
    try:
        for n in range(requests):
            start = time.perf_counter()
            conn.request("GET", "/api/v1/jobs?limit=1", headers=headers)
            response = conn.getresponse()
            response.read()
            if response.status != 200:
                raise SystemExit(f"{side.name}: HTTP {response.status}")
            if n:
                times.append(time.perf_counter() - start)
    finally:
        conn.close()
    return times


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=100, help="requests per round")
    parser.add_argument("--pairs", type=int, default=5, help="rounds per side")
    parser.add_argument("--baseline-src", default=None, metavar="DIR")
    args = parser.parse_args()
    sides = [Side("this tree", THIS_SRC)]
    if args.baseline_src:
        sides.append(Side("baseline", source_dir(args.baseline_src)))
    load_before = os.getloadavg()
    with ExitStack() as stack:
        for side in sides:
            stack.enter_context(served(side))
        for side in sides:
            one_round(side, 5)  # warm-up: imports, first route compilations
        for _ in range(args.pairs):
            for side in sides:
                side.rounds.append(one_round(side, args.requests))
    load_after = os.getloadavg()
    print(f"{args.requests} sequential requests per round on one connection")
    for side in sides:
        print(f"{side.name} ({side.src}):")
        for n, times in enumerate(side.rounds, 1):
            p90 = statistics.quantiles(times, n=10)[-1]
            print(f"  round {n}: median {ms(statistics.median(times))} ms, p90 {ms(p90)} ms")
    if len(sides) == 2:
        ours, base = sides
        ratios = [
            statistics.median(b) / statistics.median(o)
            for o, b in zip(ours.rounds, base.rounds, strict=True)
        ]
        shown = ", ".join(f"{r:.1f}" for r in ratios)
        print(f"baseline / this tree, per pair: {shown}")
        print(
            f"median ratio {statistics.median(ratios):.1f}"
            f" (spread {min(ratios):.1f}-{max(ratios):.1f})"
        )
    before = " ".join(f"{x:.2f}" for x in load_before)
    after = " ".join(f"{x:.2f}" for x in load_after)
    print(f"load average before: {before}; after: {after}")


if __name__ == "__main__":
    main()
