"""Redis Cluster / Valkey cluster mode (``cluster = true``, docs/scaling.md).

The client is redis-py's asyncio ``RedisCluster``, typed as ``Redis`` for the rest of rsched: it
offers every command rsched sends (each script and each pipeline touches the keys of one hash
tag, so one slot of one primary), and routes each by its keys, following MOVED and ASK. What it
does not cover is here: pub/sub (redis-py 5.3's asyncio RedisCluster has none), commands each
node answers for itself (INFO, CONFIG GET: asked of every primary), and failures to learn the
topology, which redis-py raises outside its RedisError hierarchy.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, cast

from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError

#: redis-py's words for a start-up node that is not in cluster mode.
NOT_A_CLUSTER = "Cluster mode is not enabled on this node"


class _Cluster(RedisCluster):
    """RedisCluster whose failure to learn the topology (no node reachable, or not a cluster)
    is a RedisError like any other connection failure, so every actor's retry and every
    caller's translation handles it (redis-py raises a bare Exception subclass)."""

    async def initialize(self, *args: Any, **kwargs: Any) -> RedisCluster:
        try:
            return await super().initialize(*args, **kwargs)
        except RedisClusterException as exc:
            raise RedisConnectionError(str(exc)) from exc

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().execute_command(*args, **kwargs)
        except AttributeError as exc:
            # After CLUSTERDOWN redis-py re-learns the topology by closing every connection,
            # also those other tasks are using: their command fails writing to a closed one.
            raise RedisConnectionError(f"connection closed under the command ({exc})") from exc


def connect_cluster(
    url: str, *, timeout_s: float, max_connections: int, retries: int, **kwargs: Any
) -> Redis:
    """A cluster client from one node's URL (it learns the others from it).

    ``max_connections`` bounds each node's connections (redis-py raises MaxConnectionsError
    past it instead of waiting). A command that fails on a dropped connection or a timeout is
    re-sent up to ``retries`` times after the client re-learned the topology: that is how a
    failover is followed, so one call may wait up to ``retries + 1`` socket timeouts.
    """
    client = _Cluster.from_url(
        url,
        decode_responses=True,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        max_connections=max_connections,
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), retries=retries),
        # A MOVED names the slot's new primary: patch the slot map with it. (Re-learning the
        # whole topology every few MOVED closes connections other tasks are using.)
        reinitialize_steps=0,
        **kwargs,
    )
    return cast(Redis, client)


def is_cluster(redis: Redis) -> bool:
    return isinstance(redis, RedisCluster)


def _as_cluster(redis: Redis) -> RedisCluster:
    return cast(RedisCluster, redis)


def primaries(redis: Redis) -> list[ClusterNode]:
    return _as_cluster(redis).get_primaries()


async def per_primary(redis: Redis, command: str, *args: Any) -> list[Any]:
    """``command`` asked of every primary (INFO and CONFIG GET answer for one node)."""
    cluster = _as_cluster(redis)
    await cluster.initialize()
    return [
        await cluster.execute_command(command, *args, target_nodes=node)
        for node in cluster.get_primaries()
    ]


def _node_client(node: ClusterNode) -> Redis:
    pool = ConnectionPool(connection_class=node.connection_class, **node.connection_kwargs)
    return Redis.from_pool(pool)


@contextlib.asynccontextmanager
async def subscribed(redis: Redis, channel: str, *more: str) -> AsyncIterator[PubSub]:
    """A pub/sub subscribed to ``channel`` and any ``more`` (ignoring subscribe confirmations).

    On a cluster, through a plain connection to one node: a PUBLISH reaches every node of the
    cluster. The node is the primary serving the channel's slot; when it cannot be reached the
    others are tried. When the connection fails later, the caller's retry comes back here
    (meanwhile the client's own commands re-learn the topology after a failover).
    """
    if not is_cluster(redis):
        async with redis.pubsub(ignore_subscribe_messages=True) as pubsub:
            await pubsub.subscribe(channel, *more)
            yield pubsub
        return
    cluster = _as_cluster(redis)
    await cluster.initialize()
    first = cluster.get_node_from_key(channel)
    others = [node for node in cluster.get_nodes() if node is not first]
    failure: BaseException | None = None
    for node in [first, *others] if first is not None else others:
        async with (
            _node_client(node) as client,
            client.pubsub(ignore_subscribe_messages=True) as pubsub,
        ):
            try:
                await pubsub.subscribe(channel, *more)
            except (RedisError, OSError) as exc:
                failure = exc
                continue
            yield pubsub
            return
    raise RedisConnectionError(f"no cluster node accepted a subscription ({failure})")
