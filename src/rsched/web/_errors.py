"""rsched's errors as HTTP answers: one table from exception class to status code, and the
words their messages use.

The body is ``{"error": <class name>, "message": <the SDK's message>, "field": <field or null>}``;
the dashboard shows the same message. Messages are built in the API's words (``HTTP_WORDS``):
JSON fields and endpoints, not SDK calls.
"""

from __future__ import annotations

from typing import Any

from rsched import (
    CalendarInUse,
    CalendarNotFound,
    DeadLetterNotFound,
    FlowNotFound,
    InvalidArgument,
    InvalidCalendar,
    InvalidFlow,
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
from rsched._core.words import Words, speak

#: The API's words (and the dashboard's, whose editor takes the same JSON): JSON fields and
#: endpoints.
HTTP_WORDS = Words(
    arguments={"schedule_id": "schedule"},
    setting='"{name}": "{value}"',
    one_trigger='"cron": "0 2 * * *", "every": 300 or "at": "2030-01-01T09:00:00Z"',
    durations='seconds (300) or text such as "90s", "5m", "1h30m" or "2d"',
    exists=(
        "use PUT /api/v1/schedules/{id} to replace its whole spec or PATCH "
        "/api/v1/schedules/{id} to change some fields"
    ),
    run_now="use POST /api/v1/jobs to run a job now",
    set_calendar="PUT /api/v1/calendars/{name} (or the dashboard's Calendars page)",
    unknown_field="check the spelling against the Schedule schema of /api/v1/openapi.json",
    json_object="a JSON object",
    limits='"limits": [{"key": "crm", "rate": "100/m"}]',
)


async def http_words() -> None:
    """Build this request's messages in the API's words (a dependency of every route)."""
    speak(HTTP_WORDS)


_STATUS: tuple[tuple[type[RschedError], int], ...] = (
    (InvalidArgument, 400),
    (ScheduleNotFound, 404),
    (DeadLetterNotFound, 404),
    (JobNotFound, 404),
    (CalendarNotFound, 404),
    (FlowNotFound, 404),
    (ScheduleExists, 409),
    (ScheduleCompleted, 409),
    (CalendarInUse, 409),
    (InvalidSchedule, 422),
    (InvalidCalendar, 422),
    (InvalidJob, 422),
    (InvalidFlow, 422),
    (RedisUnavailable, 503),
    (PoolExhausted, 503),  # every connection busy: try again shortly
    (ServerError, 503),  # the server refuses rsched (password, replica, memory, cluster node)
    (WriteNotReplicated, 503),  # written on the primary, not confirmed by replicas in time
)


def status_of(exc: RschedError) -> int:
    for cls, status in _STATUS:
        if isinstance(exc, cls):
            return status
    # A generation that kept moving under a read-modify-write (the SDK's Conflict).
    return 409 if type(exc).__name__ == "Conflict" else 500


def field_of(exc: RschedError) -> str | None:
    if isinstance(exc, InvalidArgument | InvalidJob | InvalidFlow):
        return exc.field
    if isinstance(exc, InvalidSchedule | InvalidCalendar):
        return exc.errors[0][0] or None if exc.errors else None
    if isinstance(exc, ScheduleNotFound | ScheduleExists | ScheduleCompleted):
        return "id"
    if isinstance(exc, DeadLetterNotFound):
        return "entry_id"
    if isinstance(exc, JobNotFound):
        return "execution_id"
    if isinstance(exc, FlowNotFound):
        return "flow_id"
    if isinstance(exc, CalendarNotFound | CalendarInUse):
        return "name"
    return None


def message_of(exc: RschedError) -> str:
    if isinstance(exc, CalendarNotFound):
        # The SDK's message names the CLI command and the SDK call that create one; here the
        # fix is the API's (and the dashboard's Calendars page, which writes through the same).
        return (
            f"calendar {exc.name!r} does not exist; create it first with PUT "
            f"/api/v1/calendars/{exc.name} or the dashboard's Calendars page"
        )
    if isinstance(exc, FlowNotFound):
        # The SDK's message names the CLI command that lists them; here, the API's.
        return (
            f"no flow {exc.flow_id!r} (never run, or expired after it ended): GET /api/v1/flows "
            "or the dashboard's Flows page lists them"
        )
    return str(exc)


def error_body(exc: RschedError) -> dict[str, Any]:
    """The JSON of an error; a refused calendar removal also lists every schedule still naming
    it (``schedule_ids``: the message shows the first ten)."""
    body: dict[str, Any] = {
        "error": type(exc).__name__,
        "message": message_of(exc),
        "field": field_of(exc),
    }
    if isinstance(exc, CalendarInUse):
        body["schedule_ids"] = exc.schedule_ids
    return body
