"""The journal: what running handlers say (``job.set_progress``, ``job.log``, records of the
logging module made inside them), buffered and written in the background.

A handler's call only appends to a buffer under a lock (sync handlers call from worker
threads); the journal actor writes every run's news every :data:`FLUSH_S`, one script call per
partition with news (lua/job_log.lua). A write Redis refuses is logged and tried again at the
next rounds, then dropped: the handler never waits for Redis and never sees its failures. A
worker whose handlers say nothing writes nothing.

Records of the logging module reach the journal through one handler on the root logger
(:func:`capture`), which keeps a record only inside a handler's call: the runner sets
:data:`RUNNING` around it (anyio copies the context into the thread of a sync handler), so the
worker's own lines, made outside it, are never kept.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskStatus

from rsched._core.job import Job
from rsched._core.job_logs import MAX_BYTES, MAX_LINES, MESSAGE_MAX_CHARS, cut, encode_line
from rsched._core.log import get_logger
from rsched._core.partitions import job_partition
from rsched._store.job_logs import RunNews
from rsched._worker.failures import ACTOR_FAILURES
from rsched._worker.state import WorkerState

log = get_logger("rsched.worker")

#: How often the journal writes what handlers said (at most this late).
FLUSH_S = 0.3
#: A write Redis refuses is tried this many more rounds (a minute or more), then dropped.
RETRIES = 200
#: The job whose handler runs in this context (None outside handlers).
RUNNING: ContextVar[Job | None] = ContextVar("rsched_running_job", default=None)

# One run of one attempt in one partition: (partition, execution id, attempt).
_Run = tuple[int, str, int]


@dataclass(slots=True)
class _Pending:
    """A run's news not yet written: bounded as its log is (newest lines, bytes)."""

    progress: tuple[float, str, int] | None = None
    lines: deque[bytes] = field(default_factory=lambda: deque(maxlen=MAX_LINES))
    size: int = 0

    def add(self, line: bytes) -> None:
        if len(self.lines) == MAX_LINES:
            self.size -= len(self.lines[0])
        self.lines.append(line)
        self.size += len(line)
        while self.size > MAX_BYTES and len(self.lines) > 1:
            self.size -= len(self.lines.popleft())


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class Journal:
    """The worker's journal (the ``journal`` of the jobs it runs): see the module."""

    def __init__(self, state: WorkerState) -> None:
        self.state = state
        self.level = logging.getLevelName(state.cfg.job_log_level.upper())
        self._lock = threading.Lock()
        self._news: dict[_Run, _Pending] = {}
        # Per partition, the write Redis refused (its runs, rounds tried): written again first.
        self._refused: dict[int, tuple[list[RunNews], int]] = {}
        self._batches = 0
        # The actor's rounds and a runner's flush at a run's end take turns: a partition's
        # writes stay in order.
        self._flushing = anyio.Lock()
        # What lines and progress are stamped with (epoch ms): the wall clock, or the virtual
        # clock of rsched.testing.
        self.clock: Callable[[], int] = _wall_ms

    # --- what handlers call (any thread; never blocks on Redis, never raises) ---------------

    def progress(self, job: Job, fraction: float, note: str) -> None:
        at = self.clock()
        with self._lock:
            self._pending(job).progress = (fraction, note, at)

    def line(self, job: Job, level: str, message: str) -> None:
        encoded = encode_line(self.clock(), level, message)
        with self._lock:
            self._pending(job).add(encoded)

    def record(self, job: Job, record: logging.LogRecord) -> None:
        """A record of the logging module made inside ``job``'s handler, when its level is
        kept (``worker.job_log_level``)."""
        if record.levelno < self.level:
            return
        try:
            message = record.getMessage()
        except Exception:  # a bad format string must not fail the handler
            message = str(record.msg)
        if record.name != "root":
            message = f"{record.name}: {message}"
        if record.exc_info:
            message += "\n" + logging.Formatter().formatException(record.exc_info)
        level = record.levelname.lower()
        self.line(job, level if level in _LEVELS else "info", cut(message, MESSAGE_MAX_CHARS))

    def said(self, job: Job) -> bool:
        """True when ``job``'s handler said something not written yet (no lock: a glance
        that a handler which said nothing passes for the price of one truth test)."""
        return bool(self._news) and any(run[1] == job.execution_id for run in list(self._news))

    def _pending(self, job: Job) -> _Pending:
        run = (
            job_partition(job.execution_id, len(self.state.stores)),
            job.execution_id,
            job.attempt,
        )
        found = self._news.get(run)
        if found is None:
            found = self._news[run] = _Pending()
        return found

    # --- the actor ---------------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await anyio.sleep(FLUSH_S)
            await self.flush()

    async def flush(self) -> None:
        """Write the news of every run, one call per partition. A partition whose last write
        Redis refused gets that write again first (it may have been applied: its token makes a
        second one harmless); its news waits in the buffer meanwhile, merged with what comes,
        so a Redis outage holds at most one refused write per partition and the bounded
        buffer."""
        if not self._news and not self._refused:
            return
        async with self._flushing:
            await self._flush()

    async def _flush(self) -> None:
        with self._lock:
            news, self._news = self._news, {}
        self._batches += 1
        token = f"{self.state.consumer}:{self._batches}"
        by_partition: dict[int, dict[_Run, _Pending]] = {}
        for run, pending in news.items():
            by_partition.setdefault(run[0], {})[run] = pending
        for partition in sorted({*self._refused, *by_partition}):
            fresh = by_partition.get(partition, {})
            if partition in self._refused and not await self._again(partition):
                self._keep(fresh)  # behind the refused write, in order
                continue
            if not fresh:
                continue
            runs = [
                RunNews(eid, attempt, token, pending.progress, list(pending.lines))
                for (_, eid, attempt), pending in fresh.items()
            ]
            if not await self._write(partition, runs):
                self._refused[partition] = (runs, 1)

    async def _again(self, partition: int) -> bool:
        """Send a partition's refused write again; True once it is written or dropped."""
        runs, tried = self._refused[partition]
        if await self._write(partition, runs):
            del self._refused[partition]
            return True
        if tried >= RETRIES:
            del self._refused[partition]
            log.error("job.log_dropped", runs=len(runs), rounds=tried + 1)
            return True
        self._refused[partition] = (runs, tried + 1)
        return False

    async def _write(self, partition: int, runs: list[RunNews]) -> bool:
        ttl_ms = round(self.state.cfg.result_ttl_s * 1000)
        try:
            skipped = await self.state.stores[partition].write_news(runs, ttl_ms)
        except ACTOR_FAILURES as exc:
            log.warning("job.log_unwritten", runs=len(runs), error=str(exc), retry=True)
            return False
        if skipped:
            log.warning("job.log_skipped", runs=skipped, error="a job's log key holds another type")
        return True

    def _keep(self, older: dict[_Run, _Pending]) -> None:
        """Put news not written back in the buffer, before what came since."""
        with self._lock:
            for run, old in older.items():
                newer = self._news.get(run)
                if newer is not None:
                    for line in newer.lines:
                        old.add(line)
                    old.progress = newer.progress or old.progress
                self._news[run] = old


