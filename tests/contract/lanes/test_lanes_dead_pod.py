"""The lease keeper and the lanes around a liveness token (`reactors.leases`, D53-D57),
on the stores that have tokens, with real pods (`Runtime`s) on two store instances of one
database and the fake clock:

* a pod whose token is given up without releasing anything (its process died) is taken
  over by the other after the grace, not when its leases expire: every partition, the
  at-most-once row it had in flight (DEAD), its long-lane claims;
* a pod whose token is taken while it lives (PostgreSQL: its session terminated) starts
  no send and claims nothing until it holds its token again, then goes on with the
  partitions nobody took.
"""

from __future__ import annotations

import asyncio

import pytest

from jobledger.core.clock import FakeClock
from jobledger.domain.jobs import DeliveryMode, JobStatus
from jobledger.domain.policies import DEATH_GRACE_S
from jobledger.reactors.runtime import Runtime
from jobledger.storage.port import Store
from tests.contract.conftest import Kit
from tests.contract.lanes_kit import Recorder, enqueue, keys_in, make_engine, pod, settle, until
from tests.stores import all_jobs


def tokens_or_skip(store: Store) -> None:
    if store.coordination.liveness("probe") is None:
        pytest.skip(f"the {store.name} store has no liveness tokens (leases alone)")


async def test_a_dead_pod_is_taken_over_after_the_grace_not_its_leases(
    store: Store, kit: Kit, clock: FakeClock
) -> None:
    tokens_or_skip(store)
    engine = make_engine(store, clock)
    sent = Recorder()
    engine.targets.register("kafka:t", "fast", sent, delivery_mode=DeliveryMode.AT_MOST_ONCE)
    engine.targets.register("long:t", "long", sent, delivery_mode=DeliveryMode.AT_LEAST_ONCE)
    engine.targets.register("long:amo", "long", sent, delivery_mode=DeliveryMode.AT_MOST_ONCE)
    a = pod(engine, "pod-a")
    await a.leases.start()
    assert len(a.leases.owned) == store.partitions
    [key] = keys_in(3, 1, partitions=store.partitions)
    await enqueue(engine, "kafka:t", [{"payload": {"n": n}, "key": key} for n in (1, 2)])
    await enqueue(engine, "long:t", [{"payload": {"n": 1}}])
    await enqueue(engine, "long:amo", [{"payload": {"n": 2}}])
    claimed = await a.long.reserve()
    assert {j.target for j in claimed} == {"long:t", "long:amo"}
    sent.gate = asyncio.Event()  # the first row's send never returns: pod-a dies mid-send
    step = asyncio.create_task(a.fast.step(3))
    await sent.entered.wait()
    async with kit.peer(store) as peer:
        b_engine = make_engine(peer, clock)
        for name, lane, mode in (
            ("kafka:t", "fast", DeliveryMode.AT_MOST_ONCE),
            ("long:t", "long", DeliveryMode.AT_LEAST_ONCE),
            ("long:amo", "long", DeliveryMode.AT_MOST_ONCE),
        ):
            b_engine.targets.register(name, lane, Recorder(), delivery_mode=mode)
        b = pod(b_engine, "pod-b")
        await b.leases.start()
        assert b.leases.owned == {}  # pod-a holds every live lease
        assert b.leases.watched == {"pod-a"}  # its beat saw pod-a's token advertised
        watch = asyncio.create_task(b.leases.run())
        try:
            step.cancel()
            assert a.leases.liveness is not None
            await a.leases.liveness.release()  # the process is gone; its leases are not
            for _ in range(50):  # the grace runs on the fake clock
                if b.leases.takeovers:
                    break
                clock.advance(seconds=0.1)
                await asyncio.sleep(0.02)
            assert b.leases.takeovers, "pod-b never took pod-a over"
            takeover = b.leases.takeovers[0]
            assert takeover.pods == ("pod-a",)
            assert len(takeover.partitions) == store.partitions
            assert takeover.claims == 2
            waited = (takeover.taken_at - takeover.found_at).total_seconds()
            assert DEATH_GRACE_S <= waited < 30  # the grace, not the 30 s lease
            rows = {j.id: j for j in await all_jobs(store)}
            dead = [j for j in rows.values() if j.status == JobStatus.DEAD]
            assert sorted((j.target, j.dead_reason) for j in dead) == [
                ("kafka:t", "in flight when its partition was taken over"),
                ("long:amo", "its pod died while running; the run may have finished"),
            ]
            requeued = [j for j in rows.values() if j.target == "long:t"]
            assert [(j.status, j.claimed_by) for j in requeued] == [(JobStatus.PENDING, None)]
            assert set(b.leases.owned) == set(range(store.partitions))
        finally:
            b.leases.stop()
            await watch
            await b.leases.release_all()
    await settle()


