"""rsched: a distributed job scheduler for Python built on Redis alone."""

from rsched._client import BackfillResult, Client, Fired, Page, Stats
from rsched._errors import (
    ConfigError,
    DeadLetterNotFound,
    InvalidArgument,
    InvalidJob,
    InvalidSchedule,
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

# The public names print as rsched.X (not rsched._errors.X): where they are defined is private.
for _name in __all__:
    _value = globals()[_name]
    if isinstance(_value, type) or callable(_value):
        _value.__module__ = __name__
del _name, _value
