"""Jobs as handlers see them, dead letters as operators see them, and the retry backoff.

A job is one entry of a queue stream (written by the scheduler's fire script, by ``enqueue``,
by a retry or by a dead-letter requeue). Its fields are strings; ``parse_entry`` turns them
into a :class:`Job` or says precisely why it cannot (the worker dead-letters it as malformed).
"""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from rsched._core.errors import InvalidArgument, InvalidJob, JobFailed, MalformedJob
from rsched._core.job_logs import (
    LEVELS,
    MESSAGE_MAX_CHARS,
    NOTE_MAX_CHARS,
    JobJournal,
    check_fraction,
    cut,
)
from rsched._core.limits import JobLimit
from rsched._core.rules import NAME_RE, Priority, check_option, check_retry_window

#: One entry of a stream: (entry id, fields).
Entry = tuple[str, dict[str, str]]
#: One stream of a queue: (queue name, priority level).
Lane = tuple[str, Priority]

DEFAULT_MAX_RETRIES = 3
DEFAULT_RETRY_BASE_S = 30.0
DEFAULT_RETRY_MULTIPLIER = 2.0
DEFAULT_RETRY_MAX_S = 3600.0
DEFAULT_RETRY_JITTER = 0.2
DEFAULT_TIMEOUT_S = 3600.0

#: A job's retry, timeout and start deadline settings: the ``opts`` of a job entry and of a
#: schedule's hash.
OPTION_NAMES = frozenset(
    {
        "max_retries", "retry_base_s", "retry_multiplier", "retry_max_s", "retry_jitter",
        "timeout_s", "start_deadline",
    }
)  # fmt: skip
#: What ``opts`` carries besides the options: a schedule's job says its schedule pauses after
#: failed runs (the scripts that record the run's end then count it; the number they compare
#: with is the schedule's own field, read when counting).
CARRIED_NAMES = OPTION_NAMES | {"pause_after_failures"}
_WHOLE = frozenset({"max_retries", "pause_after_failures"})


