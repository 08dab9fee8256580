"""rsched: a distributed job scheduler for Python built on Redis alone."""

import dataclasses as _dataclasses
import typing as _typing

from rsched._client.client import BackfillResult, Client, Fired, Occurrence
from rsched._client.stats import Stats
from rsched._client.sync_client import SyncClient
from rsched._core.activity import Activity, ActivityPoint, DepthPoint
from rsched._core.audit import AuditRecord, SpecVersion
from rsched._core.bulk import BulkResult
from rsched._core.calendars import Calendar
from rsched._core.errors import (
    AccessDenied,
    CalendarInUse,
    CalendarNotFound,
    ConfigError,
    DeadLetterNotFound,
    FlowNotFound,
    InvalidArgument,
    InvalidCalendar,
    InvalidFlow,
    InvalidJob,
    InvalidSchedule,
    InvalidSchedules,
    JobNotFound,
    PartitionMismatch,
    PoolExhausted,
    ReadOnlyServer,
    RedisUnavailable,
    RedisUrlMismatch,
    Retry,
    RschedError,
    ScheduleCompleted,
    ScheduleExists,
    ScheduleFileError,
    ScheduleNotFound,
    ServerError,
    ServerOutOfMemory,
    StateError,
    WriteNotReplicated,
    WrongNode,
)
from rsched._core.flows import FlowInfo, FlowRun, FlowStep, chain, group, step
from rsched._core.health import Health, HealthProblem, ScheduleHealth
from rsched._core.history import HistoryEvent
from rsched._core.job import DeadLetter, Enqueued, Job
from rsched._core.job_logs import JobLogRecord, JobProgress
from rsched._core.limits import Limit, LimitInfo, Rate
from rsched._core.page import Page
from rsched._core.schedule import Schedule
from rsched._core.settings import Settings
from rsched._core.timing import next_fire_times
from rsched._core.workers import JobInfo, RunningJob, WorkerInfo
from rsched._scheduler.scheduler import Scheduler
from rsched._store.alerts import HealthEvent
from rsched._store.runs_log import RunRecord
from rsched._worker.worker import Worker

__version__ = "0.1.0"

__all__ = (
    "AccessDenied",
    "Activity",
    "ActivityPoint",
    "AuditRecord",
    "BackfillResult",
    "BulkResult",
    "Calendar",
    "CalendarInUse",
    "CalendarNotFound",
    "Client",
    "ConfigError",
    "DeadLetter",
    "DeadLetterNotFound",
    "DepthPoint",
    "Enqueued",
    "Fired",
    "FlowInfo",
    "FlowNotFound",
    "FlowRun",
    "FlowStep",
    "Health",
    "HealthEvent",
    "HealthProblem",
    "HistoryEvent",
    "InvalidArgument",
    "InvalidCalendar",
    "InvalidFlow",
    "InvalidJob",
    "InvalidSchedule",
    "InvalidSchedules",
    "Job",
    "JobInfo",
    "JobLogRecord",
    "JobNotFound",
    "JobProgress",
    "Limit",
    "LimitInfo",
    "Occurrence",
    "Page",
    "PartitionMismatch",
    "PoolExhausted",
    "Rate",
    "ReadOnlyServer",
    "RedisUnavailable",
    "RedisUrlMismatch",
    "Retry",
    "RschedError",
    "RunRecord",
    "RunningJob",
    "Schedule",
    "ScheduleCompleted",
    "ScheduleExists",
    "ScheduleFileError",
    "ScheduleHealth",
    "ScheduleNotFound",
    "Scheduler",
    "ServerError",
    "ServerOutOfMemory",
    "Settings",
    "SpecVersion",
    "StateError",
    "Stats",
    "SyncClient",
    "Worker",
    "WorkerInfo",
    "WriteNotReplicated",
    "WrongNode",
    "__version__",
    "chain",
    "group",
    "next_fire_times",
    "step",
)

# The public names print as rsched.X (not rsched._core.errors.X): where they are defined is private.
# A dataclass's string annotations are resolved first, in its own module: tools that read them
# later (pydantic, typing.get_type_hints) would look them up in the module __module__ names.
for _name in __all__:
    _value = globals()[_name]
    if _dataclasses.is_dataclass(_value) and isinstance(_value, type):
        _hints = _typing.get_type_hints(_value)
        _value.__annotations__.update(_hints)
        for _field in _dataclasses.fields(_value):
            _field.type = _hints[_field.name]
    if isinstance(_value, type) or callable(_value):
        _value.__module__ = __name__
del _name, _value, _hints, _field
