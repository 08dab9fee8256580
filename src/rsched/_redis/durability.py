"""Writes confirmed by replicas: the ``durability`` setting (docs/durability.md).

With ``replicated``, a write rsched acknowledges (a client's write, a fire batch, a worker's ack) is
followed by ``WAIT replicas timeout``; with ``replicated_fsync`` by ``WAITAOF 1 replicas timeout``.
WAIT counts the replicas that hold the *connection's* last write, so it proves nothing on any other
connection: ScriptCaller sends the script and the WAIT together, on one connection it holds for both
replies (rsched._redis.scripts). On Redis Cluster that is a connection to the primary serving the
script's keys (every script touches one slot), the node whose replicas must confirm; a MOVED or ASK
sends both again where it points.

A shortfall cannot be undone (the primary has applied the write): a client raises
WriteNotReplicated, the scheduler and the worker log it and count it in
``rsched_writes_unreplicated_total{op}``.
"""

from __future__ import annotations

import argparse
from typing import Any, get_args

from redis.asyncio import Redis
from redis.exceptions import NoPermissionError

from rsched._core.errors import ServerError, WriteNotReplicated
from rsched._core.log import get_logger
from rsched._core.metrics import METRICS
from rsched._core.settings import DurabilityLevel as Level
from rsched._core.settings import Settings
from rsched._redis.cluster import is_cluster, per_primary

log = get_logger("rsched.durability")

#: The scripts whose writes rsched acknowledges to someone: the client's writes (and their bulk
#: forms), the scheduler's fires, the worker's outcomes (an ack lost in a failover runs the job
#: again). The lease, heartbeats and reads are left alone: a lost one costs no run.
CONFIRMED = frozenset(
    {
        # client
        "upsert", "upsert_many", "remove", "pause", "resume", "trigger", "backfill",
        "enqueue", "debounce", "requeue", "cancel", "limit_set", "limit_cancel",
        "calendar_write", "flow_create", "flow_cancel",
        # scheduler
        "fire",
        # worker
        "complete", "retry", "dead", "expire", "limit_acquire", "limit_resume", "forward",
    }
)  # fmt: skip
#: WAITAOF came with Redis 7.2 (Valkey reports redis_version 7.2.4 from its 8.0 on). The version
#: decides, from the INFO read anyway: redis-py fails to parse COMMAND INFO of a command the
#: server lacks.
WAITAOF_SINCE = (7, 2)


def durability_flag(parser: argparse.ArgumentParser, **kwargs: Any) -> None:
    """``--durability`` of rsched-scheduler, rsched-worker and the rsched command."""
    parser.add_argument(
        "--durability",
        choices=get_args(Level),
        help="what a write waits for: the primary's reply (async), replicas (replicated), "
        "their fsync too (replicated_fsync); RSCHED_DURABILITY, default async",
        **kwargs,
    )


class Durability:
    """What a confirmed write waits for, and what a shortfall does (raise, or log and count)."""

    def __init__(self, level: Level, replicas: int, timeout_ms: int, *, raises: bool) -> None:
        self.level = level
        self.replicas = replicas
        self.timeout_ms = timeout_ms
        self.raises = raises
        self.fsync = level == "replicated_fsync"
        wait = ["WAITAOF", "1"] if self.fsync else ["WAIT"]
        self.wait_args = [*wait, str(replicas), str(timeout_ms)]
        self._ready = False

    @classmethod
    def from_settings(cls, settings: Settings, *, raises: bool = True) -> Durability | None:
        """None for ``durability="async"`` (nothing waits)."""
        if settings.durability == "async":
            return None
        return cls(
            settings.durability,
            settings.durability_replicas,
            settings.durability_timeout_ms,
            raises=raises,
        )

    def confirms(self, script: str) -> bool:
        return script in CONFIRMED

    async def ready(self, redis: Redis) -> None:
        """Once, before the first confirmed write: refuse ``replicated_fsync`` on a server
        without WAITAOF or without AOF (raises ServerError, nothing written); warn when the
        server has fewer replicas than are waited for. On a cluster every primary is asked."""
        if self._ready:
            return
        try:
            infos = await per_primary(redis, "INFO") if is_cluster(redis) else [await redis.info()]
        except NoPermissionError as exc:
            # A client user of docs/security.md may not run INFO: every write is still judged
            # by its WAIT's reply (and WAITAOF is refused by a server without it or without AOF).
            log.info("durability.check_skipped", reason=str(exc))
            self._ready = True
            return
        for info in infos if self.fsync else ():
            version = str(info.get("redis_version", "0"))
            numbers = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
            if numbers < WAITAOF_SINCE:
                raise ServerError(
                    f"durability=replicated_fsync needs WAITAOF (Redis 7.2+, Valkey 8+); this "
                    f"server is Redis {version}: use durability=replicated, or upgrade the server"
                )
            if str(info.get("aof_enabled", "0")) != "1":
                raise ServerError(
                    "durability=replicated_fsync needs the append-only file on the primary "
                    "(WAITAOF waits for its fsync): set appendonly yes, or use "
                    "durability=replicated"
                )
        replicas = min(int(info.get("connected_slaves", 0) or 0) for info in infos)
        if replicas < self.replicas:
            log.warning(
                "durability.few_replicas",
                connected=replicas,
                wanted=self.replicas,
                effect="every confirmed write waits durability_timeout_ms and is reported",
            )
        self._ready = True

    def judge(self, op: str, reply: Any, *, unsure: bool = False) -> None:
        """Act on the reply of the WAIT that followed a write of script ``op``. ``unsure``: the
        connection was re-opened between the write and the WAIT, which then proves nothing
        (``reply`` is not read)."""
        if unsure:
            local, confirmed = 0, 0
        elif self.fsync:
            local, confirmed = (int(n) for n in reply)
        else:
            local, confirmed = 1, int(reply)
        if confirmed >= self.replicas and local >= 1:
            return
        if self.raises:
            what = "it"
            if self.fsync:
                what = "its fsync" + ("" if local else " (nor did the primary's own fsync)")
            raise WriteNotReplicated(op, confirmed, self.replicas, self.timeout_ms, what)
        log.warning(
            "write.unreplicated",
            op=op,
            confirmed=confirmed,
            wanted=self.replicas,
            local_fsync=local,
            timeout_ms=self.timeout_ms,
        )
        METRICS.writes_unreplicated.labels(op).inc()
