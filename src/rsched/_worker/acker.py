"""The acker: records finished runs in batches (one script call acknowledges many entries)."""

from __future__ import annotations

import functools

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from rsched._core.log import get_logger
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
                    await self._ack(batch)
        finally:
            done.set()

    async def _ack(self, batch: list[tuple[Stream, Done]]) -> None:
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
            refused = await until_taken(
                functools.partial(state.stores[partition].complete, queue, items, level), "acker"
            )
            if refused is not None:
                log.error("queue.unrecorded", queue=queue, jobs=len(items), error=str(refused))
            for item in items:
                state.inflight.discard((partition, queue, level, item.entry_id))
                if item.limits:
                    state.holding.pop(item.execution_id, None)
                    state.promote_wake.set()  # a released key may start a waiting job
