"""Pub/sub listeners (rsched._redis.connection.messages) on RESP2 and RESP3, against real
servers: the keepalive PING answered in either shape, a server that stopped answering, a message
between pings, redis-py subscribing again by itself, and a quiet scheduler and worker."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

import rsched
from rsched._core.settings import SchedulerSettings, Settings
from rsched._redis import connection as _connection
from rsched._redis.connection import connect, messages
from tests.support.servers import Server
from tests.support.waiting import WAIT_S, eventually
from tests.support.worker_app import fast_settings


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def protocol(request: pytest.FixtureRequest) -> int:
    """The protocol redis-py speaks (RESP3 is redis-py 8's default, RESP2 5.3's)."""
    return int(request.param)


def speaking(url: str, protocol: int) -> str:
    return f"{url}?protocol={protocol}"


@pytest.fixture
def pings(monkeypatch: pytest.MonkeyPatch) -> Counter[int]:
    """PINGs sent on pub/sub connections, by connection (the id of its PubSub); the reads
    between them shortened so that a test sees many."""
    monkeypatch.setattr(_connection, "LISTEN_POLL_S", 0.1)
    sent: Counter[int] = Counter()
    ping = PubSub.ping

    def counting(self: PubSub, message: Any = None) -> Any:
        sent[id(self)] += 1
        return ping(self, message)

    monkeypatch.setattr(PubSub, "ping", counting)
    return sent


async def test_a_quiet_subscription_stays_up_across_pings(
    redis_url: str, protocol: int, pings: Counter[int]
) -> None:
    redis = connect(Settings(redis_url=speaking(redis_url, protocol), socket_timeout_s=1))
    got: list[str] = []
    try:
        async with redis.pubsub(ignore_subscribe_messages=True) as pubsub:
            await pubsub.subscribe("chan")

            async def listen() -> None:  # a PING without an answer within 1 s raises here
                async for message in messages(pubsub, ping_after_s=0.2):
                    got.append(message["data"])

            async with anyio.create_task_group() as tg:
                tg.start_soon(listen)
                await eventually(lambda: pings[id(pubsub)] >= 3)
                await redis.publish("chan", "between pings")
                await eventually(lambda: got == ["between pings"])
                await eventually(lambda: pings[id(pubsub)] >= 6)
                tg.cancel_scope.cancel()
    finally:
        await redis.aclose()


async def test_a_pubsub_listener_notices_a_server_that_stopped_answering(
    make_server: Callable[..., Server], protocol: int
) -> None:
    srv = make_server()
    redis = connect(Settings(redis_url=speaking(srv.url, protocol), socket_timeout_s=1))
    try:
        async with redis.pubsub(ignore_subscribe_messages=True) as pubsub:
            await pubsub.subscribe("chan")
            got = messages(pubsub, ping_after_s=0.5)
            await redis.publish("chan", "hello")
            with anyio.fail_after(WAIT_S):
                assert (await anext(got))["data"] == "hello"
            await anyio.sleep(1.5)  # silent, but the PING is answered: still listening
            await redis.publish("chan", "again")
            with anyio.fail_after(WAIT_S):
                assert (await anext(got))["data"] == "again"
            srv.pause()
            try:
                started = time.monotonic()
                with anyio.fail_after(WAIT_S), pytest.raises(RedisTimeoutError):
                    await anext(got)
                assert time.monotonic() - started < 5
            finally:
                srv.resume()
    finally:
        await redis.aclose()


async def test_a_dropped_subscription_is_never_silent(
    make_server: Callable[..., Server], protocol: int
) -> None:
    srv = make_server()
    redis = connect(Settings(redis_url=speaking(srv.url, protocol), socket_timeout_s=1))
    try:
        async with redis.pubsub(ignore_subscribe_messages=True) as pubsub:
            await pubsub.subscribe("chan")
            got = messages(pubsub)
            await redis.publish("chan", "first")
            with anyio.fail_after(WAIT_S):
                assert (await anext(got))["data"] == "first"
            await redis.execute_command("CLIENT", "KILL", "TYPE", "pubsub")  # type: ignore[no-untyped-call]
            try:
                with anyio.fail_after(WAIT_S):
                    again = await anext(got)
            except RedisConnectionError:
                return  # redis-py before 8 leaves the reconnect to the listener: told as well
            # redis-py 8 connected and subscribed again by itself.
            assert (again["type"], again["channel"]) == ("subscribe", "chan")
            await redis.publish("chan", "after")
            with anyio.fail_after(WAIT_S):
                assert (await anext(got))["data"] == "after"
    finally:
        await redis.aclose()


async def test_a_quiet_scheduler_and_worker_keep_their_subscriptions(
    redis: Redis,
    redis_url: str,
    prefix: str,
    protocol: int,
    pings: Counter[int],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(_connection, "PUBSUB_PING_S", 0.2)
    caplog.set_level(logging.INFO, logger="rsched")
    settings = fast_settings(
        Settings(
            redis_url=speaking(redis_url, protocol),
            prefix=prefix,
            socket_timeout_s=2,
            scheduler=SchedulerSettings(lease_ttl_ms=1000, lease_renew_ms=200, max_idle_ms=500),
        )
    )
    worker = rsched.Worker(settings=settings)
    events: list[str] = []

    @worker.task("t.block")
    async def block(job: rsched.Job) -> None:
        events.append("start")
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            events.append("cancelled")
            raise

    scheduler_redis = connect(settings)
    scheduler = rsched.Scheduler(scheduler_redis, settings)
    client = rsched.Client(redis, settings)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(scheduler.run)
            await tg.start(worker.run)
            # The wake listener and the cancel listener, several PINGs each.
            await eventually(lambda: sum(n >= 5 for n in pings.values()) >= 2)
            await client.enqueue("t.block", execution_id="long")
            await eventually(lambda: events == ["start"])
            assert await client.cancel("long") == "running"  # heard after all those PINGs
            await eventually(lambda: events == ["start", "cancelled"])
            worker.stop()
            scheduler.stop()
    finally:
        await scheduler_redis.aclose()
    warnings = [
        (r.name, r.getMessage(), getattr(r, "rsched_fields", {}))
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.getMessage() != "server.unsafe"
    ]
    assert warnings == []
