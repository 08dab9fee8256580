"""Client.sync_schedules: the schedules-file sync for schedules built in code (an application's
settings): adds, updates, prunes (or not), refuses bad entries and foreign ids, records the
changes under ``sync:<source>``."""

from __future__ import annotations

from typing import cast

import pytest
from redis.asyncio import Redis

from rsched import Client, InvalidArgument, Schedule, ScheduleFileError, Settings


async def test_sync_adds_updates_and_prunes_what_the_source_no_longer_lists(
    redis: Redis, settings: Settings
) -> None:
    client = Client(redis, settings)
    first = await client.sync_schedules(
        [
            {"id": "a", "task": "t.a", "every": 60},
            Schedule(id="b", task="t.b", cron="0 2 * * *"),
        ],
        source="app",
    )
    assert first["applied"]
    assert sorted(c["id"] for c in first["changes"]) == ["a", "b"]
    assert (await client.get("a")).source == "app"
    assert {r.source for r in (await client.audit("a")).items} == {"sync:app"}
    again = await client.sync_schedules(
        [{"id": "a", "task": "t.a", "every": 60}, {"id": "b", "task": "t.b", "cron": "0 2 * * *"}],
        source="app",
    )
    assert (again["changes"], sorted(again["unchanged"])) == ([], ["a", "b"])
    # Without prune, what the source no longer lists stays; with it, it goes.
    kept = await client.sync_schedules(
        [{"id": "a", "task": "t.a", "every": 30}], source="app", prune=False
    )
    assert [(c["action"], c["id"]) for c in kept["changes"]] == [("update", "a")]
    assert (await client.get("b")).source == "app"
    pruned = await client.sync_schedules([{"id": "a", "task": "t.a", "every": 30}], source="app")
    assert [(c["action"], c["id"]) for c in pruned["changes"]] == [("remove", "b")]
    assert [s.id for s in (await client.list()).items] == ["a"]


async def test_every_problem_is_listed_and_nothing_is_applied(
    redis: Redis, settings: Settings
) -> None:
    client = Client(redis, settings)
    await client.add({"id": "mine", "task": "t", "every": 60})
    with pytest.raises(ScheduleFileError) as caught:
        await client.sync_schedules(
            [
                {"id": "a", "task": "t.a", "every": -1},
                {"id": "b", "task": "t.b", "every": 60},
                {"id": "b", "task": "t.b", "every": 60},
                {"id": "mine", "task": "t", "every": 60},
                cast(Schedule, "not a schedule"),
            ],
            source="app",
        )
    where = [w for w, _ in caught.value.errors]
    assert any(w.startswith("schedule[0]") and "every" in w for w in where), where
    assert any(w.startswith("schedule[2] (id 'b').id") for w in where), where
    assert any(w.startswith("schedule[3]") for w in where), where
    assert "schedule[4]" in where
    assert [s.id for s in (await client.list()).items] == ["mine"]
    with pytest.raises(InvalidArgument, match="source"):
        await client.sync_schedules([], source="no spaces allowed")
