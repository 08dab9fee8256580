"""Every call the web package makes to rsched, through the public ``rsched.Client`` only.

The dashboard and the API read and write exactly what the CLI does, with the same errors.
Each call is followed here, in one line, and nowhere else, so a change of the SDK is a change
of this file.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from rsched import (
    Activity,
    BackfillResult,
    Calendar,
    Client,
    DeadLetter,
    DepthPoint,
    Enqueued,
    Fired,
    Health,
    HealthEvent,
    HistoryEvent,
    JobInfo,
    LimitInfo,
    Occurrence,
    Page,
    RunRecord,
    Schedule,
    ScheduleHealth,
    Settings,
    Stats,
)

#: A page of history events large enough for a whole kept history.
HISTORY_EVENTS = 1_000


class Sdk:
    """The rsched calls of the web package, around one client."""

    def __init__(self, client: Client) -> None:
        self.client = client

    @property
    def settings(self) -> Settings:
        return self.client.settings

    @staticmethod
    def now_ms() -> int:
        """This host's clock, for relative times on a page (rsched decides with Redis TIME)."""
        return time.time_ns() // 1_000_000

    # --- schedules ------------------------------------------------------------------------

    async def list_schedules(
        self,
        *,
        queue: str | None = None,
        task: str | None = None,
        paused: bool | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[Schedule]:
        return await self.client.list(
            queue=queue, task=task, paused=paused, limit=limit, cursor=cursor
        )

    async def get(self, schedule_id: str) -> Schedule:
        return await self.client.get(schedule_id)

    async def add(self, spec: dict[str, Any]) -> Schedule:
        return await self.client.add(spec)

    async def upsert(self, spec: dict[str, Any]) -> Schedule:
        return await self.client.upsert(spec)

    async def update(self, schedule_id: str, changes: dict[str, Any]) -> Schedule:
        return await self.client.update(schedule_id, **changes)

    async def remove(self, schedule_id: str) -> None:
        await self.client.remove(schedule_id)

    async def pause(self, schedule_id: str, note: str | None) -> None:
        await self.client.pause(schedule_id, note)

    async def resume(self, schedule_id: str) -> None:
        await self.client.resume(schedule_id)

    async def trigger(self, schedule_id: str) -> Fired:
        return await self.client.trigger(schedule_id)

    async def backfill(self, schedule_id: str, start: datetime, end: datetime) -> BackfillResult:
        return await self.client.backfill(schedule_id, start, end)

    async def upcoming(self, schedule_id: str, n: int) -> list[Occurrence]:
        """The next ``n`` occurrences: time, fire time (jitter), the calendar excluding it.
        Always with the excluded ones: without them the SDK looks past every excluded
        occurrence for ``n`` that run, a search that never ends for a schedule whose calendars
        exclude them all (weekdays mon..sun)."""
        return await self.client.upcoming(schedule_id, n, with_excluded=True)

    async def history(
        self, schedule_id: str, limit: int | None = None, status: str | None = None
    ) -> list[HistoryEvent]:
        """The recent events, newest first: by default every event of the runs kept
        (``history_limit`` runs of a few events each)."""
        limit = limit or HISTORY_EVENTS
        return (await self.client.history(schedule_id, limit=limit, status=status)).items

    # --- queues, jobs and dead letters ------------------------------------------------------

    async def enqueue(self, task: str, payload: dict[str, Any], **options: Any) -> Enqueued:
        return await self.client.enqueue(task, payload, **options)

    async def dead_letters(
        self, queue: str, *, limit: int, cursor: str | None = None, task: str | None = None
    ) -> Page[DeadLetter]:
        return await self.client.dead_letters(queue, limit=limit, cursor=cursor, task=task)

    async def dead_letter(self, queue: str, entry_id: str) -> DeadLetter:
        return await self.client.dead_letter(queue, entry_id)

    async def requeue(
        self, queue: str, entry_ids: Sequence[str] | None, task: str | None = None
    ) -> int:
        return await self.client.requeue(queue, entry_ids, task=task)

    async def purge(
        self, queue: str, entry_ids: Sequence[str] | None, task: str | None = None
    ) -> int:
        return await self.client.purge(queue, entry_ids, task=task)

    # --- flow-control limits ----------------------------------------------------------------

    async def limits(
        self, *, match: str | None = None, limit: int = 1000, cursor: str | None = None
    ) -> Page[LimitInfo]:
        """A page of the limit keys in use and of the operators' overrides."""
        return await self.client.limits(match=match, limit=limit, cursor=cursor)

    async def limit(self, key: str) -> LimitInfo:
        """One key's numbers in force, holders, waiting jobs and starts (one read)."""
        return await self.client.limit(key)

    async def waiting(self, key: str, limit: int = 100) -> list[JobInfo]:
        """The first ``limit`` jobs waiting on a key, in the order they will start."""
        return await self.client.waiting(key, limit=limit)

    async def set_limit(self, key: str, concurrency: int | None, rate: Any) -> int:
        """Override a key's (or a pattern's) numbers; returns how many keys with waiting jobs
        it concerns."""
        return await self.client.set_limit(key, concurrency=concurrency, rate=rate)

    async def clear_limit(self, key: str) -> int:
        return await self.client.clear_limit(key)

    # --- exclusion calendars ----------------------------------------------------------------

    async def calendars(self) -> list[Calendar]:
        return await self.client.calendars()

    async def calendar(self, name: str) -> Calendar:
        return await self.client.calendar(name)

    async def set_calendar(
        self,
        name: str,
        *,
        dates: Any = (),
        ranges: Any = (),
        weekdays: Any = (),
        description: str | None = None,
    ) -> Calendar:
        """Create or replace a calendar from what a request gave (checked by rsched:
        InvalidCalendar naming each bad field); returns it as stored."""
        return await self.client.set_calendar(
            name, dates=dates, ranges=ranges, weekdays=weekdays, description=description
        )

    async def remove_calendar(self, name: str) -> None:
        await self.client.remove_calendar(name)

    async def calendar_users(self, name: str) -> list[str]:
        """The schedules whose ``exclude`` names the calendar: a read of every schedule."""
        return await self.client.calendar_users(name)

    # --- deployment -----------------------------------------------------------------------

    async def stats(self) -> Stats:
        return await self.client.stats()

    async def queue_depth(self, queue: str, minutes: int = 60) -> list[DepthPoint]:
        """The queue's waiting and delayed jobs per minute, as the leaders sampled them."""
        return await self.client.queue_depth(queue, minutes=minutes)

    async def activity(self, minutes: int = 60, hours: int = 24) -> Activity:
        """Counts per minute and per hour from the bounded activity counters (one read per
        partition, whatever the number of schedules)."""
        return await self.client.activity(minutes=minutes, hours=hours)

    async def health(self, **limits: Any) -> Health:
        """The deployment checks and the unhealthy schedules (``Client.health``: bounded
        reads; ``limits`` are its ``max_due``, ``max_overdue_s``, ``dead_letter_window_s``)."""
        return await self.client.health(**limits)

    async def schedule_health(self, schedule_id: str) -> ScheduleHealth:
        return await self.client.schedule_health(schedule_id)

    async def events(self, limit: int, after: str | None = None) -> list[HealthEvent]:
        """The newest ``limit`` events (or those after ``after``), newest first."""
        return list(reversed(await self.client.events(after=after, limit=limit)))

    async def workers(self) -> list[dict[str, Any]]:
        """Live workers (``WorkerInfo.as_dict()``: id, host, queues, tasks, running, ...)."""
        return [w.as_dict() for w in await self.client.workers()]

    async def jobs(self, queue: str, limit: int = 50) -> list[dict[str, Any]]:
        """The first ``limit`` running, queued and delayed jobs of ``queue``
        (``JobInfo.as_dict()``, with the worker running each)."""
        return [j.as_dict() for j in (await self.client.jobs(queue=queue, limit=limit)).items]

    async def list_jobs(
        self,
        *,
        queue: str | None = None,
        state: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page[JobInfo]:
        """A page of running, queued and delayed jobs (of ``queue``, in ``state``)."""
        return await self.client.jobs(queue=queue, state=state, limit=limit, cursor=cursor)

    async def job(self, execution_id: str) -> JobInfo:
        return await self.client.job(execution_id)

    async def cancel(self, execution_id: str) -> str:
        """Cancels a waiting or running job; returns the state it was cancelled in."""
        return await self.client.cancel(execution_id)

    async def runs(
        self,
        *,
        status: str | None = None,
        schedule_id: str | None = None,
        task: str | None = None,
        since: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[RunRecord]:
        """A page of the runs log across schedules, newest first (``Client.runs``). ``since``:
        an aware ISO 8601 time, or a duration back from now ("1h", seconds)."""
        when: str | datetime | None = since
        if since:
            try:
                when = datetime.fromisoformat(since)
            except ValueError:
                when = since
        return await self.client.runs(
            status=status,
            schedule_id=schedule_id,
            task=task,
            since=when or None,
            limit=limit,
            cursor=cursor,
        )
