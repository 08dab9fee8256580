"""Production Redis: least privilege, TLS, passwords (docs/security.md).

The users are the ones docs/security.md documents, loaded as written (adapted to the test's
prefix the way the page says), into private servers of both kinds. The real scheduler, worker
and CLI run under them end to end; a worker's and a read-only user's writes are refused. TLS runs
against a private redis-server with certificates made here; a password never reaches any output.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

import rsched
from rsched._core.log import get_logger
from rsched._core.settings import Settings, safe_url
from rsched._devtools.embedded import free_port
from rsched._redis.connection import connect, warn_if_unsafe
from tests.support.cluster import Cluster
from tests.support.paths import ROOT
from tests.support.processes import Proc
from tests.support.secure_servers import (
    DOC,
    ROLES,
    AclFileServer,
    NotStarted,
    TlsServer,
    admin,
    denials,
    documented,
    for_test,
    load_users,
    password,
    user_url,
)
from tests.support.servers import Server, env_kinds
from tests.support.waiting import eventually, eventually_blocking
from tests.support.worker_app import fast_settings

Spawn = Callable[..., Proc]
MakeServer = Callable[..., Server]
FAST_SCHEDULER = ("--lease-ttl-ms", "1000", "--lease-renew-ms", "200")
FAST_WORKER = {
    "RSCHED_WORKER__BLOCK_MS": "200",
    "RSCHED_WORKER__HEARTBEAT_S": "0.2",
    "RSCHED_WORKER__VISIBILITY_TIMEOUT_S": "2",
    "RSCHED_WORKER__SHUTDOWN_GRACE_PERIOD_S": "1",
}


def run_cli(url: str, prefix: str, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``rsched --redis-url url --prefix prefix argv``, with no RSCHED_* variable of ours."""
    return subprocess.run(
        [sys.executable, "-m", "rsched._cli.main", "--redis-url", url, "--prefix", prefix, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env={**_clean_env(), **env},
    )


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("RSCHED_")}


