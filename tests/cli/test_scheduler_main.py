"""``rsched-scheduler`` as a process: settings, signals, and a leader paused past its lease."""

from __future__ import annotations

import itertools
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis

from rsched import Schedule
from rsched._cli.scheduler_process import _parser, load_settings
from rsched._core.fire_plan import FireItem
from rsched._core.keys import Keys
from rsched._core.settings import Settings
from rsched._store.schedules import ScheduleStore
from tests.support.leading import firing
from tests.support.waiting import eventually

MAIN = "rsched._cli.scheduler_process"
FAST = ("--lease-ttl-ms", "1000", "--lease-renew-ms", "200")


@pytest.fixture
def store(redis: Redis, settings: Settings) -> ScheduleStore:
    return ScheduleStore(redis, Keys(settings.prefix))


def args(settings: Settings, *extra: str) -> tuple[str, ...]:
    return ("--redis-url", settings.url, "--prefix", settings.prefix, *FAST, *extra)


async def jobs(store: ScheduleStore) -> list[dict[str, str]]:
    entries: Any = await store.redis.xrange(store.keys.queue("default"))
    return [fields for _, fields in entries]


def test_flags_override_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RSCHED_PREFIX", "from-env")
    monkeypatch.setenv("RSCHED_SCHEDULER__LEASE_TTL_MS", "20000")
    monkeypatch.delenv("RSCHED_REDIS_URL", raising=False)
    settings = load_settings(_parser().parse_args(["--lease-renew-ms", "300"]))
    assert settings.prefix == "from-env"
    assert settings.scheduler.lease_ttl_ms == 20_000
    assert settings.scheduler.lease_renew_ms == 300
    assert settings.url == "redis://127.0.0.1:6379/0"
    settings = load_settings(
        _parser().parse_args(["--prefix", "flag", "--redis-url", "redis://h/1"])
    )
    assert (settings.prefix, settings.url) == ("flag", "redis://h/1")


@pytest.mark.parametrize(
    ("argv", "env", "named"),
    [
        (["--lease-ttl-ms", "10"], {}, "--lease-ttl-ms / RSCHED_SCHEDULER__LEASE_TTL_MS"),
        (["--prefix", "has space"], {}, "--prefix / RSCHED_PREFIX"),
        ([], {"RSCHED_HISTORY_LIMIT": "0"}, "RSCHED_HISTORY_LIMIT"),
        (["--lease-ttl-ms", "1000", "--lease-renew-ms", "900"], {}, "lease_renew_ms"),
    ],
)
def test_bad_settings_exit_2(
    spawn: Callable[..., Any], argv: list[str], env: dict[str, str], named: str
) -> None:
    proc = spawn(MAIN, *argv, env=env)
    assert proc.wait() == 2
    assert named in proc.output()


def test_schedules_file_problems_exit_2(spawn: Callable[..., Any], settings: Settings) -> None:
    proc = spawn(MAIN, *args(settings, "--schedules", "/nonexistent/schedules.toml"))
    assert proc.wait() == 2
    assert "--schedules" in proc.output()


@pytest.mark.slow
async def test_sigterm_exits_0_and_releases_lease(
    spawn: Callable[..., Any], settings: Settings, store: ScheduleStore
) -> None:
    proc = spawn(MAIN, *args(settings))
    await proc.appears("scheduler.ready")
    await proc.appears("leader.acquired")
    assert await store.redis.get(store.keys.leader) is not None
    proc.signal(signal.SIGTERM)
    assert await anyio.to_thread.run_sync(proc.wait) == 0
    assert await store.redis.get(store.keys.leader) is None
    assert "leader.released" in proc.output()


