"""Private Redis Cluster / Valkey cluster processes for the test suite.

Three primaries (optionally each with one replica) joined by rsched._devtools.embedded_cluster,
every node a :class:`servers.Server` with cluster mode on, on free loopback ports.

Faults for tests: :meth:`Cluster.fail_over` (kill the primary of a slot; its replica takes over)
and :meth:`Cluster.migrate_slot` (move a slot's keys to another primary in batches while clients
run, as ``redis-cli --cluster reshard`` does).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
import redis
from redis.asyncio import Redis as AsyncRedis
from redis.crc import key_slot

from rsched._devtools.embedded_cluster import EmbeddedCluster
from tests.support.servers import Server
from tests.support.waiting import WAIT_S

__all__ = ["Cluster", "slot_of", "sync_client"]


def slot_of(key: str) -> int:
    return int(key_slot(key.encode()))


def sync_client(url: str, *, cluster: bool) -> redis.Redis | redis.RedisCluster:
    """A decoded blocking client of ``url``: a cluster client when ``cluster``."""
    if cluster:
        return redis.RedisCluster.from_url(url, decode_responses=True)
    return redis.Redis.from_url(url, decode_responses=True)


async def _on(node: Server, *args: Any) -> Any:
    async with AsyncRedis(host="127.0.0.1", port=node.port, decode_responses=True) as client:
        return await client.execute_command(*args)  # type: ignore[no-untyped-call]


class Cluster(EmbeddedCluster[Server]):
    """rsched._devtools.embedded_cluster's cluster of ``kind`` whose nodes are servers.Server (kill,
    pause, restart), with the faults tests inject."""

    def __init__(self, kind: str, *, replicas: bool = False) -> None:
        super().__init__(lambda args: Server(kind, extra_args=args), replicas=replicas)
        self.kind = kind

    def close(self) -> None:
        for node in self.nodes:
            node.close()
        self.nodes = []

    # --- faults -----------------------------------------------------------------------------

    def fail_over(self, slot: int, timeout_s: float = WAIT_S) -> tuple[Server, Server]:
        """Kill the primary of ``slot`` and wait until its replica serves it (and every
        surviving node agrees): returns (killed primary, new primary)."""
        old = self.owner(slot)
        old.kill()
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                new = self.owner(slot)
                if new is not old and new.running() and self.ready():
                    return old, new
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"no replica took over slot {slot} within {timeout_s:g} s")
            time.sleep(0.05)

    async def migrate_slot(
        self,
        slot: int,
        target: Server,
        *,
        batch: int = 50,
        pause_s: float = 0.0,
        between: Callable[[], Awaitable[None]] | None = None,
        first: Sequence[str] = (),
    ) -> int:
        """Move ``slot`` to the primary ``target`` while clients run; returns how many keys
        moved. Keys go ``batch`` at a time with MIGRATE, ``pause_s`` (and ``between()``)
        apart, so clients meet the slot half moved (ASK, TRYAGAIN) and then moved (MOVED).
        The keys ``first`` move first, alone."""
        source = self.owner(slot)
        if source is target:
            return 0
        source_id, target_id = self.node_id(source), self.node_id(target)
        await _on(target, "CLUSTER SETSLOT", slot, "IMPORTING", source_id)
        await _on(source, "CLUSTER SETSLOT", slot, "MIGRATING", target_id)
        moved = 0
        batches = [list(first)] if first else []
        while (
            keys := batches.pop()
            if batches
            else await _on(source, "CLUSTER GETKEYSINSLOT", slot, batch)
        ):
            where = ("127.0.0.1", target.port, "", 0, 5000)
            await _on(source, "MIGRATE", *where, "REPLACE", "KEYS", *keys)
            moved += len(keys)
            if between is not None:
                await between()
            await anyio.sleep(pause_s)
        # The target first, so that the slot is never owned by no one (redis-cli's order).
        others = [n for n in self.primaries() if n not in (target, source)]
        for node in [target, source, *others]:
            await _on(node, "CLUSTER SETSLOT", slot, "NODE", target_id)
        await anyio.to_thread.run_sync(self.wait_ready)
        return moved
