"""What an operator sees of a running scheduler or worker: readiness, the deployment gauges and
the probe that serves them with the metrics (``--metrics-port``).

Every process, scheduler or worker, leading or not, reads the deployment gauges for itself every
``metrics_interval_s`` (a few cheap reads per partition and queue): an alert on late schedules
or on jobs that no worker reads must not need the leader to be alive, since its death is one of
the outages they are for. Only the schedules by state, whose count reads every paused one, come
from the leader of partition 0 alone.

The mains start :func:`operate_scheduler` / :func:`operate_worker` in their task groups. Each
opens its own small Redis client, so a readiness check or a gauge read never queues behind the
process's own traffic (a worker's blocking reads), and reports what that client sees.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import anyio
from anyio.abc import TaskStatus
from redis.asyncio import Redis
from redis.exceptions import RedisError

from rsched._core.keys import Keys
from rsched._core.log import get_logger
from rsched._core.metrics import METRICS, Deployment
from rsched._core.settings import Settings
from rsched._ops import probe as _probe
from rsched._ops.health import announced_counts
from rsched._redis import scripts as _lua
from rsched._redis.connection import connect
from rsched._scheduler.scheduler import Scheduler
from rsched._store.queues import QueueStore
from rsched._store.schedules import ScheduleStore
from rsched._worker.worker import Worker

log = get_logger("rsched.metrics")

# The scripts each process needs: /readyz loads any the server lacks (after a restart without
# persistence the server forgets them; redis-py would reload one only at its next call).
SCHEDULER_SCRIPTS = (
    "lease_acquire", "lease_renew", "lease_release", "scheduler_beat", "due", "plan_fields", "fire",
)  # fmt: skip
WORKER_SCRIPTS = (
    "take", "start", "complete", "retry", "dead", "heartbeat", "reclaim", "promote",
)  # fmt: skip


async def operate_scheduler(
    scheduler: Scheduler, settings: Settings, *, task_status: TaskStatus[int]
) -> None:
    """Serve the scheduler's probe, and its deployment gauges while it leads."""
    assert settings.metrics_port is not None
    redis = connect(settings, socket_timeout_s=_probe.READY_TIMEOUT_S)
    METRICS.serve("scheduler")
    METRICS.is_leader.set_function(lambda: float(scheduler.is_leader))
    METRICS.led_partitions.set_function(lambda: float(len(scheduler.led())))
    METRICS.partitions.set_function(lambda: float(scheduler.partitions))

    async def ready() -> tuple[bool, dict[str, Any]]:
        return await scheduler_readiness(scheduler, redis)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                watch_deployment,
                redis,
                settings,
                lambda: scheduler.keys,
                lambda: scheduler.leads(0),
            )
            port = await tg.start(_probe.serve, settings.metrics_host, settings.metrics_port, ready)
            task_status.started(port)
    finally:
        with anyio.CancelScope(shield=True):
            await redis.aclose()


async def operate_worker(
    worker: Worker, settings: Settings, *, task_status: TaskStatus[int]
) -> None:
    """Serve the worker's probe."""
    assert settings.metrics_port is not None
    redis = connect(settings, socket_timeout_s=_probe.READY_TIMEOUT_S)
    keys = Keys(settings.prefix)
    METRICS.serve("worker", tasks=worker.tasks, queues=settings.worker.queues)

    async def ready() -> tuple[bool, dict[str, Any]]:
        return await worker_readiness(worker, redis, keys, settings.worker.queues)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                watch_deployment,
                redis,
                settings,
                lambda: Keys(settings.prefix, worker.partitions),
                lambda: False,
            )
            port = await tg.start(_probe.serve, settings.metrics_host, settings.metrics_port, ready)
            task_status.started(port)
    finally:
        with anyio.CancelScope(shield=True):
            await redis.aclose()


# --- readiness ---------------------------------------------------------------------------------


