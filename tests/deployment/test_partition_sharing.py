"""Schedulers sharing a deployment's partitions (one lease each, rendezvous owners) and workers
reading every partition, against real servers: in process, and as processes killed, paused and
stopped."""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

import rsched
from rsched import Schedule, Scheduler
from rsched._core.keys import GROUP, Keys
from rsched._core.partitions import partition_of
from rsched._core.settings import SchedulerSettings, Settings
from rsched._redis.connection import connect
from rsched._scheduler.membership import owned, owner_of
from rsched._store.queues import QueueStore
from rsched._store.schedules import ScheduleStore
from tests.support.partitions import N, fired, lease_owners, led_by, once_each, shared_by
from tests.support.processes import Proc
from tests.support.waiting import eventually
from tests.support.worker_app import fast_settings
from tests.support.workers import running as working

TTL_MS, RENEW_MS = 1000, 200

Spawn = Callable[..., Proc]


def noting_worker(settings: Settings) -> tuple[rsched.Worker, list[rsched.Job]]:
    """A worker whose task t.work notes each job it runs, and that list."""
    seen: list[rsched.Job] = []
    worker = rsched.Worker(settings=settings)

    @worker.task("t.work")
    async def work(job: rsched.Job) -> None:
        seen.append(job)

    return worker, seen


@pytest.fixture
def parted(redis_url: str, prefix: str) -> Settings:
    """A deployment of 16 partitions with a short lease."""
    return Settings(
        redis_url=redis_url,
        prefix=prefix,
        partitions=N,
        scheduler=SchedulerSettings(lease_ttl_ms=TTL_MS, lease_renew_ms=RENEW_MS, max_idle_ms=500),
    )


@pytest.fixture
async def clean(redis: Redis, prefix: str) -> AsyncIterator[Redis]:
    """``redis``, and every key of the test's partitions deleted afterwards."""
    yield redis
    keys = [k async for k in redis.scan_iter(match=f"{{{prefix}:*", count=1000)]
    for start in range(0, len(keys), 1000):
        await redis.delete(*keys[start : start + 1000])


@asynccontextmanager
async def schedulers(
    settings: Settings, count: int, first: int = 0
) -> AsyncIterator[list[Scheduler]]:
    """``count`` schedulers (ids s<first>, s<first+1>, ...), each with its own connection,
    stopped gracefully on exit."""
    clients = [connect(settings.url) for _ in range(count)]
    made = [Scheduler(c, settings, owner=f"s{first + i}") for i, c in enumerate(clients)]
    try:
        async with anyio.create_task_group() as tg:
            for scheduler in made:
                await tg.start(scheduler.run)
            yield made
            for scheduler in made:
                scheduler.stop()
    finally:
        for client in clients:
            await client.aclose()


def split_evenly(running: list[Scheduler]) -> bool:
    """Every partition led by exactly the scheduler rendezvous hashing names, none twice."""
    led = [set(s.led()) for s in running]
    ids = [s.owner for s in running]
    return all(led[i] == owned(ids[i], ids, N) for i in range(len(running)))


async def split_in_redis(redis: Redis, prefix: str, running: list[Scheduler]) -> bool:
    """The leases say the same: each partition's lease holder is its rendezvous owner."""
    ids = [s.owner for s in running]
    return await lease_owners(redis, prefix) == [owner_of(k, ids) for k in range(N)]


def store_of(redis: Redis, prefix: str, schedule_id: str) -> ScheduleStore:
    return ScheduleStore(redis, Keys(prefix, N, partition_of(schedule_id, N)))


async def add_recurring(redis: Redis, prefix: str, count: int, every_s: float) -> None:
    for i in range(count):
        sid = f"r{i}"
        schedule = Schedule(id=sid, task="t", every=every_s, overlap="allow", misfire="catch_up")
        await store_of(redis, prefix, sid).save(schedule)


# --- in process ----------------------------------------------------------------------------------


