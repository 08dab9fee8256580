"""A partition leader's cache of schedule specs (the fields planning needs), and the schedules
set aside for a while (quarantine): loading specs, the prefetch of those due soon, the warm-up
of the fire path and the freezing of the cache out of the garbage collector's reach."""

from __future__ import annotations

import contextlib
import gc
import time
from itertools import islice

import anyio
from redis.asyncio import Redis
from redis.exceptions import RedisError

from rsched._core.errors import RschedError
from rsched._core.fire_plan import PLAN_FIELDS, PlannedSpec
from rsched._core.log import get_logger
from rsched._core.settings import SchedulerSettings
from rsched._scheduler.batching import Batching
from rsched._store.firing import FiringStore

log = get_logger("rsched.scheduler")

QUARANTINE_S = 30.0
# The spec cache is frozen (see freeze) each time it grew by this many, given this much idle
# time before the next run.
FREEZE_GROWTH = 10_000
FREEZE_IDLE_S = 0.5


class SpecCache:
    def __init__(
        self, store: FiringStore, redis: Redis, cfg: SchedulerSettings, sizing: Batching
    ) -> None:
        self.store = store
        self.redis = redis
        self.cfg = cfg
        self.sizing = sizing
        # In the order read (the oldest go first when it is full: _make_room). A plain dict:
        # an OrderedDict's links cost ~50 bytes more an entry.
        self.specs: dict[str, PlannedSpec] = {}
        # Schedule id -> monotonic time until which it is left out of every round.
        self.quarantine: dict[str, float] = {}
        # (score, offset) up to which the prefetch has read the index; reset by a wake.
        self.prefetched: tuple[int, int] = (0, 0)
        self._warm: str | None = None  # the lease under which the fire path was warmed up
        self._frozen = 0  # size of the spec cache at the last gc.freeze()

    def set_aside(self, sid: str) -> None:
        """Leave schedule ``sid`` out of the rounds for QUARANTINE_S."""
        self.quarantine[sid] = time.monotonic() + QUARANTINE_S

    async def cache(self, ids: list[str]) -> None:
        """Have the specs of ``ids`` in the cache: those missing are read, after room is made
        for them among the others (none of ``ids`` goes). After it, an id without a spec is
        one whose hash is gone, or set aside."""
        missing = [sid for sid in ids if sid not in self.specs]
        if missing:
            self._make_room(len(missing), keep=ids)
            await self._load(missing)

    async def _load(self, ids: list[str]) -> None:
        """Read and cache the specs of ``ids``; set aside those that cannot be read."""
        step = self.sizing.load_chunk()
        for start in range(0, len(ids), step):
            chunk = ids[start : start + step]
            found = await self.store.plan_fields(chunk, PLAN_FIELDS)
            for sid, fields in zip(chunk, found, strict=True):
                if fields is None:  # not a hash: someone else wrote the key; keep the rest going
                    self.set_aside(sid)
                    log.error("schedule.bad_keys", schedule=sid, retry_s=QUARANTINE_S)
                    continue
                if not fields:
                    continue
                try:
                    self.specs[sid] = PlannedSpec.from_hash(fields)
                except (RschedError, ValueError, KeyError, TypeError) as exc:
                    self.set_aside(sid)
                    log.error("schedule.unreadable", schedule=sid, error=str(exc))

    async def prefetch(self, now: int, until: float) -> None:
        """Read the specs of schedules due soon while idle, so a herd fires from a warm cache.

        Pages through everything due within ``prefetch_ms``, and stops early when the first of
        them is about to come due (``until``, monotonic seconds): firing on time comes first.
        Incremental: a round reads only the part of the index no earlier round has read, so a
        steady stream of fires does not re-read seconds of upcoming ids after every fire.
        """
        if self.cfg.prefetch_ms <= 0:
            return
        # A page at a time, so the deadline is checked often: firing on time comes first.
        size = min(self.cfg.window_size, self.sizing.load_chunk())
        horizon = now + self.cfg.prefetch_ms
        after, offset = self.prefetched
        if after < now:  # what lies before now is due: the due read covers it
            after, offset = now, 0
        # Never past a full cache: what it read first (due first) would make room for the rest.
        while len(self.specs) < self.cfg.spec_cache_size and time.monotonic() < until - 0.05:
            ids = await self.store.upcoming(after, horizon, size, offset)
            await self.cache(ids)
            if len(ids) < size:
                self.prefetched = (horizon, 0)
                self.freeze(until)
                return
            offset += size
            self.prefetched = (after, offset)
        self.freeze(until)

    def _make_room(self, coming: int, keep: list[str]) -> None:
        """Drop the specs read longest ago when ``coming`` more would not fit: the cache is
        bounded whatever the size of the fleet. The oldest read, not the least used: a hit
        costs nothing that way, and what a steady stream keeps firing is read again soon after
        it goes, once. The specs of ``keep`` (the ids being planned) stay, as the newest."""
        specs = self.specs
        excess = len(specs) + coming - self.cfg.spec_cache_size
        if excess <= 0:
            return
        planned = set(keep)
        # The oldest come first; in one pass, as a dict's front is found by walking past the
        # slots of the entries deleted before (until it is resized).
        for sid in list(islice(specs, excess + len(planned))):
            if excess <= 0:
                break
            spec = specs.pop(sid)
            if sid in planned:
                specs[sid] = spec
            else:
                excess -= 1
        self._frozen = min(self._frozen, len(specs))

    def freeze(self, until: float) -> None:
        """Move the cached specs out of the garbage collector's reach once the cache has grown.

        Python's full collections traverse every live object, the whole cache included, and a
        herd allocates enough to set off several, each a pause of every fire (docs/results.md
        has the numbers). The cache holds no reference cycles, so frozen specs are still
        freed by reference counting when dropped. Collected first (nothing cyclic gets frozen),
        and only with time to spare before the next run is due.
        """
        if len(self.specs) - self._frozen < FREEZE_GROWTH:
            return
        if until - time.monotonic() < FREEZE_IDLE_S:
            return
        gc.collect()
        gc.freeze()
        self._frozen = len(self.specs)

    async def warm_up(self, lease: str) -> None:
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
