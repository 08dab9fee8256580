"""Starting the processes: ``rsched-scheduler`` and ``rsched-worker`` started before their Redis
wait for it (a ``redis.waiting`` line every few seconds at most, ``/livez`` up, ``/readyz`` 503)
and then start as usual; what waiting cannot fix stops them at once; a port in use is one line
and exit 2, for them and for ``rsched web``, which says "serving" only once it listens."""

from __future__ import annotations

import itertools
import os
import re
import signal
import socket
import time
from collections.abc import Callable, Iterator
from datetime import datetime

import anyio
import httpx
import pytest

import rsched
from rsched._cli.startup import LOG_EVERY_S
from rsched._core.settings import Settings
from rsched._devtools.embedded import free_port
from rsched._redis.connection import connect
from tests.support.fake_servers import BlackHole, HttpServer
from tests.support.paths import ROOT
from tests.support.processes import Proc, start_up_s
from tests.support.servers import Server
from tests.support.waiting import eventually
from tests.support.worker_app import any_, fast_env, marks_key

Spawn = Callable[..., Proc]
MakeServer = Callable[..., Server]
SCHEDULER = ("rsched._cli.scheduler_process", "--lease-ttl-ms", "1000", "--lease-renew-ms", "200")
WORKER = ("rsched._cli.worker_process", "tests.support.worker_app:worker")


def env_for(url: str, prefix: str, **extra: str) -> dict[str, str]:
    """A child's environment: ``url`` and ``prefix``, and no RSCHED_* setting of ours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RSCHED_")}
    env.update(PYTHONPATH=str(ROOT), RSCHED_REDIS_URL=url, RSCHED_PREFIX=prefix)
    return {**env, **extra}


def unreachable() -> str:
    return f"redis://127.0.0.1:{free_port()}/0"


def waiting_times(proc: Proc) -> list[float]:
    """When each ``redis.waiting`` line was logged (seconds since the epoch)."""
    found = re.findall(r"ts=(\S+) level=warning \S+ event=redis\.waiting ", proc.output())
    return [datetime.fromisoformat(ts).timestamp() for ts in found]


def probe_port(proc: Proc) -> int:
    found = re.search(r"event=metrics\.listening .*port=(\d+)", proc.output())
    assert found, proc.output()
    return int(found.group(1))


async def get(port: int, path: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as http:
        return await http.get(f"http://127.0.0.1:{port}{path}")


def error_line(output: str, program: str) -> str:
    """The one line ``program`` printed for its error, after checking there is no traceback."""
    assert "Traceback" not in output, output
    assert "ExceptionGroup" not in output, output
    lines = [line for line in output.splitlines() if line.startswith(f"{program}: ")]
    assert len(lines) == 1, output
    return lines[0]


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port something else listens on."""
    with socket.create_server(("127.0.0.1", 0)) as sock:
        yield int(sock.getsockname()[1])


# --- Redis absent at start ---------------------------------------------------------------------


@pytest.mark.slow
async def test_processes_started_before_redis_wait_for_it_then_work(
    make_server: MakeServer, spawn: Spawn, prefix: str
) -> None:
    srv = make_server()
    srv.stop()  # nothing listens on its port until it starts again below
    env = fast_env(Settings(redis_url=srv.url, prefix=prefix))
    scheduler = spawn(*SCHEDULER, "--metrics-port", "0", env=env)
    # `rsched worker` hands over to the main of rsched-worker.
    worker = spawn("rsched._cli.main", "worker", *WORKER[1:], "--metrics-port", "0", env=env)
    procs = (scheduler, worker)
    for proc in procs:
        await proc.appears("event=redis.waiting")
        port = probe_port(proc)
        assert (await get(port, "/livez")).status_code == 200
        ready = await get(port, "/readyz")
        assert ready.status_code == 503
        assert "redis" in ready.json()["reason"].lower()
    for proc in procs:  # still waiting, one line every LOG_EVERY_S at most
        await eventually(lambda proc=proc: len(waiting_times(proc)) >= 2)
        times = waiting_times(proc)
        assert all(b - a >= LOG_EVERY_S - 0.1 for a, b in itertools.pairwise(times))
        assert "cannot reach Redis at" in proc.output()
        assert proc.proc.poll() is None

    srv.start()
    await scheduler.appears("event=scheduler.ready")
    await scheduler.appears("event=leader.acquired")
    redis = connect(srv.url)
    try:
        async with rsched.Client(redis, Settings(redis_url=srv.url, prefix=prefix)) as client:
            await client.add({"id": "tick", "task": "app.noop", "every": 0.2})
            enqueued = (await client.enqueue("app.noop")).execution_id

        async def ran() -> bool:  # the enqueued job, and jobs the scheduler fired
            ids = [m.split(":")[1] for m in await any_(redis).lrange(marks_key(prefix), 0, -1)]
            return enqueued in ids and len(ids) >= 3

        await eventually(ran)
        for proc in procs:
            port = probe_port(proc)
            await eventually(lambda port=port: _ready(port))
            proc.signal(signal.SIGTERM)
            assert await anyio.to_thread.run_sync(proc.wait) == 0
            assert "Traceback" not in proc.output()
    finally:
        await redis.aclose()


