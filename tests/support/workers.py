"""Workers for the tests: one running in-process for a block (in the test's event loop, or in
a thread of its own for plain tests), a worker process started and ready, and whether a queue
is settled."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio
from redis.asyncio import Redis

import rsched
from rsched._core.keys import GROUP, Keys
from rsched._core.settings import Settings
from rsched._store.queues import QueueStore
from tests.support.processes import Proc
from tests.support.worker_app import fast_env, fast_settings


@asynccontextmanager
async def running(worker: rsched.Worker, redis: Redis | None) -> AsyncIterator[rsched.Worker]:
    async with anyio.create_task_group() as tg:
        await tg.start(worker.run, redis)
        try:
            yield worker
        finally:
            worker.stop()


def store_for(redis: Redis, settings: Settings) -> QueueStore:
    return QueueStore(redis, Keys(settings.prefix))


async def settled(redis: Redis, settings: Settings, queue: str = "default") -> bool:
    """Nothing left in the stream and nothing pending: every entry was acknowledged."""
    key = Keys(settings.prefix).queue(queue)
    pending = await redis.xpending(key, GROUP)
    return int(await redis.xlen(key)) == 0 and int(pending["pending"]) == 0


def start_worker(spawn: Callable[..., Proc], settings: Settings, **env: str) -> Proc:
    """An ``rsched-worker`` process of tests.support.worker_app on the default queue (fast
    timings, ``env`` on top), once it has started."""
    proc = spawn(
        "rsched._cli.worker_process",
        "tests.support.worker_app:worker",
        "--queues",
        "default",
        "--concurrency",
        "4",
        env=fast_env(settings, **env),
    )
    proc.wait_for("event=worker.start")
    return proc


@contextmanager
def worker_thread(settings: Settings, **fields: Any) -> Iterator[rsched.Worker]:
    """An in-process worker on ``default`` running ``web.wait`` (sleeps ``payload["s"]``
    seconds) and ``web.steps`` (``payload["n"]`` steps of ``payload["s"]`` seconds, each with
    its progress and a log line), on an event loop of its own thread; stopped on exit."""
    import anyio.from_thread

    worker = rsched.Worker(settings=fast_settings(settings, **fields))

    @worker.task("web.wait")
    async def wait(job: rsched.Job) -> None:
        await anyio.sleep(float(job.payload.get("s", 60)))

    @worker.task("web.steps")
    async def steps(job: rsched.Job) -> None:
        n = int(job.payload.get("n", 3))
        for i in range(n):
            job.set_progress(i / n, f"step {i} of {n}")
            job.log(f"step {i}")
            await anyio.sleep(float(job.payload.get("s", 0.5)))
        job.set_progress(1.0, "done")

    with anyio.from_thread.start_blocking_portal() as portal:
        future, _ = portal.start_task(worker.run, None)
        try:
            yield worker
        finally:
            portal.call(worker.stop)
            future.result(timeout=30)
