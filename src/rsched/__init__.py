"""rsched: a distributed job scheduler for Python built on Redis alone."""

from rsched._client import Client
from rsched._errors import (
    ConfigError,
    InvalidSchedule,
    NotLeader,
    RedisUnavailable,
    Retry,
    RschedError,
    ScheduleExists,
    ScheduleNotFound,
    StateError,
)
from rsched._job import Job
from rsched._model import Schedule
from rsched._scheduler import Scheduler
from rsched._settings import Settings
from rsched._sync_client import SyncClient
from rsched._timing import next_fire_times
from rsched._worker import Worker

__version__ = "0.1.0"

__all__ = (
    "Client",
    "ConfigError",
    "InvalidSchedule",
    "Job",
    "NotLeader",
    "RedisUnavailable",
    "Retry",
    "RschedError",
    "Schedule",
    "ScheduleExists",
    "ScheduleNotFound",
    "Scheduler",
    "Settings",
    "StateError",
    "SyncClient",
    "Worker",
    "__version__",
    "next_fire_times",
)
