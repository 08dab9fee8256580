"""A deployment of 16 partitions on a cluster of three primaries, end to end: scheduler and
worker processes in cluster mode sharing the partitions (a herd, a scheduler killed, enqueued
jobs, dead letters and requeue)."""

from __future__ import annotations

import re
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta

import pytest
from redis.asyncio import Redis

from rsched import Client, Limit, Schedule, Settings
from rsched._core.partitions import job_partition, partition_of
from rsched._core.schedule import to_ms
from rsched._redis.connection import connect
from tests.support.cluster import Cluster
from tests.support.limits import most_at_once
from tests.support.partitions import fired, led_by, once_each
from tests.support.processes import Proc
from tests.support.waiting import eventually
from tests.support.worker_app import any_, fast_env, marks_key

pytestmark = pytest.mark.slow

N = 16
TTL_MS, RENEW_MS = 1000, 200

Spawn = Callable[..., Proc]


@pytest.fixture
def psettings(cluster: Cluster, prefix: str) -> Settings:
    return Settings(redis_url=cluster.url, prefix=prefix, cluster=True, partitions=N)


@pytest.fixture
async def predis(psettings: Settings) -> AsyncIterator[Redis]:
    """A cluster client; every key of the test's deployment is deleted afterwards."""
    client = connect(psettings)
    try:
        yield client
    finally:
        prefix = psettings.prefix
        for pattern in (f"{{{prefix}}}:*", f"{{{prefix}:*"):
            found = [k async for k in client.scan_iter(match=pattern, count=1000)]
            for key in found:  # one slot per key: a multi-key DEL would cross slots
                await client.delete(key)
        await client.aclose()


@pytest.fixture
async def pclient(psettings: Settings, predis: Redis) -> AsyncIterator[Client]:
    async with Client.from_settings(psettings) as client:
        assert await client.init(N)
        yield client


def start_scheduler(spawn: Spawn, settings: Settings) -> Proc:
    proc = spawn(
        "rsched._cli.scheduler_process",
        env={
            "RSCHED_REDIS_URL": settings.url,
            "RSCHED_PREFIX": settings.prefix,
            "RSCHED_CLUSTER": "true",
            "RSCHED_PARTITIONS": str(N),
            "RSCHED_SCHEDULER__LEASE_TTL_MS": str(TTL_MS),
            "RSCHED_SCHEDULER__LEASE_RENEW_MS": str(RENEW_MS),
            "RSCHED_SCHEDULER__MAX_IDLE_MS": "500",
        },
    )
    proc.wait_for("event=scheduler.ready")
    return proc


def last_led(proc: Proc) -> set[int]:
    """The partitions a scheduler process last said it leads (its ``leader.partitions`` line)."""
    found = re.findall(r"leader\.partitions led=([\d,]+|none)", proc.output())
    return {int(k) for k in found[-1].split(",")} if found and found[-1] != "none" else set()


def start_worker(spawn: Spawn, settings: Settings, **env_extra: str) -> Proc:
    env = fast_env(settings, RSCHED_PARTITIONS=str(N), **env_extra)
    proc = spawn(
        "rsched._cli.worker_process",
        "tests.support.worker_app:worker",
        "--concurrency",
        "20",
        env=env,
    )
    proc.wait_for("event=worker.start")
    return proc


