"""What an operator sees of a running worker: its probe (``--metrics-port``: ``/metrics``,
``/livez``, ``/readyz``), its readiness, and the deployment gauges it reads like every process.

``rsched-worker`` starts :func:`operate_worker` in its task group. It opens its own small Redis
client, so a readiness check or a gauge read never queues behind the worker's blocking reads,
and reports what that client sees.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from anyio.abc import TaskStatus
from redis.asyncio import Redis

from rsched._core.keys import Keys
from rsched._core.metrics import METRICS
from rsched._core.settings import Settings
from rsched._ops import probe
from rsched._store.queues import QueueStore
from rsched._worker.worker import Worker

# The scripts a worker needs: /readyz loads any the server lacks (after a restart without
# persistence the server forgets them; redis-py would reload one only at its next call).
WORKER_SCRIPTS = (
    "take", "start", "complete", "retry", "dead", "heartbeat", "reclaim", "promote",
    "limit_acquire", "limit_resume", "limit_renew",
)  # fmt: skip


async def operate_worker(
    worker: Worker, settings: Settings, *, task_status: TaskStatus[int]
) -> None:
    """Serve the worker's probe, and the deployment gauges."""
    METRICS.serve(
        "worker",
        tasks=worker.tasks,
        queues=settings.worker.queues,
        limits=worker.limit_templates,
    )

    async def ready(redis: Redis) -> tuple[bool, dict[str, Any]]:
        return await worker_readiness(worker, redis, Keys(settings.prefix), settings.worker.queues)

    await probe.operate(
        settings,
        ready,
        lambda: Keys(settings.prefix, worker.partitions),
        lambda: False,
        task_status=task_status,
    )


async def worker_readiness(
    worker: Worker, redis: Redis, keys: Keys, queues: Sequence[str]
) -> tuple[bool, dict[str, Any]]:
    """Ready when Redis answers, the scripts are loaded, the worker reads its queues and each
    queue's consumer group exists (in every partition)."""
    failed = await probe.redis_and_scripts(redis, WORKER_SCRIPTS)
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