@dataclass(frozen=True, slots=True)
class JobOptions:
    """Retry, timeout and start deadline settings a job carries (the schedule's, or those given
    to enqueue). ``start_deadline`` (seconds, None: none) is how long after its scheduled time
    the job's first attempt may still start; ``pause_after_failures`` is its schedule's (set by
    the schedule only: it says the job's end is counted, see Schedule)."""

    max_retries: int = DEFAULT_MAX_RETRIES
    retry_base_s: float = DEFAULT_RETRY_BASE_S
    retry_multiplier: float = DEFAULT_RETRY_MULTIPLIER
    retry_max_s: float = DEFAULT_RETRY_MAX_S
    retry_jitter: float = DEFAULT_RETRY_JITTER
    timeout_s: float = DEFAULT_TIMEOUT_S
    start_deadline: float | None = None
    pause_after_failures: int | None = None

    @classmethod
    def checked(cls, **given: object) -> JobOptions:
        """Options given by a user (absent or None: the default), checked by the rules of
        rsched._core.rules; raises InvalidJob naming the option."""
        values: dict[str, float | None] = {}
        for name in sorted(OPTION_NAMES):
            value = given.get(name)
            if value is not None:
                try:
                    values[name] = check_option(name, value)
                except ValueError as exc:
                    raise InvalidJob(name, str(exc)) from None
        options = cls(**values)  # type: ignore[arg-type]
        try:
            check_retry_window(options.retry_base_s, options.retry_max_s)
        except ValueError as exc:
            raise InvalidJob("retry_max_s", str(exc)) from None
        return options

    @classmethod
    def parse(cls, text: str | None) -> JobOptions:
        """Read the ``opts`` field of a job entry or a schedule's hash (a JSON object of the
        non-default settings only); raises MalformedJob naming the option."""
        if not text or text == "{}":
            return _DEFAULT_OPTIONS
        try:
            raw = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise MalformedJob(f"opts is not valid JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise MalformedJob("opts is not a JSON object")
        values: dict[str, Any] = {}
        for name, value in raw.items():
            if name not in CARRIED_NAMES:
                continue  # an option of a newer rsched: ignore rather than refuse the job
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise MalformedJob(f"opts.{name} is not a number: {value!r}")
            if not math.isfinite(value) or value < 0:
                raise MalformedJob(f"opts.{name} must be a finite number >= 0: {value!r}")
            values[name] = int(value) if name in _WHOLE else float(value)
        for name in ("timeout_s", "start_deadline", "pause_after_failures"):
            if values.get(name) == 0:
                raise MalformedJob(f"opts.{name} must be > 0")
        return cls(**values)

    def encode(self) -> str:
        """The ``opts`` field: only the settings that differ from their default."""
        diff = {
            name: getattr(self, name)
            for name in _ENCODED
            if getattr(self, name) != getattr(_DEFAULT_OPTIONS, name)
        }
        return orjson.dumps(diff).decode()


_DEFAULT_OPTIONS = JobOptions()
_ENCODED = sorted(CARRIED_NAMES)


def retry_delay_s(opts: JobOptions, attempt: int, rng: random.Random | None = None) -> float:
    """Delay before the attempt after ``attempt`` (1-based) failed.

    ``retry_base_s × retry_multiplier^(attempt-1)``, capped at ``retry_max_s``, then spread by
    ± ``retry_jitter`` (a fraction) so that jobs failing together do not retry together; the
    result never exceeds ``retry_max_s``. ``retry_multiplier=1`` gives a fixed delay.
    """
    exponent = max(0, attempt - 1)
    try:
        delay = opts.retry_base_s * opts.retry_multiplier**exponent
    except OverflowError:
        delay = math.inf
    delay = min(delay, opts.retry_max_s)
    if opts.retry_jitter > 0:
        spread = (rng or random).uniform(-opts.retry_jitter, opts.retry_jitter)
        delay *= 1 + spread
    return max(0.0, min(delay, opts.retry_max_s))


@dataclass(frozen=True, slots=True)
class Enqueued:
    """What ``enqueue`` did: the job's execution id, and whether this call added it
    (``created=False``: a job with that execution id was already queued, delayed, running or
    finished inside the dedup window, and nothing was added). With a debounce key, the window's
    job: ``created`` is True for the call that opened the window and False for a call that
    joined it (the job then has that call's payload and options, and falls due later)."""

    execution_id: str
    created: bool


@dataclass(frozen=True, slots=True)
class Job:
    """One delivery of a fired occurrence or an enqueued job, as passed to a handler.

    ``attempt`` starts at 1 and grows with each retry; ``deliveries`` counts how often this
    attempt's entry was handed to a worker (more than 1 after a worker died mid-run).
    ``scheduled_at`` is the occurrence's time (for an enqueued job, when it became due) and
    ``fired_at`` when it was written to the queue; both are aware UTC datetimes.
    ``priority`` is the level of the stream the job was read from (``high``, ``normal``,
    ``low``); its retries keep it. ``partition`` is the deployment partition of that stream
    (0 in a deployment of one partition): the job's outcome is recorded there.
    """

    execution_id: str
    task: str
    queue: str
    payload: dict[str, Any] = field(default_factory=dict)
    schedule_id: str | None = None
    scheduled_ms: int | None = None
    attempt: int = 1
    fired_ms: int | None = None
    origin: str = "enqueue"
    generation: int | None = None
    entry_id: str = ""
    deliveries: int = 1
    options: JobOptions = _DEFAULT_OPTIONS
    priority: Priority = "normal"
    fields: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    partition: int = 0
    # The limits it holds while it runs (the task's, filled from the payload, and its own).
    limits: tuple[JobLimit, ...] = ()
    # The partition of its schedule when that is not ``partition``: a schedule's job holding
    # limits runs from partition 0's stream, its schedule's history stays in its own.
    home: int | None = None
    # Set for sync handlers (threads cannot be cancelled): see should_stop.
    stop_event: threading.Event | None = field(default=None, repr=False, compare=False)
    # Set by the worker that runs it: where set_progress and log go (None: nowhere).
    journal: JobJournal | None = field(default=None, repr=False, compare=False)

    def set_progress(self, fraction: float, note: str | None = None) -> None:
        """Report how far the handler got: ``fraction`` from 0 to 1 and an optional ``note``
        (cut to 500 characters). Readers see the latest (``Client.job(id).progress``, ``rsched
        job ID``, the dashboard). Callable from async and sync handlers; it never blocks and
        never fails the job (the worker writes it in the background, a few times a second).
        Raises InvalidArgument for a fraction out of range. Since 0.1.0."""
        try:
            value = check_fraction(fraction)
        except ValueError as exc:
            raise InvalidArgument("fraction", str(exc)) from None
        if note is not None and not isinstance(note, str):
            raise InvalidArgument("note", f"give a string or None, not {type(note).__name__}")
        if self.journal is not None:
            self.journal.progress(self, value, cut(note or "", NOTE_MAX_CHARS))

    def log(self, message: str, level: str = "info") -> None:
        """Add a line to this attempt's log (``Client.job_logs``, ``rsched job ID --logs``, the
        dashboard's job page); ``level`` is ``debug``, ``info``, ``warning``, ``error`` or
        ``critical``. Records of the ``logging`` module made inside the handler are kept the
        same way. The log keeps the newest 200 lines (64 KiB) of each attempt, a message is cut
        to 8,192 characters. Never blocks, never fails the job. Since 0.1.0."""
        if level not in LEVELS:
            raise InvalidArgument("level", f"give one of {', '.join(LEVELS)}, not {level!r}")
        if self.journal is not None:
            self.journal.line(self, level, cut(str(message), MESSAGE_MAX_CHARS))

    @property
    def should_stop(self) -> bool:
        """For a sync handler: True once the worker gave up on this run (timeout,
        cancel_previous, shutdown). A long loop should check it and return; ``stop_event.wait(s)``
        is a sleep that ends early. Always False for async handlers: they are cancelled."""
        return self.stop_event is not None and self.stop_event.is_set()

    @property
    def scheduled_at(self) -> datetime | None:
        """When the occurrence was due (aware, UTC); for an enqueued job, when it became due."""
        return None if self.scheduled_ms is None else _dt(self.scheduled_ms)

    @property
    def fired_at(self) -> datetime | None:
        """When the job was written to its queue (Redis time, aware, UTC)."""
        return None if self.fired_ms is None else _dt(self.fired_ms)

    @property
    def flow_id(self) -> str | None:
        """The flow this job is a step of (docs/flows.md); None for any other job."""
        return self.fields.get("flow") or None

    @property
    def parent_results(self) -> list[Any]:
        """For a flow's step: the results of the steps it directly follows, in their order (a
        group's in the group's order); a failed step of ``on_failure="continue"`` is there as
        ``{"error": type, "message": ...}``, one that returned nothing as None. Empty for a
        step that follows none, and for any other job."""
        raw = self.fields.get("parents")
        if not raw:
            return []
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return []
        return value if isinstance(value, list) else []

    @property
    def max_retries(self) -> int:
        return self.options.max_retries

    @property
    def timeout_s(self) -> float:
        return self.options.timeout_s

    @property
    def start_by_ms(self) -> int | None:
        """The time (ms, Redis clock) by which this delivery must start, else it ends
        ``expired`` unrun; None when it has no start deadline. Only a first attempt on its first
        delivery has one: a retry, or an entry handed over from another worker, may have started
        before, and a requeued dead letter (``requeued``) is an operator's wish to run it."""
        deadline = self.options.start_deadline
        if (
            deadline is None
            or self.attempt != 1
            or self.deliveries != 1
            or self.scheduled_ms is None
            or "requeued" in self.fields
        ):
            return None
        return self.scheduled_ms + round(deadline * 1000)

    @property
    def is_last_attempt(self) -> bool:
        """True when a failure of this attempt goes to the dead-letter stream."""
        return self.attempt > self.options.max_retries

    def ends_with(self, error: BaseException | None) -> bool:
        """True when this attempt failing with ``error`` goes to the dead-letter stream: its
        last attempt, or a failure no other attempt would mend (JobFailed, not retryable)."""
        return self.is_last_attempt or (isinstance(error, JobFailed) and not error.retryable)

    def next_attempt_fields(self) -> list[str]:
        """The stream fields of the retry of this job (attempt + 1), as a flat list; they name
        the job's level (lua/promote.lua puts it back in that level's stream)."""
        out: list[str] = []
        for name, value in self.fields.items():
            # A retry waits on its limits as a new arrival, not in the first attempt's place.
            if name not in ("priority", "limit_order"):
                out += [name, str(self.attempt + 1) if name == "attempt" else value]
        if "attempt" not in self.fields:
            out += ["attempt", str(self.attempt + 1)]
        if self.priority != "normal":
            out += ["priority", self.priority]
        return out


def _dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _ms(value: str, name: str) -> int:
    try:
        ms = int(value)
    except ValueError:
        raise MalformedJob(f"{name} is not a time in ms: {value!r}") from None
    if not -62_135_596_800_000 < ms < 253_402_300_800_000:  # years 1-9999
        raise MalformedJob(f"{name} is out of range: {value!r}")
    return ms


def parse_entry(
    queue: str,
    entry_id: str,
    fields: Mapping[str, str],
    deliveries: int = 1,
    priority: Priority = "normal",
    partition: int = 0,
) -> Job:
    """Build the :class:`Job` of a stream entry read from the stream of ``priority`` in
    ``partition``; raises MalformedJob naming the bad field."""
    missing = [name for name in ("execution_id", "task") if not fields.get(name)]
    if missing:
        raise MalformedJob(f"missing field(s): {', '.join(missing)}")
    try:
        payload = orjson.loads(fields.get("payload") or "{}")
    except orjson.JSONDecodeError as exc:
        raise MalformedJob(f"payload is not valid JSON ({exc})") from None
    if not isinstance(payload, dict):
        raise MalformedJob(f"payload is not a JSON object (got {type(payload).__name__})")
    try:
        attempt = int(fields.get("attempt") or "1")
    except ValueError:
        raise MalformedJob(f"attempt is not an integer: {fields.get('attempt')!r}") from None
    if attempt < 1:
        raise MalformedJob(f"attempt must be >= 1: {attempt}")
    schedule_id = fields.get("schedule_id") or None
    if schedule_id is not None and not NAME_RE.match(schedule_id):
        # Its history and marker keys would be built from it: refuse rather than write there.
        raise MalformedJob(f"schedule_id is not a valid id: {schedule_id!r}")
    scheduled = fields.get("scheduled_at")
    fired = fields.get("fired_at")
    generation = fields.get("generation")
    return Job(
        execution_id=fields["execution_id"],
        task=fields["task"],
        queue=queue,
        payload=payload,
        schedule_id=schedule_id,
        scheduled_ms=_ms(scheduled, "scheduled_at") if scheduled else None,
        attempt=attempt,
        fired_ms=_ms(fired, "fired_at") if fired else None,
        origin=fields.get("origin") or "enqueue",
        generation=int(generation) if generation and generation.isdigit() else None,
        entry_id=entry_id,
        deliveries=deliveries,
        options=JobOptions.parse(fields.get("opts")),
        priority=priority,
        fields=fields,
        partition=partition,
    )


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A job in a queue's dead-letter stream, with why and when it got there.

    ``reason`` is one of ``max_retries``, ``poison`` (delivered more than ``max_deliveries``
    times), ``unknown_task``, ``malformed``, ``timeout``, ``not_retryable`` (a failure another
    attempt would not mend, such as an HTTP target's 404). ``job_fields`` holds the job's raw
    stream fields, which ``requeue`` writes back (as attempt 1).
    """

    entry_id: str
    queue: str
    execution_id: str
    task: str
    schedule_id: str | None
    payload: dict[str, Any] | None
    attempt: int
    reason: str
    error_type: str
    error_message: str
    traceback: str
    deliveries: int
    dead_at: datetime
    worker: str = ""
    job_fields: dict[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def from_entry(cls, queue: str, entry_id: str, fields: Mapping[str, str]) -> DeadLetter:
        """Read a dead-letter stream entry (tolerant: a hand-written one still lists)."""
        job_fields: dict[str, str] = {}
        try:
            flat = orjson.loads(fields.get("job") or "[]")
            if isinstance(flat, list):
                job_fields = {str(k): str(v) for k, v in zip(flat[::2], flat[1::2], strict=False)}
        except orjson.JSONDecodeError:
            pass
        payload: dict[str, Any] | None
        try:
            loaded = orjson.loads(job_fields.get("payload") or "{}")
            payload = loaded if isinstance(loaded, dict) else None
        except orjson.JSONDecodeError:
            payload = None
        dead_ms = _int(fields.get("dead_at"), default=_int(entry_id.split("-")[0]))
        return cls(
            entry_id=entry_id,
            queue=queue,
            execution_id=fields.get("execution_id") or job_fields.get("execution_id", ""),
            task=fields.get("task") or job_fields.get("task", ""),
            schedule_id=(fields.get("schedule_id") or job_fields.get("schedule_id")) or None,
            payload=payload,
            attempt=_int(job_fields.get("attempt"), default=1),
            reason=fields.get("reason", ""),
            error_type=fields.get("error_type", ""),
            error_message=fields.get("error_message", ""),
            traceback=fields.get("traceback", ""),
            deliveries=_int(fields.get("deliveries"), default=1),
            dead_at=datetime.fromtimestamp(dead_ms / 1000, UTC),
            worker=fields.get("worker", ""),
            job_fields=job_fields,
        )


def _int(text: str | None, default: int = 0) -> int:
    try:
        return int(text) if text else default
    except ValueError:
        return default
