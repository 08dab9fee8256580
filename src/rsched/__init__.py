"""rsched: a distributed job scheduler for Python built on Redis alone."""

from rsched._client import BackfillResult, Client, Fired, Page, Stats
from rsched._errors import (
    ConfigError,
    DeadLetterNotFound,
    InvalidArgument,
    InvalidJob,
    InvalidSchedule,
    NotLeader,
    RedisUnavailable,
    Retry,
    RschedError,
    ScheduleExists,
    ScheduleFileError,
    ScheduleNotFound,
    StateError,
)
from rsched._job import DeadLetter, Job
from rsched._model import Schedule
from rsched._scheduler import Scheduler
from rsched._settings import Settings
from rsched._sync_client import SyncClient
from rsched._timing import next_fire_times
from rsched._worker import Worker

__version__ = "0.1.0"

__all__ = (
    "BackfillResult",
    "Client",
    "ConfigError",
    "DeadLetter",
    "DeadLetterNotFound",
    "Fired",
    "InvalidArgument",
    "InvalidJob",
    "InvalidSchedule",
    "Job",
    "NotLeader",
    "Page",
    "RedisUnavailable",
    "Retry",
    "RschedError",
    "Schedule",
    "ScheduleExists",
    "ScheduleFileError",
    "ScheduleNotFound",
    "Scheduler",
    "Settings",
    "StateError",
    "Stats",
    "SyncClient",
    "Worker",
    "__version__",
    "next_fire_times",
)
