"""Every call the web package makes to rsched, through the public ``rsched.Client`` only.

The dashboard and the API read and write exactly what the CLI does, with the same errors.
Each call is followed here, in one line, and nowhere else, so a change of the SDK is a change
of this file.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from rsched import (
    Activity,
    AuditRecord,
    BackfillResult,
    BulkResult,
    Calendar,
    Client,
    DeadLetter,
    DepthPoint,
    Enqueued,
    Fired,
    FlowInfo,
    Health,
    HealthEvent,
    HistoryEvent,
    InvalidArgument,
    JobInfo,
    JobLogRecord,
    LimitInfo,
    Occurrence,
    Page,
    RunRecord,
    Schedule,
    ScheduleHealth,
    Settings,
    SpecVersion,
    Stats,
)
from rsched._core.audit import safe_actor
from rsched.web._security import ACTOR_STATE

#: A page of history events large enough for a whole kept history.
HISTORY_EVENTS = 1_000
#: A dead job's dead letter is looked for among this many of its queue's, from its dead
#: record's time and this much after (the two are written by one script).
DEAD_LETTER_LOOK = 50
DEAD_LETTER_SLACK_MS = 1_000
#: What an audit record can be about (audit_kind).
AUDIT_KINDS = ("schedule", "calendar", "limit")
#: Pages of the audit trail one read of a kind looks at, at most: a schedule and a calendar
#: may share a name, and each page looks at up to 10,000 records of each stream.
AUDIT_KIND_READS = 5


def audit_kind(record: AuditRecord) -> str:
    """What the record is about, by its action: a calendar's (``calendar_*``), a limit key's
    or pattern's (``limit_*``), else a schedule's."""
    head = record.action.partition("_")[0]
    return head if head in ("calendar", "limit") else "schedule"


class Sdk:
    """The rsched calls of the web package, around one client."""

    def __init__(self, client: Client) -> None:
        self.client = client

    @property
    def settings(self) -> Settings:
        return self.client.settings

    def for_request(self, scope: Mapping[str, Any]) -> Sdk:
        """This SDK for a read; for a write (the guard named its actor,
        rsched.web._security.ACTOR_STATE), one whose changes are recorded as that user's, from
        ``web``."""
        state = scope.get("state") or {}
        if ACTOR_STATE not in state:
            return self
        actor = state[ACTOR_STATE]
        return Sdk(self.client.acting_as(safe_actor(actor) if actor else None, source="web"))

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
        labels: Sequence[str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[Schedule]:
        return await self.client.list(
            queue=queue, task=task, paused=paused, labels=labels, limit=limit, cursor=cursor
        )

    async def select(
        self, labels: Sequence[str] | None, task: str | None, queue: str | None
    ) -> list[str]:
        """The ids of the schedules a filter selects (``Client.select``)."""
        return await self.client.select(labels=labels, task=task, queue=queue)

    async def select_jobs(
        self, labels: Sequence[str] | None, task: str | None, queue: str | None
    ) -> list[str]:
        """The execution ids of the waiting and running jobs a filter selects."""
        return await self.client.select_jobs(labels=labels, task=task, queue=queue)

    async def act_many(self, action: str, ids: list[str], note: str | None = None) -> BulkResult:
        """One bulk action on ids: pause, resume, remove, trigger (schedules) or cancel (jobs)."""
        if action == "pause":
            return await self.client.pause_many(ids, note)
        act = {
            "resume": self.client.resume_many,
            "remove": self.client.remove_many,
            "trigger": self.client.trigger_many,
            "cancel": self.client.cancel_many,
        }[action]
        return await act(ids)

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

    # --- the audit trail and the spec history ----------------------------------------------

    async def audit(
        self,
        id: str | None = None,
        *,
        kind: str | None = None,
        actor: str | None = None,
        since: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[AuditRecord]:
        """A page of the audit trail, newest first (``Client.audit``): of one schedule id,
        calendar name or limit key (``id``), of one kind of target (``kind``, AUDIT_KINDS; the
        records of a calendar named as a schedule are not the schedule's); ``since`` as in
        :meth:`runs`. With ``kind``, pages are read until ``limit`` records match or
        AUDIT_KIND_READS pages were read; the cursor goes on from there. Raises
        InvalidArgument naming ``kind`` or what ``Client.audit`` names."""
        if kind is not None and kind not in AUDIT_KINDS:
            raise InvalidArgument("kind", f"{kind!r} is not a kind; give {', '.join(AUDIT_KINDS)}")
        when = _since(since)
        found: list[AuditRecord] = []
        for _ in range(AUDIT_KIND_READS):
            # Never more than the page still needs: the cursor of each read is then right for
            # the records kept (nothing read is left out of the answer).
            page = await self.client.audit(
                id, actor=actor, since=when, limit=limit - len(found), cursor=cursor
            )
            found += [r for r in page.items if kind is None or audit_kind(r) == kind]
            cursor = page.cursor
            if kind is None or cursor is None or len(found) == limit:
                break
        return Page(found, cursor)

    async def spec_history(self, schedule_id: str) -> list[SpecVersion]:
        return await self.client.spec_history(schedule_id)

    async def rollback(self, schedule_id: str, generation: int) -> Schedule:
        return await self.client.rollback(schedule_id, generation)

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
        labels: Sequence[str] | None = None,
    ) -> Page[JobInfo]:
        """A page of running, queued and delayed jobs (of ``queue``, in ``state``, with
        ``labels``)."""
        return await self.client.jobs(
            queue=queue, state=state, limit=limit, cursor=cursor, labels=labels
        )

    async def job(self, execution_id: str) -> JobInfo:
        return await self.client.job(execution_id)

    async def cancel(self, execution_id: str) -> str:
        """Cancels a waiting or running job; returns the state it was cancelled in."""
        return await self.client.cancel(execution_id)

    # --- flows ---------------------------------------------------------------------------

    async def flows(
        self, *, state: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> Page[FlowInfo]:
        return await self.client.flows(
            state=state,  # type: ignore[arg-type]  # checked by the SDK (InvalidFlow naming it)
            limit=limit,
            cursor=cursor,
        )

    async def flow(self, flow_id: str) -> FlowInfo:
        return await self.client.flow(flow_id)

    async def cancel_flow(self, flow_id: str) -> bool:
        return await self.client.cancel_flow(flow_id)

    async def job_logs(self, execution_id: str, attempt: int | None = None) -> list[JobLogRecord]:
        return await self.client.job_logs(execution_id, attempt)

    async def job_attempts(self, execution_id: str) -> list[RunRecord]:
        return await self.client.job_attempts(execution_id)

    async def dead_letter_of(
        self, job: JobInfo, attempts: Sequence[RunRecord]
    ) -> DeadLetter | None:
        """The dead letter of a dead job: among the few of its queue written about when its
        dead record was (one script writes both), so no queue-long scan; None when gone."""
        dead = next((r for r in attempts if r.status == "dead" and r.ended_at), None)
        if job.state != "dead" or dead is None or dead.ended_at is None:
            return None
        after = round(dead.ended_at.timestamp() * 1000) + DEAD_LETTER_SLACK_MS
        page = await self.client.dead_letters(
            dead.queue, limit=DEAD_LETTER_LOOK, cursor=f"{after}-0", task=dead.task
        )
        return next((d for d in page.items if d.execution_id == job.execution_id), None)

    async def runs(
        self,
        *,
        status: str | None = None,
        schedule_id: str | None = None,
        task: str | None = None,
        since: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        labels: Sequence[str] | None = None,
    ) -> Page[RunRecord]:
        """A page of the runs log across schedules, newest first (``Client.runs``). ``since``:
        an aware ISO 8601 time, or a duration back from now ("1h", seconds)."""
        when = _since(since)
        return await self.client.runs(
            status=status,
            schedule_id=schedule_id,
            task=task,
            since=when or None,
            labels=labels,
            limit=limit,
            cursor=cursor,
        )


def _since(since: str | None) -> str | datetime | None:
    """An aware ISO 8601 time as a datetime, anything else (a duration) as given."""
    if not since:
        return None
    try:
        return datetime.fromisoformat(since)
    except ValueError:
        return since
