"""The async client SDK: add, change and inspect schedules, jobs and dead letters.

Every write goes through a Lua script (see lua/), so a client can never half-apply a change;
every time decision (first run, due-ness) uses Redis TIME, never this host's clock.
"""

from __future__ import annotations

import builtins
import functools
import math
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from types import TracebackType
from typing import Any, Literal, ParamSpec, TypeVar

from redis.asyncio import Redis
from redis.exceptions import RedisError

from rsched._client import bulk_actions, job_lookup, schedules_file
from rsched._client import flows as flow_calls
from rsched._client.stats import Stats, read_stats
from rsched._core import tracing
from rsched._core.activity import HOURS, MINUTES, Activity, DepthPoint, activity_of, depth_of
from rsched._core.audit import (
    AuditFilter,
    AuditRecord,
    Author,
    SpecVersion,
    authored,
    check_source,
)
from rsched._core.bulk import BulkResult, Validator, collector_spared, hash_fields
from rsched._core.calendars import Calendar
from rsched._core.codes import Code
from rsched._core.errors import (
    CalendarInUse,
    Conflict,
    InvalidArgument,
    InvalidSchedule,
    ScheduleCompleted,
    ScheduleNotFound,
)
from rsched._core.flows import FlowInfo, FlowRun, FlowState, Node
from rsched._core.flows import plan as flows_plan
from rsched._core.health import Health, ScheduleHealth, Thresholds
from rsched._core.history import HistoryEvent, page_events
from rsched._core.http_target import target_job
from rsched._core.job import DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT_S, DeadLetter, Enqueued
from rsched._core.job_logs import JobLogRecord
from rsched._core.limits import Limit, LimitInfo, check_key, override_doc
from rsched._core.page import Page, every_item
from rsched._core.partitions import check_partitions, partition_of
from rsched._core.rules import (
    PAGE_MAX,
    Priority,
    check_actor,
    check_count,
    check_execution_id,
    check_history_status,
    check_name,
    check_page,
    check_pause_note,
    check_run_status,
    parse_duration_s,
)
from rsched._core.schedule import STATE_FIELDS, Schedule, from_ms, to_ms
from rsched._core.settings import BLOCK_MARGIN_MS, Settings
from rsched._core.timezones import resolve_timezone
from rsched._core.timing import Timing, upcoming
from rsched._core.workers import LISTED_STATES, JobInfo, WorkerInfo
from rsched._ops.health import HealthReader, check_deployment
from rsched._redis.connection import connect, explain
from rsched._store.activity import read_activity
from rsched._store.alerts import EventLog, HealthEvent
from rsched._store.audit_log import audit_streams, read_audit
from rsched._store.audit_log import check_cursor as check_audit_cursor
from rsched._store.calendars import schedules_using
from rsched._store.deployment import init_deployment
from rsched._store.depth import read_depth
from rsched._store.partitions import (
    Partitions,
    dead_letter_across,
    dead_letters_across,
    entry_ids_of,
    gather_fields,
    index_page,
    jobs_across,
    runs_across,
    save_many,
    select_ids,
)
from rsched._store.queues import QueueStore, new_execution_id
from rsched._store.runs_log import RunFilter, RunRecord, check_cursor, read_runs
from rsched._store.schedules import ScheduleStore

P = ParamSpec("P")
T = TypeVar("T")

#: At most this many occurrences per backfill call: a script must never run long.
BACKFILL_LIMIT = 1000
#: How often a read-modify-write retries when the schedule changes under it.
WRITE_ATTEMPTS = 5
_TRIGGERS = ("cron", "every", "at")
_Schedules = list[Schedule]
#: What a trigger or a backfilled occurrence did.
FiredStatus = Literal["fired", "skipped", "buffered", "debounced", "already_fired"]
_OUTCOMES: dict[int, FiredStatus] = {
    Code.FIRED: "fired",
    Code.SKIPPED: "skipped",
    Code.BUFFERED: "buffered",
    Code.DEBOUNCED: "debounced",
    Code.STALE: "already_fired",
}


@dataclass(frozen=True, slots=True)
class Fired:
    """What :meth:`Client.trigger` did: ``status`` is fired, skipped or buffered (overlap), or
    debounced (merged into the schedule's open debounce window: ``execution_id`` is the window's
    job, which now runs ``debounce`` after this trigger)."""

    execution_id: str
    status: FiredStatus


@dataclass(frozen=True, slots=True)
class Occurrence:
    """A coming occurrence of a schedule (:meth:`Client.upcoming`): ``at`` is its time (its
    jobs' ``scheduled_at``), ``fires_at`` when it fires (``at`` plus the delay of the schedule's
    ``jitter``), ``excluded_by`` the exclusion calendar that keeps it from running (None: it
    runs). Aware datetimes in the schedule's zone."""

    at: datetime
    fires_at: datetime
    excluded_by: str | None = None


@dataclass(frozen=True, slots=True)
class BackfillResult:
    """Per occurrence of a backfilled range: its execution id and what happened to it.

    ``outcomes`` maps execution id to fired, buffered (runs when the schedule's run before it
    ends), debounced (merged into the schedule's debounce window: one job runs for them all) or
    already_fired (by the schedule or an earlier backfill; nothing done).
    """

    outcomes: dict[str, str] = field(default_factory=dict)

    def count(self, status: str) -> int:
        return sum(1 for s in self.outcomes.values() if s == status)


