"""What the demo runs: four schedules and a worker with their handlers."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta

import anyio

from rsched._core.job import Job
from rsched._core.schedule import Schedule
from rsched._core.settings import (
    Settings,
)
from rsched._worker.worker import Worker

# Its own queue: pointed at a Redis that real workers use, the demo never takes their jobs.
QUEUE = "demo"
FLAKY_RETRIES = 2
FLAKY_RETRY_S = 1.0


def demo_schedules(now: datetime) -> list[Schedule]:
    """The four demo schedules, timed so that each has something to show within ~6 s."""
    return [
        Schedule(
            id="demo-tick",
            queue=QUEUE,
            task="demo.tick",
            cron="*/5 * * * * *",
            description="a short async job",
        ),
        Schedule(
            id="demo-report",
            queue=QUEUE,
            task="demo.report",
            every=7,
            start_at=now + timedelta(seconds=2),
            payload={"kind": "sales"},
            description="a blocking function, run in a worker thread",
        ),
        Schedule(
            id="demo-once",
            queue=QUEUE,
            task="demo.hello",
            at=now + timedelta(seconds=6),
            payload={"name": "world"},
            description="a one-off job",
        ),
        Schedule(
            id="demo-flaky",
            queue=QUEUE,
            task="demo.flaky",
            every=30,
            start_at=now + timedelta(seconds=1),
            max_retries=FLAKY_RETRIES,
            retry_base_s=FLAKY_RETRY_S,
            retry_multiplier=1,
            retry_jitter=0,
            description=f"always fails: {FLAKY_RETRIES} retries, then a dead letter",
        ),
    ]


def demo_worker(settings: Settings, say: Callable[[Job, str, str], None]) -> Worker:
    """A worker with the demo's handlers: async ones, a blocking one, one that always fails.

    ``say(job, label, text)`` prints a line among the narration (a handler's own output).
    """
    worker = Worker(queues=[QUEUE], concurrency=settings.worker.concurrency, settings=settings)

    @worker.task("demo.tick")
    async def tick(job: Job) -> None:
        await anyio.sleep(0.05)

    @worker.task("demo.report")
    def report(job: Job) -> None:
        time.sleep(0.3)  # blocking work: runs in a worker thread, the event loop stays free

    @worker.task("demo.hello")
    async def hello(job: Job) -> None:
        say(job, "says", f"hello, {job.payload.get('name')}!")

    @worker.task("demo.flaky")
    async def flaky(job: Job) -> None:
        raise RuntimeError(f"the demo's failing job, attempt {job.attempt}")

    return worker