def one_line(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    """The CLI's error (exit 1): one line, no traceback, containing each of ``needles``."""
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def refused(proc: subprocess.CompletedProcess[str]) -> str:
    """An AccessDenied: the NOPERM and where the rules are, in one line."""
    return one_line(proc, "may not do what rsched needs here", "NOPERM", "docs/security.md")


async def _in_state(sdk: rsched.Client, execution_id: str, state: str) -> bool:
    return (await sdk.job(execution_id)).state == state


def snapshot(server: Server, prefix: str) -> dict[str, Any]:
    """Every key of ``prefix`` with its type and value, to see that nothing changed."""
    root = admin(server)
    return {
        key: (root.type(key), _value(root, key))
        for key in root.scan_iter(match="{" + prefix + "}:*", count=1000)
    }


def _value(root: Any, key: str) -> Any:
    kind = root.type(key)
    reads = {
        "hash": root.hgetall,
        "zset": lambda k: root.zrange(k, 0, -1, withscores=True),
        "list": lambda k: root.lrange(k, 0, -1),
        "set": lambda k: sorted(root.smembers(k)),
        "string": root.get,
        "stream": lambda k: root.xrange(k),
    }
    return reads[kind](key)


# --- the documented rules -------------------------------------------------------------------------


def test_the_setuser_lines_and_the_aclfile_give_the_same_rules() -> None:
    setuser, aclfile = documented("setuser"), documented("aclfile")
    for user in ROLES:
        assert setuser[user] == "reset " + aclfile[user], user


@pytest.fixture
def users(make_server: MakeServer, prefix: str) -> Server:
    srv = make_server()
    load_users(srv, prefix)
    return srv


@pytest.mark.parametrize(
    "command",
    [
        ("FLUSHALL",), ("FLUSHDB",), ("KEYS", "*"), ("CONFIG", "GET", "*"),
        ("DEBUG", "SLEEP", "0"), ("SHUTDOWN",), ("ACL", "LIST"), ("MONITOR",), ("SCRIPT", "FLUSH"),
        ("CLIENT", "KILL", "ID", "1"), ("EVAL", "return 1", "0"), ("FUNCTION", "FLUSH"),
        ("SWAPDB", "0", "1"), ("MODULE", "LIST"),
    ],
    ids=lambda c: " ".join(c[:2]),
)  # fmt: skip
def test_no_role_may_run_administrative_commands(users: Server, command: tuple[str, ...]) -> None:
    root = admin(users)
    for user in ROLES:
        answer = str(root.execute_command("ACL", "DRYRUN", user, *command))
        assert answer != "OK", (user, command)


def test_of_the_dangerous_commands_only_the_start_up_checks_are_granted(users: Server) -> None:
    root = admin(users)
    dangerous = root.execute_command("ACL", "CAT", "dangerous")
    allowed: dict[str, set[str]] = {user: set() for user in ROLES}
    for name, info in root.execute_command("COMMAND", "INFO", *dangerous).items():
        parts = name.split("|")
        command = [*parts, *["x"] * (abs(int(info["arity"])) - len(parts))]
        for user in ROLES:
            answer = str(root.execute_command("ACL", "DRYRUN", user, *command))
            if answer == "OK":
                allowed[user].add(name)
            else:  # refused by the ACL, not by the arguments
                assert "permission" in answer, (user, command, answer)
    assert allowed == {
        "rsched-scheduler": {"info", "role"},
        "rsched-worker": {"info", "role"},
        "rsched-client": set(),
        "rsched-readonly": set(),
    }


def test_key_and_channel_permissions_of_each_role(users: Server, prefix: str) -> None:
    """What each role may touch, asked of the server (ACL DRYRUN), with and without partitions."""
    root = admin(users)

    def may(user: str, *command: str) -> bool:
        return str(root.execute_command("ACL", "DRYRUN", user, *command)) == "OK"

    for tag in ("{" + prefix + "}", "{" + prefix + ":3}", "{" + prefix + ":12.1}"):
        index, hash_ = f"{tag}:schedules", f"{tag}:schedule:a"
        assert may("rsched-worker", "HSET", hash_, "run", "x")  # the run marker
        assert not may("rsched-worker", "ZADD", index, "1", "a")
        assert not may("rsched-worker", "HSET", f"{tag}:ops:1", "r", "x")
        assert not may("rsched-worker", "SET", f"{tag}:leader", "x")
        assert may("rsched-worker", "XADD", f"{tag}:queue:default", "*", "f", "v")
        assert may("rsched-client", "ZADD", index, "1", "a")
        assert not may("rsched-client", "SET", f"{tag}:leader", "x")
        assert may("rsched-client", "GET", f"{tag}:leader")
        assert may("rsched-scheduler", "SET", f"{tag}:leader", "x")
        assert may("rsched-readonly", "ZRANGE", index, "0", "-1")
        assert not may("rsched-readonly", "ZADD", index, "1", "a")
        assert not may("rsched-readonly", "PUBLISH", f"{tag}:wake", "x")
    other = "{other}:schedules"
    for user in ROLES:
        assert not may(user, "ZRANGE", other, "0", "-1"), user
    assert may("rsched-worker", "SUBSCRIBE", "{" + prefix + "}:cancel")
    assert not may("rsched-worker", "PUBLISH", "{" + prefix + "}:wake", "x")
    assert may("rsched-client", "PUBLISH", "{" + prefix + "}:cancel", "x")


def test_the_aclfile_loads_on_both_kinds(server: Server, prefix: str) -> None:
    text = "".join(
        f"user {user} {' '.join(for_test(rules, user, prefix))}\n"
        for user, rules in documented("aclfile").items()
    )
    srv = AclFileServer(server.kind, text).start()
    try:
        listed = srv.client().execute_command("ACL", "LIST")
        assert sorted(line.split()[1] for line in listed) == sorted(["default", *ROLES])
    finally:
        srv.close()


async def test_the_start_up_check_warns_under_the_worker_user(users: Server) -> None:
    admin(users).config_set("maxmemory-policy", "allkeys-lru")  # and appendonly is off
    redis = connect(user_url(users, "rsched-worker"))
    try:
        warnings = await warn_if_unsafe(redis, get_logger("rsched.test"))
    finally:
        await redis.aclose()
    assert [w.split()[0] for w in warnings] == ["appendonly", "maxmemory-policy"]
    assert denials(users) == []


# --- every role end to end under its own user -----------------------------------------------------


def role_env(url: str, prefix: str, **extra: str) -> dict[str, str]:
    return {"RSCHED_REDIS_URL": url, "RSCHED_PREFIX": prefix, "PYTHONPATH": str(ROOT), **extra}


#: The leader's sweeps, health watch and gauges every 0.2 s, so that the test sees them run.
BUSY_LEADER = {
    "RSCHED_RETENTION__INTERVAL_S": "0.2",
    "RSCHED_HEALTH__CHECK_INTERVAL_S": "0.2",
    "RSCHED_METRICS_INTERVAL_S": "0.2",
    "RSCHED_LOG_LEVEL": "debug",
}


def start_processes(spawn: Spawn, srv: Server, prefix: str, tmp: Path) -> tuple[Proc, Proc]:
    """The scheduler (syncing a schedules file) and the worker, each under its own user."""
    schedules = tmp / "schedules.toml"
    schedules.write_text('[[schedule]]\nid = "from-file"\ntask = "sec.ok"\nevery = "1h"\n')
    scheduler = spawn(
        "rsched._cli.scheduler_process",
        *FAST_SCHEDULER,
        *("--metrics-port", "0", "--schedules", str(schedules)),
        env=role_env(user_url(srv, "rsched-scheduler"), prefix, **BUSY_LEADER),
    )
    worker = spawn(
        "rsched._cli.worker_process",
        "tests.support.secure_servers:worker",
        "--metrics-port",
        "0",
        env=role_env(
            user_url(srv, "rsched-worker"), prefix, RSCHED_LOG_LEVEL="debug", **FAST_WORKER
        ),
    )
    return scheduler, worker


def completed(srv: Server, prefix: str, execution_prefix: str) -> bool:
    runs = admin(srv).xrange("{" + prefix + "}:runs")
    return any(
        '"completed"' in str(fields) and execution_prefix in str(fields) for _, fields in runs
    )


@pytest.mark.slow
async def test_scheduler_worker_and_cli_run_under_their_own_users(
    users: Server, spawn: Spawn, prefix: str, tmp_path: Path
) -> None:
    client, readonly = user_url(users, "rsched-client"), user_url(users, "rsched-readonly")
    added = run_cli(client, prefix, "add", "tick", "--every", "1s", "--task", "sec.ok")
    assert added.returncode == 0, added.stderr
    scheduler, worker = start_processes(spawn, users, prefix, tmp_path)
    eventually_blocking(lambda: completed(users, prefix, "tick@"), what="a fired run to complete")
    for argv in (["sec.ok", "--id", "one-off"], ["sec.fail", "--max-retries", "0"],
                 ["sec.slow", "--id", "slow-1"]):  # fmt: skip
        enqueued = run_cli(client, prefix, "enqueue", *argv)
        assert enqueued.returncode == 0, enqueued.stderr
    eventually_blocking(
        lambda: completed(users, prefix, "one-off"), what="an enqueued job to complete"
    )
    root = admin(users)
    eventually_blocking(lambda: root.xlen("{" + prefix + "}:dead:default"), what="a dead letter")
    eventually_blocking(
        lambda: root.hget("{" + prefix + "}:schedule:from-file", "task"), what="a sync"
    )
    for argv in (["ls"], ["runs"], ["stats"], ["job", "one-off"], ["job", "one-off", "--logs"]):
        done = run_cli(client, prefix, *argv)
        assert done.returncode == 0, (argv, done.stderr)
    assert "tick" in run_cli(readonly, prefix, "ls").stdout
    eventually_blocking(
        lambda: "ran under ACL" in run_cli(readonly, prefix, "job", "one-off", "--logs").stdout,
        what="the job's log, read by the read-only user",
    )
    async with rsched.Client.from_url(client, prefix=prefix) as sdk:
        await eventually(lambda: _in_state(sdk, "slow-1", "running"))
        assert await sdk.cancel("slow-1") == "running"
        await eventually(lambda: _in_state(sdk, "slow-1", "cancelled"))
        await sdk.requeue("default")
        await sdk.pause("tick")
        await sdk.resume("tick")
        await sdk.trigger("tick")
        await sdk.update("tick", description="under ACL")
        await sdk.set_calendar("holidays", dates=["2030-12-25"])
        await sdk.update("tick", exclude=["holidays"], jitter="10ms")
        assert [c.name for c in await sdk.calendars()] == ["holidays"]
        now = await sdk.server_time()
        await sdk.backfill("tick", now - timedelta(seconds=3), now)
        await sdk.enqueue("sec.ok", execution_id="later", delay="1m")
        await sdk.cancel("later")
        burst = [await sdk.enqueue("sec.ok", debounce_key="burst", debounce="50ms") for _ in "ab"]
        assert [e.created for e in burst] == [True, False]
        # Flows: one run by hand, one a schedule starts (the worker's starter job), one
        # cancelled while its step waits on a queue no worker reads.
        flow = rsched.chain(
            rsched.group(rsched.step("sec.ok"), rsched.step("sec.ok")), rsched.step("sec.ok")
        )
        ran = await sdk.run_flow(flow)
        await sdk.add(rsched.Schedule(id="flowed", every="1h", flow=flow))
        started = await sdk.trigger("flowed")
        idle = await sdk.run_flow(rsched.step("sec.ok", queue="idle"))
        assert await sdk.cancel_flow(idle.flow_id)
        for flow_id in (ran.flow_id, started.execution_id):
            await eventually(lambda f=flow_id: _flow_completed(sdk, f), what="a flow's end")
        await sdk.remove("flowed")
        await sdk.purge("default")
        await sdk.remove("tick")
        await sdk.remove_calendar("holidays")
    for proc in (scheduler, worker):  # readiness and metrics read with these users too
        port = re.search(r"metrics.listening .*port=(\d+)", proc.output())
        assert port is not None, proc.output()[-2000:]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port[1]}") as http:
            for path in ("/readyz", "/metrics"):
                got = await http.get(path, timeout=10)
                assert got.status_code == 200, (path, got.text[:300])
            # The deployment gauges were read under the process's own user.
            assert "rsched_redis_up 1.0" in got.text
            assert "rsched_due_backlog" in got.text
        proc.signal(signal.SIGTERM)
        assert proc.wait() == 0, proc.output()[-2000:]
    assert denials(users) == []
    assert "server.check_skipped" not in scheduler.output() + worker.output()
    assert "retention.sweep" in scheduler.output()


