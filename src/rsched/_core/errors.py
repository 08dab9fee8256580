"""The one exception hierarchy of rsched: everything raised to users derives from RschedError.

Every exception class of rsched is defined here (a test checks it). The public ones are
re-exported from ``rsched``; the others are raised and caught inside rsched only.
"""

from __future__ import annotations

from collections.abc import Sequence

from rsched._core.words import words


class RschedError(Exception):
    """Base class of every error rsched raises on purpose."""


class ConfigError(RschedError):
    """Raised when a setting or the server's configuration cannot work."""


class PartitionMismatch(ConfigError):
    """Raised at start when a process is configured for another number of partitions than the
    deployment stored in Redis (``{prefix}:meta``); nothing was written."""

    def __init__(self, prefix: str, stored: int, configured: int) -> None:
        self.prefix, self.stored, self.configured = prefix, stored, configured
        super().__init__(
            f"deployment {prefix!r} has {stored} partition(s) but this process is configured "
            f"for {configured}: unset RSCHED_PARTITIONS (or --partitions) to use the stored "
            f"number, or use another RSCHED_PREFIX for a new deployment"
        )


class InvalidSchedule(RschedError, ValueError):
    """Raised when a schedule (or a change to one) fails validation; nothing was written.

    ``errors`` lists ``(field, message)`` pairs, one per problem found.
    """

    def __init__(self, schedule_id: str | None, errors: Sequence[tuple[str, str]]) -> None:
        self.schedule_id = schedule_id
        self.errors = list(errors)
        who = f"schedule {schedule_id!r}" if schedule_id else "schedule"
        w = words()
        lines = "; ".join(
            f"{w.field(field)}: {msg}" if field else msg for field, msg in self.errors
        )
        super().__init__(f"invalid {who}: {lines}")


class InvalidCalendar(RschedError, ValueError):
    """Raised when a calendar (or a calendar file) fails validation; nothing was written.

    ``errors`` lists ``(field, message)`` pairs, one per problem found (``dates[3]``,
    ``ranges[0]``, ``weekdays[1]``, ``name``; ``line 7`` for a calendar file, whose name is
    ``source``).
    """

    def __init__(
        self, name: str | None, errors: Sequence[tuple[str, str]], *, source: str | None = None
    ) -> None:
        self.name = name
        self.source = source
        self.errors = list(errors)
        if source is not None:
            who = f"calendar file {source!r}"
        else:
            who = f"calendar {name!r}" if name else "calendar"
        w = words()
        lines = "; ".join(
            f"{w.field(field)}: {msg}" if field else msg for field, msg in self.errors[:_SHOWN]
        )
        # A file of thousands of bad lines would make a message no one reads; ``errors`` has all.
        if len(self.errors) > _SHOWN:
            lines += f"; ... and {len(self.errors) - _SHOWN} more (see .errors)"
        super().__init__(f"invalid {who}: {lines}")


class InvalidSchedules(InvalidSchedule):
    """Raised by ``add_many`` / ``upsert_many`` when any entry cannot be written; nothing was.

    ``problems`` lists every problem as ``(index, schedule id or None, field, message)``:
    invalid fields, an id given twice in the call, an id that already exists (``add_many``).
    ``errors`` holds the same as ``("[index] id: field", message)`` pairs.
    """

    def __init__(self, problems: Sequence[tuple[int, str | None, str, str]], total: int) -> None:
        self.problems = list(problems)
        self.total = total
        self.schedule_id = None
        self.errors = [(_where(i, sid, f), msg) for i, sid, f, msg in self.problems]
        bad = len({i for i, *_ in self.problems})
        # The message shows the first problems; ``problems`` holds them all.
        lines = "\n".join(f"  {where}: {msg}" for where, msg in self.errors[:_SHOWN])
        if len(self.errors) > _SHOWN:
            lines += f"\n  ... and {len(self.errors) - _SHOWN} more (see .problems)"
        ValueError.__init__(
            self, f"{bad} of {total} schedule(s) invalid, nothing written:\n{lines}"
        )


_SHOWN = 50


def first_error(exc: BaseException) -> BaseException:
    """``exc``, or the first error inside it when it is an exception group (nested or not): what
    a task group of concurrent reads or writes raises, given back as itself so that callers
    translate it as they would the error of one call."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


def _where(index: int, schedule_id: str | None, field: str) -> str:
    head = f"[{index}] {schedule_id}" if schedule_id else f"[{index}]"
    return f"{head}: {field}" if field else head


class ScheduleNotFound(RschedError, KeyError):
    """Raised when a schedule id does not exist (or was removed meanwhile)."""

    def __init__(self, schedule_id: str) -> None:
        self.schedule_id = schedule_id
        super().__init__(schedule_id)

    def __str__(self) -> str:
        return f"schedule {self.schedule_id!r} does not exist"


class CalendarNotFound(RschedError, KeyError):
    """Raised when a calendar name does not exist (or was removed meanwhile)."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(name)

    def __str__(self) -> str:
        return (
            f"calendar {self.name!r} does not exist; create it first with "
            f"`rsched calendar set {self.name} ...` or Client.set_calendar({self.name!r}, ...)"
        )


