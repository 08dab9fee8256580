"""``rsched demo`` / ``make demo``: runs, narrates, and stops cleanly.

The demo runs as a child process here (``python -m rsched._devtools.demo``; ``make demo`` runs
it through the ``rsched`` command): it takes signals and owns an embedded server.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from redis.asyncio import Redis

from tests.support.paths import ROOT
from tests.support.processes import Proc
from tests.support.waiting import eventually_blocking

DEMO_IDS = ("demo-tick", "demo-report", "demo-once", "demo-flaky")


@pytest.fixture
def no_redis_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the demo pick its embedded server, whatever the calling shell exports."""
    for name in ("RSCHED_REDIS_URL", "RSCHED_PREFIX"):
        monkeypatch.delenv(name, raising=False)


def _children(pid: int) -> dict[int, str]:
    """Direct child processes of ``pid`` with their command lines (Linux /proc)."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found[int(entry.name)] = cmdline
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_gone(pid: int) -> bool:
    eventually_blocking(lambda: not _alive(pid), what=f"process {pid} to end")
    return True


def _check_story(out: str) -> None:
    assert "rsched ls" in out
    assert "--scan --pattern '{rsched}:*'" in out
    for line in ("fired      demo-tick", "completed  demo-tick", "fired      demo-once"):
        assert line in out, f"{line!r} missing:\n{out}"
    assert "failed     demo-flaky   attempt 1" in out
    assert "dead       demo-flaky   attempt 3" in out
    assert "Traceback" not in out


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.usefixtures("no_redis_env")
@pytest.mark.parametrize(
    ("args", "servers", "shown", "stopped"),
    [
        ((), 1, ["redis-cli -p "], "embedded server stopped"),
        (
            ("--cluster",),
            3,
            ["an embedded cluster of three Valkey", "RSCHED_CLUSTER=true", "redis-cli -p "],
            "embedded cluster stopped",
        ),
    ],
    ids=["server", "cluster"],
)
def test_demo_runs_on_its_embedded_servers_and_stops_by_itself(
    spawn: Callable[..., Proc], args: tuple[str, ...], servers: int, shown: list[str], stopped: str
) -> None:
    proc = spawn("rsched._devtools.demo", *args, "--duration", "8")
    proc.wait_for("fired ")
    nodes = [pid for pid, cmd in _children(proc.proc.pid).items() if "valkey-server" in cmd]
    assert len(nodes) == servers, _children(proc.proc.pid)
    assert proc.wait(60) == 0, proc.output()
    out = proc.output()
    _check_story(out)
    for text in shown:
        assert text in out, text
    assert "stopped cleanly" in out
    assert out.rstrip().endswith(stopped)
    assert all(_wait_gone(pid) for pid in nodes), "an embedded server outlived the demo"


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.usefixtures("no_redis_env")
def test_ctrl_c_stops_everything_and_the_embedded_server(spawn: Callable[..., Proc]) -> None:
    proc = spawn("rsched._devtools.demo")
    proc.wait_for("fired ")
    servers = [pid for pid, cmd in _children(proc.proc.pid).items() if "valkey-server" in cmd]
    assert len(servers) == 1, _children(proc.proc.pid)
    proc.signal(signal.SIGINT)
    assert proc.wait(30) == 0, proc.output()
    out = proc.output()
    assert "stopping" in out
    assert "stopped cleanly" in out
    assert "embedded server stopped" in out
    assert "Traceback" not in out
    assert _wait_gone(servers[0]), "the embedded server outlived the demo"


@pytest.mark.slow
async def test_demo_on_a_given_redis_cleans_up_its_schedules(
    spawn: Callable[..., Proc], redis_url: str, prefix: str, redis: Redis
) -> None:
    # What an interrupted earlier run leaves: a retry waiting in the demo queue's delayed set
    # and an unfinished job in its stream. Neither may run in this one.
    leaked = ["execution_id", "leak@1", "task", "demo.flaky", "payload", "{}", "attempt", "9"]
    await redis.zadd(f"{{{prefix}}}:delayed:demo", {orjson.dumps(leaked).decode(): 0})
    await redis.xadd(f"{{{prefix}}}:queue:demo", dict(zip(leaked[::2], leaked[1::2], strict=True)))
    proc = spawn(
        "rsched._devtools.demo",
        "--duration",
        "5",
        env={"RSCHED_REDIS_URL": redis_url, "RSCHED_PREFIX": prefix},
    )
    assert proc.wait(60) == 0, proc.output()
    out = proc.output()
    assert f"RSCHED_PREFIX={prefix}" in out
    assert "dead       demo-flaky   attempt 3" in out
    assert "note: dropped 1 job(s) and 1 retry(ies) an earlier, interrupted demo left" in out
    assert "removed the demo schedules with their history" in out
    assert f"dead letter(s) in {{{prefix}}}:dead:demo" in out
    assert "embedded server" not in out
    assert await redis.zcard(f"{{{prefix}}}:schedules") == 0
    dead = await redis.xrange(f"{{{prefix}}}:dead:demo")
    assert dead
    assert all(fields and fields["execution_id"] != "leak@1" for _, fields in dead)
    # What the closing message says stays is what stays (operation ids expire by themselves).
    left = {key async for key in redis.scan_iter(f"{{{prefix}}}:*")}
    assert {k for k in left if ":ops:" not in k} == {
        f"{{{prefix}}}:dead:demo",
        f"{{{prefix}}}:queues",
        f"{{{prefix}}}:fence",
        f"{{{prefix}}}:leader_ttl",
        f"{{{prefix}}}:events",  # the dead letters' events
        f"{{{prefix}}}:runs",
        f"{{{prefix}}}:audit",  # the demo schedules' adds and removes
        f"{{{prefix}}}:meta",  # the deployment's number of partitions
        f"{{{prefix}}}:activity",  # the counts per minute and hour
        f"{{{prefix}}}:depth",  # the queues' depth samples
    }
    for name in ("fence", "leader_ttl", "events", "runs", "audit", "meta", "activity", "depth"):
        assert f"{{{prefix}}}:{name}" in out


@pytest.mark.slow
@pytest.mark.usefixtures("no_redis_env")
def test_make_demo_target() -> None:
    make = shutil.which("make")
    venv_python = ROOT / ".venv" / "bin" / "python"
    if make is None or Path(sys.executable).resolve() != venv_python.resolve():
        pytest.skip("needs make and the repository's .venv")
    # Only when the demo's install step is up to date: never let a test reinstall packages.
    stamp = ".venv/.installed-demo"
    if subprocess.run([make, "-q", stamp], cwd=ROOT, check=False).returncode != 0:
        pytest.skip(f"{stamp} is out of date (run make venv)")
    done = subprocess.run(
        [make, "-s", "demo", "DEMO_ARGS=--duration 7"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    _check_story(done.stdout)
    assert "embedded server stopped" in done.stdout


def test_docker_tasks_module_defines_the_worker_and_valid_schedules() -> None:
    spec = importlib.util.spec_from_file_location("demo_tasks", ROOT / "docker" / "demo_tasks.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.worker.tasks == ["demo.flaky", "demo.report", "demo.tick"]
    schedules = module.schedules()
    assert {s.task for s in schedules} <= set(module.worker.tasks)
    assert {s.queue for s in schedules} <= set(module.worker.resolve_settings().worker.queues)


def test_compose_runs_a_safe_redis_two_schedulers_and_two_workers() -> None:
    compose = (ROOT / "docker" / "compose.yaml").read_text()
    for flag in ("--appendonly", "--maxmemory-policy", "noeviction"):
        assert f"- {flag}" in compose
    assert compose.count('command: ["rsched-scheduler"]') == 2
    assert compose.count('command: ["rsched-worker", "demo_tasks:worker"]') == 2
    # The host's own Redis port stays free.
    assert re.search(r"[\"' ](127\.0\.0\.1:)?6379:6379", compose) is None