async def test_two_scheduler_processes_fire_a_herd_once_and_a_worker_runs_it(
    pclient: Client, predis: Redis, psettings: Settings, spawn: Spawn
) -> None:
    prefix = psettings.prefix
    a, b = start_scheduler(spawn, psettings), start_scheduler(spawn, psettings)
    pids = {a.proc.pid, b.proc.pid}
    # Every partition led, by one lease each, and both schedulers lead some.
    await eventually(lambda: led_by(predis, prefix, pids))
    start_worker(spawn, psettings)
    at = await pclient.server_time() + timedelta(seconds=1.5)
    ids = [f"h{i:03d}" for i in range(400)]
    result = await pclient.add_many(Schedule(id=sid, task="app.pass", at=at) for sid in ids)
    assert result.ids("created") == ids
    assert {partition_of(sid, N) for sid in ids} == set(range(N))

    async def all_ran() -> bool:
        done = [r async for r in pclient.iter_runs(status="completed", page_size=500)]
        return len(done) >= len(ids)

    await eventually(all_ran)
    await eventually(lambda: led_by(predis, prefix, pids))  # still shared, none lost
    # What each scheduler says it leads: no partition twice, every one once.
    led_a, led_b = last_led(a), last_led(b)
    assert led_a
    assert led_b
    assert not led_a & led_b
    assert led_a | led_b == set(range(N))
    runs = [r async for r in pclient.iter_runs(page_size=500)]
    assert Counter(r.schedule_id for r in runs) == Counter(ids)  # one run each, none twice
    assert {r.status for r in runs} == {"completed"}
    assert {r.scheduled_at for r in runs} == {at.replace(microsecond=at.microsecond // 1000 * 1000)}


async def test_a_killed_scheduler_process_s_partitions_are_taken_over(
    pclient: Client, predis: Redis, psettings: Settings, spawn: Spawn
) -> None:
    prefix = psettings.prefix
    every = 0.2
    schedules = [
        Schedule(id=f"r{i}", task="t", every=every, overlap="allow", misfire="catch_up")
        for i in range(48)
    ]
    await pclient.add_many(schedules)
    a, b = start_scheduler(spawn, psettings), start_scheduler(spawn, psettings)
    await eventually(lambda: led_by(predis, prefix, {a.proc.pid, b.proc.pid}))
    a.signal(signal.SIGKILL)
    a.wait()
    killed = time.monotonic()
    taken_over_ms = to_ms(await pclient.server_time())
    await eventually(lambda: led_by(predis, prefix, {b.proc.pid}))
    took = time.monotonic() - killed
    # Its leases expire a TTL after their last renewal; the next renewal round takes them
    # (the slack is for a loaded two-core machine).
    assert took < (TTL_MS + RENEW_MS) / 1000 + 1.0, took
    last_each: dict[str, int] = {}

    async def every_one_fired_since() -> bool:
        """Every schedule fired an occurrence due after the kill: none was left behind in a
        lost partition."""
        for job in await fired(predis, prefix):
            sid = job["schedule_id"]
            last_each[sid] = max(last_each.get(sid, 0), int(job["scheduled_at"]))
        behind = [sid for sid in last_each if last_each[sid] <= taken_over_ms]
        return len(last_each) == len(schedules) and not behind

    await eventually(every_one_fired_since, what=lambda: f"last occurrences: {last_each}")
    once_each(await fired(predis, prefix), round(every * 1000))


async def test_enqueued_jobs_of_every_partition_run_and_dead_letters_requeue(
    pclient: Client, predis: Redis, psettings: Settings, spawn: Spawn
) -> None:
    # No job is reclaimed while a loaded machine starves the worker's heartbeat: the test counts
    # runs, and a reclaimed job would rightly run again.
    start_worker(spawn, psettings, RSCHED_WORKER__VISIBILITY_TIMEOUT_S="60")
    named = [f"job-{i:03d}" for i in range(32)]
    for eid in named:
        assert (await pclient.enqueue("app.noop", execution_id=eid)).created
    assert not (await pclient.enqueue("app.noop", execution_id=named[0])).created
    anonymous = [(await pclient.enqueue("app.noop")).execution_id for _ in range(32)]
    failing = [
        (await pclient.enqueue("app.fail_first", max_retries=0)).execution_id for _ in range(8)
    ]
    every = [*named, *anonymous]
    assert len({job_partition(e, N) for e in every}) > 8
    assert len({job_partition(e, N) for e in failing}) > 1  # dead letters of several partitions

    async def ends() -> Counter[str]:
        marks = await any_(predis).lrange(marks_key(psettings.prefix), 0, -1)
        return Counter(m.split(":")[1] for m in marks if m.startswith("end:"))

    def ran(ids: list[str]) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            got = await ends()
            return all(got[i] == 1 for i in ids)

        return check

    async def all_dead() -> bool:
        return len((await pclient.dead_letters(limit=100)).items) == len(failing)

    await eventually(ran(every))
    await eventually(all_dead)
    letters = (await pclient.dead_letters(limit=100)).items
    assert sorted(d.execution_id for d in letters) == sorted(failing)
    assert await pclient.requeue() == len(failing)
    await eventually(ran([*every, *failing]))
    assert (await pclient.dead_letters()).items == []
    assert set((await ends()).values()) == {1}  # each job ran to its end once


async def test_a_limit_holds_across_every_partition(
    pclient: Client, predis: Redis, psettings: Settings, spawn: Spawn
) -> None:
    """Jobs of every partition that share a limit key (declared by their task, by enqueue, by
    their schedule) never run more at once than the key allows: they run from partition 0."""
    prefix = psettings.prefix
    jobs = [(await pclient.enqueue("app.limited", {"k": "task", "s": 0.1})).execution_id
            for _ in range(16)]  # fmt: skip
    assert len({job_partition(j, N) for j in jobs}) > 4  # spread, then gathered in partition 0
    own = Limit("own", concurrency=1)
    for _ in range(6):
        enq = await pclient.enqueue("app.limited", {"k": "own", "s": 0.1}, limits=[own])
        jobs.append(enq.execution_id)
    for i in range(4):
        await pclient.add(Schedule(id=f"lim-{i}", task="app.limited", every=0.5,
                                   payload={"k": "sched", "s": 0.3},
                                   limits=[Limit("sched", concurrency=1)]))  # fmt: skip
    assert len({partition_of(f"lim-{i}", N) for i in range(4)}) > 1
    start_scheduler(spawn, psettings)
    for _ in range(2):
        # No job is reclaimed while a loaded machine starves a heartbeat: a run counts once
        # (a start and an end mark), and a reclaimed job would rightly run again.
        start_worker(spawn, psettings, RSCHED_WORKER__VISIBILITY_TIMEOUT_S="60")

    async def runs() -> dict[str, list[tuple[float, float]]]:
        times: dict[tuple[str, str], list[float]] = {}
        for raw in await any_(predis).lrange(marks_key(prefix), 0, -1):
            what, exec_id, _attempt, _pid, at = str(raw).rsplit(":", 4)
            times.setdefault((what.split("-")[1], exec_id), []).append(float(at))
        out: dict[str, list[tuple[float, float]]] = {}
        for (key, _), t in times.items():
            if len(t) == 2:
                out.setdefault(key, []).append((min(t), max(t)))
        return out

    seen: dict[str, int] = {}

    async def enough() -> bool:
        done = await runs()
        seen.update({key: len(spans) for key, spans in done.items()})
        return (
            len(done.get("task", [])) == 16
            and len(done.get("own", [])) == 6
            and len(done.get("sched", [])) >= 6
        )

    await eventually(enough, what=lambda: f"runs ended by key: {seen}")
    done = await runs()
    assert most_at_once(done["task"]) <= 2  # the task's lim:{k}
    assert most_at_once(done["own"]) == 1
    assert most_at_once(done["sched"]) == 1