class CalendarInUse(RschedError):
    """Raised when removing a calendar that schedules still name in their ``exclude``; nothing
    was removed. ``schedule_ids`` lists every such schedule."""

    def __init__(self, name: str, schedule_ids: Sequence[str]) -> None:
        self.name = name
        self.schedule_ids = list(schedule_ids)
        shown = ", ".join(repr(one) for one in self.schedule_ids[:_IN_USE_SHOWN])
        if len(self.schedule_ids) > _IN_USE_SHOWN:
            shown += f" and {len(self.schedule_ids) - _IN_USE_SHOWN} more"
        super().__init__(
            f"calendar {name!r} is in the exclude of {len(self.schedule_ids)} schedule(s) "
            f"({shown}); remove the calendar from their exclude first, then remove it"
        )


_IN_USE_SHOWN = 10


class ScheduleExists(RschedError):
    """Raised by ``add`` when a schedule with that id already exists (use ``upsert``)."""

    def __init__(self, schedule_id: str) -> None:
        self.schedule_id = schedule_id
        how = words().exists.format(id=schedule_id)
        super().__init__(f"schedule {schedule_id!r} already exists; {how}")


class ScheduleCompleted(RschedError):
    """Raised by pause, resume and trigger on a schedule that has completed (``max_runs``
    reached, its one-off ``at`` or its ``end_at`` passed); nothing was written.

    ``action`` names what was refused (pause, resume, trigger); ``reason`` says why the schedule
    completed when known.
    """

    def __init__(self, schedule_id: str, action: str = "change", reason: str = "") -> None:
        self.schedule_id = schedule_id
        self.action = action
        self.reason = reason
        why = f" ({reason})" if reason else ""
        super().__init__(f"schedule {schedule_id!r} has completed{why}; nothing to {action}")


class StateError(RschedError):
    """Raised when stored state is not what rsched wrote (a key of the wrong type, bad JSON)."""


class RedisUnavailable(RschedError):
    """Raised when Redis cannot be reached (refused, closed, or no answer within
    ``socket_timeout_s``) after the configured retries."""


class PoolExhausted(RschedError):
    """Raised when every connection of a client's pool stayed busy for ``pool_timeout_s``:
    more calls at once than ``max_connections`` can serve (Redis itself may be fine)."""


class ServerError(RschedError):
    """Raised when the server at ``redis_url`` answers but refuses what rsched asks of it; the
    message names what to change (the URL, the server, or its ACL)."""


class AccessDenied(ServerError):
    """Raised for a missing or wrong password, or an ACL user without a command or key rsched
    needs (NOAUTH, WRONGPASS, NOPERM)."""


class ReadOnlyServer(ServerError):
    """Raised when ``redis_url`` points at a read-only replica (READONLY): use the primary."""


class ServerOutOfMemory(ServerError):
    """Raised when the server is at ``maxmemory`` and refuses writes (OOM, noeviction)."""


class WrongNode(ServerError):
    """Raised when a Redis Cluster node answers MOVED/ASK: the prefix's keys live on another
    node, whose address the message gives."""


class RedisUrlMismatch(ServerError):
    """Raised when the service at ``redis_url`` is not what the URL asks for: not Redis at all,
    TLS on one side only, or a database index the server does not have."""


class WriteNotReplicated(RschedError):
    """Raised with ``durability="replicated"`` (or ``"replicated_fsync"``) when the primary
    answered a write but fewer than ``durability_replicas`` replicas confirmed it (or its fsync)
    within ``durability_timeout_ms``: the write stands on the primary, and a failover before the
    replicas catch up can lose it (docs/durability.md).

    ``op`` names the write (the script: ``upsert``, ``enqueue``, ...), ``confirmed`` how many
    replicas confirmed it, ``wanted`` how many were asked for, ``timeout_ms`` the wait.
    """

    def __init__(self, op: str, confirmed: int, wanted: int, timeout_ms: int, what: str) -> None:
        self.op = op
        self.confirmed = confirmed
        self.wanted = wanted
        self.timeout_ms = timeout_ms
        super().__init__(
            f"{op}: the primary applied the write, but only {confirmed} of {wanted} replica(s) "
            f"confirmed {what} within {timeout_ms} ms; it is kept on the primary and lost only "
            "if the primary fails before a replica copies it. Check the replicas (INFO "
            "replication), then repeat the call if it must not be lost: upsert, update, pause, "
            "resume and remove are safe to repeat, add raises ScheduleExists if the first one "
            "stood, and enqueue is safe to repeat only with your own execution_id"
        )


class Retry(RschedError):
    """Raised by a job handler to ask for another attempt after ``delay_s`` seconds.

    The attempt still counts towards the schedule's ``max_retries``; ``delay_s=None`` uses the
    schedule's backoff.
    """

    def __init__(self, delay_s: float | None = None, reason: str = "") -> None:
        self.delay_s = delay_s
        self.reason = reason
        super().__init__(reason or (f"retry in {delay_s}s" if delay_s is not None else "retry"))


