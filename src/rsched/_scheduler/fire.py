"""A fire round: the planned items of a round sent to fire.lua in batches, several calls in
flight, each sized by the time budget; the codes each item came back with acted upon; and the
next round's due read sent behind the last batches (see ticker.Ticker.chain)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup
from redis.exceptions import RedisError, ResponseError

from rsched._core import tracing
from rsched._core.codes import Code
from rsched._core.errors import LostLease, RschedError
from rsched._core.fire_plan import FireItem
from rsched._core.log import get_logger
from rsched._core.metrics import METRICS
from rsched._redis.scripts import migrating
from rsched._scheduler.batching import FIRST_BATCH, Batching
from rsched._scheduler.spec_cache import QUARANTINE_S, SpecCache
from rsched._store.firing import FiringStore

log = get_logger("rsched.scheduler")

#: A due read: (monotonic time it was sent, Redis now, due entries (id, score), next future
#: score, whether the read was full).
DueRead = tuple[float, int, list[tuple[str, int]], int | None, bool]

# Bound once as globals: after_fire compares them for every fired item.
STALE, NOT_DUE, WRONG_TYPE = Code.STALE, Code.NOT_DUE, Code.WRONG_TYPE
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


class FireRound:
    """One round's fire calls under ``lease``, ``max_in_flight`` at once (as sizing allows).

    ``read_due`` sends a due read leaving out the ids it is given; :meth:`read_next` queues one
    behind the batches already queued, and what it found is the round's read-ahead
    (:meth:`take_ahead`) unless the round failed.
    """

    def __init__(
        self,
        store: FiringStore,
        lease: str,
        cache: SpecCache,
        sizing: Batching,
        read_due: Callable[[set[str]], Awaitable[DueRead]],
    ) -> None:
        self.store = store
        self.lease = lease
        self.cache = cache
        self.specs = cache.specs  # the cache's dict (never replaced): looked up per item
        self.sizing = sizing
        self.read_due = read_due
        self.counts: dict[int, int] = {}
        self.fired = 0  # items fired, known once the round is over
        self.lost = False  # a call was refused by the lease check
        # Raised after the task group, unwrapped, so the ticker's handlers see the real error.
        self.failures: list[Exception] = []
        self._ahead: DueRead | None = None
        self._limiter = anyio.CapacityLimiter(sizing.cfg.max_in_flight)
        self._tg: TaskGroup | None = None

    async def run(self, groups: AsyncIterable[list[FireItem]], late_ms: int) -> dict[int, int]:
        """Fire ``groups`` (one schedule's items each) in batches; return how many items came
        back with each code. Raises LostLease, or the first failure of a call."""
        started = time.perf_counter()
        calls = 0
        limiter, sizing = self._limiter, self.sizing
        async with anyio.create_task_group() as self._tg:
            async for batch in batches(groups, sizing.batch_size, FIRST_BATCH):
                limiter.total_tokens = sizing.in_flight()
                self._tg.start_soon(self._send, batch)
                calls += 1
                # Let the batch go out now: Redis fires it while the next one is planned.
                await anyio.lowlevel.checkpoint()
        if self.lost or self.failures:
            self._ahead = None
        if not calls:
            return self.counts
        # Batches that fired before one was refused (the lease moved on) or failed count too.
        self.fired = self.counts.get(Code.FIRED, 0)
        if self.lost:
            raise LostLease
        if self.failures:
            raise self.failures[0]
        self._report(late_ms, started, calls)
        return self.counts

    def read_next(self, exclude: set[str]) -> anyio.Event:
        """Queue the next due read (leaving out ``exclude``); the event is set once it is back
        (its entries, if any, in :meth:`take_ahead`)."""
        return self._beside(self._read_ahead, exclude)

    def read_specs(self, ids: list[str]) -> anyio.Event:
        """Have the specs of ``ids`` cached (SpecCache.cache) beside the round's calls; the
        event is set once that is done, or failed: the planner reads what is still missing
        itself, and a failure is then its own."""
        return self._beside(self.cache.cache, ids, also=(RschedError,))

    def _beside(
        self,
        work: Callable[[Any], Awaitable[None]],
        arg: Any,
        also: tuple[type[Exception], ...] = (),
    ) -> anyio.Event:
        """Run ``work(arg)`` in the round's task group, beside its calls; the event is set once
        it is done, or failed on Redis (or on ``also``): what it did is a head start, never
        the round's outcome."""
        assert self._tg is not None, "called while the round runs"
        done = anyio.Event()

        async def run() -> None:
            try:
                with contextlib.suppress(RedisError, OSError, *also):
                    await work(arg)
            finally:
                done.set()

        self._tg.start_soon(run)
        return done

    def take_ahead(self) -> DueRead | None:
        """The due read the last :meth:`read_next` found (once: it is the caller's now)."""
        ahead, self._ahead = self._ahead, None
        return ahead

    async def _send(self, batch: list[list[FireItem]]) -> None:
        """One fire call; its codes are acted upon, its failure recorded for the round."""
        flat = [item for group in batch for item in group]
        store = self.store
        try:
            async with self._limiter:
                sent = time.perf_counter()
                if store.traced:
                    codes = await self._fire_traced(flat)
                else:
                    codes = await store.fire(self.lease, flat)
                self.sizing.measured(
                    len(flat),
                    sent,
                    time.perf_counter(),
                    store.fire_server_us,
                    store.fire_timed_items,
                )
        except ResponseError as exc:
            await self._refused(batch, exc)
            return
        except (RedisError, OSError, RschedError) as exc:
            self.failures.append(exc)
            return
        if codes is None:
            self.lost = True
            if METRICS.on:  # refused by the lease check: none of them fired
                METRICS.stale_refused.inc(len(flat))
            return
        counts = self.counts
        for item, code in zip(flat, codes, strict=True):
            counts[code] = counts.get(code, 0) + 1
            self.after_fire(item, code)
        if METRICS.on:
            METRICS.fired(flat, codes)

    async def _fire_traced(self, flat: list[FireItem]) -> list[int] | None:
        """The fire call with a PRODUCER span per job it writes (docs/tracing.md)."""
        spans = tracing.FireSpans(flat)
        codes = None
        try:
            codes = await self.store.fire(self.lease, flat, spans.parents)
        finally:
            spans.end(codes)
        return codes

    async def _refused(self, batch: list[list[FireItem]], exc: ResponseError) -> None:
        """A fire call answered with an error."""
        if str(exc).startswith(_SERVER_CONDITIONS) or migrating(exc):
            # The server cannot take writes, or the slot is still migrating past the call's own
            # retries: the round is tried again with backoff.
            self.failures.append(exc)
            return
        # The script failed on something it did not foresee. Find the schedule that causes it
        # (one call per schedule) and set it aside; the others still fire.
        if len(batch) > 1:
            for group in batch:
                await self._send([group])
            return
        sid = batch[0][0].schedule_id
        self.cache.set_aside(sid)
        self.specs.pop(sid, None)
        log.error("schedule.fire_failed", schedule=sid, error=str(exc))

    def after_fire(self, item: FireItem, code: int) -> None:
        """Act on the code one fired item came back with."""
        sid = item.schedule_id
        if code == STALE or item.next is None:
            # Another generation, gone, or complete: forget the cached spec, read it afresh.
            self.specs.pop(sid, None)
        elif code == WRONG_TYPE:
            self.cache.set_aside(sid)
            log.error("schedule.bad_keys", schedule=sid, retry_s=QUARANTINE_S)
        elif code == NOT_DUE:
            log.warning("schedule.not_due", schedule=sid, scheduled_at=item.sched)

    async def _read_ahead(self, exclude: set[str]) -> None:
        # Queued behind the batches planned so far (the limiter is first come, first served),
        # so it goes out with this round's last few batches still to run: Redis fires those
        # while the reply travels and is parsed, instead of waiting for the next round's first
        # batch. Entries of this round are due in the read too: left out, they are this
        # round's. One that did not fire after all is found by a later read.
        async with self._limiter:
            read = await self.read_due(exclude)
        if read[2] and not (self.lost or self.failures):
            self._ahead = read

    def _report(self, late_ms: int, started: float, calls: int) -> None:
        counts = self.counts
        log.info(
            "fired",
            fired=counts.get(Code.FIRED, 0),
            skipped=counts.get(Code.SKIPPED, 0),
            buffered=counts.get(Code.BUFFERED, 0),
            debounced=counts.get(Code.DEBOUNCED, 0),
            misfire_skipped=counts.get(Code.MISFIRE_SKIPPED, 0),
            excluded=counts.get(Code.EXCLUDED, 0),
            stale=counts.get(Code.STALE, 0),
            late_ms=late_ms,
            took_ms=round((time.perf_counter() - started) * 1000, 1),
            calls=calls,
            batch=self.sizing.batch_size(),  # the size the budget allows now
        )


async def batches(
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
