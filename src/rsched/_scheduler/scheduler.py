"""The scheduler process's engine: partition sharing, due detection and firing, as anyio actors.

A deployment's schedules are spread over N partitions, each with its own lease and fencing
token; the live schedulers share them (rsched._scheduler.membership: rendezvous hashing), so S schedulers
lead about N/S partitions each and the others' are taken over when one dies. With N=1 one
scheduler leads and the others stand by, as before partitions existed.

Actors (each one task owning its state):
- membership (_scheduler/membership.py): beats into ``{prefix}:schedulers``, reads the live schedulers and
  recomputes which partitions this one should lead;
- wake listener, one for every partition: a schedule moved earlier than its partition's ticker
  planned (pub/sub), wake that ticker now;
- per partition, a lease keeper: acquires the partition's lease while this scheduler owns the
  partition, renews it well inside its TTL, gives it back when another scheduler became the
  owner; while it holds the lease it runs the partition's
  - ticker: reads what is due by Redis TIME, plans each schedule's occurrences (misfire
    policies) and fires them in batches sized so that each call holds Redis for at most
    fire_budget_ms; then sleeps until the earliest next run;
  - retention (_scheduler/retention.py) and health watch (_scheduler/health_watch.py) of the partition's data;
  all cancelled when the lease is lost or given back (a round in flight finishes first).
Correctness never rests on this process being right about its leadership: the fire script
checks the partition's fencing token, the schedule's version and the occurrence atomically.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import socket
import time
import uuid
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Callable, Container

import anyio
import anyio.lowlevel
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectSendStream
from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from rsched._core.backoff import Backoff
from rsched._core.codes import Code
from rsched._core.errors import LostLease, RschedError
from rsched._core.fire_plan import PLAN_FIELDS, FireItem, PlannedSpec, plan
from rsched._core.keys import Keys
from rsched._core.log import get_logger
from rsched._core.metrics import METRICS
from rsched._core.rules import NAME_RE
from rsched._core.settings import Settings
from rsched._ops.webhook import WebhookSender
from rsched._redis.cluster import subscribed
from rsched._redis.connection import messages
from rsched._redis.durability import Durability
from rsched._redis.scripts import migrating
from rsched._scheduler.health_watch import HealthWatch
from rsched._scheduler.membership import Membership
from rsched._scheduler.retention import Retention
from rsched._store import parking as _parking
from rsched._store.deployment import deployment_keys
from rsched._store.firing import FiringStore
from rsched._store.leases import LeaseStore

log = get_logger("rsched.scheduler")

# Bound once as globals: _after_fire compares them for every fired item.
STALE, NOT_DUE, WRONG_TYPE = Code.STALE, Code.NOT_DUE, Code.WRONG_TYPE
QUARANTINE_S = 30.0
SPEC_CACHE_MAX = 1_000_000
ROUND_TIMEOUT_S = 30.0
# A round takes up the next due reads of a herd for this long at most (see _chain).
CHAIN_S = 10.0
NOT_DUE_PAUSE_S = 0.01
PLAN_BUDGET_S = 2.0
# A full round's next due read goes out with this many batches (as the budget sizes them)
# still to run (see _chain).
READ_AHEAD_BATCHES = 8
# A due read leaves out the ids of the reads this many back too: with batches sized by time,
# what is in flight can span more than one read.
READS_EXCLUDED = 3
# Calls in flight at most, however small the time budget makes batches (see in_flight).
IN_FLIGHT_MAX = 32
# Batches are sized by time (settings fire_budget_ms) from the server µs each fired item cost in
# the calls before. Before the first measurement an item is assumed to cost this much (a herd's
# items took 15-35 µs inside Redis 7.0 on the VMs of bench/README.md): the first batches err on
# the small side. A batch never has fewer items than MIN_BATCH (the call's own costs, the lease
# check, the index read and write and a round trip, would dominate).
ITEM_US_START = 40.0
MIN_BATCH = 8
# How fast the per-item estimate follows a measurement: fast when items got dearer (a budget is
# a bound), slowly when cheaper; one measurement counts for at most SAMPLE_MAX_RATIO times the
# estimate (the server's process was descheduled for a moment, say).
ITEM_US_UP, ITEM_US_DOWN, SAMPLE_MAX_RATIO = 0.5, 0.2, 4.0
# Batches are sized for an item costing its mean plus DEV_WEIGHT times the mean deviation of the
# measurements (a moving average, following at DEV_RATE), and at least HEADROOM times the mean:
# the budget bounds the dearer calls too, not only the typical one. Costs rise faster than
# replies come back to show it: while Redis rehashes its keyspace (a herd's first fires create
# as many history keys as it has schedules, and the table doubles at each power of two) an item
# costs 2-2.5 times as much for dozens of calls, already sized and in flight.
DEV_WEIGHT, DEV_RATE, HEADROOM = 2.0, 0.25, 1.5
# A round's first batch: this many items, so that it goes out at the due instant, planned at once
# (the rest of the round is planned while it fires).
FIRST_BATCH = MIN_BATCH
# A due entry costs due.lua about this share of what a fired item costs fire.lua on average
# (0.5-0.7 µs against 7-9 µs, both measured in a 100k herd on one VM), and reading one
# schedule's planning fields (plan_fields.lua) this share of what an item is taken to cost: the due
# reads' and spec reads' sizes follow the budget too. A due read re-reads the entries still
# queued to fire (left out by id), so it is sized from the average cost, without headroom:
# a smaller one would be mostly those.
DUE_ENTRY_SHARE = 1 / 12
LOAD_SHARE = 1 / 2
# While rounds keep finding a full window (a herd), each reads twice as many due entries as the
# last, up to this multiple of window_size: fewer rounds, so fewer pauses between them.
WINDOW_GROWTH_MAX = 8
# The spec cache is frozen (see _freeze_cache) each time it grew by this many, given this much
# idle time before the next run.
FREEZE_GROWTH = 10_000
FREEZE_IDLE_S = 0.5
# Specs read per plan_fields.lua call (and per step of the prefetch), at most.
LOAD_CHUNK = 1_000
# How often the leader looks for pending occurrences whose run was lost (its marker expired):
# markers live for hours, so a few seconds late is nothing; release_lost.lua, at most this many a
# call.
RELEASE_EVERY_S = 5.0
RELEASE_BATCH = 100
# Parked schedules (rsched._store.parking): brought back every PARK_EVERY_S, at most UNPARK_CALLS
# calls of MOVE_LIMIT each time (a herd of 100k parked is back in ~50 s, minutes before it is
# due); parked only in an idle stretch of PARK_IDLE_MS or more, PARK_CALLS calls at a time, so
# that parking never holds up a fire.
PARK_EVERY_S = 1.0
UNPARK_CALLS = 8
PARK_CALLS = 8
PARK_IDLE_MS = 200
# Error replies about the server's state, not about one schedule's data.
_SERVER_CONDITIONS = (
    "OOM",
    "BUSY",
    "READONLY",
    "LOADING",
    "MASTERDOWN",
    "NOREPLICAS",
    "CLUSTERDOWN",
)
# A wake is a hint: this many wait for a partition's ticker at most (the rest are dropped).
WAKE_BUFFER = 100
# Lease changes of several partitions close together are logged as one line after this pause.
LED_REPORT_S = 0.2
# What a stop spends giving back the leases and leaving the list (Redis may be gone).
LEAVE_S = 2.0


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
        self.fired_total = 0
        self.held: str | None = None  # the lease, written by the lease keeper only
        self._poke = anyio.Event()
        self._wakes, self._wakes_out = anyio.create_memory_object_stream[object](WAKE_BUFFER)
        self._specs: dict[str, PlannedSpec] = {}
        self._quarantine: dict[str, float] = {}
        # (score, offset) up to which the prefetch has read the index; reset by a wake.
        self._prefetched: tuple[int, int] = (0, 0)
        self._window = self.cfg.window_size
        # Server µs per fired item (moving estimate), and when the last fire reply arrived.
        self._item_us = ITEM_US_START
        self._item_dev = 0.0  # mean deviation of the measurements from the estimate
        self._last_reply = 0.0
        self._seen_us = self._seen_items = 0  # the store's fire totals when last measured
        self._warm: str | None = None  # the lease under which the fire path was warmed up
        self._frozen = 0  # size of the spec cache at the last gc.freeze()
        # The next round's due read, made while this round's last batches fire (see _fire).
        self._read_ahead: tuple[float, int, list[tuple[str, int]], int | None, bool] | None = None
        self._release_at = 0.0  # monotonic time of the next look for lost runs' backlogs
        self._park_at = 0.0  # monotonic time of the next look at parked schedules
        self._retention = Retention(self.redis, self.settings, self._leads, keys=keys)

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

    # --- lease keeper --------------------------------------------------------------------

    async def run(self) -> None:
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
                tg.start_soon(self._tick_loop, lease, lost)
                was_lost = await self._hold(lease, lost)
                tg.cancel_scope.cancel()
        finally:
            self.held = None
            self.scheduler.on_led_changed()
            if not was_lost:
                with anyio.CancelScope(shield=True), anyio.move_on_after(LEAVE_S):
                    await self._release(lease)

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

    # --- ticker --------------------------------------------------------------------------

    async def _tick_loop(self, lease: str, lost: anyio.Event) -> None:
        backoff = Backoff()
        self._prefetched = (0, 0)
        while True:
            # A round is never interrupted half-way: a stop or a lost lease waits for the batch
            # in flight.
            with anyio.CancelScope(shield=True):
                try:
                    with anyio.fail_after(ROUND_TIMEOUT_S):
                        delay = await self._round(lease)
                    backoff.reset()
                except LostLease:
                    self._log_lease(
                        "leader.lost", "warning", lease=lease, reason="fencing token rejected"
                    )
                    lost.set()
                    self.poke()
                    return
                except (RedisError, OSError, TimeoutError, RschedError) as exc:
                    delay = backoff.next()
                    log.warning("redis.error", actor="ticker", error=str(exc), retry_s=delay)
            if delay > 0:
                with anyio.move_on_after(delay):
                    await self._wakes_out.receive()
                    # A schedule moved earlier, maybe into the part of the index prefetched.
                    self._prefetched = (0, 0)
            else:
                await anyio.lowlevel.checkpoint()  # a stop is seen between rounds
            while True:  # drain: many wakes need only one look at what is due
                try:
                    self._wakes_out.receive_nowait()
                except anyio.WouldBlock:
                    break
                self._prefetched = (0, 0)

    def item_cost_us(self) -> float:
        """What an item is taken to cost when sizing a call: the estimate plus its spread, and
        some headroom above the estimate."""
        return max(self._item_us + DEV_WEIGHT * self._item_dev, self._item_us * HEADROOM)

    def batch_size(self) -> int:
        """Items per fire call: as many as fit in the time budget, at most batch_size."""
        fit = int(self.cfg.fire_budget_ms * 1000 / self.item_cost_us())
        return max(MIN_BATCH, min(self.cfg.batch_size, fit))

    def in_flight(self) -> int:
        """Fire calls at once: max_in_flight full batches' worth of work, in as many calls as
        the time budget cuts it into. What waits in Redis is what bridges a pause of this
        process (a busy machine deschedules it for ms at a time): smaller batches alone would
        have left Redis idle in such pauses."""
        calls = self.cfg.max_in_flight * self.cfg.batch_size // self.batch_size()
        return max(self.cfg.max_in_flight, min(IN_FLIGHT_MAX, calls))

    def due_limit(self) -> int:
        """Due entries per read: the round's window, as far as the time budget allows."""
        fit = int(self.cfg.fire_budget_ms * 1000 / (self._item_us * DUE_ENTRY_SHARE))
        return max(self.batch_size(), min(self._window, fit))

    def load_chunk(self) -> int:
        """Specs per plan_fields.lua call: as many as fit in the time budget, at most LOAD_CHUNK."""
        fit = int(self.cfg.fire_budget_ms * 1000 / (self.item_cost_us() * LOAD_SHARE))
        return max(MIN_BATCH, min(LOAD_CHUNK, fit))

    def _measured(self, items: int, sent: float, replied: float) -> None:
        """Learn what a fired item costs from a fire call of ``items`` that has just replied:
        from the server's time of the calls that replied since the last one measured, or when
        the server cannot tell, from the time between when Redis could start on this call (its
        sending or the previous reply, whichever came later) and its reply."""
        store = self.store
        server_us = store.fire_server_us - self._seen_us
        if server_us > 0:
            items = store.fire_timed_items - self._seen_items
            if items < MIN_BATCH:  # the calls of a few items each are added up first
                return
            self._seen_us, self._seen_items = store.fire_server_us, store.fire_timed_items
        else:
            server_us = int((replied - max(sent, self._last_reply)) * 1e6)
            self._last_reply = replied
        if items < MIN_BATCH or server_us <= 0:
            return
        sample = min(server_us / items, self._item_us * SAMPLE_MAX_RATIO)
        rate = ITEM_US_UP if sample > self._item_us else ITEM_US_DOWN
        self._item_dev += DEV_RATE * (abs(sample - self._item_us) - self._item_dev)
        self._item_us += rate * (sample - self._item_us)

    async def _round(self, lease: str) -> float:
        """Fire what is due now; return how long to sleep before looking again (seconds)."""
        read, self._read_ahead = self._read_ahead, None
        if read is None:
            # The first read after a pause takes one batch: it fires at once, and the rest of
            # a herd is read while it does (the round is full, so a read-ahead follows).
            read = await self._read_due(frozenset(), self.batch_size())
        sent, now, due, next_ms, full = read
        base = self.cfg.window_size
        self._window = min(self._window * 2, base * WINDOW_GROWTH_MAX) if full else base
        wall = time.monotonic()
        ready = [(sid, score) for sid, score in due if self._quarantine.get(sid, 0) <= wall]
        if not ready:
            await self._release_lost(lease)
            idle_ms = next_ms - now if next_ms is not None else math.inf
            back, more = await self._tidy_index(lease, idle_ms)
            if back is not None:  # brought back from the parked buckets: maybe due before next_ms
                self._prefetched = (0, 0)
                next_ms = back if next_ms is None else min(next_ms, back)
            if more:  # look again in PARK_EVERY_S, not max_idle_ms
                soon = now + int(PARK_EVERY_S * 1000)
                next_ms = soon if next_ms is None else min(next_ms, soon)
            await self._warm_up(lease)
            # From when the read was sent: Redis read its clock after that, so waking at this
            # time is never late by the read's way back (at worst early by it: one more read).
            until = sent + (next_ms - now) / 1000 if next_ms is not None else math.inf
            await self._prefetch(now, until)
            if due:  # only quarantined entries are due: look again when the first is released
                until = min(until, min(self._quarantine[sid] for sid, _ in due))
            lead_s = self.cfg.prefetch_ms / 1000
            if lead_s > 0 and until - wall > lead_s:
                # Wake when the next run enters the prefetch window, not only when it is due:
                # otherwise a herd after a long idle stretch meets a cold cache.
                until -= lead_s
            delay = until - time.monotonic()  # the prefetch took some of the idle time
            return max(0.0, min(delay, self.cfg.max_idle_ms / 1000))

        # `due` lists the oldest first: its lateness is the round's.
        counts = await self._fire(
            lease,
            lambda read_next: self._chain(ready, now, full, read_next),
            late_ms=max(0, now - ready[0][1]),
        )
        if self._read_ahead is None:  # between herds' rounds it would hold the next one up
            await self._release_lost(lease)
            await self._tidy_index(lease, 0)  # brings back only: a herd may go on
        # Not due by the script's TIME although due by the read's: the server clock stepped
        # back (a failover to a replica with another clock). Do not spin while it catches up.
        return NOT_DUE_PAUSE_S if counts.get(Code.NOT_DUE) else 0.0

    async def _warm_up(self, lease: str) -> None:
        """Once per lease, while idle: have the connections of max_in_flight concurrent fire
        calls open and fire.lua loaded, so that a herd's first batch pays neither (they took
        ~10 ms of the first job's time, a NOSCRIPT round and new connections)."""
        if self._warm == lease:
            return
        self._warm = lease

        async def one(load: bool) -> None:
            with contextlib.suppress(RedisError, OSError):  # only a head start: never an error
                if load:
                    script = self.store.script("fire")
                    await self.redis.script_load(script.script)
                else:
                    await self.redis.ping()

        # At once, so that each takes a connection of its own from the pool.
        async with anyio.create_task_group() as tg:
            for n in range(self.cfg.max_in_flight):
                tg.start_soon(one, n == 0)

    async def _release_lost(self, lease: str) -> None:
        """Every RELEASE_EVERY_S, release the backlogs of runs that were lost."""
        if time.monotonic() < self._release_at:
            return
        self._release_at = time.monotonic() + RELEASE_EVERY_S
        released = await self.store.release_lost(lease, RELEASE_BATCH)
        if released is None:
            raise LostLease
        if released:
            log.warning("backlog.released", released=released, reason="marker_expired")

    async def _tidy_index(self, lease: str, idle_ms: float) -> tuple[int | None, bool]:
        """Every PARK_EVERY_S, bring back the parked schedules due soon, and when the next run
        is ``idle_ms`` or more away, park those due far off (rsched._store.parking; with
        ``scheduler.park`` off, bring everything back and park nothing). Returns the earliest
        next run brought back (None when none was), and whether more is left to move."""
        if time.monotonic() < self._park_at:
            return None, False
        self._park_at = time.monotonic() + PARK_EVERY_S
        park = self.cfg.park
        earliest: int | None = None
        for _ in range(UNPARK_CALLS):
            back = await _parking.unpark(self.store, lease, everything=not park)
            if back is None:
                raise LostLease
            moved, first = back
            if first is not None and (earliest is None or first < earliest):
                earliest = first
            if moved < _parking.MOVE_LIMIT:
                break
        else:
            return earliest, True
        if park and idle_ms >= PARK_IDLE_MS:
            for _ in range(PARK_CALLS):
                parked = await _parking.park(self.store, lease)
                if parked is None:
                    raise LostLease
                if parked < _parking.MOVE_LIMIT:
                    break
            else:
                return earliest, True
        return earliest, False

    async def _read_due(
        self, exclude: Container[str], limit: int | None = None
    ) -> tuple[float, int, list[tuple[str, int]], int | None, bool]:
        """(monotonic time the read was sent, Redis now, due entries not in ``exclude``, next
        future score, whether the read was full)."""
        limit = limit or self.due_limit()
        sent = time.monotonic()
        now, due, next_ms = await self.store.due(limit)
        if METRICS.on:
            METRICS.redis_now(now)
        full = len(due) >= limit
        if exclude:
            due = [(sid, score) for sid, score in due if sid not in exclude]
        return sent, now, due, next_ms, full

    async def _chain(
        self,
        ready: list[tuple[str, int]],
        now: int,
        full: bool,
        read_next: Callable[[set[str]], anyio.Event],
    ) -> AsyncIterator[list[FireItem]]:
        """The fire items of ``ready`` (see _plan) and, while due reads come back full (a herd),
        of the next due read's entries, and so on: one read's worth is a few ms of firing
        (the budget bounds each read), and going through a round's end, where every batch in
        flight has to finish before the next round plans its first, left Redis idle a few ms
        each time. Each next read goes out while READ_AHEAD_BATCHES full batches are still to run
        (``read_next``, given the ids to leave out: those of this read and the READS_EXCLUDED
        before it, which may still be in flight), and is taken up as soon as it is back."""
        chain_end = time.monotonic() + CHAIN_S
        recent: deque[set[str]] = deque(maxlen=READS_EXCLUDED)
        while True:
            ids = {sid for sid, _ in ready}
            before: set[str] = set().union(*recent)
            read_after = len(ready) - READ_AHEAD_BATCHES * self.batch_size()
            done: anyio.Event | None = None
            count = 0
            async for group in self._plan(ready, now):
                yield group
                count += 1
                # Never before the round's first batch is out: the read would go first.
                if full and done is None and count >= max(read_after, FIRST_BATCH):
                    done = read_next(ids | before)
            if not full:
                return
            if done is None:
                done = read_next(ids | before)
            if time.monotonic() > chain_end:
                return  # the read is the next round's (the round has a time limit)
            await done.wait()
            read, self._read_ahead = self._read_ahead, None
            if read is None:
                return
            _, now, due, _, full = read
            base = self.cfg.window_size
            self._window = min(self._window * 2, base * WINDOW_GROWTH_MAX) if full else base
            wall = time.monotonic()
            ready = [(sid, score) for sid, score in due if self._quarantine.get(sid, 0) <= wall]
            recent.append(ids)

    async def _plan(self, ready: list[tuple[str, int]], now: int) -> AsyncIterator[list[FireItem]]:
        """The fire items of each ready schedule, as a group per schedule. Lazy, a chunk of
        specs at a time (those the prefetch did not cache are read here): the first batches are
        on their way to Redis while the rest are still being read and planned."""
        budget_end = time.monotonic() + PLAN_BUDGET_S
        planned = False
        step = self.load_chunk()
        for index, (sid, score) in enumerate(ready):
            if index % step == 0:
                chunk = ready[index : index + step]
                await self._load([s for s, _ in chunk if s not in self._specs])
            # Misfire arithmetic after a long outage can be slow (counting a year of a
            # per-second cron): fire what is planned and leave the rest, still due, for the
            # next round, so every round makes progress and none runs into its timeout.
            if planned and time.monotonic() > budget_end:
                return
            if not NAME_RE.match(sid):
                # Not an id rsched writes (someone added it to the index by hand): the fire
                # script's item format and the history's JSON assume one.
                self._quarantine[sid] = time.monotonic() + QUARANTINE_S
                log.error("schedule.bad_id", schedule=repr(sid), retry_s=QUARANTINE_S)
                continue
            spec = self._specs.get(sid)
            if spec is None:  # its hash is gone: a stale item lets the script drop the index
                planned = True
                yield [FireItem(sid, "", score, score, None, "fire")]
                continue
            try:
                items = plan(sid, spec, score, now)
            except (ValueError, ArithmeticError) as exc:
                self._quarantine[sid] = time.monotonic() + QUARANTINE_S
                log.error("schedule.unplannable", schedule=sid, error=str(exc))
                continue
            for item in items:
                if item.action != "fire":
                    if METRICS.on:
                        METRICS.misfire(spec.misfire, item.action, item.missed)
                    log.info(
                        "misfire",
                        schedule=sid,
                        policy=spec.misfire,
                        action=item.action,
                        scheduled_at=item.sched,
                        missed=item.missed,
                        late_ms=now - item.expect,
                    )
            planned = True
            yield items

    async def _fire(
        self,
        lease: str,
        groups_of: Callable[[Callable[[set[str]], anyio.Event]], AsyncIterable[list[FireItem]]],
        late_ms: int,
    ) -> dict[int, int]:
        """Fire the groups (one schedule's items each) in batches, ``max_in_flight`` calls at
        once. ``groups_of`` is given a function that sends the next due read (leaving out the
        ids it is given) behind the batches already queued, and returns an event set once the
        read is back (in ``_read_ahead``)."""
        started = time.perf_counter()
        sent = 0
        counts: dict[int, int] = {}
        lost = False
        # Raised after the task group, unwrapped, so the ticker's handlers see the real error.
        failures: list[Exception] = []

        async def send(batch: list[list[FireItem]]) -> None:
            nonlocal lost
            flat = [item for group in batch for item in group]
            try:
                async with limiter:
                    sent = time.perf_counter()
                    codes = await self.store.fire(lease, flat)
                    self._measured(len(flat), sent, time.perf_counter())
            except ResponseError as exc:
                if str(exc).startswith(_SERVER_CONDITIONS) or migrating(exc):
                    # The server cannot take writes, or the slot is still migrating past the
                    # call's own retries: the round is tried again with backoff.
                    failures.append(exc)
                    return
                # The script failed on something it did not foresee. Find the schedule that
                # causes it (one call per schedule) and set it aside; the others still fire.
                if len(batch) > 1:
                    for group in batch:
                        await send([group])
                    return
                sid = batch[0][0].schedule_id
                self._quarantine[sid] = time.monotonic() + QUARANTINE_S
                self._specs.pop(sid, None)
                log.error("schedule.fire_failed", schedule=sid, error=str(exc))
                return
            except (RedisError, OSError, RschedError) as exc:
                failures.append(exc)
                return
            if codes is None:
                lost = True
                if METRICS.on:  # refused by the lease check: none of them fired
                    METRICS.stale_refused.inc(len(flat))
                return
            for item, code in zip(flat, codes, strict=True):
                counts[code] = counts.get(code, 0) + 1
                self._after_fire(item, code)
            if METRICS.on:
                METRICS.fired(flat, codes)

        async def read_next(exclude: set[str], done: anyio.Event) -> None:
            # Queued behind the batches planned so far (the limiter is first come, first
            # served), so it goes out with this round's last few batches still to run: Redis
            # fires those while the reply travels and is parsed, instead of waiting for the
            # next round's first batch. Entries of this round are due in the read too: left
            # out, they are this round's. One that did not fire after all is found by a later
            # read.
            try:
                with contextlib.suppress(RedisError, OSError):
                    async with limiter:
                        read = await self._read_due(exclude)
                    if read[2] and not (lost or failures):
                        self._read_ahead = read
            finally:
                done.set()

        limiter = anyio.CapacityLimiter(self.cfg.max_in_flight)
        async with anyio.create_task_group() as tg:

            def launch(exclude: set[str]) -> anyio.Event:
                done = anyio.Event()
                tg.start_soon(read_next, exclude, done)
                return done

            async for batch in _batches(groups_of(launch), self.batch_size, FIRST_BATCH):
                limiter.total_tokens = self.in_flight()
                tg.start_soon(send, batch)
                sent += 1
                # Let the batch go out now: Redis fires it while the next one is planned.
                await anyio.lowlevel.checkpoint()
        if lost or failures:
            self._read_ahead = None
        if not sent:
            return counts
        # Batches that fired before one was refused (the lease moved on) or failed count too.
        self.fired_total += counts.get(Code.FIRED, 0)
        if lost:
            raise LostLease
        if failures:
            raise failures[0]
        log.info(
            "fired",
            fired=counts.get(Code.FIRED, 0),
            skipped=counts.get(Code.SKIPPED, 0),
            buffered=counts.get(Code.BUFFERED, 0),
            misfire_skipped=counts.get(Code.MISFIRE_SKIPPED, 0),
            stale=counts.get(Code.STALE, 0),
            late_ms=late_ms,
            took_ms=round((time.perf_counter() - started) * 1000, 1),
            calls=sent,
            batch=self.batch_size(),  # the size the budget allows now
        )
        return counts

    def _after_fire(self, item: FireItem, code: int) -> None:
        sid = item.schedule_id
        if code == STALE or item.next is None:
            # Another generation, gone, or complete: forget the cached spec, read it afresh.
            self._specs.pop(sid, None)
        elif code == WRONG_TYPE:
            self._quarantine[sid] = time.monotonic() + QUARANTINE_S
            log.error("schedule.bad_keys", schedule=sid, retry_s=QUARANTINE_S)
        elif code == NOT_DUE:
            log.warning("schedule.not_due", schedule=sid, scheduled_at=item.sched)

    async def _load(self, ids: list[str]) -> None:
        if len(self._specs) > SPEC_CACHE_MAX:
            self._specs.clear()
        step = self.load_chunk()
        for start in range(0, len(ids), step):
            chunk = ids[start : start + step]
            found = await self.store.plan_fields(chunk, PLAN_FIELDS)
            for sid, fields in zip(chunk, found, strict=True):
                if fields is None:  # not a hash: someone else wrote the key; keep the rest going
                    self._quarantine[sid] = time.monotonic() + QUARANTINE_S
                    log.error("schedule.bad_keys", schedule=sid, retry_s=QUARANTINE_S)
                    continue
                if not fields:
                    continue
                try:
                    self._specs[sid] = PlannedSpec.from_hash(fields)
                except (RschedError, ValueError, KeyError, TypeError) as exc:
                    self._quarantine[sid] = time.monotonic() + QUARANTINE_S
                    log.error("schedule.unreadable", schedule=sid, error=str(exc))

    async def _prefetch(self, now: int, until: float) -> None:
        """Read the specs of schedules due soon while idle, so a herd fires from a warm cache.

        Pages through everything due within ``prefetch_ms``, and stops early when the first of
        them is about to come due (``until``, monotonic seconds): firing on time comes first.
        Incremental: a round reads only the part of the index no earlier round has read, so a
        steady stream of fires does not re-read seconds of upcoming ids after every fire.
        """
        if self.cfg.prefetch_ms <= 0:
            return
        # A page at a time, so the deadline is checked often: firing on time comes first.
        size, horizon = min(self.cfg.window_size, self.load_chunk()), now + self.cfg.prefetch_ms
        after, offset = self._prefetched
        if after < now:  # what lies before now is due: the due read covers it
            after, offset = now, 0
        while len(self._specs) < SPEC_CACHE_MAX and time.monotonic() < until - 0.05:
            ids = await self.store.upcoming(after, horizon, size, offset)
            await self._load([sid for sid in ids if sid not in self._specs])
            if len(ids) < size:
                self._prefetched = (horizon, 0)
                self._freeze_cache(until)
                return
            offset += size
            self._prefetched = (after, offset)
        self._freeze_cache(until)

    def _freeze_cache(self, until: float) -> None:
        """Move the cached specs out of the garbage collector's reach once the cache has grown.

        Python's full collections traverse every live object, the whole cache included, and a
        herd allocates enough to set off several, each a pause of every fire (bench/README.md
        has the numbers). The cache holds no reference cycles, so frozen specs are still
        freed by reference counting when dropped. Collected first (nothing cyclic gets frozen),
        and only with time to spare before the next run is due.
        """
        if len(self._specs) - self._frozen < FREEZE_GROWTH:
            return
        if until - time.monotonic() < FREEZE_IDLE_S:
            return
        gc.collect()
        gc.freeze()
        self._frozen = len(self._specs)


def _offer(inbox: MemoryObjectSendStream[object], message: object) -> None:
    # When the inbox is full the ticker is already due to look: a wake is only a hint.
    with contextlib.suppress(anyio.WouldBlock):
        inbox.send_nowait(message)


async def _batches(
    groups: AsyncIterable[list[FireItem]], size: int | Callable[[], int], first: int = 0
) -> AsyncIterator[list[list[FireItem]]]:
    """Cut into batches of about ``size`` items (a callable is asked again for each batch: the
    scheduler's follows what the calls before took), never splitting one schedule's chain; the
    first batch of about ``first`` items when given (out as soon as that much is planned)."""
    if isinstance(size, int):
        size = _constant(size)
    batch: list[list[FireItem]] = []
    items, limit = 0, min(first, size()) if first else size()
    async for group in groups:
        batch.append(group)
        items += len(group)
        if items >= limit:
            yield batch
            batch, items, limit = [], 0, size()
    if batch:
        yield batch


def _constant(value: int) -> Callable[[], int]:
    return lambda: value
