"""What the worker's actors share: WorkerState (the stores, the concurrency limit, the entries
held and the jobs running), Slots (the concurrency limit) and Running (one job's run).

Everything runs on one event loop, so no lock is needed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel

from rsched._core.job import Job
from rsched._core.limits import Limit
from rsched._core.rules import Priority
from rsched._core.settings import Settings, WorkerSettings
from rsched._store.queues import QueueStore

#: One stream of a deployment: (partition, queue, level); and one entry of it a worker holds.
Stream = tuple[int, str, Priority]
Held = tuple[int, str, Priority, str]


@dataclass(slots=True)
class Running:
    job: Job
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    cancel_requested: bool = False
    cancel_reason: str = "cancel_previous"
    started: float = 0.0  # time.perf_counter() at the handler's start (no clock read per job)
    deadline: float = math.inf  # the loop's time at which it times out (runner.Timeouts)


class Slots:
    """The concurrency limit: a job holds one slot from its read until its handler ends.

    The reader reserves free slots before a blocking read (and keeps what it used); the
    reclaimer may claim up to the slots no job holds, even while the reader waits with a
    reservation, so reclaiming never starves behind an idle blocking read.
    """

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0
        self.reserved = 0
        self._changed = anyio.Event()

    async def reserve(self, most: int) -> int:
        """Wait for a free slot, then reserve up to ``most``."""
        while self.total - self.used - self.reserved <= 0:
            self._changed = anyio.Event()
            await self._changed.wait()
        # Let the jobs that are ready finish first: one large read instead of many small ones.
        await anyio.lowlevel.checkpoint()
        n = min(most, self.total - self.used - self.reserved)
        if n <= 0:
            return await self.reserve(most)
        self.reserved += n
        return n

    def commit(self, reserved: int, used: int) -> None:
        """End a reservation of ``reserved`` slots of which ``used`` now hold jobs."""
        self.reserved -= reserved
        self.used += used
        if used < reserved:
            self._changed.set()

    async def wait_free(self) -> None:
        """Wait until a slot is neither used nor reserved (reserving none)."""
        while self.total - self.used - self.reserved <= 0:
            self._changed = anyio.Event()
            await self._changed.wait()

    def idle(self) -> int:
        """Slots no job holds (the reclaimer's budget)."""
        return max(0, self.total - self.used)

    def take(self, n: int) -> None:
        self.used += n

    def release(self, n: int = 1) -> None:
        self.used -= n
        self._changed.set()


@dataclass(eq=False)
class WorkerState:
    """The state of one run of a worker that more than one actor reads or writes."""

    handlers: Mapping[str, tuple[Callable[[Job], Any], bool]]
    consumer: str
    # One store per partition; partition 0's also serves the deployment's keys (registry,
    # cancel channel).
    stores: list[QueueStore]
    settings: Settings
    # The limits each task declared (Worker.task(..., limits=...)).
    task_limits: Mapping[str, tuple[Limit, ...]] = field(default_factory=dict)
    cfg: WorkerSettings = field(init=False)
    store: QueueStore = field(init=False)  # partition 0's
    slots: Slots = field(init=False)
    hold_ms: int = field(
        init=False
    )  # how long a limit hold lasts unrenewed: the visibility timeout
    # (partition, queue, level, entry id) of every entry read and not yet acknowledged (ids are
    # per stream, and each level of a queue in each partition is a stream): the heartbeat keeps
    # these fresh.
    inflight: set[Held] = field(default_factory=set)
    running: dict[str, Running] = field(default_factory=dict)  # execution id -> its run
    # Execution id -> the limit keys it holds, from its grant until its outcome is recorded:
    # the heartbeat renews these holds.
    holding: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Entries of jobs cancelled by a forced stop (no outcome): handed back on the way out.
    abandoned: set[Held] = field(default_factory=set)
    # Set by a runner that scheduled a retry due sooner than the promoter's next look; the
    # promoter replaces it each round.
    promote_wake: anyio.Event = field(default_factory=anyio.Event)
    completed: int = 0
    failed: int = 0
    retried: int = 0  # attempts whose handler raised Retry (not failures)
    started_ms: int = field(default_factory=lambda: time.time_ns() // 1_000_000)

    def __post_init__(self) -> None:
        self.cfg = self.settings.worker
        self.store = self.stores[0]
        self.slots = Slots(self.cfg.concurrency)
        self.hold_ms = math.ceil(self.cfg.visibility_timeout_s * 1000)
