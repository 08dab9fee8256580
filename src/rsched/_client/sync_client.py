"""The blocking client SDK: :class:`rsched.Client`'s methods for code without an event loop.

The async client runs on a private event loop in a background thread (an anyio blocking
portal); each method blocks until its call finishes there. Safe to share between threads.

The loop's thread is a daemon, so a SyncClient that is never closed does not keep the
interpreter alive when the program ends; it is closed at exit (or when garbage-collected), but
``close()`` / ``with`` stays the way to release its connections at a known time.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import queue
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from datetime import date, datetime, timedelta
from types import TracebackType
from typing import Any, TypeVar

import anyio
from anyio.from_thread import BlockingPortal

from rsched._client.client import BackfillResult, Client, Fired, Occurrence
from rsched._client.stats import Stats
from rsched._core.activity import HOURS, MINUTES, Activity, DepthPoint
from rsched._core.audit import AuditRecord, SpecVersion
from rsched._core.bulk import BulkResult
from rsched._core.calendars import Calendar
from rsched._core.flows import FlowInfo, FlowRun, FlowState, Node
from rsched._core.health import Health, ScheduleHealth
from rsched._core.history import HistoryEvent
from rsched._core.job import DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT_S, DeadLetter, Enqueued
from rsched._core.job_logs import JobLogRecord
from rsched._core.limits import Limit, LimitInfo
from rsched._core.page import Page, every_item_sync
from rsched._core.rules import Priority
from rsched._core.schedule import Schedule
from rsched._core.settings import Settings
from rsched._core.workers import JobInfo, WorkerInfo
from rsched._store.alerts import HealthEvent
from rsched._store.runs_log import RunRecord

T = TypeVar("T")

#: The longest a close waits for the pool to disconnect (a hung server must not hang it).
CLOSE_TIMEOUT_S = 2.0


class SyncClient:
    """The same methods as :class:`rsched.Client`, blocking.

    ``with rsched.SyncClient.from_url("redis://localhost:6379/0") as client: client.add(...)``.
    Raises the same exceptions as the async client. Any number of threads may share one. Close
    it (``close()`` or ``with``) to release its connections; one left open is closed at exit and
    never keeps the program from ending.
    """

    def __init__(self, url: str | None = None, prefix: str | None = None, **settings: Any) -> None:
        self._start(functools.partial(_open, url, prefix, settings))

    #: The client whose connections and loop this one shares (acting_as), None for its own.
    _owner: SyncClient | None = None

    def _start(self, open_client: Callable[[], Awaitable[Client]]) -> None:
        self._portal, self._thread = _start_loop()
        try:
            self._client: Client = self._portal.call(open_client)
        except BaseException:
            _shutdown(self._portal, self._thread, None)
            raise
        # Not a method of self: a finalizer that holds self would keep it alive forever.
        self._finalizer: Callable[[], Any] = weakref.finalize(
            self, _shutdown, self._portal, self._thread, self._client
        )

    @classmethod
    def from_url(
        cls, url: str | None = None, prefix: str | None = None, **settings: Any
    ) -> SyncClient:
        """Connect (``url``/``prefix`` default to RSCHED_REDIS_URL / RSCHED_PREFIX)."""
        return cls(url, prefix, **settings)

    @classmethod
    def from_settings(cls, settings: Settings) -> SyncClient:
        """Connect with a :class:`Settings` (as :meth:`rsched.Client.from_settings`)."""
        client = cls.__new__(cls)
        client._start(functools.partial(_open_settings, settings))
        return client

    def acting_as(self, actor: str | None, *, source: str = "sdk") -> SyncClient:
        """See :meth:`rsched.Client.acting_as`: a client sharing this one's connections and
        loop (closing it closes nothing)."""
        other = SyncClient.__new__(SyncClient)
        other._portal, other._thread = self._portal, self._thread
        other._client = self._run(_acting, self._client, actor, source)
        other._owner = self  # its loop lives while the other is used
        other._finalizer = weakref.finalize(other, _nothing)
        return other

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool and stop the background event loop. Idempotent."""
        self._finalizer()

    def _run(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        return self._portal.call(functools.partial(fn, *args, **kwargs))

    @property
    def settings(self) -> Settings:
        return self._client.settings

    def add(self, schedule: Schedule | Mapping[str, Any]) -> Schedule:
        """See :meth:`rsched.Client.add`."""
        return self._run(self._client.add, schedule)

    def upsert(self, schedule: Schedule | Mapping[str, Any]) -> Schedule:
        """See :meth:`rsched.Client.upsert`."""
        return self._run(self._client.upsert, schedule)

    def sync_schedules(
        self,
        schedules: Iterable[Schedule | Mapping[str, Any]],
        *,
        source: str,
        prune: bool = True,
        adopt: bool = False,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """See :meth:`rsched.Client.sync_schedules`."""
        return self._run(
            self._client.sync_schedules,
            schedules,
            source=source,
            prune=prune,
            adopt=adopt,
            dry_run=dry_run,
        )

    def add_many(self, schedules: Iterable[Schedule | Mapping[str, Any]]) -> BulkResult:
        """See :meth:`rsched.Client.add_many`."""
        return self._run(self._client.add_many, schedules)

    def upsert_many(self, schedules: Iterable[Schedule | Mapping[str, Any]]) -> BulkResult:
        """See :meth:`rsched.Client.upsert_many`."""
        return self._run(self._client.upsert_many, schedules)

    def update(self, schedule_id: str, **changes: Any) -> Schedule:
        """See :meth:`rsched.Client.update`."""
        return self._run(self._client.update, schedule_id, **changes)

    def remove(self, schedule_id: str) -> None:
        """See :meth:`rsched.Client.remove`."""
        self._run(self._client.remove, schedule_id)

    def pause(self, schedule_id: str, note: str | None = None) -> None:
        """See :meth:`rsched.Client.pause`."""
        self._run(self._client.pause, schedule_id, note)

    def resume(self, schedule_id: str) -> None:
        """See :meth:`rsched.Client.resume`."""
        self._run(self._client.resume, schedule_id)

    def trigger(self, schedule_id: str) -> Fired:
        """See :meth:`rsched.Client.trigger`."""
        return self._run(self._client.trigger, schedule_id)

    def select(
        self,
        *,
        labels: Mapping[str, str] | Iterable[str] | None = None,
        task: str | None = None,
        queue: str | None = None,
    ) -> builtins.list[str]:
        """See :meth:`rsched.Client.select`."""
        return self._run(self._client.select, labels=labels, task=task, queue=queue)

    def select_jobs(
        self,
        *,
        labels: Mapping[str, str] | Iterable[str] | None = None,
        task: str | None = None,
        queue: str | None = None,
    ) -> builtins.list[str]:
        """See :meth:`rsched.Client.select_jobs`."""
        return self._run(self._client.select_jobs, labels=labels, task=task, queue=queue)

    def pause_many(self, ids: Iterable[str], note: str | None = None) -> BulkResult:
        """See :meth:`rsched.Client.pause_many`."""
        return self._run(self._client.pause_many, ids, note)

    def resume_many(self, ids: Iterable[str]) -> BulkResult:
        """See :meth:`rsched.Client.resume_many`."""
        return self._run(self._client.resume_many, ids)

    def remove_many(self, ids: Iterable[str]) -> BulkResult:
        """See :meth:`rsched.Client.remove_many`."""
        return self._run(self._client.remove_many, ids)

    def trigger_many(self, ids: Iterable[str]) -> BulkResult:
        """See :meth:`rsched.Client.trigger_many`."""
        return self._run(self._client.trigger_many, ids)

    def cancel_many(self, execution_ids: Iterable[str]) -> BulkResult:
        """See :meth:`rsched.Client.cancel_many`."""
        return self._run(self._client.cancel_many, execution_ids)

    def backfill(self, schedule_id: str, start: datetime, end: datetime) -> BackfillResult:
        """See :meth:`rsched.Client.backfill`."""
        return self._run(self._client.backfill, schedule_id, start, end)

    def server_time(self) -> datetime:
        """See :meth:`rsched.Client.server_time`."""
        return self._run(self._client.server_time)

    def get(self, schedule_id: str) -> Schedule:
        """See :meth:`rsched.Client.get`."""
        return self._run(self._client.get, schedule_id)

    def next_runs(self, schedule_id: str, n: int = 5) -> list[datetime]:
        """See :meth:`rsched.Client.next_runs`."""
        return self._run(self._client.next_runs, schedule_id, n)

    def upcoming(
        self, schedule_id: str, n: int = 5, *, with_excluded: bool = False
    ) -> list[Occurrence]:
        """See :meth:`rsched.Client.upcoming`."""
        return self._run(self._client.upcoming, schedule_id, n, with_excluded=with_excluded)

    def set_calendar(
        self,
        name: str,
        *,
        dates: Iterable[str | date] = (),
        ranges: Iterable[tuple[str | date | datetime, str | date | datetime] | str] = (),
        weekdays: Iterable[str] = (),
        description: str | None = None,
    ) -> Calendar:
        """See :meth:`rsched.Client.set_calendar`."""
        return self._run(
            self._client.set_calendar,
            name,
            dates=dates,
            ranges=ranges,
            weekdays=weekdays,
            description=description,
        )

    def calendars(self) -> list[Calendar]:
        """See :meth:`rsched.Client.calendars`."""
        return self._run(self._client.calendars)

    def calendar(self, name: str) -> Calendar:
        """See :meth:`rsched.Client.calendar`."""
        return self._run(self._client.calendar, name)

    def remove_calendar(self, name: str) -> None:
        """See :meth:`rsched.Client.remove_calendar`."""
        self._run(self._client.remove_calendar, name)

    def calendar_users(self, name: str) -> list[str]:
        """See :meth:`rsched.Client.calendar_users`."""
        return self._run(self._client.calendar_users, name)

    def history(
        self,
        schedule_id: str,
        *,
        limit: int = 20,
        status: str | None = None,
        cursor: str | None = None,
    ) -> Page[HistoryEvent]:
        """See :meth:`rsched.Client.history`."""
        return self._run(
            self._client.history, schedule_id, limit=limit, status=status, cursor=cursor
        )

    def iter_history(
        self, schedule_id: str, *, status: str | None = None, page_size: int = 100
    ) -> Iterator[HistoryEvent]:
        """See :meth:`rsched.Client.iter_history`."""
        return every_item_sync(
            lambda cursor: self.history(schedule_id, limit=page_size, status=status, cursor=cursor)
        )

    def audit(
        self,
        id: str | None = None,
        *,
        since: float | str | timedelta | datetime | None = None,
        actor: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> Page[AuditRecord]:
        """See :meth:`rsched.Client.audit`."""
        return self._run(
            self._client.audit, id, since=since, actor=actor, limit=limit, cursor=cursor
        )

    def iter_audit(
        self,
        id: str | None = None,
        *,
        since: float | str | timedelta | datetime | None = None,
        actor: str | None = None,
        page_size: int = 100,
    ) -> Iterator[AuditRecord]:
        """See :meth:`rsched.Client.iter_audit`."""
        return every_item_sync(
            lambda cursor: self.audit(id, since=since, actor=actor, limit=page_size, cursor=cursor)
        )

    def spec_history(self, schedule_id: str) -> list[SpecVersion]:
        """See :meth:`rsched.Client.spec_history`."""
        return self._run(self._client.spec_history, schedule_id)

    def rollback(self, schedule_id: str, generation: int) -> Schedule:
        """See :meth:`rsched.Client.rollback`."""
        return self._run(self._client.rollback, schedule_id, generation)

    def runs(
        self,
        *,
        status: str | None = None,
        since: float | str | timedelta | datetime | None = None,
        schedule_id: str | None = None,
        task: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
        labels: Mapping[str, str] | Iterable[str] | None = None,
    ) -> Page[RunRecord]:
        """See :meth:`rsched.Client.runs`."""
        return self._run(
            self._client.runs,
            status=status,
            since=since,
            schedule_id=schedule_id,
            task=task,
            limit=limit,
            cursor=cursor,
            labels=labels,
        )

    def iter_runs(
        self,
        *,
        status: str | None = None,
        since: float | str | timedelta | datetime | None = None,
        schedule_id: str | None = None,
        task: str | None = None,
        labels: Mapping[str, str] | Iterable[str] | None = None,
        page_size: int = 100,
    ) -> Iterator[RunRecord]:
        """See :meth:`rsched.Client.iter_runs`."""
        return every_item_sync(
            lambda cursor: self.runs(
                status=status,
                since=since,
                schedule_id=schedule_id,
                task=task,
                labels=labels,
                limit=page_size,
                cursor=cursor,
            )
        )

    def enqueue(
        self,
        task: str | None = None,
        payload: dict[str, Any] | None = None,
        *,
        queue: str = "default",
        delay: float | str | timedelta = 0,
        max_retries: int = DEFAULT_MAX_RETRIES,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        execution_id: str | None = None,
        priority: Priority = "normal",
        dedup_window_s: float | None = None,
        limits: Sequence[Limit] = (),
        debounce_key: str | None = None,
        debounce: float | str | timedelta | None = None,
        start_deadline: float | str | timedelta | None = None,
        labels: Mapping[str, str] | Iterable[str] | None = None,
        http: Mapping[str, Any] | None = None,
    ) -> Enqueued:
        """See :meth:`rsched.Client.enqueue`."""
        return self._run(
            self._client.enqueue,
            task,
            payload,
            queue=queue,
            delay=delay,
            max_retries=max_retries,
            timeout_s=timeout_s,
            execution_id=execution_id,
            priority=priority,
            dedup_window_s=dedup_window_s,
            limits=limits,
            debounce_key=debounce_key,
            debounce=debounce,
            start_deadline=start_deadline,
            labels=labels,
            http=http,
        )

    def set_limit(
        self, key: str, *, concurrency: int | None = None, rate: str | tuple[int, Any] | None = None
    ) -> int:
        """See :meth:`rsched.Client.set_limit`."""
        return self._run(self._client.set_limit, key, concurrency=concurrency, rate=rate)

    def clear_limit(self, key: str) -> int:
        """See :meth:`rsched.Client.clear_limit`."""
        return self._run(self._client.clear_limit, key)

    def limits(
        self, *, match: str | None = None, limit: int = 1000, cursor: str | None = None
    ) -> Page[LimitInfo]:
        """See :meth:`rsched.Client.limits`."""
        return self._run(self._client.limits, match=match, limit=limit, cursor=cursor)

    def limit(self, key: str) -> LimitInfo:
        """See :meth:`rsched.Client.limit`."""
        return self._run(self._client.limit, key)

    def waiting(self, key: str, *, limit: int = 100) -> list[JobInfo]:
        """See :meth:`rsched.Client.waiting`."""
        return self._run(self._client.waiting, key, limit=limit)

    def dead_letters(
        self,
        queue: str = "default",
        *,
        limit: int = 100,
        cursor: str | None = None,
        task: str | None = None,
    ) -> Page[DeadLetter]:
        """See :meth:`rsched.Client.dead_letters`."""
        return self._run(self._client.dead_letters, queue, limit=limit, cursor=cursor, task=task)

    def iter_dead_letters(
        self, queue: str = "default", *, task: str | None = None, page_size: int = 100
    ) -> Iterator[DeadLetter]:
        """See :meth:`rsched.Client.iter_dead_letters`."""
        return every_item_sync(
            lambda cursor: self.dead_letters(queue, limit=page_size, cursor=cursor, task=task)
        )

    def dead_letter(self, queue: str, entry_id: str) -> DeadLetter:
        """See :meth:`rsched.Client.dead_letter`."""
        return self._run(self._client.dead_letter, queue, entry_id)

    def requeue(
        self,
        queue: str = "default",
        entry_ids: Sequence[str] | None = None,
        *,
        task: str | None = None,
    ) -> int:
        """See :meth:`rsched.Client.requeue`."""
        return self._run(self._client.requeue, queue, entry_ids, task=task)

    def purge(
        self,
        queue: str = "default",
        entry_ids: Sequence[str] | None = None,
        *,
        task: str | None = None,
    ) -> int:
        """See :meth:`rsched.Client.purge`."""
        return self._run(self._client.purge, queue, entry_ids, task=task)

    def workers(self) -> list[WorkerInfo]:
        """See :meth:`rsched.Client.workers`."""
        return self._run(self._client.workers)

    def jobs(
        self,
        *,
        queue: str | None = None,
        state: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        labels: Mapping[str, str] | Iterable[str] | None = None,
    ) -> Page[JobInfo]:
        """See :meth:`rsched.Client.jobs`."""
        return self._run(
            self._client.jobs, queue=queue, state=state, limit=limit, cursor=cursor, labels=labels
        )

    def job(self, execution_id: str) -> JobInfo:
        """See :meth:`rsched.Client.job`."""
        return self._run(self._client.job, execution_id)

    def result(self, execution_id: str) -> Any:
        """See :meth:`rsched.Client.result`."""
        return self._run(self._client.result, execution_id)

    def job_logs(self, execution_id: str, attempt: int | None = None) -> list[JobLogRecord]:
        """See :meth:`rsched.Client.job_logs`."""
        return self._run(self._client.job_logs, execution_id, attempt)

    def job_attempts(self, execution_id: str, limit: int = 50) -> list[RunRecord]:
        """See :meth:`rsched.Client.job_attempts`."""
        return self._run(self._client.job_attempts, execution_id, limit)

    def cancel(self, execution_id: str) -> str:
        """See :meth:`rsched.Client.cancel`."""
        return self._run(self._client.cancel, execution_id)

    def run_flow(
        self,
        flow: Node,
        *,
        queue: str = "default",
        flow_id: str | None = None,
        labels: Mapping[str, str] | Iterable[str] | None = None,
    ) -> FlowRun:
        """See :meth:`rsched.Client.run_flow`."""
        return self._run(self._client.run_flow, flow, queue=queue, flow_id=flow_id, labels=labels)

    def flow(self, flow_id: str) -> FlowInfo:
        """See :meth:`rsched.Client.flow`."""
        return self._run(self._client.flow, flow_id)

    def flows(
        self, *, state: FlowState | None = None, limit: int = 50, cursor: str | None = None
    ) -> Page[FlowInfo]:
        """See :meth:`rsched.Client.flows`."""
        return self._run(self._client.flows, state=state, limit=limit, cursor=cursor)

    def cancel_flow(self, flow_id: str) -> bool:
        """See :meth:`rsched.Client.cancel_flow`."""
        return self._run(self._client.cancel_flow, flow_id)

    def stats(self) -> Stats:
        """See :meth:`rsched.Client.stats`."""
        return self._run(self._client.stats)

    def activity(self, *, minutes: int = MINUTES, hours: int = HOURS) -> Activity:
        """See :meth:`rsched.Client.activity`."""
        return self._run(self._client.activity, minutes=minutes, hours=hours)

    def queue_depth(self, queue: str, *, minutes: int = MINUTES) -> list[DepthPoint]:
        """See :meth:`rsched.Client.queue_depth`."""
        return self._run(self._client.queue_depth, queue, minutes=minutes)

    def partitions(self) -> int:
        """See :meth:`rsched.Client.partitions`."""
        return self._run(self._client.partitions)

    def init(self, partitions: int) -> bool:
        """See :meth:`rsched.Client.init`."""
        return self._run(self._client.init, partitions)

    def health(
        self,
        *,
        max_due: int | None = None,
        max_overdue_s: float | str | timedelta | None = None,
        dead_letter_window_s: float | str | timedelta | None = None,
    ) -> Health:
        """See :meth:`rsched.Client.health`."""
        return self._run(
            self._client.health,
            max_due=max_due,
            max_overdue_s=max_overdue_s,
            dead_letter_window_s=dead_letter_window_s,
        )

    def schedule_health(self, schedule_id: str) -> ScheduleHealth:
        """See :meth:`rsched.Client.schedule_health`."""
        return self._run(self._client.schedule_health, schedule_id)

    def events(
        self, *, after: str | None = None, limit: int = 100, wait_s: float = 0
    ) -> list[HealthEvent]:
        """See :meth:`rsched.Client.events`."""
        return self._run(self._client.events, after=after, limit=limit, wait_s=wait_s)

    def iter_schedules(
        self,
        *,
        queue: str | None = None,
        task: str | None = None,
        paused: bool | None = None,
        id_prefix: str | None = None,
        labels: Mapping[str, str] | Iterable[str] | None = None,
        page_size: int = 100,
    ) -> Iterator[Schedule]:
        """See :meth:`rsched.Client.iter_schedules`."""
        return every_item_sync(
            lambda cursor: self.list(
                queue=queue,
                task=task,
                paused=paused,
                id_prefix=id_prefix,
                labels=labels,
                limit=page_size,
                cursor=cursor,
            )
        )

    # Last: the method name shadows the builtin in the class body.
    def list(
        self,
        *,
        queue: str | None = None,
        task: str | None = None,
        paused: bool | None = None,
        id_prefix: str | None = None,
        labels: Mapping[str, str] | Iterable[str] | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page[Schedule]:
        """See :meth:`rsched.Client.list`."""
        return self._run(
            self._client.list,
            queue=queue,
            task=task,
            paused=paused,
            id_prefix=id_prefix,
            labels=labels,
            limit=limit,
            cursor=cursor,
        )


async def _open(url: str | None, prefix: str | None, settings: dict[str, Any]) -> Client:
    return Client.from_url(url, prefix, **settings)


async def _open_settings(settings: Settings) -> Client:
    return Client.from_settings(settings)


def _start_loop() -> tuple[BlockingPortal, threading.Thread]:
    """An event loop with a blocking portal in a daemon thread.

    anyio's ``start_blocking_portal`` runs its loop in a non-daemon executor thread, which the
    interpreter waits for at exit: a client nobody closed would hang the program forever.
    """
    handed: queue.Queue[BlockingPortal | BaseException] = queue.Queue(maxsize=1)

    async def serve() -> None:
        async with BlockingPortal() as portal:
            handed.put(portal)
            await portal.sleep_until_stopped()

    def run() -> None:
        try:
            anyio.run(serve)
        except BaseException as exc:  # handed to the thread that waits for it
            if handed.empty():
                handed.put(exc)

    thread = threading.Thread(target=run, name="rsched-sync-client", daemon=True)
    thread.start()
    got = handed.get()
    if isinstance(got, BaseException):
        raise got
    return got, thread


async def _close_client(client: Client) -> None:
    with anyio.move_on_after(CLOSE_TIMEOUT_S):
        await client.aclose()


def _shutdown(portal: BlockingPortal, thread: threading.Thread, client: Client | None) -> None:
    """Close ``client`` and stop the loop; the finalizer of a SyncClient (close, GC or exit)."""
    if threading.current_thread() is thread:
        return  # collected on its own loop: nothing can wait there; the daemon thread stays
    # RuntimeError: the loop already ended (nothing left to close or stop).
    try:
        if client is not None:
            with contextlib.suppress(RuntimeError):
                portal.call(_close_client, client)
    finally:
        with contextlib.suppress(RuntimeError):
            portal.call(portal.stop, True)
        thread.join(CLOSE_TIMEOUT_S)


async def _acting(client: Client, actor: str | None, source: str) -> Client:
    return client.acting_as(actor, source=source)


def _nothing() -> None:
    """What closing a client that shares another's connections does."""
