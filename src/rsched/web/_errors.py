"""rsched's errors as HTTP answers: one table from exception class to status code.

The body is ``{"error": <class name>, "message": <the SDK's message>, "field": <field or null>}``;
the dashboard shows the same message.
"""

from __future__ import annotations

import re

from rsched import (
    DeadLetterNotFound,
    InvalidArgument,
    InvalidJob,
    InvalidSchedule,
    JobNotFound,
    PoolExhausted,
    RedisUnavailable,
    RschedError,
    ScheduleCompleted,
    ScheduleExists,
    ScheduleNotFound,
    ServerError,
    WriteNotReplicated,
)

_STATUS: tuple[tuple[type[RschedError], int], ...] = (
    (InvalidArgument, 400),
    (ScheduleNotFound, 404),
    (DeadLetterNotFound, 404),
    (JobNotFound, 404),
    (ScheduleExists, 409),
    (ScheduleCompleted, 409),
    (InvalidSchedule, 422),
    (InvalidJob, 422),
    (RedisUnavailable, 503),
    (PoolExhausted, 503),  # every connection busy: try again shortly
    (ServerError, 503),  # the server refuses rsched (password, replica, memory, cluster node)
    (WriteNotReplicated, 503),  # written on the primary, not confirmed by replicas in time
)
#: InvalidJob messages start with the field they are about ("payload: must be a dict").
_LEADING_FIELD = re.compile(r"^([a-z_]+): ")


def status_of(exc: RschedError) -> int:
    for cls, status in _STATUS:
        if isinstance(exc, cls):
            return status
    # A generation that kept moving under a read-modify-write (the SDK's Conflict).
    return 409 if type(exc).__name__ == "Conflict" else 500


def field_of(exc: RschedError) -> str | None:
    if isinstance(exc, InvalidArgument):
        return exc.field
    if isinstance(exc, InvalidSchedule):
        return exc.errors[0][0] or None if exc.errors else None
    if isinstance(exc, ScheduleNotFound | ScheduleExists | ScheduleCompleted):
        return "id"
    if isinstance(exc, DeadLetterNotFound):
        return "entry_id"
    if isinstance(exc, JobNotFound):
        return "execution_id"
    if isinstance(exc, InvalidJob):
        match = _LEADING_FIELD.match(str(exc))
        return match.group(1) if match else None
    return None


def error_body(exc: RschedError) -> dict[str, str | None]:
    return {"error": type(exc).__name__, "message": str(exc), "field": field_of(exc)}
