"""Reading back the keys a test's writes left in Redis."""

from __future__ import annotations

from redis.asyncio import Redis


async def written_keys(redis: Redis, prefix: str) -> list[str]:
    """The keys under ``prefix`` but the deployment's facts ({prefix}:meta, which a client
    stores on first use): what a write left."""
    meta = f"{{{prefix}}}:meta"
    return sorted([k async for k in redis.scan_iter(match=f"{{{prefix}}}:*") if k != meta])
