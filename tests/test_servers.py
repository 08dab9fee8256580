"""The suite's private servers: real, on loopback, never the shared port."""

from __future__ import annotations

from redis.asyncio import Redis

from tests.support.servers import SHARED_PORT, Server


async def test_private_server_is_real_and_private(server: Server, redis: Redis) -> None:
    assert server.port != SHARED_PORT
    assert await redis.ping()
    info = await redis.info("server")
    version = str(info.get("valkey_version") or info["redis_version"])
    assert int(version.split(".")[0]) >= 7


def test_restart_keeps_address(make_server: object) -> None:
    import redis as sync_redis

    srv = make_server(appendonly=True)  # type: ignore[operator]
    with sync_redis.Redis.from_url(srv.url) as client:
        client.set("k", "v")
    srv.kill()
    srv.start()
    with sync_redis.Redis.from_url(srv.url) as client:
        assert client.get("k") == b"v"
