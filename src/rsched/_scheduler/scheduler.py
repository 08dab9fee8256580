"""The scheduler process's engine: partition sharing, due detection and firing, as anyio actors.

A deployment's schedules are spread over N partitions, each with its own lease and fencing
token; the live schedulers share them (membership.py: rendezvous hashing), so S schedulers lead
about N/S partitions each and the others' are taken over when one dies. With N=1 one scheduler
leads and the others stand by, as before partitions existed.

Actors (each one task owning its state):
- membership (membership.py): beats into ``{prefix}:schedulers``, reads the live schedulers and
  recomputes which partitions this one should lead;
- wake listener (here), one for every partition: a schedule moved earlier than its partition's
  ticker planned (pub/sub), wake that ticker now;
- per partition (engine.py), a lease keeper: acquires the partition's lease while this
  scheduler owns the partition, renews it well inside its TTL, gives it back when another
  scheduler became the owner; while it holds the lease it runs the partition's
  - ticker (ticker.py): reads what is due by Redis TIME, plans each schedule's occurrences
    (misfire policies) from the spec cache (spec_cache.py) and fires them (fire.py) in batches
    sized so that each call holds Redis for at most fire_budget_ms (batching.py); then sleeps
    until the earliest next run;
  - retention (retention.py) and health watch (health_watch.py) of the partition's data;
  all cancelled when the lease is lost or given back (a round in flight finishes first).
Correctness never rests on this process being right about its leadership: the fire script
checks the partition's fencing token, the schedule's version and the occurrence atomically.
"""

from __future__ import annotations

import os
import socket
import uuid

import anyio
from anyio.abc import TaskStatus
from redis.asyncio import Redis
from redis.exceptions import RedisError

from rsched._core.backoff import Backoff
from rsched._core.keys import Keys
from rsched._core.log import get_logger
from rsched._core.settings import Settings
from rsched._ops.webhook import WebhookSender
from rsched._redis.cluster import subscribed
from rsched._redis.connection import messages
from rsched._scheduler.calendar_cache import CalendarCache
from rsched._scheduler.engine import LEAVE_S, PartitionEngine
from rsched._scheduler.membership import Membership
from rsched._store.calendars import CalendarStore
from rsched._store.deployment import deployment_keys
from rsched._store.firing import FiringStore

log = get_logger("rsched.scheduler")

# Lease changes of several partitions close together are logged as one line after this pause.
LED_REPORT_S = 0.2


