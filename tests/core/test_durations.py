"""Durations read alike everywhere: seconds, "90s", "1h30m", a timedelta; never a bool."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import orjson
import pytest

from rsched import InvalidSchedule, Schedule, ScheduleFileError
from rsched._client.schedules_file import load_file
from rsched._core.job import JobOptions
from rsched._core.rules import DEBOUNCE_MAX_S, parse_duration_s

ACCEPTED = [
    (300, 300.0),
    (0.25, 0.25),
    ("300", 300.0),
    ("1.5", 1.5),
    ("90s", 90.0),
    ("5m", 300.0),
    ("1h30m", 5400.0),
    ("1h 30m", 5400.0),
    (" 2d ", 172800.0),
    ("1.5d", 129600.0),
    ("250ms", 0.25),
    ("1m30s", 90.0),
    ("+5m", 300.0),
    (timedelta(minutes=90), 5400.0),
]


@pytest.mark.parametrize(("value", "seconds"), ACCEPTED)
def test_accepted_forms(value: object, seconds: float) -> None:
    assert parse_duration_s(value) == seconds


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, "True is not a duration; give seconds (300), text such as 90s, 5m, 1h30m or 2d"),
        (False, "False is not a duration"),
        (None, "None is not a duration"),
        ([5], "[5] is not a duration"),
        ("soon", "'soon' is not a duration"),
        ("5x", "'5x' is not a duration"),
        ("5m5", "'5m5' is not a duration"),
        ("--5m", "'--5m' is not a duration"),
        ("", "'' is not a duration"),
        ("-5m", "-5m is negative; give a positive duration such as 5m"),
        (-300, "-300 is negative; give a positive duration such as 5m"),
        (timedelta(seconds=-1), "is negative"),
        ("0s", "0s is zero; give a positive duration such as 5m"),
        (0, "0 is zero"),
        (float("inf"), "inf is not a finite duration"),
        ("nan", "nan is not a finite duration"),
    ],
)
def test_refused_with_the_reason(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_duration_s(value)


def test_zero_only_where_allowed() -> None:
    assert parse_duration_s("0s", allow_zero=True) == 0
    with pytest.raises(ValueError, match="negative"):
        parse_duration_s("-1s", allow_zero=True)


@pytest.mark.parametrize(
    ("field", "value", "seconds"),
    [
        (field, value, seconds)
        for field in ("every", "retry_base_s", "retry_max_s", "timeout_s", "debounce")
        for value, seconds in ACCEPTED
        if field != "debounce" or seconds <= DEBOUNCE_MAX_S
    ],
)
def test_schedule_fields_take_every_form(field: str, value: object, seconds: float) -> None:
    base: dict[str, object] = {"id": "d", "task": "t", "every": 60, "retry_base_s": 0.1}
    base["retry_max_s"] = "3d"  # at least retry_base_s
    s = Schedule(**{**base, field: value})
    assert getattr(s, field) == seconds
    if not isinstance(value, timedelta):  # a JSON document reads the same
        assert Schedule.parse(orjson.loads(orjson.dumps({**base, field: value}))) == s


def test_schedule_durations_are_stored_in_seconds() -> None:
    s = Schedule(id="d", task="t", every="1h30m", timeout_s="2m", misfire_grace_s="0s")
    assert (s.every, s.timeout_s, s.misfire_grace_s) == (5400.0, 120.0, 0.0)
    fields = s.spec_fields()
    assert fields["every"] == "5400"
    assert orjson.loads(fields["opts"]) == {"timeout_s": 120.0}
    assert Schedule.from_hash("d", {**fields, "task": "t"}).every == 5400.0


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"every": True}, "every: True is not a duration"),
        ({"every": "-5m"}, "every: -5m is negative; give a positive duration such as 5m"),
        ({"every": 0}, "every: 0 is zero"),
        ({"every": "0.0001"}, "every: 0.0001 is shorter than the shortest interval, 1ms"),
        ({"retry_base_s": False}, "retry_base_s: False is not a duration"),
        ({"retry_base_s": "-30s"}, "retry_base_s: -30s is negative"),
        ({"timeout_s": "0m"}, "timeout_s: 0m is zero"),
        ({"timeout_s": "an hour"}, "timeout_s: 'an hour' is not a duration"),
        ({"misfire_grace_s": "-1m"}, "misfire_grace_s: -1m is negative"),
        ({"retry_max_s": "10s"}, "retry_max_s must be at least retry_base_s"),
        ({"debounce": "0s"}, "debounce: 0s is zero"),
        ({"debounce": "25h"}, "debounce: 90000 s is longer than a day, the longest debounce"),
        ({"debounce": "soon"}, "debounce: 'soon' is not a duration"),
    ],
)
def test_bad_durations_name_the_field(changes: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidSchedule, match=re.escape(message)):
        Schedule(**{"id": "d", "task": "t", "every": 60, **changes})


def test_job_options_take_durations() -> None:
    opts = JobOptions.checked(timeout_s="90s", retry_base_s=timedelta(seconds=5), retry_max_s="1m")
    assert (opts.timeout_s, opts.retry_base_s, opts.retry_max_s) == (90.0, 5.0, 60.0)
    with pytest.raises(ValueError, match=re.escape("timeout_s: True is not a duration")):
        JobOptions.checked(timeout_s=True)
    with pytest.raises(ValueError, match=re.escape("retry_base_s: -5m is negative")):
        JobOptions.checked(retry_base_s="-5m")


def test_schedules_file_durations(tmp_path: Path) -> None:
    path = tmp_path / "jobs.toml"
    path.write_text(
        '[defaults]\nretry_base_s = "30s"\ntimeout_s = "10m"\n\n'
        '[[schedule]]\nid = "a"\ntask = "t"\nevery = "1h30m"\nmisfire_grace_s = "2m"\n\n'
        '[[schedule]]\nid = "b"\ntask = "t"\nevery = 90\nretry_max_s = "2h"\ndebounce = "5s"\n'
    )
    _, (a, b) = load_file(path)
    assert (a.every, a.retry_base_s, a.timeout_s, a.misfire_grace_s) == (5400, 30, 600, 120)
    assert (b.every, b.retry_max_s, b.debounce, a.debounce) == (90, 7200, 5, None)
    path.write_text(
        '[[schedule]]\nid = "a"\ntask = "t"\nevery = true\n\n'
        '[[schedule]]\nid = "b"\ntask = "t"\nevery = "-5m"\n\n'
        '[[schedule]]\nid = "c"\ntask = "t"\nevery = 60\ntimeout_s = "5x"\n'
    )
    with pytest.raises(ScheduleFileError) as info:
        load_file(path)
    text = str(info.value)
    assert "schedule[0] (id 'a').every: True is not a duration" in text
    assert (
        "schedule[1] (id 'b').every: -5m is negative; give a positive duration such as 5m" in text
    )
    assert "schedule[2] (id 'c').timeout_s: '5x' is not a duration" in text


def test_json_schema_says_durations_take_text() -> None:
    """The HTTP API's OpenAPI is built from Schedule: clients learn that "5m" is fine."""
    props = Schedule.model_json_schema()["properties"]
    for name in (
        "every",
        "retry_base_s",
        "retry_max_s",
        "timeout_s",
        "misfire_grace_s",
        "debounce",
    ):
        kinds = {option.get("type") for option in props[name]["anyOf"]}
        assert {"number", "string"} <= kinds, name
        assert "1h30m" in props[name]["description"]
