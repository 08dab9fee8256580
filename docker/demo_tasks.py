"""The demo's tasks, as a user's own tasks module would define them.

Workers load the worker object:       rsched-worker demo_tasks:worker
Running the module adds the schedules: python -m demo_tasks   (an upsert: safe to repeat)
"""

from __future__ import annotations

import asyncio
import random
import time
from datetime import UTC, datetime, timedelta

import rsched

worker = rsched.Worker(queues=["default", "reports"], concurrency=10)


@worker.task("demo.tick")
async def tick(job: rsched.Job) -> None:
    """A short async job: every five seconds."""
    await asyncio.sleep(0.05)
    print(f"tick {job.execution_id} scheduled_at={job.scheduled_at}", flush=True)


@worker.task("demo.report")
def report(job: rsched.Job) -> None:
    """A blocking function runs in a worker thread and does not hold up the others."""
    time.sleep(random.uniform(0.2, 1.0))
    print(f"report {job.payload.get('kind')} done ({job.execution_id})", flush=True)


@worker.task("demo.flaky")
async def flaky(job: rsched.Job) -> None:
    """Fails every attempt: retried with backoff, then lands in the dead-letter stream."""
    raise RuntimeError(f"demo failure on attempt {job.attempt}")


def schedules() -> list[rsched.Schedule]:
    now = datetime.now(UTC)
    return [
        rsched.Schedule(id="demo-tick", task="demo.tick", cron="*/5 * * * * *"),
        rsched.Schedule(
            id="demo-report",
            task="demo.report",
            queue="reports",
            every=20,
            start_at=now + timedelta(seconds=5),
            payload={"kind": "sales"},
        ),
        rsched.Schedule(id="demo-once", task="demo.tick", at=now + timedelta(seconds=30)),
        rsched.Schedule(
            id="demo-flaky",
            task="demo.flaky",
            every=60,
            start_at=now + timedelta(seconds=10),
            max_retries=2,
            retry_base_s=2,
            retry_jitter=0,
        ),
    ]


async def seed() -> None:
    # URL and prefix from RSCHED_REDIS_URL / RSCHED_PREFIX, as for the other processes.
    async with rsched.Client.from_url() as client:
        for schedule in schedules():
            await client.upsert(schedule)
            print(f"upserted {schedule.id}", flush=True)


if __name__ == "__main__":
    asyncio.run(seed())