SPEC = {"id": "nightly", "task": "sec.ok", "every": 3600}


async def writes(client: rsched.Client) -> dict[str, Callable[[], Any]]:
    """Every write of the SDK, on the schedule ``nightly``, a queue and a job."""
    now = await client.server_time()
    return {
        "add": lambda: client.add({**SPEC, "id": "another"}),
        "upsert": lambda: client.upsert({**SPEC, "payload": {"changed": True}}),
        "upsert_many": lambda: client.upsert_many([{**SPEC, "every": 60}]),
        "update": lambda: client.update("nightly", description="changed"),
        "pause": lambda: client.pause("nightly"),
        "resume": lambda: client.resume("nightly"),
        "trigger": lambda: client.trigger("nightly"),
        "backfill": lambda: client.backfill("nightly", now - timedelta(hours=3), now),
        "remove": lambda: client.remove("nightly"),
        "set_calendar": lambda: client.set_calendar("holidays", dates=["2030-12-25"]),
        "enqueue": lambda: client.enqueue("sec.ok", execution_id="by-hand"),
        "debounce": lambda: client.enqueue("sec.ok", debounce_key="burst", debounce="1m"),
        "cancel": lambda: client.cancel("waiting"),
        "requeue": lambda: client.requeue("default"),
        "purge": lambda: client.purge("default"),
    }


