"""The worker's upkeep actors: the reclaimer, the promoter, the cancel listener and the registry
(with the heartbeat of the entries of running jobs); and the hand-back of entries on a stop."""

from __future__ import annotations

import math
import os
import socket
import time

import anyio
from anyio.abc import TaskStatus

from rsched._core.backoff import Backoff
from rsched._core.flows import FLOW_TASK
from rsched._core.job import Lane
from rsched._core.log import get_logger
from rsched._core.metrics import METRICS
from rsched._core.rules import PRIORITIES
from rsched._core.workers import worker_record
from rsched._redis.cluster import subscribed
from rsched._redis.connection import messages
from rsched._worker.failures import ACTOR_FAILURES, back_off
from rsched._worker.reader import Reader
from rsched._worker.state import Held, Stream, WorkerState

log = get_logger("rsched.worker")

# Most delayed jobs one promote call moves (a call that moved this many is followed by another).
PROMOTE_BATCH = 1_000
# Most waiting jobs one resume call starts (a call that started this many is followed by another).
RESUME_BATCH = 500
CONSUMER_IDLE_FORGET_MS = 3_600_000
# A registry record lives this many heartbeats: a worker that misses them is gone.
REGISTRY_HEARTBEATS = 3
# Registry ids not seen for this long are pruned (their records expired long before).
REGISTRY_PRUNE_MS = 3_600_000
# Running jobs listed in a registry record (the count is always exact).
REGISTRY_MAX_JOBS = 1_000
# The idle time a handed-back entry gets: past any visibility timeout (and below Redis's
# clock, which XCLAIM IDLE needs), so the next reclaim takes it at once.
HAND_BACK_IDLE_MS = 10 * 365 * 86_400_000


