"""HTTP targets on the command line: ``rsched ls`` and ``show`` print the method and URL (never
the secret), ``rsched-worker``'s --http and --http-only flags."""

from __future__ import annotations

import anyio
import orjson
import pytest
from redis.asyncio import Redis

import rsched
from rsched._cli import worker_process
from rsched._core.settings import Settings
from tests.support.command import Cli

HOOK = "https://partner.example.com/hook"


async def test_ls_and_show_print_the_targets_method_and_url_but_not_its_secret(
    cli: Cli, redis: Redis, settings: Settings
) -> None:
    client = rsched.Client(redis, settings)
    target = {"url": HOOK, "method": "PUT", "secret": "hush", "headers": {"X-Key": "k"}}
    await client.add(rsched.Schedule(id="ping", every="5m", http=target))
    code, out, _ = await anyio.to_thread.run_sync(cli, "ls")
    assert code == 0
    assert f"PUT {HOOK}" in out
    code, out, _ = await anyio.to_thread.run_sync(cli, "show", "ping")
    assert code == 0
    (line,) = [line for line in out.splitlines() if line.startswith("http:")]
    assert line.split(None, 1)[1] == f"PUT {HOOK}; timeout 10s; headers X-Key; own secret"
    assert "hush" not in out
    code, out, _ = await anyio.to_thread.run_sync(cli, "--json", "show", "ping")
    assert code == 0
    shown = orjson.loads(out)["schedule"]
    assert shown["task"] == "rsched.http"
    assert shown["http"]["secret"] == "***"
    assert "hush" not in out


def test_http_only_takes_no_worker_and_the_worker_is_required_without_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert worker_process.parse_args(["--http-only"]).worker is None
    assert worker_process.parse_args(["app:worker", "--http"]).http is True
    with pytest.raises(SystemExit) as caught:
        worker_process.parse_args(["app:worker", "--http-only"])
    assert caught.value.code == 2
    assert "give no worker, or --http instead" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        worker_process.parse_args([])
    assert "or --http-only" in capsys.readouterr().err


def test_a_worker_of_http_targets_alone_needs_no_task() -> None:
    worker = rsched.Worker(http=True)
    assert worker.resolve_settings().worker.http is True
    worker.configure(http=False)
    assert worker.resolve_settings().worker.http is False
