"""Partition sharing: which live scheduler leads which partition.

Every scheduler beats into ``{prefix}:schedulers`` (lua/scheduler_beat.lua) every
``lease_renew_ms`` and reads back the live ones (beat younger than ``lease_ttl_ms``). Each
partition belongs to the live scheduler that ranks first for it by rendezvous hashing: the
highest BLAKE2b of (scheduler id, partition). Every scheduler computes the same owners from the
same list without talking to the others; S schedulers get about N/S partitions each, and when one
joins or leaves only the partitions it wins or held change hands. The leases stay the authority
(one per partition, fenced): ownership only says which lease a scheduler tries to take or gives
back. docs/scaling.md tells the whole story.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable

import anyio
from anyio.abc import TaskStatus
from redis.asyncio import Redis
from redis.exceptions import RedisError

from rsched._core.backoff import Backoff
from rsched._core.keys import Keys
from rsched._core.log import get_logger
from rsched._store.leases import LeaseStore

log = get_logger("rsched.scheduler")


def rank(scheduler_id: str, partition: int) -> bytes:
    """A scheduler's rank for one partition: stable across processes and Python versions (not
    ``hash()``), compared as bytes."""
    return hashlib.blake2b(f"{partition}:{scheduler_id}".encode(), digest_size=8).digest()


def owner_of(partition: int, live: Iterable[str]) -> str | None:
    """The live scheduler that leads ``partition`` (None when there is none)."""
    return max(live, key=lambda sid: (rank(sid, partition), sid), default=None)


def owned(me: str, live: Iterable[str], partitions: int) -> frozenset[int]:
    """The partitions ``me`` leads among ``live`` (``me`` counts as live whatever the list)."""
    members = {*live, me}
    return frozenset(k for k in range(partitions) if owner_of(k, members) == me)


class Membership:
    """The membership actor: beats, keeps the live list, and tells the scheduler (``on_change``)
    when the partitions this scheduler should lead change. Until its first beat it claims every
    partition: a lone scheduler starts leading at once, and a lease held by another is refused
    anyway."""

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        me: str,
        *,
        window_ms: int,
        every_s: float,
        on_change: Callable[[], None],
    ) -> None:
        self.leases = LeaseStore(redis, keys)
        self.keys = keys
        self.me = me
        self.window_ms = window_ms
        self.every_s = every_s
        self.on_change = on_change
        self.live: tuple[str, ...] = (me,)
        self.mine: frozenset[int] = frozenset(range(keys.partitions))

    def wants(self, partition: int) -> bool:
        """True when this scheduler is the partition's owner by the last live list."""
        return partition in self.mine

    async def beat(self) -> None:
        """One beat: record this scheduler, read the live ones, recompute the owned set."""
        live = await self.leases.beat(self.me, self.window_ms)
        mine = owned(self.me, live, self.keys.partitions)
        changed = mine != self.mine
        self.live, self.mine = live, mine
        if changed:
            self.on_change()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        backoff = Backoff()
        try:
            await self.beat()
        except (RedisError, OSError) as exc:
            log.warning("redis.error", actor="membership", error=str(exc))
        task_status.started()
        while True:
            delay = self.every_s
            await anyio.sleep(delay)
            try:
                await self.beat()
                backoff.reset()
            except (RedisError, OSError) as exc:
                # The last list stands: the leases, not this list, keep two from firing.
                delay = backoff.next()
                log.warning("redis.error", actor="membership", error=str(exc), retry_s=delay)
                await anyio.sleep(max(0.0, delay - self.every_s))

    async def leave(self) -> None:
        """Leave the list at once (a clean stop): the others own its partitions at their next
        beat."""
        try:
            await self.leases.leave(self.me)
        except (RedisError, OSError) as exc:
            log.warning("redis.error", actor="membership", error=str(exc))
