"""Child Python processes a test starts (``python -m module args``), their output kept in a file."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from tests.support.waiting import WAIT_S, eventually, eventually_blocking


class Proc:
    """A child Python process (``python -m module args``) with its output kept in a file."""

    def __init__(self, module: str, *args: str, env: dict[str, str] | None = None) -> None:
        self.log = Path(tempfile.mkstemp(prefix="rsched-proc-", suffix=".log")[1])
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        with self.log.open("wb") as out, _sigint_default():
            self.proc = subprocess.Popen(
                [sys.executable, "-m", module, *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=full_env,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def says(self, text: str) -> bool:
        """Whether ``text`` is in the output; fails at once if the process ended without it."""
        ended = self.proc.poll() is not None  # before reading: the output is then complete
        if text in self.output():
            return True
        if ended:
            raise AssertionError(f"{text!r} never appeared; output:\n{self.output()[-4000:]}")
        return False

    def wait_for(self, text: str, timeout_s: float = WAIT_S) -> None:
        """Wait until ``text`` appears in the output; fail with the output otherwise."""
        eventually_blocking(lambda: self.says(text), timeout_s=timeout_s, what=self._missing(text))

    async def appears(self, text: str, timeout_s: float = WAIT_S) -> None:
        """:meth:`wait_for` without blocking the event loop."""
        await eventually(lambda: self.says(text), timeout_s=timeout_s, what=self._missing(text))

    def _missing(self, text: str) -> Callable[[], str]:
        return lambda: f"{text!r} in the output; output:\n{self.output()[-4000:]}"

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout_s: float = WAIT_S) -> int:
        return self.proc.wait(timeout_s)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self.log.unlink(missing_ok=True)


@contextlib.contextmanager
def _sigint_default() -> Iterator[None]:
    """A child started in here gets SIGINT as a terminal user's command does, whatever this
    process inherited: a test run started in the background of a script (``make test &`` in a
    non-interactive shell) has SIGINT ignored, a child inherits that, and a command that honours
    it, as rsched's CLI does, would not stop at a test's Ctrl-C."""
    ignored = (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    )
    if ignored:  # a handler of Python's own is reset to the default by the child's exec
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def start_up_s() -> float:
    """How long a child Python takes now to start and load rsched's command (``rsched
    --version``): what a test that times a whole child process subtracts, so that its bound
    holds on a loaded machine, where start-up alone can take seconds."""
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "rsched._cli.main", "--version"],
        capture_output=True,
        check=True,
        timeout=WAIT_S,
    )
    return time.monotonic() - started
