"""Clients never hang, never leak, never show a traceback.

Against real servers (paused, read-only, out of memory, with a password or an ACL, TLS) and
fake ones (a black hole that accepts and never answers, garbage, HTTP, a cluster node that
answers MOVED): every call fails within about ``socket_timeout_s`` with one line that names the
fix, the processes stop on a signal while Redis hangs, and one client serves many calls at once.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis as redis_sync
from pydantic import ValidationError

import rsched
from rsched._core.settings import Settings, WorkerSettings
from rsched._devtools.embedded import free_port
from tests.support.fake_servers import BlackHole, Canned, Garbage, HttpServer
from tests.support.paths import ROOT
from tests.support.processes import Proc, start_up_s
from tests.support.servers import Server
from tests.support.waiting import eventually_blocking

Spawn = Callable[..., Proc]
MakeServer = Callable[..., Server]
CRON = ("--cron", "* * * * *", "--task", "t")


def cli(url: str, *argv: str, **env: str) -> tuple[int, str, float]:
    """Run ``rsched --redis-url url argv``; returns (exit code, stderr, seconds taken beyond the
    child's start-up)."""
    start_up = start_up_s()
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "rsched._cli.main", "--redis-url", url, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env={**_base_env(), **env},
    )
    return proc.returncode, proc.stderr, time.monotonic() - started - start_up


def _base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("RSCHED_")}


def one_line_error(stderr: str, *needles: str) -> str:
    """The CLI's error: one line, no traceback, containing each of ``needles``."""
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _wait_connected(port: int) -> None:
    """Wait until some client holds a TCP connection to 127.0.0.1:``port`` (a paused server's
    kernel still accepts them)."""
    eventually_blocking(lambda: _connected(port), what=f"a connection to port {port}")


def _connected(port: int) -> bool:
    # /proc/net/tcp: "sl local_address rem_address st ...", addresses as HEXIP:HEXPORT, st 01 is
    # ESTABLISHED.
    lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return any(
        int(f[2].split(":")[1], 16) == port and f[3] == "01" for f in (ln.split() for ln in lines)
    )


def admin(server: Server, password: str | None = None) -> Any:
    """A plain client of ``server`` (untyped: redis-py types replies as unions)."""
    return redis_sync.Redis(port=server.port, password=password, decode_responses=True)


# --- a SyncClient never keeps the interpreter alive -------------------------------------------


@pytest.mark.slow
def test_an_unclosed_sync_client_does_not_keep_the_interpreter_alive(
    redis_url: str, prefix: str
) -> None:
    script = textwrap.dedent(
        f"""
        import rsched
        client = rsched.SyncClient.from_url({redis_url!r}, prefix={prefix!r})
        client.add({{"id": "left-open", "task": "t", "every": 60}})
        print("added", client.get("left-open").id)
        """
    )
    start_up = start_up_s()
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "added left-open"
    assert "Traceback" not in proc.stderr
    assert time.monotonic() - started - start_up < 5


def test_close_is_idempotent_and_stops_the_loop_thread(redis_url: str, prefix: str) -> None:
    before = {t.name for t in threading.enumerate()}
    client = rsched.SyncClient.from_url(redis_url, prefix=prefix)
    assert client.server_time().year > 2000
    loop_threads = [t for t in threading.enumerate() if t.name == "rsched-sync-client"]
    assert loop_threads
    assert all(t.daemon for t in loop_threads)
    client.close()
    client.close()
    assert {t.name for t in threading.enumerate() if t.is_alive()} <= before | {"MainThread"}


# --- bounded waiting --------------------------------------------------------------------------


@pytest.mark.slow
async def test_an_sdk_call_to_a_black_hole_fails_within_the_default_socket_timeout(
    prefix: str,
) -> None:
    with BlackHole() as hole:
        async with rsched.Client.from_url(hole.url, prefix=prefix) as client:
            started = time.monotonic()
            with pytest.raises(rsched.RedisUnavailable, match="did not answer within 5 s"):
                await client.get("x")
            elapsed = time.monotonic() - started
    assert 4 < elapsed < 8, elapsed


