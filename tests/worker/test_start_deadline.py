"""Start deadlines against real servers: a job not started within its deadline of its scheduled
time ends expired unrun (history, runs log, metric), releases its schedule's run and its limit
holds; a job within its deadline, a retry and a requeued dead letter run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

import rsched
from rsched._core.keys import Keys
from rsched._core.metrics import METRICS
from rsched._core.settings import Settings
from rsched._store.queues import QueueStore
from tests.support.limits import limits_empty
from tests.support.schedulers import events, scheduling
from tests.support.waiting import eventually
from tests.support.worker_app import fast_settings
from tests.support.workers import running, settled, store_for


async def past(store: QueueStore, ms: int) -> None:
    """Wait until Redis time is ``ms`` later than now."""
    until = await store.time_ms() + ms

    async def passed() -> bool:
        return await store.time_ms() > until

    await eventually(passed)


@asynccontextmanager
async def counting_expired(task: str) -> AsyncIterator[list[float]]:
    """The worker's count of ``task``'s expired runs gained while the block ran: [gained]."""
    was_on, METRICS.on = METRICS.on, True
    before = METRICS.jobs.values.get((task, "expired"), 0)
    gained = [0.0]
    try:
        yield gained
    finally:
        gained[0] = METRICS.jobs.values.get((task, "expired"), 0) - before
        METRICS.on = was_on


async def runs_of(settings: Settings, redis: Redis, status: str) -> list[rsched.RunRecord]:
    return list((await rsched.Client(redis, settings).runs(status=status)).items)


async def test_a_job_not_started_within_its_deadline_expires_unrun(
    redis: Redis, settings: Settings
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    ran: list[str] = []

    @worker.task("late.t")
    async def handler(job: rsched.Job) -> None:
        ran.append(job.execution_id)

    store = store_for(redis, settings)
    done = await store.enqueue("late.t", {}, start_deadline="200ms")
    await past(store, 300)  # no worker reads it meanwhile
    async with counting_expired("late.t") as gained, running(worker, redis):
        await eventually(lambda: settled(redis, settings))
        [run] = await eventually(lambda: runs_of(settings, redis, "expired"))
    assert ran == []
    assert gained == [1]
    assert run.execution_id == done.execution_id
    assert run.error
    assert "not started within 200ms of its scheduled time" in run.error
    found = await rsched.Client(redis, settings).job(done.execution_id)
    assert found is not None
    assert found.state == "expired"


async def test_a_job_within_its_deadline_runs(redis: Redis, settings: Settings) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    ran: list[float | None] = []

    @worker.task("soon.t")
    async def handler(job: rsched.Job) -> None:
        ran.append(job.options.start_deadline)

    store = store_for(redis, settings)
    await store.enqueue("soon.t", {}, start_deadline="1m")
    async with running(worker, redis):
        await eventually(lambda: ran)
        await eventually(lambda: settled(redis, settings))
    assert ran == [60.0]
    assert await runs_of(settings, redis, "expired") == []


async def test_the_deadline_applies_to_the_first_start_only(
    redis: Redis, settings: Settings
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    attempts: list[int] = []

    @worker.task("retry.t")
    async def handler(job: rsched.Job) -> None:
        attempts.append(job.attempt)
        if job.attempt == 1:
            raise ValueError("first")

    store = store_for(redis, settings)
    # The retry starts a second after the occurrence, well past its 300ms deadline.
    await store.enqueue(
        "retry.t", {}, start_deadline="300ms", max_retries=1, retry_base_s=1, retry_jitter=0
    )
    async with running(worker, redis):
        await eventually(lambda: attempts == [1, 2])
        await eventually(lambda: settled(redis, settings))
    assert await runs_of(settings, redis, "expired") == []


async def test_a_requeued_dead_letter_runs_past_its_deadline(
    redis: Redis, settings: Settings
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    ran: list[int] = []

    @worker.task("requeue.t")
    async def handler(job: rsched.Job) -> None:
        ran.append(job.attempt)
        if len(ran) == 1:
            raise ValueError("dead at once")

    store = store_for(redis, settings)
    await store.enqueue("requeue.t", {}, start_deadline="200ms", max_retries=0)
    async with running(worker, redis):
        await eventually(lambda: ran == [1])
        await eventually(lambda: settled(redis, settings))
        await past(store, 300)
        assert await store.requeue("default") == 1
        await eventually(lambda: ran == [1, 1])
    assert await runs_of(settings, redis, "expired") == []


@pytest.mark.cluster
async def test_an_expired_occurrence_ends_its_run_and_the_next_one_runs(
    redis: Redis, settings: Settings
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    ran: list[str] = []

    @worker.task("dl.t")
    async def handler(job: rsched.Job) -> None:
        ran.append(job.execution_id)

    spec = {"every": 0.5, "start_deadline": "200ms"}
    async with scheduling(redis, settings, task="dl.t", **spec) as store:

        async def skipped() -> bool:  # the first run's marker holds the next occurrences back
            return "skipped" in [e["event"] for e in await events(store)]

        await eventually(skipped)
        async with counting_expired("dl.t") as gained, running(worker, redis):
            await eventually(lambda: ran)
        history = await events(store)
    [expired] = [e for e in history if e["event"] == "expired"]
    first = next(e for e in history if e["event"] == "fired")
    assert expired["execution_id"] == first["execution_id"]
    assert first["execution_id"] not in ran
    assert gained == [1]
    # The run that started came after the expired one, which no longer held the marker.
    assert ran[0] > first["execution_id"]
    [run] = await runs_of(settings, redis, "expired")
    assert run.schedule_id == "s1"
    found = await rsched.Client(redis, settings).job(first["execution_id"])
    assert found is not None
    assert found.state == "expired"


async def test_an_expired_job_releases_the_limit_holds_it_was_granted(
    redis: Redis, settings: Settings
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings, concurrency=4))
    ran: list[str] = []
    gate = anyio.Event()

    @worker.task("lim.t", limits=[rsched.Limit("k", concurrency=1)])
    async def handler(job: rsched.Job) -> None:
        ran.append(job.payload["n"])
        if job.payload["n"] == "first":
            await gate.wait()

    store = store_for(redis, settings)
    async with running(worker, redis):
        await store.enqueue("lim.t", {"n": "first"})
        await eventually(lambda: ran == ["first"])
        # Waits aside on the key past its deadline; granted the key when the first ends, it
        # is read again holding it, and expires.
        await store.enqueue("lim.t", {"n": "late"}, start_deadline="200ms")
        await past(store, 300)
        gate.set()
        await eventually(lambda: runs_of(settings, redis, "expired"))
        await eventually(lambda: limits_empty(redis, settings))
        await eventually(lambda: settled(redis, settings))
    assert ran == ["first"]


async def test_a_job_expired_before_it_was_read_takes_no_hold_nor_rate_start(
    redis: Redis, settings: Settings
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    ran: list[str] = []

    @worker.task("lim.t")
    async def handler(job: rsched.Job) -> None:
        ran.append(job.execution_id)

    store = store_for(redis, settings)
    await store.enqueue(
        "lim.t", {"c": "acme"}, start_deadline="200ms",
        limits=[rsched.Limit("customer:{c}", concurrency=1, rate="10/s")],
    )  # fmt: skip
    await past(store, 300)
    async with running(worker, redis):
        await eventually(lambda: runs_of(settings, redis, "expired"))
        await eventually(lambda: limits_empty(redis, settings))
        await eventually(lambda: settled(redis, settings))
    assert ran == []
    assert not await redis.zcard(Keys(settings.prefix).limits[2])  # no start in the window


@pytest.mark.parametrize("bad", [-1, 0, "0s", "1000d", "soon", True])
async def test_a_bad_start_deadline_is_refused_naming_it(
    redis: Redis, settings: Settings, bad: object
) -> None:
    client = rsched.Client(redis, settings)
    with pytest.raises(rsched.InvalidJob, match="start_deadline"):
        await client.enqueue("t", start_deadline=bad)  # type: ignore[arg-type]
    with pytest.raises(rsched.InvalidSchedule, match="start_deadline"):
        await client.add(rsched.Schedule(id="s", task="t", every=60, start_deadline=bad))
    assert await redis.xlen(Keys(settings.prefix).queue("default")) == 0


async def test_a_busy_worker_expires_what_waited_and_asks_only_about_near_deadlines(
    redis: Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[list[str]] = []
    expire = QueueStore.expire

    async def counting(self: QueueStore, queue: str, items: Any, *args: Any) -> Any:
        asked.append([item.execution_id for item in items])
        return await expire(self, queue, items, *args)

    monkeypatch.setattr(QueueStore, "expire", counting)
    worker = rsched.Worker(settings=fast_settings(settings, concurrency=1))
    ran: list[str] = []
    gate = anyio.Event()

    @worker.task("busy.t")
    async def handler(job: rsched.Job) -> None:
        ran.append(job.execution_id)
        if job.payload.get("block"):
            await gate.wait()

    store = store_for(redis, settings)
    async with running(worker, redis):
        first = await store.enqueue("busy.t", {}, start_deadline="1h")
        await eventually(lambda: ran == [first.execution_id])  # asked once: the clock is read
        assert asked == [[first.execution_id]]
        await store.enqueue("busy.t", {"block": True})
        await eventually(lambda: len(ran) == 2)  # the only slot is taken
        late = await store.enqueue("busy.t", {}, start_deadline="200ms")
        far = await store.enqueue("busy.t", {}, start_deadline="1h")
        await past(store, 300)
        gate.set()
        await eventually(lambda: far.execution_id in ran)
        await eventually(lambda: settled(redis, settings))
    assert late.execution_id not in ran
    # The job far from its deadline by the clock the first call read was not asked about.
    assert asked[1:] == [[late.execution_id]]
