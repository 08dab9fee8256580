"""rsched._store.partitions.at_once: a partition's reads at once, a failure raised as itself."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from rsched._store.partitions import at_once


async def test_results_come_in_the_order_given_while_the_reads_overlap() -> None:
    started: list[str] = []
    both = anyio.Event()

    async def read(name: str, value: int) -> int:
        started.append(name)
        if len(started) == 2:
            both.set()
        await both.wait()  # each waits for the other: they run at the same time
        return value

    assert await at_once(read("a", 1), read("b", 2)) == [1, 2]


async def test_a_failure_is_raised_as_itself_not_in_a_group() -> None:
    """Callers translate Redis errors (rsched.RedisUnavailable and the like) as they would
    those of one read."""

    async def fine() -> int:
        await anyio.lowlevel.checkpoint()
        return 1

    async def lost() -> int:
        raise RedisConnectionError("connection refused")

    with pytest.raises(RedisConnectionError, match="connection refused"):
        await at_once(fine(), lost())