def _redis_errors(
    fn: Callable[P, Awaitable[T]],
) -> Callable[P, Coroutine[Any, Any, T]]:
    """Translate Redis failures (after redis-py's own retries) into the RschedError naming the
    fix (rsched._redis.connection.explain): RedisUnavailable, PoolExhausted or a ServerError."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            client = args[0]
            if isinstance(client, Client):
                # The changes the call makes are recorded as the client's author's.
                with authored(client.author):
                    return await fn(*args, **kwargs)
            return await fn(*args, **kwargs)
        except (RedisError, OSError) as exc:
            client = args[0]
            settings = client.settings if isinstance(client, Client) else Settings()
            raise (await explain(exc, settings)) from exc

    return wrapper


async def _until_no_conflict(write: Callable[[], Awaitable[T]]) -> T:
    """Run a read-modify-write again while the schedule changes under it (at most
    WRITE_ATTEMPTS times; then the Conflict propagates)."""
    for _ in range(WRITE_ATTEMPTS - 1):
        try:
            return await write()
        except Conflict:
            continue
    return await write()


def _argument(name: str, check: Callable[[Any], object], value: Any) -> None:
    """``check(value)``, its ValueError raised as InvalidArgument naming ``name``."""
    try:
        check(value)
    except ValueError as exc:
        raise InvalidArgument(name, str(exc)) from None


def _attempt(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"give an attempt number from 1, not {value!r}")
    return value


def _calendar_name(value: object) -> str:
    return check_name(value, "calendar name")


def _to_ms(value: datetime, zone: str, name: str) -> int:
    if not isinstance(value, datetime):
        raise InvalidArgument(name, f"give a datetime, got {type(value).__name__} {value!r}")
    if value.tzinfo is None:
        value = value.replace(tzinfo=resolve_timezone(zone))
    return to_ms(value)


class Client:
    """Adds, changes and inspects schedules, jobs and dead letters.

    ``async with rsched.Client.from_url("redis://localhost:6379/0") as client: ...`` or
    ``Client(redis, settings)`` around an existing decoded ``redis.asyncio.Redis`` (which the
    client then does not close). Every method raises :class:`RedisUnavailable` when Redis
    cannot be reached or does not answer within ``socket_timeout_s``, :class:`PoolExhausted`
    when no connection of the pool came free within ``pool_timeout_s``, and a
    :class:`ServerError` when the server refuses (password, ACL, replica, out of memory, ...).
    One client may serve any number of concurrent calls.
    """

    def __init__(
        self,
        redis: Redis,
        settings: Settings | None = None,
        *,
        actor: str | None = None,
        source: str = "sdk",
    ) -> None:
        self.settings = settings or Settings()
        self._redis = redis
        if actor is not None:
            _argument("actor", check_actor, actor)
        _argument("source", check_source, source)
        #: Who the changes this client makes are by, and from where (docs/audit.md).
        self.author = Author(actor or self.settings.actor, source)
        # The deployment's own keys (clock, worker registry, cancel channel, events) are the
        # same whatever its number of partitions; the partitions are read on first use.
        self._clock = ScheduleStore.from_settings(redis, self.settings)
        self._registry = QueueStore.from_settings(redis, self.settings)
        self._events = EventLog(
            redis, self._clock.keys, max_len=self.settings.health.events_max_len
        )
        self._parts: Partitions | None = None
        self._origin: Client | None = None  # the client acting_as made this one from
        self._owns_redis = False
        # Decided once (docs/tracing.md): enqueue and trigger then make PRODUCER spans.
        self._traced = tracing.decide(self.settings.tracing)

    @classmethod
    def from_url(cls, url: str | None = None, prefix: str | None = None, **settings: Any) -> Client:
        """A client with its own connection pool (closed by ``aclose`` / ``async with``).

        ``url`` and ``prefix`` default to RSCHED_REDIS_URL and RSCHED_PREFIX (``rsched``);
        other keyword arguments are :class:`rsched.Settings` fields.
        """
        given = {"redis_url": url, "prefix": prefix, **settings}
        return cls.from_settings(Settings(**{k: v for k, v in given.items() if v is not None}))

    @classmethod
    def from_settings(cls, settings: Settings) -> Client:
        """A client with its own connection pool to ``settings.url``."""
        client = cls(connect(settings), settings)
        client._owns_redis = True
        return client

    def acting_as(self, actor: str | None, *, source: str = "sdk") -> Client:
        """A client sharing this one's connections whose changes the audit trail records as
        made by ``actor`` (None: nobody named) from ``source`` (``sdk``, ``cli``, ``web``,
        ``sync:<name>``). Closing it closes nothing. Raises InvalidArgument naming ``actor`` or
        ``source``."""
        other = Client(self._redis, self.settings, actor=actor, source=source)
        if actor is None:
            other.author = Author(None, source)
        other._parts = self._parts
        other._origin = self._origin or self
        return other

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool if this client opened it."""
        if self._owns_redis:
            await self._redis.aclose()

    @_redis_errors
    async def partitions(self) -> int:
        """The deployment's number of partitions (docs/scaling.md): read once, or stored when
        the deployment is new (``settings.partitions``, else 1). Raises PartitionMismatch when
        ``settings.partitions`` names another number than the deployment's."""
        return (await self._partitions()).count

    @_redis_errors
    async def init(self, partitions: int) -> bool:
        """Store the number of partitions of a new deployment before any process uses it:
        True when stored now, False when the deployment has that number already. Raises
        PartitionMismatch (nothing written) when it has another, InvalidArgument for a number
        out of 1..256."""
        _argument("partitions", check_partitions, partitions)
        created = await init_deployment(self._redis, self.settings.prefix, partitions)
        self._parts = None  # read again on next use
        return created

    async def _partitions(self) -> Partitions:
        """The deployment's partitions, read once (PartitionMismatch when ``settings.partitions``
        names another number than the deployment's)."""
        if self._parts is None:
            if self._origin is not None:  # acting_as: the partitions of the client it shares
                self._parts = await self._origin._partitions()
            else:
                self._parts = await Partitions.of(self._redis, self.settings)
        return self._parts

    async def _store(self, schedule_id: str) -> ScheduleStore:
        """The store of the schedule's partition."""
        return (await self._partitions()).of_schedule(schedule_id)

    async def _queues(self, execution_id: str) -> QueueStore:
        """The store of the job's partition."""
        return (await self._partitions()).of_job(execution_id)

    # --- writing schedules ------------------------------------------------------------------

    def _validated(self, schedule: Schedule | Mapping[str, Any]) -> Schedule:
        """Re-validate (with this deployment's payload limit); state fields are dropped."""
        if isinstance(schedule, Schedule):
            data = schedule.model_dump(exclude=set(STATE_FIELDS), exclude_unset=True)
            data.update(id=schedule.id, task=schedule.task)
        elif isinstance(schedule, Mapping):
            data = {k: v for k, v in schedule.items() if k not in STATE_FIELDS}
        else:
            raise InvalidArgument(
                "schedule", f"give an rsched.Schedule or a dict, got {type(schedule).__name__}"
            )
        return _parse(data)

    @_redis_errors
    async def add(self, schedule: Schedule | Mapping[str, Any]) -> Schedule:
        """Create a schedule; returns it as stored (with its first ``next_run``).

        Raises ScheduleExists when the id is taken, InvalidSchedule (naming each field) when
        the spec is invalid or ``at`` / ``end_at`` is in the past; nothing is written then.
        """
        valid = self._validated(schedule)
        store = await self._store(valid.id)
        await store.save(valid, mode="add")
        return await store.load(valid.id)

    @_redis_errors
    async def upsert(self, schedule: Schedule | Mapping[str, Any]) -> Schedule:
        """Create a schedule or replace its whole spec (bumping its generation).

        A replaced schedule keeps its runs, last run and creation time, its next run is
        recomputed from now, and an occurrence buffered under the old spec is dropped.
        """
        valid = self._validated(schedule)
        store = await self._store(valid.id)
        await store.save(valid, mode="upsert")
        return await store.load(valid.id)

    @_redis_errors
    async def sync_schedules(
        self,
        schedules: Iterable[Schedule | Mapping[str, Any]],
        *,
        source: str,
        prune: bool = True,
        adopt: bool = False,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Make the schedules of ``source`` match ``schedules``, as a schedules file's sync
        does (docs/schedules-files.md): new ones added, changed ones replaced, unchanged ones
        untouched, and (with ``prune``) the ones this source created earlier and no longer
        lists removed. The audit trail records the changes as from ``sync:<source>``. Returns
        the plan as JSON-ready data (``applied``, ``changes``, ``unchanged``). Raises
        ScheduleFileError listing every problem (nothing applied): an invalid entry, a
        repeated id, an id another source or the SDK created (unless ``adopt``)."""
        _argument("source", lambda s: check_name(s, "source name"), source)
        label = f"schedules of source {source!r}"
        valid: list[tuple[int, Schedule]] = []
        errors: list[tuple[str, str]] = []
        for index, entry in enumerate(schedules):
            try:
                valid.append((index, self._validated(entry)))
            except InvalidSchedule as exc:
                where = f"schedule[{index}]"
                errors.extend((f"{where}.{f}" if f else where, m) for f, m in exc.errors)
            except InvalidArgument as exc:  # neither a Schedule nor a dict
                errors.append((f"schedule[{index}]", exc.message))
        parsed = schedules_file.read_schedules(label, source, valid)
        parsed.errors[:0] = errors
        plan = await schedules_file.sync_parsed(
            await self._partitions(),
            self.settings,
            parsed,
            dry_run=dry_run,
            adopt=adopt,
            prune=prune,
            actor=self.author.actor,
        )
        return plan.as_dict()

    @_redis_errors
    async def add_many(self, schedules: Iterable[Schedule | Mapping[str, Any]]) -> BulkResult:
        """Create many schedules in a few round trips; returns each id's outcome.

        Everything is checked first: when any entry is invalid, an id repeats within the call
        or already exists, InvalidSchedules lists every problem (``[index] id: field:
        message``) and nothing is written. Then each schedule is written atomically on its own,
        a thousand per script call. An id that another writer creates between the check and
        the write is left as that writer made it and reported as ``exists``; the others are
        created. With several partitions (docs/scaling.md) the entries of every partition are
        checked before anything is written in any, and each partition's are then written at
        once: as with one, a schedule is atomic alone, the call as a whole is not.
        """
        return await self._save_many(schedules, mode="add")

    @_redis_errors
    async def upsert_many(self, schedules: Iterable[Schedule | Mapping[str, Any]]) -> BulkResult:
        """Create or replace many schedules in a few round trips; returns each id's outcome.

        Checked first as :meth:`add_many` (existing ids are fine). Each schedule is then
        replaced as by :meth:`upsert`, except that one whose stored spec and pause state are
        already the given ones is left alone (outcome ``unchanged``: its generation, next run
        and buffered occurrence stay), so re-applying the same list writes nothing.
        """
        return await self._save_many(schedules, mode="upsert")

    async def _save_many(
        self, schedules: Iterable[Schedule | Mapping[str, Any]], mode: str
    ) -> BulkResult:
        if isinstance(schedules, Schedule | Mapping | str):
            raise InvalidArgument(
                "schedules", "give a list of rsched.Schedule or dicts, not a single one"
            )
        entries = list(schedules)
        if not entries:
            return BulkResult({})
        with collector_spared() as settled:
            validator = Validator(self.settings.max_payload_bytes)
            items, problems = validator.validate(entries, mode=mode)
            settled()
            outcomes = await save_many(
                await self._partitions(),
                items,
                upsert=mode == "upsert",
                problems=problems,
                total=len(entries),
            )
        return BulkResult(outcomes)

    @_redis_errors
    async def update(self, schedule_id: str, **changes: Any) -> Schedule:
        """Change some fields of a schedule; the merged spec is validated again.

        Setting one trigger (``cron``, ``every`` or ``at``) clears the others. A change that
        leaves the spec as it is writes nothing (the generation and next run stay). Raises
        ScheduleNotFound, or InvalidSchedule naming each bad field (nothing written).
        """
        readonly = sorted(set(changes) & (STATE_FIELDS | {"id"}))
        if readonly:
            raise InvalidSchedule(
                schedule_id, [(name, "is read-only; rsched maintains it") for name in readonly]
            )

        store = await self._store(schedule_id)

        async def write() -> None:
            old = await store.load(schedule_id)
            data = old.model_dump(exclude=set(STATE_FIELDS))
            if any(changes.get(t) is not None for t in _TRIGGERS):
                data.update(dict.fromkeys(_TRIGGERS))
            data.update(changes)
            new = _parse(data)
            if new.paused == old.paused and hash_fields(new) == hash_fields(old):
                return  # the same spec: a write would only bump the generation
            await store.save(new, mode="replace", expect_gen=old.generation)

        await _until_no_conflict(write)
        return await store.load(schedule_id)

    @_redis_errors
    async def remove(self, schedule_id: str) -> None:
        """Delete a schedule and its history. Queued or running jobs are not touched."""
        await (await self._store(schedule_id)).remove(schedule_id)

    @_redis_errors
    async def pause(self, schedule_id: str, note: str | None = None) -> None:
        """Stop a schedule from firing until :meth:`resume`; ``note`` says why (for operators).

        Raises ScheduleNotFound, or ScheduleCompleted when the schedule has completed.
        """
        if note is not None:
            try:
                check_pause_note(note)
            except ValueError as exc:
                raise InvalidSchedule(schedule_id, [("pause_note", str(exc))]) from None
        try:
            await (await self._store(schedule_id)).pause(schedule_id, note)
        except ScheduleCompleted as exc:
            raise await self._why_completed(exc) from None

    @_redis_errors
    async def resume(self, schedule_id: str) -> None:
        """Let a paused schedule fire again from its first occurrence after now.

        Occurrences that came due while paused are not run. Raises ScheduleNotFound, or
        ScheduleCompleted when it has completed.
        """

        store = await self._store(schedule_id)

        async def write() -> None:
            schedule = await store.load(schedule_id)
            now = await store.time_ms()
            next_ms: int | None = None
            if schedule.max_runs is None or schedule.runs < schedule.max_runs:
                timing = Timing.of(schedule)
                next_ms = timing.planned(schedule_id, timing.next_after(now))
            try:
                await store.resume(schedule_id, schedule.generation, next_ms)
            except ScheduleCompleted as exc:
                raise ScheduleCompleted(schedule_id, exc.action, _completion(schedule)) from None

        await _until_no_conflict(write)

    @_redis_errors
    async def trigger(self, schedule_id: str) -> Fired:
        """Run one extra occurrence now, through the overlap policy; next runs do not move.

        Raises ScheduleNotFound, or ScheduleCompleted when the schedule has completed.
        """
        store = await self._store(schedule_id)
        try:
            if self._traced:
                with tracing.producing("trigger", None, schedule_id=schedule_id) as span:
                    code, execution_id = await store.trigger(
                        schedule_id,
                        traced=functools.partial(tracing.destination, span, "trigger"),
                    )
                    tracing.produced(span, execution_id, outcome=_OUTCOMES[code])
            else:
                code, execution_id = await store.trigger(schedule_id)
        except ScheduleCompleted as exc:
            raise await self._why_completed(exc) from None
        return Fired(execution_id, _OUTCOMES[code])

    # --- many at once (docs/labels.md) -------------------------------------------------------

    @_redis_errors
    async def select(
        self,
        *,
        labels: Mapping[str, str] | Iterable[str] | None = None,
        task: str | None = None,
        queue: str | None = None,
    ) -> builtins.list[str]:
        """The ids of the schedules that carry every one of ``labels`` (a dict, or ``"k=v"``
        texts) and have ``task`` and ``queue`` when given, sorted: what to hand to
        :meth:`pause_many` and its kin. Labels are found through their index (milliseconds
        at any size); ``task`` or ``queue`` alone read every schedule's two fields (~0.3 s at
        100k). Raises InvalidArgument for a bad filter or none at all."""
        pairs = bulk_actions.check_filter(labels, task, queue)
        return await select_ids(await self._partitions(), pairs, task=task, queue=queue)

    @_redis_errors
    async def select_jobs(
        self,
        *,
        labels: Mapping[str, str] | Iterable[str] | None = None,
        task: str | None = None,
        queue: str | None = None,
    ) -> builtins.list[str]:
        """The execution ids of the jobs that wait, are delayed or run (:meth:`jobs`) with
        every one of ``labels`` and of ``task`` and ``queue`` when given, in the order
        :meth:`jobs` lists them: what to hand to :meth:`cancel_many`. A walk of the queues (no
        index): for a look at what waits, not for queues of millions. Raises InvalidArgument
        for a bad filter or none."""
        pairs = set(bulk_actions.check_filter(labels, task, queue))
        found = (
            j.execution_id
            for j in await self._every_job(queue, None)
            if (task is None or j.task == task) and _carries(j, pairs)
        )
        return builtins.list(dict.fromkeys(found))

    @_redis_errors
    async def pause_many(self, ids: Iterable[str], note: str | None = None) -> BulkResult:
        """Pause each schedule of ``ids`` as :meth:`pause`; outcome per id: ``paused``,
        ``not_found`` or ``completed``. Raises InvalidArgument for a malformed id (nothing
        done)."""
        checked = bulk_actions.check_ids(ids)

        async def one(sid: str) -> str:
            await self.pause(sid, note)
            return "paused"

        return await bulk_actions.each_id(checked, one)

    @_redis_errors
    async def resume_many(self, ids: Iterable[str]) -> BulkResult:
        """Resume each schedule of ``ids`` as :meth:`resume`; outcome per id: ``resumed``,
        ``not_found`` or ``completed``."""
        checked = bulk_actions.check_ids(ids)

        async def one(sid: str) -> str:
            await self.resume(sid)
            return "resumed"

        return await bulk_actions.each_id(checked, one)

    @_redis_errors
    async def remove_many(self, ids: Iterable[str]) -> BulkResult:
        """Remove each schedule of ``ids`` as :meth:`remove`; outcome per id: ``removed`` or
        ``not_found``."""
        checked = bulk_actions.check_ids(ids)

        async def one(sid: str) -> str:
            await self.remove(sid)
            return "removed"

        return await bulk_actions.each_id(checked, one)

    @_redis_errors
    async def trigger_many(self, ids: Iterable[str]) -> BulkResult:
        """Trigger each schedule of ``ids`` as :meth:`trigger`; outcome per id: what its
        occurrence did (``fired``, ``skipped``, ``buffered``, ``debounced``), ``not_found`` or
        ``completed``."""
        checked = bulk_actions.check_ids(ids)

        async def one(sid: str) -> str:
            return (await self.trigger(sid)).status

        return await bulk_actions.each_id(checked, one)

    @_redis_errors
    async def cancel_many(self, execution_ids: Iterable[str]) -> BulkResult:
        """Cancel each job of ``execution_ids`` as :meth:`cancel`; outcome per id:
        ``cancelled`` or ``not_found`` (it neither waits nor runs)."""
        checked = bulk_actions.check_ids(execution_ids, "execution id")

        async def one(execution_id: str) -> str:
            await self.cancel(execution_id)
            return "cancelled"

        return await bulk_actions.each_id(checked, one)

    async def _why_completed(self, exc: ScheduleCompleted) -> ScheduleCompleted:
        """``exc`` with the reason the schedule completed (read on this error path only)."""
        try:
            schedule = await (await self._store(exc.schedule_id)).load(exc.schedule_id)
        except ScheduleNotFound:  # removed meanwhile
            return exc
        return ScheduleCompleted(exc.schedule_id, exc.action, _completion(schedule))

    @_redis_errors
    async def backfill(self, schedule_id: str, start: datetime, end: datetime) -> BackfillResult:
        """Run every occurrence in [start, end] (a past range), oldest first.

        The overlap policy decides whether the runs overlap, not whether they happen: with
        ``allow`` all are queued at once; otherwise the first runs now (or after the schedule's
        run in progress) and each of the others is released when the run before it ends
        (``buffered``). An ``every`` schedule's interval grid extends back before its first
        occurrence (``start_at``, or one interval after creation). An occurrence already fired
        (by the schedule or an earlier backfill) is not fired again, so calling this twice is
        safe. Naive datetimes are read in the schedule's zone. At most 1000 occurrences per
        call. Raises ScheduleNotFound, or InvalidArgument naming ``start``/``end`` when the
        range is reversed, in the future, too long or holds no occurrence.
        """

        store = await self._store(schedule_id)
        # A client that traces (docs/tracing.md): names the span's queue, and returns the
        # traceparent the jobs carry.
        traced: Callable[[str], str] | None = None

        async def write() -> BackfillResult:
            schedule = await store.load(schedule_id)
            start_ms = _to_ms(start, schedule.timezone, "start")
            end_ms = _to_ms(end, schedule.timezone, "end")
            if end_ms < start_ms:
                raise InvalidArgument("end", f"{end.isoformat()} is before start")
            now = await store.time_ms()
            if end_ms > now:
                raise InvalidArgument(
                    "end",
                    f"{end.isoformat()} is in the future (it is now "
                    f"{from_ms(now).isoformat(timespec='seconds')}); backfill fills the past only",
                )
            times = Timing.of(schedule).backfill_between(start_ms, end_ms, BACKFILL_LIMIT + 1)
            if len(times) > BACKFILL_LIMIT:
                raise InvalidArgument(
                    "start",
                    f"the range holds more than {BACKFILL_LIMIT} occurrences; "
                    "backfill it in shorter ranges",
                )
            if not times:
                raise InvalidArgument(
                    "start",
                    f"{start.isoformat()} to {end.isoformat()} holds no occurrence of "
                    f"{schedule_id!r} (within its start_at/end_at); nothing was fired",
                )
            parent = "" if traced is None else traced(schedule.queue)
            codes = await store.backfill(schedule, times, parent)
            return BackfillResult(
                {f"{schedule_id}@{t}": _OUTCOMES[c] for t, c in zip(times, codes, strict=True)}
            )

        if not self._traced:
            return await _until_no_conflict(write)
        with tracing.producing("backfill", None, schedule_id=schedule_id) as span:
            traced = functools.partial(tracing.destination, span, "backfill")
            done = await _until_no_conflict(write)
            outcomes = {status: done.count(status) for status in set(done.outcomes.values())}
            tracing.produced_many(span, len(done.outcomes), **outcomes)
        return done

    # --- reading schedules ------------------------------------------------------------------

    @_redis_errors
    async def server_time(self) -> datetime:
        """Redis' clock now (an aware UTC datetime): the time every schedule decision uses."""
        return from_ms(await self._clock.time_ms())

    @_redis_errors
    async def get(self, schedule_id: str) -> Schedule:
        """The schedule's spec and state (next_run, last_run, runs, generation, …).

        Raises ScheduleNotFound.
        """
        return await (await self._store(schedule_id)).load(schedule_id)

    @_redis_errors
    async def next_runs(self, schedule_id: str, n: int = 5) -> list[datetime]:
        """The next ``n`` fire times after now (Redis time), in the schedule's zone: when each
        occurrence fires (a ``jitter``'s delay included), those its exclusion calendars exclude
        left out.

        A paused schedule shows when it would fire if resumed now.
        """
        return [o.fires_at for o in await self.upcoming(schedule_id, n) if not o.excluded_by]

    @_redis_errors
    async def upcoming(
        self, schedule_id: str, n: int = 5, *, with_excluded: bool = False
    ) -> list[Occurrence]:
        """The schedule's next ``n`` occurrences after now (Redis time): each one's time (its
        jobs' ``scheduled_at``), when it fires (a ``jitter``'s delay after it) and, with
        ``with_excluded``, also those an exclusion calendar of its ``exclude`` keeps from
        running (``excluded_by`` names it). Times are in the schedule's zone.
        """
        _argument("n", check_page, n)
        store = await self._store(schedule_id)
        schedule = await store.load(schedule_id)
        now = await store.time_ms()  # the clock its scripts read (on a cluster, its node's)
        calendars = await (await self._partitions()).calendars.some(schedule.exclude)
        tz = resolve_timezone(schedule.timezone)
        return [
            Occurrence(from_ms(u.at, tz), from_ms(u.fires_at, tz), u.excluded_by)
            for u in upcoming(schedule, now, n, calendars, with_excluded=with_excluded)
        ]

    # --- exclusion calendars ---------------------------------------------------------------

    @_redis_errors
    async def set_calendar(
        self,
        name: str,
        *,
        dates: Iterable[str | date] = (),
        ranges: Iterable[tuple[str | date | datetime, str | date | datetime] | str] = (),
        weekdays: Iterable[str] = (),
        description: str | None = None,
    ) -> Calendar:
        """Create or replace the exclusion calendar ``name``: ``dates`` (``YYYY-MM-DD``, read in
        each schedule's own zone), ``ranges`` ((start, end) pairs or ``"A..B"``: a date bound
        covers its whole day, a datetime is a start included / end left out, read in each
        schedule's zone unless it has an offset) and ``weekdays`` (``mon`` .. ``sun``).
        Schedules name it in their ``exclude``; a change applies to each of them from its next
        occurrence on. Returns the calendar as stored. Raises InvalidCalendar naming each bad
        field (nothing written)."""
        calendar = Calendar.build(
            name, dates=dates, ranges=ranges, weekdays=weekdays, description=description
        )
        return await (await self._partitions()).calendars.put(calendar)

    @_redis_errors
    async def calendars(self) -> list[Calendar]:
        """Every exclusion calendar, by name."""
        store = (await self._partitions()).calendars
        raw = await store.raw()
        return [Calendar.from_json(name, raw[name]) for name in sorted(raw)]

    @_redis_errors
    async def calendar(self, name: str) -> Calendar:
        """The exclusion calendar ``name``; raises CalendarNotFound."""
        _argument("name", _calendar_name, name)
        return await (await self._partitions()).calendars.get(name)

    @_redis_errors
    async def remove_calendar(self, name: str) -> None:
        """Remove the exclusion calendar ``name``. Raises CalendarNotFound, or CalendarInUse
        naming the schedules whose ``exclude`` still names it (take it out of them first):
        nothing is removed then."""
        _argument("name", _calendar_name, name)
        parts = await self._partitions()
        await parts.calendars.get(name)  # CalendarNotFound before a look at every schedule
        found = await self.calendar_users(name)
        if found:
            raise CalendarInUse(name, found)
        await parts.calendars.remove(name)

    @_redis_errors
    async def calendar_users(self, name: str) -> list[str]:
        """The ids of the schedules whose ``exclude`` names the exclusion calendar ``name``,
        sorted, across every partition (for a name no calendar has: an empty list, not
        CalendarNotFound). It reads the ``exclude`` of every schedule, in pipelines, so it costs
        in proportion to the deployment's size: for a calendar's page or before a removal, not
        for a loop. Raises InvalidArgument naming ``name``."""
        _argument("name", _calendar_name, name)
        parts = await self._partitions()
        using = await parts.each(
            lambda k: schedules_using(self._redis, parts.keys.for_partition(k), name)
        )
        return sorted(sid for some in using for sid in some)

    @_redis_errors
    async def history(
        self,
        schedule_id: str,
        *,
        limit: int = 20,
        status: str | None = None,
        cursor: str | None = None,
    ) -> Page[HistoryEvent]:
        """A page of the schedule's recent events, newest first (fired, skipped, misfired, run
        outcomes), as :class:`rsched.HistoryEvent` records.

        ``status`` keeps only events of that name (``fired``, ``failed``, ``dead``, ...; see
        ``HistoryEvent.event``). Pass the page's ``cursor`` back for older events; None means
        there are no more. Raises ScheduleNotFound, or InvalidArgument naming ``status``,
        ``limit`` or ``cursor``.
        """
        _argument("limit", check_page, limit)
        if status is not None:
            _argument("status", check_history_status, status)
            status = check_history_status(status)
        store = await self._store(schedule_id)
        stored = await store.history(schedule_id, self.settings.history_limit)
        if not stored and not await store.exists(schedule_id):
            raise ScheduleNotFound(schedule_id)
        try:
            return page_events(stored, limit=limit, cursor=cursor or None, status=status)
        except ValueError as exc:
            raise InvalidArgument("cursor", str(exc)) from None

    def iter_history(
        self, schedule_id: str, *, status: str | None = None, page_size: int = 100
    ) -> AsyncIterator[HistoryEvent]:
        """Every event of :meth:`history`, newest first, read a page at a time
        (``async for event in client.iter_history(id): ...``)."""
        return every_item(
            lambda cursor: self.history(schedule_id, limit=page_size, status=status, cursor=cursor)
        )

    # --- the audit trail and the spec history -----------------------------------------------

    @_redis_errors
    async def audit(
        self,
        id: str | None = None,
        *,
        since: float | str | timedelta | datetime | None = None,
        actor: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> Page[AuditRecord]:
        """A page of the audit trail, newest first, as :class:`rsched.AuditRecord` records:
        every change of a schedule, an exclusion calendar or a limit override, who made it, when
        and from where (docs/audit.md).

        ``id`` keeps the changes of one schedule id, calendar name or limit key (a removed
        schedule's records stay for the trail's retention); ``actor`` those of one actor;
        ``since`` a duration back from now (``"1h"``, seconds, a timedelta) or an aware
        datetime. A read looks at most 10,000 records of each stream, so a rare filter may
        answer with fewer than ``limit`` and a cursor: pass ``cursor`` back for older records;
        None means there are no more. Raises InvalidArgument naming the bad argument.
        """
        _argument("limit", check_page, limit)
        if cursor:
            _argument("cursor", check_audit_cursor, cursor)
        if actor is not None:
            _argument("actor", check_actor, actor)
        want = AuditFilter(id=id, actor=actor, since_ms=await self._since_ms(since))
        parts = await self._partitions()
        try:
            return await read_audit(
                self._redis,
                audit_streams(parts.keys, id),
                want,
                limit=limit,
                cursor=cursor or None,
            )
        except ValueError as exc:
            raise InvalidArgument("cursor", str(exc)) from None

    async def _since_ms(self, since: float | str | timedelta | datetime | None) -> int | None:
        """``since`` (a duration back from now by Redis time, or an aware datetime) in ms."""
        if isinstance(since, datetime):
            if since.tzinfo is None:
                raise InvalidArgument(
                    "since", "give an aware datetime (with a tzinfo) or a duration like '1h'"
                )
            return to_ms(since)
        if since is None:
            return None
        _argument("since", parse_duration_s, since)
        return await self._clock.time_ms() - round(parse_duration_s(since) * 1000)

    def iter_audit(
        self,
        id: str | None = None,
        *,
        since: float | str | timedelta | datetime | None = None,
        actor: str | None = None,
        page_size: int = 100,
    ) -> AsyncIterator[AuditRecord]:
        """Every record of :meth:`audit`, newest first, read a page at a time."""
        return every_item(
            lambda cursor: self.audit(id, since=since, actor=actor, limit=page_size, cursor=cursor)
        )

    @_redis_errors
    async def spec_history(self, schedule_id: str) -> list[SpecVersion]:
        """The schedule's kept specs, newest first (:class:`rsched.SpecVersion`: generation,
        when, actor, source, the spec): from its first change on, the last
        ``spec_history_limit`` (20) of them, the current one first; empty for a schedule never
        changed. Raises ScheduleNotFound."""
        store = await self._store(schedule_id)
        kept = await store.spec_history(schedule_id)
        if not kept and not await store.exists(schedule_id):
            raise ScheduleNotFound(schedule_id)
        return kept

    @_redis_errors
    async def rollback(self, schedule_id: str, generation: int) -> Schedule:
        """Write the spec the schedule had at ``generation`` back, as a new generation
        (recorded in the audit trail as ``rollback``); its pause stays as it is now. Returns the
        schedule as stored. Raises ScheduleNotFound, or InvalidArgument naming ``generation``
        when that generation's spec is not kept (nothing written)."""
        _argument("generation", _generation, generation)
        store = await self._store(schedule_id)

        async def write() -> None:
            current = await store.load(schedule_id)
            kept = await store.spec_history(schedule_id)
            found = next((v for v in kept if v.generation == generation), None)
            if found is None:
                raise InvalidArgument("generation", _not_kept(schedule_id, generation, kept))
            fields = dict(found.spec)
            if current.paused:
                fields["status"] = "paused"
                if current.pause_note:
                    fields["pause_note"] = current.pause_note
            valid = self._validated(Schedule.from_hash(schedule_id, fields))
            await store.save(
                valid, mode="replace", expect_gen=current.generation, action="rollback"
            )

        await _until_no_conflict(write)
        return await store.load(schedule_id)

    # --- the runs log ---------------------------------------------------------------------------

    @_redis_errors
    async def runs(
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
        """A page of runs across every schedule and enqueued job, newest first, as
        :class:`rsched.RunRecord` records: the first page starts with the runs in progress
        (``fired``, ``started``), then the runs log's records of runs that ended or occurrences
        that were skipped.

        ``status`` (see ``RunRecord.status``), ``schedule_id``, ``task`` and ``labels`` (every
        one carried: a job enqueued with them or fired from a schedule with them,
        docs/labels.md) keep matching records; ``since`` a duration back from now (``"1h"``,
        seconds, a timedelta) or an aware datetime. With ``labels`` the records come from the
        runs log's label index; otherwise a read looks at most 10,000 records of the log. Either
        way a rare filter may answer with fewer than ``limit`` records and a cursor: pass
        ``cursor`` back for older runs; None means there are no more. Raises InvalidArgument
        naming the bad argument.
        """
        _argument("limit", check_page, limit)
        if status is not None:
            _argument("status", check_run_status, status)
        if cursor:
            _argument("cursor", check_cursor, cursor)
        since_ms = await self._since_ms(since)
        pairs = frozenset(bulk_actions.check_filter(labels, None, None)) if labels else frozenset()
        want = RunFilter(
            status=status, since_ms=since_ms, schedule_id=schedule_id, task=task, labels=pairs
        )
        parts = await self._partitions()
        try:
            if parts.count == 1:
                return await read_runs(
                    self._redis, parts.keys, want, limit=limit, cursor=cursor or None
                )
            return await runs_across(parts, want, limit=limit, cursor=cursor or None)
        except ValueError as exc:
            raise InvalidArgument("cursor", str(exc)) from None

    def iter_runs(
        self,
        *,
        status: str | None = None,
        since: float | str | timedelta | datetime | None = None,
        schedule_id: str | None = None,
        task: str | None = None,
        labels: Mapping[str, str] | Iterable[str] | None = None,
        page_size: int = 100,
    ) -> AsyncIterator[RunRecord]:
        """Every run of :meth:`runs`, newest first, read a page at a time."""
        return every_item(
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

    # --- jobs and dead letters ----------------------------------------------------------------

    @_redis_errors
    async def enqueue(
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
        """Add a one-off job outside any schedule; returns :class:`Enqueued` (its execution id,
        and whether this call created it).

        ``http`` (instead of ``task`` and ``payload``) makes a job that calls a URL: a dict
        with ``url`` and optionally ``method``, ``headers``, ``body``, ``timeout_s``, ``secret``
        and ``follow_redirects``, delivered by a worker started with ``--http``
        (docs/http-targets.md).

        ``limits`` (rsched.Limit) are held by the job while it runs, with those its task
        declares (docs/limits.md); their keys are filled from ``payload`` here.

        ``delay`` (seconds, "90s", "5m", a timedelta) holds it back that long by Redis time.
        ``priority`` (``high``, ``normal``, ``low``) picks the stream workers take it from. With
        your own ``execution_id`` the call is idempotent: while a job with that id is queued,
        delayed, running or finished less than ``dedup_window_s`` ago (default: the
        ``dedup_window_s`` setting, 24 h), nothing is added and ``created`` is False.
        With ``debounce_key`` and ``debounce`` (a duration up to a day), the calls with that key
        on that queue collapse: one job runs, with the last call's payload and options,
        ``debounce`` after the last call; ``created`` is True for the call that opened the
        window, and every call gets the window's execution id (docs/debounce.md).
        ``start_deadline`` (a duration up to 366 days; default none): a job not started that
        long after it fell due (all workers busy or down) ends ``expired`` without running.
        ``labels`` (a dict of short strings, as a schedule's) tag the job: :meth:`jobs` and
        :meth:`select_jobs` find it by them (docs/labels.md).
        Raises InvalidJob naming the bad field (task, queue, payload, delay_s, priority,
        debounce, start_deadline, http.url, …).
        """
        task, payload = target_job(task, payload, http)
        if isinstance(debounce_key, str):  # every call of a key in its partition, its job too
            parts = await self._partitions()
            partition = partition_of(debounce_key, parts.count)
            store = parts.queues[partition]
            job_id = new_execution_id(partition, parts.count)
        else:  # (a key that is not one: the store refuses it, naming it)
            job_id = execution_id or new_execution_id()
            # Every limit lives in partition 0, where a job holding one runs: placed there at
            # once (a debounced one is forwarded there when a worker reads it).
            store = (await self._partitions()).queues[0] if limits else await self._queues(job_id)
        enqueue = functools.partial(
            store.enqueue,
            task,
            payload,
            job_id=job_id,
            queue=queue,
            delay_s=delay,
            max_retries=max_retries,
            timeout_s=timeout_s,
            execution_id=execution_id,
            priority=priority,
            dedup_window_s=dedup_window_s,
            limits=limits,
            debounce_key=debounce_key,
            debounce=debounce,
            start_deadline=start_deadline,
            labels=None if labels is None else bulk_actions.as_labels(labels),
        )
        if not self._traced:
            return await enqueue()
        with tracing.producing(
            "enqueue", queue, task=task, priority=priority, debounce_key=debounce_key
        ) as span:
            done = await enqueue(traceparent=tracing.traceparent(span))
            tracing.produced(span, done.execution_id, created=done.created)
        return done

    # --- limits ------------------------------------------------------------------------------

    @_redis_errors
    async def set_limit(
        self, key: str, *, concurrency: int | None = None, rate: str | tuple[int, Any] | None = None
    ) -> int:
        """Override the numbers of a limit key at run time, for every job that holds it,
        whatever its task, schedule or enqueue declared: ``concurrency`` (0 pauses the key: no
        job of it starts) and/or ``rate`` ("100/m", or (count, period)); a number not given
        keeps the declared one. ``key`` may be a pattern where ``*`` matches any text
        (``customer:*``); a key's own override wins over a pattern's, a longer pattern over a
        shorter one. Jobs waiting on the keys it concerns are looked at again at once. Returns
        how many keys with waiting jobs it concerns. Raises InvalidArgument naming ``key``,
        ``concurrency`` or ``rate``."""
        doc = override_doc(concurrency, rate)
        _argument("key", functools.partial(check_key, pattern=True), key)
        return await (await self._partitions()).queues[0].set_limit(key, doc)

    @_redis_errors
    async def clear_limit(self, key: str) -> int:
        """Remove an operator's numbers for a key or pattern (set with :meth:`set_limit`): the
        declared numbers hold again. Returns how many keys with waiting jobs it concerns."""
        _argument("key", functools.partial(check_key, pattern=True), key)
        return await (await self._partitions()).queues[0].set_limit(key, None)

    @_redis_errors
    async def limits(
        self, *, match: str | None = None, limit: int = 1000, cursor: str | None = None
    ) -> Page[LimitInfo]:
        """A page of the limit keys in use (held by a job, waited on, or started in their rate
        window) and of the operators' overrides: per key the numbers in force, the jobs holding
        it, the jobs waiting on it and the starts in its current window. ``match`` is a glob on
        the keys (``customer:*``). Pass the page's ``cursor`` back for the next (None: the
        last). Raises InvalidArgument naming ``limit``."""
        _argument("limit", check_page, limit)
        return await (await self._partitions()).queues[0].limit_rows(cursor, limit, match)

    @_redis_errors
    async def limit(self, key: str) -> LimitInfo:
        """One limit key as :meth:`limits` lists it, in one read whatever the number of keys:
        the numbers in force, the jobs holding it, the jobs waiting on it and the starts in its
        current window (a key not in use: its numbers in force and zeros). Raises
        InvalidArgument naming ``key``."""
        _argument("key", check_key, key)
        return await (await self._partitions()).queues[0].limit_row(key)

    @_redis_errors
    async def waiting(self, key: str, *, limit: int = 100) -> list[JobInfo]:
        """The jobs waiting aside on a limit key, in the order they will start (by level, then
        arrival): at most ``limit`` (1 to 10,000). Raises InvalidArgument naming ``key`` or
        ``limit``."""
        _argument("key", check_key, key)
        _argument("limit", check_page, limit)
        found = await (await self._partitions()).queues[0].waiting_on(key, limit)
        return [j for exec_id, rec in found if (j := job_lookup.waiting_info(exec_id, rec))]

    @_redis_errors
    async def dead_letters(
        self,
        queue: str = "default",
        *,
        limit: int = 100,
        cursor: str | None = None,
        task: str | None = None,
    ) -> Page[DeadLetter]:
        """A page of the queue's dead letters, newest first (only ``task``'s when given).

        Pass the page's ``cursor`` back for the next; None means there are no more (with
        ``task``, a page may also end with a cursor that finds nothing more). Raises
        InvalidArgument naming ``limit`` or ``cursor``.
        """
        _argument("limit", check_page, limit)
        parts = await self._partitions()
        if parts.count > 1:
            try:
                return await dead_letters_across(
                    parts, queue, limit=limit, cursor=cursor, task=task
                )
            except ValueError as exc:
                raise InvalidArgument("cursor", str(exc)) from None
        store = parts.queues[0]
        cursor = cursor or None
        if task is not None:  # looking past the page for one more match could read the stream
            return Page(*await store.dead_letters(queue, limit=limit, cursor=cursor, task=task))
        # One more than asked tells whether a next page exists, so the last page says so.
        peek = min(limit + 1, PAGE_MAX)
        letters, nxt = await store.dead_letters(queue, limit=peek, cursor=cursor)
        if len(letters) > limit:
            return Page(letters[:limit], letters[limit - 1].entry_id)
        if len(letters) < peek or nxt is None:
            return Page(letters, None)
        # limit == PAGE_MAX: a full page, and whether more follow is one more read away.
        more, _ = await store.dead_letters(queue, limit=1, cursor=nxt)
        return Page(letters, nxt if more else None)

    def iter_dead_letters(
        self, queue: str = "default", *, task: str | None = None, page_size: int = 100
    ) -> AsyncIterator[DeadLetter]:
        """Every dead letter of the queue (only ``task``'s when given), newest first, read a
        page at a time."""
        return every_item(
            lambda cursor: self.dead_letters(queue, limit=page_size, cursor=cursor, task=task)
        )

    @_redis_errors
    async def dead_letter(self, queue: str, entry_id: str) -> DeadLetter:
        """One dead letter with its error and traceback excerpt; raises DeadLetterNotFound."""
        return await dead_letter_across(await self._partitions(), queue, entry_id)

    @_redis_errors
    async def requeue(
        self,
        queue: str = "default",
        entry_ids: Sequence[str] | None = None,
        *,
        task: str | None = None,
    ) -> int:
        """Put dead letters back on their queue as attempt 1 (all of them when ``entry_ids`` is
        None, only ``task``'s when given); returns how many."""
        parts = await self._partitions()
        return sum(
            await parts.each(
                lambda k: parts.queues[k].requeue(
                    queue, entry_ids_of(parts, k, entry_ids), task=task
                )
            )
        )

    @_redis_errors
    async def purge(
        self,
        queue: str = "default",
        entry_ids: Sequence[str] | None = None,
        *,
        task: str | None = None,
    ) -> int:
        """Delete dead letters for good (all, ``entry_ids``, or ``task``'s); returns how many."""
        parts = await self._partitions()
        return sum(
            await parts.each(
                lambda k: parts.queues[k].purge(queue, entry_ids_of(parts, k, entry_ids), task=task)
            )
        )

    # --- workers and jobs ---------------------------------------------------------------------

    @_redis_errors
    async def workers(self) -> list[WorkerInfo]:
        """The live workers (from the worker registry: each heartbeats every ``heartbeat_s``;
        a worker gone silent for a few heartbeats is left out), by id."""
        return await self._registry.workers()

    @_redis_errors
    async def jobs(
        self,
        *,
        queue: str | None = None,
        state: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        labels: Mapping[str, str] | Iterable[str] | None = None,
    ) -> Page[JobInfo]:
        """A page of the jobs that run, wait or are delayed (of ``queue``, in ``state``:
        ``queued``, ``running`` or ``delayed``), queue by queue: running first, then queued
        (high, normal, low level), then delayed by due time. Pass ``page.cursor`` back for the
        next page (a later page reads the earlier ones again: fine for a look, not for
        walking a queue of millions). With ``labels`` (every one must match) only the jobs
        enqueued with them: every job listed is looked at (no index: docs/labels.md). Raises
        InvalidArgument naming ``state``, ``limit``, ``queue``, ``cursor`` or ``labels``."""
        _argument("limit", check_page, limit)
        if labels is not None:
            pairs = set(bulk_actions.check_filter(labels, None, None))
            skip = int(cursor) if cursor is not None and cursor.isdigit() else 0
            found = [j for j in await self._every_job(queue, state) if _carries(j, pairs)]
            more = len(found) > skip + limit
            return Page(found[skip : skip + limit], str(skip + limit) if more else None)
        if state is not None and state not in LISTED_STATES:
            raise InvalidArgument("state", f"{state!r}: use {', '.join(LISTED_STATES)}")
        if queue is not None:
            _argument("queue", lambda q: check_name(q, "queue name"), queue)
        if cursor is not None and not (cursor.isdigit() and len(cursor) < 10):
            raise InvalidArgument("cursor", f"{cursor!r} is not a cursor of this read")
        skip = int(cursor or 0)
        parts = await self._partitions()
        queues = [queue] if queue is not None else await parts.queue_names()
        states = [state] if state is not None else list(LISTED_STATES)
        workers = await self._registry.workers()
        if parts.count == 1:
            items, more = await parts.queues[0].jobs(queues, states, limit, skip, workers)
        else:
            items, more = await jobs_across(parts, queues, states, limit, skip, workers)
        items = [
            (job_lookup.listed(job, job.execution_id, workers) or job)
            if job.state == "running"
            else job
            for job in items
        ]
        return Page(items, str(skip + limit) if more else None)

    async def _every_job(self, queue: str | None, state: str | None) -> builtins.list[JobInfo]:
        """Every job :meth:`jobs` lists, PAGE_MAX at a time."""
        found: builtins.list[JobInfo] = []
        cursor: str | None = None
        while True:
            page = await self.jobs(queue=queue, state=state, limit=PAGE_MAX, cursor=cursor)
            found += page.items
            cursor = page.cursor
            if cursor is None:
                return found

    @_redis_errors
    async def job(self, execution_id: str) -> JobInfo:
        """One job by its execution id: where it is (queued, running and on which worker,
        delayed until when) or how it ended, its priority, when its attempt started, its
        schedule's history of this execution, and its result while kept. A waiting job is
        looked for among the first 10,000 entries of each stream and delayed set, an ended one
        in the runs log's last 10,000 records, its schedule's history and its kept result
        (docs/keys.md). Raises JobNotFound."""
        _argument("execution_id", check_execution_id, execution_id)
        return await job_lookup.find(
            await self._queues(execution_id),
            await self._registry.workers(),
            self._store,
            self.settings.history_limit,
            execution_id,
        )

    @_redis_errors
    async def result(self, execution_id: str) -> Any:
        """What the job's handler returned (JSON-decoded), kept ``worker.result_ttl_s`` after
        it completed; None when it returned None, is not finished, or the result expired."""
        _argument("execution_id", check_execution_id, execution_id)
        return (await (await self._queues(execution_id)).result(execution_id))[1]

    @_redis_errors
    async def job_logs(self, execution_id: str, attempt: int | None = None) -> list[JobLogRecord]:
        """The log of a job, oldest first, as :class:`rsched.JobLogRecord` lines (time, level,
        message, attempt): what its handler wrote with ``job.log`` and the records of the logging
        module made inside it (``worker.job_log_level`` and above). Of ``attempt`` (from 1), or
        of every attempt in order (None). Each attempt keeps its newest 200 lines (64 KiB), for
        as long as the job's result (``worker.result_ttl_s``); a running job's lines arrive
        within half a second. An empty list when there are none. Raises InvalidArgument."""
        _argument("execution_id", check_execution_id, execution_id)
        if attempt is not None:
            _argument("attempt", _attempt, attempt)
        return await (await self._queues(execution_id)).job_logs(execution_id, attempt)

    @_redis_errors
    async def job_attempts(self, execution_id: str, limit: int = 50) -> list[RunRecord]:
        """The runs log's records of a job's attempts that ended, newest first (status, times,
        worker, error of each): at most ``limit``. They are looked for among the runs log's last
        10,000 records (those since the occurrence's time for a schedule's job); the attempt in
        progress is :meth:`job`'s. Raises InvalidArgument."""
        _argument("execution_id", check_execution_id, execution_id)
        _argument("limit", check_page, limit)
        store = await self._queues(execution_id)
        since, at, scheduled = execution_id.rpartition("@")
        want = RunFilter(
            execution_id=execution_id,
            since_ms=int(scheduled) if since and at and scheduled.isdigit() else None,
        )
        page = await read_runs(store.redis, store.keys, want, limit=limit, cursor="+")
        return list(page.items)

    @_redis_errors
    async def cancel(self, execution_id: str) -> str:
        """Cancel a job: a queued or delayed one is removed and recorded as cancelled; a
        running one is cancelled by its worker (its handler gets a cancellation, its outcome
        is recorded as cancelled). Returns the state it was cancelled in (``queued``,
        ``delayed``, ``running``). Raises JobNotFound when it neither waits nor runs."""
        _argument("execution_id", check_execution_id, execution_id)
        return await job_lookup.cancel(
            await self._queues(execution_id), self._registry, execution_id
        )

    # --- flows ---------------------------------------------------------------------------------

    @_redis_errors
    async def run_flow(
        self,
        flow: Node,
        *,
        queue: str = "default",
        flow_id: str | None = None,
        labels: Mapping[str, str] | Iterable[str] | None = None,
    ) -> FlowRun:
        """Run a flow of steps (``rsched.step``, ``chain``, ``group``; docs/flows.md): its steps
        with no step before them start at once, each other one when every step it follows
        ended. ``queue`` is the queue of the steps that name none. With your own ``flow_id`` the
        call is idempotent: a flow with that id exists already, nothing is written and
        ``created`` is False. A flow of many steps is written in one call per 1,000 steps, and
        starts only once all of it is written. Raises InvalidFlow naming the step and field.
        Since 0.1.0."""
        parts = await self._partitions()
        planned = flows_plan(flow, queue=queue, max_payload_bytes=self.settings.max_payload_bytes)
        tags = None if labels is None else bulk_actions.as_labels(labels)
        run = functools.partial(flow_calls.run, parts, planned, flow_id=flow_id, labels=tags)
        if not self._traced:
            return await run()
        with tracing.producing("run_flow", queue, steps=len(planned.steps)) as span:
            done = await run(traceparent=tracing.traceparent(span))
            tracing.produced(span, done.flow_id, created=done.created)
        return done

    @_redis_errors
    async def flow(self, flow_id: str) -> FlowInfo:
        """A flow with each step's task, execution id, state, attempts and result (kept
        ``result_ttl_s``; those of the first 1,000 completed steps). Raises FlowNotFound (never
        run, or expired with the runs log's retention after it ended). Since 0.1.0."""
        _argument("flow_id", check_execution_id, flow_id)
        return await flow_calls.store_of(await self._partitions(), flow_id).read_flow(flow_id)

    @_redis_errors
    async def flows(
        self, *, state: FlowState | None = None, limit: int = 50, cursor: str | None = None
    ) -> Page[FlowInfo]:
        """Flows, newest first, without their steps (:meth:`flow` reads one whole); ``state``
        (``running``, ``completed``, ``failed``, ``cancelled``) keeps those in it. Pass
        ``page.cursor`` back for the next page. Since 0.1.0."""
        _argument("limit", check_page, limit)
        return await flow_calls.listing(
            await self._partitions(), state=state, limit=limit, cursor=cursor
        )

    @_redis_errors
    async def cancel_flow(self, flow_id: str) -> bool:
        """Cancel a running flow: its steps not started never run, its running ones are asked
        to stop as :meth:`cancel` does. Returns False when it had ended already (nothing done).
        Raises FlowNotFound. Since 0.1.0."""
        _argument("flow_id", check_execution_id, flow_id)
        return await flow_calls.cancel(await self._partitions(), self._registry, flow_id)

    # --- operations overview ----------------------------------------------------------------

    @_redis_errors
    async def stats(self) -> Stats:
        """Counts for an operator: schedules by status, due backlog, queues, dead letters,
        the current leader and its lease age, and the most overdue schedule.

        ``lease_age_ms`` (time since the leader last renewed) comes from the TTL the leader
        stored beside its lease (where none is stored, this client's ``scheduler.lease_ttl_ms``
        is assumed); ``lease_left_ms`` is exact. Each queue
        also counts its ``workers``: live workers reading it (from the worker registry).
        """
        return await read_stats(
            await self._partitions(),
            self._clock,
            self._registry,
            self.settings.scheduler.lease_ttl_ms,
        )

    @_redis_errors
    async def activity(self, *, minutes: int = MINUTES, hours: int = HOURS) -> Activity:
        """What happened per minute over the last ``minutes`` (1..60) and per hour over the last
        ``hours`` (1..24), oldest first, summed over the partitions: occurrences fired and
        skipped (overlap, misfire, exclusion calendars, expired start deadlines), runs
        completed, failed (an attempt retried after a failure or timeout), dead and cancelled,
        and the fire lag of on-time fires (``ActivityPoint.p50_ms``, ``p99_ms``).

        Read from the bounded counters the scripts keep as things happen (docs/monitoring.md,
        "Activity counters"): one read per partition, whatever the number of schedules. Raises
        InvalidArgument for a number out of range.
        """
        for name, value, most in (("minutes", minutes, MINUTES), ("hours", hours, HOURS)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
                raise InvalidArgument(name, f"{value!r} is not a whole number in 1..{most}")
        parts = await self._partitions()
        every = parts.keys.every_partition()
        hashes = await parts.each(lambda k: read_activity(self._redis, every[k]))
        return activity_of(hashes, await self._clock.time_ms(), minutes=minutes, hours=hours)

    @_redis_errors
    async def queue_depth(self, queue: str, *, minutes: int = MINUTES) -> list[DepthPoint]:
        """A queue's depth per minute over the last ``minutes`` (1..60), oldest first: its
        waiting and delayed jobs as the leading schedulers sample them twice a minute (None for
        a minute with no sample: no scheduler led). One bounded read per partition. Raises
        InvalidArgument for a number out of range."""
        if isinstance(minutes, bool) or not isinstance(minutes, int) or not 1 <= minutes <= MINUTES:
            raise InvalidArgument("minutes", f"{minutes!r} is not a whole number in 1..{MINUTES}")
        parts = await self._partitions()
        every = parts.keys.every_partition()
        samples = await parts.each(lambda k: read_depth(self._redis, every[k], queue))
        return depth_of(samples, await self._clock.time_ms(), minutes=minutes)

    # --- health and events --------------------------------------------------------------------

    @_redis_errors
    async def health(
        self,
        *,
        max_due: int | None = None,
        max_overdue_s: float | str | timedelta | None = None,
        dead_letter_window_s: float | str | timedelta | None = None,
    ) -> Health:
        """Check the deployment and its schedules, from Redis alone (no scheduler needed).

        ``Health.ok`` is false when a check fails: no leader, more than ``max_due`` schedules
        due, the oldest overdue more than ``max_overdue_s`` late, a queue holding jobs with no
        live worker, a run past its timeout, a dead letter younger than
        ``dead_letter_window_s`` (0 turns that check off), or any unhealthy schedule (late,
        stuck, failing; ``Health.schedules`` lists them). The limits default to the
        ``health.*`` settings; the two durations take seconds or text ("5m"). Reads are bounded
        (docs/health.md). Raises InvalidArgument for a negative limit.
        """
        given: dict[str, float | None] = {}
        if max_due is not None:
            _argument("max_due", check_count, max_due)
            given["max_due"] = max_due
        for name, value in (
            ("max_overdue_s", max_overdue_s),
            ("dead_letter_window_s", dead_letter_window_s),
        ):
            if value is not None:
                try:
                    given[name] = parse_duration_s(value, allow_zero=True)
                except ValueError as exc:
                    raise InvalidArgument(name, str(exc)) from None
        thresholds = Thresholds.of(self.settings.health, **given)
        return await check_deployment(await self._health_readers(), thresholds)

    async def _health_readers(self) -> list[HealthReader]:
        """A health reader per partition."""
        parts = await self._partitions()
        return [HealthReader(self._redis, self.settings, k) for k in parts.keys.every_partition()]

    @_redis_errors
    async def schedule_health(self, schedule_id: str) -> ScheduleHealth:
        """One schedule's health: ok, late, stuck, failing, paused or completed, and why.
        Raises ScheduleNotFound."""
        parts = await self._partitions()
        reader = HealthReader(self._redis, self.settings, parts.of_schedule(schedule_id).keys)
        found = await reader.classify([schedule_id], await reader.now_ms())
        if not found:
            raise ScheduleNotFound(schedule_id)
        return found[0]

    @_redis_errors
    async def events(
        self, *, after: str | None = None, limit: int = 100, wait_s: float = 0
    ) -> list[HealthEvent]:
        """Events of the events stream, oldest first: the newest ``limit`` ones, or up to
        ``limit`` after the event id ``after``. With ``wait_s`` > 0 and ``after`` given (``$``
        for "from now on"), waits that long for one when there is none yet."""
        _argument("limit", check_page, limit)
        if after is not None and wait_s > 0:
            # A blocking read must end well before the socket timeout, or it reads as a failure.
            most_ms = int(self.settings.socket_timeout_s * 1000) - BLOCK_MARGIN_MS
            block_ms = max(1, min(int(wait_s * 1000), most_ms))
            return await self._events.wait(after, block_ms=block_ms, limit=limit)
        if after == "$":
            return []
        return await self._events.read(after=after, limit=limit)

    # --- listing (last: the method name shadows the builtin in the class body) -----------

    def iter_schedules(
        self,
        *,
        queue: str | None = None,
        task: str | None = None,
        paused: bool | None = None,
        id_prefix: str | None = None,
        labels: Mapping[str, str] | Iterable[str] | None = None,
        page_size: int = 100,
    ) -> AsyncIterator[Schedule]:
        """Every schedule of :meth:`list` (same filters and order), read a page at a time."""
        return every_item(
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

    @_redis_errors
    async def list(
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
        """One page of schedules in next-run order (paused and completed ones last), of
        ``queue``, ``task``, ``paused`` and ids starting with ``id_prefix`` when given.

        Pass the returned ``cursor`` to get the next page; None means this was the last (with
        a filter, a page may also end with a cursor that finds nothing more). Uses ranges of
        the schedules index (never KEYS), so it is cheap at any size. Like SCAN, a schedule
        that moves while you page may appear twice. With ``labels`` (a dict, or ``"k=v"``
        texts; every one must match) the schedules come from the label index instead, in id
        order (docs/labels.md).
        """
        _argument("limit", check_page, limit)
        if labels is not None:
            return await self._list_labelled(
                labels, (queue, task, paused, id_prefix), limit, cursor
            )
        pos = _decode_cursor(cursor)
        parts = await self._partitions()
        filtered = any(f is not None for f in (queue, task, paused, id_prefix))
        out: _Schedules = []
        while True:
            # One more than needed tells whether anything follows the page.
            want = max(limit - len(out) + 1, 200) if filtered else limit - len(out) + 1
            batch, hashes = await index_page(parts, pos, want)
            for (sid, score), stored in zip(batch, hashes, strict=True):
                s = Schedule.from_hash(sid, stored) if stored else None  # None: removed meanwhile
                if s is None or not (
                    (queue is None or s.queue == queue)
                    and (task is None or s.task == task)
                    and (paused is None or s.paused == paused)
                    and (id_prefix is None or s.id.startswith(id_prefix))
                ):
                    if len(out) < limit:
                        pos = (score, sid)
                    continue
                if len(out) == limit:
                    return Page(out, _encode_cursor(pos))  # another one follows
                out.append(s)
                pos = (score, sid)
            if len(batch) < want:
                return Page(out, None)
            if len(out) == limit:  # whether one matches further on is another read away
                return Page(out, _encode_cursor(pos))

    async def _list_labelled(
        self,
        labels: Mapping[str, str] | Iterable[str],
        others: tuple[str | None, str | None, bool | None, str | None],
        limit: int,
        cursor: str | None,
    ) -> Page[Schedule]:
        """:meth:`list` with labels: the matching ids in id order after ``cursor`` (the last
        id of the page before), each page's hashes read alone."""
        queue, task, paused, id_prefix = others
        pairs = bulk_actions.check_filter(labels, None, None)
        parts = await self._partitions()
        ids = [sid for sid in await select_ids(parts, pairs) if cursor is None or sid > cursor]
        if id_prefix is not None:
            ids = [sid for sid in ids if sid.startswith(id_prefix)]
        out: _Schedules = []
        for start in range(0, len(ids), limit + 1):
            chunk = ids[start : start + limit + 1]
            found = await gather_fields(parts, chunk)
            for sid, stored in zip(chunk, found, strict=True):
                s = Schedule.from_hash(sid, stored) if stored else None
                if s is None or not (
                    (queue is None or s.queue == queue)
                    and (task is None or s.task == task)
                    and (paused is None or s.paused == paused)
                ):
                    continue
                if len(out) == limit:
                    return Page(out, out[-1].id)
                out.append(s)
        return Page(out, None)


def _carries(job: JobInfo, pairs: set[str]) -> bool:
    """Whether the job carries every label ``k=v`` of ``pairs``."""
    return not pairs or pairs <= {f"{k}={v}" for k, v in job.labels.items()}


def _encode_cursor(pos: tuple[float, str] | None) -> str:
    assert pos is not None  # a full page has taken at least one item
    score, member = pos
    return f"{'inf' if math.isinf(score) else int(score)}:{member}"


def _decode_cursor(cursor: str | None) -> tuple[float, str] | None:
    if cursor is None or cursor == "":
        return None
    score, sep, member = cursor.partition(":")
    try:
        value = float(score)
    except ValueError:
        value = math.nan
    if not sep or not member or math.isnan(value):
        raise InvalidArgument(
            "cursor", f"{cursor!r} is not a cursor; pass the cursor a previous page returned"
        )
    return value, member


def _generation(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"give a generation (a whole number from 1), got {value!r}")
    return value


def _not_kept(schedule_id: str, generation: int, kept: Sequence[SpecVersion]) -> str:
    """Why a rollback to ``generation`` is refused, and what to give instead."""
    if not kept:
        return (
            f"{schedule_id!r} has no spec history (it was never changed since it was added, or "
            "spec_history_limit is 0), so generation "
            f"{generation} is not kept; change the schedule's fields directly instead"
        )
    gens = ", ".join(str(v.generation) for v in kept)
    return (
        f"generation {generation} of {schedule_id!r} is not kept; its spec history holds "
        f"generations {gens}: give one of those"
    )


def _completion(schedule: Schedule) -> str:
    """Why a completed schedule completed, for its ScheduleCompleted message."""
    if schedule.max_runs is not None and schedule.runs >= schedule.max_runs:
        return f"max_runs reached: {schedule.runs} of {schedule.max_runs}"
    if schedule.at is not None:
        return f"its one-off time {schedule.at.isoformat()} passed"
    if schedule.end_at is not None:
        return f"end_at {schedule.end_at.isoformat()} passed"
    return ""


def _parse(data: dict[str, Any]) -> Schedule:
    """Validate a spec. The payload size is checked against this deployment's limit by
    ``ScheduleStore.save``; the model's own check uses the default limit."""
    return Schedule(**data)
