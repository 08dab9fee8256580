"""The worker registry against real servers: live workers, clean and forced stops, the lease's
TTL in Redis, the rolling-deploy rules (no tasks, unknown tasks)."""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable

import anyio
import pytest
from redis.asyncio import Redis

import rsched
from rsched._core.keys import GROUP, Keys
from rsched._core.settings import Settings
from rsched._redis.connection import connect
from rsched._store.queues import QueueStore
from tests.support.processes import Proc
from tests.support.waiting import eventually
from tests.support.worker_app import fast_env, fast_settings, marks_key
from tests.support.workers import running, settled, start_worker

Spawn = Callable[..., Proc]


def _worker(settings: Settings, **fields: object) -> rsched.Worker:
    worker = rsched.Worker(settings=fast_settings(settings, **fields))

    @worker.task("t.ok")
    async def ok(job: rsched.Job) -> None:
        pass

    return worker


async def test_a_running_worker_is_listed_and_leaves_on_a_clean_stop(
    redis: Redis, settings: Settings
) -> None:
    client = rsched.Client(redis, settings)
    worker = _worker(settings, concurrency=3, queues=["default", "reports"])
    async with running(worker, redis):
        (info,) = await client.workers()
        assert info.id == worker.consumer
        assert info.queues == ("default", "reports")
        assert info.tasks == ("t.ok",)
        assert info.concurrency == 3
        assert info.running == 0
        assert info.pid > 0
        assert info.host
        assert info.last_seen >= info.started_at
        ttl = await redis.pttl(Keys(settings.prefix).worker(worker.consumer))
        assert 0 < ttl <= 1000  # a few heartbeats (0.2 s each; at least 1 s)
    assert await client.workers() == []
    assert await redis.zcard(Keys(settings.prefix).workers) == 0


async def test_a_worker_lists_the_jobs_it_runs(redis: Redis, settings: Settings) -> None:
    client = rsched.Client(redis, settings)
    worker = rsched.Worker(settings=fast_settings(settings))
    release = anyio.Event()

    @worker.task("t.wait")
    async def wait(job: rsched.Job) -> None:
        await release.wait()

    async with running(worker, redis):
        done = await client.enqueue("t.wait", {"n": 1}, execution_id="run-1")

        async def listed() -> bool:
            infos = await client.workers()
            return bool(infos) and infos[0].running == 1

        await eventually(listed)
        (info,) = await client.workers()
        (job,) = info.jobs
        assert (job.execution_id, job.task, job.queue) == (done.execution_id, "t.wait", "default")
        release.set()
        await eventually(lambda: settled(redis, settings))


async def test_a_stale_record_is_not_listed(redis: Redis, settings: Settings) -> None:
    """A worker that dies stops heartbeating: its record expires and readers skip it."""
    keys = Keys(settings.prefix)
    store = QueueStore(redis, keys)
    await store.register("ghost:1:abc", b'{"id": "ghost:1:abc", "tasks": ["x"]}', 150, 3_600_000)
    assert [w.id for w in await store.workers()] == ["ghost:1:abc"]
    await anyio.sleep(0.3)
    assert await store.workers() == []


async def test_a_worker_without_tasks_refuses_to_start(redis: Redis, settings: Settings) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    with pytest.raises(rsched.ConfigError, match="no tasks registered"):
        await worker.run(redis)


def test_rsched_worker_without_tasks_exits_2(spawn: Spawn, settings: Settings) -> None:
    proc = spawn(
        "rsched._cli.worker_process", "tests.support.worker_app:empty", env=fast_env(settings)
    )
    assert proc.wait() == 2
    assert "has no tasks registered" in proc.output()
    assert len(proc.output().strip().splitlines()) == 1


async def test_unknown_task_waits_then_runs_when_a_worker_has_it(
    redis: Redis, settings: Settings
) -> None:
    """A rolling deploy: the job's task is not registered yet; it waits in the delayed set
    instead of going to the dead letters, and runs once a worker that has it starts."""
    client = rsched.Client(redis, settings)
    old = _worker(settings, unknown_task_grace_s=60)
    async with running(old, redis):
        done = await client.enqueue("t.new", execution_id="rolling-1")

        async def delayed() -> bool:
            return (await client.job(done.execution_id)).state == "delayed"

        await eventually(delayed)
        assert (await client.dead_letters()).items == []
        new = rsched.Worker(settings=fast_settings(settings, unknown_task_grace_s=60))
        ran: list[str] = []

        @new.task("t.new")
        async def handler(job: rsched.Job) -> str:
            ran.append(job.execution_id)
            return "done"

        async with running(new, redis):
            # Up to 5 s in the delayed set, and the old worker may take it again once before it
            # sees the new worker's registration (its view of live tasks is cached 2 s).
            await eventually(lambda: ran == ["rolling-1"])
            await eventually(lambda: settled(redis, settings))
    assert await client.result("rolling-1") == "done"
    assert (await client.dead_letters()).items == []


async def test_unknown_task_is_dead_lettered_after_the_grace(
    redis: Redis, settings: Settings
) -> None:
    client = rsched.Client(redis, settings)
    worker = _worker(settings, unknown_task_grace_s=0.5)
    async with running(worker, redis):
        started = time.monotonic()
        await client.enqueue("t.never", execution_id="never-1")

        async def dead() -> bool:
            return len((await client.dead_letters()).items) == 1

        await eventually(dead)
        assert time.monotonic() - started >= 0.5
    (letter,) = (await client.dead_letters()).items
    assert letter.reason == "unknown_task"
    assert "nor on any live worker" in letter.error_message


