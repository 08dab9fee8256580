"""What an operator sees of a running scheduler or worker: readiness, the leader's gauges of the
whole deployment, and the probe that serves them with the metrics (``--metrics-port``).

The mains start :func:`operate_scheduler` / :func:`operate_worker` in their task groups. Each
opens its own small Redis client, so a readiness check never queues behind the process's own
traffic (a worker's blocking reads), and reports what that client sees.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import anyio
from anyio.abc import TaskStatus
from redis.asyncio import Redis
from redis.exceptions import RedisError

from rsched import _lua, _probe
from rsched._connection import connect
from rsched._health import announced_counts
from rsched._keys import Keys
from rsched._log import get_logger
from rsched._metrics import METRICS, Deployment
from rsched._queues import QueueStore
from rsched._scheduler import Scheduler
from rsched._settings import Settings
from rsched._store import ScheduleStore
from rsched._worker import Worker

log = get_logger("rsched.metrics")

# The scripts each process needs: /readyz loads any the server lacks (after a restart without
# persistence the server forgets them; redis-py would reload one only at its next call).
SCHEDULER_SCRIPTS = ("lease_acquire", "lease_renew", "lease_release", "due", "policies", "fire")
WORKER_SCRIPTS = (
    "take", "start", "complete", "retry", "dead", "heartbeat", "reclaim", "promote",
)  # fmt: skip


async def operate_scheduler(
    scheduler: Scheduler, settings: Settings, *, task_status: TaskStatus[int]
) -> None:
    """Serve the scheduler's probe, and its deployment gauges while it leads."""
    assert settings.metrics_port is not None
    redis = connect(settings, socket_timeout_s=_probe.READY_TIMEOUT_S)
    METRICS.is_leader.set_function(lambda: float(scheduler.is_leader))

    async def ready() -> tuple[bool, dict[str, Any]]:
        return await scheduler_readiness(scheduler, redis)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(deployment_gauges, scheduler, settings)
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

    async def ready() -> tuple[bool, dict[str, Any]]:
        return await worker_readiness(worker, redis, keys, settings.worker.queues)

    try:
        await _probe.serve(
            settings.metrics_host, settings.metrics_port, ready, task_status=task_status
        )
    finally:
        with anyio.CancelScope(shield=True):
            await redis.aclose()


# --- readiness ---------------------------------------------------------------------------------


async def scheduler_readiness(scheduler: Scheduler, redis: Redis) -> tuple[bool, dict[str, Any]]:
    """Ready when Redis answers, the scripts are loaded and the scheduler leads with a fresh
    lease or stands by with a live leader in view."""
    failed = await _redis_and_scripts(redis, SCHEDULER_SCRIPTS)
    if failed is not None:
        return False, failed
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


async def worker_readiness(
    worker: Worker, redis: Redis, keys: Keys, queues: Sequence[str]
) -> tuple[bool, dict[str, Any]]:
    """Ready when Redis answers, the scripts are loaded, the worker reads its queues and each
    queue's consumer group exists."""
    failed = await _redis_and_scripts(redis, WORKER_SCRIPTS)
    if failed is not None:
        return False, failed
    if not worker.reading:
        reason = "stopping" if worker.stopping else "starting (waiting for Redis or its groups)"
        return False, {"reason": reason}
    store = QueueStore(redis, keys)
    missing = [q for q in queues if not await store.has_group(q)]
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


# --- the leader's gauges of the whole deployment ----------------------------------------------


async def deployment_gauges(scheduler: Scheduler, settings: Settings) -> None:
    """Every ``metrics_interval_s``, while this scheduler leads, read the deployment's counts
    (the same cheap reads as ``rsched stats``) into the gauges; a standby exports none."""
    queues = QueueStore.from_settings(scheduler.redis, settings)
    try:
        while True:
            current = None
            if scheduler.is_leader:
                try:
                    current = await read_deployment(
                        scheduler.store, queues, settings.metrics_late_after_s
                    )
                except (RedisError, OSError) as exc:
                    log.warning("redis.error", actor="metrics", error=str(exc))
            METRICS.deployment.current = current
            await anyio.sleep(settings.metrics_interval_s)
    finally:
        METRICS.deployment.current = None


async def read_deployment(
    store: ScheduleStore, queues: QueueStore, late_after_s: float
) -> Deployment:
    """The deployment's counts now (by Redis TIME)."""
    started = time.perf_counter()
    now = await store.time_ms()
    index = await store.index_stats(now)
    late = await store.count_due_before(now - round(late_after_s * 1000))
    unhealthy = await announced_counts(store.redis, store.keys)
    unhealthy["late"] = late
    stats = await queues.queue_stats()
    for worker in await queues.workers():
        for name in worker.queues:
            stats.setdefault(name, {})
            stats[name]["workers"] = int(stats[name].get("workers") or 0) + 1
    deployment = Deployment(
        due_backlog=index.due,
        due_oldest_age_s=max(0, now - index.oldest[1]) / 1000 if index.oldest else 0.0,
        schedules={
            "active": index.active,
            "paused": index.paused,
            "completed": max(0, index.total - index.active - index.paused),
        },
        unhealthy=unhealthy,
        queues={
            name: {key: int(fields.get(key) or 0) for key in _QUEUE_FIELDS}
            for name, fields in stats.items()
        },
    )
    log.debug("metrics.deployment", took_ms=round((time.perf_counter() - started) * 1000, 1))
    return deployment


_QUEUE_FIELDS = ("length", "pending", "delayed", "dead", "workers")
