"""A schedule's own DST rule (``dst_gap``, ``dst_fold``): each choice in real zones, through the
public ``rsched.next_fire_times``, the planner's Timing and the model (no Redis)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from rsched import InvalidSchedule, Schedule, next_fire_times
from rsched._core import humanize
from rsched._core.cron import Cron
from rsched._core.fire_plan import PLAN_FIELDS, PlannedSpec, plan
from rsched._core.schedule import to_ms
from rsched._core.timing import Timing
from rsched._core.words import Words, speaking

ROME = "Europe/Rome"
NY = "America/New_York"
LH = "Australia/Lord_Howe"
SANTIAGO = "America/Santiago"
BEIRUT = "Asia/Beirut"


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def fires(cron: str, zone: str, after_utc: str, n: int, **rule: Any) -> list[str]:
    schedule = Schedule(id="d", task="t", cron=cron, timezone=zone, **rule)
    return [t.isoformat() for t in next_fire_times(schedule, utc(after_utc), n)]


# --------------------------------------------------------------------------- gaps

# Each case: the expression, the zone, a UTC time before the gap, and what each dst_gap gives.
GAPS = [
    # Rome 2026-03-29 02:00 CET -> 03:00 CEST: 02:30 does not exist.
    (
        "30 2 * * *",
        ROME,
        "2026-03-27T12:00",
        {
            "shift": ["2026-03-28T02:30:00+01:00", "2026-03-29T03:00:00+02:00"],
            "skip": ["2026-03-28T02:30:00+01:00", "2026-03-30T02:30:00+02:00"],
        },
    ),
    # An expression with '*' skips the gap by default; shift gives 02:30's run at 03:00.
    (
        "30 * * * *",
        ROME,
        "2026-03-29T00:00",
        {
            "shift": ["2026-03-29T01:30:00+01:00", "2026-03-29T03:00:00+02:00"],
            "skip": ["2026-03-29T01:30:00+01:00", "2026-03-29T03:30:00+02:00"],
        },
    ),
    # New York 2026-03-08 02:00 EST -> 03:00 EDT.
    (
        "30 2 * * *",
        NY,
        "2026-03-07T12:00",
        {
            "shift": ["2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"],
            "skip": ["2026-03-09T02:30:00-04:00", "2026-03-10T02:30:00-04:00"],
        },
    ),
    # Steps shifted out of a gap land on the gap's end together: one run there.
    (
        "*/15 1-3 * * *",
        NY,
        "2026-03-08T06:40",
        {
            "shift": ["2026-03-08T01:45:00-05:00", "2026-03-08T03:00:00-04:00"],
            "skip": ["2026-03-08T01:45:00-05:00", "2026-03-08T03:00:00-04:00"],
        },
    ),
    # Lord Howe 2026-10-04 02:00 -> 02:30 (+10:30 -> +11:00): a 30-minute gap.
    (
        "15 2 * * *",
        LH,
        "2026-10-03T12:00",
        {
            "shift": ["2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"],
            "skip": ["2026-10-05T02:15:00+11:00", "2026-10-06T02:15:00+11:00"],
        },
    ),
    # Santiago 2026-09-06 starts at 01:00 (-04:00 -> -03:00 at midnight): no midnight that day.
    (
        "0 0 * * *",
        SANTIAGO,
        "2026-09-05T12:00",
        {
            "shift": ["2026-09-06T01:00:00-03:00", "2026-09-07T00:00:00-03:00"],
            "skip": ["2026-09-07T00:00:00-03:00", "2026-09-08T00:00:00-03:00"],
        },
    ),
    # Beirut 2022-03-27 also starts at 01:00 (+02:00 -> +03:00 at midnight).
    (
        "30 0 * * *",
        BEIRUT,
        "2022-03-26T12:00",
        {
            "shift": ["2022-03-27T01:00:00+03:00", "2022-03-28T00:30:00+03:00"],
            "skip": ["2022-03-28T00:30:00+03:00", "2022-03-29T00:30:00+03:00"],
        },
    ),
]


@pytest.mark.parametrize(("cron", "zone", "after", "expected"), GAPS)
@pytest.mark.parametrize("gap", ["shift", "skip"])
def test_gap(cron: str, zone: str, after: str, expected: dict[str, list[str]], gap: str) -> None:
    want = expected[gap]
    assert fires(cron, zone, after, len(want), dst_gap=gap) == want


# --------------------------------------------------------------------------- folds

FOLDS = [
    # Rome 2026-10-25 03:00 CEST -> 02:00 CET: 02:30 happens twice.
    (
        "30 2 * * *",
        ROME,
        "2026-10-24T12:00",
        {
            "first": ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"],
            "last": ["2026-10-25T02:30:00+01:00", "2026-10-26T02:30:00+01:00"],
            "both": [
                "2026-10-25T02:30:00+02:00", "2026-10-25T02:30:00+01:00",
                "2026-10-26T02:30:00+01:00",
            ],
        },
    ),
    # Steps follow elapsed time by default (both passes); first and last keep one pass.
    (
        "*/30 * * * *",
        ROME,
        "2026-10-24T23:45",
        {
            "first": [
                "2026-10-25T02:00:00+02:00", "2026-10-25T02:30:00+02:00",
                "2026-10-25T03:00:00+01:00",
            ],
            "last": [
                "2026-10-25T02:00:00+01:00", "2026-10-25T02:30:00+01:00",
                "2026-10-25T03:00:00+01:00",
            ],
            "both": [
                "2026-10-25T02:00:00+02:00", "2026-10-25T02:30:00+02:00",
                "2026-10-25T02:00:00+01:00",
            ],
        },
    ),
    # New York 2026-11-01 02:00 EDT -> 01:00 EST.
    (
        "30 1 * * *",
        NY,
        "2026-10-31T12:00",
        {
            "first": ["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"],
            "last": ["2026-11-01T01:30:00-05:00", "2026-11-02T01:30:00-05:00"],
            "both": [
                "2026-11-01T01:30:00-04:00", "2026-11-01T01:30:00-05:00",
                "2026-11-02T01:30:00-05:00",
            ],
        },
    ),
    (
        "*/15 1-3 * * *",
        NY,
        "2026-11-01T05:40",
        {
            "first": ["2026-11-01T01:45:00-04:00", "2026-11-01T02:00:00-05:00"],
            "last": ["2026-11-01T01:00:00-05:00", "2026-11-01T01:15:00-05:00"],
            "both": ["2026-11-01T01:45:00-04:00", "2026-11-01T01:00:00-05:00"],
        },
    ),
    # Lord Howe 2026-04-05 02:00 -> 01:30 (+11:00 -> +10:30): 01:30-01:59 happens twice.
    (
        "45 1 * * *",
        LH,
        "2026-04-04T12:00",
        {
            "first": ["2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"],
            "last": ["2026-04-05T01:45:00+10:30", "2026-04-06T01:45:00+10:30"],
            "both": [
                "2026-04-05T01:45:00+11:00", "2026-04-05T01:45:00+10:30",
                "2026-04-06T01:45:00+10:30",
            ],
        },
    ),
    (
        "*/20 1 * * *",
        LH,
        "2026-04-04T14:10",
        {
            "first": ["2026-04-05T01:20:00+11:00", "2026-04-05T01:40:00+11:00",
                      "2026-04-06T01:00:00+10:30"],
            "last": ["2026-04-05T01:20:00+11:00", "2026-04-05T01:40:00+10:30",
                     "2026-04-06T01:00:00+10:30"],
            "both": ["2026-04-05T01:20:00+11:00", "2026-04-05T01:40:00+11:00",
                     "2026-04-05T01:40:00+10:30"],
        },
    ),
    # Santiago 2026-04-04 ends at 24:00 -03:00 and goes back to 23:00 -04:00: 23:30 twice.
    (
        "30 23 * * *",
        SANTIAGO,
        "2026-04-04T12:00",
        {
            "first": ["2026-04-04T23:30:00-03:00", "2026-04-05T23:30:00-04:00"],
            "last": ["2026-04-04T23:30:00-04:00", "2026-04-05T23:30:00-04:00"],
            "both": [
                "2026-04-04T23:30:00-03:00", "2026-04-04T23:30:00-04:00",
                "2026-04-05T23:30:00-04:00",
            ],
        },
    ),
    # Beirut 2022-10-29 also goes back from 24:00 to 23:00 (+03:00 -> +02:00).
    (
        "0 23 * * *",
        BEIRUT,
        "2022-10-29T12:00",
        {
            "first": ["2022-10-29T23:00:00+03:00", "2022-10-30T23:00:00+02:00"],
            "last": ["2022-10-29T23:00:00+02:00", "2022-10-30T23:00:00+02:00"],
            "both": [
                "2022-10-29T23:00:00+03:00", "2022-10-29T23:00:00+02:00",
                "2022-10-30T23:00:00+02:00",
            ],
        },
    ),
]  # fmt: skip


@pytest.mark.parametrize(("cron", "zone", "after", "expected"), FOLDS)
@pytest.mark.parametrize("fold", ["first", "last", "both"])
def test_fold(cron: str, zone: str, after: str, expected: dict[str, list[str]], fold: str) -> None:
    want = expected[fold]
    assert fires(cron, zone, after, len(want), dst_fold=fold) == want


@pytest.mark.parametrize(("cron", "zone", "after", "expected"), GAPS + FOLDS)
def test_unset_is_crons_rule(
    cron: str, zone: str, after: str, expected: dict[str, list[str]]
) -> None:
    fixed = Cron.parse(cron).fixed
    want = expected.get("shift" if fixed else "skip") or expected["first" if fixed else "both"]
    assert fires(cron, zone, after, len(want)) == want


def test_gap_and_fold_together() -> None:
    # Skip the spring gap and run in both passes of the autumn fold, a year apart.
    spring = fires("30 2 * * *", NY, "2026-03-07T12:00", 1, dst_gap="skip", dst_fold="both")
    assert spring == ["2026-03-09T02:30:00-04:00"]
    autumn = fires("30 1 * * *", NY, "2026-10-31T12:00", 2, dst_gap="skip", dst_fold="both")
    assert autumn == ["2026-11-01T01:30:00-04:00", "2026-11-01T01:30:00-05:00"]


def test_previous_occurrences_follow_the_rule() -> None:
    # What the planner reads for misfires: the latest occurrence at or before a time.
    spec = {"cron": "30 1 * * *", "timezone": NY, "dst_fold": "both"}
    timing = Timing.from_hash(spec)
    second = to_ms(utc("2026-11-01T06:30"))  # 01:30 EST
    first = to_ms(utc("2026-11-01T05:30"))  # 01:30 EDT
    assert timing.prev_at_or_before(second + 60_000) == second
    assert timing.prev_at_or_before(second - 1) == first
    assert timing.between(first - 1, second, 10) == [first, second]
    last = Timing.from_hash({**spec, "dst_fold": "last"})
    assert last.prev_at_or_before(second - 1) == to_ms(utc("2026-10-31T05:30"))
    skip = Timing.from_hash({"cron": "30 2 * * *", "timezone": NY, "dst_gap": "skip"})
    after_gap = to_ms(utc("2026-03-09T05:00"))
    assert skip.prev_at_or_before(after_gap) == to_ms(utc("2026-03-07T07:30"))


def test_the_planner_catches_up_both_passes() -> None:
    fields = {"version": "1:0", "cron": "30 1 * * *", "timezone": NY, "dst_fold": "both"}
    spec = PlannedSpec.from_hash(fields | {"misfire": "catch_up"})
    due = to_ms(utc("2026-11-01T05:30"))
    items = plan("a", spec, due, to_ms(utc("2026-11-01T07:00")))
    assert [(i.action, i.sched) for i in items] == [
        ("catch_up", due),
        ("catch_up", to_ms(utc("2026-11-01T06:30"))),
    ]
    assert items[-1].next == to_ms(utc("2026-11-02T06:30"))
    assert {"dst_gap", "dst_fold"} <= set(PLAN_FIELDS)


# --------------------------------------------------------------------------- the model


def test_rule_maps_crons_own_choice_to_none() -> None:
    fixed, steps = Cron.parse("30 2 * * *"), Cron.parse("*/15 * * * *")
    assert fixed.rule() is None
    assert fixed.rule("shift", "first") is None
    assert fixed.rule("skip") == ("skip", "first")
    assert fixed.rule(fold="both") == ("shift", "both")
    assert steps.rule("skip", "both") is None
    assert steps.rule("shift") == ("shift", "both")
    assert steps.rule(fold="last") == ("skip", "last")
    with pytest.raises(ValueError, match="not a DST gap rule"):
        fixed.rule("later")


def test_stored_only_when_set_and_read_back() -> None:
    plain = Schedule(id="p", task="t", cron="30 2 * * *", timezone=NY)
    assert not {"dst_gap", "dst_fold"} & set(plain.spec_fields())
    chosen = plain.model_copy(update={"dst_gap": "skip", "dst_fold": "both"})
    fields = chosen.spec_fields()
    assert (fields["dst_gap"], fields["dst_fold"]) == ("skip", "both")
    back = Schedule.from_hash("p", fields | {"version": "1:1"})
    assert (back.dst_gap, back.dst_fold) == ("skip", "both")
    assert Timing.of(back) == Timing.from_hash(fields)
    assert Timing.of(back).rule == ("skip", "both")
    # Set to cron's own rule: stored (the user chose it), computed on cron's path.
    same = Schedule(id="s", task="t", cron="30 2 * * *", dst_gap="shift", dst_fold="first")
    assert same.spec_fields()["dst_gap"] == "shift"
    assert Timing.of(same).rule is None


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("dst_gap", "later", "dst_gap='shift'"),
        ("dst_gap", "", "dst_gap='skip'"),
        ("dst_fold", "second", "dst_fold='last'"),
        ("dst_fold", 1, "dst_fold='both'"),
    ],
)
def test_unknown_values_name_the_field_and_the_choices(
    field: str, value: object, words: str
) -> None:
    with pytest.raises(InvalidSchedule) as err:
        Schedule(id="x", task="t", cron="0 2 * * *", **{field: value})
    assert [f for f, _ in err.value.errors] == [field]
    assert words in str(err.value)
    assert "cron's rule" in str(err.value)


def test_messages_use_each_surfaces_words() -> None:
    flags = Words(fields={"dst_fold": "--dst-fold"}, setting="{name} {value}")
    with speaking(flags), pytest.raises(InvalidSchedule) as err:
        Schedule(id="x", task="t", cron="0 2 * * *", dst_fold="second")
    assert str(err.value).startswith("invalid schedule 'x': --dst-fold: 'second' is not")
    assert "--dst-fold first, --dst-fold last or --dst-fold both" in str(err.value)


def test_every_and_at_have_no_wall_times() -> None:
    start = datetime(2026, 3, 8, 1, 0, tzinfo=UTC)
    plain = Schedule(id="e", task="t", every=3600, start_at=start, timezone=NY)
    chosen = plain.model_copy(update={"dst_gap": "skip", "dst_fold": "both"})
    assert next_fire_times(chosen, start, 5) == next_fire_times(plain, start, 5)
    assert Timing.of(chosen).rule is None
    once = Schedule(id="o", task="t", at=utc("2030-01-01T00:00"), dst_gap="skip")
    assert Timing.of(once).rule is None
    assert humanize.dst_text(chosen) is None


def test_dst_text() -> None:
    plain = Schedule(id="p", task="t", cron="30 2 * * *")
    assert humanize.dst_text(plain) == "gap shift (cron's rule), fold first (cron's rule)"
    steps = Schedule(id="s", task="t", cron="*/5 * * * *", dst_fold="first")
    assert humanize.dst_text(steps) == "gap skip (cron's rule), fold first"