async def test_a_pod_that_loses_its_token_sends_nothing_until_it_holds_it_again(
    store: Store, clock: FakeClock
) -> None:
    if store.name != "postgres":
        pytest.skip("only a PostgreSQL session can end while its pod lives")
    import psycopg

    engine = make_engine(store, clock)
    sent = Recorder()
    engine.targets.register("kafka:t", "fast", sent, delivery_mode=DeliveryMode.AT_LEAST_ONCE)
    engine.targets.register("long:t", "long", sent, delivery_mode=DeliveryMode.AT_LEAST_ONCE)
    a: Runtime = pod(engine, "pod-a")
    await a.leases.start()
    token = a.leases.liveness
    assert token is not None and token.held
    [key] = keys_in(5, 1, partitions=store.partitions)
    await enqueue(engine, "kafka:t", [{"payload": {"n": 1}, "key": key}])
    await enqueue(engine, "long:t", [{"payload": {"n": 2}}])
    async with await psycopg.AsyncConnection.connect(store.dsn, autocommit=True) as admin:
        key_of = token.key
        cur = await admin.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND classid = %s::bigint::oid AND objid = %s::bigint::oid AND objsubid = 1",
            (key_of >> 32, key_of & 0xFFFFFFFF),
        )
        [(session,)] = await cur.fetchall()
        await admin.execute("SELECT pg_terminate_backend(%s, 5000)", (session,))
    await until(lambda: not token.held)
    assert await a.fast.step(5) is None, "a suspended partition must not send"
    assert await a.long.reserve() == [], "a pod without its token must not claim"
    assert sent.calls == []
    clock.advance(seconds=1)
    await a.leases.tick()  # takes the token back, renews: nobody took anything
    assert token.held
    assert len(a.leases.owned) == store.partitions
    assert await a.fast.step(5) == 1
    assert [j.payload for j in await a.long.reserve()] == [{"n": 2}]
    assert sent.payloads == [{"n": 1}]
    await a.leases.release_all()


async def test_a_pod_that_left_cleanly_has_its_released_partitions_taken_at_once(
    store: Store, kit: Kit, clock: FakeClock
) -> None:
    """A clean stop releases the partitions, then gives the token up: the pod watching it
    finds the token free and beats after the grace, taking the partitions then instead
    of at its next heartbeat (10 s; the fake clock never gets there here)."""
    tokens_or_skip(store)
    a = pod(make_engine(store, clock), "pod-a")
    await a.leases.start()
    async with kit.peer(store) as peer:
        b = pod(make_engine(peer, clock), "pod-b")
        await b.leases.start()
        assert b.leases.owned == {} and b.leases.watched == {"pod-a"}
        beats = asyncio.create_task(b.leases.run())
        try:
            await a.leases.release_all()  # the end of a clean stop
            for _ in range(20):  # the grace runs on the fake clock: 2 s at most
                if len(b.leases.owned) == store.partitions:
                    break
                clock.advance(seconds=0.1)
                await asyncio.sleep(0.02)
            assert set(b.leases.owned) == set(range(store.partitions))
        finally:
            b.leases.stop()
            await beats
            await b.leases.release_all()
    await settle()
