"""A cron schedule's DST rule through the SDK (add, update, upsert_many, next_runs, backfill) and
schedules files."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from redis.asyncio import Redis

from rsched import Client, InvalidSchedule, ScheduleFileError, Settings
from rsched._client.schedules_file import load_file, sync_file

NY = "America/New_York"


@pytest.fixture
async def client(redis: Redis, settings: Settings) -> Client:
    return Client(redis, settings)


async def test_add_update_and_clear(client: Client, redis: Redis, prefix: str) -> None:
    s = await client.add(
        {"id": "n", "task": "t", "cron": "30 1 * * *", "timezone": NY, "dst_fold": "both"}
    )
    assert (s.dst_gap, s.dst_fold) == (None, "both")
    stored = await redis.hgetall(f"{{{prefix}}}:schedule:n")
    assert stored["dst_fold"] == "both"
    assert "dst_gap" not in stored  # only what differs from the default is stored
    s = await client.update("n", dst_gap="skip")
    assert (s.dst_gap, s.dst_fold, s.generation) == ("skip", "both", 2)
    s = await client.update("n", dst_fold=None)
    assert s.dst_fold is None
    assert "dst_fold" not in await redis.hgetall(f"{{{prefix}}}:schedule:n")
    with pytest.raises(InvalidSchedule) as err:
        await client.update("n", dst_fold="twice")
    assert [f for f, _ in err.value.errors] == ["dst_fold"]
    # A trigger without wall times keeps the fields, which change nothing for it.
    s = await client.update("n", every=3600)
    assert (s.every, s.dst_gap) == (3600, "skip")


async def test_backfill_runs_both_passes(client: Client) -> None:
    await client.add(
        {
            "id": "b", "task": "t", "cron": "30 1 * * *", "timezone": NY, "dst_fold": "both",
            "overlap": "allow",
        }
    )  # fmt: skip
    start, end = datetime(2024, 11, 3, 0, 0), datetime(2024, 11, 3, 3, 0)  # naive: in NY
    result = await client.backfill("b", start, end)
    when = sorted(eid.split("@")[1] for eid in result.outcomes)
    first = int(datetime(2024, 11, 3, 5, 30, tzinfo=UTC).timestamp() * 1000)
    assert when == [str(first), str(first + 3_600_000)]  # 01:30 EDT, 01:30 EST


async def test_many_at_once_keep_each_rule(client: Client) -> None:
    base = {"task": "t", "cron": "30 1 * * *", "timezone": NY}
    await client.upsert_many(
        [
            {**base, "id": "a"},
            {**base, "id": "b", "dst_fold": "last"},
            {**base, "id": "c", "dst_fold": "last", "dst_gap": "skip"},
        ]
    )
    got = [await client.get(sid) for sid in ("a", "b", "c")]
    assert [(s.dst_gap, s.dst_fold) for s in got] == [
        (None, None), (None, "last"), ("skip", "last"),
    ]  # fmt: skip
    result = await client.upsert_many([{**base, "id": "b", "dst_fold": "last"}])
    assert result.ids("unchanged") == ["b"]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "schedules.toml"
    path.write_text(text)
    return path


async def test_schedules_file(tmp_path: Path, redis: Redis, settings: Settings) -> None:
    text = """
[defaults]
timezone = "America/New_York"
dst_fold = "both"

[[schedule]]
id = "nightly"
task = "t"
cron = "30 1 * * *"
dst_gap = "skip"

[[schedule]]
id = "poll"
task = "t"
every = "5m"
"""
    path = write(tmp_path, text)
    _, schedules = load_file(path)
    assert [(s.dst_gap, s.dst_fold) for s in schedules] == [("skip", "both"), (None, "both")]
    await sync_file(redis, settings, path)
    assert (await Client(redis, settings).get("nightly")).dst_fold == "both"
    plan = await sync_file(redis, settings, write(tmp_path, text.replace('"both"', '"last"')))
    assert [c.describe() for c in plan.changes] == ["dst_fold: 'both' -> 'last'"] * 2
    with pytest.raises(ScheduleFileError) as err:
        load_file(write(tmp_path, text.replace('"skip"', '"never"')))
    ((where, message),) = err.value.errors
    assert where == "schedule[0] (id 'nightly').dst_gap"
    assert 'use dst_gap = "shift"' in message
