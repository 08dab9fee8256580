"""Every code a Lua script returns, and the one mapping from a code to the exception to raise.

Each number has one meaning in every script (docs/keys.md lists them with the scripts that
return each). A code above 0 means the script did what was asked; 0 or below means it wrote
nothing. Scripts that return a count (complete, requeue, promote) return it as a number >= 0,
or a negative code. Each script's header names the codes it returns as ``NAME=number``
(tests/store/test_lua.py checks them against this table).
"""

from __future__ import annotations

from enum import IntEnum, unique

from rsched._core.errors import (
    Conflict,
    InvalidArgument,
    InvalidSchedule,
    RschedError,
    ScheduleCompleted,
    ScheduleExists,
    ScheduleNotFound,
    StateError,
)


@unique
class Code(IntEnum):
    """A script's return code (each number means one thing in every script)."""

    # What became of one occurrence (fire, backfill, trigger: one code per occurrence).
    STALE = 0  # not fired: already fired, or its schedule is gone, paused, completed or changed
    FIRED = 1  # a job was written to the queue stream
    SKIPPED = 2  # not run: the overlap policy skipped it (the history says why)
    BUFFERED = 3  # waits in the schedule's pending set until the unfinished run ends
    MISFIRE_SKIPPED = 4  # not run: misfire policy skip (recorded in the history only)
    # Done as asked (every other script).
    OK = 5
    QUEUED = 6  # enqueue: the job is on the queue stream (the reply carries its entry id)
    DELAYED = 7  # enqueue: the job waits in the delayed set (the reply carries its due time)
    LIMITED = 8  # acquire: the job waits on a limit key (moved out of its stream)
    # Merged into an open debounce window: no job of its own, the window's job is due later.
    DEBOUNCED = 9
    # expire: the job's start deadline passed; acknowledged and recorded expired (do not run it).
    EXPIRED = 10
    # fire: not run, an exclusion calendar excludes the occurrence (history and runs log say so).
    EXCLUDED = 11
    # Nothing written.
    NOT_LEADER = -1  # the lease is not the caller's (another scheduler holds it, or none does)
    NOT_FOUND = -2  # the schedule does not exist
    CONFLICT = -3  # the schedule's generation moved since the caller read it
    COMPLETED = -4  # the schedule has completed
    NOT_DUE = -5  # the occurrence is in the future by Redis TIME
    WRONG_TYPE = -6  # a key holds another type, or a hash fields rsched did not write
    BAD_ARGS = -7  # the arguments are malformed (a bug in the caller)
    BAD_INDEX = -8  # the schedules index is not a sorted set
    EXISTS = -9  # the id is taken (add: a schedule id; enqueue: an execution id in its window)
    NOT_PENDING = -10  # the queue entry is no longer pending (already recorded, or reclaimed)
    SUPERSEDED = -11  # start: a newer run of the schedule replaced this job (do not run it)
    RUNNING = -12  # cancel: a worker holds the job (it is cancelled on that worker instead)
    # The schedule's stored labels are not those the caller named the index keys of (read again).
    LABELS_MOVED = -15
    # The flow ended (completed, failed or cancelled): flow_start does not run its step,
    # flow_cancel has nothing to cancel.
    FLOW_OVER = -16


def error(
    code: int,
    *,
    script: str,
    schedule_id: str | None = None,
    queue: str | None = None,
    field: str = "",
) -> RschedError | None:
    """The exception for an error ``code`` returned by ``script``, or None when the code is not
    an error (the caller acts on it). ``schedule_id`` or ``queue`` name what the call was about;
    ``field`` is the argument a NOT_DUE concerns; a COMPLETED names ``script`` as the refused
    action."""
    if code == Code.NOT_FOUND and schedule_id is not None:
        return ScheduleNotFound(schedule_id)
    if code == Code.EXISTS and schedule_id is not None:
        return ScheduleExists(schedule_id)
    if code == Code.CONFLICT:
        return Conflict(f"schedule {schedule_id!r} changed meanwhile; read it again")
    if code == Code.COMPLETED:
        return ScheduleCompleted(schedule_id or "?", action=script)
    if code == Code.NOT_DUE:
        return InvalidArgument(field, "an occurrence is in the future by the server's clock")
    if code == Code.WRONG_TYPE:
        return wrong_type(script=script, schedule_id=schedule_id, queue=queue)
    if code == Code.BAD_ARGS:
        if schedule_id is not None:
            return InvalidSchedule(schedule_id, [("", f"{script} refused its arguments")])
        return StateError(f"{script}: rsched sent malformed arguments")
    if code == Code.BAD_INDEX:
        return StateError(
            "the schedules index is not a sorted set; something other than rsched wrote it "
            "(inspect it with redis-cli TYPE)"
        )
    return None


def wrong_type(
    *, script: str = "", schedule_id: str | None = None, queue: str | None = None
) -> StateError:
    """The error for a key of the wrong type (WRONG_TYPE, or a WRONGTYPE reply to a read)."""
    if schedule_id is not None:
        what = f"a key of schedule {schedule_id!r} holds the wrong type of value or fields"
    elif queue is not None:
        what = f"a key of queue {queue!r} holds the wrong type of value"
    else:
        what = f"{script}: a key holds the wrong type of value"
    return StateError(f"{what}; something other than rsched wrote it (inspect it with redis-cli)")


def check(
    reply: object,
    *,
    script: str,
    schedule_id: str | None = None,
    queue: str | None = None,
    field: str = "",
) -> Code:
    """The code of a script's reply (a code, or a list that starts with one); raises the
    exception :func:`error` maps it to."""
    first = reply[0] if isinstance(reply, list) else reply
    code = Code(int(str(first)))
    exc = error(code, script=script, schedule_id=schedule_id, queue=queue, field=field)
    if exc is not None:
        raise exc
    return code