async def refused_writes(users: Server, prefix: str, user: str, expected: set[str]) -> None:
    """Try each write in ``expected`` as ``user``: each must be refused with AccessDenied, and
    the keys of ``prefix`` must not change."""
    async with rsched.Client.from_url(user_url(users, "rsched-client"), prefix=prefix) as owner:
        await owner.add(SPEC)
        await owner.enqueue("sec.ok", execution_id="waiting", delay="1h")
    job = ["execution_id", "died", "task", "sec.ok", "payload", "{}", "attempt", "1"]
    dead = {
        "execution_id": "died",
        "task": "sec.ok",
        "reason": "max_retries",
        "job": json.dumps(job),
    }
    admin(users).xadd("{" + prefix + "}:dead:default", dead)  # for requeue and purge
    before = snapshot(users, prefix)
    async with rsched.Client.from_url(user_url(users, user), prefix=prefix) as client:
        for name, write in (await writes(client)).items():
            if name not in expected:
                continue
            try:
                await write()
            except rsched.AccessDenied as exc:
                refusal = str(exc)
            else:
                pytest.fail(f"{user} may {name}")
            assert "may not do what rsched needs" in refusal, (name, refusal)
    assert snapshot(users, prefix) == before


SCHEDULE_WRITES = {
    "add", "upsert", "upsert_many", "update", "pause", "resume", "trigger", "backfill", "remove",
    "set_calendar",
}  # fmt: skip


async def test_a_worker_user_cannot_change_schedules(users: Server, prefix: str) -> None:
    await refused_writes(users, prefix, "rsched-worker", SCHEDULE_WRITES | {"enqueue", "debounce"})
    worker = user_url(users, "rsched-worker")
    refused(run_cli(worker, prefix, "pause", "nightly"))
    line = refused(run_cli(worker, prefix, "add", "x", "--every", "1m", "--task", "sec.ok"))
    assert password("rsched-worker") not in line


#: What docs/security.md adds to the worker's user when its handlers enqueue jobs.
MAY_ENQUEUE = (
    "ACL SETUSER rsched-worker ~{rsched}:ops:* ~{rsched:[0-9]*}:ops:* ~{rsched}:debounce:* "
    "~{rsched:[0-9]*}:debounce:*"
)


