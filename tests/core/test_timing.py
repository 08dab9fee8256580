"""Timing: occurrences of a trigger inside its window, as epoch milliseconds (no Redis)."""

from __future__ import annotations

from datetime import UTC, datetime

from rsched import Schedule
from rsched._core.schedule import to_ms
from rsched._core.timing import Timing

T0 = to_ms(datetime(2026, 1, 1, tzinfo=UTC))
MIN = 60_000


def test_every_is_anchored_at_start_at() -> None:
    timing = Timing.of(Schedule(id="e", task="t", every=60, start_at=datetime(2026, 1, 1)))
    assert timing.next_after(T0 - 5) == T0
    assert timing.next_after(T0) == T0 + MIN
    assert timing.next_after(T0 + 90_000) == T0 + 2 * MIN
    assert timing.prev_at_or_before(T0 + 90_000) == T0 + MIN
    assert timing.prev_at_or_before(T0 - 1) is None


def test_every_without_start_runs_one_interval_after_creation() -> None:
    created = datetime(2026, 1, 1, 0, 0, 7, tzinfo=UTC)
    timing = Timing.of(Schedule(id="e", task="t", every=60, created_at=created))
    assert timing.next_after(to_ms(created)) == to_ms(created) + MIN
    fields = {"every": "60", "created_at": str(to_ms(created))}
    assert Timing.from_hash(fields) == timing


def test_window_bounds_every_trigger() -> None:
    end = datetime(2026, 1, 1, 0, 3, tzinfo=UTC)
    timing = Timing.of(
        Schedule(id="c", task="t", cron="* * * * *", start_at=datetime(2026, 1, 1), end_at=end)
    )
    assert timing.between(T0 - 10 * MIN, T0 + 10 * MIN, 100) == [T0 + i * MIN for i in range(4)]
    assert timing.next_after(T0 + 3 * MIN) is None
    assert timing.prev_at_or_before(T0 + 10 * MIN) == T0 + 3 * MIN
    assert timing.count(T0 - 10 * MIN, T0 + 10 * MIN, 100) == 4
    assert timing.count(T0 - 10 * MIN, T0 + 10 * MIN, 2) == 2


def test_count_of_intervals_is_arithmetic() -> None:
    timing = Timing.of(Schedule(id="e", task="t", every=1, start_at=datetime(2026, 1, 1)))
    assert timing.count(T0, T0 + 86_400_000, 10**9) == 86_401
    assert timing.count(T0 + 500, T0 + 999, 10) == 0


def test_one_off() -> None:
    timing = Timing.of(Schedule(id="o", task="t", at=datetime(2026, 1, 1)))
    assert timing.next_after(T0 - 1) == T0
    assert timing.next_after(T0) is None
    assert timing.prev_at_or_before(T0) == T0
    assert timing.prev_at_or_before(T0 - 1) is None


def test_cron_in_a_zone() -> None:
    timing = Timing.of(Schedule(id="c", task="t", cron="0 9 * * MON-FRI", timezone="Asia/Tokyo"))
    # 2026-01-01 is a Thursday; 09:00 JST is 00:00 UTC.
    assert timing.next_after(T0) == T0 + 86_400_000
    assert timing.next_after(T0 - 1) == T0


def test_backfill_extends_the_every_grid_before_its_anchor() -> None:
    start = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    t = Timing.of(Schedule(id="a", task="t", every=600, start_at=start))
    anchor = to_ms(start)
    # A plain read of the occurrences stops at the anchor; a backfill's grid does not.
    assert t.between(anchor - 3_600_000, anchor, 100) == [anchor]
    grid = t.backfill_between(anchor - 1_800_001, anchor + 600_000, 100)
    assert grid == [anchor + k * 600_000 for k in (-3, -2, -1, 0, 1)]
    assert t.backfill_between(anchor - 1_799_999, anchor - 1_200_000, 100) == [anchor - 1_200_000]
    assert t.backfill_between(anchor - 599_999, anchor - 1, 100) == []
    assert len(t.backfill_between(anchor - 100 * 600_000, anchor, 5)) == 5  # the limit
    end = datetime(2026, 1, 1, 11, 0, tzinfo=UTC)
    bounded = Timing.of(
        Schedule(id="b", task="t", every=600, start_at=start, end_at=start.replace(hour=13))
    )
    assert bounded.backfill_between(to_ms(end), anchor + 7_200_000, 100)[-1] == anchor + 3_600_000
    # Cron keeps its start_at: nothing before it.
    cron = Timing.of(Schedule(id="c", task="t", cron="*/10 * * * *", start_at=start))
    assert cron.backfill_between(anchor - 3_600_000, anchor - 1, 100) == []
