"""The record of a running job's progress and log (lua/job_log.lua, rsched._store.job_logs):
its bounds, attempts kept apart, its lifetime, a batch written twice, bad input."""

from __future__ import annotations

import orjson
from redis.asyncio import Redis

from rsched._core.codes import Code
from rsched._core.job_logs import MAX_BYTES, MAX_LINES, encode_line
from rsched._core.keys import Keys
from rsched._core.settings import Settings
from rsched._store.job_logs import RunNews
from rsched._store.queues import QueueStore


def _store(redis: Redis, settings: Settings) -> QueueStore:
    return QueueStore(redis, Keys(settings.prefix))


def _lines(n: int, start: int = 0, size: int = 10) -> list[bytes]:
    return [encode_line(1_000 + i, "info", f"{i:06d}" + "x" * size) for i in range(start, n)]


async def test_progress_and_lines_are_read_back(redis: Redis, settings: Settings) -> None:
    store = _store(redis, settings)
    run = RunNews("j1", 1, "w:1", (0.25, "a quarter", 1_700_000_000_000), _lines(3))
    assert await store.write_news([run], 60_000) == 0
    progress = await store.job_progress("j1")
    assert progress is not None
    assert (progress.fraction, progress.note, progress.attempt) == (0.25, "a quarter", 1)
    assert progress.at.timestamp() == 1_700_000_000
    logs = await store.job_logs("j1")
    assert [(r.attempt, r.level, r.message[:6]) for r in logs] == [
        (1, "info", "000000"), (1, "info", "000001"), (1, "info", "000002"),
    ]  # fmt: skip
    assert await store.job_progress("nope") is None
    assert await store.job_logs("nope") == []


async def test_an_attempt_keeps_its_newest_200_lines(redis: Redis, settings: Settings) -> None:
    store = _store(redis, settings)
    await store.write_news([RunNews("j", 1, "w:1", None, _lines(150))], 60_000)
    await store.write_news([RunNews("j", 1, "w:2", None, _lines(300, 150))], 60_000)
    logs = await store.job_logs("j", 1)
    assert len(logs) == MAX_LINES
    assert logs[0].message.startswith("000100")
    assert logs[-1].message.startswith("000299")


async def test_an_attempt_keeps_at_most_64_kib(redis: Redis, settings: Settings) -> None:
    store = _store(redis, settings)
    big = _lines(40, size=4_000)  # 160 kB in all
    await store.write_news([RunNews("j", 1, "w:1", None, big[:20])], 60_000)
    await store.write_news([RunNews("j", 1, "w:2", None, big[20:])], 60_000)
    stored: list[str] = await redis.lrange(Keys(settings.prefix).job_log("j", 1), 0, -1)  # type: ignore[assignment]
    total = sum(len(line.encode()) for line in stored)
    assert total <= MAX_BYTES
    assert total > MAX_BYTES - 4_100  # only what had to go went
    assert orjson.loads(stored[-1])[2].startswith("000039")
    fields = await redis.hgetall(Keys(settings.prefix).job_progress("j"))
    assert int(fields["bytes:1"]) == total


async def test_attempts_are_kept_apart(redis: Redis, settings: Settings) -> None:
    store = _store(redis, settings)
    await store.write_news(
        [RunNews("j", 1, "w:1", (1.0, "", 5), _lines(2)), RunNews("k", 1, "w:1", None, _lines(1))],
        60_000,
    )
    await store.write_news([RunNews("j", 2, "w:2", (0.5, "again", 9), _lines(1, size=3))], 60_000)
    assert [r.attempt for r in await store.job_logs("j")] == [1, 1, 2]
    assert [r.attempt for r in await store.job_logs("j", 2)] == [2]
    assert await store.job_logs("j", 3) == []
    progress = await store.job_progress("j")
    assert progress is not None
    assert (progress.attempt, progress.note) == (2, "again")
    assert len(await store.job_logs("k")) == 1


async def test_the_keys_live_as_long_as_the_result(redis: Redis, settings: Settings) -> None:
    store = _store(redis, settings)
    keys = Keys(settings.prefix)
    await store.write_news([RunNews("j", 1, "w:1", (0.1, "", 1), _lines(1))], 86_400_000)
    for key in (keys.job_log("j", 1), keys.job_progress("j")):
        assert 86_000_000 < await redis.pttl(key) <= 86_400_000
    # A progress-only write keeps the hash alive, the log keeps the TTL of its last line.
    await store.write_news([RunNews("j", 1, "w:2", (0.2, "", 2))], 1_000_000)
    assert await redis.pttl(keys.job_progress("j")) <= 1_000_000


async def test_a_batch_written_twice_is_applied_once(redis: Redis, settings: Settings) -> None:
    store = _store(redis, settings)
    run = RunNews("j", 1, "w:7", None, _lines(2))
    await store.write_news([run], 60_000)
    await store.write_news([run], 60_000)  # as redis-py sends again after a lost reply
    assert len(await store.job_logs("j")) == 2


async def test_a_key_of_another_type_is_skipped(redis: Redis, settings: Settings) -> None:
    store = _store(redis, settings)
    keys = Keys(settings.prefix)
    await redis.set(keys.job_log("bad", 1), "not a list")
    skipped = await store.write_news(
        [
            RunNews("bad", 1, "w:1", (0.5, "", 1), _lines(1)),
            RunNews("ok", 1, "w:1", None, _lines(1)),
        ],
        60_000,
    )
    assert skipped == 1
    assert await redis.get(keys.job_log("bad", 1)) == "not a list"
    assert not await redis.exists(keys.job_progress("bad"))  # nothing of it written
    assert len(await store.job_logs("ok")) == 1


async def test_bad_arguments_write_nothing(redis: Redis, settings: Settings) -> None:
    store = _store(redis, settings)
    keys = Keys(settings.prefix)
    # Three lines announced, one given: the batch is refused whole.
    reply = await store.call(
        "job_log",
        [keys.job_log("j", 1), keys.job_progress("j")],
        [200, 65536, 60000, 1, "t", "0.5", "", 0, 3, "x"],
    )
    assert reply == [Code.BAD_ARGS]
    assert not await redis.exists(keys.job_log("j", 1), keys.job_progress("j"))
