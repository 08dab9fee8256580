"""A small workload that goes through every script: a scheduler and a worker running together,
some schedules (paused, resumed, backfilled, parked and brought back), tasks that pass and fail."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
from redis.asyncio import Redis

import rsched
from rsched._core.keys import Keys
from rsched._core.settings import Settings
from rsched._redis.connection import connect
from rsched._scheduler.scheduler import Scheduler
from rsched._store import parking
from rsched._store.queues import QueueStore
from rsched._store.schedules import ScheduleStore


@asynccontextmanager
async def engine(settings: Settings, worker: rsched.Worker) -> AsyncIterator[Scheduler]:
    """A scheduler and ``worker`` running on their own connections."""
    redis = connect(settings)
    scheduler = Scheduler(redis, settings)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(scheduler.run)
            await tg.start(worker.run)
            try:
                yield scheduler
            finally:
                scheduler.stop()
                worker.stop()
    finally:
        await redis.aclose()


async def some_schedules(client: rsched.Client) -> None:
    """Schedules through the client's writes: ``a`` (t.ok every 0.2 s, buffer_one), ``m0``..``m2``
    (hourly; ``m0`` paused and resumed, ``m2`` backfilled over the last 3 hours)."""
    now = datetime.now(UTC)
    await client.add({"id": "a", "task": "t.ok", "every": 0.2, "overlap": "buffer_one"})
    await client.add_many([{"id": f"m{i}", "task": "t.ok", "every": 3600} for i in range(3)])
    await client.pause("m0")
    await client.resume("m0")
    await client.backfill("m2", now - timedelta(hours=3), now)


async def park_and_bring_back(store: ScheduleStore, lease: str) -> None:
    """Park the schedules due far off (the hourly ``m`` ones of :func:`some_schedules`), list
    them, and bring back one whose bucket's bound is made due (nothing in it is due yet)."""
    keys = store.keys
    assert await parking.park(store, lease)
    parked = await parking.buckets(store.redis, keys)
    assert parked
    listed = [sid for sid, _ in await parking.after(store, None, 100)]
    assert {"m0", "m1", "m2"} <= set(listed)
    assert (await parking.counts(store, await store.time_ms())).total >= 3
    await store.redis.zadd(keys.parked, {parked[0].rsplit(":", 1)[1]: 0})
    assert await parking.unpark(store, lease) == (0, None)


def ok_and_failing_tasks(worker: rsched.Worker, ran: list[str]) -> None:
    """Tasks ``t.ok`` (records its execution id in ``ran``) and ``t.fail`` (retried once, then
    a dead letter)."""

    @worker.task("t.ok")
    async def ok(job: rsched.Job) -> None:
        ran.append(job.execution_id)

    @worker.task("t.fail")
    async def fail(job: rsched.Job) -> None:
        if job.attempt == 1:
            raise rsched.Retry(delay_s=0.05)
        raise ValueError("boom")


def limited_task(worker: rsched.Worker, ran: list[str]) -> None:
    """Task ``t.limited``: one at a time per key ``tour:{n}``, a rate on top (limit_acquire,
    limit_resume, the release in complete)."""

    @worker.task("t.limited", limits=[rsched.Limit("tour:{n}", concurrency=1, rate="100/s")])
    async def limited(job: rsched.Job) -> None:
        ran.append(job.execution_id)
        await anyio.sleep(0.05)


async def limits_tour(client: rsched.Client, queues: QueueStore) -> None:
    """Every other limit script once, through the client and the store: overrides, the
    listing, a waiting job's cancel, renew, release, forwarding and the schedule's side of a
    forwarded run."""
    await client.set_limit("tour:*", concurrency=2)
    await client.set_limit("tour:1", rate="10/s")
    await client.limits()
    await client.limit("tour:1")
    await client.waiting("tour:1")
    await client.clear_limit("tour:*")
    await queues.cancel_limited("nobody")
    await queues.renew([("nobody", ["tour:1"])], 1000)
    await queues.release([("nobody", ["tour:1"])])
    await queues.forward(queues, "idle", "normal", [("0-1", "fwd-1", 1, {"task": "t.ok"})])
    await queues.drop("idle", "normal", ["0-1"])
    await queues.finish(
        "idle", "normal", "m1", execution_id="x", attempt=1, event="completed", extra="", over=True
    )
    await queues.finish(
        "idle", "normal", "m1", execution_id="y", attempt=1, event="dead", extra="", over=True,
        counted=True, error="E: boom",
    )  # fmt: skip


async def paused(client: rsched.Client, schedule_id: str) -> bool:
    return (await client.get(schedule_id)).paused


async def deadlines_and_failures(client: rsched.Client) -> None:
    """Jobs past their start deadline when a worker reads them (lua/expire.lua): an enqueued
    one, one holding limits, a schedule's; and a schedule that pauses after one dead run."""
    await client.enqueue("t.ok", start_deadline=0.001)
    await client.enqueue("t.limited", {"n": 2}, start_deadline=0.001)
    await client.add({"id": "late", "task": "t.ok", "every": 3600, "start_deadline": 0.001})
    await client.trigger("late")
    await client.add(
        {"id": "pf", "task": "t.fail", "every": 3600, "max_retries": 0, "pause_after_failures": 1}
    )
    await client.trigger("pf")


