"""The deployment's fixed facts stored in Redis (``{prefix}:meta``): its number of partitions."""

from __future__ import annotations

from redis.asyncio import Redis

from rsched._errors import PartitionMismatch, StateError
from rsched._keys import Keys
from rsched._partition import check_partitions
from rsched._settings import Settings


async def deployment_keys(redis: Redis, settings: Settings) -> Keys:
    """The keys of the deployment's partition 0, with the deployment's number of partitions.

    Reads ``{prefix}:meta``. A deployment used for the first time stores ``settings.partitions``
    (1 when unset) there, first writer wins; a process configured for another number than the
    stored one gets PartitionMismatch. Every process calls this once at start.
    """
    meta = Keys(settings.prefix).meta
    wanted = settings.partitions or 1
    await redis.hsetnx(meta, "partitions", wanted)
    raw = await redis.hget(meta, "partitions")
    try:
        stored = check_partitions(int(raw if isinstance(raw, (str, bytes)) else ""))
    except ValueError:
        raise StateError(
            f"{meta} field partitions holds {raw!r}, not a number of partitions: set it back "
            f"with redis-cli HSET {meta} partitions <N>"
        ) from None
    if settings.partitions is not None and settings.partitions != stored:
        raise PartitionMismatch(settings.prefix, stored, settings.partitions)
    return Keys(settings.prefix, stored)
