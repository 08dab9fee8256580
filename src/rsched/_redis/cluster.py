"""Redis Cluster / Valkey cluster mode (``cluster = true``, docs/scaling.md).

The client is redis-py's asyncio ``RedisCluster``, typed as ``Redis`` for the rest of rsched: it
offers every command rsched sends (each script and each pipeline touches the keys of one hash
tag, so one slot of one primary), and routes each by its keys, following MOVED and ASK. What it
does not cover is here: pub/sub (redis-py 5.3's asyncio RedisCluster has none), commands each
node answers for itself (INFO, CONFIG GET: asked of every primary; TIME and WAIT: asked of the
primary serving a key's slot), a connection of that primary held for several commands, the
keys of the commands redis-py would otherwise look up with ``COMMAND GETKEYS`` first, loading
the scripts on every primary it meets, and failures to learn the topology, which redis-py raises
outside its RedisError hierarchy.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import anyio
from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import Connection
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MovedError, NoPermissionError, RedisClusterException, RedisError

from rsched._core.log import get_logger

log = get_logger("rsched.cluster")

#: redis-py's words for a start-up node that is not in cluster mode.
NOT_A_CLUSTER = "Cluster mode is not enabled on this node"
#: The commands rsched sends whose keys redis-py's table cannot place (``movablekeys``): it
#: asks the server (``COMMAND GETKEYS``, on another node, twice per command in redis-py 8)
#: before each one. Their keys are after the word STREAMS (half of what follows), or after a
#: count of keys in the second argument.
_STREAMS_KEYS = frozenset({"XREAD", "XREADGROUP"})
_COUNTED_KEYS = frozenset({"EVALSHA_RO"})


def _keys_of(command: str, args: Sequence[Any]) -> Sequence[Any] | None:
    """The keys of ``command`` with ``args`` when it is one whose keys redis-py cannot place
    (None otherwise, or when the arguments do not say)."""
    name = command.upper()
    if name in _COUNTED_KEYS:
        return args[2 : 2 + int(args[1])] if len(args) >= 2 else None
    if name not in _STREAMS_KEYS:
        return None
    at = 3 if name == "XREADGROUP" else 0  # after GROUP <group> <consumer>
    while at < len(args):
        arg = args[at]  # redis-py passes its own words as bytes
        word = (arg.decode() if isinstance(arg, bytes) else str(arg)).upper()
        if word == "STREAMS":
            rest = args[at + 1 :]
            return rest[: len(rest) // 2]
        at += 2 if word in ("COUNT", "BLOCK") else 1
    return None


def _denial(exc: BaseException) -> NoPermissionError | None:
    """The ACL refusal (NOPERM) among the causes of ``exc``, if any."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, NoPermissionError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