async def test_a_timeout_is_never_retried(prefix: str) -> None:
    # redis-py's retries would otherwise wait the timeout out several times over.
    with BlackHole() as hole:
        async with rsched.Client.from_url(hole.url, prefix=prefix, socket_timeout_s=1) as client:
            started = time.monotonic()
            with pytest.raises(rsched.RedisUnavailable, match="RSCHED_SOCKET_TIMEOUT_S"):
                await client.list()
            assert time.monotonic() - started < 2.5
    assert len(hole.conns) == 1


def test_the_cli_gives_up_on_a_black_hole_within_the_socket_timeout() -> None:
    with BlackHole() as hole:
        code, err, elapsed = cli(hole.url, "ls", RSCHED_SOCKET_TIMEOUT_S="1")
    assert code == 1
    one_line_error(err, "did not answer within 1 s", "RSCHED_SOCKET_TIMEOUT_S")
    assert elapsed < 5, elapsed


def test_a_sync_client_gives_up_on_a_paused_server(make_server: MakeServer, prefix: str) -> None:
    srv = make_server()
    with rsched.SyncClient.from_url(srv.url, prefix=prefix, socket_timeout_s=1) as client:
        client.add({"id": "a", "task": "t", "every": 60})
        srv.pause()
        try:
            started = time.monotonic()
            with pytest.raises(rsched.RedisUnavailable, match="not paused or overloaded"):
                client.get("a")
            assert time.monotonic() - started < 2.5
        finally:
            srv.resume()
        assert client.get("a").id == "a"  # and it recovers once the server is back


def test_the_cli_gives_up_on_a_paused_server(make_server: MakeServer) -> None:
    srv = make_server()
    srv.pause()
    try:
        code, err, elapsed = cli(srv.url, "ls", RSCHED_SOCKET_TIMEOUT_S="1")
    finally:
        srv.resume()
    assert code == 1
    one_line_error(err, "did not answer within 1 s")
    assert elapsed < 5, elapsed


def test_block_ms_must_stay_below_the_socket_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = Settings()
    assert defaults.worker.block_ms + 500 <= defaults.socket_timeout_s * 1000
    with pytest.raises(ValidationError, match=r"worker\.block_ms \(1800\) must be at least 500 ms"):
        Settings(socket_timeout_s=2, worker=WorkerSettings(block_ms=1800))
    assert (
        Settings(socket_timeout_s=2, worker=WorkerSettings(block_ms=1500)).worker.block_ms == 1500
    )
    # Left unset, block_ms follows a short socket timeout; given, it is checked.
    assert Settings(socket_timeout_s=1).worker.block_ms == 500
    monkeypatch.setenv("RSCHED_SOCKET_TIMEOUT_S", "1.2")
    monkeypatch.setenv("RSCHED_WORKER__BLOCK_MS", "1000")
    with pytest.raises(ValidationError, match="lower RSCHED_WORKER__BLOCK_MS or raise"):
        Settings()


def test_bad_connection_settings_name_the_variables(spawn: Spawn) -> None:
    env = {
        "RSCHED_REDIS_URL": "redis://127.0.0.1:1/0",  # never reached: the settings are refused
        "RSCHED_SOCKET_TIMEOUT_S": "2",
        "RSCHED_WORKER__BLOCK_MS": "1800",
        "PYTHONPATH": str(ROOT),
    }
    for argv in (
        ["rsched._cli.scheduler_process"],
        ["rsched._cli.worker_process", "tests.support.worker_app:worker"],
    ):
        proc = spawn(*argv, env=env)
        assert proc.wait() == 2
        out = proc.output()
        assert "lower RSCHED_WORKER__BLOCK_MS or raise RSCHED_SOCKET_TIMEOUT_S" in out
        assert "Traceback" not in out
        assert len(out.strip().splitlines()) == 1, out
    code, err, _ = cli("redis://127.0.0.1:1/0", "ls", **env)
    assert code == 2
    one_line_error(err, "rsched: error: worker.block_ms (1800) must be at least 500 ms below")


