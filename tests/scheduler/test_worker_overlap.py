"""Overlap policies end to end: a real scheduler fires, in-process workers run the jobs."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

import rsched
from rsched._core.history import expand_record
from rsched._core.keys import Keys
from rsched._core.settings import Settings
from rsched._store.schedules import ScheduleStore
from tests.support.schedulers import events, scheduling
from tests.support.waiting import WAIT_S, eventually
from tests.support.worker_app import any_, fast_settings
from tests.support.workers import running


@pytest.mark.cluster
async def test_skip_never_overlaps_and_records_outcomes(redis: Redis, settings: Settings) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    state = {"now": 0, "peak": 0, "done": 0}

    @worker.task("t")
    async def handler(job: rsched.Job) -> None:
        state["now"] += 1
        state["peak"] = max(state["peak"], state["now"])
        marker = await redis.hgetall(Keys(settings.prefix).schedule("s1"))
        assert marker["run_state"] == "running"
        assert marker["run"] == job.execution_id
        assert marker["run_worker"]
        assert job.schedule_id == "s1"
        assert job.scheduled_at is not None
        await anyio.sleep(0.5)
        state["now"] -= 1
        state["done"] += 1

    async with running(worker, redis), scheduling(redis, settings, every=0.2) as store:
        await eventually(lambda: state["done"] >= 2)
    assert state["peak"] == 1
    names = [e["event"] for e in await events(store)]
    assert "skipped" in names
    assert "running" in names
    done = [e for e in await events(store) if e["event"] == "completed"]
    assert done[0]["duration_ms"] >= 400
    assert done[0]["attempt"] == 1
    assert "execution_id" in done[0]
    assert "at" in done[0]


async def test_a_steady_debounced_schedule_runs_each_occurrence_late_by_its_debounce(
    redis: Redis, settings: Settings
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    started: list[tuple[rsched.Job, float]] = []

    @worker.task("t")
    async def handler(job: rsched.Job) -> None:
        started.append((job, time.time()))

    # Occurrences 1.5 s apart: the first job must be promoted and done before the next one, or
    # the next is merged into its window (debounced) or skipped behind its run (overlap=skip),
    # as designed; 1.25 s of slack holds that on a loaded machine.
    spec: dict[str, Any] = {"every": 1.5, "debounce": "250ms"}
    async with running(worker, redis), scheduling(redis, settings, **spec) as store:
        await eventually(lambda: len(started) >= 3)
    ids = [job.execution_id for job, _ in started]
    assert len(set(ids)) == len(ids)  # occurrences further apart than the debounce: one job each
    for job, at in started:
        assert job.scheduled_at is not None
        # Started no sooner than its debounce after its occurrence (the clocks are one machine's).
        assert at - job.scheduled_at.timestamp() >= 0.2, (job, at)
    assert "skipped" not in [e["event"] for e in await events(store)]


async def test_allow_runs_concurrently(redis: Redis, settings: Settings) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    state = {"now": 0, "peak": 0}

    @worker.task("t")
    async def handler(job: rsched.Job) -> None:
        state["now"] += 1
        state["peak"] = max(state["peak"], state["now"])
        await anyio.sleep(0.5)
        state["now"] -= 1

    async with running(worker, redis), scheduling(redis, settings, every=0.1, overlap="allow"):
        await eventually(lambda: state["peak"] >= 2)
    assert not await redis.hexists(Keys(settings.prefix).schedule("s1"), "run")


@pytest.mark.cluster
async def test_buffer_one_releases_one_occurrence_when_the_run_ends(
    redis: Redis, settings: Settings
) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    runs: list[str] = []
    state = {"now": 0, "peak": 0}

    @worker.task("t")
    async def handler(job: rsched.Job) -> None:
        state["now"] += 1
        state["peak"] = max(state["peak"], state["now"])
        runs.append(job.execution_id)
        await anyio.sleep(0.4)
        state["now"] -= 1

    async with (
        running(worker, redis),
        scheduling(redis, settings, every=0.1, overlap="buffer_one") as store,
    ):
        await eventually(lambda: len(runs) >= 3)
    history = await events(store)
    names = [e["event"] for e in history]
    assert "buffered" in names
    assert "released" in names
    released = [e["execution_id"] for e in history if e["event"] == "released"]
    assert released[0] in runs  # the buffered occurrence is the one that ran next
    assert state["peak"] == 1


@pytest.mark.slow
@pytest.mark.cluster
async def test_cancel_previous_cancels_the_running_handler_on_any_worker(
    redis: Redis, settings: Settings
) -> None:
    started: list[str] = []
    cancelled: list[str] = []

    def make() -> rsched.Worker:
        worker = rsched.Worker(settings=fast_settings(settings))

        @worker.task("t")
        async def handler(job: rsched.Job) -> None:
            started.append(job.execution_id)
            try:
                await anyio.sleep(30)
            except BaseException:
                cancelled.append(job.execution_id)
                raise

        return worker

    async with (
        running(make(), redis),
        running(make(), redis),
        scheduling(redis, settings, every=0.4, overlap="cancel_previous") as store,
    ):
        await eventually(lambda: len(cancelled) >= 2 and len(started) >= 3)
        history = await events(store)
    assert cancelled[:2] == started[:2]
    # Under load a job can also be replaced while still queued: it is recorded as cancelled
    # with reason "superseded" and never starts. Only handlers that ran count here.
    gone = [e for e in history if e["event"] == "cancelled" and e["execution_id"] in started]
    assert [e["execution_id"] for e in gone][:2] == started[:2]
    assert any(e["event"] == "cancel_requested" for e in history)
    assert all(e.get("reason") == "cancel_previous" for e in gone)


async def test_superseded_queued_job_is_skipped(redis: Redis, settings: Settings) -> None:
    """A queued job whose marker names a newer execution is cancelled, never run."""
    keys = Keys(settings.prefix)
    store = ScheduleStore(redis, keys)
    worker = rsched.Worker(settings=fast_settings(settings))
    ran: list[str] = []

    @worker.task("t")
    async def handler(job: rsched.Job) -> None:
        ran.append(job.execution_id)

    fields = {"execution_id": "s1@1", "schedule_id": "s1", "task": "t", "payload": "{}",
              "scheduled_at": "1", "fired_at": "1", "attempt": "1", "origin": "schedule",
              "opts": "{}"}  # fmt: skip
    await any_(redis).xadd(keys.queue("default"), fields)
    await any_(redis).xadd(keys.queue("default"), {**fields, "execution_id": "s1@2"})
    await redis.hset(keys.schedule("s1"), mapping={"run": "s1@2"})
    async with running(worker, redis):
        await eventually(lambda: ran == ["s1@2"])
        await eventually(lambda: _has_event(store, "cancelled"))
    history = await events(store)
    (gone,) = [e for e in history if e["event"] == "cancelled"]
    assert gone["execution_id"] == "s1@1"
    assert gone["reason"] == "superseded"
    marker = await redis.hmget(keys.schedule("s1"), ["run", "run_state", "run_until"])
    assert marker == [None, None, None]  # the run of s1@2 ended


async def _has_event(store: ScheduleStore, name: str) -> bool:
    return any(e["event"] == name for e in await store.history("s1", 100))


async def test_failed_and_dead_events_in_history(redis: Redis, settings: Settings) -> None:
    worker = rsched.Worker(settings=fast_settings(settings))
    attempts: list[int] = []

    @worker.task("t")
    async def handler(job: rsched.Job) -> None:
        attempts.append(job.attempt)
        raise RuntimeError("nope")

    async with (
        running(worker, redis),
        scheduling(
            redis, settings, every=3600, max_retries=1, retry_base_s=0.1, retry_max_s=0.1
        ) as store,
    ):
        await eventually(lambda: _has_event(store, "dead"))
    history = await events(store)
    failed = next(e for e in history if e["event"] == "failed")
    assert failed["attempt"] == 1
    assert failed["error_type"] == "RuntimeError"
    assert 0 <= failed["retry_in_ms"] <= 150
    dead = next(e for e in history if e["event"] == "dead")
    assert dead["attempt"] == 2
    assert dead["reason"] == "max_retries"
    assert attempts == [1, 2]
    assert not await redis.hexists(Keys(settings.prefix).schedule("s1"), "run")
    (record,) = await redis.lrange(Keys(settings.prefix).history("s1"), 0, -1)  # one per run
    assert [e["event"] for e in expand_record(str(record), "s1")] == [
        "fired", "running", "failed", "running", "dead",
    ]  # fmt: skip


async def test_schedule_removed_while_its_job_runs_stays_removed(
    redis: Redis, settings: Settings
) -> None:
    """The run marker lives in the schedule's hash: ending a run of a removed schedule must not
    write a new hash (a half schedule) back."""
    worker = rsched.Worker(settings=fast_settings(settings))
    started, release = anyio.Event(), anyio.Event()
    done: list[str] = []

    @worker.task("t")
    async def handler(job: rsched.Job) -> None:
        started.set()
        await release.wait()
        done.append(job.execution_id)

    async with (
        running(worker, redis),
        scheduling(redis, settings, every=3600) as store,
    ):
        with anyio.fail_after(WAIT_S):
            await started.wait()
        await store.remove("s1")
        release.set()
        await eventually(lambda: len(done) == 1)
        await eventually(lambda: _stream_empty(redis, settings))
    assert not await redis.exists(Keys(settings.prefix).schedule("s1"))


async def _stream_empty(redis: Redis, settings: Settings) -> bool:
    return int(await redis.xlen(Keys(settings.prefix).queue("default"))) == 0