class _Cluster(RedisCluster):
    """RedisCluster whose failure to learn the topology (no node reachable, or not a cluster)
    is a RedisError like any other connection failure, so every actor's retry and every
    caller's translation handles it (redis-py raises a bare Exception subclass).

    ``scripts`` (their sources) are loaded on each primary the client learns of, those it
    lacks, when it first learns of it: a call finds its script there, instead of paying a
    NOSCRIPT and a load on its first use of each node (the NOSCRIPT path stays for a primary
    that lost its scripts)."""

    def __init__(self, *args: Any, scripts: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.scripts = {hashlib.sha1(s.encode()).hexdigest(): s for s in scripts}
        self._scripts_tried: set[str] = set()  # the primaries where loading them was tried
        self._scripts_lock = anyio.Lock()

    async def initialize(self, *args: Any, **kwargs: Any) -> RedisCluster:
        try:
            await super().initialize(*args, **kwargs)
        except RedisClusterException as exc:
            # redis-py takes any refusal of CLUSTER SLOTS for a node without cluster mode; a
            # user whose ACL lacks it is told so (docs/security.md).
            denied = _denial(exc)
            if denied is not None:
                raise denied from exc
            raise RedisConnectionError(str(exc)) from exc
        if self.scripts:
            await self._load_scripts()
        return self

    async def _load_scripts(self) -> None:
        tried = self._scripts_tried
        if not {node.name for node in self.get_primaries()} - tried:
            return
        async with self._scripts_lock:
            for node in self.get_primaries():
                if node.name in tried:
                    continue
                tried.add(node.name)  # once: a node that failed is not waited for again
                try:
                    await load_on(node, self.scripts)
                except (RedisError, OSError) as exc:
                    # Not loaded (down, or a user without SCRIPT LOAD): a call there loads its
                    # script after its NOSCRIPT, as on a primary that lost them.
                    log.debug("scripts.not_loaded", node=node.name, error=str(exc))

    async def _determine_slot(self, command: str, *args: Any) -> int:
        keys = _keys_of(command, args)
        if not keys:
            return await super()._determine_slot(command, *args)
        slots = {self.keyslot(key) for key in keys}
        if len(slots) != 1:
            raise RedisClusterException(f"{command} - all keys must map to the same key slot")
        return slots.pop()

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().execute_command(*args, **kwargs)
        except AttributeError as exc:
            # After CLUSTERDOWN redis-py re-learns the topology by closing every connection,
            # also those other tasks are using: their command fails writing to a closed one.
            raise RedisConnectionError(f"connection closed under the command ({exc})") from exc


def connect_cluster(
    url: str,
    *,
    timeout_s: float,
    max_connections: int,
    retries: int,
    scripts: Sequence[str] = (),
    **kwargs: Any,
) -> Redis:
    """A cluster client from one node's URL (it learns the others from it), which loads
    ``scripts`` on each primary it learns of.

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
        scripts=scripts,
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


async def load_on(node: ClusterNode, scripts: dict[str, str]) -> None:
    """Load on ``node`` those of ``scripts`` (source by SHA1) it lacks: two round trips, and
    only the missing sources travel (all of lua/ is some 500 kB)."""
    async with held_connection(node) as conn:
        try:
            await conn.send_command("SCRIPT", "EXISTS", *scripts)
            there = await conn.read_response()
            missing = [s for s, has in zip(scripts.values(), there, strict=True) if not int(has)]
            if missing:
                await conn.send_packed_command(
                    conn.pack_commands([("SCRIPT", "LOAD", source) for source in missing])
                )
            failure: RedisError | None = None
            for _ in missing:
                try:
                    await conn.read_response()
                except RedisError as exc:  # every reply is read before the connection is reused
                    failure = failure or exc
        except BaseException:
            # Interrupted before every reply was read: its next user would read them.
            with anyio.CancelScope(shield=True):
                await conn.disconnect()
            raise
        if failure is not None:
            raise failure


async def slot_primary(redis: Redis, key: str) -> ClusterNode:
    """The primary serving the slot of ``key``."""
    cluster = _as_cluster(redis)
    await cluster.initialize()
    try:
        # The slot map's lookup, which applies a MOVED :func:`learn_moved` noted (redis-py 5).
        return cluster.nodes_manager.get_node_from_slot(cluster.keyslot(key))
    except RedisClusterException as exc:  # not served (yet) by any node
        raise RedisConnectionError(str(exc)) from exc


async def on_slot_primary(redis: Redis, key: str, *command: Any) -> Any:
    """A keyless ``command`` (TIME, WAIT) asked of the primary serving the slot of ``key``:
    redis-py would send it to its default node, which may be any of them. On one server,
    the server's answer."""
    if not is_cluster(redis):
        return await redis.execute_command(*command)  # type: ignore[no-untyped-call]
    # When the node is gone (a failover), redis-py learns the topology again before the
    # next command.
    node = await slot_primary(redis, key)
    return await _as_cluster(redis).execute_command(*command, target_nodes=node)


def node_at(redis: Redis, host: str, port: int) -> ClusterNode | None:
    """The node the client knows at ``host``:``port`` (None for one it does not know)."""
    return _as_cluster(redis).get_node(host=host, port=port)


@contextlib.asynccontextmanager
async def held_connection(node: ClusterNode) -> AsyncIterator[Connection]:
    """One connection of ``node``'s pool, held for several commands (a write and the WAIT that
    must follow it on the same connection). A caller interrupted between a command and its
    reply must disconnect it, or its next user reads that reply."""
    conn = node.acquire_connection()
    try:
        yield conn
    finally:
        release = getattr(node, "release", None)
        if release is not None:  # redis-py 8: reconnects one marked for it
            release(conn)
        else:
            node._free.append(conn)


async def learn_moved(redis: Redis, moved: MovedError) -> None:
    """Patch the client's slot map with a MOVED received outside its own commands, as redis-py
    does for those (the slot's new primary serves it from now on)."""
    nodes = _as_cluster(redis).nodes_manager
    move_slot = getattr(nodes, "move_slot", None)
    if move_slot is not None:  # redis-py 8
        await move_slot(moved)
    else:  # applied by the next slot lookup
        nodes._moved_exception = moved  # type: ignore[attr-defined]


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