async def test_two_then_three_schedulers_split_sixteen_partitions(
    clean: Redis, parted: Settings
) -> None:
    redis, prefix = clean, parted.prefix
    await add_recurring(redis, prefix, 32, 0.1)
    async with schedulers(parted, 2) as running:
        await eventually(lambda: split_evenly(running))
        await eventually(lambda: split_in_redis(redis, prefix, running))
        assert all(s.led() for s in running)
        # A third joins: the partitions it wins change hands, the others stay.
        before = {s.owner: set(s.led()) for s in running}
        async with schedulers(parted, 1, first=2) as (joined,):
            everyone = [*running, joined]
            await eventually(lambda: split_evenly(everyone))
            await eventually(lambda: split_in_redis(redis, prefix, everyone))
            assert joined.led()
            for s in running:  # the old ones only gave partitions away
                assert set(s.led()) <= before[s.owner]
            await anyio.sleep(0.5)
    jobs = await fired(redis, prefix)
    once_each(jobs, 100)
    assert {j["schedule_id"] for j in jobs} == {f"r{i}" for i in range(32)}


async def test_herd_over_sixteen_partitions_fires_each_occurrence_once(
    clean: Redis, parted: Settings
) -> None:
    redis, prefix = clean, parted.prefix
    # In one bulk write (a few round trips per partition), well before the instant even on a
    # busy machine.
    at = datetime.now(UTC) + timedelta(seconds=5)
    ids = [f"h{i}" for i in range(300)]
    async with rsched.Client.from_settings(parted) as client:
        result = await client.add_many(Schedule(id=sid, task="t", at=at) for sid in ids)
    assert result.count("created") == len(ids), result.summary()
    # Three racing from the start: before their first beat each claims every partition.
    async with schedulers(parted, 3) as running:

        async def all_fired() -> bool:
            return len(await fired(redis, prefix)) >= len(ids)

        await eventually(all_fired)
        await anyio.sleep(0.3)
        assert sum(s.fired_total for s in running) == len(ids)
    jobs = await fired(redis, prefix)
    assert Counter(j["schedule_id"] for j in jobs) == Counter(ids)
    assert {partition_of(sid, N) for sid in ids} == set(range(N))


async def test_more_schedulers_than_partitions_leaves_hot_standbys(
    clean: Redis, redis_url: str, prefix: str
) -> None:
    two = Settings(
        redis_url=redis_url,
        prefix=prefix,
        partitions=2,
        scheduler=SchedulerSettings(lease_ttl_ms=TTL_MS, lease_renew_ms=RENEW_MS),
    )
    async with schedulers(two, 4) as running:

        def settled() -> bool:
            led = [set(s.led()) for s in running]
            ids = [s.owner for s in running]
            return all(led[i] == owned(ids[i], ids, 2) for i in range(4))

        await eventually(settled)
        led = [s.led() for s in running]
        assert sorted(k for partitions in led for k in partitions) == [0, 1]
        assert sum(1 for partitions in led if not partitions) >= 2


async def test_one_partition_keeps_one_leader_when_others_join(
    redis: Redis, settings: Settings
) -> None:
    fast = settings.model_copy(
        update={"scheduler": SchedulerSettings(lease_ttl_ms=TTL_MS, lease_renew_ms=RENEW_MS)}
    )
    async with schedulers(fast, 1) as (first,):
        await eventually(lambda: first.is_leader)
        async with schedulers(fast, 2, first=1):
            await anyio.sleep(4 * RENEW_MS / 1000)
            assert first.is_leader  # the first to take the lease keeps it, as before
            assert await redis.get(Keys(settings.prefix).leader) == f"{first.engines[0].held}"
            assert await redis.zcard(Keys(settings.prefix).schedulers) == 3


async def test_a_clean_stop_hands_its_partitions_over_at_once(
    clean: Redis, redis_url: str, prefix: str
) -> None:
    # A lease that would take 10 s to expire: the takeover must not wait for it.
    slow_expiry = Settings(
        redis_url=redis_url,
        prefix=prefix,
        partitions=N,
        scheduler=SchedulerSettings(lease_ttl_ms=10_000, lease_renew_ms=RENEW_MS),
    )
    async with schedulers(slow_expiry, 1) as (stays,):
        async with schedulers(slow_expiry, 1, first=1) as (leaves,):
            await eventually(lambda: split_evenly([stays, leaves]))
            assert leaves.led()
        started = time.monotonic()
        await eventually(lambda: len(stays.led()) == N)
        assert time.monotonic() - started < 2.0
        assert set(await lease_owners(clean, prefix)) == {stays.owner}