async def test_a_worker_that_may_enqueue_still_cannot_change_schedules(
    users: Server, prefix: str
) -> None:
    assert MAY_ENQUEUE in DOC.read_text()
    rules = for_test(MAY_ENQUEUE.removeprefix("ACL SETUSER rsched-worker "), "", prefix)
    admin(users).execute_command("ACL", "SETUSER", "rsched-worker", *rules)
    await refused_writes(users, prefix, "rsched-worker", SCHEDULE_WRITES)
    async with rsched.Client.from_url(user_url(users, "rsched-worker"), prefix=prefix) as client:
        assert (await client.enqueue("sec.ok")).created
        assert (await client.enqueue("sec.ok", debounce_key="burst", debounce="1m")).created


async def test_a_client_user_with_durability_has_its_writes_judged_without_info(
    users: Server, prefix: str
) -> None:
    # The client user may not run INFO, which the durability check reads: the check is skipped
    # and the write's own WAIT still tells (this server has no replica).
    url = user_url(users, "rsched-client")
    async with rsched.Client.from_url(
        url, prefix=prefix, durability="replicated", durability_timeout_ms=20
    ) as client:
        with pytest.raises(rsched.WriteNotReplicated):
            await client.add({"id": "judged", "task": "sec.ok", "every": "1m"})
        assert (await client.get("judged")).id == "judged"


async def test_the_read_only_user_writes_nothing(users: Server, prefix: str) -> None:
    every_write = SCHEDULE_WRITES | {"enqueue", "debounce", "cancel", "requeue", "purge"}
    await refused_writes(users, prefix, "rsched-readonly", every_write)
    readonly = user_url(users, "rsched-readonly")
    refused(run_cli(readonly, prefix, "enqueue", "sec.ok"))
    admin(users).execute_command("ACL", "LOG", "RESET")
    async with rsched.Client.from_url(readonly, prefix=prefix) as client:
        assert [s.id for s in (await client.list()).items] == ["nightly"]
        assert (await client.job("waiting")).state == "delayed"
        await client.stats()
        await client.health()
        await client.schedule_health("nightly")  # its next run read with the index's ZMSCORE
        await client.runs()
        await client.workers()
        await client.jobs()
        await client.events()
        await client.history("nightly")
        await client.select(labels={"team": "a"}, task="t")
        await client.select(queue="default")
    assert denials(users) == []


async def test_the_read_only_dashboard_under_the_read_only_user(users: Server, prefix: str) -> None:
    serve = web_support().serve
    async with rsched.Client.from_url(user_url(users, "rsched-client"), prefix=prefix) as owner:
        await owner.add(SPEC)
        await owner.enqueue("sec.ok", execution_id="waiting", delay="1h")
    settings = Settings(redis_url=user_url(users, "rsched-readonly"), prefix=prefix)
    with serve(settings, read_only=True) as base:
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            for path in ("/", "/schedules", "/schedules/nightly", "/queues", "/workers", "/runs",
                         "/api/v1/schedules", "/api/v1/stats", "/api/v1/jobs/waiting",
                         "/api/v1/queues/default/dead-letters", "/api/v1/events"):  # fmt: skip
                got = await http.get(path)
                assert got.status_code == 200, (path, got.text[:300])
    assert denials(users) == []


def web_support() -> Any:
    """tests/support/web.py, or a skip where the web extra is not installed (.venv-min)."""
    pytest.importorskip("uvicorn")
    from tests.support import web as web_support

    return web_support


# --- the same users on a cluster (ACL SETUSER on every node) ------------------------------------


@pytest.fixture(scope="module")
def acl_cluster(server: Server) -> Iterator[Cluster]:
    """Three primaries of the kind of ``server``, for this module's cluster tests."""
    with Cluster(server.kind) as made:
        yield made


@pytest.fixture
def cluster_users(acl_cluster: Cluster, prefix: str) -> Cluster:
    """``acl_cluster`` with the documented users for ``prefix`` on every node."""
    for node in acl_cluster.nodes:
        load_users(node, prefix)
    return acl_cluster


def cluster_settings(cluster: Cluster, user: str, prefix: str) -> Settings:
    """A deployment of 3 partitions, one on each primary, as ``user``."""
    url = user_url(cluster.primaries()[0], user)
    return Settings(redis_url=url, prefix=prefix, cluster=True, partitions=3)


def cluster_denials(cluster: Cluster) -> list[str]:
    return [f"{node.port} {denial}" for node in cluster.nodes for denial in denials(node)]