async def _ready(port: int) -> bool:
    return (await get(port, "/readyz")).status_code == 200


@pytest.mark.slow
@pytest.mark.parametrize("silent", [False, True], ids=["down", "silent"])
async def test_sigterm_while_waiting_for_redis_exits_0_at_once(
    spawn: Spawn, prefix: str, silent: bool
) -> None:
    with BlackHole() as hole:  # accepts connections and never answers
        url = hole.url if silent else unreachable()
        env = env_for(url, prefix, RSCHED_SOCKET_TIMEOUT_S="1")
        procs = [spawn(*SCHEDULER, env=env), spawn(*WORKER, env=env)]
        for proc in procs:
            await proc.appears("event=redis.waiting")
        for proc in procs:
            started = time.monotonic()
            proc.signal(signal.SIGTERM)
            assert await anyio.to_thread.run_sync(proc.wait) == 0, proc.output()
            assert time.monotonic() - started < 5
            out = proc.output()
            assert ("did not answer within 1 s" if silent else "cannot reach Redis at") in out
            assert "Traceback" not in out


@pytest.mark.slow
@pytest.mark.parametrize("main", [SCHEDULER, WORKER], ids=["scheduler", "worker"])
def test_a_service_that_is_not_redis_stops_them_at_once(
    spawn: Spawn, prefix: str, main: tuple[str, ...]
) -> None:
    start_up = start_up_s()
    with HttpServer() as http:
        started = time.monotonic()
        proc = spawn(*main, env=env_for(http.url, prefix))
        assert proc.wait(timeout_s=60) == 1
    assert time.monotonic() - started - start_up < 10
    program = "rsched-scheduler" if main == SCHEDULER else "rsched-worker"
    assert "does not speak the Redis protocol" in error_line(proc.output(), program)
    assert "redis.waiting" not in proc.output()


# --- a port in use -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "program"),
    [
        (SCHEDULER, "rsched-scheduler"),
        (("rsched._cli.main", "scheduler", *SCHEDULER[1:]), "rsched-scheduler"),
        (WORKER, "rsched-worker"),
    ],
    ids=["scheduler", "rsched-scheduler", "worker"],
)
def test_a_metrics_port_in_use_is_one_line_and_exit_2(
    spawn: Spawn, prefix: str, taken_port: int, argv: tuple[str, ...], program: str
) -> None:
    # Redis is not even waited for: the port is taken before the first connection.
    env = env_for(unreachable(), prefix)
    proc = spawn(*argv, "--metrics-port", str(taken_port), env=env)
    assert proc.wait(timeout_s=30) == 2
    line = error_line(proc.output(), program)
    assert f"--metrics-port / RSCHED_METRICS_PORT: cannot listen on 127.0.0.1:{taken_port}" in line
    assert "in use" in line


def test_a_web_port_in_use_is_one_line_and_exit_2(
    spawn: Spawn, prefix: str, taken_port: int
) -> None:
    pytest.importorskip("uvicorn", reason="the web extra is not installed")
    proc = spawn(
        "rsched._cli.main", "web", "--port", str(taken_port), env=env_for(unreachable(), prefix)
    )
    assert proc.wait(timeout_s=30) == 2
    out = proc.output()
    assert "serving" not in out
    line = error_line(out, "rsched web")
    assert f"--host / --port: cannot listen on 127.0.0.1:{taken_port}" in line
    assert "in use" in line


@pytest.mark.slow
def test_web_says_serving_once_it_listens(spawn: Spawn, prefix: str) -> None:
    proc = spawn("rsched._cli.main", "web", "--port", "0", env=env_for(unreachable(), prefix))
    proc.wait_for("rsched web: serving")
    found = re.search(r"serving http://127\.0\.0\.1:(\d+)/", proc.output())
    assert found, proc.output()  # the port it listens on, not the 0 it was given
    # No retry: the first connection is accepted and answered.
    r = httpx.get(f"http://127.0.0.1:{found.group(1)}/static/rsched.css", timeout=30)
    assert r.status_code == 200