async def calendars_tour(client: rsched.Client) -> None:
    """A calendar that excludes every day (calendar_write) and a jittered, labelled schedule
    naming it: once a scheduler runs, its occurrences are recorded excluded (fire's exclude
    items), and their records indexed by its labels (the label index keys fire declares)."""
    await client.set_calendar(
        "tour-cal", weekdays=["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
    )
    await client.add(
        {"id": "excl", "task": "t.ok", "every": 0.2, "exclude": ["tour-cal"], "jitter": "50ms",
         "labels": {"tour": "l"}}
    )  # fmt: skip


async def excluded(client: rsched.Client) -> bool:
    """Whether an occurrence of the tour's schedule ``excl`` was recorded excluded."""
    return any(e.reason == "excluded" for e in (await client.history("excl")).items)


async def calendars_tour_end(client: rsched.Client) -> None:
    """The calendar removed once nothing names it (calendar_write's removal)."""
    await client.remove("excl")
    await client.remove_calendar("tour-cal")


async def labels_tour(client: rsched.Client) -> None:
    """Labelled schedules through every script that keeps the label index (upsert, upsert_many,
    remove) and its reads (select, list by labels; every_id and plan_fields for a task filter)."""
    await client.add({"id": "lab", "task": "t.ok", "every": 3600, "labels": {"team": "a"}})
    await client.update("lab", labels={"team": "b", "env": "prod"})
    await client.add_many(
        [{"id": f"lab-{i}", "task": "t.ok", "every": 3600, "labels": {"team": "b"}} for i in (1, 2)]
    )
    assert await client.select(labels={"team": "b"}) == ["lab", "lab-1", "lab-2"]
    assert len((await client.list(labels={"team": "b"}, task="t.ok")).items) == 3
    assert await client.select(labels={"team": "b"}, task="t.ok") == ["lab", "lab-1", "lab-2"]
    assert {"lab", "lab-1", "lab-2"} <= set(await client.select(task="t.ok"))  # every_id
    removed = await client.remove_many(["lab", "lab-1", "lab-2"])
    assert removed.count("removed") == 3
    # Labelled jobs through every script that logs a run (their records go into the runs log's
    # label index): a triggered schedule's (complete), a trigger its overlap policy skips
    # (trigger), a job superseded before it starts (start), a failing one's (retry, dead), a
    # late one's (expire) and a cancelled one's (cancel).
    tour = {"tour": "l"}
    await client.add({"id": "lab-run", "task": "t.ok", "every": 3600, "labels": tour})
    await client.trigger("lab-run")
    await client.trigger("lab-run")  # its run unfinished: skipped (overlap=skip)
    await client.add(
        {"id": "lab-sup", "task": "t.ok", "every": 3600, "labels": tour,
         "overlap": "cancel_previous"}
    )  # fmt: skip
    await client.trigger("lab-sup")
    await client.trigger("lab-sup")
    await client.enqueue("t.fail", max_retries=1, labels=tour)
    await client.enqueue("t.ok", start_deadline="1ms", labels=tour)
    queued = await client.enqueue("t.ok", queue="idle", labels=tour)
    await client.cancel(queued.execution_id)


async def labelled_runs(client: rsched.Client) -> bool:
    """Whether the labels tour's runs are found by label: completed, dead, expired, cancelled
    (by cancel, and superseded), skipped (by a trigger's overlap policy, and excluded: the
    calendars tour's)."""
    want: dict[str, set[str | None]] = {
        "completed": {None}, "dead": {None}, "expired": {None},
        "cancelled": {"cancelled", "superseded"}, "skipped": {"overlap", "excluded"},
    }  # fmt: skip
    for status, reasons in want.items():
        page = await client.runs(labels={"tour": "l"}, status=status, limit=200)
        if not reasons <= {r.reason for r in page.items}:
            return False
    return True


async def flows_tour(client: rsched.Client) -> list[str]:
    """Flows through every script that records a step's end (complete, dead with on_failure
    "continue", expire), a flow a schedule starts (its end ends the occurrence's run), and a
    cancelled flow whose waiting step is cancelled (flow_cancel, cancel); returns the flows'
    ids, for flows_ended."""
    flow = rsched.chain(
        rsched.step("t.ok"),
        rsched.group(
            rsched.step("t.fail", max_retries=0, on_failure="continue"),
            rsched.step("t.ok", start_deadline=0.001, on_failure="continue"),
        ),
        rsched.step("t.ok"),
    )
    ran = await client.run_flow(flow)
    await client.add({"id": "flowed", "every": 3600, "flow": {"chain": [{"step": "t.ok"}] * 2}})
    fired = await client.trigger("flowed")
    idle = await client.run_flow(
        rsched.chain(rsched.step("t.ok", queue="idle"), rsched.step("t.ok"))
    )
    assert await client.cancel_flow(idle.flow_id)
    return [ran.flow_id, fired.execution_id]


async def flows_ended(client: rsched.Client, flow_ids: list[str]) -> bool:
    for flow_id in flow_ids:
        try:
            if (await client.flow(flow_id)).state == "running":
                return False
        except rsched.FlowNotFound:  # a schedule's: its starter job has not run yet
            return False
    return True


async def stalled_flow(client: rsched.Client, redis: Redis, keys: Keys) -> str:
    """A flow whose step's job was removed by hand and whose last change is an hour old: the
    next retention sweep finds the step lost (lua/flow_sweep.lua) and fails the flow."""
    run = await client.run_flow(
        rsched.chain(rsched.step("t.ok", queue="idle"), rsched.step("t.ok"))
    )
    entries: Any = await redis.xrange(keys.queue("idle"))
    for entry_id, fields in entries:
        if fields.get("execution_id") == f"{run.flow_id}~1":
            await redis.xdel(keys.queue("idle"), entry_id)
    await redis.hset(keys.flow(run.flow_id), "at", "1")
    return run.flow_id
