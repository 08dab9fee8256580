"""The ``rsched`` command as a user runs it: a child process, exit codes, --json output.

Most checks go through ``python -m rsched._cli.main`` in a subprocess; a few cheap ones call
``main(argv)`` in process (same code path after the interpreter starts).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis as redis_sync

from rsched import Settings, __version__
from rsched._cli.common import CLI_WORDS
from rsched._cli.main import duration_s, main
from rsched._cli.parser import build_parser
from tests.support.cluster import sync_client
from tests.support.command import Cli
from tests.support.processes import Proc
from tests.support.servers import Server
from tests.support.worker_app import fast_env

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def rsched(server: Server, redis_url: str, prefix: str, topology: str) -> Iterator[Run]:
    """Run ``rsched ARGS`` in a child process against the test's server and prefix."""
    env = {**os.environ, "RSCHED_REDIS_URL": redis_url, "RSCHED_PREFIX": prefix}
    env["RSCHED_CLUSTER"] = str(topology == "cluster").lower()

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "rsched._cli.main", *args],
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=30,
        )

    yield run
    with sync_client(redis_url, cluster=topology == "cluster") as raw:
        keys = list(raw.scan_iter(match=f"{{{prefix}}}:*", count=1000))
        if keys:
            raw.delete(*keys)


@pytest.fixture
def here(cli: Cli) -> Run:
    """``cli`` with the child process's result type: the same checks, without a start-up each."""

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        code, out, err = cli(*args)
        return subprocess.CompletedProcess(["rsched", *args], code, out, err)

    return run


def as_json(proc: subprocess.CompletedProcess[str]) -> Any:
    assert proc.returncode == 0, proc.stderr
    return orjson.loads(proc.stdout)


@pytest.mark.cluster
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
    (fired,) = orjson.loads(out)["triggered"]
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
    bad = rsched("add", "x", "--task", "t", "--every", "soon")
    assert bad.returncode == 1
    assert "every: 'soon' is not a duration" in bad.stderr
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


@pytest.mark.cluster
def test_stats_and_dead_letters(
    rsched: Run, cli: Cli, redis_url: str, prefix: str, topology: str
) -> None:
    with sync_client(redis_url, cluster=topology == "cluster") as raw:
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


