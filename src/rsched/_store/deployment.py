"""The deployment's fixed facts stored in Redis (``{prefix}:meta``): its number of partitions."""

from __future__ import annotations

from redis.asyncio import Redis
from redis.exceptions import NoPermissionError, ReadOnlyError

from rsched._core.errors import PartitionMismatch, StateError
from rsched._core.keys import Keys
from rsched._core.partitions import check_partitions
from rsched._core.settings import Settings


async def deployment_keys(redis: Redis, settings: Settings) -> Keys:
    """The keys of the deployment's partition 0, with the deployment's number of partitions.

    Reads ``{prefix}:meta``. A deployment used for the first time stores ``settings.partitions``
    (1 when unset) there, first writer wins; a process configured for another number than the
    stored one gets PartitionMismatch. A process whose Redis user may not write ``meta`` (a
    worker or read-only user, docs/security.md) takes that number without storing it: nothing
    was written yet that another number would hide. Every process calls this once at start.
    """
    meta = Keys(settings.prefix).meta
    raw = await redis.hget(meta, "partitions")
    if raw is None:  # a new deployment (a read first: a read-only user or replica can read on)
        try:
            await redis.hsetnx(meta, "partitions", settings.partitions or 1)
        except (NoPermissionError, ReadOnlyError):
            return Keys(settings.prefix, settings.partitions or 1)
        raw = await redis.hget(meta, "partitions")
    stored = _stored(meta, raw)
    if settings.partitions is not None and settings.partitions != stored:
        raise PartitionMismatch(settings.prefix, stored, settings.partitions)
    return Keys(settings.prefix, stored)


async def init_deployment(redis: Redis, prefix: str, partitions: int) -> bool:
    """Store the number of partitions of a new deployment (``rsched init``): True when stored
    now, False when the deployment has that number already. Raises PartitionMismatch (nothing
    written) when it has another."""
    meta = Keys(prefix).meta
    if await redis.hsetnx(meta, "partitions", check_partitions(partitions)):
        return True
    stored = _stored(meta, await redis.hget(meta, "partitions"))
    if stored != partitions:
        raise PartitionMismatch(prefix, stored, partitions)
    return False


def _stored(meta: str, raw: object) -> int:
    """The number of partitions ``meta`` holds (``raw``); StateError when it is no number."""
    try:
        return check_partitions(int(raw if isinstance(raw, (str, bytes)) else ""))
    except ValueError:
        raise StateError(
            f"{meta} field partitions holds {raw!r}, not a number of partitions: set it back "
            f"with redis-cli HSET {meta} partitions <N>"
        ) from None
