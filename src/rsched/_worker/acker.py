"""The acker: records finished runs in batches (one script call acknowledges many entries)."""

from __future__ import annotations

import functools

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from rsched._core.log import get_logger
from rsched._core.rules import Priority
from rsched._store.worker_calls import Done
from rsched._worker.failures import until_taken
from rsched._worker.state import Stream, WorkerState

log = get_logger("rsched.worker")

ACK_BATCH = 1_000


class Acker:
    def __init__(self, state: WorkerState) -> None:
        self.state = state

    async def run(
        self, inbox: MemoryObjectReceiveStream[tuple[Stream, Done]], done: anyio.Event
    ) -> None:
        """Record what comes in, as much of it as is waiting at once, until the inbox is
        closed; then set ``done``."""
        try:
            async with inbox:
                async for first in inbox:
                    batch = [first]
                    while len(batch) < ACK_BATCH:
                        try:
                            batch.append(inbox.receive_nowait())
                        except (anyio.WouldBlock, anyio.EndOfStream):
                            break
                    await self.ack(batch)
        finally:
            done.set()

    async def ack(self, batch: list[tuple[Stream, Done]]) -> None:
        """Record ``batch``: the results kept, then the runs (one script call per stream)."""
        state = self.state
        by_stream: dict[Stream, list[Done]] = {}
        results: dict[int, list[tuple[str, bytes]]] = {}
        for stream, item in batch:
            by_stream.setdefault(stream, []).append(item)
            if item.result is not None:
                results.setdefault(stream[0], []).append((item.execution_id, item.result))
        ttl_ms = round(state.cfg.result_ttl_s * 1000)
        for partition, kept in results.items():  # before the ack: a completed job has its result
            refused = await until_taken(
                functools.partial(state.stores[partition].store_results, kept, ttl_ms), "acker"
            )
            if refused is not None:
                log.error("job.results_unrecorded", jobs=len(kept), error=str(refused))
        for (partition, queue, level), items in by_stream.items():
            for item in items:  # the script releases their limit holds: no more renewals
                state.holding.pop(item.execution_id, None)
            refused = await until_taken(
                functools.partial(state.stores[partition].complete, queue, items, level), "acker"
            )
            if refused is not None:
                log.error("queue.unrecorded", queue=queue, jobs=len(items), error=str(refused))
            for item in items:
                state.inflight.discard((partition, queue, level, item.entry_id))
                if item.home is not None and item.schedule_id:
                    await finish_home(
                        state, item.home, queue, level, item.schedule_id, item.execution_id,
                        item.attempt, item.event, item.extra, over=True, counted=item.counted,
                    )  # fmt: skip
                if item.limits:
                    state.promote_wake.set()  # a released key may start a waiting job


async def finish_home(
    state: WorkerState,
    home: int,
    queue: str,
    level: Priority,
    schedule_id: str,
    execution_id: str,
    attempt: int,
    event: str,
    extra: str,
    *,
    over: bool,
    counted: bool = False,
    error: str = "",
) -> None:
    """The schedule's side of a run whose job ran from another partition's stream (Job.home),
    recorded in the schedule's partition once the job's own outcome is (``counted``: its
    schedule pauses after failed runs, ``error`` the run's)."""
    refused = await until_taken(
        functools.partial(
            state.stores[home].finish,
            queue,
            level,
            schedule_id,
            execution_id=execution_id,
            attempt=attempt,
            event=event,
            extra=extra,
            over=over,
            counted=counted,
            error=error,
        ),
        "acker",
    )
    if refused is not None:
        log.error("job.unrecorded", execution_id=execution_id, error=str(refused))
