"""The schedule model: what a schedule is, how it is validated, and how it is stored in Redis.

A schedule is stored as one Redis hash holding only the spec fields that differ from their
default (so ``HGETALL`` shows what the user chose and memory stays small), plus engine state.
Times in the hash are epoch milliseconds; the payload is JSON text.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Collection, Mapping
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from rsched._core.cron import Cron
from rsched._core.errors import (
    InvalidArgument,
    InvalidFlow,
    InvalidSchedule,
    MalformedJob,
    StateError,
)
from rsched._core.flows import FLOW_TASK, Chain, Group, Step, from_doc, to_doc
from rsched._core.flows import plan as flows_plan
from rsched._core.http_target import HTTP_TASK, check_target
from rsched._core.job import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_RETRY_BASE_S,
    DEFAULT_RETRY_JITTER,
    DEFAULT_RETRY_MAX_S,
    DEFAULT_RETRY_MULTIPLIER,
    DEFAULT_TIMEOUT_S,
    OPTION_NAMES,
    JobOptions,
)
from rsched._core.limits import Limit, coerce_limits, fill_all, with_limits
from rsched._core.rules import (
    BUFFER_LIMIT_DEFAULT,
    DEFAULT_MAX_PAYLOAD_BYTES,
    MAX_PAYLOAD_BYTES,
    DstFold,
    DstGap,
    Priority,
    check_buffer_limit,
    check_debounce,
    check_dst_fold,
    check_dst_gap,
    check_exclude,
    check_jitter,
    check_labels,
    check_name,
    check_option,
    check_pause_after_failures,
    check_pause_note,
    check_retry_window,
    check_start_deadline,
    encode_payload,
    labels_text,
    parse_duration_s,
)
from rsched._core.timezones import canonical_timezone, resolve_timezone
from rsched._core.words import words

Overlap = Literal["allow", "skip", "buffer_one", "buffer_all", "cancel_previous"]
Misfire = Literal["run_once", "skip", "catch_up"]

# A plain Schedule(...) only refuses payloads no setting allows; the configured limit is enforced
# where schedules are written (ScheduleStore.save).
_payload_limit: ContextVar[float] = ContextVar("rsched_payload_limit", default=MAX_PAYLOAD_BYTES)
# Set while a stored schedule is read: a zone name an older rsched accepted (EST) still loads.
_reading_stored: ContextVar[bool] = ContextVar("rsched_reading_stored", default=False)

#: Fields given in seconds; each also takes text ("90s", "5m", "1h30m") or a timedelta.
DURATION_FIELDS = frozenset(
    {"every", "retry_base_s", "retry_max_s", "timeout_s", "misfire_grace_s", "debounce"}
    | {"start_deadline", "jitter"}
)
#: Duration fields that may be None (none).
_OPTIONAL_DURATIONS = ("every", "debounce", "start_deadline", "jitter")
#: A limit's own problem in the message of ``limits``: ``limits[1].rate: <message>``.
_LIMIT_PART = re.compile(r"^(limits\[\d+\](?:\.\w+)?|limits): (.*)$", re.DOTALL)
#: A target's own problem in the message of ``http``: ``http.url: <message>``.
_HTTP_PART = re.compile(r"^(http(?:\.[\w.-]+)?): (.*)$", re.DOTALL)
#: The built-in tasks whose target a schedule gives in a field of its own, by field.
_TARGETS = {"flow": FLOW_TASK, "http": HTTP_TASK}
#: The shortest interval ``every`` may give.
MIN_EVERY_S = 0.001
#: A schedule gives exactly one of them.
TRIGGERS = ("cron", "every", "at")

#: Fields the engine maintains; ignored when a schedule is written.
STATE_FIELDS = frozenset(
    {"generation", "next_run", "last_run", "runs", "created_at", "updated_at", "completed"}
    | {"consecutive_failures"}
)
_TIME_FIELDS = frozenset({"at", "start_at", "end_at", "next_run", "last_run"})
_TIME_FIELDS_STATE = frozenset({"created_at", "updated_at"})


def _duration_schema(schema: dict[str, Any]) -> None:
    """The JSON Schema of a duration field (the HTTP API's OpenAPI): seconds or text."""
    text = {"type": "string", "examples": ["90s", "5m", "1h30m"]}
    if schema.pop("type", None) == "number":
        schema["anyOf"] = [{"type": "number"}, text]
    else:  # every: number or null
        schema["anyOf"] = [*schema.get("anyOf", []), text]
    schema["description"] = "seconds, or text with units ms, s, m, h, d (e.g. 90s, 1h30m)"


def to_ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


def from_ms(ms: int, tz: Any = UTC) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz)