async def test_stats_reads_the_lease_ttl_the_leader_stored(
    redis: Redis, settings: Settings
) -> None:
    """A CLI with other scheduler settings reports the leader's lease age truly."""
    sched_settings = settings.model_copy(
        update={
            "scheduler": rsched.Settings().scheduler.model_copy(
                update={"lease_ttl_ms": 60_000, "lease_renew_ms": 5_000}
            )
        }
    )
    scheduler = rsched.Scheduler(redis, sched_settings)
    async with anyio.create_task_group() as tg:
        tg.start_soon(scheduler.run)
        client = rsched.Client(redis, settings)  # lease_ttl_ms 10 s by default

        async def leading() -> bool:
            return (await client.stats()).leader is not None

        await eventually(leading)
        leader = (await client.stats()).leader
        assert leader is not None
        assert leader["lease_age_ms"] < 5_000  # 60 s TTL known: not 10 s - 60 s left
        assert leader["lease_left_ms"] > 50_000
        scheduler.stop()


async def test_a_standby_scheduler_says_who_leads_once_and_when_it_changes(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    fast = settings.model_copy(
        update={
            "scheduler": settings.scheduler.model_copy(
                update={"lease_ttl_ms": 1_000, "lease_renew_ms": 100}
            )
        }
    )
    caplog.set_level(logging.INFO, logger="rsched")
    clients = [connect(fast.url) for _ in range(3)]
    first, standby, third = (
        rsched.Scheduler(c, fast, owner=name)
        for c, name in zip(clients, ("one", "standby", "three"), strict=True)
    )

    def standby_lines(me: str) -> list[str]:
        return [
            getattr(r, "rsched_fields", {}).get("leader", "")
            for r in caplog.records
            if r.getMessage() == "leader.standby"
            and getattr(r, "rsched_fields", {}).get("me") == me
        ]

    try:
        async with anyio.create_task_group() as tg:
            await tg.start(first.run)
            await eventually(lambda: first.is_leader)
            await tg.start(standby.run)
            await tg.start(third.run)
            await eventually(lambda: standby_lines("standby") == ["one"])
            await anyio.sleep(0.5)  # several refused acquisitions: still one line
            assert standby_lines("standby") == ["one"]
            first.stop()  # releases the lease: one of the others takes it
            await eventually(lambda: standby.is_leader or third.is_leader)
            new, other = ("standby", "three") if standby.is_leader else ("three", "standby")
            await eventually(lambda: standby_lines(other) == ["one", new])
            standby.stop()
            third.stop()
    finally:
        for client in clients:
            await client.aclose()


async def test_stats_counts_live_workers_per_queue(redis: Redis, settings: Settings) -> None:
    client = rsched.Client(redis, settings)
    one, two = _worker(settings, queues=["default", "b"]), _worker(settings, queues=["default"])
    async with running(one, redis), running(two, redis):
        st = await client.stats()
        assert st.queues["default"]["workers"] == 2
        assert st.queues["b"]["workers"] == 1


# --- worker processes ----------------------------------------------------------------------------


@pytest.mark.slow
async def test_a_killed_worker_leaves_the_registry(
    redis: Redis, settings: Settings, spawn: Spawn
) -> None:
    client = rsched.Client(redis, settings)
    proc = start_worker(spawn, settings)

    async def listed() -> bool:
        return len(await client.workers()) == 1

    await eventually(listed)
    proc.signal(signal.SIGKILL)
    proc.wait()

    async def gone() -> bool:
        return await client.workers() == []

    started = time.monotonic()
    await eventually(gone)
    assert time.monotonic() - started < 5  # three heartbeats of 0.2 s, at least 1 s


@pytest.mark.slow
async def test_a_forced_exit_hands_its_running_jobs_back(
    redis: Redis, settings: Settings, spawn: Spawn
) -> None:
    """The second signal: the running job is cancelled and its entry handed back, so the next
    worker's reclaim takes it at once, not after the visibility timeout (30 s here)."""
    client = rsched.Client(redis, settings)
    env = {"RSCHED_WORKER__VISIBILITY_TIMEOUT_S": "30", "RSCHED_WORKER__HEARTBEAT_S": "0.2"}
    first = start_worker(spawn, settings, **env)
    done = await client.enqueue("app.sleep", {"s": 60}, execution_id="long-1")

    async def started() -> bool:
        return any(m.startswith("start:long-1") for m in await _marks(redis, settings))

    await eventually(started)
    first.signal(signal.SIGTERM)
    first.wait_for("event=worker.draining")
    first.signal(signal.SIGTERM)
    first.wait()
    assert "handed_back=1" in first.output()
    pending = await redis.xpending_range(Keys(settings.prefix).queue("default"), GROUP, "-", "+", 1)
    assert int(pending[0]["time_since_delivered"]) > 30_000
    second = start_worker(spawn, settings, **env)
    t0 = time.monotonic()

    async def restarted() -> bool:
        return sum(m.startswith("start:long-1") for m in await _marks(redis, settings)) == 2

    await eventually(restarted)
    assert time.monotonic() - t0 < 10
    job = await client.job(done.execution_id)
    assert job.state == "running"
    assert job.worker is not None
    assert job.worker in second.output()
    second.signal(signal.SIGKILL)


async def _marks(redis: Redis, settings: Settings) -> list[str]:
    return [str(m) for m in await redis.lrange(marks_key(settings.prefix), 0, -1)]