async def scheduler_readiness(scheduler: Scheduler, redis: Redis) -> tuple[bool, dict[str, Any]]:
    """Ready when Redis answers, the scripts are loaded, the scheduler runs (its start-up, which
    may wait for Redis and sync a schedules file, is over) and it leads with a fresh lease or
    stands by with a live leader in view (with several partitions: every lease it believes it
    holds is its own and live)."""
    failed = await _redis_and_scripts(redis, SCHEDULER_SCRIPTS)
    if failed is not None:
        return False, failed
    if not scheduler.running:
        return False, {"role": "starting", "reason": "starting (waiting for Redis, or syncing)"}
    if scheduler.partitions > 1:
        return await _partitions_readiness(scheduler, redis)
    keys = scheduler.keys
    async with redis.pipeline(transaction=False) as pipe:
        pipe.get(keys.leader)
        pipe.pttl(keys.leader)
        lease, pttl = await pipe.execute()
    holder = str(lease).partition(":")[2] if lease else None
    leads = scheduler.is_leader
    if holder == scheduler.owner and int(pttl) > 0:
        return True, {"role": "leader", "lease_left_ms": int(pttl)}
    if leads:
        return False, {
            "role": "leader",
            "reason": f"this scheduler holds no live lease (the lease is {holder or 'free'}); "
            "it steps down at its next renewal",
        }
    if holder is None:
        return False, {
            "role": "standby",
            "reason": "no leader: the lease is free (an election is due at the next renewal)",
        }
    return True, {"role": "standby", "leader": holder, "lease_left_ms": int(pttl)}


async def _partitions_readiness(scheduler: Scheduler, redis: Redis) -> tuple[bool, dict[str, Any]]:
    led = scheduler.led()
    details: dict[str, Any] = {
        "role": "leader" if led else "standby",
        "partitions": scheduler.partitions,
        "led": led,
    }
    if not led:
        return True, details
    async with redis.pipeline(transaction=False) as pipe:
        for k in led:
            pipe.get(scheduler.keys.for_partition(k).leader)
        leases = await pipe.execute()
    lost = [k for k, lease in zip(led, leases, strict=True) if lease != scheduler.engines[k].held]
    if lost:
        details["reason"] = (
            f"this scheduler holds no live lease of partition(s) {','.join(map(str, lost))}; "
            "it steps down at its next renewal"
        )
        return False, details
    return True, details


async def worker_readiness(
    worker: Worker, redis: Redis, keys: Keys, queues: Sequence[str]
) -> tuple[bool, dict[str, Any]]:
    """Ready when Redis answers, the scripts are loaded, the worker reads its queues and each
    queue's consumer group exists (in every partition)."""
    failed = await _redis_and_scripts(redis, WORKER_SCRIPTS)
    if failed is not None:
        return False, failed
    if not worker.reading:
        reason = "stopping" if worker.stopping else "starting (waiting for Redis or its groups)"
        return False, {"reason": reason}
    stores = [QueueStore(redis, k) for k in Keys(keys.prefix, worker.partitions).every_partition()]
    missing = [q for q in queues if not all([await store.has_group(q) for store in stores])]
    if missing:
        return False, {"reason": f"no consumer group on queue(s) {', '.join(missing)}"}
    return True, {"queues": list(queues)}


async def _redis_and_scripts(redis: Redis, names: Sequence[str]) -> dict[str, Any] | None:
    """None when Redis answers and holds every script in ``names`` (loading any it lacks),
    else the reason for /readyz."""
    try:
        await redis.ping()
    except (RedisError, OSError) as exc:
        return {"reason": f"redis does not answer: {exc}"}
    caller = _lua.ScriptCaller(redis)
    try:
        loaded = await caller.ensure_loaded(names)
    except (RedisError, OSError) as exc:
        return {"reason": f"scripts cannot be loaded: {exc}"}
    if loaded:
        log.info("metrics.scripts_loaded", scripts=",".join(loaded))
    return None


# --- the gauges of the whole deployment --------------------------------------------------------


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
