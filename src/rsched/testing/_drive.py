"""The engine of a TestEnv: the scheduler's ticker and the worker's reader, runners and acker,
driven step by step at one virtual time instead of by their loops and sleeps.

Each step at time T goes through the production code: the ticker's tick (due read by the
scripts' clock, the misfire planning, fire.lua in batches, the leader's chores: lost backlogs,
parking), the promoter's calls (promote.lua, limit_resume.lua), the reader's take
and dispatch (take.lua, expire.lua, limit_acquire.lua, start.lua), the runners (the handlers,
retry.lua, dead.lua) and the acker (complete.lua). A step repeats until nothing is left to do at
T; :meth:`Drive.next_due` says when something is due next.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from typing import TypeVar

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream
from redis.asyncio import Redis

from rsched._core import tracing
from rsched._core.errors import StateError
from rsched._core.keys import Keys
from rsched._core.settings import Settings
from rsched._scheduler.batching import Batching
from rsched._scheduler.calendar_cache import CalendarCache
from rsched._scheduler.spec_cache import SpecCache
from rsched._scheduler.ticker import Ticker
from rsched._store.calendars import CalendarStore
from rsched._store.firing import FiringStore
from rsched._store.leases import LeaseStore
from rsched._store.parking import UNPARK_WITHIN_MS
from rsched._store.queues import QueueStore
from rsched._store.worker_calls import Done
from rsched._worker.acker import Acker
from rsched._worker.inbox import Inbox
from rsched._worker.journal import Journal
from rsched._worker.reader import Reader
from rsched._worker.runner import Runner
from rsched._worker.state import Stream, WorkerState
from rsched._worker.traced import TracedRunner
from rsched._worker.upkeep import PROMOTE_BATCH, RESUME_BATCH
from rsched._worker.worker import Worker

#: The lease the drive holds (ms of the server's own clock, which key expiry follows): renewed
#: at each call of the environment, so a pause of a test between two calls never loses it.
LEASE_TTL_MS = 3_600_000
#: Steps at one time before the drive gives up: each fires, promotes or runs something, so a
#: step that never ends is a loop in the application (a handler that enqueues itself at once).
MAX_STEPS = 10_000

T = TypeVar("T")


class Drive:
    """The scheduler and the worker of one TestEnv, on one client and one partition."""

    def __init__(self, redis: Redis, settings: Settings, worker: Worker | None) -> None:
        self.redis = redis
        self.keys = Keys(settings.prefix)
        cfg = settings.scheduler
        self.firing = FiringStore.from_settings(redis, settings, self.keys)
        self.leases = LeaseStore(redis, self.keys)
        sizing = Batching(cfg)
        self._wakes_in, wakes = anyio.create_memory_object_stream[object](1)
        self.ticker = Ticker(
            self.firing,
            cfg,
            SpecCache(self.firing, redis, cfg, sizing),
            sizing,
            wakes,
            CalendarCache(CalendarStore(redis, self.keys)),
        )
        self.lease: str | None = None
        self.store = QueueStore.from_settings(redis, settings, self.keys)
        self.queues: list[str] = list(settings.worker.queues)
        self._last: Probe | None = None  # what the last step of settle saw
        self.now_ms = 0  # the virtual time of the step under way
        self.state: WorkerState | None = None
        if worker is not None:
            stores = [self.store]
            self.state = worker._new_state(worker._run_handlers(stores), stores, settings)
            runner_class = TracedRunner if tracing.decide(settings.tracing) else Runner
            self._jobs = Inbox()
            self._acks_in, self._acks = anyio.create_memory_object_stream[tuple[Stream, Done]](
                math.inf
            )
            self.reader = Reader(self.state, self._jobs)
            self.journal = Journal(self.state)
            self.journal.clock = lambda: self.now_ms  # what handlers say, at the virtual time
            self.runner = runner_class(self.state, self._acks_in, self.journal)
            self.acker = Acker(self.state)

    async def open(self) -> None:
        """Take the partition's lease and create the worker's consumer groups."""
        owner = f"rsched.testing:{uuid.uuid4().hex[:6]}"  # as a scheduler's: one per process
        self.lease, _ = await self.leases.acquire(owner, LEASE_TTL_MS)
        if self.lease is None:
            raise StateError(
                f"another scheduler leads prefix {self.keys.prefix!r}: give the TestEnv a "
                "prefix of its own"
            )
        if self.state is not None:
            await self.store.create_groups(self.queues)

    async def close(self) -> None:
        if self.lease is not None:
            await self.leases.release(self.lease)
            self.lease = None
        self._wakes_in.close()
        if self.state is not None:
            self._jobs.close()
            for stream in (self._acks_in, self._acks):
                stream.close()

    async def renew(self) -> None:
        assert self.lease is not None
        if not await self.leases.renew(self.lease, LEASE_TTL_MS):
            raise StateError("the TestEnv lost its lease: another scheduler runs on its prefix")

    async def settle(self, now_ms: int) -> None:
        """Do everything due at ``now_ms`` (the clock set there): fire, promote, run; again
        until a step does nothing. Each step starts with a look at what is due (one round trip)
        and calls only what has something to do."""
        self.now_ms = now_ms
        # The chores are paced by the wall clock: once per virtual time is their pace here.
        self.ticker.chores_now()
        last: Probe | None = None
        for _ in range(MAX_STEPS):
            probe = self._last = await self._probe()
            fired = moved = 0
            if last is None or probe.schedules <= now_ms:  # the first tick does the chores
                fired = await self._fire()
            if probe.delayed <= now_ms:
                moved = await self._promote()
            if probe.limits <= now_ms:
                moved += await self._resume()
            # An entry fired, promoted or resumed now, or written by the handlers of the step
            # before (an enqueue, a pending occurrence released), is in a stream.
            taken = await self._work() if fired or moved or probe.entries else 0
            if not (fired or moved or taken):
                if probe.schedules > now_ms:
                    return
                if probe == last:  # due, and a tick left it there: the scheduler set it aside
                    raise StateError(
                        f"a schedule due at {now_ms} ms does not fire: the log says why "
                        "(rsched.scheduler: schedule.bad_id, schedule.unplannable, ...)"
                    )
            last = probe
        raise StateError(
            f"still busy after {MAX_STEPS} steps at one time ({now_ms} ms): does a handler "
            "enqueue or trigger work due at once, over and over?"
        )

    async def _probe(self) -> Probe:
        """When the earliest schedule, delayed job and limit of the partition are due, and
        how many entries the worker's streams hold (a stream keeps only entries not yet
        acknowledged: waiting, or taken and not ended)."""
        k = self.keys
        streams = [s for q in self.queues for s in k.streams(q)] if self.state else []
        async with self.redis.pipeline(transaction=False) as pipe:
            for key in (k.schedules, k.parked, *map(k.delayed_queue, self.queues)):
                pipe.zrange(key, 0, 0, withscores=True)
            for key in k.limits[1], k.limits[6]:  # holds (their lapse), ready
                pipe.zrange(key, 0, 0, withscores=True)
            for key in streams:
                pipe.xlen(key)
            found = await pipe.execute()
        heads = [f[0][1] if f else math.inf for f in found[: len(found) - len(streams)]]
        index, parked, *delayed = heads[: 2 + len(self.queues)]
        return Probe(
            min(index, parked - UNPARK_WITHIN_MS),
            min(delayed, default=math.inf),
            min(heads[-2:]) if self.state is not None else math.inf,
            sum(found[len(heads) :]),
        )

    async def _fire(self) -> int:
        """One tick of the ticker: fire what is due (and its chores); how many it fired."""
        assert self.lease is not None
        before = self.ticker.fired_total
        await self.ticker.tick(self.lease)
        return self.ticker.fired_total - before

    async def _promote(self) -> int:
        """The promoter's call: delayed jobs and retries that are due into their streams."""
        if self.state is None:
            return 0
        total = 0
        while True:
            moved, _ = await self.store.promote(self.queues, PROMOTE_BATCH)
            total += moved
            if moved < PROMOTE_BATCH:
                return total

    async def _resume(self) -> int:
        """The promoter's other call: jobs waiting on limits that opened start."""
        assert self.state is not None
        total = 0
        while True:
            moved, _ = await self.store.resume(self.queues, self.state.hold_ms, RESUME_BATCH)
            total += moved
            if moved < RESUME_BATCH:
                return total

    async def _work(self) -> int:
        """The reader's take of everything waiting (as many entries as the worker has slots),
        its jobs run by the runner one after the other, their outcomes recorded; how many
        entries it took."""
        state = self.state
        if state is None:
            return 0
        lanes = [(q, level) for level in self.reader.turns.next() for q in self.queues]
        got = await self.store.take(lanes, state.consumer, state.slots.total - state.slots.used)
        taken = sum(len(entries) for _, entries in got)
        if not taken:
            return 0
        state.slots.take(taken)
        for lane, entries in got:
            await self.reader.dispatch(lane, [(eid, fields, 1) for eid, fields in entries])
        # One at a time, in the order taken: the same test writes the same records in the same
        # order on every run (runners side by side would interleave them by chance).
        for job in self._jobs.drain():
            await self.runner.run_job(job)
        batch = _drain(self._acks)
        if batch:
            await self.acker.ack(batch)
        await self.journal.flush()
        return taken

    def next_due(self, now_ms: int) -> int | None:
        """When something is next due after ``now_ms`` (by the last step's look): a schedule
        (a parked one when the leader brings it back), a delayed job or retry, a limit."""
        last = self._last
        due = min(last.schedules, last.delayed, last.limits) if last is not None else math.inf
        return max(now_ms + 1, math.ceil(due)) if math.isfinite(due) else None


@dataclass(frozen=True, slots=True)
class Probe:
    """When the first of each kind of work is due (ms; inf: none), and the entries waiting."""

    schedules: float
    delayed: float
    limits: float
    entries: int


def _drain(stream: MemoryObjectReceiveStream[T]) -> list[T]:
    """What ``stream`` holds now (nothing is waited for: every sender has run)."""
    out: list[T] = []
    while True:
        try:
            out.append(stream.receive_nowait())
        except (anyio.WouldBlock, anyio.EndOfStream):
            return out
