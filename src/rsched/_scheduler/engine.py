"""One partition of a scheduler: PartitionEngine, its lease keeper, and while it holds the
lease, the partition's ticker (ticker.py), retention and health watch."""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from redis.exceptions import RedisError

from rsched._core.backoff import Backoff
from rsched._core.keys import Keys
from rsched._core.log import get_logger
from rsched._core.metrics import METRICS
from rsched._redis.durability import Durability
from rsched._scheduler.batching import Batching
from rsched._scheduler.health_watch import HealthWatch
from rsched._scheduler.retention import Retention
from rsched._scheduler.spec_cache import SpecCache
from rsched._scheduler.ticker import Ticker
from rsched._store.firing import FiringStore
from rsched._store.leases import LeaseStore

if TYPE_CHECKING:
    from rsched._scheduler.scheduler import Scheduler

log = get_logger("rsched.scheduler")

# A wake is a hint: this many wait for a partition's ticker at most (the rest are dropped).
WAKE_BUFFER = 100
# What a stop spends giving back the leases and leaving the list (Redis may be gone).
LEAVE_S = 2.0


class PartitionEngine:
    """One partition's lease keeper and, while it holds the lease, its ticker, retention and
    health watch."""

    def __init__(self, scheduler: Scheduler, keys: Keys) -> None:
        self.scheduler = scheduler
        self.settings = scheduler.settings
        self.cfg = scheduler.cfg
        self.redis = scheduler.redis
        self.keys = keys
        self.partition = keys.partition
        self.store = FiringStore.from_settings(self.redis, self.settings, keys)
        # A fire cannot be taken back: a shortfall is logged and counted, never raised.
        self.store.durability = Durability.from_settings(self.settings, raises=False)
        self.leases = LeaseStore(self.redis, keys)
        self.held: str | None = None  # the lease, written by the lease keeper only
        self._poke = anyio.Event()
        self._wakes, wakes_out = anyio.create_memory_object_stream[object](WAKE_BUFFER)
        self.sizing = Batching(self.cfg)
        self.cache = SpecCache(self.store, self.redis, self.cfg, self.sizing)
        self.ticker = Ticker(
            self.store, self.cfg, self.cache, self.sizing, wakes_out, scheduler.calendars
        )
        self._retention = Retention(self.redis, self.settings, self._leads, keys=keys)

    @property
    def fired_total(self) -> int:
        return self.ticker.fired_total

    def _leads(self) -> bool:
        return self.held is not None

    def poke(self) -> None:
        """Have the lease keeper look again now (ownership changed, or the lease was lost)."""
        self._poke.set()

    def wake(self, score: object) -> None:
        """A schedule of this partition became due earlier than planned."""
        _offer(self._wakes, score)

    async def _nap(self, seconds: float) -> None:
        """Sleep up to ``seconds``; a poke ends it early."""
        with anyio.move_on_after(seconds):
            await self._poke.wait()
        if self._poke.is_set():
            self._poke = anyio.Event()

    def _log_lease(self, event: str, level: str = "info", **fields: object) -> None:
        """A lease event: one line each with one partition; with several, debug lines (the
        scheduler logs the set it leads in one line)."""
        if self.scheduler.partitions > 1:
            log.debug(event, partition=self.partition, **fields)
        else:
            getattr(log, level)(event, **fields)

    async def run(self) -> None:
        """Keep the partition's lease while this scheduler should lead it."""
        owner, ttl = self.scheduler.owner, self.cfg.lease_ttl_ms
        renew_s = self.cfg.lease_renew_ms / 1000
        backoff = Backoff()
        standby: str | None = None  # the leader this standby last reported
        while True:
            delay = renew_s
            if self.scheduler.wants(self.partition):
                try:
                    lease, pttl = await self.leases.acquire(owner, ttl)
                    backoff.reset()
                except (RedisError, OSError) as exc:
                    lease, delay = None, backoff.next()
                    log.warning("redis.error", actor="lease", error=str(exc), retry_s=delay)
                else:
                    if lease is not None:
                        standby = None
                        await self._lead(lease)
                        continue  # lost or given back: look again at once
                    delay = min(renew_s, max(pttl, 20) / 1000)
                    if self.scheduler.partitions == 1:
                        standby = self._standby(standby)
            await self._nap(delay)

    def _standby(self, reported: str | None) -> str | None:
        """Log that this scheduler stands by and who leads: once, and again when the leader
        changes. Returns the leader now reported."""
        holder = self.leases.holder
        if holder is not None and holder != reported:
            token, _, owner = holder.partition(":")
            log.info("leader.standby", leader=owner, token=token, me=self.scheduler.owner)
        return holder

    async def _lead(self, lease: str) -> None:
        """Hold ``lease`` and run the partition's actors until it is lost, given back to the
        partition's new owner, or the scheduler stops (then it is given back too)."""
        self.held = lease
        self._log_lease("leader.acquired", lease=lease, ttl_ms=self.cfg.lease_ttl_ms)
        if METRICS.on:
            METRICS.leader_changes.inc()
        self.scheduler.on_led_changed()
        lost = anyio.Event()
        was_lost = False
        try:
            async with anyio.create_task_group() as tg:
                health = HealthWatch(
                    self.redis, self.settings, self._leads, keys=self.keys,
                    webhook=self.scheduler.webhook,
                )  # fmt: skip
                health.on_lead(lease)
                await tg.start(health.run)
                await tg.start(self._retention.run)
                tg.start_soon(self._tick, lease, lost)
                was_lost = await self._hold(lease, lost)
                tg.cancel_scope.cancel()
        finally:
            self.held = None
            self.scheduler.on_led_changed()
            if not was_lost:
                with anyio.CancelScope(shield=True), anyio.move_on_after(LEAVE_S):
                    await self._release(lease)

    async def _tick(self, lease: str, lost: anyio.Event) -> None:
        """Run the ticker under ``lease``; when the fire script refuses the lease's token, the
        lease is lost: tell the lease keeper."""
        await self.ticker.run(lease)
        self._log_lease("leader.lost", "warning", lease=lease, reason="fencing token rejected")
        lost.set()
        self.poke()

    async def _hold(self, lease: str, lost: anyio.Event) -> bool:
        """Renew ``lease`` every lease_renew_ms. Returns True when it is lost (renewal refused
        or failing for a TTL, or the fire script refused its token), False when another
        scheduler became the partition's owner (the caller gives it back)."""
        ttl, renew_s = self.cfg.lease_ttl_ms, self.cfg.lease_renew_ms / 1000
        backoff = Backoff()
        last_ok = time.monotonic()
        delay = renew_s
        while True:
            await self._nap(delay)
            delay = renew_s
            if lost.is_set():
                return True
            if not self.scheduler.wants(self.partition):
                return False
            try:
                renewed = await self.leases.renew(lease, ttl)
            except (RedisError, OSError) as exc:
                delay = min(renew_s, backoff.next())
                log.warning("redis.error", actor="lease", error=str(exc), retry_s=delay)
                if time.monotonic() - last_ok > ttl / 1000:
                    self._log_lease("leader.lost", "warning", lease=lease, reason="renew failing")
                    return True
                continue
            if not renewed:
                self._log_lease("leader.lost", "warning", lease=lease, reason="renew refused")
                return True
            last_ok = time.monotonic()
            backoff.reset()

    async def _release(self, lease: str) -> None:
        try:
            if await self.leases.release(lease):
                self._log_lease("leader.released", lease=lease)
        except (RedisError, OSError) as exc:
            log.warning("leader.release_failed", error=str(exc), partition=self.partition)


def _offer(inbox: MemoryObjectSendStream[object], message: object) -> None:
    # When the inbox is full the ticker is already due to look: a wake is only a hint.
    with contextlib.suppress(anyio.WouldBlock):
        inbox.send_nowait(message)