async def test_worker_runs_and_reclaims_jobs_of_every_partition(
    clean: Redis, parted: Settings
) -> None:
    redis, prefix = clean, parted.prefix
    settings = fast_settings(parted, visibility_timeout_s=0.5, concurrency=20)
    stores = [QueueStore(redis, k) for k in Keys(prefix, N).every_partition()]
    for store in stores:
        await store.create_groups(["default"])
    # A worker that died holding one job of each partition: read and never acknowledged.
    for store in stores:
        await store.enqueue("t.work", {"dead": True})
        got = await store.read([("default", "normal")], "gone:1:abc", 10, 10)
        assert len(got[0][1]) == 1
    for store in stores:
        for i in range(5):
            await store.enqueue("t.work", {"i": i})
    worker, seen = noting_worker(settings)

    async with working(worker, redis):
        await eventually(lambda: len(seen) >= 6 * N)

        async def settled() -> bool:
            for store in stores:
                pending = await redis.xpending(store.keys.queue("default"), GROUP)
                if int(pending["pending"]) or await redis.xlen(store.keys.queue("default")):
                    return False
            return True

        await eventually(settled)
    assert Counter(j.partition for j in seen) == dict.fromkeys(range(N), 6)
    assert sum(1 for j in seen if j.payload.get("dead")) == N
    assert all(j.deliveries == 2 for j in seen if j.payload.get("dead"))


async def test_worker_honours_priorities_in_every_partition(clean: Redis, parted: Settings) -> None:
    redis, prefix = clean, parted.prefix
    settings = fast_settings(parted, concurrency=1, read_batch=1)
    stores = [QueueStore(redis, k) for k in Keys(prefix, N).every_partition()]
    for store in stores:
        await store.create_groups(["default"])
        for _i in range(4):
            await store.enqueue("t.work", {"level": "low"}, priority="low")
        await store.enqueue("t.work", {"level": "high"}, priority="high")
    worker, order = noting_worker(settings)

    async with working(worker, redis):
        await eventually(lambda: len(order) == 5 * N)
    # Within a partition the high job goes first, but on the turns low leads (one read in ten
    # with the default weights: it never starves); each partition leads a read in turn, so every
    # high job runs in the first round of turns.
    firsts = [next(j.priority for j in order if j.partition == k) for k in range(N)]
    assert firsts.count("high") >= N - 3, firsts
    highs = [i for i, j in enumerate(order) if j.priority == "high"]
    assert max(highs) < 2 * N, highs


# --- processes -----------------------------------------------------------------------------------


def start_scheduler(spawn: Spawn, settings: Settings, ttl_ms: int = TTL_MS) -> Proc:
    proc = spawn(
        "rsched._cli.scheduler_process",
        env={
            "RSCHED_REDIS_URL": settings.url,
            "RSCHED_PREFIX": settings.prefix,
            "RSCHED_PARTITIONS": str(N),
            "RSCHED_SCHEDULER__LEASE_TTL_MS": str(ttl_ms),
            "RSCHED_SCHEDULER__LEASE_RENEW_MS": str(RENEW_MS),
            "RSCHED_SCHEDULER__MAX_IDLE_MS": "500",
        },
    )
    proc.wait_for("event=scheduler.ready")
    return proc


async def test_a_scheduler_process_refuses_another_number_of_partitions(
    clean: Redis, parted: Settings, spawn: Spawn
) -> None:
    await clean.hset(Keys(parted.prefix).meta, "partitions", 4)
    env = {"RSCHED_REDIS_URL": parted.url, "RSCHED_PREFIX": parted.prefix}
    proc = spawn("rsched._cli.scheduler_process", "--partitions", str(N), env=env)
    assert proc.wait() == 2
    assert "has 4 partition(s) but this process is configured for 16" in proc.output()


@pytest.mark.slow
async def test_kill_9_partitions_are_taken_over_within_the_lease_ttl(
    clean: Redis, parted: Settings, spawn: Spawn
) -> None:
    redis, prefix = clean, parted.prefix
    await add_recurring(redis, prefix, 48, 0.2)
    a, b = start_scheduler(spawn, parted), start_scheduler(spawn, parted)
    await eventually(lambda: led_by(redis, prefix, {a.proc.pid, b.proc.pid}))
    a.signal(signal.SIGKILL)
    a.wait()
    killed = time.monotonic()
    await eventually(lambda: led_by(redis, prefix, {b.proc.pid}))
    took = time.monotonic() - killed
    # The leases expire a TTL after their last renewal; the next look takes them.
    assert took < TTL_MS / 1000 + 4 * RENEW_MS / 1000 + 0.5, took
    await anyio.sleep(0.5)
    jobs = await fired(redis, prefix)
    once_each(jobs, 200)
    assert "leader.partitions" in b.output()