class Schedule(BaseModel):
    """A recurring (``cron`` or ``every``) or one-off (``at``) job specification plus its state.

    Exactly one of ``cron``, ``every`` and ``at`` must be given. Naive datetimes are read in
    ``timezone``, which is stored in its canonical spelling (``europe/rome`` -> ``Europe/Rome``,
    ``US/Eastern`` -> ``America/New_York``; abbreviations such as ``EST`` are refused). A
    ``cron`` schedule may choose what a daylight-saving change does to it: ``dst_gap`` for a wall
    time the spring-forward gap skips (``shift``: at the first instant after the gap; ``skip``: no
    run that day) and ``dst_fold`` for one the fall-back fold repeats (``first``, ``last`` or
    ``both`` occurrences); unset, cron's rule applies (docs/dst.md). ``every``
    (elapsed time) and ``at`` (one instant) have no wall times, so both fields leave them as
    they are, as ``buffer_limit`` leaves a schedule without ``overlap="buffer_all"``. The
    durations (``every``, ``retry_base_s``, ``retry_max_s``, ``timeout_s``, ``misfire_grace_s``,
    ``debounce``) take seconds, text such as ``"90s"``, ``"5m"``, ``"1h30m"`` or a timedelta, and
    are kept as seconds. With a ``debounce`` (up to a day), occurrences that pile up (a catch-up,
    a backfill, triggers in a row) collapse into one job that runs ``debounce`` after the last
    of them, and every run starts that much after its occurrence (docs/debounce.md). With a
    ``start_deadline`` (a duration, at most 366 days; not with ``debounce``), a job not started
    that long after its occurrence's time ends ``expired`` without running. With
    ``pause_after_failures=N`` the schedule pauses itself after N runs in a row ended
    dead-lettered (``consecutive_failures`` counts them; a completed run, a resume or an update
    starts the count again). ``exclude`` names exclusion calendars
    (:meth:`rsched.Client.set_calendar`): an occurrence that falls in one of them does not run
    (history and the runs log record it skipped, reason ``excluded``). With a ``jitter`` (a
    duration, at most 7 days) each occurrence fires a delay in [0, jitter) after its time, the
    same for every scheduler and preview (a hash of the execution id), and always before the
    next occurrence; its jobs keep the occurrence's time as ``scheduled_at``
    (docs/calendars.md). ``labels`` (a dict of up to 16 short strings, e.g. ``{"team":
    "billing"}``) tag the schedule for :meth:`rsched.Client.list` and :meth:`rsched.Client.select`
    to find it by (docs/labels.md). The state fields (``generation`` … ``consecutive_failures``) are
    filled in by rsched and ignored on write. Raises :class:`InvalidSchedule` naming each bad
    field.
    """

    model_config = ConfigDict(extra="forbid", validate_default=False, arbitrary_types_allowed=True)

    id: str
    task: str
    queue: str = "default"
    payload: dict[str, Any] = Field(default_factory=dict)
    priority: Priority = "normal"
    flow: dict[str, Any] | None = None
    http: dict[str, Any] | None = None

    cron: str | None = None
    every: float | None = Field(default=None, json_schema_extra=_duration_schema)
    at: datetime | None = None
    timezone: str = "UTC"
    dst_gap: DstGap | None = None
    dst_fold: DstFold | None = None
    exclude: tuple[str, ...] = ()
    jitter: float | None = Field(default=None, json_schema_extra=_duration_schema)
    start_at: datetime | None = None
    end_at: datetime | None = None
    max_runs: int | None = Field(default=None, ge=1)

    max_retries: int = DEFAULT_MAX_RETRIES
    retry_base_s: float = Field(DEFAULT_RETRY_BASE_S, json_schema_extra=_duration_schema)
    retry_multiplier: float = DEFAULT_RETRY_MULTIPLIER
    retry_max_s: float = Field(DEFAULT_RETRY_MAX_S, json_schema_extra=_duration_schema)
    retry_jitter: float = DEFAULT_RETRY_JITTER
    timeout_s: float = Field(DEFAULT_TIMEOUT_S, json_schema_extra=_duration_schema)
    start_deadline: float | None = Field(default=None, json_schema_extra=_duration_schema)

    overlap: Overlap = "skip"
    buffer_limit: int = BUFFER_LIMIT_DEFAULT
    misfire: Misfire = "run_once"
    catch_up_limit: int = Field(default=100, ge=1, le=10_000)
    misfire_grace_s: float = Field(
        default=60.0, ge=0, allow_inf_nan=False, json_schema_extra=_duration_schema
    )
    debounce: float | None = Field(default=None, json_schema_extra=_duration_schema)

    limits: Annotated[
        tuple[Limit, ...],
        PlainSerializer(lambda v: [lim.to_dict() for lim in v], return_type=list),
        WithJsonSchema(
            {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "key": {"type": "string"},
                        "concurrency": {"type": ["integer", "null"]},
                        "rate": {"type": ["string", "null"], "examples": ["100/m"]},
                    },
                },
            }
        ),
    ] = ()

    pause_after_failures: int | None = None

    paused: bool = False
    pause_note: str | None = None
    description: str | None = Field(default=None, max_length=2000)
    labels: dict[str, str] = Field(default_factory=dict)
    source: str | None = Field(default=None, max_length=300)

    generation: int = 0
    next_run: datetime | None = None
    last_run: datetime | None = None
    runs: int = 0
    created_at: datetime | None = None
    updated_at: datetime | None = None
    completed: bool = False
    consecutive_failures: int = 0

    def __init__(self, **data: Any) -> None:
        # pydantic routes model_validate() through a custom __init__ too, without its context,
        # so the payload limit travels in a context variable (see parse and from_hash).
        try:
            self.__pydantic_validator__.validate_python(
                data, self_instance=self, context={"max_payload_bytes": _payload_limit.get()}
            )
        except ValidationError as exc:
            raise invalid(data, exc) from None

    @model_validator(mode="before")
    @classmethod
    def _target_task(cls, data: Any) -> Any:
        # A schedule of a flow or an HTTP target names no task of its own: its job is the
        # built-in task that starts the flow or calls the URL.
        if isinstance(data, dict) and "task" not in data:
            for name, task in _TARGETS.items():
                if data.get(name) is not None:
                    return {**data, "task": task}
        return data

    @field_validator("http", mode="before")
    @classmethod
    def _http(cls, v: Any, info: ValidationInfo) -> Any:
        if v is None:
            return None
        try:
            target = check_target(v)
        except InvalidArgument as exc:
            raise ValueError(f"{exc.field}: {exc.message}") from None
        encode_payload(
            {"http": target}, (info.context or {}).get("max_payload_bytes", _payload_limit.get())
        )
        return target

    @field_validator("flow", mode="before")
    @classmethod
    def _flow(cls, v: Any, info: ValidationInfo) -> Any:
        if v is None:
            return None
        if isinstance(v, str | bytes):
            try:
                v = orjson.loads(v)
            except orjson.JSONDecodeError as exc:
                raise ValueError(f"flow is not valid JSON ({exc})") from None
        doc = v if isinstance(v, dict) else to_doc(v) if isinstance(v, Step | Chain | Group) else v
        limit = (info.context or {}).get("max_payload_bytes", _payload_limit.get())
        try:
            flows_plan(from_doc(doc), max_payload_bytes=limit)
            encode_payload({"flow": doc}, limit)
        except InvalidFlow as exc:
            raise ValueError(str(exc)) from None
        return doc

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        return check_name(v, "schedule id")

    @field_validator("task")
    @classmethod
    def _task(cls, v: str) -> str:
        return check_name(v, "task name")

    @field_validator("queue")
    @classmethod
    def _queue(cls, v: str) -> str:
        return check_name(v, "queue name")

    @field_validator(*sorted(OPTION_NAMES))
    @classmethod
    def _option(cls, v: float | None, info: ValidationInfo) -> float | None:
        return None if v is None else check_option(str(info.field_name), v)

    @field_validator("pause_after_failures", mode="before")
    @classmethod
    def _pause_after_failures(cls, v: Any) -> int | None:
        return None if v is None else check_pause_after_failures(v)

    @field_validator("buffer_limit", mode="before")
    @classmethod
    def _buffer_limit(cls, v: Any) -> int:
        return check_buffer_limit(v)

    @field_validator("limits", mode="before")
    @classmethod
    def _limits(cls, v: Any) -> tuple[Limit, ...]:
        if isinstance(v, str):  # the stored hash field
            try:
                v = orjson.loads(v)
            except orjson.JSONDecodeError as exc:
                raise ValueError(f"limits is not valid JSON ({exc})") from None
        try:
            return coerce_limits(v)
        except InvalidArgument as exc:
            raise ValueError(f"{exc.field}: {exc.message}") from None

    @field_validator("pause_note")
    @classmethod
    def _pause_note(cls, v: str | None) -> str | None:
        return None if v is None else check_pause_note(v)

    @field_validator("cron")
    @classmethod
    def _cron(cls, v: str | None) -> str | None:
        return None if v is None else Cron.parse(v).text

    @field_validator("exclude", mode="before")
    @classmethod
    def _exclude(cls, v: Any) -> tuple[str, ...]:
        return () if v is None else check_exclude(v)

    @field_validator("labels", mode="before")
    @classmethod
    def _labels(cls, v: Any) -> dict[str, str]:
        return check_labels(v)

    @field_validator("dst_gap", mode="before")
    @classmethod
    def _dst_gap(cls, v: Any) -> DstGap | None:
        return check_dst_gap(v)

    @field_validator("dst_fold", mode="before")
    @classmethod
    def _dst_fold(cls, v: Any) -> DstFold | None:
        return check_dst_fold(v)

    @field_validator(*sorted(DURATION_FIELDS), mode="before")
    @classmethod
    def _duration(cls, v: Any, info: ValidationInfo) -> Any:
        if v is None and info.field_name in _OPTIONAL_DURATIONS:
            return None
        if info.field_name == "debounce":
            return check_debounce(v)
        if info.field_name == "start_deadline":
            return check_start_deadline(v)
        if info.field_name == "jitter":
            return check_jitter(v)
        # A grace of 0 is a choice (every late occurrence is a misfire); no other one may be 0.
        seconds = parse_duration_s(v, allow_zero=info.field_name == "misfire_grace_s")
        if info.field_name == "every" and seconds < MIN_EVERY_S:
            raise ValueError(f"{seconds:g} is shorter than the shortest interval, 1ms")
        return seconds

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, v: str) -> str:
        if _reading_stored.get():
            resolve_timezone(v)
            return v
        return canonical_timezone(v)

    @field_validator("payload", mode="before")
    @classmethod
    def _payload(cls, v: Any, info: ValidationInfo) -> Any:
        if isinstance(v, str | bytes):
            try:
                v = orjson.loads(v)
            except orjson.JSONDecodeError as exc:
                raise ValueError(f"payload is not valid JSON ({exc})") from None
        encode_payload(v, (info.context or {}).get("max_payload_bytes", _payload_limit.get()))
        return v

    @model_validator(mode="after")
    def _whole(self) -> Schedule:
        triggers = [name for name in TRIGGERS if getattr(self, name) is not None]
        if len(triggers) != 1:
            raise ValueError(_one_trigger(triggers))
        tz = resolve_timezone(self.timezone)
        for name in _TIME_FIELDS | _TIME_FIELDS_STATE:
            value = getattr(self, name)
            if value is not None and value.tzinfo is None:
                object.__setattr__(self, name, value.replace(tzinfo=tz))
        if self.start_at and self.end_at and self.end_at <= self.start_at:
            w = words()
            raise ValueError(f"{w.field('end_at')} must be later than {w.field('start_at')}")
        check_retry_window(self.retry_base_s, self.retry_max_s)
        if self.flow is not None:
            _flow_alone(self)
        if self.http is not None or self.task == HTTP_TASK:
            _http_alone(self)
        if self.start_deadline is not None and self.debounce is not None:
            w = words()
            # A debounced job keeps its first occurrence's time while later ones move it on.
            raise ValueError(
                f"give {w.field('start_deadline')} or {w.field('debounce')}, not both: a debounced "
                "job starts a debounce after the last occurrence it collapses, later than its "
                "scheduled time by as long as the occurrences keep coming"
            )
        if self.limits:
            try:
                fill_all(self.limits, self.payload)
            except ValueError as exc:
                raise ValueError(f"{words().field('limits')}: {exc}") from None
        return self

    # --- storage -------------------------------------------------------------------------

    def spec_fields(self) -> dict[str, str]:
        """The hash fields of the spec: every non-default user field, as strings."""
        out: dict[str, str] = {}
        for name, default in _spec_defaults(type(self)).items():
            value = getattr(self, name)
            if name == "payload":
                if value:
                    out[name] = orjson.dumps(value).decode()
                continue
            if name in _TARGETS:  # the payload of its built-in task's job (FLOW_TASK, HTTP_TASK)
                if value is not None:
                    out["payload"] = orjson.dumps({name: value}).decode()
                continue
            if name in OPTION_NAMES:
                continue
            if value == default and name != "task":
                continue
            if name == "limits":
                out[name] = orjson.dumps([lim.to_dict() for lim in value]).decode()
                continue
            if name == "labels":  # "k=v,k=v": neither part holds '=' or ','
                out[name] = labels_text(value)
                continue
            if name == "exclude":  # calendar names never hold a comma
                out[name] = ",".join(value)
                continue
            out[name] = _encode(value)
        # The job options are one field, in the form a job entry carries them: the fire script
        # copies it into the job as it is, and reads one field instead of six.
        opts = JobOptions(
            **{name: getattr(self, name) for name in OPTION_NAMES},
            pause_after_failures=self.pause_after_failures,
        ).encode()
        # The limits travel filled in, as an enqueued job's do: the worker reads no schedule.
        opts = with_limits(opts, fill_all(self.limits, self.payload))
        if opts != "{}":
            out["opts"] = opts
        return out

    @classmethod
    def from_hash(cls, schedule_id: str, fields: dict[str, str]) -> Schedule:
        """Rebuild a schedule from its stored hash (as returned by HGETALL, decoded)."""
        if not fields:
            raise StateError(f"schedule {schedule_id!r} has no stored fields")
        data: dict[str, Any] = {"id": schedule_id}
        status = fields.get("status")
        for name, raw in fields.items():
            if name == "status":
                continue
            if name in _TIME_FIELDS or name in _TIME_FIELDS_STATE:
                data[name] = from_ms(int(raw))
            elif name == "opts":
                data.update(_decode_opts(schedule_id, raw))
            elif name not in cls.model_fields:
                continue  # a field from a newer rsched: ignore rather than fail to read
            else:
                data[name] = raw
        for name, task in _TARGETS.items():
            if data.get("task") == task and "payload" in data:
                data[name] = _stored_target(schedule_id, name, data.pop("payload"))
        data["paused"] = status == "paused"
        data["completed"] = status == "completed"
        if "updated_at" not in data and "created_at" in data:
            data["updated_at"] = data["created_at"]  # stored only once the schedule changes
        try:
            return cls._with_limit(math.inf, data, stored=True)
        except InvalidSchedule as exc:
            raise StateError(
                f"stored schedule {schedule_id!r} is invalid ({exc}); "
                "it was not written by this version of rsched or was edited by hand"
            ) from None

    @classmethod
    def parse(cls, data: dict[str, Any], *, max_payload_bytes: int | None = None) -> Schedule:
        """Validate a mapping (as from a file or JSON) into a schedule; raises InvalidSchedule."""
        limit = DEFAULT_MAX_PAYLOAD_BYTES if max_payload_bytes is None else max_payload_bytes
        return cls._with_limit(limit, data)

    @classmethod
    def _with_limit(cls, limit: float, data: dict[str, Any], *, stored: bool = False) -> Schedule:
        token = _payload_limit.set(limit)
        stored_token = _reading_stored.set(stored)
        try:
            return cls(**data)
        finally:
            _reading_stored.reset(stored_token)
            _payload_limit.reset(token)

    def public_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of spec and state (datetimes as ISO 8601 strings)."""
        return self.model_dump(mode="json")


@functools.cache
def _spec_defaults(model: type[Schedule]) -> dict[str, Any]:
    """The user fields a spec may hold, with their defaults (spec_fields leaves those out).

    Worked out once per model: pydantic's ``get_default`` inspects a default factory's
    signature on every call, which made it most of a bulk add's CPU.
    """
    return {
        name: info.get_default(call_default_factory=True)
        for name, info in model.model_fields.items()
        if name not in STATE_FIELDS and name not in ("id", "paused")
    }


def _flow_alone(schedule: Schedule) -> None:
    """A schedule of a flow gives no task, payload or limits of its own: its steps do."""
    w = words()
    if schedule.task != FLOW_TASK:
        raise ValueError(f"give {w.field('task')} or {w.field('flow')}, not both")
    if schedule.payload:
        raise ValueError(f"a flow's steps carry their payloads: give no {w.field('payload')}")
    if schedule.limits:
        raise ValueError(f"a flow's steps hold limits: give no {w.field('limits')}")


def _http_alone(schedule: Schedule) -> None:
    """A schedule of an HTTP target gives no task or payload: its job calls the URL."""
    w = words()
    if schedule.task == HTTP_TASK and schedule.http is None:
        raise ValueError(
            f"{HTTP_TASK} is the built-in task of HTTP targets: give {w.field('http')} (the "
            "URL and its options) instead"
        )
    if schedule.task != HTTP_TASK:
        raise ValueError(f"give {w.field('task')} or {w.field('http')}, not both")
    if schedule.flow is not None:
        raise ValueError(f"give {w.field('flow')} or {w.field('http')}, not both")
    if schedule.payload:
        raise ValueError(
            f"an HTTP target sends its body: give {w.field('http')}.body, not {w.field('payload')}"
        )


def _stored_target(schedule_id: str, name: str, payload: str) -> Any:
    try:
        return orjson.loads(payload)[name]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        raise StateError(
            f"stored schedule {schedule_id!r} of a {name} target has no readable {name} in its "
            "payload; it was not written by this version of rsched or was edited by hand"
        ) from None


def _decode_opts(schedule_id: str, raw: str) -> dict[str, Any]:
    try:
        opts = JobOptions.parse(raw)
    except MalformedJob as exc:
        raise StateError(
            f"stored schedule {schedule_id!r} has unreadable opts ({exc}); it was not written by "
            "this version of rsched or was edited by hand"
        ) from None
    return {name: getattr(opts, name) for name in OPTION_NAMES}


def _encode(value: Any) -> str:
    if isinstance(value, datetime):
        return str(to_ms(value))
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _one_trigger(given: list[str]) -> str:
    w = words()
    return (
        f"give exactly one trigger: {w.one_trigger} "
        f"(given: {', '.join(w.field(name) for name in given) or 'none'})"
    )


def _passed_fields(data: Mapping[str, Any], failed: Collection[str]) -> dict[str, Any] | None:
    """The fields of ``data`` outside ``failed`` (a placeholder for a failed or missing id or
    task, which every schedule needs); None when its trigger is among the failed ones."""
    if any(name in failed for name in TRIGGERS):
        return None
    rest = {k: v for k, v in data.items() if k not in failed}
    for name in ("id", "task"):
        if name in failed or name not in rest:
            rest[name] = "invalid"
    for name, task in _TARGETS.items():  # its built-in task without it: its own error
        if name in failed and rest["task"] == task:
            rest["task"] = "invalid"
    return rest


def passed_part(data: Mapping[str, Any], failed: Collection[str]) -> Schedule | None:
    """The schedule the fields of ``data`` that passed make (``failed`` left out), for the
    checks a whole schedule needs (a schedules file's ``at`` in the past) on a spec that failed;
    None when there is none (its trigger failed, or the rest fails a check across fields)."""
    rest = _passed_fields(data, failed)
    if rest is None:
        return None
    try:
        return Schedule(**rest)
    except InvalidSchedule:
        return None


def _across_fields(data: Mapping[str, Any], failed: Collection[str]) -> list[tuple[str, str]]:
    """The checks across fields (one trigger, end_at after start_at, the retry window) of a spec
    some of whose fields failed: pydantic runs them only once every field passed, and one pass
    should name every problem."""
    given = [name for name in TRIGGERS if data.get(name) is not None]
    if len(given) != 1:
        return [("", _one_trigger(given))]
    rest = _passed_fields(data, failed)
    if rest is None:
        return []
    try:
        Schedule(**rest)
    except InvalidSchedule as exc:
        return exc.errors
    return []


def invalid(data: Mapping[str, Any], exc: ValidationError) -> InvalidSchedule:
    """Translate pydantic's error into InvalidSchedule with one (field, message) per problem,
    the checks across fields included."""
    errors: list[tuple[str, str]] = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = f"unknown field; {words().unknown_field}"
        elif err["type"] == "missing":
            msg = "required"
        elif field == "limits" and (part := _LIMIT_PART.match(msg)):
            field, msg = part.group(1), part.group(2)  # the limit and its field: limits[1].rate
        elif field == "http" and (part := _HTTP_PART.match(msg)):
            field, msg = part.group(1), part.group(2)  # the target's key: http.url
        errors.append((field, msg))
    if all(err["loc"] for err in exc.errors()):  # only fields failed: the whole was not checked
        errors += _across_fields(data, {str(err["loc"][0]) for err in exc.errors()})
    schedule_id = data.get("id")
    return InvalidSchedule(schedule_id if isinstance(schedule_id, str) else None, errors)
