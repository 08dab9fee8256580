"""The table of script return codes and the one mapping from a code to an exception."""

from __future__ import annotations

import pytest

from rsched import (
    InvalidArgument,
    InvalidSchedule,
    RschedError,
    ScheduleCompleted,
    ScheduleExists,
    ScheduleNotFound,
    StateError,
)
from rsched._core.codes import Code, check, error
from rsched._core.errors import Conflict

NOT_ERRORS = {
    Code.STALE,
    Code.FIRED,
    Code.SKIPPED,
    Code.BUFFERED,
    Code.MISFIRE_SKIPPED,
    Code.OK,
    Code.LIMITED,
    Code.QUEUED,
    Code.DELAYED,
    Code.DEBOUNCED,
    Code.EXPIRED,
    Code.EXCLUDED,
    Code.NOT_LEADER,
    Code.NOT_PENDING,
    Code.SUPERSEDED,
    Code.RUNNING,
    Code.LABELS_MOVED,  # the store reads the labels again and retries
    Code.FLOW_OVER,  # the caller acts on it (a step not run, a flow cancelled before)
}


@pytest.mark.parametrize(
    ("code", "raised"),
    [
        (Code.NOT_FOUND, ScheduleNotFound),
        (Code.EXISTS, ScheduleExists),
        (Code.CONFLICT, Conflict),
        (Code.COMPLETED, ScheduleCompleted),
        (Code.NOT_DUE, InvalidArgument),
        (Code.WRONG_TYPE, StateError),
        (Code.BAD_ARGS, InvalidSchedule),
        (Code.BAD_INDEX, StateError),
    ],
)
def test_error_codes_map_to_their_exception(code: Code, raised: type[RschedError]) -> None:
    exc = error(code, script="x", schedule_id="nightly", field="end")
    assert isinstance(exc, raised)
    with pytest.raises(raised):
        check([int(code), "rest"], script="x", schedule_id="nightly")


def test_other_codes_are_returned() -> None:
    assert NOT_ERRORS | {c for c in Code if error(c, script="x", schedule_id="a")} == set(Code)
    for code in NOT_ERRORS:
        assert check(int(code), script="x") is code


def test_context_names_what_the_call_was_about() -> None:
    assert "queue 'mail'" in str(error(Code.WRONG_TYPE, script="enqueue", queue="mail"))
    assert "schedule 'a'" in str(error(Code.WRONG_TYPE, script="remove", schedule_id="a"))
    bad_args = error(Code.BAD_ARGS, script="complete", queue="mail")
    assert isinstance(bad_args, StateError)
    assert "complete" in str(bad_args)