class Scheduler:
    """Runs until :meth:`stop` is called (or it is cancelled); any number may run at once and
    share the deployment's partitions."""

    def __init__(self, redis: Redis, settings: Settings | None = None, *, owner: str = "") -> None:
        self.settings = settings or Settings()
        self.cfg = self.settings.scheduler
        self.redis = redis
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        # Partition 0's keys until resolve() reads the deployment's number of partitions.
        self.keys = Keys(self.settings.prefix)
        # The deployment's calendars, one copy for every partition this process leads.
        self.calendars = CalendarCache(CalendarStore(redis, self.keys))
        self.engines = [PartitionEngine(self, self.keys)]
        self._resolved = False
        self.running = False  # from run()'s start (its actors started) until it returns
        self._stop = anyio.Event()
        self._led_changed = anyio.Event()
        self.membership = self._membership()
        secret = self.settings.alert_webhook_secret
        # One sender for the health watches of every partition this scheduler leads.
        self.webhook = (
            WebhookSender(
                self.settings.alert_webhook_url,
                secret.get_secret_value() if secret else None,
                self.settings.health,
            )
            if self.settings.alert_webhook_url
            else None
        )

    def _membership(self) -> Membership:
        return Membership(
            self.redis,
            self.keys,
            self.owner,
            window_ms=self.cfg.lease_ttl_ms,
            every_s=self.cfg.lease_renew_ms / 1000,
            on_change=self._poke_all,
        )

    @property
    def partitions(self) -> int:
        return self.keys.partitions

    @property
    def store(self) -> FiringStore:
        """Partition 0's store (the deployment's, with one partition)."""
        return self.engines[0].store

    @property
    def is_leader(self) -> bool:
        """True while this scheduler leads at least one partition."""
        return any(e.held is not None for e in self.engines)

    def led(self) -> list[int]:
        """The partitions this scheduler leads now."""
        return [e.partition for e in self.engines if e.held is not None]

    def leads(self, partition: int) -> bool:
        return self.engines[partition].held is not None

    def wants(self, partition: int) -> bool:
        """Whether to hold ``partition``'s lease: with one partition every scheduler tries
        (the first to take it leads, as before partitions existed); with more, its owner."""
        return self.partitions == 1 or self.membership.wants(partition)

    @property
    def fired_total(self) -> int:
        return sum(e.fired_total for e in self.engines)

    def stop(self) -> None:
        """Ask for a graceful stop: finish the batches in flight, give back the leases, return."""
        self._stop.set()

    async def resolve(self) -> Keys:
        """Read the deployment's number of partitions (once); raises PartitionMismatch when this
        scheduler is configured for another."""
        if not self._resolved:
            keys = await deployment_keys(self.redis, self.settings)
            self.keys = keys
            self.engines = [PartitionEngine(self, k) for k in keys.every_partition()]
            self.membership = self._membership()
            self._resolved = True
        return self.keys

    async def _resolve_waiting(self) -> None:
        """resolve(), waiting for Redis while it does not answer (a stop ends the wait)."""
        backoff = Backoff()
        while not self._resolved and not self._stop.is_set():
            try:
                await self.resolve()
            except (RedisError, OSError) as exc:
                delay = backoff.next()
                log.warning("redis.error", actor="start", error=str(exc), retry_s=delay)
                with anyio.move_on_after(delay):
                    await self._stop.wait()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        await self._resolve_waiting()
        if not self._resolved:  # stopped before Redis answered
            task_status.started()
            return
        log.info(
            "scheduler.start", owner=self.owner, prefix=self.settings.prefix,
            partitions=self.partitions,
        )  # fmt: skip
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(self.membership.run)
                await tg.start(self._listen_wake)
                if self.webhook is not None:
                    await tg.start(self.webhook.run)
                tg.start_soon(self._report_led)
                for engine in self.engines:
                    tg.start_soon(engine.run)
                self.running = True
                task_status.started()
                await self._stop.wait()
                tg.cancel_scope.cancel()
        finally:
            self.running = False
            # Each engine gave its lease back on the way out; now the others own its partitions.
            with anyio.CancelScope(shield=True), anyio.move_on_after(LEAVE_S):
                await self.membership.leave()
            log.info("scheduler.stop", owner=self.owner, fired_total=self.fired_total)

    def _poke_all(self) -> None:
        for engine in self.engines:
            engine.poke()

    def on_led_changed(self) -> None:
        self._led_changed.set()

    async def _report_led(self) -> None:
        """One log line when the set of partitions this scheduler leads changed (several leases
        taken or given back together are one change)."""
        reported: list[int] = []
        while True:
            await self._led_changed.wait()
            await anyio.sleep(LED_REPORT_S)
            self._led_changed = anyio.Event()
            led = self.led()
            if led != reported and self.partitions > 1:
                log.info(
                    "leader.partitions",
                    led=",".join(map(str, led)) or "none",
                    count=len(led),
                    partitions=self.partitions,
                    schedulers=len(self.membership.live),
                )
            reported = led

    # --- wake listener -------------------------------------------------------------------

    async def _listen_wake(self, *, task_status: TaskStatus[None]) -> None:
        """One subscription to the wake channels of every partition: a message wakes that
        partition's ticker (ignored unless this scheduler leads it)."""
        by_channel = {e.keys.wake: e for e in self.engines}
        backoff = Backoff()
        task_status.started()
        while True:
            try:
                async with subscribed(self.redis, *by_channel) as pubsub:
                    backoff.reset()
                    for engine in self.engines:  # messages may have been missed meanwhile
                        engine.wake(0)
                    async for message in messages(pubsub):
                        kind = message.get("type")
                        woken = by_channel.get(str(message.get("channel")))
                        if woken is not None and kind == "message":
                            woken.wake(message["data"])
                        elif woken is not None and kind == "subscribe":  # subscribed again
                            woken.wake(0)
            except (RedisError, OSError) as exc:
                delay = backoff.next()
                log.warning("redis.error", actor="wake", error=str(exc), retry_s=delay)
                await anyio.sleep(delay)
