"""In-process workers for the tests: one running for a block, and whether its queue is settled."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from redis.asyncio import Redis

import rsched
from rsched._core.keys import GROUP, Keys
from rsched._core.settings import Settings
from rsched._store.queues import QueueStore


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