async def test_every_role_of_the_sdk_under_its_user_on_a_cluster(
    cluster_users: Cluster, prefix: str
) -> None:
    cluster = cluster_users
    settings = {user: cluster_settings(cluster, user, prefix) for user in ROLES}
    worker = rsched.Worker(queues=["default"], settings=fast_settings(settings["rsched-worker"]))
    ran: list[str] = []

    @worker.task("sec.ok")
    async def ok(job: rsched.Job) -> None:
        ran.append(job.execution_id)

    async with rsched.Client.from_settings(settings["rsched-client"]) as client:
        await client.add_many([{**SPEC, "id": f"s{n}", "labels": {"team": "a"}} for n in range(6)])
        await client.pause("s0")
        await client.resume("s0")
        await client.update("s5", labels={"team": "b"})
        assert (await client.pause_many(await client.select(labels={"team": "b"}))).count("paused")
        await client.resume_many(["s5"])
        await client.trigger("s1")
        ids = [(await client.enqueue("sec.ok")).execution_id for _ in range(6)]
        async with anyio.create_task_group() as tg:
            await tg.start(worker.run, None)
            await eventually(lambda: len(ran) >= len(ids) + 1)
            worker.stop()
    async with rsched.Client.from_settings(settings["rsched-readonly"]) as readonly:
        assert len((await readonly.list()).items) == 6
        assert await readonly.select(labels={"team": "a"}) == [f"s{n}" for n in range(5)]
        assert len(await readonly.select(task="sec.ok")) == 6
        assert len((await readonly.list(labels=["team=a"])).items) == 5
        assert (await readonly.job(ids[0])).state == "completed"
        await readonly.stats()
        await readonly.health()
        await readonly.schedule_health("s1")
        await readonly.runs()
        await readonly.jobs()
    assert cluster_denials(cluster) == []


async def test_a_user_without_cluster_slots_is_told_so(cluster_users: Cluster, prefix: str) -> None:
    for node in cluster_users.nodes:
        admin(node).execute_command("ACL", "SETUSER", "rsched-readonly", "-cluster|slots")
    settings = cluster_settings(cluster_users, "rsched-readonly", prefix)
    async with rsched.Client.from_settings(settings) as client:
        with pytest.raises(rsched.AccessDenied, match=r"NOPERM.*cluster\|slots"):
            await client.list()


@pytest.mark.slow
def test_scheduler_worker_and_cli_under_their_users_on_a_cluster(
    cluster_users: Cluster, spawn: Spawn, prefix: str, tmp_path: Path
) -> None:
    cluster = cluster_users
    node = cluster.primaries()[0]
    on_cluster = {"RSCHED_CLUSTER": "true", "RSCHED_PARTITIONS": "3"}
    client = user_url(node, "rsched-client")
    added = run_cli(
        client, prefix, "add", "tick", "--every", "1s", "--task", "sec.ok", **on_cluster
    )
    assert added.returncode == 0, added.stderr
    schedules = tmp_path / "schedules.toml"
    schedules.write_text('[[schedule]]\nid = "from-file"\ntask = "sec.ok"\nevery = "1h"\n')
    scheduler = spawn(
        "rsched._cli.scheduler_process",
        *FAST_SCHEDULER,
        *("--schedules", str(schedules)),
        env=role_env(user_url(node, "rsched-scheduler"), prefix, **on_cluster, **BUSY_LEADER),
    )
    worker = spawn(
        "rsched._cli.worker_process",
        "tests.support.secure_servers:worker",
        env=role_env(user_url(node, "rsched-worker"), prefix, **on_cluster, **FAST_WORKER),
    )
    enqueued = run_cli(client, prefix, "enqueue", "sec.ok", "--id", "one-off", **on_cluster)
    assert enqueued.returncode == 0, enqueued.stderr

    def shown(*argv: str, user: str = "rsched-client") -> str:
        done = run_cli(user_url(node, user), prefix, *argv, **on_cluster)
        assert done.returncode == 0, (argv, done.stderr)
        return done.stdout

    eventually_blocking(
        lambda: "completed" in shown("job", "one-off"), what="the enqueued job to run"
    )
    eventually_blocking(lambda: "from-file" in shown("ls"), what="the schedules file's sync")
    eventually_blocking(lambda: "tick" in shown("runs"), what="a fired run")
    assert "tick" in shown("ls", user="rsched-readonly")
    shown("stats", user="rsched-readonly")
    for proc in (scheduler, worker):
        proc.signal(signal.SIGTERM)
        assert proc.wait() == 0, proc.output()[-2000:]
    assert cluster_denials(cluster) == []
    assert "server.check_skipped" not in scheduler.output() + worker.output()
    assert "retention.sweep" in scheduler.output()


async def test_the_read_only_dashboard_under_its_user_on_a_cluster(
    cluster_users: Cluster, prefix: str
) -> None:
    serve = web_support().serve
    cluster = cluster_users
    async with rsched.Client.from_settings(cluster_settings(cluster, "rsched-client", prefix)) as c:
        await c.add(SPEC)
        await c.enqueue("sec.ok", execution_id="waiting", delay="1h")
    with serve(cluster_settings(cluster, "rsched-readonly", prefix), read_only=True) as base:
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            for path in ("/", "/schedules", "/schedules/nightly", "/queues", "/workers", "/runs",
                         "/api/v1/stats", "/api/v1/jobs/waiting"):  # fmt: skip
                got = await http.get(path)
                assert got.status_code == 200, (path, got.text[:300])
    assert cluster_denials(cluster) == []


