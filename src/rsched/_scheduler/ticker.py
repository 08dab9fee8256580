"""A partition leader's ticker: reads what is due by Redis TIME, plans each schedule's
occurrences (misfire policies) and fires them (fire.FireRound); while idle, releases lost runs'
backlogs, parks and brings back schedules, warms the spec cache; then sleeps until the earliest
next run or a wake."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import AsyncIterator, Container

import anyio
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectReceiveStream
from redis.exceptions import RedisError

from rsched._core.backoff import Backoff
from rsched._core.codes import Code
from rsched._core.errors import LostLease, RschedError
from rsched._core.fire_plan import FireItem, plan
from rsched._core.log import get_logger
from rsched._core.metrics import METRICS
from rsched._core.rules import NAME_RE
from rsched._core.settings import SchedulerSettings
from rsched._scheduler.batching import FIRST_BATCH, Batching
from rsched._scheduler.calendar_cache import CalendarCache
from rsched._scheduler.fire import DueRead, FireRound
from rsched._scheduler.spec_cache import QUARANTINE_S, SpecCache
from rsched._store import parking
from rsched._store.depth import sample_depth
from rsched._store.firing import FiringStore

log = get_logger("rsched.scheduler")

ROUND_TIMEOUT_S = 30.0
# A round takes up the next due reads of a herd for this long at most (see chain).
CHAIN_S = 10.0
NOT_DUE_PAUSE_S = 0.01
PLAN_BUDGET_S = 2.0
# A full round's next due read goes out with this many batches (as the budget sizes them)
# still to run (see chain).
READ_AHEAD_BATCHES = 8
# A due read leaves out the ids of the reads this many back too: with batches sized by time,
# what is in flight can span more than one read.
READS_EXCLUDED = 3
# How often the leader looks for pending occurrences whose run was lost (its marker expired):
# markers live for hours, so a few seconds late is nothing; release_lost.lua, at most this many a
# call.
RELEASE_EVERY_S = 5.0
# How often the leader samples its partition's queue depths (docs/keys.md, {p}:depth): twice a
# minute, so that every minute gets one even when a round runs long.
DEPTH_EVERY_S = 30.0
RELEASE_BATCH = 100
# Parked schedules (rsched._store.parking): brought back every PARK_EVERY_S, at most UNPARK_CALLS
# calls of MOVE_LIMIT each time (a herd of 100k parked is back in ~50 s, minutes before it is
# due); parked only in an idle stretch of PARK_IDLE_MS or more, PARK_CALLS calls at a time, so
# that parking never holds up a fire.
PARK_EVERY_S = 1.0
UNPARK_CALLS = 8
PARK_CALLS = 8
PARK_IDLE_MS = 200


class Ticker:
    """One partition's rounds; it lives as long as its engine, and runs while the engine holds
    the partition's lease."""

    def __init__(
        self,
        store: FiringStore,
        cfg: SchedulerSettings,
        cache: SpecCache,
        sizing: Batching,
        wakes: MemoryObjectReceiveStream[object],
        calendars: CalendarCache,
    ) -> None:
        self.store = store
        self.cfg = cfg
        self.cache = cache
        self.sizing = sizing
        self.wakes = wakes
        self.fired_total = 0
        # The next round's due read, made while this round's last batches fire (see chain).
        self._read_ahead: DueRead | None = None
        self._release_at = 0.0  # monotonic time of the next look for lost runs' backlogs
        self._park_at = 0.0  # monotonic time of the next look at parked schedules
        self._depth_at = 0.0  # monotonic time of the next sample of the queues' depth
        self.calendars = calendars  # shared by the partitions this process leads

    def chores_now(self) -> None:
        """Have the next tick do the idle chores the schedules depend on (lost runs' backlogs,
        parking) whatever their pace: for a clock moved by hand (rsched.testing), where the
        wall clock that paces them says nothing of the time the schedules see. The depth sample
        keeps its wall-clock pace: it only feeds the dashboard's chart of the last hour."""
        self._release_at = self._park_at = 0.0

    async def run(self, lease: str) -> None:
        """Fire rounds under ``lease`` until the fire script refuses its token (then return)."""
        backoff = Backoff()
        self.cache.prefetched = (0, 0)
        while True:
            # A round is never interrupted half-way: a stop or a lost lease waits for the batch
            # in flight.
            with anyio.CancelScope(shield=True):
                try:
                    with anyio.fail_after(ROUND_TIMEOUT_S):
                        delay = await self.tick(lease)
                    backoff.reset()
                except LostLease:
                    return
                except (RedisError, OSError, TimeoutError, RschedError) as exc:
                    delay = backoff.next()
                    log.warning("redis.error", actor="ticker", error=str(exc), retry_s=delay)
            if delay > 0:
                with anyio.move_on_after(delay):
                    await self.wakes.receive()
                    # A schedule moved earlier, maybe into the part of the index prefetched.
                    self.cache.prefetched = (0, 0)
            else:
                await anyio.lowlevel.checkpoint()  # a stop is seen between rounds
            while True:  # drain: many wakes need only one look at what is due
                try:
                    self.wakes.receive_nowait()
                except anyio.WouldBlock:
                    break
                self.cache.prefetched = (0, 0)

    async def tick(self, lease: str) -> float:
        """Fire what is due now; return how long to sleep before looking again (seconds)."""
        read, self._read_ahead = self._read_ahead, None
        if read is None:
            # The first read after a pause takes one batch: it fires at once, and the rest of
            # a herd is read while it does (the round is full, so a read-ahead follows).
            read = await self._read_due(frozenset(), self.sizing.batch_size())
        sent, now, due, next_ms, full = read
        self.sizing.next_window(full)
        wall = time.monotonic()
        quarantine = self.cache.quarantine
        ready = [(sid, score) for sid, score in due if quarantine.get(sid, 0) <= wall]
        if not ready:
            return await self._idle(lease, wall, sent, now, due, next_ms)
        # `due` lists the oldest first: its lateness is the round's.
        counts = await self._fire(lease, ready, now, full, late_ms=max(0, now - ready[0][1]))
        if self._read_ahead is None:  # between herds' rounds it would hold the next one up
            await self._release_lost(lease)
            await self._tidy_index(lease, 0)  # brings back only: a herd may go on
            await self._sample_depth(now)
        # Not due by the script's TIME although due by the read's: the server clock stepped
        # back (a failover to a replica with another clock). Do not spin while it catches up.
        if counts.get(Code.NOT_DUE):
            return NOT_DUE_PAUSE_S
        if self._read_ahead is not None:  # a herd goes on at once
            return 0.0
        # Everything due at the last read went out: a steady stream's next fires, due within
        # the slack, wait for it and go out together, rather than a round each (a round's own
        # costs, a due read and a fire call, were most of a steady fire's CPU).
        return self.cfg.steady_slack_ms / 1000

    async def _idle(
        self,
        lease: str,
        wall: float,
        sent: float,
        now: int,
        due: list[tuple[str, int]],
        next_ms: int | None,
    ) -> float:
        """Nothing to fire: the chores of an idle stretch; return how long to sleep (seconds).
        ``wall`` is when the round looked at the read, ``sent`` when the read was sent."""
        await self._release_lost(lease)
        await self._sample_depth(now)
        idle_ms = next_ms - now if next_ms is not None else math.inf
        back, more = await self._tidy_index(lease, idle_ms)
        if back is not None:  # brought back from the parked buckets: maybe due before next_ms
            self.cache.prefetched = (0, 0)
            next_ms = back if next_ms is None else min(next_ms, back)
        if more:  # look again in PARK_EVERY_S, not max_idle_ms
            soon = now + int(PARK_EVERY_S * 1000)
            next_ms = soon if next_ms is None else min(next_ms, soon)
        await self.cache.warm_up(lease)
        # From when the read was sent: Redis read its clock after that, so waking at this
        # time is never late by the read's way back (at worst early by it: one more read).
        until = sent + (next_ms - now) / 1000 if next_ms is not None else math.inf
        await self.cache.prefetch(now, until)
        if due:  # only quarantined entries are due: look again when the first is released
            until = min(until, min(self.cache.quarantine[sid] for sid, _ in due))
        lead_s = self.cfg.prefetch_ms / 1000
        if lead_s > 0 and until - wall > lead_s:
            # Wake when the next run enters the prefetch window, not only when it is due:
            # otherwise a herd after a long idle stretch meets a cold cache.
            until -= lead_s
        delay = until - time.monotonic()  # the prefetch took some of the idle time
        return max(0.0, min(delay, self.cfg.max_idle_ms / 1000))

    async def _fire(
        self, lease: str, ready: list[tuple[str, int]], now: int, full: bool, late_ms: int
    ) -> dict[int, int]:
        """Fire ``ready`` and, while due reads come back full, what the next reads find."""
        fire = FireRound(self.store, lease, self.cache, self.sizing, self._read_due)
        try:
            return await fire.run(self._chain(ready, now, full, fire), late_ms)
        finally:
            self.fired_total += fire.fired
            self._read_ahead = fire.take_ahead()

    async def _chain(
        self, ready: list[tuple[str, int]], now: int, full: bool, fire: FireRound
    ) -> AsyncIterator[list[FireItem]]:
        """The fire items of ``ready`` (see _plan) and, while due reads come back full (a herd),
        of the next due read's entries, and so on: one read's worth is a few ms of firing
        (the budget bounds each read), and going through a round's end, where every batch in
        flight has to finish before the next round plans its first, left Redis idle a few ms
        each time. Each next read goes out while READ_AHEAD_BATCHES full batches are still to run
        (``fire.read_next``, given the ids to leave out: those of this read and the
        READS_EXCLUDED before it, which may still be in flight), and is taken up as soon as it
        is back."""
        chain_end = time.monotonic() + CHAIN_S
        recent: deque[set[str]] = deque(maxlen=READS_EXCLUDED)
        while True:
            ids = {sid for sid, _ in ready}
            before: set[str] = set().union(*recent)
            read_after = len(ready) - READ_AHEAD_BATCHES * self.sizing.batch_size()
            done: anyio.Event | None = None
            count = 0
            async for group in self._plan(ready, now, fire):
                yield group
                count += 1
                # Never before the round's first batch is out: the read would go first.
                if full and done is None and count >= max(read_after, FIRST_BATCH):
                    done = fire.read_next(ids | before)
            if not full:
                return
            if done is None:
                done = fire.read_next(ids | before)
            if time.monotonic() > chain_end:
                return  # the read is the next round's (the round has a time limit)
            await done.wait()
            read = fire.take_ahead()
            if read is None:
                return
            _, now, due, _, full = read
            self.sizing.next_window(full)
            wall = time.monotonic()
            quarantine = self.cache.quarantine
            ready = [(sid, score) for sid, score in due if quarantine.get(sid, 0) <= wall]
            recent.append(ids)

    async def _plan(
        self, ready: list[tuple[str, int]], now: int, fire: FireRound
    ) -> AsyncIterator[list[FireItem]]:
        """The fire items of each ready schedule, as a group per schedule. Lazy, a chunk of
        specs at a time (those the prefetch did not cache are read here): the first batches are
        on their way to Redis while the rest are still being read and planned. The next chunk's
        specs are read while this one is planned and fired (``fire.read_specs``): read only
        when its turn came, the scheduler waited for the read and parsed it while Redis, done
        with the batches sent, waited in turn (a herd larger than the spec cache took their
        sum)."""
        cache = self.cache
        specs = cache.specs
        budget_end = time.monotonic() + PLAN_BUDGET_S
        planned = calendars_read = False
        step = self.sizing.load_chunk()
        ahead: anyio.Event | None = None
        for index, (sid, score) in enumerate(ready):
            if index % step == 0:
                if ahead is not None:
                    await ahead.wait()
                chunk = [s for s, _ in ready[index : index + step]]
                await cache.cache(chunk)  # what the read ahead did not find (or all of it)
                following = [s for s, _ in ready[index + step : index + 2 * step]]
                ahead = None
                if any(s not in specs for s in following):
                    # This chunk's ids are kept too: making room for the next must not drop them.
                    ahead = fire.read_specs(chunk + following)
            # Misfire arithmetic after a long outage can be slow (counting a year of a
            # per-second cron): fire what is planned and leave the rest, still due, for the
            # next round, so every round makes progress and none runs into its timeout.
            if planned and time.monotonic() > budget_end:
                return
            if not NAME_RE.match(sid):
                # Not an id rsched writes (someone added it to the index by hand): the fire
                # script's item format and the history's JSON assume one.
                cache.set_aside(sid)
                log.error("schedule.bad_id", schedule=repr(sid), retry_s=QUARANTINE_S)
                continue
            spec = specs.get(sid)
            if spec is None:  # its hash is gone: a stale item lets the script drop the index
                planned = True
                yield [FireItem(sid, "", score, score, None, "fire")]
                continue
            excluding = None
            if spec.exclude:
                if not calendars_read:  # once a round, and only when a schedule names one
                    await self.calendars.refresh()
                    calendars_read = True
                excluding = self.calendars.lookup(spec.exclude, spec.timing.tz)
            try:
                items = plan(sid, spec, score, now, excluding)
            except (ValueError, ArithmeticError) as exc:
                cache.set_aside(sid)
                log.error("schedule.unplannable", schedule=sid, error=str(exc))
                continue
            for item in items:
                if item.action == "exclude":
                    log.info(
                        "excluded", schedule=sid, scheduled_at=item.sched, calendar=item.calendar
                    )
                elif item.action != "fire":
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

    async def _read_due(self, exclude: Container[str], limit: int | None = None) -> DueRead:
        """(monotonic time the read was sent, Redis now, due entries not in ``exclude``, next
        future score, whether the read was full)."""
        limit = limit or self.sizing.due_limit()
        sent = time.monotonic()
        now, due, next_ms = await self.store.due(limit)
        if METRICS.on:
            METRICS.redis_now(now)
        full = len(due) >= limit
        if exclude:
            due = [(sid, score) for sid, score in due if sid not in exclude]
        return sent, now, due, next_ms, full

    async def _sample_depth(self, now: int) -> None:
        """Each queue's depth for the minute of ``now`` (Redis time), every DEPTH_EVERY_S: the
        dashboard draws a queue's last hour from these samples."""
        wall = time.monotonic()
        if wall < self._depth_at:
            return
        self._depth_at = wall + DEPTH_EVERY_S
        await sample_depth(self.store.redis, self.store.keys, now)

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
            back = await parking.unpark(self.store, lease, everything=not park)
            if back is None:
                raise LostLease
            moved, first = back
            if first is not None and (earliest is None or first < earliest):
                earliest = first
            if moved < parking.MOVE_LIMIT:
                break
        else:
            return earliest, True
        if park and idle_ms >= PARK_IDLE_MS:
            for _ in range(PARK_CALLS):
                parked = await parking.park(self.store, lease)
                if parked is None:
                    raise LostLease
                if parked < parking.MOVE_LIMIT:
                    break
            else:
                return earliest, True
        return earliest, False
