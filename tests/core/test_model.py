"""The schedule model: validation naming each field, and the stored hash form."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rsched import InvalidSchedule, Schedule, StateError


def fields_of(**kw: Any) -> list[str]:
    with pytest.raises(InvalidSchedule) as caught:
        Schedule(**{"id": "a", "task": "t", **kw})
    return [field for field, _ in caught.value.errors]


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"id": "", "every": 1}, "id"),
        ({"id": "a b", "every": 1}, "id"),
        ({"id": "a*", "every": 1}, "id"),
        ({"id": "x" * 201, "every": 1}, "id"),
        ({"task": "no spaces", "every": 1}, "task"),
        ({"queue": "q{1}", "every": 1}, "queue"),
        ({"cron": "0 0 30 2 *"}, "cron"),
        ({"cron": "60 * * * *"}, "cron"),
        ({"cron": "*/0 * * * *"}, "cron"),
        ({"cron": "0 0 * * * * *"}, "cron"),
        ({"cron": "@fortnightly"}, "cron"),
        ({"every": 0}, "every"),
        ({"every": -1}, "every"),
        ({"every": float("inf")}, "every"),
        ({"every": 1, "timezone": "CEST"}, "timezone"),
        ({"every": 1, "timezone": "America/New_Yrok"}, "timezone"),
        ({"every": 1, "max_runs": 0}, "max_runs"),
        ({"every": 1, "overlap": "queue"}, "overlap"),
        ({"every": 1, "misfire": "later"}, "misfire"),
        ({"every": 1, "catch_up_limit": 0}, "catch_up_limit"),
        ({"every": 1, "payload": "not json"}, "payload"),
        ({"every": 1, "colour": "red"}, "colour"),
    ],
)
def test_bad_field_is_named(kw: dict[str, Any], field: str) -> None:
    assert fields_of(**kw) == [field]


def test_payload_limit_is_the_callers() -> None:
    big = {"id": "a", "task": "t", "every": 1, "payload": {"x": "y" * (64 * 1024)}}
    with pytest.raises(InvalidSchedule, match=r"payload: payload is 65544 bytes") as caught:
        Schedule.parse(big)
    assert [field for field, _ in caught.value.errors] == ["payload"]
    # A raised limit (RSCHED_MAX_PAYLOAD_BYTES) is honoured, and stored payloads always load.
    assert Schedule.parse(big, max_payload_bytes=1 << 20).payload == big["payload"]
    assert Schedule(**big).payload == big["payload"]
    stored = Schedule(**big).spec_fields()
    assert Schedule.from_hash("a", {**stored, "generation": "1"}).payload == big["payload"]


def test_parse_names_each_field() -> None:
    with pytest.raises(InvalidSchedule) as caught:
        Schedule.parse({"id": "a b", "task": "t", "cron": "bad", "timezone": "PST"})
    assert sorted(field for field, _ in caught.value.errors) == ["cron", "id", "timezone"]


def test_checks_across_fields_run_beside_failed_fields() -> None:
    with pytest.raises(InvalidSchedule) as caught:
        Schedule.parse({"id": "a", "task": "t", "every": 60, "at": "2030-01-01", "max_runs": 0})
    assert [f for f, _ in caught.value.errors] == ["max_runs", ""]
    assert "(given: every, at)" in caught.value.errors[1][1]
    with pytest.raises(InvalidSchedule) as caught:
        Schedule.parse(
            {"id": "a b", "task": "t", "cron": "* * * * *", "retry_base_s": "2h",
             "retry_max_s": "1h", "retry_jitter": 5}
        )  # fmt: skip
    assert [f for f, _ in caught.value.errors] == ["id", "retry_jitter", ""]
    assert "retry_max_s must be at least retry_base_s" in caught.value.errors[2][1]
    # A failed trigger is not echoed as a missing one.
    with pytest.raises(InvalidSchedule) as caught:
        Schedule.parse({"id": "a", "task": "t", "every": "soon"})
    assert [f for f, _ in caught.value.errors] == ["every"]


def test_messages_suggest_the_fix() -> None:
    with pytest.raises(InvalidSchedule, match="America/Los_Angeles"):
        Schedule(id="a", task="t", every=1, timezone="PST")
    with pytest.raises(InvalidSchedule, match="never occurs in February"):
        Schedule(id="a", task="t", cron="0 0 30 2 *")
    with pytest.raises(InvalidSchedule, match="exactly one trigger"):
        Schedule(id="a", task="t", every=1, at=datetime.now(UTC))
    with pytest.raises(InvalidSchedule, match="end_at must be later"):
        Schedule(
            id="a", task="t", every=1, start_at=datetime(2026, 2, 1), end_at=datetime(2026, 1, 1)
        )


def test_every_accepts_timedelta_and_naive_times_use_the_zone() -> None:
    s = Schedule(
        id="a", task="t", every=timedelta(minutes=5), timezone="Europe/Rome",
        start_at=datetime(2026, 7, 1, 9, 0),
    )  # fmt: skip
    assert s.every == 300
    assert s.start_at is not None
    assert s.start_at.utcoffset() == timedelta(hours=2)


def test_hash_round_trip_stores_only_non_defaults() -> None:
    s = Schedule(
        id="r", task="reports.nightly", cron="0 2 * * *", timezone="Europe/Rome",
        payload={"kind": "sales"}, max_runs=365, overlap="allow",
    )  # fmt: skip
    spec = s.spec_fields()
    assert spec == {
        "task": "reports.nightly",
        "cron": "0 2 * * *",
        "timezone": "Europe/Rome",
        "payload": '{"kind":"sales"}',
        "max_runs": "365",
        "overlap": "allow",
    }
    state = {"generation": "2", "created_at": "1767225600000", "next_run": "1767229200000"}
    back = Schedule.from_hash("r", {**spec, **state, "status": "paused"})
    assert back.payload == {"kind": "sales"}
    assert back.paused
    assert back.generation == 2
    assert back.next_run == datetime(2026, 1, 1, 1, tzinfo=UTC)
    assert back.spec_fields() == spec


def test_unreadable_hash_is_a_state_error() -> None:
    with pytest.raises(StateError):
        Schedule.from_hash("r", {})
    with pytest.raises(StateError, match="edited by hand"):
        Schedule.from_hash("r", {"task": "t", "cron": "bogus", "generation": "1"})