# --- TLS ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=env_kinds())
def tls(request: pytest.FixtureRequest) -> Iterator[TlsServer]:
    """A private server of each kind that speaks TLS only; skipped for a binary without TLS."""
    if shutil.which("openssl") is None:
        pytest.skip("the TLS tests make certificates with openssl (Debian: apt install openssl)")
    try:
        srv = TlsServer(request.param).start()
    except NotStarted as exc:
        pytest.skip(f"{request.param}: this binary is built without TLS ({str(exc)[-60:]})")
    try:
        yield srv
    finally:
        srv.close()


@pytest.mark.slow
def test_a_schedule_runs_over_tls(tls: TlsServer, spawn: Spawn, prefix: str) -> None:
    ca = {"RSCHED_TLS_CA_FILE": str(tls.certs.ca)}
    in_url = f"{tls.url}?ssl_ca_certs={tls.certs.ca}"
    added = run_cli(in_url, prefix, "add", "tls", "--every", "1s", "--task", "sec.ok")
    assert added.returncode == 0, added.stderr
    spawn("rsched._cli.scheduler_process", *FAST_SCHEDULER, env=role_env(tls.url, prefix, **ca))
    spawn("rsched._cli.worker_process", "tests.support.secure_servers:worker",
          env=role_env(tls.url, prefix, **ca, **FAST_WORKER))  # fmt: skip
    client = tls.client()
    eventually_blocking(
        lambda: '"completed"' in str(client.xrange("{" + prefix + "}:runs")),
        what="a run over TLS",
    )
    listed = run_cli(tls.url, prefix, "ls", **ca)
    assert listed.returncode == 0, listed.stderr
    assert "tls" in listed.stdout
    localhost = tls.url.replace("127.0.0.1", "localhost")  # the other name the certificate lists
    assert run_cli(localhost, prefix, "ls", **ca).returncode == 0


def test_a_certificate_no_given_ca_signed(tls: TlsServer, prefix: str) -> None:
    for env in ({}, {"RSCHED_TLS_CA_FILE": str(tls.certs.other_ca)}):
        started = time.monotonic()
        line = one_line(
            run_cli(tls.url, prefix, "ls", **env),
            "TLS certificate of rediss://127.0.0.1:",
            "could not be verified",
            "RSCHED_TLS_CA_FILE",
        )
        assert "self-signed" in line or "issuer" in line, line
        assert time.monotonic() - started < 8
    env = {**_clean_env(), **role_env(tls.url, prefix)}
    for main in (
        "rsched._cli.scheduler_process",
        "rsched._cli.worker_process tests.support.secure_servers:worker",
    ):
        proc = subprocess.run(
            [sys.executable, "-m", *main.split()], env=env, capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
        assert proc.returncode == 1, (main, proc.stdout, proc.stderr)
        assert "could not be verified" in proc.stdout + proc.stderr, (main, proc.stderr)
        assert "Traceback" not in proc.stdout + proc.stderr


def test_a_certificate_for_another_host(tls: TlsServer, prefix: str) -> None:
    other = tls.url.replace("127.0.0.1", "127.0.0.2")
    one_line(
        run_cli(other, prefix, "ls", RSCHED_TLS_CA_FILE=str(tls.certs.ca)),
        "does not name that host",
        "subjectAltName",
    )


def test_plain_text_to_the_tls_port(tls: TlsServer, prefix: str) -> None:
    plain = tls.url.replace("rediss://", "redis://")
    one_line(run_cli(plain, prefix, "ls"), "accepts TLS connections only", "rediss://")


def test_tls_settings_are_checked(server: Server, prefix: str, tmp_path: Path) -> None:
    missing = run_cli(server.url, prefix, "ls", RSCHED_TLS_CA_FILE=str(tmp_path / "no.pem"))
    assert missing.returncode == 2, missing.stderr
    assert "RSCHED_TLS_CA_FILE" in missing.stderr, missing.stderr
    assert "Traceback" not in missing.stderr
    ca = tmp_path / "ca.pem"
    ca.write_text("not used")
    one_line(run_cli(server.url, prefix, "ls", RSCHED_TLS_CA_FILE=str(ca)), "write rediss://")


# --- passwords ------------------------------------------------------------------------------------

SECRET = "Zq81-never-shown"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"redis://u:{SECRET}@h:6380/0", "redis://u:***@h:6380/0"),
        (f"redis://:{SECRET}@h/1", "redis://:***@h/1"),
        (f"rediss://u:{SECRET}@h:1/0?ssl_ca_certs=/ca.pem", "rediss://u:***@h:1/0?ssl_ca_certs=/ca.pem"),
        (f"redis://h:1/0?password={SECRET}&db=2", "redis://h:1/0?password=***&db=2"),
        (f"redis://u:{SECRET}@h:port/0", "redis://u:***@h:port/0"),
        ("redis://h:1/0", "redis://h:1/0"),
        ("redis://[::1", "<an invalid URL>"),
    ],
)  # fmt: skip
def test_safe_url(url: str, shown: str) -> None:
    assert safe_url(url) == shown