@pytest.mark.slow
async def test_the_scheduler_stops_on_sigterm_while_redis_hangs(
    make_server: MakeServer, spawn: Spawn, prefix: str
) -> None:
    srv = make_server()
    proc = spawn(
        "rsched._cli.scheduler_process",
        "--redis-url",
        srv.url,
        "--prefix",
        prefix,
        "--lease-ttl-ms",
        "1000",
        "--lease-renew-ms",
        "200",
        env={"RSCHED_SOCKET_TIMEOUT_S": "2", "RSCHED_WORKER__BLOCK_MS": "1000"},
    )
    await anyio.to_thread.run_sync(proc.wait_for, "leader.acquired")
    srv.pause()
    try:
        await anyio.sleep(0.5)  # the scheduler is now waiting on the paused server
        started = time.monotonic()
        proc.signal(signal.SIGTERM)
        code = await anyio.to_thread.run_sync(proc.wait, 20.0)
        elapsed = time.monotonic() - started
    finally:
        srv.resume()
    assert code == 0, proc.output()
    # Its last calls (the ticker's read, the lease's release, leaving the schedulers' list) each
    # end within the 2 s socket timeout: ~4-6 s in all, and never the 20 s of a hang.
    assert elapsed < 12, elapsed
    assert "Traceback" not in proc.output()


@pytest.mark.slow
async def test_the_scheduler_stops_on_sigterm_while_redis_hangs_at_start_up(
    make_server: MakeServer, spawn: Spawn, prefix: str
) -> None:
    srv = make_server()
    srv.pause()
    try:
        proc = spawn(
            "rsched._cli.scheduler_process",
            "--redis-url",
            srv.url,
            "--prefix",
            prefix,
            env={"RSCHED_SOCKET_TIMEOUT_S": "30"},
        )
        # Signals are handled before the first connection: once connected, the process is
        # started and waiting on the server, however long its start took.
        await anyio.to_thread.run_sync(_wait_connected, srv.port)
        started = time.monotonic()
        proc.signal(signal.SIGTERM)
        code = await anyio.to_thread.run_sync(proc.wait, 20.0)
        elapsed = time.monotonic() - started
    finally:
        srv.resume()
    assert code == 0, proc.output()
    assert elapsed < 5, elapsed


@pytest.mark.slow
async def test_the_worker_stops_on_sigterm_within_its_grace_while_redis_hangs(
    make_server: MakeServer, spawn: Spawn, prefix: str
) -> None:
    srv = make_server()
    env = {
        "PYTHONPATH": str(ROOT),
        "RSCHED_REDIS_URL": srv.url,
        "RSCHED_PREFIX": prefix,
        "RSCHED_SOCKET_TIMEOUT_S": "2",
        "RSCHED_WORKER__BLOCK_MS": "1000",
        "RSCHED_WORKER__SHUTDOWN_GRACE_PERIOD_S": "3",
    }
    proc = spawn("rsched._cli.worker_process", "tests.support.worker_app:worker", env=env)
    await anyio.to_thread.run_sync(proc.wait_for, "event=worker.start")
    await anyio.sleep(1.0)  # reading, heartbeating, listening
    srv.pause()
    try:
        await anyio.sleep(0.5)
        started = time.monotonic()
        proc.signal(signal.SIGTERM)
        code = await anyio.to_thread.run_sync(proc.wait, 30.0)
        elapsed = time.monotonic() - started
    finally:
        srv.resume()
    assert code == 0, proc.output()
    assert elapsed < 3 + 8, elapsed  # the grace period, then a few bounded waits
    assert "Traceback" not in proc.output()


# --- errors a user can cause: one line that names the fix ---------------------------------------


def test_a_database_index_the_server_does_not_have(redis_url: str) -> None:
    code, err, _ = cli(redis_url.rsplit("/", 1)[0] + "/99", "ls")
    assert code == 1
    one_line_error(err, "has no database 99", "RSCHED_REDIS_URL")


async def test_a_database_index_the_server_does_not_have_sdk(redis_url: str, prefix: str) -> None:
    url = redis_url.rsplit("/", 1)[0] + "/99"
    async with rsched.Client.from_url(url, prefix=prefix) as client:
        with pytest.raises(rsched.RedisUrlMismatch, match="has no database 99"):
            await client.list()


@pytest.mark.parametrize("fake", [Garbage, HttpServer], ids=["garbage", "http"])
def test_a_service_that_is_not_redis(fake: Callable[[], Any]) -> None:
    with fake() as service:
        code, err, elapsed = cli(service.url, "ls")
    assert code == 1
    one_line_error(err, "does not speak the Redis protocol", "host and port of RSCHED_REDIS_URL")
    assert elapsed < 5


def test_a_cluster_node_answering_moved() -> None:
    with Canned(b"-MOVED 1234 127.0.0.1:7000") as node:
        code, err, _ = cli(node.url, "ls")
    assert code == 1
    one_line_error(err, "Redis Cluster node", "redis://127.0.0.1:7000/0")


