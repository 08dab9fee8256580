"""Runs of labelled schedules: fired, triggered and backfilled jobs carry their schedule's
labels, and their runs are found by them (docs/labels.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
from redis.asyncio import Redis

from rsched import Client, Job, Settings, Worker
from rsched._core.keys import Keys
from tests.support.schedulers import jobs, scheduling
from tests.support.waiting import eventually
from tests.support.worker_app import fast_settings


async def _queued(redis: Redis, prefix: str) -> dict[str, dict[str, str]]:
    entries: Any = await redis.xrange(Keys(prefix).queue("default"))
    return {fields["execution_id"]: fields for _, fields in entries}


async def test_fired_jobs_carry_their_schedules_labels(
    redis: Redis, settings: Settings, prefix: str
) -> None:
    client = Client(redis, settings)
    await client.add({"id": "plain", "task": "t", "every": 3600})
    labels = {"team": "a", "env": "prod"}
    async with scheduling(redis, settings, every=3600, overlap="allow", labels=labels) as store:
        await eventually(lambda: _fired(store))
    fired = (await jobs(store))[0]
    assert fired["schedule_id"] == "s1"
    assert fired["labels"] == "env=prod,team=a"
    await client.trigger("plain")
    await client.trigger("s1")
    now = datetime.now(UTC)
    await client.backfill("s1", now - timedelta(hours=3), now - timedelta(minutes=1))
    queued = await _queued(redis, prefix)
    plain = [f for f in queued.values() if f["schedule_id"] == "plain"]
    assert len(plain) == 1
    assert "labels" not in plain[0]  # no labels: no field
    labelled = [f for f in queued.values() if f["schedule_id"] == "s1"]
    assert len(labelled) >= 3  # fired, triggered, backfilled
    assert {f["origin"] for f in labelled} >= {"schedule", "manual", "backfill"}
    assert all(f["labels"] == "env=prod,team=a" for f in labelled)

    worker = Worker(queues=["default"], settings=fast_settings(settings))
    ran: list[str] = []

    @worker.task("t")
    async def handle(job: Job) -> None:
        ran.append(job.execution_id)

    async with anyio.create_task_group() as tg:
        await tg.start(worker.run, None)
        await eventually(lambda: len(ran) == len(queued))
        worker.stop()
    want = {f["execution_id"] for f in labelled}
    await eventually(lambda: _ran_by_label(client, want))
    page = await client.runs(labels={"team": "a"}, status="completed")
    assert all(r.labels == {"env": "prod", "team": "a"} for r in page.items)
    assert all(r.schedule_id == "s1" for r in page.items)


async def _fired(store: Any) -> bool:
    return len(await jobs(store)) >= 1


async def _ran_by_label(client: Client, want: set[str]) -> bool:
    page = await client.runs(labels={"team": "a"}, status="completed", limit=100)
    return {r.execution_id for r in page.items} == want
