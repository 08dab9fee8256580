"""Retry backoff arithmetic and job entry parsing: pure, no Redis."""

from __future__ import annotations

import random

import pytest

from rsched._core.errors import MalformedJob
from rsched._core.job import JobOptions, parse_entry, retry_delay_s


@pytest.mark.parametrize(
    ("base", "multiplier", "maximum", "attempt", "expected"),
    [
        (30, 2, 3600, 1, 30),
        (30, 2, 3600, 2, 60),
        (30, 2, 3600, 3, 120),
        (30, 2, 100, 3, 100),  # capped
        (5, 1, 3600, 7, 5),  # fixed delay
        (1, 10, 50, 400, 50),  # huge exponent does not overflow
        (0.5, 3, 3600, 3, 4.5),
    ],
)
def test_exponential_with_cap(
    base: float, multiplier: float, maximum: float, attempt: int, expected: float
) -> None:
    opts = JobOptions(
        retry_base_s=base, retry_multiplier=multiplier, retry_max_s=maximum, retry_jitter=0
    )
    assert retry_delay_s(opts, attempt) == pytest.approx(expected)


def test_jitter_spreads_within_bounds_and_never_exceeds_cap() -> None:
    opts = JobOptions(retry_base_s=10, retry_multiplier=2, retry_max_s=25, retry_jitter=0.2)
    rng = random.Random(7)
    first = [retry_delay_s(opts, 1, rng) for _ in range(500)]
    assert min(first) >= 8
    assert max(first) <= 12
    assert max(first) - min(first) > 2  # actually spread
    capped = [retry_delay_s(opts, 5, rng) for _ in range(500)]
    assert max(capped) <= 25
    assert min(capped) >= 20


def test_options_round_trip_only_non_defaults() -> None:
    assert JobOptions().encode() == "{}"
    opts = JobOptions(max_retries=0, timeout_s=2.5)
    assert JobOptions.parse(opts.encode()) == opts
    assert '"retry_base_s"' not in opts.encode()
    assert JobOptions.parse('{"max_retries":1,"future_option":3}').max_retries == 1
    carried = JobOptions(start_deadline=600.0, pause_after_failures=3)
    assert carried.encode() == '{"pause_after_failures":3,"start_deadline":600.0}'
    assert JobOptions.parse(carried.encode()) == carried


def test_only_a_first_attempt_on_its_first_delivery_has_a_start_deadline() -> None:
    fields = {**GOOD, "attempt": "1", "opts": '{"start_deadline":0.5}'}
    assert parse_entry("q", "1-0", fields).start_by_ms == 1500
    assert parse_entry("q", "1-0", {**fields, "attempt": "2"}).start_by_ms is None
    assert parse_entry("q", "1-0", fields, deliveries=2).start_by_ms is None
    assert parse_entry("q", "1-0", {**fields, "requeued": "1"}).start_by_ms is None
    assert parse_entry("q", "1-0", {**fields, "opts": "{}"}).start_by_ms is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "opts is not valid JSON"),
        ("[]", "not a JSON object"),
        ('{"timeout_s":"x"}', "opts.timeout_s is not a number"),
        ('{"retry_base_s":-1}', ">= 0"),
        ('{"timeout_s":0}', "timeout_s must be > 0"),
        ('{"start_deadline":0}', "start_deadline must be > 0"),
        ('{"pause_after_failures":"3"}', "pause_after_failures is not a number"),
    ],
)
def test_bad_options_are_malformed(text: str, message: str) -> None:
    with pytest.raises(MalformedJob, match=message):
        JobOptions.parse(text)


GOOD = {
    "execution_id": "s1@1000",
    "schedule_id": "s1",
    "task": "t",
    "payload": '{"a":1}',
    "scheduled_at": "1000",
    "fired_at": "1005",
    "attempt": "2",
    "generation": "3",
    "origin": "schedule",
    "opts": '{"max_retries":5}',
}


def test_parse_entry() -> None:
    job = parse_entry("q", "1-0", GOOD, deliveries=2)
    assert job.payload == {"a": 1}
    assert job.attempt == 2
    assert job.deliveries == 2
    assert job.generation == 3
    assert job.scheduled_at is not None
    assert job.scheduled_at.tzinfo is not None
    assert job.scheduled_at.timestamp() == 1.0
    assert job.max_retries == 5
    assert not job.is_last_attempt
    nxt = job.next_attempt_fields()
    assert dict(zip(nxt[::2], nxt[1::2], strict=True))["attempt"] == "3"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"execution_id": ""}, "missing field"),
        ({"task": None}, "missing field"),
        ({"payload": "{bad"}, "payload is not valid JSON"),
        ({"payload": "[1]"}, "payload is not a JSON object"),
        ({"attempt": "x"}, "attempt is not an integer"),
        ({"attempt": "0"}, "attempt must be >= 1"),
        ({"scheduled_at": "soon"}, "scheduled_at is not a time"),
        ({"opts": "nope"}, "opts is not valid JSON"),
        ({"schedule_id": "a b*"}, "schedule_id is not a valid id"),
    ],
)
def test_malformed_entries_name_the_field(change: dict[str, str | None], message: str) -> None:
    fields = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    with pytest.raises(MalformedJob, match=message):
        parse_entry("q", "1-0", fields)
