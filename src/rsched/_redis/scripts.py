"""Loads the Lua scripts of lua/ (one file per atomic operation) and inlines their includes.

Scripts are registered once per client and called by SHA; redis-py re-loads a script the server
forgot (NOSCRIPT, e.g. after a restart) transparently. Each is sent with a ``#!lua`` shebang
(Redis 7 script flags): a script that writes is refused as a whole when the server is over
maxmemory (never half-applied), a read-only one (:data:`READ_ONLY`) declares ``no-writes``, and
on a cluster a script touching a key outside its declared keys' slot fails instead of reaching
another node's data.

On a cluster (rsched._redis.cluster) a script runs on the primary of its keys' slot. The client
loads the scripts each primary it learns of lacks; a NOSCRIPT all the same (a primary that lost
them, or one met through a MOVED) loads the script on every primary and retries once, and a
TRYAGAIN (its keys half migrated) is retried with backoff for up to :data:`TRYAGAIN_LIMIT_S`. A
write to be confirmed goes with its WAIT on a connection of that primary held for both, and a
MOVED or ASK sends the pair again where it points.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.resources
import re
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.connection import Connection
from redis.commands.core import AsyncScript
from redis.exceptions import (
    AskError,
    ClusterError,
    MovedError,
    NoScriptError,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from rsched._core.backoff import Backoff
from rsched._core.errors import StateError
from rsched._core.keys import Keys
from rsched._core.log import get_logger
from rsched._redis.cluster import (
    held_connection,
    is_cluster,
    learn_moved,
    node_at,
    on_slot_primary,
    primaries,
    slot_primary,
)

log = get_logger("rsched.lua")

if TYPE_CHECKING:
    from rsched._redis.durability import Durability

_INCLUDE = re.compile(r"^-- @include (\w+)\s*$", re.MULTILINE)

#: Scripts that only read: ``flags=no-writes`` lets them run under maxmemory and on replicas.
READ_ONLY = frozenset(
    {
        "due",
        "every_id",
        "find_job",
        "index_after",
        "limits_read",
        "parked_after",
        "parked_counts",
        "plan_fields",
        "read_hashes",
        "runs_scan",
    }
)
#: How long a script whose keys are half migrated to another cluster node (TRYAGAIN) is retried.
TRYAGAIN_LIMIT_S = 10.0
#: What a cluster says of a call that can succeed once a slot's migration has ended.
_MIGRATING = ("TTL exhausted", "non local key")
#: Redirects (MOVED, ASK) one write and its WAIT follow before the call counts as migrating.
_REDIRECTS = 16

T = TypeVar("T")


def migrating(exc: BaseException) -> bool:
    """True for an error a cluster gives a call while its slot migrates (TRYAGAIN, or redis-py's
    redirects exhausted): the call can succeed once the migration has ended."""
    return isinstance(exc, TryAgainError) or any(w in str(exc) for w in _MIGRATING)


def lua_dir() -> Path:
    """The scripts: the repository's top-level lua/, which the package reaches through its
    ``rsched/lua`` link in a checkout and which the wheel holds as ``rsched/lua``."""
    return Path(str(importlib.resources.files("rsched").joinpath("lua")))


def expand(source: str, include_dir: Path) -> str:
    """Replace each ``-- @include name`` line with includes/name.lua, itself expanded.

    An include names the includes it needs, so the same one may be named several times in a
    script: it is inlined once, where it is first named (its locals are visible from there on),
    and every later line naming it is dropped.
    """
    done: set[str] = set()

    def inline(text: str, stack: tuple[str, ...]) -> str:
        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in stack:
                raise ValueError(f"Lua include cycle: {' -> '.join((*stack, name))}")
            if name in done:
                return ""
            path = include_dir / f"{name}.lua"
            if not path.is_file():
                raise FileNotFoundError(f"Lua include {name!r} not found in {include_dir}")
            body = inline(path.read_text(), (*stack, name))
            done.add(name)
            return body

        return _INCLUDE.sub(replace, text)

    return inline(source, ())


@functools.cache
def source(name: str) -> str:
    """The full text of script ``name`` (file lua/<name>.lua) with includes inlined, under
    its shebang line."""
    directory = lua_dir()
    shebang = "#!lua flags=no-writes" if name in READ_ONLY else "#!lua"
    return f"{shebang}\n" + expand((directory / f"{name}.lua").read_text(), directory / "includes")


def names() -> list[str]:
    return sorted(p.stem for p in lua_dir().glob("*.lua"))


def pack_command(args: Sequence[str], cache: dict[str, bytes] | None = None) -> bytes:
    """One command in the Redis protocol (RESP2 array of bulk strings).

    redis-py packs each argument through its encoder at several µs apiece; a fire batch carries
    thousands of arguments (two per schedule), which made packing the scheduler's largest CPU
    cost in a herd. Every argument here is already a str. ``cache`` keeps the packed form of
    each argument for a caller whose arguments repeat (a bulk write's field names and values).
    """
    head = b"*%d\r\n" % len(args)
    if cache is None:
        out = [head]
        for arg in args:
            data = arg.encode()
            out.append(b"$%d\r\n%b\r\n" % (len(data), data))
        return b"".join(out)
    get = cache.get
    # (A packed argument is never empty, so ``or`` packs exactly the ones not cached.)
    return head + b"".join([get(arg) or _cached(arg, cache) for arg in args])


def _cached(arg: str, cache: dict[str, bytes]) -> bytes:
    data = arg.encode()
    packed = b"$%d\r\n%b\r\n" % (len(data), data)
    if len(cache) < 100_000:
        cache[arg] = packed
    return packed


def _text(arg: Any) -> str:
    """An argument as redis-py would send it (bytes here are always JSON, hence UTF-8)."""
    return arg.decode() if isinstance(arg, bytes) else str(arg)


#: What the scripts read the server's time with (lua/includes/now_ms.lua, lua/fire.lua).
_TIME_CALL = "rcall('TIME')"
#: The ``*`` of an XADD (a stream entry's id, the server's time by its own clock), and not the
#: one ``limit_set.lua`` looks for in a key pattern.
_AUTO_ID = re.compile(r"(?<!string\.find\(key, )'\*'")


@dataclass(slots=True)
class VirtualClock:
    """A clock that the scripts and stores of one client read instead of the server's: the hash
    ``key`` holds ``s`` and ``us`` (as TIME answers) and ``id`` (``<ms>-*``, the id of a stream
    entry added at that time). rsched.testing sets one on its own client
    (:func:`use_virtual_clock`) to move time by hand; production clients have none.

    Its scripts are the same files with each TIME call replaced by a read of ``s`` and ``us``,
    and each XADD's ``*`` by ``id`` (a run's end, a dead letter's time are entry ids): their
    SHAs differ from production's, so a production client never runs one. ``shebang`` False
    leaves out the ``#!lua`` line, for a server that does not take it (fakeredis).

    Only :meth:`set_ms` moves the clock, so the stores' reads answer from the time it last set
    (``ms``) without a round trip; the key is read only when this object did not set it.
    """

    key: str
    shebang: bool = True
    ms: int | None = None

    def source(self, name: str) -> str:
        text = source(name).replace(_TIME_CALL, f"rcall('HMGET', '{self.key}', 's', 'us')")
        text = _AUTO_ID.sub(f"redis.call('HGET', '{self.key}', 'id')", text)
        return text if self.shebang else text.split("\n", 1)[1]

    async def time_ms(self, redis: Redis) -> int:
        if self.ms is not None:
            return self.ms
        seconds, micros = await redis.hmget(self.key, ["s", "us"])
        if seconds is None or micros is None:
            raise StateError(f"the virtual clock {self.key!r} is not set")
        return int(seconds) * 1000 + int(micros) // 1000

    async def set_ms(self, redis: Redis, ms: int) -> None:
        """Set the clock to ``ms`` (epoch ms); it must never go back (stream ids only grow)."""
        await redis.hset(
            self.key, mapping={"s": ms // 1000, "us": ms % 1000 * 1000, "id": f"{ms}-*"}
        )
        self.ms = ms


# Only clients given a virtual clock are here: looked up when a script is registered and when
# the clock is read, never per job.
_VIRTUAL_CLOCKS: weakref.WeakKeyDictionary[Redis, VirtualClock] = weakref.WeakKeyDictionary()


def use_virtual_clock(redis: Redis, clock: VirtualClock) -> None:
    """Have the scripts and stores of ``redis`` (a client made for this, whose scripts are not
    registered yet) read ``clock`` instead of Redis TIME."""
    _VIRTUAL_CLOCKS[redis] = clock


def virtual_clock(redis: Redis) -> VirtualClock | None:
    """The virtual clock of ``redis``, None (production) when it reads Redis TIME."""
    return _VIRTUAL_CLOCKS.get(redis)


async def entry_id(redis: Redis) -> str:
    """The id of a stream entry Python adds now: ``*`` (the server's time), or the time of the
    client's virtual clock."""
    clock = _VIRTUAL_CLOCKS.get(redis)
    return "*" if clock is None else f"{await clock.time_ms(redis)}-*"


async def server_time_ms(redis: Redis, keys: Keys | None) -> int:
    """Redis TIME in epoch ms. On a cluster, the clock of the primary serving the partition of
    ``keys``: the one its scripts read (each node has its own clock). A client with a
    :class:`VirtualClock` reads that."""
    clock = _VIRTUAL_CLOCKS.get(redis)
    if clock is not None:
        return await clock.time_ms(redis)
    if keys is None or not is_cluster(redis):
        seconds, micros = await redis.time()
    else:
        seconds, micros = await on_slot_primary(redis, keys.tag, "TIME")
    return int(seconds) * 1000 + int(micros) // 1000


def _check_wrong_type(name: str, exc: ResponseError) -> None:
    # A key of the wrong type can only come from a writer other than rsched.
    if "WRONGTYPE" in str(exc):
        raise StateError(f"{name}: a key holds the wrong type of value ({exc})") from exc


#: ASKING in the Redis protocol: what lets the next command on a connection reach a slot being
#: imported by that node.
_ASKING = pack_command(["ASKING"])


def _flushed(name: str) -> ResponseError:
    return ResponseError(f"NOSCRIPT {name} was flushed as soon as it was loaded")


async def _talk(
    conn: Connection, data: bytes, count: int
) -> tuple[list[Any], ResponseError | None]:
    """Send ``data`` (``count`` packed commands) on ``conn`` and read every reply: the replies
    that were not errors, and the first error."""
    replies: list[Any] = []
    error: ResponseError | None = None
    try:
        await conn.send_packed_command(data)
        for _ in range(count):
            try:
                replies.append(await conn.read_response())
            except ResponseError as exc:  # the next reply is still to be read
                error = error or exc
    except BaseException:
        # Cancelled (or failed) between send and reply: the reply would be read by the
        # connection's next user, so the connection must not go back to the pool as is.
        with anyio.CancelScope(shield=True):
            await conn.disconnect()
        raise
    return replies, error


def _replies(name: str, replies: list[Any], error: ResponseError | None) -> list[Any] | None:
    """What :func:`_talk` read, for the callers of scripts: None when the script was not
    loaded, a raised error for any other error."""
    if isinstance(error, NoScriptError):
        return None
    if error is not None:
        _check_wrong_type(name, error)
        raise error
    return replies


class ScriptCaller:
    """Calls the scripts of lua/ on one client: each registered once, then run by SHA.

    The base of the two stores (schedules and queues); a key of the wrong type, which only a
    writer other than rsched can cause, surfaces as StateError.
    """

    #: Writes to confirm with WAIT (rsched._redis.durability); the stores set it from the settings.
    durability: Durability | None = None
    #: The partition whose keys the scripts touch (the subclasses set it): whose clock counts.
    keys: Keys

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._scripts: dict[str, AsyncScript] = {}
        self._cluster = is_cluster(redis)

    def script(self, name: str) -> AsyncScript:
        found = self._scripts.get(name)
        if found is None:
            clock = _VIRTUAL_CLOCKS.get(self.redis)
            text = source(name) if clock is None else clock.source(name)
            found = self._scripts[name] = self.redis.register_script(text)
        return found

    async def call(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        if self._durability(name) is not None:
            return await self.call_packed(name, keys, [_text(a) for a in args])
        return await self._call(name, keys, args)

    async def _call(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            if self._cluster:
                return await self._call_on_cluster(name, [*keys, *args], len(keys))
            return await self.script(name)(keys=list(keys), args=list(args))
        except ResponseError as exc:
            _check_wrong_type(name, exc)
            raise

    async def _call_on_cluster(
        self, name: str, words: list[Any], numkeys: int, command: str = "EVALSHA"
    ) -> Any:
        script = self.script(name)

        async def attempt() -> Any:
            try:
                return await self.redis.execute_command(command, script.sha, numkeys, *words)  # type: ignore[no-untyped-call]
            except NoScriptError:
                await self._load_on_primaries(script)
                return await self.redis.execute_command(command, script.sha, numkeys, *words)  # type: ignore[no-untyped-call]

        return await self._while_migrating(name, attempt)

    async def _while_migrating(self, name: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """``attempt()``, again with backoff while the cluster says the keys' slot is being
        migrated, for up to :data:`TRYAGAIN_LIMIT_S`."""
        backoff = Backoff(initial_s=0.05, maximum_s=0.5)
        give_up = anyio.current_time() + TRYAGAIN_LIMIT_S
        while True:
            try:
                return await attempt()
            except (TryAgainError, ClusterError, ResponseError) as exc:
                # redis-py follows MOVED and ASK itself, and waits out TRYAGAIN only briefly
                # (its redirect budget, then "TTL exhausted"); a slot's migration takes longer.
                # A key the script reaches without declaring it may have moved already.
                text = str(exc)
                retryable = isinstance(exc, TryAgainError) or any(w in text for w in _MIGRATING)
                if not retryable or anyio.current_time() > give_up:
                    raise
                delay = backoff.next()
                log.debug("script.tryagain", script=name, error=str(exc), retry_s=delay)
                await anyio.sleep(delay)

    async def _load_on_primaries(self, script: AsyncScript) -> None:
        """Load ``script`` on every primary that answers (one down must not stop the others:
        the retry is on the keys' primary, which may be a new one)."""
        for node in primaries(self.redis):
            with contextlib.suppress(RedisError, OSError):
                await self.redis.execute_command(  # type: ignore[no-untyped-call]
                    "SCRIPT LOAD", script.script, target_nodes=node
                )

    async def call_read(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """:meth:`call` for a script that only reads, sent as EVALSHA_RO: EVALSHA asks the
        caller's ACL for write access to every key it names, so a read-only user (docs/security.md)
        could not run even a script that only reads. A server without EVALSHA_RO (before Redis
        7.0) gets EVALSHA."""
        if self._cluster:
            return await self._call_on_cluster(name, [*keys, *args], len(keys), "EVALSHA_RO")
        script = self.script(name)
        command = (script.sha, len(keys), *keys, *args)
        try:
            try:
                return await self.redis.evalsha_ro(*command)
            except NoScriptError:
                await self.redis.script_load(script.script)
                return await self.redis.evalsha_ro(*command)
        except ResponseError as exc:
            if "unknown command" in str(exc).lower():
                return await self.call(name, keys, args)
            _check_wrong_type(name, exc)
            raise

    def _durability(self, name: str) -> Durability | None:
        """What a write of script ``name`` waits for: None unless it is to be confirmed."""
        durability = self.durability
        return durability if durability is not None and durability.confirms(name) else None

    async def call_packed(
        self,
        name: str,
        keys: Sequence[str],
        args: Sequence[str],
        cache: dict[str, bytes] | None = None,
    ) -> Any:
        """:meth:`call` for large batches: the command is packed here, in one pass (with
        :func:`pack_command`'s ``cache``).

        Anything unusual (script not loaded yet, a dedicated connection, a connection error)
        goes through :meth:`call`, which loads the script and retries; the scripts sent here
        are safe to run twice, so re-sending after a lost reply is fine. A write to be
        confirmed (rsched._redis.durability) goes out with its WAIT on the same connection.
        """
        redis = self.redis
        durability = self._durability(name)
        if durability is not None:
            await durability.ready(redis)
        if not self._cluster and (redis.connection is not None or redis.single_connection_client):
            # One connection for every command: the WAIT follows the write on it.
            reply = await self._call(name, keys, args)
            if durability is not None:
                waited = await redis.execute_command(*durability.wait_args)  # type: ignore[no-untyped-call]
                durability.judge(name, waited)
            return reply
        data = pack_command(["EVALSHA", self.script(name).sha, str(len(keys)), *keys, *args], cache)
        count = 1
        if durability is not None:
            data += pack_command(durability.wait_args)
            count = 2
        if self._cluster:
            return await self._packed_on_cluster(name, keys, args, data, count, durability)
        if durability is None:
            try:
                replies = await self._exchange(name, data, 1)
            except (RedisConnectionError, RedisTimeoutError):
                replies = None
            return await self._call(name, keys, args) if replies is None else replies[0]
        unsure = False
        try:
            replies = await self._exchange(name, data, 2)
        except (RedisConnectionError, RedisTimeoutError):
            # Sent again on a new connection: the script finds its first run's result and
            # writes nothing, so that connection's WAIT would confirm nothing.
            replies, unsure = None, True
        if replies is None:
            await self.ensure_loaded([name])
            replies = await self._exchange(name, data, 2)
            if replies is None:
                raise _flushed(name)
        durability.judge(name, replies[1], unsure=unsure)
        return replies[0]

    async def _packed_on_cluster(
        self,
        name: str,
        keys: Sequence[str],
        args: Sequence[str],
        data: bytes,
        count: int,
        durability: Durability | None,
    ) -> Any:
        """:meth:`call_packed` on a cluster: ``data`` (the script call, then its WAIT when the
        write is to be confirmed: ``count`` commands) sent on a connection of the primary
        serving the keys' slot. redis-py would encode each argument and hash each key again,
        and route a WAIT, which has no key, to any node: the replicas of that primary must
        confirm the write."""

        async def attempt() -> list[Any]:
            replies = await self._exchange_on_slot(name, data, count, keys[0])
            if replies is None:
                await self._load_on_primaries(self.script(name))
                replies = await self._exchange_on_slot(name, data, count, keys[0])
                if replies is None:
                    raise _flushed(name)
            return replies

        try:
            replies = await self._while_migrating(name, attempt)
        except (RedisConnectionError, RedisTimeoutError):
            # Sent again through the client, which learns the topology anew (a failover): the
            # script finds its first run's result, and no WAIT can confirm that run there.
            reply = await self._call(name, keys, args)
            if durability is not None:
                durability.judge(name, None, unsure=True)
            return reply
        if durability is not None:
            durability.judge(name, replies[1])
        return replies[0]

    async def _exchange(self, name: str, data: bytes, count: int) -> list[Any] | None:
        """Send ``data`` (``count`` packed commands) on one pooled connection and read their
        replies; None when the script was not loaded. A connection error is raised after the
        connection was closed (the caller may send again)."""
        pool = self.redis.connection_pool
        conn = await pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            replies, error = await _talk(conn, data, count)
        finally:
            with anyio.CancelScope(shield=True):
                await pool.release(conn)
        return _replies(name, replies, error)

    async def _exchange_on_slot(
        self, name: str, data: bytes, count: int, key: str
    ) -> list[Any] | None:
        """:meth:`_exchange` on a connection of the primary serving the slot of ``key``,
        following MOVED (the slot map is patched) and ASK (ASKING goes first, on the same
        connection); the commands are sent again whole to where the redirect points."""
        asking: ClusterNode | None = None
        for _ in range(_REDIRECTS):
            node = asking or await slot_primary(self.redis, key)
            sent, expected = (_ASKING + data, count + 1) if asking else (data, count)
            async with held_connection(node) as conn:
                replies, error = await _talk(conn, sent, expected)
            if asking is not None:
                replies, asking = replies[1:], None  # ASKING's OK
            if isinstance(error, MovedError):  # (a kind of AskError)
                await learn_moved(self.redis, error)
                continue
            if isinstance(error, AskError):
                asking = node_at(self.redis, error.host, error.port)
                if asking is None:
                    raise TryAgainError(f"ASK to {error.host}:{error.port}, an unknown node")
                continue
            return _replies(name, replies, error)
        raise ClusterError("TTL exhausted: the keys' slot kept moving")

    async def ensure_loaded(self, names: Sequence[str]) -> list[str]:
        """Load the scripts in ``names`` the server lacks; returns those it loaded."""
        scripts = [self.script(name) for name in names]
        present = await self.redis.script_exists(*(s.sha for s in scripts))
        missing = [(n, s) for n, s, there in zip(names, scripts, present, strict=True) if not there]
        for _, script in missing:
            await self.redis.script_load(script.script)
        return [name for name, _ in missing]

    async def time_ms(self) -> int:
        """Redis TIME in epoch ms, of the node whose scripts touch :attr:`keys` (see
        :func:`server_time_ms`): decisions about time never use a client's clock."""
        return await server_time_ms(self.redis, self.keys)