async def test_a_cluster_node_answering_moved_sdk(prefix: str) -> None:
    with Canned(b"-MOVED 1234 127.0.0.1:7000") as node:
        async with rsched.Client.from_url(node.url, prefix=prefix) as client:
            with pytest.raises(rsched.WrongNode, match=r"redis://127\.0\.0\.1:7000/0"):
                await client.get("x")


@pytest.mark.slow
def test_missing_and_wrong_passwords_and_acl(make_server: MakeServer) -> None:
    srv = make_server()
    admin(srv).config_set("requirepass", "s3cret-pw")
    code, err, _ = cli(srv.url, "ls")
    assert code == 1
    one_line_error(err, "requires a password", "RSCHED_REDIS_URL")

    wrong = srv.url.replace("redis://", "redis://:wrong-pw@")
    code, err, _ = cli(wrong, "ls")
    assert code == 1
    line = one_line_error(err, "refused the user or password")
    assert "wrong-pw" not in line
    assert ":***@" in line

    root = admin(srv, "s3cret-pw")
    root.execute_command("ACL", "SETUSER", "reader", "on", ">reader-pw", "~*", "+@read")
    reader = srv.url.replace("redis://", "redis://reader:reader-pw@")
    code, err, _ = cli(reader, "ls")
    assert code == 1
    line = one_line_error(err, "may not do what rsched needs", "ACL SETUSER")
    assert "reader-pw" not in line


async def test_access_denied_is_a_server_error(make_server: MakeServer, prefix: str) -> None:
    srv = make_server()
    admin(srv).config_set("requirepass", "s3cret-pw")
    async with rsched.Client.from_url(srv.url, prefix=prefix) as client:
        with pytest.raises(rsched.AccessDenied) as info:
            await client.list()
    assert isinstance(info.value, rsched.ServerError)


