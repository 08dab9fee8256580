"""The ``rsched`` command as a user runs it: a child process, exit codes, --json output.

Most checks go through ``python -m rsched._cli`` in a subprocess; a few cheap ones call
``main(argv)`` in process (same code path after the interpreter starts).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis as redis_sync

from rsched._cli import duration_s, main
from servers import Server

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def rsched(server: Server, redis_url: str, prefix: str) -> Iterator[Run]:
    """Run ``rsched ARGS`` in a child process against the test's server and prefix."""
    env = {**os.environ, "RSCHED_REDIS_URL": redis_url, "RSCHED_PREFIX": prefix}

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "rsched._cli", *args],
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=30,
        )

    yield run
    with redis_sync.Redis.from_url(redis_url) as raw:
        keys = list(raw.scan_iter(match=f"{{{prefix}}}:*", count=1000))
        if keys:
            raw.delete(*keys)


@pytest.fixture
def cli(
    redis_url: str, prefix: str, capsys: pytest.CaptureFixture[str]
) -> Callable[..., tuple[int, str, str]]:
    """Run ``rsched ARGS`` in this process (cheap set-up steps); returns (code, out, err)."""

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(["--redis-url", redis_url, "--prefix", prefix, *args])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


Cli = Callable[..., tuple[int, str, str]]


def as_json(proc: subprocess.CompletedProcess[str]) -> Any:
    assert proc.returncode == 0, proc.stderr
    return orjson.loads(proc.stdout)


