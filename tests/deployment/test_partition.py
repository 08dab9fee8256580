"""Partition placement and hash tags: stable, even over a cluster's primaries."""

from __future__ import annotations

from typing import Any

import pytest
from redis.crc import key_slot

from rsched._core.keys import Keys
from rsched._core.partitions import MAX_PARTITIONS, partition_of, partition_tags
from rsched._core.settings import Settings


def test_one_partition_is_the_layout_without_partitions() -> None:
    assert partition_tags("rsched", 1) == ("rsched",)
    assert Keys("rsched").schedule("a") == "{rsched}:schedule:a"
    assert partition_of("anything", 1) == 0


def test_placement_is_stable_across_processes() -> None:
    # CRC-32, never hash(): these values must not change between releases or processes.
    assert [partition_of(f"s{i}", 16) for i in range(6)] == [
        partition_of(f"s{i}", 16) for i in range(6)
    ]
    assert partition_of("nightly-report", 16) == 0  # zlib.crc32(b"nightly-report") % 16
    counts = [0] * 16
    for i in range(16_000):
        counts[partition_of(f"schedule-{i}", 16)] += 1
    assert min(counts) > 850
    assert max(counts) < 1150


@pytest.mark.parametrize("n", [2, 3, 16, 64, MAX_PARTITIONS])
def test_tags_spread_evenly_over_three_primaries(n: int) -> None:
    tags = partition_tags("rsched", n)
    assert len(set(tags)) == n
    slots = [key_slot(t.encode()) for t in tags]
    ranges = [(0, 5461), (5461, 10923), (10923, 16384)]  # what a 3-primary cluster gets
    per_primary = [sum(lo <= s < hi for s in slots) for lo, hi in ranges]
    assert max(per_primary) - min(per_primary) <= 1, per_primary
    # Every key of a partition hashes to the partition's slot.
    keys = Keys("rsched", n, n - 1)
    assert key_slot(keys.schedule("x").encode()) == slots[-1]
    assert key_slot(keys.queue("q").encode()) == slots[-1]


def test_deployment_keys_keep_the_prefix_tag() -> None:
    keys = Keys("app", 8, 5)
    assert keys.meta == "{app}:meta"
    assert keys.workers == "{app}:workers"
    assert keys.for_partition(0).tag != keys.tag
    assert [k.partition for k in keys.every_partition()] == list(range(8))


@pytest.mark.parametrize("bad", [0, -1, MAX_PARTITIONS + 1, True, 1.5])
def test_bad_partition_counts_are_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="partitions must be"):
        Keys("rsched", bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"partition 3 is not in 0\.\.2"):
        Keys("rsched", 3, 3)


async def test_first_process_stores_the_number_and_others_must_match(
    redis: Any, settings: Settings
) -> None:
    from rsched._core.errors import PartitionMismatch, StateError
    from rsched._store.deployment import deployment_keys

    keys = await deployment_keys(redis, settings.model_copy(update={"partitions": 4}))
    assert keys.partitions == 4
    assert await redis.hget(keys.meta, "partitions") == "4"
    assert (await deployment_keys(redis, settings)).partitions == 4  # unset: the stored N
    with pytest.raises(PartitionMismatch, match=r"has 4 partition.*configured for 2"):
        await deployment_keys(redis, settings.model_copy(update={"partitions": 2}))
    await redis.hset(keys.meta, "partitions", "many")
    with pytest.raises(StateError, match="partitions holds 'many'"):
        await deployment_keys(redis, settings)


async def test_an_existing_deployment_has_one_partition(redis: Any, settings: Settings) -> None:
    from rsched._store.deployment import deployment_keys

    keys = await deployment_keys(redis, settings)
    assert keys.partitions == 1
    assert keys.schedules == "{" + settings.prefix + "}:schedules"
