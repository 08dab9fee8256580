"""pause_after_failures against real servers: a schedule whose last N runs in a row ended
dead-lettered pauses itself (pause note, event, metric); a completed run and a resume start the
count again; a re-sent end is counted once; a schedule without the field never pauses."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

import rsched
from rsched._core.keys import Keys
from rsched._core.metrics import METRICS
from rsched._core.schedule import Schedule
from rsched._core.settings import Settings
from rsched._scheduler.scheduler import Scheduler
from rsched._store.alerts import EventLog
from rsched._store.queues import QueueStore
from tests.support.waiting import eventually
from tests.support.worker_app import fast_settings
from tests.support.workers import running

SPEC: dict[str, Any] = {"every": 0.2, "max_retries": 0}


@asynccontextmanager
async def scheduled(
    redis: Redis, settings: Settings, handler: Callable[[rsched.Job], Any], **spec: Any
) -> AsyncIterator[rsched.Client]:
    """Schedule s1 (task t) firing at once, a scheduler and a worker running ``handler``."""
    client = rsched.Client(redis, settings)
    await client.add(Schedule(id="s1", task="t", **{**SPEC, **spec}))
    worker = rsched.Worker(settings=fast_settings(settings))
    worker.task("t")(handler)
    scheduler = Scheduler(redis, settings)
    async with anyio.create_task_group() as tg, running(worker, redis):
        await tg.start(scheduler.run)
        try:
            yield client
        finally:
            scheduler.stop()


async def paused(client: rsched.Client) -> rsched.Schedule | None:
    s = await client.get("s1")
    return s if s.paused else None


async def events_of(redis: Redis, settings: Settings, kind: str) -> list[Any]:
    found = await EventLog(redis, Keys(settings.prefix)).read(limit=1000)
    return [e for e in found if e.kind == kind]


@pytest.mark.cluster
async def test_n_failed_runs_in_a_row_pause_the_schedule(redis: Redis, settings: Settings) -> None:
    runs: list[str] = []

    async def fail(job: rsched.Job) -> None:
        runs.append(job.execution_id)
        raise ValueError(f"boom {len(runs)}")

    was_on, METRICS.on = METRICS.on, True
    before = METRICS.auto_paused._value.get()
    try:
        async with scheduled(redis, settings, fail, pause_after_failures=3) as client:
            s = await eventually(lambda: paused(client))
            await anyio.sleep(0.5)  # a few intervals: nothing more fires
            assert len(runs) == 3
    finally:
        gained = METRICS.auto_paused._value.get() - before
        METRICS.on = was_on
    assert gained == 1
    assert s.consecutive_failures == 3
    assert s.pause_note == (
        "paused after 3 failed runs in a row (pause_after_failures=3); "
        "last error: ValueError: boom 3"
    )
    [event] = await events_of(redis, settings, "schedule_paused")
    assert event.schedule_id == "s1"
    assert event.fields["failures"] == "3"
    assert event.fields["error"] == "ValueError: boom 3"


async def test_a_completed_run_starts_the_count_again(redis: Redis, settings: Settings) -> None:
    runs: list[int] = []

    async def third_completes(job: rsched.Job) -> None:
        runs.append(job.attempt)
        if len(runs) != 3:
            raise ValueError("boom")

    async with scheduled(redis, settings, third_completes, pause_after_failures=3) as client:
        s = await eventually(lambda: paused(client))
        # Failed, failed, completed: three more failures were needed.
        assert len(runs) == 6
    assert s.consecutive_failures == 3


async def test_resume_starts_the_count_again(redis: Redis, settings: Settings) -> None:
    runs: list[str] = []

    async def fail(job: rsched.Job) -> None:
        runs.append(job.execution_id)
        raise ValueError("boom")

    async with scheduled(redis, settings, fail, pause_after_failures=2) as client:
        await eventually(lambda: paused(client))
        await client.resume("s1")
        s = await client.get("s1")
        assert (s.paused, s.consecutive_failures, s.pause_note) == (False, 0, None)
        await eventually(lambda: len(runs) >= 3)
        s = await eventually(lambda: paused(client))
        assert len(runs) == 4
    assert len(await events_of(redis, settings, "schedule_paused")) == 2


async def test_a_schedule_without_the_field_never_pauses(redis: Redis, settings: Settings) -> None:
    runs: list[str] = []

    async def fail(job: rsched.Job) -> None:
        runs.append(job.execution_id)
        raise ValueError("boom")

    async with scheduled(redis, settings, fail) as client:
        await eventually(lambda: len(runs) >= 4)
        s = await client.get("s1")
    assert not s.paused
    assert s.consecutive_failures == 0
    fields = await redis.hgetall(Keys(settings.prefix).schedule("s1"))
    assert "consecutive_failures" not in fields


async def fired_job(
    redis: Redis, settings: Settings, **spec: Any
) -> tuple[QueueStore, str, dict[str, str]]:
    """Schedule s1 added and one of its jobs read by consumer c1: (store, entry id, fields)."""
    client = rsched.Client(redis, settings)
    await client.add(Schedule(id="s1", task="t", every=60, **spec))
    store = QueueStore(redis, Keys(settings.prefix))
    await store.create_groups(["default"])
    await client.trigger("s1")
    [(_, [(entry_id, fields)])] = await store.read([("default", "normal")], "c1", 1, 100)
    return store, entry_id, fields


async def count(redis: Redis, settings: Settings) -> str | None:
    value = await redis.hget(Keys(settings.prefix).schedule("s1"), "consecutive_failures")
    return None if value is None else str(value)


async def test_a_re_sent_dead_end_counts_once(redis: Redis, settings: Settings) -> None:
    store, entry_id, fields = await fired_job(redis, settings, pause_after_failures=5)
    for _ in range(2):
        await store.dead("default", entry_id, raw=fields, reason="max_retries", error_type="E")
    assert await count(redis, settings) == "1"


async def test_a_re_sent_finish_counts_once(redis: Redis, settings: Settings) -> None:
    # The schedule's side of a run that ended in another partition's stream (lua/finish.lua).
    store, _, fields = await fired_job(redis, settings, pause_after_failures=1)
    for _ in range(2):
        await store.finish(
            "default", "normal", "s1", execution_id=fields["execution_id"], attempt=1,
            event="dead", extra="", over=True, counted=True, error="E: bad",
        )  # fmt: skip
    assert await count(redis, settings) == "1"
    s = await rsched.Client(redis, settings).get("s1")
    assert s.paused
    assert s.pause_note == (
        "paused after 1 failed run (pause_after_failures=1); last error: E: bad"
    )
    assert len(await events_of(redis, settings, "schedule_paused")) == 1
    # A completed run clears the count.
    await store.finish(
        "default", "normal", "s1", execution_id="s1@1", attempt=1, event="completed",
        extra="", over=True, counted=True,
    )  # fmt: skip
    assert await count(redis, settings) is None


@pytest.fixture
async def two_partitions(settings: Settings, redis: Redis, prefix: str) -> AsyncIterator[Settings]:
    yield settings.model_copy(update={"partitions": 2})
    # Partition keys carry {prefix:k...}: the redis fixture deletes only {prefix}:*.
    found = [k async for k in redis.scan_iter(match=f"{{{prefix}:*", count=1000)]
    if found:
        await redis.delete(*found)


async def test_a_schedule_in_another_partition_than_its_limited_jobs_counts_and_expires(
    redis: Redis, two_partitions: Settings
) -> None:
    """A schedule's job holding limits runs from partition 0's stream; its schedule's side, the
    count included and an expiry, is recorded in the schedule's partition (lua/finish.lua)."""
    from rsched._core.partitions import partition_of

    settings = two_partitions
    sid = next(f"p{i}" for i in range(100) if partition_of(f"p{i}", 2) == 1)
    late = next(f"q{i}" for i in range(100) if partition_of(f"q{i}", 2) == 1)
    ran: list[str] = []
    worker = rsched.Worker(settings=fast_settings(settings))

    @worker.task("t", limits=[rsched.Limit("k", concurrency=1)])
    async def fail(job: rsched.Job) -> None:
        ran.append(job.execution_id)
        raise ValueError("boom")

    async with rsched.Client.from_settings(settings) as client:
        spec = {"task": "t", "every": 3600, "max_retries": 0, "overlap": "allow"}
        await client.add(Schedule(id=sid, pause_after_failures=2, **spec))
        await client.add(Schedule(id=late, start_deadline="50ms", **spec))
        expired = (await client.trigger(late)).execution_id
        until = await client.server_time() + timedelta(milliseconds=100)

        async def passed() -> bool:  # its deadline, before any worker runs
            return await client.server_time() > until

        await eventually(passed)
        for _ in range(2):
            await client.trigger(sid)
        async with running(worker, None):
            s = await eventually(lambda: paused_id(client, sid))
            job = await eventually(lambda: ended(client, expired))
    assert expired not in ran
    assert job.state == "expired"
    assert s.consecutive_failures == 2
    assert s.pause_note == (
        "paused after 2 failed runs in a row (pause_after_failures=2); last error: ValueError: boom"
    )


async def paused_id(client: rsched.Client, sid: str) -> rsched.Schedule | None:
    s = await client.get(sid)
    return s if s.paused else None


async def ended(client: rsched.Client, execution_id: str) -> Any:
    found = await client.job(execution_id)
    return found if found is not None and found.state == "expired" else None