def test_rediss_to_a_plain_server(redis_url: str) -> None:
    code, err, elapsed = cli(
        redis_url.replace("redis://", "rediss://"), "ls", RSCHED_SOCKET_TIMEOUT_S="1"
    )
    assert code == 1
    one_line_error(err, "does not use TLS", "write redis://")
    assert elapsed < 6


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[str]:
    """A redis-server that accepts TLS only; its redis:// URL."""
    binary, openssl = shutil.which("redis-server"), shutil.which("openssl")
    if binary is None or openssl is None:
        pytest.skip("needs redis-server and openssl")
    subprocess.run(
        [
            *(openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-keyout", "key.pem", "-out", "cert.pem"),
        ],
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    port = free_port()
    proc = subprocess.Popen(
        [
            *(binary, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1"),
            *("--tls-cert-file", "cert.pem", "--tls-key-file", "key.pem", "--tls-auth-clients"),
            *("no", "--save", "", "--appendonly", "no", "--dir", "."),
        ],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.skip("this redis-server cannot serve TLS")
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.kill()
        proc.wait(5)


def test_redis_to_a_tls_only_server(tls_server: str) -> None:
    code, err, elapsed = cli(tls_server, "ls")
    assert code == 1
    one_line_error(err, "accepts TLS connections only", "rediss://")
    assert elapsed < 6
    tls_url = tls_server.replace("redis://", "rediss://") + "?ssl_cert_reqs=none"
    code, err, _ = cli(tls_url, "ls")
    assert (code, err) == (0, "")


def _replica_of(make_server: MakeServer) -> tuple[Server, Server]:
    primary, replica = make_server(), make_server()
    admin(replica).execute_command("REPLICAOF", "127.0.0.1", str(primary.port))
    eventually_blocking(
        lambda: admin(replica).info("replication").get("master_link_status") == "up",
        what="the replica to sync",
    )
    return primary, replica


@pytest.mark.slow
def test_a_read_only_replica(make_server: MakeServer, spawn: Spawn, prefix: str) -> None:
    _, replica = _replica_of(make_server)
    code, err, _ = cli(replica.url, "--prefix", prefix, "add", "x", *CRON)
    assert code == 1
    one_line_error(err, "read-only replica", "primary")
    proc = spawn("rsched._cli.scheduler_process", "--redis-url", replica.url, "--prefix", prefix)
    assert proc.wait() == 1
    assert "is a replica" in proc.output()
    assert "Traceback" not in proc.output()


async def test_out_of_memory(make_server: MakeServer, prefix: str) -> None:
    srv = make_server()
    async with rsched.Client.from_url(srv.url, prefix=prefix) as client:
        await client.add({"id": "a", "task": "t", "every": 60})
        admin(srv).config_set("maxmemory", "1")
        with pytest.raises(rsched.ServerOutOfMemory, match="raise its maxmemory"):
            await client.enqueue("t")
    code, err, _ = cli(srv.url, "--prefix", prefix, "pause", "a")
    assert code == 1
    one_line_error(err, "out of memory", "maxmemory")


@pytest.mark.parametrize("main", ["rsched._cli.scheduler_process", "rsched._cli.worker_process"])
@pytest.mark.slow
def test_the_processes_refuse_a_wrong_server_in_one_line(
    make_server: MakeServer, spawn: Spawn, prefix: str, main: str
) -> None:
    srv = make_server()
    admin(srv).config_set("requirepass", "s3cret-pw")
    wrong = srv.url.replace("redis://", "redis://:wrong-pw@")
    argv = ("tests.support.worker_app:worker",) if main.endswith("worker_process") else ()
    start_up = start_up_s()
    env = {"PYTHONPATH": str(ROOT), "RSCHED_REDIS_URL": wrong}
    started = time.monotonic()
    proc = spawn(main, *argv, "--prefix", prefix, env=env)
    assert proc.wait() == 1, proc.output()
    assert time.monotonic() - started - start_up < 10
    out = proc.output()
    assert "refused the user or password" in out
    assert "wrong-pw" not in out
    assert "Traceback" not in out
    with Canned(b"-MOVED 1234 127.0.0.1:7000") as node:
        env["RSCHED_REDIS_URL"] = node.url
        proc = spawn(main, *argv, "--prefix", prefix, env=env)
        assert proc.wait() == 1, proc.output()
    assert "redis://127.0.0.1:7000/0" in proc.output()
    assert "Traceback" not in proc.output()


# --- one client, many concurrent calls ----------------------------------------------------------


@pytest.mark.slow
async def test_a_thousand_concurrent_calls_through_one_client(redis_url: str, prefix: str) -> None:
    n = 1000
    # The calls queue for the pool's 50 connections: the last one waits for most of the others,
    # which on a loaded machine can take longer than the default wait for a connection (10 s).
    async with rsched.Client.from_url(redis_url, prefix=prefix, pool_timeout_s=60) as client:
        results: list[Any] = [None] * n

        async def add(i: int) -> None:
            results[i] = await client.add({"id": f"s{i}", "task": "t", "every": 60})

        async def get(i: int) -> None:
            results[i] = await client.get(f"s{i}")

        for step in (add, get):
            results = [None] * n
            async with anyio.create_task_group() as tg:
                for i in range(n):
                    tg.start_soon(step, i)
            assert [r.id for r in results] == [f"s{i}" for i in range(n)]


def test_a_thousand_threads_share_one_sync_client(redis_url: str, prefix: str) -> None:
    n = 1000
    with rsched.SyncClient.from_url(redis_url, prefix=prefix) as client:
        client.add({"id": "shared", "task": "t", "every": 60})
        barrier = threading.Barrier(n)

        def read(_: int) -> str:
            barrier.wait(30)
            return client.get("shared").id

        with ThreadPoolExecutor(max_workers=n) as pool:
            got = list(pool.map(read, range(n)))
    assert got == ["shared"] * n


async def test_an_exhausted_pool_is_not_reported_as_unreachable(prefix: str) -> None:
    with BlackHole() as hole:
        async with rsched.Client.from_url(
            hole.url, prefix=prefix, socket_timeout_s=2, max_connections=1, pool_timeout_s=0.2
        ) as client:
            errors: list[BaseException] = []

            async def call() -> None:
                try:
                    await client.get("x")
                except rsched.RschedError as exc:
                    errors.append(exc)

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                await anyio.sleep(0.1)  # the first call holds the only connection
                tg.start_soon(call)
    pool_error, timeout_error = errors
    assert isinstance(pool_error, rsched.PoolExhausted)
    assert "RSCHED_MAX_CONNECTIONS" in str(pool_error)
    assert "cannot reach" not in str(pool_error)
    assert isinstance(timeout_error, rsched.RedisUnavailable)
