"""Misfire policies as a pure function: what the scheduler sends for a late schedule."""

from __future__ import annotations

from zoneinfo import ZoneInfo

import pytest

from rsched._core.fire_plan import FireSpec, PlannedSpec, plan
from rsched._core.timing import Timing

MIN = 60_000
T0 = 1_800_000_000_000 - 1_800_000_000_000 % MIN  # a whole minute


def every_minute(**kw: object) -> PlannedSpec:
    timing = Timing(tz=ZoneInfo("UTC"), every_ms=MIN, anchor_ms=T0)
    return PlannedSpec(version="1:0", timing=timing, **kw)  # type: ignore[arg-type]


def test_on_time_and_within_grace_fire() -> None:
    spec = every_minute()
    (item,) = plan("a", spec, T0 + 5 * MIN, T0 + 5 * MIN + 59_000)
    assert (item.action, item.expect, item.sched, item.next) == (
        "fire", T0 + 5 * MIN, T0 + 5 * MIN, T0 + 6 * MIN,
    )  # fmt: skip
    assert item.version == "1:0"


def test_run_once() -> None:
    (item,) = plan("a", every_minute(), T0, T0 + 10 * MIN + 30_000)
    assert item.action == "misfire"
    assert item.expect == T0  # the stored next run: what the script compares
    assert item.sched == T0 + 10 * MIN  # the latest missed occurrence stands for all
    assert item.next == T0 + 11 * MIN
    assert item.missed == 11


def test_skip() -> None:
    (item,) = plan("a", every_minute(misfire="skip", grace_ms=1_000), T0, T0 + 10 * MIN + 30_000)
    assert (item.action, item.expect, item.next, item.missed) == ("skip", T0, T0 + 11 * MIN, 11)


def test_skip_keeps_the_latest_when_it_is_within_grace() -> None:
    items = plan("a", every_minute(misfire="skip", grace_ms=10_000), T0, T0 + 10 * MIN + 3_000)
    assert [(i.action, i.expect, i.sched, i.next) for i in items] == [
        ("skip", T0, T0, T0 + 10 * MIN),
        ("fire", T0 + 10 * MIN, T0 + 10 * MIN, T0 + 11 * MIN),
    ]
    assert items[0].missed == 10


def test_catch_up_limit_keeps_the_newest_oldest_first() -> None:
    spec = every_minute(misfire="catch_up", catch_up_limit=3)
    items = plan("a", spec, T0, T0 + 10 * MIN + 30_000)
    assert [(i.action, i.expect, i.sched, i.next) for i in items] == [
        ("limit", T0, T0, T0 + 8 * MIN),
        ("catch_up", T0 + 8 * MIN, T0 + 8 * MIN, T0 + 9 * MIN),
        ("catch_up", T0 + 9 * MIN, T0 + 9 * MIN, T0 + 10 * MIN),
        # The newest is within the grace, but still one of the catch-up: it waits its turn.
        ("catch_up", T0 + 10 * MIN, T0 + 10 * MIN, T0 + 11 * MIN),
    ]
    assert items[0].missed == 8


def test_catch_up_everything_under_the_limit() -> None:
    items = plan("a", every_minute(misfire="catch_up"), T0, T0 + 3 * MIN + 59_000 + MIN)
    assert [i.sched for i in items] == [T0 + i * MIN for i in range(5)]
    assert all(i.action == "catch_up" for i in items)
    # Each item expects what the previous one leaves as next run: one atomic chain.
    assert [i.expect for i in items[1:]] == [i.next for i in items[:-1]]


def test_one_off_misfire_completes() -> None:
    timing = Timing(tz=ZoneInfo("UTC"), at_ms=T0)
    spec = PlannedSpec(version="1:0", timing=timing)
    (item,) = plan("a", spec, T0, T0 + 10 * MIN)
    assert (item.action, item.sched, item.next) == ("misfire", T0, None)


@pytest.mark.parametrize("misfire", ["run_once", "skip", "catch_up"])
def test_planned_spec_from_hash(misfire: str) -> None:
    fields = {
        "version": f"3:{T0}",
        "generation": "3",
        "created_at": str(T0),
        "cron": "*/5 * * * *",
        "queue": "q",
        "misfire": misfire,
        "misfire_grace_s": "2.5",
        "catch_up_limit": "7",
        "overlap": "allow",
        "max_runs": "4",
        "opts": '{"timeout_s":5.0}',
    }
    spec = PlannedSpec.from_hash(fields)
    assert spec.version == f"3:{T0}"
    assert (spec.misfire, spec.grace_ms, spec.catch_up_limit) == (misfire, 2_500, 7)
    assert spec.fire_spec == FireSpec("allow", "q", 4, '{"timeout_s":5.0}')
    # Every item carries it: the fire script takes these fields from the scheduler.
    assert all(item.spec == spec.fire_spec for item in plan("a", spec, T0, T0 + 10 * MIN))


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("overlap", "sometimes", "overlap"),
        ("queue", "no spaces", "queue"),
        ("max_runs", "many", "max_runs"),
        ("opts", "{timeout_s: 1h}", "opts"),
        ("opts", "[1]", "opts"),
    ],
)
def test_fire_spec_refuses_hand_edited_fields(field: str, value: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        FireSpec.from_hash({field: value})


def test_schedules_of_the_same_fields_share_one_spec() -> None:
    # A fleet created together (one add_many) has the same fields, version included: the
    # scheduler's cache then holds one spec for all of them, not one each.
    fields = {"version": "1:5", "every": "60", "queue": "q", "misfire_grace_s": "2.5"}
    spec = PlannedSpec.from_hash(dict(fields))
    assert PlannedSpec.from_hash(dict(fields)) is spec
    assert (spec.version, spec.timing.every_ms, spec.fire_spec.queue, spec.grace_ms) == (
        "1:5", 60_000, "q", 2_500,
    )  # fmt: skip
    other = PlannedSpec.from_hash({**fields, "version": "2:5"})  # changed since: its own
    assert other is not spec
    assert other.version == "2:5"
    with pytest.raises(ValueError, match="overlap"):  # a bad hash is refused every time
        PlannedSpec.from_hash({**fields, "overlap": "sometimes"})
    with pytest.raises(ValueError, match="overlap"):
        PlannedSpec.from_hash({**fields, "overlap": "sometimes"})