def test_settings_never_show_the_password() -> None:
    settings = Settings(redis_url=f"redis://u:{SECRET}@h:1/0")
    for text in (repr(settings), str(settings), repr({"s": settings})):
        assert SECRET not in text
        assert "redis://u:***@h:1/0" in text
    assert settings.url.endswith(f"{SECRET}@h:1/0")  # what connects still has it


def test_the_demo_banner_never_shows_the_password(capsys: pytest.CaptureFixture[str]) -> None:
    from rsched._devtools.demo import main as _demo

    _demo._banner(_demo.Target(f"redis://u:{SECRET}@h:1/0", "rsched", None), "Redis 7.0", [])
    out = capsys.readouterr().out + _demo._explain(OSError("refused"), f"redis://:{SECRET}@h/0")
    assert "redis://u:***@h:1/0" in out
    assert SECRET not in out


def with_secret(port: int, user: str = "default") -> str:
    return f"redis://{user}:{SECRET}@127.0.0.1:{port}/0"


def run_processes(spawn: Spawn, url: str, prefix: str, *until: str) -> str:
    """The scheduler's and the worker's output (debug logs) until each said its ``until`` or
    exited, then SIGTERM."""
    env = role_env(
        url, prefix, RSCHED_LOG_LEVEL="debug", RSCHED_SOCKET_TIMEOUT_S="1", **FAST_WORKER
    )
    procs = [
        spawn("rsched._cli.scheduler_process", *FAST_SCHEDULER, env=env),
        spawn("rsched._cli.worker_process", "tests.support.secure_servers:worker", env=env),
    ]
    for proc, text in zip(procs, until, strict=True):
        with contextlib.suppress(AssertionError):  # it exited: its output is what counts
            proc.wait_for(text)
        proc.signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(15)
    return "".join(proc.output() for proc in procs)


@pytest.mark.slow
def test_no_output_shows_the_password(make_server: MakeServer, spawn: Spawn, prefix: str) -> None:
    right, wrong = make_server(), make_server()
    admin(right).config_set("requirepass", SECRET)
    admin(wrong).config_set("requirepass", "another-password")
    unreachable = with_secret(free_port())
    good = with_secret(right.port)
    outputs: list[str] = []
    for url in (unreachable, with_secret(wrong.port), good):
        for argv in (["stats"], ["--json", "enqueue", "sec.ok"]):
            done = run_cli(url, prefix, *argv, RSCHED_SOCKET_TIMEOUT_S="1")
            outputs.append(done.stdout + done.stderr)
    assert "refused the user or password" in "".join(outputs)
    assert "cannot reach Redis" in "".join(outputs)
    for argv in (["--help"], ["scheduler", "--help"], ["worker", "--help"]):
        done = run_cli(good, prefix, *argv, RSCHED_REDIS_URL=good)
        outputs.append(done.stdout + done.stderr)
    outputs.append(run_processes(spawn, with_secret(wrong.port), prefix, "failed", "error"))
    outputs.append(run_processes(spawn, unreachable, prefix, "redis.waiting", "redis.waiting"))
    outputs.append(run_processes(spawn, good, prefix, "leader.acquired", "worker.start"))
    serve = web_support().serve
    settings = Settings(redis_url=good, prefix=prefix)
    with serve(settings) as base:
        for path in ("/", "/queues", "/workers", "/api/v1/stats", "/api/v1/health"):
            outputs.append(httpx.get(base + path, timeout=30).text)
    with serve(Settings(redis_url=unreachable, socket_timeout_s=1)) as base:
        for path in ("/", "/api/v1/stats"):
            outputs.append(httpx.get(base + path, timeout=30).text)
    text = "\n".join(outputs)
    assert "leader.acquired" in text  # the right server was used
    assert "worker.start" in text
    assert SECRET not in text


async def _flow_completed(sdk: rsched.Client, flow_id: str) -> bool:
    try:
        return (await sdk.flow(flow_id)).state == "completed"
    except rsched.FlowNotFound:  # a schedule's: its starter job has not run yet
        return False