_LEVELS = frozenset({"debug", "info", "warning", "error", "critical"})


class _Capture(logging.Handler):
    """The root logger's handler that hands records made inside a handler to its journal."""

    def handle(self, record: logging.LogRecord) -> bool:
        # No lock: the journal has its own, and most records are made outside any handler.
        self.emit(record)
        return True

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING and _unhandled(record, self):
            _last_resort(record)
        job = RUNNING.get()
        if job is None or record.name.startswith(_OWN):
            return
        journal = job.journal
        if isinstance(journal, Journal):
            journal.record(job, record)


# The worker's own lines (rsched.worker, rsched.worker.jobs) are never a job's.
_OWN = "rsched.worker"


def _unhandled(record: logging.LogRecord, ours: logging.Handler) -> bool:
    """True when no handler but ours saw ``record``: the logging module would have written it
    to stderr (logging.lastResort) had ours not been there."""
    logger = logging.Logger.manager.loggerDict.get(record.name)
    current: logging.Logger | None = (
        logger if isinstance(logger, logging.Logger) else logging.getLogger()
    )
    while current is not None:
        if any(h is not ours for h in current.handlers):
            return False
        if not current.propagate:
            break
        current = current.parent
    return True


def _last_resort(record: logging.LogRecord) -> None:
    last = logging.lastResort
    if last is not None and record.levelno >= last.level:
        last.handle(record)


class _AsBefore(logging.Filter):
    """Put on the root logger's other handlers while :func:`capture` lowered the root's level:
    they keep seeing only the records made before, those at the old level or above or of a
    logger with a level of its own."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= self.level:
            return True
        logger = logging.Logger.manager.loggerDict.get(record.name)
        while isinstance(logger, logging.Logger) and logger is not logging.root:
            if logger.level:
                return True
            logger = logger.parent
        return False


@dataclass(slots=True)
class _Installed:
    """The capture handler on the root logger, the root's level before, and the filters put on
    its other handlers."""

    handler: _Capture
    old: int
    filters: list[tuple[logging.Handler, logging.Filter]] = field(default_factory=list)


_installed: list[_Installed] = []  # at most one
_levels: list[int] = []  # the levels of the workers that capture now


@contextlib.contextmanager
def capture(level: int) -> Iterator[None]:
    """While in it, records of the logging module made inside handlers reach their journal: the
    capture handler sits on the root logger, whose level is lowered to ``level`` if it is above
    (the root's other handlers then filter so that they see what they did before)."""
    root = logging.getLogger()
    if not _installed:
        _installed.append(_Installed(_Capture(), root.level))
        root.addHandler(_installed[0].handler)
    _levels.append(level)
    _lower(root, _installed[0], min(_levels))
    try:
        yield
    finally:
        _levels.remove(level)
        if not _levels:
            done = _installed.pop()
            root.removeHandler(done.handler)
            for handler, added in done.filters:
                handler.removeFilter(added)
            root.setLevel(done.old)


def _lower(root: logging.Logger, installed: _Installed, level: int) -> None:
    if root.level <= level:  # (NOTSET, 0, lets every record through)
        return
    if not installed.filters:
        before = _AsBefore(installed.old)
        for handler in root.handlers:
            if handler is not installed.handler:
                handler.addFilter(before)
                installed.filters.append((handler, before))
    root.setLevel(level)
