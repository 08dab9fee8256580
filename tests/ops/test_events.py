"""The events stream (``rsched events``), the health watch's memory across leaders, and the alert
webhook (signed POSTs to a local receiver on 127.0.0.1, retried, dropped when its queue is full)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import anyio
import orjson
import pytest
from pydantic import SecretStr
from redis.asyncio import Redis

import rsched
from rsched._core.keys import Keys
from rsched._core.settings import HealthSettings, Settings
from rsched._ops.webhook import WebhookSender
from rsched._scheduler.health_watch import HealthWatch
from rsched._store.alerts import EventLog
from tests.support.command import cli
from tests.support.waiting import eventually
from tests.support.webhook_receiver import Receiver, receiving, verify


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    yield from receiving()


async def test_webhook_signs_retries_and_drops(receiver: Receiver) -> None:
    cfg = HealthSettings(webhook_queue_size=2, webhook_attempts=3, webhook_timeout_s=2)
    sender = WebhookSender(receiver.url, "s3cret", cfg)
    receiver.answers = [500]  # the first POST fails: retried after a backoff
    assert sender.offer({"kind": "schedule_late", "schedule_id": "a"})
    assert sender.offer({"kind": "dead_letter"})
    assert not sender.offer({"kind": "leader_changed"})  # full: dropped, counted
    assert sender.dropped == 1
    async with anyio.create_task_group() as tg:
        await tg.start(sender.run)
        await eventually(lambda: _true(len(receiver.posts) == 2))
        # The receiver has the second POST before the sender has read its answer.
        await eventually(lambda: _true(sender.sent == 2))
        tg.cancel_scope.cancel()
    assert sender.failed == 0
    (headers, body), _ = receiver.posts
    assert orjson.loads(body) == {"kind": "schedule_late", "schedule_id": "a"}
    assert headers["Content-Type"] == "application/json"
    assert verify("s3cret", headers, body)
    assert not verify("other", headers, body)


async def test_webhook_gives_up_after_its_attempts(receiver: Receiver) -> None:
    cfg = HealthSettings(webhook_attempts=2)
    sender = WebhookSender(receiver.url, None, cfg)
    receiver.answers = [503, 503]
    assert not await sender.deliver({"kind": "x"})
    assert sender.failed == 1
    assert not receiver.posts
    unreachable = WebhookSender(
        "http://127.0.0.1:9/nothing", None, HealthSettings(webhook_attempts=1)
    )
    assert not await unreachable.deliver({"kind": "x"})


async def test_the_watch_announces_once_across_leaders(
    settings: Settings, redis: Redis, receiver: Receiver
) -> None:
    """A new leader reads what the last one announced: no second schedule_late."""
    hooked = settings.model_copy(
        update={"alert_webhook_url": receiver.url, "alert_webhook_secret": SecretStr("k")}
    )
    async with rsched.Client.from_settings(settings) as client:
        await client.add({"id": "lost", "task": "t", "every": 1, "misfire_grace_s": 0})
        await eventually(lambda: _state(client, "lost", "late"))
        first = HealthWatch(redis, hooked, lambda: True)
        async with anyio.create_task_group() as tg:
            await tg.start(first.webhook.run)  # type: ignore[union-attr]
            first.on_lead("7:host-a:1:abc")
            await first._announce_lead(await first._lead_inbox.receive())
            await first.check()
            await first.check()
            await eventually(lambda: _true(len(receiver.posts) == 2))
            tg.cancel_scope.cancel()
        second = HealthWatch(redis, settings, lambda: True)
        await second.check()
        kinds = [e.kind for e in await client.events(limit=100)]
        assert kinds == ["leader_changed", "schedule_late"]
        assert await redis.hgetall(Keys(settings.prefix).health) == {"lost": "late"}
        posted = [orjson.loads(body)["kind"] for _, body in receiver.posts]
        assert posted == ["leader_changed", "schedule_late"]
        assert all(verify("k", headers, body) for headers, body in receiver.posts)

        await client.remove("lost")
        await second.check()
        last = (await client.events(limit=1))[0]
        assert (last.kind, last.schedule_id, last.fields) == (
            "schedule_recovered",
            "lost",
            {"was": "late", "state": "removed"},
        )
        assert await redis.hgetall(Keys(settings.prefix).health) == {}


async def test_events_stream_is_capped(settings: Settings, redis: Redis) -> None:
    log = EventLog(redis, Keys(settings.prefix), max_len=10)
    for i in range(300):
        await log.publish("dead_letter", n=i)
    assert await redis.xlen(Keys(settings.prefix).events) < 300
    newest = await log.read(limit=3)
    assert [e.fields["n"] for e in newest] == ["297", "298", "299"]


async def test_rsched_events_and_follow(settings: Settings, redis: Redis) -> None:
    log = EventLog(redis, Keys(settings.prefix))
    code, out, _ = await cli(settings, "events")
    assert code == 0
    assert out.strip() == "no events"
    await log.publish("schedule_late", schedule_id="a", reason="due 5s ago and not fired")
    code, out, _ = await cli(settings, "events")
    assert "schedule_late a reason='due 5s ago and not fired'" in out
    code, out, _ = await cli(settings, "events", "--json")
    (event,) = orjson.loads(out)
    assert event["kind"] == "schedule_late"
    assert event["schedule_id"] == "a"

    env = {**os.environ, "RSCHED_REDIS_URL": settings.url, "RSCHED_PREFIX": settings.prefix}
    with subprocess.Popen(  # noqa: ASYNC220 (a child that outlives one call: read line by line)
        [sys.executable, "-m", "rsched._cli.main", "events", "--follow", "--json"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        first = await anyio.to_thread.run_sync(proc.stdout.readline)
        assert orjson.loads(first)["kind"] == "schedule_late"
        await log.publish("leader_changed", owner="h:1:x", token=3)
        following = await anyio.to_thread.run_sync(proc.stdout.readline)
        assert orjson.loads(following)["kind"] == "leader_changed"
        proc.terminate()


async def _true(value: bool) -> bool:
    return value


async def _state(client: rsched.Client, sid: str, state: str) -> bool:
    return (await client.schedule_health(sid)).state == state


async def test_a_long_wait_ends_before_the_socket_timeout(settings: Settings, redis: Redis) -> None:
    short = settings.model_copy(update={"socket_timeout_s": 1.0})
    async with rsched.Client.from_settings(short) as client:
        started = anyio.current_time()
        assert await client.events(after="0-0", wait_s=30) == []
        assert anyio.current_time() - started < 5
