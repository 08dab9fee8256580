"""What an operator sees of a running scheduler: its probe (``--metrics-port``: ``/metrics``,
``/livez``, ``/readyz``), its readiness, and the deployment gauges it reads like every process.

``rsched-scheduler`` starts :func:`operate_scheduler` in its task group. It opens its own small
Redis client, so a readiness check or a gauge read never queues behind the scheduler's own
traffic, and reports what that client sees.
"""

from __future__ import annotations

import functools
from typing import Any

from anyio.abc import TaskStatus
from redis.asyncio import Redis

from rsched._core.metrics import METRICS
from rsched._core.settings import Settings
from rsched._ops import probe
from rsched._scheduler.scheduler import Scheduler

# The scripts a scheduler needs: /readyz loads any the server lacks (after a restart without
# persistence the server forgets them; redis-py would reload one only at its next call).
SCHEDULER_SCRIPTS = (
    "lease_acquire", "lease_renew", "lease_release", "scheduler_beat", "due", "plan_fields", "fire",
)  # fmt: skip


async def operate_scheduler(
    scheduler: Scheduler, settings: Settings, *, task_status: TaskStatus[int]
) -> None:
    """Serve the scheduler's probe, and the deployment gauges (the schedules by state too while it
    leads partition 0)."""
    METRICS.serve("scheduler")
    METRICS.is_leader.set_function(lambda: float(scheduler.is_leader))
    METRICS.led_partitions.set_function(lambda: float(len(scheduler.led())))
    METRICS.partitions.set_function(lambda: float(scheduler.partitions))
    await probe.operate(
        settings,
        functools.partial(scheduler_readiness, scheduler),
        lambda: scheduler.keys,
        lambda: scheduler.leads(0),
        task_status=task_status,
    )


async def scheduler_readiness(scheduler: Scheduler, redis: Redis) -> tuple[bool, dict[str, Any]]:
    """Ready when Redis answers, the scripts are loaded, the scheduler runs (its start-up, which
    may wait for Redis and sync a schedules file, is over) and it leads with a fresh lease or
    stands by with a live leader in view (with several partitions: every lease it believes it
    holds is its own and live)."""
    failed = await probe.redis_and_scripts(redis, SCHEDULER_SCRIPTS)
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