def test_dead_ls_lists_every_queue(here: Run, cli: Cli, redis_url: str, prefix: str) -> None:
    with redis_sync.Redis.from_url(redis_url, decode_responses=True) as raw:
        raw.sadd(f"{{{prefix}}}:queues", "mail", "default", "empty")
        for n in range(3):
            for queue in ("mail", "default"):
                fields = {"reason": "poison", "execution_id": f"{queue}-{n}", "task": f"t.{queue}"}
                raw.xadd(f"{{{prefix}}}:dead:{queue}", fields)
    listed = here("dead", "ls")
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split()[:3] == ["QUEUE", "ENTRY", "TASK"]
    assert sorted(row.split()[0] for row in rows) == ["default"] * 3 + ["mail"] * 3
    narrowed = orjson.loads(cli("--json", "dead", "ls", "--queue", "mail")[1])["dead_letters"]
    assert [d["execution_id"] for d in narrowed] == ["mail-2", "mail-1", "mail-0"]
    first = orjson.loads(cli("--json", "dead", "ls", "-n", "4")[1])["cursor"]
    assert f"more: rsched dead ls --cursor '{first}'" in cli("dead", "ls", "-n", "4")[1]
    # Pages over every queue: each dead letter once, newest first, the queue in each.
    seen: list[tuple[str, str]] = []
    cursor: str | None = None
    while True:
        more = ["--cursor", cursor] if cursor else []
        page = orjson.loads(cli("--json", "dead", "ls", "-n", "4", *more)[1])
        seen += [(d["queue"], d["execution_id"]) for d in page["dead_letters"]]
        cursor = page["cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted((q, f"{q}-{n}") for n in range(3) for q in ("default", "mail"))
    for queue in ("default", "mail"):
        assert [e for q, e in seen if q == queue] == [f"{queue}-{n}" for n in (2, 1, 0)]
    only = orjson.loads(cli("--json", "dead", "ls", "--task", "t.mail")[1])["dead_letters"]
    assert {d["queue"] for d in only} == {"mail"}
    bad = here("dead", "ls", "--cursor", "1-0")
    assert bad.returncode == 2
    assert "--cursor: '1-0' is not a cursor of rsched dead ls over every queue" in bad.stderr


def test_ls_by_id_prefix_show_retries_stats_times(
    here: Run, cli: Cli, redis_url: str, prefix: str
) -> None:
    for sid in ("nightly.a", "nightly.b", "nightly.c", "hourly"):
        assert cli("add", sid, "--task", "t", "--every", "1h", "--max-retries", "1")[0] == 0
    listed = orjson.loads(cli("--json", "ls", "--id-prefix", "nightly.")[1])["schedules"]
    assert sorted(s["id"] for s in listed) == ["nightly.a", "nightly.b", "nightly.c"]
    first = here("ls", "--id-prefix", "nightly.", "--queue", "default", "-n", "2")
    more = first.stdout.splitlines()[-1]
    assert more.startswith("more: rsched ls --queue default --id-prefix nightly. --cursor '")
    rest = here(
        "ls", *more.removeprefix("more: rsched ls ").split(" (or")[0].replace("'", "").split()
    )
    assert [line.split()[0] for line in rest.stdout.splitlines()[1:]] == ["nightly.c"]
    shown = here("show", "hourly").stdout
    assert "retries:     1 retry, backoff 30s x2 up to 1h\n" in shown
    with redis_sync.Redis.from_url(redis_url, decode_responses=True) as raw:
        raw.zadd(f"{{{prefix}}}:schedules", {"hourly": 1000})  # overdue: no scheduler runs
    stats = orjson.loads(cli("--json", "stats")[1])
    assert "now_ms" not in stats
    assert datetime.fromisoformat(stats["now"]).tzinfo is not None
    overdue = stats["oldest_overdue"]
    assert (overdue["id"], overdue["next_run"]) == ("hourly", "1970-01-01T00:00:01+00:00")
    assert overdue["late_ms"] > 0


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


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"rsched {__version__}"


def test_update_changes_only_the_fields_given(
    rsched: Run, here: Run, cli: Cli, tmp_path: Path
) -> None:
    added = here(
        "add", "poll", "--task", "feeds.poll", "--every", "1h", "--payload", '{"feed": 7}',
        "--max-runs", "50", "--end-at", "2099-01-01T00:00", "--max-retries", "9",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    updated = rsched("update", "poll", "--every", "2h")
    assert updated.returncode == 0, updated.stderr
    assert "updated poll (generation 2): every 1h -> 2h; next run" in updated.stdout
    kept = orjson.loads(cli("show", "poll", "--json")[1])["schedule"]
    assert (kept["every"], kept["payload"], kept["max_runs"]) == (7200, {"feed": 7}, 50)
    assert kept["end_at"].startswith("2099-01-01")
    # A trigger flag replaces the trigger; --no-X and --clear X put a field back to its default.
    change = (
        "--json", "update", "poll", "--cron", "0 3 * * *", "--tz", "Europe/Rome",
        "--no-end-at", "--clear", "max-retries", "--clear", "payload",
    )  # fmt: skip
    doc = as_json(here(*change))
    assert sorted(doc["changed"]) == [
        "cron", "end_at", "every", "max_retries", "payload", "timezone",
    ]  # fmt: skip
    s = doc["schedule"]
    assert (s["cron"], s["every"], s["end_at"], s["max_retries"]) == ("0 3 * * *", None, None, 3)
    assert (s["payload"], s["max_runs"], s["generation"]) == ({}, 50, 3)
    # --file gives the fields to change (its id, if any, must be this one).
    changes = tmp_path / "changes.json"
    changes.write_text('{"id": "poll", "queue": "feeds", "description": "from a file"}')
    doc = as_json(here("--json", "update", "poll", "--file", str(changes)))
    assert sorted(doc["changed"]) == ["description", "queue"]
    assert doc["schedule"]["cron"] == "0 3 * * *"
    changes.write_text('{"id": "other", "queue": "x"}')
    other = here("update", "poll", "--file", str(changes))
    assert other.returncode == 2
    assert "names another schedule than 'poll'" in other.stderr
    # Bad input: nothing written.
    nothing = here("update", "poll")
    assert nothing.returncode == 2
    assert "nothing to change" in nothing.stderr
    both = here("update", "poll", "--clear", "max_runs", "--max-runs", "3")
    assert both.returncode == 2
    assert "--clear max_runs and a new max_runs given together" in both.stderr
    bogus = here("update", "poll", "--clear", "task")
    assert bogus.returncode == 2
    assert "'task' cannot be cleared; give one of: queue, payload" in bogus.stderr
    invalid = here("update", "poll", "--max-runs", "0")
    assert invalid.returncode == 1
    assert "--max-runs: Input should be greater than or equal to 1" in invalid.stderr
    ghost = here("update", "ghost", "--every", "1h")
    assert ghost.returncode == 1
    assert "schedule 'ghost' does not exist" in ghost.stderr
    assert orjson.loads(cli("show", "poll", "--json")[1])["schedule"]["generation"] == 4
    # A change to what already holds writes nothing: no new generation, no new next run.
    before = orjson.loads(cli("show", "poll", "--json")[1])["schedule"]
    same = here("update", "poll", "--no-end-at", "--queue", "feeds")
    assert same.returncode == 0, same.stderr
    assert same.stdout.startswith("poll unchanged (generation 4): the fields given already hold")
    doc = as_json(here("--json", "update", "poll", "--no-start-at", "--clear", "start-at"))
    assert (doc["written"], doc["changed"]) == (False, [])
    assert orjson.loads(cli("show", "poll", "--json")[1])["schedule"] == before


def test_upsert_says_which_fields_went_back_to_defaults(here: Run, cli: Cli) -> None:
    spec = ("--task", "t", "--every", "1h")
    first = here("upsert", "u", *spec, "--max-runs", "5", "--payload", '{"k": 1}')
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("added u (generation 1)")
    assert "reset" not in first.stdout
    again = here("upsert", "u", *spec, "--description", "hourly")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("replaced u (generation 2)")
    assert 'reset: payload ({"k":1} -> {}), max_runs (5 -> -)' in again.stdout
    assert "rsched update u changes only the fields given" in again.stdout
    doc = as_json(here("--json", "upsert", "u", *spec, "--description", "hourly"))
    assert (doc["created"], doc["reset"]) == (False, [])
    assert cli("pause", "u")[0] == 0
    doc = as_json(here("--json", "upsert", "u", "--task", "t", "--every", "2h"))
    assert doc["reset"] == ["paused", "description"]
    assert doc["schedule"]["paused"] is False


def test_several_ids_each_reported_and_every_existing_one_done(
    rsched: Run, here: Run, cli: Cli
) -> None:
    for sid in ("a", "b", "c"):
        assert cli("add", sid, "--task", "t", "--every", "1h", "--overlap", "allow")[0] == 0
    paused = here("pause", "a", "ghost", "b", "--note", "deploy")
    assert paused.returncode == 1
    assert paused.stdout.splitlines() == ["paused a", "paused b"]
    assert "rsched: error: schedule 'ghost' does not exist" in paused.stderr
    assert "1 of 3 schedule(s) not paused: ghost" in paused.stderr
    listed = orjson.loads(cli("ls", "--json")[1])["schedules"]
    assert {s["id"]: s["paused"] for s in listed} == {"a": True, "b": True, "c": False}
    resumed = here("resume", "a", "b")
    assert resumed.returncode == 0, resumed.stderr
    assert [line.split(";")[0] for line in resumed.stdout.splitlines()] == [
        "resumed a",
        "resumed b",
    ]
    doc = orjson.loads(here("--json", "trigger", "a", "nope", "c").stdout)
    assert [t["id"] for t in doc["triggered"]] == ["a", "c"]
    assert all(t["status"] == "fired" for t in doc["triggered"])
    assert doc["failed"] == [
        {"id": "nope", "error": "ScheduleNotFound", "message": "schedule 'nope' does not exist"}
    ]
    removed = rsched("rm", "a", "x", "b", "y", "c")
    assert removed.returncode == 1
    assert removed.stdout.splitlines() == ["removed a", "removed b", "removed c"]
    assert "2 of 5 schedule(s) not removed: x, y" in removed.stderr
    assert orjson.loads(cli("ls", "--json")[1])["schedules"] == []
    # One id: its own error, as before (the JSON error names its class).
    alone = here("--json", "rm", "a")
    assert alone.returncode == 1
    assert orjson.loads(alone.stderr)["error"] == "ScheduleNotFound"


def test_a_completed_schedule_is_completed_not_invalid(here: Run, cli: Cli) -> None:
    spec = ("--task", "t", "--every", "1h", "--max-runs", "1", "--overlap", "allow")
    assert cli("add", "once", *spec)[0] == 0
    assert cli("trigger", "once")[0] == 0
    for action in ("pause", "resume", "trigger"):
        done = here(action, "once")
        assert done.returncode == 1
        assert done.stderr.strip() == (
            f"rsched: error: schedule 'once' has completed (max_runs reached: 1 of 1); "
            f"nothing to {action}"
        )
    err = orjson.loads(here("--json", "pause", "once").stderr)
    assert err["error"] == "ScheduleCompleted"
    assert "completed" in here("show", "once").stdout


def test_errors_name_commands_and_flags_not_sdk_calls(here: Run, cli: Cli, tmp_path: Path) -> None:
    assert cli("add", "x", "--task", "t", "--every", "1h")[0] == 0
    exists = here("add", "x", "--task", "t", "--every", "1h")
    assert exists.returncode == 1
    assert exists.stderr.strip() == (
        "rsched: error: schedule 'x' already exists; use rsched upsert x … to replace its whole "
        "spec or rsched update x … to change some fields"
    )
    past = here("add", "y", "--task", "t", "--at", "2020-01-01T00:00")
    assert past.returncode == 1
    assert "use rsched enqueue to run a job now" in past.stderr
    count = here("next", "x", "-n", "0")
    assert count.returncode == 1
    assert "-n/--limit: give 1-10000" in count.stderr
    spec = tmp_path / "z.json"
    spec.write_text('{"id": "z", "task": "t", "every": 60, "evry": 1}')
    unknown = here("add", "--file", str(spec))
    assert unknown.returncode == 1
    assert "evry: unknown field" in unknown.stderr
    prefix = here("--prefix", "a b", "ls")
    assert prefix.returncode == 2
    assert "--prefix / RSCHED_PREFIX: String should match pattern" in prefix.stderr
    for proc in (exists, past, count, unknown, prefix):
        assert "()" not in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ls", "--limit", "x"], "-n/--limit: 'x' is not a whole number, e.g. 20"),
        (["--partitions", "x", "ls"], "--partitions: 'x' is not a whole number"),
        (["add", "a", "--task", "t", "--max-runs", "1.5"], "--max-runs: '1.5' is not a whole"),
        (["add", "a", "--task", "t", "--retry-jitter", "lots"], "--retry-jitter: 'lots' is not a"),
        (["add", "a", "--task", "t", "--overlap", "never"], "--overlap: invalid choice: 'never'"),
        (["add", "a", "--task", "t", "--payload", "[1]"], "--payload: must be a JSON object"),
        (["add", "a", "--at", "tomorrow"], "--at: 'tomorrow' is not an ISO 8601 time"),
        (["enqueue", "t", "--priority", "urgent"], "--priority: invalid choice: 'urgent'"),
        (["enqueue", "t", "--max-retries", "x"], "--max-retries: 'x' is not a whole number"),
        (["enqueue", "t", "--timeout", "never"], "--timeout: 'never' is not a duration; give"),
        (["enqueue", "t", "--delay", "-5m"], "--delay: -5m is negative"),
        (["jobs", "--state", "weird"], "--state: invalid choice: 'weird'"),
        (["monitor", "--interval", "0"], "--interval: 0 is zero"),
        (["health", "--max-due", "-1"], "--max-due: give a whole number ≥ 0, got '-1'"),
        (["runs", "-n", "many"], "-n/--limit: 'many' is not a whole number"),
        (["backfill", "x", "--start", "2026-01-01"], "the following arguments are required: --end"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_flag(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Rejected while parsing: no Redis is reached (nothing listens at this URL).
    offline = ["--redis-url", "redis://127.0.0.1:1/0"]
    assert main([*offline, *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rsched: error: {message}"), err
    assert err.count("\n") == 1, err  # no usage block
    assert "--help)" in err
    assert main([*offline, "--json", *args]) == 2
    doc = orjson.loads(capsys.readouterr().err)
    assert doc["error"] == "UsageError"
    assert doc["message"].startswith(message)


def test_a_bad_worker_setting_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worker", "tests.support.worker_app:worker", "--concurrency", "0"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "rsched-worker: invalid worker settings: --concurrency / RSCHED_WORKER__CONCURRENCY: "
        "Input should be greater than or equal to 1\n"
    )


def _flags(*command: str) -> set[str]:
    """The option strings of ``rsched COMMAND``."""
    parser = build_parser()
    for name in command:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return {flag for action in parser._actions for flag in action.option_strings}


def test_messages_name_the_flags_each_rule_is_given_by(here: Run, cli: Cli, tmp_path: Path) -> None:
    # The words are real flags of the commands that take the fields.
    assert set(CLI_WORDS.fields.values()) - {"--note"} <= _flags("add")
    assert "--note" in _flags("pause")
    assert set(CLI_WORDS.job_fields.values()) - {"TASK"} <= _flags("enqueue")
    spec = ("add", "y", "--task", "t")
    two = tmp_path / "two.json"
    two.write_text('{"every": 300, "at": "2030-01-01T00:00:00Z"}')
    cases = [
        (
            (*spec, "--file", str(two), "--max-runs", "0"),
            "give exactly one trigger: --cron '0 2 * * *', --every 5m or --at 2030-01-01T09:00 "
            "(given: --every, --at)",
        ),
        ((*spec, "--every", "soon"), "--every: 'soon' is not a duration; give seconds (300) or"),
        ((*spec, "--every", "1h", "--retry-base", "2h"), "--retry-max must be at least --retry-"),
        ((*spec, "--every", "1h", "--buffer-limit", "0"), "held back by --overlap buffer_all"),
        (
            (*spec, "--every", "1h", "--start-at", "2031-01-01", "--end-at", "2030-01-01"),
            "--end-at must be later than --start-at",
        ),
        ((*spec, "--at", "2001-01-01T00:00"), "use rsched enqueue to run a job now"),
        ((*spec, "--every", "1h", "--payload", "{}", "--queue", "a b"), "--queue: 'a b' is not"),
        (("enqueue", "t", "--max-retries", "5000"), "--max-retries: must be a whole number"),
        (("enqueue", "a b"), "TASK: 'a b' is not a valid task name"),
        (("enqueue", "t", "--id", "a b"), "--id: 'a b' is not a valid execution id"),
        (("pause", "x", "--note", "n" * 501), "--note: at most 500 characters"),
    ]
    assert cli("add", "x", "--task", "t", "--every", "1h")[0] == 0
    for args, message in cases:
        proc = here(*args)
        assert proc.returncode == 1, (args, proc.stdout)
        assert message in proc.stderr, proc.stderr
        for python in ("()", "timedelta", "a dict", "='", "=<", "rsched.Schedule"):
            assert python not in proc.stderr, proc.stderr


def test_cron_previews_fire_times_with_dst_marked(capsys: pytest.CaptureFixture[str]) -> None:
    # Needs no Redis and writes nothing: the URL below has nothing listening.
    offline = ["--redis-url", "redis://127.0.0.1:1/0"]
    args = ["cron", "30 2 * * *", "--tz", "Europe/Rome", "--after", "2027-03-26T12:00", "-n", "3"]
    assert main([*offline, *args]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "cron '30 2 * * *' in Europe/Rome, after 2027-03-26T12:00:00+01:00:"
    assert out[1].split() == ["FIRE", "TIME", "(Europe/Rome)", "UTC"]
    assert out[2].split() == ["2027-03-27", "02:30:00", "CET", "2027-03-27", "01:30:00", "UTC"]
    # 02:30 does not exist on the day clocks go forward: it fires at the transition instant.
    assert out[3].startswith("2027-03-28 03:00:00 CEST  2027-03-28 01:00:00 UTC")
    assert out[3].endswith("UTC+01:00 -> UTC+02:00 (clocks go forward 1h)")
    assert not out[4].endswith(")")
    assert main([*offline, "--json", "cron", "0 1 * * *", "--tz", "America/New_York",
                 "--after", "2026-10-31T12:00", "--limit", "2"]) == 0  # fmt: skip
    times = orjson.loads(capsys.readouterr().out)["times"]
    assert [t["utc"] for t in times] == ["2026-11-01T05:00:00+00:00", "2026-11-02T06:00:00+00:00"]
    assert [t["transition"] for t in times] == [None, "UTC-04:00 -> UTC-05:00 (clocks go back 1h)"]
    for bad, message in [
        (["cron", "0 0 30 2 *"], "rsched: error: cron: cron '0 0 30 2 *': day-of-month 30 never"),
        (["cron", "* * *"], "rsched: error: cron: cron '* * *' has 3 fields"),
        (["cron", "0 2 * * *", "--tz", "Mars/Base"], "rsched: error: --tz: unknown time zone"),
        (["cron", "0 2 * * *", "-n", "0"], "rsched: error: -n/--limit: give 1-10000"),
    ]:
        assert main([*offline, *bad]) == 1
        err = capsys.readouterr().err
        assert err.startswith(message), err
        assert err.count("\n") == 1, err  # one line


def test_dead_requeue_and_purge_of_unknown_ids_are_errors(
    rsched: Run, here: Run, cli: Cli, redis_url: str, prefix: str
) -> None:
    with redis_sync.Redis.from_url(redis_url, decode_responses=True) as raw:
        job = orjson.dumps(["execution_id", "e", "task", "t", "payload", "{}", "attempt", "2"])
        fields = {"reason": "max_retries", "execution_id": "e", "task": "t", "job": job.decode()}
        first, second = (raw.xadd(f"{{{prefix}}}:dead:default", fields) for _ in range(2))
    missing = rsched("dead", "requeue", "no-such-id")
    assert missing.returncode == 1
    assert "dead letter 'no-such-id' does not exist in queue 'default'" in missing.stderr
    assert missing.stdout == ""
    mixed = here("dead", "requeue", "0-1", str(first))
    assert mixed.returncode == 1
    assert mixed.stdout.strip() == f"requeued {first} onto queue default"
    assert "1 of 2 dead letter(s) not requeued: 0-1" in mixed.stderr
    other = here("dead", "purge", str(second), "--task", "other")
    assert other.returncode == 0, other.stderr
    assert f"left {second} (task t, not other)" in other.stdout
    doc = orjson.loads(here("--json", "dead", "purge", str(second), "1-1").stdout)
    assert doc["purged"] == [str(second)]
    assert doc["failed"][0]["error"] == "DeadLetterNotFound"
    assert orjson.loads(cli("dead", "ls", "--json")[1])["dead_letters"] == []
    assert here("dead", "show", str(second)).returncode == 1


def test_count_flags_agree_across_commands(cli: Cli) -> None:
    for i in range(3):
        assert cli("add", f"s{i}", "--task", "t", "--every", f"{i + 1}m")[0] == 0
    for flag in ("-n", "--limit"):
        assert len(orjson.loads(cli("ls", "--json", flag, "2")[1])["schedules"]) == 2
        assert len(orjson.loads(cli("next", "s0", "--json", flag, "2")[1])) == 2
        assert cli("history", "s0", flag, "2")[0] == 0
        assert cli("dead", "ls", flag, "2")[0] == 0


@pytest.mark.slow
def test_worker_queues_from_a_comma_separated_environment_variable(
    spawn: Callable[..., Proc], settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = fast_env(settings, RSCHED_WORKER__QUEUES="default, reports")
    proc = spawn("rsched._cli.main", "worker", "tests.support.worker_app:worker", env=env)
    proc.wait_for("worker.start")
    assert "queues=default,reports" in proc.output()
    for value, queues in [("a,b", ["a", "b"]), ('["a", "b"]', ["a", "b"]), ("solo", ["solo"])]:
        monkeypatch.setenv("RSCHED_WORKER__QUEUES", value)
        assert Settings().worker.queues == queues


def test_backfill_says_what_it_did_and_fails_on_an_empty_range(cli: Cli) -> None:
    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=1)
    added = cli("add", "bf", "--task", "t", "--every", "60", "--start-at", start.isoformat())
    assert added[0] == 0, added
    window = ("--start", start.isoformat(), "--end", (start + timedelta(minutes=2)).isoformat())
    code, out, _ = cli("backfill", "bf", *window)  # overlap=skip: one now, the rest in turn
    assert code == 0, out
    assert out.startswith("3 occurrence(s): 1 fired, 2 buffered, 0 already fired\n")
    assert "one after another" in out
    code, out, _ = cli("backfill", "bf", *window)
    assert out.startswith("3 occurrence(s): 0 fired, 0 buffered, 3 already fired")
    first = "2020-01-01T00:00:00+00:00"
    assert cli("add", "c", "--task", "t", "--cron", "0 3 * * *", "--start-at", first)[0] == 0
    code, out, err = cli(
        "backfill", "c", "--start", "2019-12-01T00:00:00", "--end", "2019-12-05T00:00:00"
    )
    assert (code, out) == (1, "")
    assert "holds no occurrence of 'c'" in err


def test_buffer_all_from_the_command_line(cli: Cli) -> None:
    code, _, err = cli(
        "add", "ba", "--task", "t", "--every", "60", "--overlap", "buffer_all",
        "--buffer-limit", "5",
    )  # fmt: skip
    assert code == 0, err
    shown = orjson.loads(cli("show", "ba", "--json")[1])["schedule"]
    assert (shown["overlap"], shown["buffer_limit"]) == ("buffer_all", 5)
    code, _, err = cli("add", "bad", "--task", "t", "--every", "60", "--buffer-limit", "0")
    assert code == 1
    assert "--buffer-limit: give a whole number from 1" in err
    assert "ba" in cli("ls")[1]
    assert "bad" not in cli("ls")[1]


def test_a_debounced_schedule_shows_and_merges_triggers(cli: Cli) -> None:
    code, _, err = cli("add", "deb", "--task", "t", "--every", "1h", "--debounce", "5s")
    assert code == 0, err
    code, out, _ = cli("trigger", "deb")
    window = out.split()[-1]
    assert f"fired {window}" in out
    code, out, _ = cli("trigger", "deb")
    assert f"debounced {window} (merged into the open debounce window: its job runs later)" in out
    shown = cli("show", "deb")[1]
    assert re.search(r"^debounce: +5s$", shown, re.MULTILINE), shown
    assert f"skipped (debounced into {window})" in shown
    assert orjson.loads(cli("show", "deb", "--json")[1])["schedule"]["debounce"] == 5
    code, _, err = cli("update", "deb", "--debounce", "2d")
    assert code == 1
    assert "--debounce: 172800 s is longer than a day" in err
    assert cli("update", "deb", "--clear", "debounce")[0] == 0
    assert orjson.loads(cli("show", "deb", "--json")[1])["schedule"]["debounce"] is None


def test_enqueue_debounced_opens_then_joins_a_window(cli: Cli) -> None:
    args = ("enqueue", "search.reindex", "--debounce-key", "reindex:42", "--debounce", "2m")
    code, out, _ = cli(*args, "--payload", '{"n": 1}')
    assert code == 0, out
    execution_id = out.split(" ")[0]
    assert out.strip() == (
        f"{execution_id} on queue default: debounce window reindex:42 opened, the job runs "
        "2m after the last call"
    )
    joined = orjson.loads(cli(*args, "--payload", '{"n": 2}', "--json")[1])
    assert joined == {"execution_id": execution_id, "created": False}
    code, out, _ = cli(*args)
    assert "debounce window reindex:42 joined" in out
    queues = orjson.loads(cli("stats", "--json")[1])["queues"]
    assert (queues["default"]["length"], queues["default"]["delayed"]) == (0, 1)
    code, _, err = cli("enqueue", "t", "--debounce", "2s")
    assert code == 1
    assert "--debounce-key: give the key of the calls to collapse with --debounce" in err
    code, _, err = cli(*args, "--delay", "5s")
    assert code == 1
    assert "--delay: a debounced job runs --debounce after the last call" in err
    code, _, err = cli("enqueue", "t", "--debounce-key", "k", "--debounce", "2d")
    assert (code, "--debounce: 172800 s is longer than a day" in err) == (1, True)


def test_enqueue_new_then_already_there(cli: Cli) -> None:
    code, out, _ = cli("enqueue", "emails.send", "--payload", '{"to": "x"}', "--id", "order-42")
    assert code == 0
    assert out.strip() == "order-42 enqueued on queue default"
    code, out, _ = cli("enqueue", "emails.send", "--id", "order-42", "--queue", "mail")
    assert code == 0
    assert out.startswith("order-42 already there")
    assert "nothing added" in out
    data = orjson.loads(cli("enqueue", "t", "--delay", "5m", "--priority", "low", "--json")[1])
    assert data["created"] is True
    assert data["execution_id"].startswith("job-")
    code, out, _ = cli("enqueue", "t", "--queue", "mail", "--priority", "high")
    assert "enqueued on queue mail (high)" in out
    again = orjson.loads(cli("enqueue", "emails.send", "--id", "order-42", "--json")[1])
    assert again == {"execution_id": "order-42", "created": False}
    queues = orjson.loads(cli("stats", "--json")[1])["queues"]
    assert (queues["default"]["length"], queues["default"]["delayed"]) == (1, 1)
    assert (queues["mail"]["length"], queues["mail"]["high"]) == (1, 1)
    assert cli("enqueue", "t", "--priority", "urgent")[0] == 2
    assert cli("enqueue", "t", "--delay", "soon")[0] == 2
    assert cli("enqueue", "t", "--delay", "0", "--queue", "now")[0] == 0
    code, _, err = cli("enqueue", "bad task")
    assert code == 1
    assert "task" in err


def test_a_start_deadline_and_a_pause_after_failures_show_and_clear(cli: Cli) -> None:
    code, _, err = cli(
        "add", "dl", "--task", "t", "--every", "1h", "--start-deadline", "10m",
        "--pause-after-failures", "3",
    )  # fmt: skip
    assert code == 0, err
    shown = cli("show", "dl")[1]
    assert re.search(r"^start deadline: +10m$", shown, re.MULTILINE), shown
    assert re.search(r"^pause after: +3 failed runs in a row \(0 in a row now\)$", shown, re.M)
    data = orjson.loads(cli("show", "dl", "--json")[1])["schedule"]
    assert (data["start_deadline"], data["pause_after_failures"]) == (600, 3)
    assert data["consecutive_failures"] == 0
    code, out, err = cli(
        "update", "dl", "--clear", "start-deadline", "--clear", "pause_after_failures"
    )
    assert code == 0, err
    assert "start_deadline 10m -> -; pause_after_failures 3 -> -" in out
    data = orjson.loads(cli("show", "dl", "--json")[1])["schedule"]
    assert (data["start_deadline"], data["pause_after_failures"]) == (None, None)
    for flag, value, message in [
        ("--start-deadline", "-5m", "--start-deadline: -5m is negative"),
        ("--start-deadline", "0", "--start-deadline: 0 is zero"),
        ("--start-deadline", "1000d", "--start-deadline: 1000d is longer than 366 days"),
        ("--pause-after-failures", "0", "--pause-after-failures: give a whole number from 1"),
    ]:
        code, _, err = cli("update", "dl", flag, value)
        assert (code, message in err) == (1, True), err


def test_enqueue_with_a_start_deadline(cli: Cli) -> None:
    code, _, err = cli("enqueue", "t", "--start-deadline", "5m")
    assert code == 0, err
    code, _, err = cli("enqueue", "t", "--start-deadline", "1000d")
    assert (code, "--start-deadline: 1000d is longer than 366 days" in err) == (1, True), err
