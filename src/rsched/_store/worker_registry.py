"""Redis access for the registry of live workers, and for asking them to cancel a running job.

Each worker writes its record ``{p}:worker:<id>`` (with a TTL) and its id in ``{p}:workers``
(docs/keys.md); a cancel goes to every worker on the ``{p}:cancel`` channel. The class is a part
of QueueStore (rsched._store.queues).
"""

from __future__ import annotations

from typing import cast

from rsched._core.codes import check
from rsched._core.workers import WorkerInfo, parse_worker
from rsched._redis import scripts


class WorkerRegistry(scripts.ScriptCaller):
    """The live workers of one partition."""

    async def register(self, worker_id: str, record: bytes, ttl_ms: int, prune_ms: int) -> int:
        """Write a worker's registry record (one round trip); returns the Redis time (ms)."""
        res = await self.call(
            "register",
            [self.keys.workers, self.keys.worker(worker_id)],
            [worker_id, record, ttl_ms, prune_ms],
        )
        check(res, script="register")
        return int(res[1])

    async def unregister(self, worker_id: str) -> None:
        """Remove a worker's registry entry at once (a clean stop)."""
        await self.call("unregister", [self.keys.workers, self.keys.worker(worker_id)], [worker_id])

    async def workers(self) -> list[WorkerInfo]:
        """Live workers (their record has not expired), by id."""
        ids = cast(
            list[tuple[str, float]],
            await self.redis.zrange(self.keys.workers, 0, -1, withscores=True),
        )
        if not ids:
            return []
        records = await self.redis.mget([self.keys.worker(str(i)) for i, _ in ids])
        out = []
        for (worker_id, score), raw in zip(ids, records, strict=True):
            info = parse_worker(raw, int(score)) if raw else None
            if info is not None and info.id == str(worker_id):
                out.append(info)
        return out

    async def cancel_running(self, execution_id: str, reason: str = "cancelled") -> int:
        """Ask the workers to cancel a running job (``<execution id> <reason>`` on the cancel
        channel; a worker of an older rsched ignores a message with a reason). Returns how many
        workers heard it."""
        return int(await self.redis.publish(self.keys.cancel, f"{execution_id} {reason}"))