def test_add_show_ls_trigger_rm(rsched: Run, cli: Cli) -> None:
    added = rsched(
        "add", "nightly", "--task", "reports.nightly", "--cron", "0 2 * * *",
        "--tz", "Europe/Rome", "--payload", '{"kind": "sales"}', "--max-runs", "365",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert "added nightly (generation 1); next run" in added.stdout
    assert "CET" in added.stdout or "CEST" in added.stdout
    assert "UTC" in added.stdout

    ls = rsched("ls")
    header, row = ls.stdout.splitlines()[:2]
    assert header.split()[:5] == ["ID", "TASK", "QUEUE", "TRIGGER", "STATUS"]
    assert row.startswith("nightly")
    assert " in " in row

    code, out, _ = cli("--json", "trigger", "nightly")
    fired = orjson.loads(out)
    assert fired["status"] == "fired"
    show = rsched("show", "nightly")
    assert show.returncode == 0, show.stderr
    assert "next fire times:" in show.stdout
    assert show.stdout.count("02:00:00 CE") >= 5  # CET or CEST
    assert "last runs:" in show.stdout
    assert fired["execution_id"] in show.stdout
    data = orjson.loads(cli("show", "nightly", "--json")[1])
    assert data["schedule"]["runs"] == 1
    assert len(data["next"]) == 5
    assert data["runs"][0]["outcome"] == "queued"
    assert data["runs"][0]["late_ms"] >= 0

    assert cli("rm", "nightly")[0] == 0
    code, _, err = cli("show", "nightly")
    assert code == 1
    assert "schedule 'nightly' does not exist" in err


def test_error_and_usage_exit_codes(rsched: Run, cli: Cli) -> None:
    bad = rsched("add", "x", "--task", "t", "--cron", "0 0 30 2 *")
    assert bad.returncode == 1
    assert "cron: cron '0 0 30 2 *': day-of-month 30 never occurs in February" in bad.stderr
    usage = rsched("add", "x", "--task", "t", "--every", "soon")
    assert usage.returncode == 2
    assert "'soon' is not a duration" in usage.stderr
    assert cli("frobnicate")[0] == 2
    assert cli("dead", "purge")[0] == 2  # refuses to purge without a selection
    err = rsched("--json", "pause", "ghost")
    assert err.returncode == 1
    assert orjson.loads(err.stderr)["error"] == "ScheduleNotFound"


def test_add_from_file_and_ls_json_paging(rsched: Run, cli: Cli, tmp_path: Path) -> None:
    spec = {"id": "poll", "task": "feeds.poll", "every": 300, "payload": {"feed": 7}}
    (tmp_path / "poll.json").write_text(orjson.dumps(spec).decode())
    assert rsched("add", "--file", str(tmp_path / "poll.json")).returncode == 0
    piped = rsched("upsert", "--file", "-", "--every", "10m", stdin=orjson.dumps(spec).decode())
    assert piped.returncode == 0, piped.stderr
    for i in range(4):
        assert cli("add", f"s{i}", "--task", "t", "--every", f"{i + 1}h")[0] == 0
    first = as_json(rsched("ls", "--json", "--limit", "3"))
    assert len(first["schedules"]) == 3
    rest = orjson.loads(cli("ls", "--json", "--limit", "3", "--cursor", first["cursor"])[1])
    ids = [s["id"] for s in first["schedules"] + rest["schedules"]]
    assert sorted(ids) == ["poll", "s0", "s1", "s2", "s3"]
    assert rest["cursor"] is None
    everything = orjson.loads(cli("ls", "--json", "--limit", "2", "--all")[1])
    assert len(everything["schedules"]) == 5
    poll = next(s for s in everything["schedules"] if s["id"] == "poll")
    assert poll["every"] == 600
    assert poll["payload"] == {"feed": 7}


def test_sync_dry_run_then_apply(rsched: Run, cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "jobs.toml"
    path.write_text('[[schedule]]\nid = "a"\ntask = "t"\nevery = 60\n')
    dry = rsched("sync", str(path), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "1 to add" in dry.stdout
    assert "[not applied]" in dry.stdout
    assert orjson.loads(cli("ls", "--json")[1])["schedules"] == []
    applied = orjson.loads(cli("sync", str(path), "--json")[1])
    assert applied["applied"] is True
    assert [c["id"] for c in applied["changes"]] == ["a"]
    path.write_text('[[schedule]]\nid = "a"\ntask = "t"\nevery = "often"\n')
    invalid = rsched("sync", str(path))
    assert invalid.returncode == 1
    assert "schedule[0] (id 'a').every" in invalid.stderr


def test_stats_and_dead_letters(rsched: Run, cli: Cli, redis_url: str, prefix: str) -> None:
    with redis_sync.Redis.from_url(redis_url, decode_responses=True) as raw:
        raw.sadd(f"{{{prefix}}}:queues", "mail")
        job = ["execution_id", "e1", "task", "emails.send", "payload", "{}", "attempt", "4"]
        entry = raw.xadd(
            f"{{{prefix}}}:dead:mail",
            {"reason": "max_retries", "execution_id": "e1", "task": "emails.send",
             "error_type": "ValueError", "error_message": "boom", "traceback": "Traceback: x",
             "job": orjson.dumps(job).decode()},
        )  # fmt: skip
    stats = orjson.loads(cli("stats", "--json")[1])
    assert stats["dead_letters"] == 1
    assert stats["leader"] is None
    human = rsched("stats")
    assert "leader:    none" in human.stdout
    assert "mail" in human.stdout
    listed = rsched("dead", "ls", "--queue", "mail")
    assert "emails.send" in listed.stdout
    assert "ValueError: boom" in listed.stdout
    shown = cli("dead", "show", str(entry), "--queue", "mail")[1]
    assert "Traceback: x" in shown
    requeued = orjson.loads(cli("dead", "requeue", "--all", "--queue", "mail", "--json")[1])
    assert requeued == {"requeued": 1}


def test_help_has_examples(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    top = capsys.readouterr().out
    assert "examples:" in top
    assert "exit codes: 0 ok, 1 error, 2 usage" in top
    for command in (["add"], ["ls"], ["show"], ["backfill"], ["dead", "requeue"], ["sync"]):
        assert main([*command, "--help"]) == 0
        text = capsys.readouterr().out
        assert "examples:" in text
        assert f"rsched {' '.join(command)}" in text


def test_scheduler_and_worker_aliases(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scheduler", "--help"]) == 0
    assert "--schedules" in capsys.readouterr().out
    assert main(["worker", "--help"]) == 0
    assert "usage: rsched-worker" in capsys.readouterr().out
    assert main(["demo", "--help"]) == 0
    assert "usage: rsched demo" in capsys.readouterr().out


def test_redis_unavailable_is_an_error_not_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--redis-url", "redis://127.0.0.1:1/0", "ls"]) == 1
    err = capsys.readouterr().err
    assert "cannot reach Redis at redis://127.0.0.1:1/0" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("300", 300), ("90s", 90), ("5m", 300), ("1h30m", 5400), ("1.5d", 129600), ("250ms", 0.25)],
)
def test_durations(text: str, seconds: float) -> None:
    assert duration_s(text) == seconds


def test_next_history_backfill_pause_resume(cli: Cli) -> None:
    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=10)
    assert cli("add", "m", "--task", "t", "--cron", "* * * * *", "--overlap", "allow")[0] == 0
    code, out, _ = cli("next", "m", "-n", "3")
    assert code == 0
    assert len(out.splitlines()) == 3
    assert all(line.split()[1].endswith(":00") for line in out.splitlines())
    window = ("--start", start.isoformat(), "--end", (start + timedelta(minutes=2)).isoformat())
    code, out, _ = cli("backfill", "m", *window)
    assert code == 0, out
    assert out.startswith("3 occurrence(s): 3 fired")
    again = orjson.loads(cli("--json", "backfill", "m", *window)[1])
    assert again["counts"]["already_fired"] == 3
    code, out, _ = cli("history", "m", "--status", "fired")
    assert code == 0
    assert out.count("origin=backfill") == 3
    assert cli("pause", "m", "--note", "deploy")[0] == 0
    assert "paused (deploy)" in cli("show", "m")[1]
    assert "paused" in cli("ls", "--paused")[1]
    assert "no schedules" in cli("ls", "--active")[1]
    code, out, _ = cli("resume", "m")
    assert code == 0
    assert "resumed m; next run" in out
    code, _, err = cli("backfill", "m", "--start", "2020-01-01", "--end", "2030-01-01")
    assert code == 1
    assert "end: 2030-01-01T00:00:00 is in the future" in err
