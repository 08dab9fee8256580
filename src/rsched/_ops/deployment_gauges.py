"""The deployment's gauges that every process, scheduler or worker, leading or not, reads for
itself every ``metrics_interval_s`` (a few cheap reads per partition and queue): an alert on late
schedules or on jobs that no worker reads must not need the leader to be alive, since its death
is one of the outages they are for. Only the schedules by state, whose count reads every paused
one, come from the leader of partition 0 alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import anyio
from redis.asyncio import Redis
from redis.exceptions import RedisError

from rsched._core.keys import Keys
from rsched._core.log import get_logger
from rsched._core.metrics import METRICS, Deployment
from rsched._core.settings import Settings
from rsched._ops.health import announced_counts
from rsched._store.queues import QueueStore
from rsched._store.schedules import ScheduleStore

log = get_logger("rsched.metrics")


async def watch_deployment(
    redis: Redis,
    settings: Settings,
    keys: Callable[[], Keys],
    leads: Callable[[], bool],
) -> None:
    """Every ``metrics_interval_s``, read the deployment's gauges over every partition of
    ``keys()`` (the schedules by state too while ``leads()``: the leader of partition 0) and
    whether Redis answered (``rsched_redis_up``). While Redis does not answer, the deployment
    gauges are not exported: this process cannot know them."""
    up: bool | None = None
    try:
        while True:
            try:
                current = await read_deployment(redis, settings, keys(), states=leads())
            except (RedisError, OSError) as exc:
                current = None
                if up is not False:
                    log.warning("redis.error", actor="metrics", error=str(exc))
            if up is not (current is not None):
                up = current is not None
                METRICS.redis_up.set(1 if up else 0)
            METRICS.deployment.current = current
            await anyio.sleep(settings.metrics_interval_s)
    finally:
        METRICS.deployment.current = None


async def read_deployment(
    redis: Redis, settings: Settings, keys: Keys, *, states: bool
) -> Deployment:
    """The deployment's gauges now (by Redis TIME), summed over the partitions of ``keys``; the
    schedules by state only with ``states`` (it reads every paused or completed schedule)."""
    started = time.perf_counter()
    every = keys.every_partition()
    stores = [ScheduleStore(redis, k) for k in every]
    now = await stores[0].time_ms()
    late_before = now - round(settings.metrics_late_after_s * 1000)
    due = late = 0
    oldest: int | None = None
    unhealthy: dict[str, int] = {}
    for store in stores:
        summary = await store.due_summary(now, late_before)
        due, late = due + summary.due, late + summary.late
        if summary.oldest_ms is not None and (oldest is None or summary.oldest_ms < oldest):
            oldest = summary.oldest_ms
        for state, count in (await announced_counts(redis, store.keys)).items():
            unhealthy[state] = unhealthy.get(state, 0) + count
    unhealthy["late"] = late
    queue_stores = [QueueStore.from_settings(redis, settings, k) for k in every]
    queues: dict[str, dict[str, int]] = {}
    for queue_store in queue_stores:
        for name, fields in (await queue_store.queue_stats()).items():
            sums = queues.setdefault(name, dict.fromkeys(_QUEUE_FIELDS, 0))
            for key in _QUEUE_FIELDS:
                sums[key] += int(fields.get(key) or 0)
    for worker in await queue_stores[0].workers():  # the registry is the deployment's
        for name in worker.queues:
            queues.setdefault(name, dict.fromkeys(_QUEUE_FIELDS, 0))["workers"] += 1
    deployment = Deployment(
        due_backlog=due,
        due_oldest_age_s=max(0, now - oldest) / 1000 if oldest is not None else 0.0,
        unhealthy=unhealthy,
        queues=queues,
        schedules=await _schedule_states(stores, now) if states else None,
        limits=await queue_stores[0].limit_counts(),
    )
    log.debug("metrics.deployment", took_ms=round((time.perf_counter() - started) * 1000, 1))
    return deployment


async def _schedule_states(stores: Sequence[ScheduleStore], now: int) -> dict[str, int]:
    active = paused = total = 0
    for store in stores:
        index = await store.index_stats(now)
        active, paused, total = active + index.active, paused + index.paused, total + index.total
    return {"active": active, "paused": paused, "completed": max(0, total - active - paused)}


_QUEUE_FIELDS = ("length", "pending", "delayed", "dead", "workers")