class JobFailed(RschedError):
    """Raised by a built-in handler (an HTTP target's) for a failed attempt that says what
    follows it: ``retryable=False`` dead-letters the job at once (reason ``not_retryable``:
    another attempt would fail the same way); ``retry_after_s`` makes the next attempt wait at
    least that long (else the job's backoff). The attempt counts towards ``max_retries``.
    """

    def __init__(
        self, message: str, *, retryable: bool = True, retry_after_s: float | None = None
    ) -> None:
        self.retryable = retryable
        self.retry_after_s = retry_after_s
        super().__init__(message)


class HttpTargetError(JobFailed):
    """Raised by the ``rsched.http`` task when a call to a target failed: an error status
    (``status``), no answer in time, no connection, or an address the SSRF guard refuses
    (``status`` None)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = True,
        retry_after_s: float | None = None,
    ) -> None:
        self.status = status
        super().__init__(message, retryable=retryable, retry_after_s=retry_after_s)


class InvalidArgument(RschedError, ValueError):
    """Raised when an argument of a client call (a limit, a cursor, a time range) is invalid.

    ``field`` names the argument; nothing was written.
    """

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{words().argument(field)}: {message}")


class ScheduleFileError(RschedError, ValueError):
    """Raised when a schedules file is invalid or conflicts with existing schedules.

    ``errors`` lists ``(where, message)`` pairs (``where`` names the entry and field); nothing
    was applied.
    """

    def __init__(self, path: str, errors: Sequence[tuple[str, str]]) -> None:
        self.path = path
        self.errors = list(errors)
        lines = "\n".join(f"  {where}: {msg}" if where else f"  {msg}" for where, msg in errors)
        super().__init__(f"{path}: {len(self.errors)} problem(s), nothing applied:\n{lines}")


class InvalidJob(RschedError, ValueError):
    """Raised when a job to enqueue fails validation (task, queue, payload, options).

    ``field`` names the field; nothing was written.
    """

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{words().job_field(field)}: {message}")


class InvalidFlow(RschedError, ValueError):
    """Raised when a flow to run fails validation: ``field`` names the step as written
    (``steps[3]``, numbered from 1, then the option: ``steps[3].max_retries``) or ``flow``;
    nothing was written."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


class FlowNotFound(RschedError, KeyError):
    """Raised when no flow has that id (never run, or expired with the runs log's retention
    after it ended)."""

    def __init__(self, flow_id: str) -> None:
        self.flow_id = flow_id
        super().__init__(flow_id)

    def __str__(self) -> str:
        return (
            f"no flow {self.flow_id!r} (never run, or expired after it ended): "
            "rsched flows lists them"
        )


class DeadLetterNotFound(RschedError, KeyError):
    """Raised when a dead-letter entry id (or each of several, ``entry_ids``) does not exist in
    that queue's dead-letter stream."""

    def __init__(self, queue: str, entry_id: str, *more: str) -> None:
        self.queue = queue
        self.entry_id = entry_id
        self.entry_ids = [entry_id, *more]
        super().__init__(entry_id)

    def __str__(self) -> str:
        if len(self.entry_ids) > 1:
            ids = ", ".join(repr(one) for one in self.entry_ids)
            return f"dead letters {ids} do not exist in queue {self.queue!r}"
        return f"dead letter {self.entry_id!r} does not exist in queue {self.queue!r}"


class JobNotFound(RschedError, KeyError):
    """Raised when no job with that execution id waits, runs or has a kept outcome."""

    def __init__(self, execution_id: str, detail: str = "") -> None:
        self.execution_id = execution_id
        self.detail = detail
        super().__init__(execution_id)

    def __str__(self) -> str:
        return f"job {self.execution_id!r} not found" + (f": {self.detail}" if self.detail else "")


# --- internal: raised and caught inside rsched ------------------------------------------------


class Conflict(RschedError):
    """Raised when a schedule's generation moved between a read and a write (read again, retry)."""


class MalformedJob(RschedError, ValueError):
    """Raised for a stream entry that is not a job rsched can run (missing field, bad JSON, bad
    number); the worker dead-letters it as ``malformed``."""


class CronError(RschedError, ValueError):
    """Raised for a cron expression that cannot be used; the message says why and how to fix it."""


class CsrfError(RschedError):
    """A dashboard form posted without a valid CSRF token (answered 403)."""


class UsageError(RschedError):
    """Raised by the ``rsched`` command for bad command-line input found after parsing (exit 2)."""


class PartialFailure(RschedError):
    """Raised by the ``rsched`` command when some of the ids it was given failed; each failure
    was reported already, the others were done (exit 1)."""


class Unhealthy(RschedError):
    """Raised by ``rsched health`` and ``rsched monitor`` when a check failed; the report was
    printed already (exit 1)."""


class LostLease(Exception):
    """Raised inside the scheduler when the fire script rejected its fencing token: another
    scheduler leads now."""
