"""Fixtures shared by the whole suite.

Integration tests run against private servers this suite starts itself (see
support/servers.py): one per server kind for the session (Redis 7 and Valkey, each test under
both), plus ``make_server`` for fault tests that kill and restart their own. Every test gets a
fresh key prefix, so tests never see each other's keys and nothing is flushed. No fixture here is
autouse: a server starts only for a test that asks for one, so tests/core starts none.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
from redis.asyncio import Redis

from rsched._core.settings import Settings
from rsched._redis.connection import connect
from tests.support.cluster import Cluster
from tests.support.command import Cli
from tests.support.processes import Proc
from tests.support.servers import Server, env_kinds

# rsched.testing's fixture (rsched_env), as a project using it loads it (docs/testing.md).
pytest_plugins = ("rsched.testing.plugin",)


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> None:
    # Every coroutine test runs under anyio without a marker on each one.
    if inspect.iscoroutinefunction(obj) and name.startswith("test"):
        pytest.mark.anyio(obj)
        pytest.mark.usefixtures("anyio_backend")(obj)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session", params=env_kinds())
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """A private server of each kind (redis, valkey) shared by the session."""
    srv = Server(request.param).start()
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture
def redis_url(server: Server, topology: str, request: pytest.FixtureRequest) -> str:
    if topology == "cluster":
        return str(request.getfixturevalue("cluster").url)
    return server.url


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def settings(redis_url: str, prefix: str, topology: str) -> Settings:
    return Settings(redis_url=redis_url, prefix=prefix, cluster=topology == "cluster")


@pytest.fixture
async def redis(redis_url: str, prefix: str, topology: str) -> AsyncIterator[Redis]:
    """A decoded async client (a cluster client on a cluster); the test's keys are deleted
    afterwards."""
    if topology == "cluster":
        client = connect(Settings(redis_url=redis_url, cluster=True))
    else:
        client = Redis.from_url(redis_url, decode_responses=True)
    try:
        yield client
    finally:
        keys = [k async for k in client.scan_iter(match=f"{{{prefix}}}:*", count=1000)]
        for start in range(0, len(keys), 1000):
            await client.delete(*keys[start : start + 1000])
        await client.aclose()


# --- clusters (support/cluster.py) ----------------------------------------------------------


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # A test marked ``cluster`` runs on one server and on a cluster of each kind.
    if metafunc.definition.get_closest_marker("cluster") and "topology" in metafunc.fixturenames:
        metafunc.parametrize("topology", ["single", "cluster"], indirect=True)


@pytest.fixture
def topology(request: pytest.FixtureRequest) -> str:
    """Where ``redis_url``, ``settings`` and ``redis`` point: "single" (the ``server``) or
    "cluster" (the session's ``cluster`` of the same kind, for tests marked ``cluster``)."""
    return str(getattr(request, "param", "single"))


@pytest.fixture(scope="session")
def cluster(server: Server) -> Iterator[Cluster]:
    """Three primaries of the kind of ``server``, shared by the session (no replicas)."""
    with Cluster(server.kind) as made:
        yield made


@pytest.fixture
def make_cluster(server: Server) -> Iterator[Callable[..., Cluster]]:
    """Factory of private clusters (kind of ``server``) for fault tests: ``replicas=True``
    gives each primary a replica."""
    made: list[Cluster] = []

    def make(*, replicas: bool = True) -> Cluster:
        new = Cluster(server.kind, replicas=replicas)
        made.append(new)
        return new.start()

    yield make
    for each in made:
        each.close()


@pytest.fixture
def make_server(server: Server) -> Iterator[Callable[..., Server]]:
    """Factory of extra private servers (same kind as ``server``) for fault tests."""
    made: list[Server] = []

    def make(*, appendonly: bool = False) -> Server:
        srv = Server(server.kind, appendonly=appendonly).start()
        made.append(srv)
        return srv

    yield make
    for srv in made:
        srv.close()


@pytest.fixture
def spawn() -> Iterator[Callable[..., Proc]]:
    """Start child processes (``spawn("rsched._cli.scheduler_process", "--flag")``); killed at
    the end."""
    procs: list[Proc] = []

    def start(module: str, *args: str, env: dict[str, str] | None = None) -> Proc:
        proc = Proc(module, *args, env=env)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.close()


@pytest.fixture
def cli(redis_url: str, prefix: str, topology: str, capsys: pytest.CaptureFixture[str]) -> Cli:
    """Run ``rsched ARGS`` in this process against the test's deployment (cheap set-up steps
    and reads); returns (code, out, err)."""
    from rsched._cli.main import main

    where = ["--redis-url", redis_url, "--prefix", prefix]
    if topology == "cluster":
        where.append("--cluster")

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main([*where, *args])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run