@pytest.mark.slow
async def test_a_joining_scheduler_process_takes_its_share_without_double_fires(
    clean: Redis, parted: Settings, spawn: Spawn
) -> None:
    redis, prefix = clean, parted.prefix
    await add_recurring(redis, prefix, 48, 0.1)
    first = start_scheduler(spawn, parted)
    await eventually(lambda: led_by(redis, prefix, {first.proc.pid}))
    second = start_scheduler(spawn, parted)
    third = start_scheduler(spawn, parted)
    pids = {first.proc.pid, second.proc.pid, third.proc.pid}
    await eventually(lambda: shared_by(redis, prefix, pids))
    await anyio.sleep(0.5)
    jobs = await fired(redis, prefix)
    once_each(jobs, 100)


@pytest.mark.slow
async def test_a_paused_scheduler_is_fenced_per_partition(
    clean: Redis, parted: Settings, spawn: Spawn
) -> None:
    redis, prefix = clean, parted.prefix
    await add_recurring(redis, prefix, 48, 0.1)
    zombie, other = start_scheduler(spawn, parted), start_scheduler(spawn, parted)
    pids = {zombie.proc.pid, other.proc.pid}
    await eventually(lambda: led_by(redis, prefix, pids))
    zombie.signal(signal.SIGSTOP)
    changes = zombie.output().count("leader.partitions")
    try:
        await eventually(lambda: led_by(redis, prefix, {other.proc.pid}))
        await anyio.sleep(0.3)
    finally:
        zombie.signal(signal.SIGCONT)
    # It wakes believing it leads: each partition's fire and renewal refuse its old token, and
    # it takes its share again through new leases.
    await eventually(lambda: led_by(redis, prefix, pids))
    await anyio.sleep(0.5)
    jobs = await fired(redis, prefix)
    once_each(jobs, 100)
    assert zombie.output().count("leader.partitions") >= changes + 2  # none led, then its share


async def test_idle_worker_of_partitions_only_blocks_and_promotes_past_a_broken_one(
    clean: Redis, parted: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Idle, the worker's only reads are the watchers' blocking ones (no take), and its
    promoter makes one call per partition for all its queues; a partition whose delayed set
    someone overwrote moves nothing, and holds back no other partition."""
    redis, prefix = clean, parted.prefix
    settings = fast_settings(parted, queues=["default", "other"])
    stores = [QueueStore(redis, k) for k in Keys(prefix, N).every_partition()]
    broken = stores[3]
    await redis.set(broken.keys.delayed_queue("other"), "x")
    takes: list[int] = []
    promoted: list[tuple[str, ...]] = []
    take, promote = QueueStore.take, QueueStore.promote

    async def counted_take(self: QueueStore, *args: Any, **kwargs: Any) -> Any:
        takes.append(1)
        return await take(self, *args, **kwargs)

    async def counted_promote(self: QueueStore, queues: Any, *args: Any) -> Any:
        promoted.append(tuple(queues))
        return await promote(self, queues, *args)

    monkeypatch.setattr(QueueStore, "take", counted_take)
    monkeypatch.setattr(QueueStore, "promote", counted_promote)
    worker, seen = noting_worker(settings)

    async with working(worker, redis):
        await eventually(lambda: len(promoted) >= 2 * N)
        await anyio.sleep(0.1)
        takes.clear()
        await anyio.sleep(0.5)  # five block_ms: idle, the watchers' reads cover every stream
        assert takes == []
        assert set(promoted) == {("default", "other")}
        for store in stores:
            await store.enqueue("t.work", {"delayed": True}, delay_s=0.1)
            await store.enqueue("t.work", queue="default" if store is broken else "other")
        await eventually(lambda: len(seen) == 2 * N - 1)
        await anyio.sleep(0.3)
    assert len(seen) == 2 * N - 1
    assert sum(1 for j in seen if j.payload.get("delayed")) == N - 1
    assert await redis.zcard(broken.keys.delayed_queue("default")) == 1
