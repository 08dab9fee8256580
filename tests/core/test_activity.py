"""The activity counters' reading (rsched._core.activity): slots by stamp, windows, sums over
partitions, lag quantiles from buckets. Pure."""

from __future__ import annotations

import math
import re

from rsched._core.activity import LAG_BOUNDS_MS, LAG_BUCKETS, activity_of
from rsched._redis import scripts

MIN = 60_000


def test_points_come_from_slots_by_their_stamp_not_their_position() -> None:
    now = 1_000_000 * MIN + 30_000  # in minute 1_000_000
    minute = 1_000_000
    a = {
        f"m{minute % 64}": str(minute), f"m{minute % 64}:fired": "5",
        f"m{(minute - 3) % 64}": str(minute - 3), f"m{(minute - 3) % 64}:dead": "2",
        # A slot left by a minute over an hour ago (nothing written since): not in the window.
        f"m{(minute - 61) % 64}": str(minute - 61), f"m{(minute - 61) % 64}:fired": "9",
        f"h{(minute // 60) % 26}": str(minute // 60), f"h{(minute // 60) % 26}:fired": "5",
        "junk": "x", "m1:fired": "not a number",
    }  # fmt: skip
    b = {f"m{minute % 64}": str(minute), f"m{minute % 64}:fired": "2", f"m{minute % 64}:lag0": "2"}
    act = activity_of([a, b], now)
    assert len(act.minutes) == 60
    assert act.minutes[-1]["fired"] == 7  # summed over partitions
    assert act.minutes[-4]["dead"] == 2
    assert sum(p["fired"] for p in act.minutes) == 7
    assert act.hours[-1]["fired"] == 5
    assert act.minutes[-1].start.timestamp() * 1000 == minute * MIN
    assert act.minutes[0]["fired"] == 0
    assert act.as_dict()["minutes"][-1]["fired"] == 7


def test_lag_quantiles_are_bucket_bounds() -> None:
    minute = 500
    slot = f"m{minute % 64}"
    raw = {slot: str(minute), f"{slot}:lag2": "98", f"{slot}:lag6": "1", f"{slot}:lag13": "1"}
    point = activity_of([raw], minute * MIN).minutes[-1]
    assert point.p50_ms == LAG_BOUNDS_MS[2]
    assert point.p99_ms == LAG_BOUNDS_MS[6]
    assert point.lag_ms(1.0) == math.inf
    assert point.as_dict()["lag_over_max"] is True
    assert activity_of([], minute * MIN).minutes[-1].p50_ms is None


def test_the_lua_bounds_are_the_same() -> None:
    text = (scripts.lua_dir() / "includes" / "activity_lag.lua").read_text()
    found = re.search(r"ACTIVITY_LAG_BOUNDS = \{([^}]*)\}", text)
    assert found
    assert tuple(int(n) for n in found.group(1).replace("\n", " ").split(",")) == LAG_BOUNDS_MS
    assert len(LAG_BOUNDS_MS) + 1 == LAG_BUCKETS
    ring = (scripts.lua_dir() / "includes" / "activity.lua").read_text()
    assert f"for i = 0, {LAG_BUCKETS - 1} do" in ring
    assert "% 64" in ring
    assert "% 26" in ring
