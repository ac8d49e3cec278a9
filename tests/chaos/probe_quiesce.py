"""The lost-record case, repeatable: v3's end-offset quiesce against v4's fences on a
hidden tail.

    python -m tests.chaos.probe_quiesce [rounds] [cases]

3 producers write 1-5 records each to `chaos.alo` partition 2 of a fresh tansu, round
after round, until a fresh consumer misses acknowledged records at the partition's end
(tansu hides them for up to ~5 s, docs/reliability.md "The test broker's offsets"). Then a recorder that
holds exactly what the broker returns waits for v3's condition (end offsets stable 1 s,
read up to them) and reports which acknowledged records were unread when it held, then
runs v4's quiesce (fences) and reports what is still unread. Prints one line per case.
"""

from __future__ import annotations

import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from tests.chaos.app import ALO_TOPIC
from tests.chaos.record import Recorder, create_topics
from tests.integration.test_tansu_offsets import producers
from tests.tansu import Tansu

TP = TopicPartition(ALO_TOPIC, 2)


async def read_from(bootstrap: str, start: int, want: set[int], timeout_s: float) -> list[Any]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    out: list[Any] = []
    try:
        consumer.assign([TP])
        consumer.seek(TP, start)
        deadline = time.monotonic() + timeout_s
        while not want <= {r.offset for r in out} and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=100)).values():
                out += records
    finally:
        await consumer.stop()
    return out


async def probe(rounds: int, cases: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with Tansu.running(Path(tmp)) as broker:
            await create_topics(broker.bootstrap)
            writers = await producers(broker.bootstrap, 3)
            acked: set[int] = set()
            found = 0
            for n in range(rounds):
                first = len(acked)

                async def burst(p: Any, i: int, n: int = n) -> None:
                    futures = [
                        await p.send(ALO_TOPIC, b"{}", key=b"r%dp%dj%d" % (n, i, j), partition=2)
                        for j in range(random.randint(1, 5))
                    ]
                    for future in futures:
                        acked.add((await future).offset)

                await asyncio.gather(*(burst(p, i) for i, p in enumerate(writers)))
                mine = {o for o in acked if o >= first}
                got = await read_from(broker.bootstrap, first, mine, 0.5)
                hidden = sorted(mine - {r.offset for r in got})
                if not hidden:
                    continue
                # everything the broker returns now, from offset 0, into a recorder
                visible = set(acked) - set(hidden)
                seen = await read_from(broker.bootstrap, 0, visible, 10)
                recorder = Recorder(broker.bootstrap)
                await recorder.accept({TP: seen}, time.time())
                recorder._consumer = await recorder._open()
                started = time.monotonic()
                held = await recorder.settled_by_end_offsets(10)
                unread_v3 = sorted(acked - recorder.read(ALO_TOPIC, 2).seen)
                await recorder._close()
                recorder.start()
                quiesced = await recorder.quiesced(20)
                unread_v4 = sorted(acked - recorder.read(ALO_TOPIC, 2).seen)
                await recorder.stop()
                when = f"held after {time.monotonic() - started:.1f} s" if held else "never held"
                print(
                    f"round {n}: hidden {hidden}; v3 condition {when}, acknowledged unread"
                    f" then {unread_v3 if held else '-'}; v4 quiesced {quiesced},"
                    f" unread after {unread_v4}",
                    flush=True,
                )
                found += 1
                if found >= cases:
                    break
            for p in writers:
                await p.stop()
            print(f"{n + 1} rounds, {found} hidden tails", flush=True)


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    asyncio.run(probe(*(args + [3000, 3][len(args) :])))