@pytest.mark.slow
async def test_paused_leader_fires_nothing_after_resume(
    spawn: Callable[..., Any], settings: Settings, store: ScheduleStore
) -> None:
    await store.save(Schedule(id="tick", task="t", every=0.1, overlap="allow"))
    old = spawn(MAIN, *args(settings))
    await old.appears("leader.acquired")
    match = re.search(r"event=leader\.acquired lease=(\S+)", old.output())
    assert match is not None
    old_lease = match.group(1)
    await eventually(lambda: _has_jobs(store, 3))

    old.signal(signal.SIGSTOP)
    paused_at = await store.time_ms()
    new = spawn(MAIN, *args(settings))
    await new.appears("leader.acquired")
    new_lease = str(await store.redis.get(store.keys.leader))
    assert int(new_lease.split(":")[0]) > int(old_lease.split(":")[0])
    before = len(await jobs(store))
    await eventually(lambda: _has_jobs(store, before + 3))

    old.signal(signal.SIGCONT)
    await old.appears("leader.lost")
    await anyio.sleep(0.5)

    # The old leader's fire calls are refused by the fencing token and write nothing. The new
    # leader is held still meanwhile (its lease stays valid), so that it adds no job either.
    new.signal(signal.SIGSTOP)
    try:
        await anyio.sleep(0.05)  # a call it sent just before is done by now
        (fields,) = await store.fields(["tick"])
        nxt = int(fields["next_run"])
        item = FireItem("tick", fields["version"], nxt, nxt, nxt + 100, "fire")
        length = await store.redis.xlen(store.keys.queue("default"))
        assert await firing(store).fire(old_lease, [item]) is None
        assert await store.redis.xlen(store.keys.queue("default")) == length
    finally:
        new.signal(signal.SIGCONT)
    # No occurrence ran twice or was lost. (Its log is no judge of what the old leader fired after
    # it resumed: a round whose call the server ran before the pause logs its fires after it.)
    entries = await jobs(store)
    assert Counter(j["execution_id"] for j in entries).most_common(1)[0][1] == 1
    times = sorted(int(j["scheduled_at"]) for j in entries)
    assert all(b - a == 100 for a, b in itertools.pairwise(times)), "a gap or repeat"
    assert any(int(j["fired_at"]) > paused_at + 1000 for j in entries)
    for proc in (old, new):
        proc.signal(signal.SIGTERM)
        assert await anyio.to_thread.run_sync(proc.wait) == 0


async def _has_jobs(store: ScheduleStore, n: int) -> bool:
    return len(await jobs(store)) >= n


def test_module_runs_as_script() -> None:
    # `python -m rsched._cli.scheduler_process --help` exits 0 and documents the flags.
    out = subprocess.run(
        [sys.executable, "-m", MAIN, "--help"], capture_output=True, text=True, check=True
    )
    for flag in ("--redis-url", "--prefix", "--lease-ttl-ms", "--lease-renew-ms", "--schedules"):
        assert flag in out.stdout


@pytest.mark.slow
async def test_schedules_file_is_synced_at_start(
    spawn: Callable[..., Any], settings: Settings, store: ScheduleStore, tmp_path: Path
) -> None:
    path = tmp_path / "schedules.toml"
    path.write_text('[[schedule]]\nid = "from-file"\ntask = "t"\nevery = 0.1\noverlap = "allow"\n')
    proc = spawn(MAIN, *args(settings, "--schedules", str(path)))
    await proc.appears("scheduler.ready")
    assert (await store.load("from-file")).every == 0.1
    await eventually(lambda: _has_jobs(store, 2))
    proc.signal(signal.SIGTERM)
    assert await anyio.to_thread.run_sync(proc.wait) == 0


def test_invalid_schedules_file_exits_2(
    spawn: Callable[..., Any], settings: Settings, tmp_path: Path
) -> None:
    path = tmp_path / "schedules.toml"
    path.write_text('[[schedule]]\nid = "bad"\ntask = "t"\ncron = "0 0 30 2 *"\n')
    proc = spawn(MAIN, *args(settings, "--schedules", str(path)))
    assert proc.wait() == 2
    assert "cron" in proc.output()
    assert "scheduler.ready" not in proc.output()


@pytest.mark.slow
async def test_standby_takes_over_a_killed_leader(
    spawn: Callable[..., Any], settings: Settings, store: ScheduleStore
) -> None:
    await store.save(Schedule(id="k", task="t", every=0.1, overlap="allow"))
    first = spawn(MAIN, *args(settings))
    await first.appears("leader.acquired")
    second = spawn(MAIN, *args(settings))
    await second.appears("scheduler.ready")
    await eventually(lambda: _has_jobs(store, 2))
    first.signal(signal.SIGKILL)
    killed_at = time.monotonic()
    await second.appears("leader.acquired")
    assert time.monotonic() - killed_at < 3.0  # lease TTL 1 s, plus generous slack
    before = len(await jobs(store))
    await eventually(lambda: _has_jobs(store, before + 3))
    entries = await jobs(store)
    assert Counter(j["execution_id"] for j in entries).most_common(1)[0][1] == 1


@pytest.mark.slow
def test_second_signal_exits_at_once(
    spawn: Callable[..., Any], make_server: Callable[..., Any], prefix: str
) -> None:
    server = make_server()
    proc = spawn(MAIN, "--redis-url", server.url, "--prefix", prefix, *FAST)
    proc.wait_for("leader.acquired")
    server.pause()  # the graceful stop now waits on a server that does not answer
    try:
        proc.signal(signal.SIGTERM)
        proc.wait_for("scheduler.stopping")
        started = time.monotonic()
        proc.signal(signal.SIGTERM)
        assert proc.wait(timeout_s=5) == 1
        assert time.monotonic() - started < 2.0
        assert "scheduler.forced_exit" in proc.output()
    finally:
        server.resume()