class Upkeep:
    """The periodic actors; the reclaimer hands what it takes over to ``reader`` (to run it, or
    bury it as poison)."""

    def __init__(self, state: WorkerState, reader: Reader) -> None:
        self.state = state
        self.reader = reader

    # --- reclaimer ---------------------------------------------------------------------------

    async def reclaimer(self) -> None:
        """Every ``reclaim_interval_s``, take over the entries of the worker's streams idle past
        the visibility timeout (a dead worker's): one call per partition for all its streams,
        as many as there are idle slots."""
        state, cfg = self.state, self.state.cfg
        partitions = len(state.stores)
        lanes: list[Lane] = [(q, level) for level in PRIORITIES for q in cfg.queues]
        cursors = [dict.fromkeys(lanes, "0-0") for _ in range(partitions)]
        visibility_ms = math.ceil(cfg.visibility_timeout_s * 1000)
        rounds = 0
        while True:
            await anyio.sleep(cfg.reclaim_interval_s)
            rounds += 1
            # Each round starts with the next partition: a budget of idle slots used up by one
            # partition's stalled entries leaves the others their turn in the next rounds.
            for step in range(partitions):
                partition = (rounds + step) % partitions
                n = min(state.slots.idle(), cfg.read_batch)
                if n == 0:
                    break
                at = cursors[partition]
                try:
                    found = await state.stores[partition].reclaim(
                        [(lane, at[lane]) for lane in lanes], state.consumer, visibility_ms, n
                    )
                except ACTOR_FAILURES as exc:
                    log.warning("redis.error", actor="reclaimer", error=str(exc))
                    continue
                for lane, (cursor, claimed) in zip(lanes, found, strict=True):
                    at[lane] = cursor
                    if claimed:
                        await self._reclaimed((partition, *lane), claimed)
            if rounds % 100 == 1:
                await self._forget_consumers()

    async def _reclaimed(
        self, stream: Stream, claimed: list[tuple[str, dict[str, str], int]]
    ) -> None:
        """Run the entries the reclaimer took over from one stream (or bury the poison)."""
        state = self.state
        partition, queue, level = stream
        fresh = [c for c in claimed if (partition, queue, level, c[0]) not in state.inflight]
        state.slots.take(len(fresh))
        if METRICS.on and fresh:
            METRICS.reclaims.labels(queue).inc(len(fresh))
        runnable = []
        for entry_id, fields, deliveries in fresh:
            log.warning(
                "job.reclaimed",
                entry_id=entry_id,
                queue=queue,
                execution_id=fields.get("execution_id", ""),
                deliveries=deliveries,
            )
            if deliveries > state.cfg.max_deliveries:
                await self._poison(stream, entry_id, fields, deliveries)
            else:
                runnable.append((entry_id, fields, deliveries))
        if runnable:
            await self.reader.dispatch((queue, level), runnable, partition)

    async def _poison(
        self, stream: Stream, entry_id: str, fields: dict[str, str], deliveries: int
    ) -> None:
        message = (
            f"delivered {deliveries} times (more than "
            f"max_deliveries={self.state.cfg.max_deliveries}); "
            "it keeps crashing or stalling its workers"
        )
        await self.reader.bury(
            stream,
            entry_id,
            fields,
            reason="poison",
            error_type="Poison",
            message=message,
            extra={"reason": "poison", "deliveries": deliveries},
            actor="reclaimer",
            deliveries=deliveries,
        )

    async def _forget_consumers(self) -> None:
        """Remove consumers of dead workers once they hold nothing (keeps XINFO readable)."""
        state = self.state
        try:
            for store in state.stores:
                await store.forget_consumers(
                    state.cfg.queues, keep=state.consumer, idle_ms=CONSUMER_IDLE_FORGET_MS
                )
        except ACTOR_FAILURES as exc:
            log.warning("redis.error", actor="reclaimer", error=str(exc))

    # --- promoter ----------------------------------------------------------------------------

    async def promoter(self) -> None:
        """Move due delayed jobs (retries, delayed enqueues) into their streams: one call per
        partition for all the worker's queues, then sleep until the next is due, at most
        ``promote_interval_ms`` (others add delayed jobs without telling this worker), or until
        this worker schedules a retry due sooner (promote_wake). A partition that fails is
        left alone for its backoff; the others go on."""
        state = self.state
        partitions = len(state.stores)
        backoffs = [Backoff() for _ in range(partitions)]
        retry_at = [0.0] * partitions  # anyio.current_time() a failed partition is tried again
        interval_s = state.cfg.promote_interval_ms / 1000
        queues = list(state.cfg.queues)
        while True:
            # Replaced before the round: a retry scheduled while it runs wakes the next one.
            wake = state.promote_wake = anyio.Event()
            wait_s = interval_s
            for partition, store in enumerate(state.stores):
                left_s = retry_at[partition] - anyio.current_time()
                if left_s > 0:
                    wait_s = min(wait_s, left_s)
                    continue
                try:
                    while True:
                        moved, next_ms = await store.promote(queues, PROMOTE_BATCH)
                        if moved < PROMOTE_BATCH:
                            break
                except ACTOR_FAILURES as exc:
                    delay = backoffs[partition].next()
                    retry_at[partition] = anyio.current_time() + delay
                    wait_s = min(wait_s, delay)
                    log.warning(
                        "redis.error", actor="promoter", error=str(exc), retry_s=round(delay, 2)
                    )
                    continue
                backoffs[partition].reset()
                if next_ms is not None:
                    wait_s = min(wait_s, next_ms / 1000)
            wait_s = min(wait_s, await self._resume(queues))
            with anyio.move_on_after(max(wait_s, 0.005)):
                await wake.wait()

    async def _resume(self, queues: list[str]) -> float:
        """Start the jobs waiting on limit keys that became ready (lua/limit_resume.lua); returns
        how long until a rate window opens for one (seconds; inf when none). A key whose
        waiting job is of another worker's queue stays ready for that worker: it does not
        shorten this worker's wait."""
        state = self.state
        try:
            while True:
                moved, next_ms = await state.store.resume(queues, state.hold_ms, RESUME_BATCH)
                if moved < RESUME_BATCH:
                    break
        except ACTOR_FAILURES as exc:
            log.warning("redis.error", actor="resume", error=str(exc))
            return math.inf
        return next_ms / 1000 if next_ms else math.inf

    # --- cancel listener ---------------------------------------------------------------------

    async def cancel_listener(self, *, task_status: TaskStatus[None]) -> None:
        """Cancel a running handler when cancel_previous fires a newer occurrence of its
        schedule, or an operator cancels its job (messages on the cancel channel)."""
        store = self.state.store
        backoff = Backoff()
        started = False
        while True:
            try:
                async with subscribed(store.redis, store.keys.cancel) as pubsub:
                    backoff.reset()
                    if not started:
                        started = True
                        task_status.started()
                    async for message in messages(pubsub):
                        if message.get("type") == "message":
                            # "<execution id>" (cancel_previous) or "<execution id> <reason>"
                            execution_id, _, reason = str(message["data"]).partition(" ")
                            self._cancel(execution_id, reason or "cancel_previous")
                        elif message.get("type") == "subscribe":
                            # Nothing keeps a cancel: one published meanwhile is lost.
                            log.warning("cancel.resubscribed", running=len(self.state.running))
            except ACTOR_FAILURES as exc:
                if not started:
                    started = True
                    task_status.started()
                await back_off(backoff, "cancel", exc)

    def _cancel(self, execution_id: str, reason: str) -> None:
        run = self.state.running.get(execution_id)
        if run is None:
            return
        log.info(
            "job.cancel_requested", execution_id=execution_id, task=run.job.task, reason=reason
        )
        run.cancel_requested = True
        run.cancel_reason = reason
        run.scope.cancel()

    # --- registry and heartbeat --------------------------------------------------------------

    async def registry(self, *, task_status: TaskStatus[None]) -> None:
        """Register at once (a worker is listed as soon as it runs), then every
        ``heartbeat_s`` heartbeat the running jobs' entries and register again, in that order:
        a running job the record does not list has not been heartbeated yet, so its entry's
        delivery time is still when it started (what Client.job says then)."""
        try:
            await self.register()
        except ACTOR_FAILURES as exc:
            log.warning("redis.error", actor="registry", error=str(exc))
        task_status.started()
        while True:
            await anyio.sleep(self.state.cfg.heartbeat_s)
            await self.heartbeat()
            try:
                await self.register()
            except ACTOR_FAILURES as exc:
                log.warning("redis.error", actor="registry", error=str(exc))

    async def heartbeat(self) -> None:
        """Refresh the entries of the jobs this worker holds, and their limit holds, once."""
        state = self.state
        if state.holding:
            try:
                lapsed = await state.store.renew(list(state.holding.items()), state.hold_ms)
            except ACTOR_FAILURES as exc:
                log.warning("redis.error", actor="heartbeat", error=str(exc))
            else:
                if lapsed:
                    log.warning("limit.holds_lapsed", holds=lapsed)
        for (partition, queue, level), ids in _by_stream(state.inflight).items():
            for start in range(0, len(ids), 1000):
                try:
                    lost = await state.stores[partition].heartbeat(
                        queue, state.consumer, ids[start : start + 1000], level
                    )
                except ACTOR_FAILURES as exc:
                    log.warning("redis.error", actor="heartbeat", error=str(exc))
                    break
                for entry_id in lost:
                    if (partition, queue, level, entry_id) in state.inflight:
                        log.warning("job.lost", entry_id=entry_id, queue=queue)

    async def register(self) -> None:
        state = self.state
        ttl_ms = max(1000, math.ceil(state.cfg.heartbeat_s * 1000 * REGISTRY_HEARTBEATS))
        await state.store.register(state.consumer, self.record(), ttl_ms, REGISTRY_PRUNE_MS)

    def record(self) -> bytes:
        """This worker's registry record: who it is and the jobs it runs now."""
        state = self.state
        now_ms, now = time.time_ns() // 1_000_000, time.perf_counter()
        jobs = [
            (
                j.execution_id, j.queue, j.priority, j.entry_id, j.task, j.attempt,
                now_ms - round((now - (run.started or now)) * 1000),
            )
            for run in list(state.running.values())[:REGISTRY_MAX_JOBS]
            for j in (run.job,)
        ]  # fmt: skip
        return worker_record(
            worker_id=state.consumer,
            host=socket.gethostname(),
            pid=os.getpid(),
            queues=list(state.cfg.queues),
            # Every worker has the built-in task that starts schedules' flows: not listed.
            tasks=sorted(t for t in state.handlers if t != FLOW_TASK),
            concurrency=state.cfg.concurrency,
            started_ms=state.started_ms,
            heartbeat_s=state.cfg.heartbeat_s,
            jobs=jobs,
        )


async def hand_back(state: WorkerState) -> int:
    """Give the entries of jobs a forced stop cancelled, and of jobs read but not started, to
    the next reclaim of any worker at once; returns how many were handed back."""
    handed = 0
    for (partition, queue, level), ids in _by_stream(state.abandoned | state.inflight).items():
        for start in range(0, len(ids), 1000):
            handed += await state.stores[partition].hand_back(
                queue, state.consumer, ids[start : start + 1000], HAND_BACK_IDLE_MS, level
            )
    return handed


def _by_stream(held: set[Held]) -> dict[Stream, list[str]]:
    """The entry ids of ``held``, by the stream they belong to."""
    out: dict[Stream, list[str]] = {}
    for partition, queue, level, entry_id in list(held):
        out.setdefault((partition, queue, level), []).append(entry_id)
    return out
