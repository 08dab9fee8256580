"""The ``rsched`` read commands over pages (ls, history, dead ls), and durations and zones as
the add command takes them."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import redis as redis_sync

from rsched._core.keys import Keys
from tests.support.command import Cli


def test_add_takes_durations_in_every_form(cli: Cli) -> None:
    code, out, err = cli(
        "--json", "add", "d", "--task", "t", "--every", "1h30m", "--retry-base", "30s",
        "--retry-max", "2h", "--timeout", "90", "--misfire-grace", "0s", "--tz", "europe/rome",
    )  # fmt: skip
    assert code == 0, err
    spec = orjson.loads(out)
    assert (spec["every"], spec["retry_base_s"], spec["retry_max_s"]) == (5400, 30, 7200)
    assert (spec["timeout_s"], spec["misfire_grace_s"]) == (90, 0)
    assert spec["timezone"] == "Europe/Rome"  # stored in its canonical spelling
    code, out, _ = cli("ls")
    assert "every 1h30m" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--every", "-5m"], "--every: -5m is negative; give a positive duration such as 5m"),
        (["--every", "0"], "--every: 0 is zero; give a positive duration such as 5m"),
        (["--every", "soon"], "--every: 'soon' is not a duration"),
        (["--every", "5m", "--timeout", "-1h"], "--timeout: -1h is negative"),
        (["--every", "5m", "--retry-base", "0s"], "--retry-base: 0s is zero"),
        (["--every", "5m", "--tz", "EST"], "--tz: 'EST' is a time zone abbreviation"),
        (["--every", "5m", "--tz", "PST8PDT"], "--tz: 'PST8PDT' is a time zone abbreviation"),
    ],
)
def test_add_refuses_bad_durations_and_zones(cli: Cli, args: list[str], message: str) -> None:
    code, _, err = cli("add", "bad", "--task", "t", *args)
    assert code == 1
    assert f"rsched: error: invalid schedule 'bad': {message}" in err
    assert cli("ls")[1].strip() == "no schedules"  # nothing written


def test_history_pages_and_status(cli: Cli) -> None:
    assert cli("add", "m", "--task", "t", "--every", "1h", "--overlap", "allow")[0] == 0
    for _ in range(3):
        assert cli("trigger", "m")[0] == 0
    code, out, _ = cli("history", "m", "--limit", "2")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["AT", "EVENT", "SCHEDULED", "LATE", "EXECUTION", "DETAIL"]
    assert len(lines) == 4
    assert "origin=manual" in lines[1]
    assert lines[-1].startswith("more: rsched history m --cursor ")
    cursor = lines[-1].split()[-1]
    code, out, _ = cli("history", "m", "--limit", "2", "--cursor", cursor)
    assert code == 0
    assert len(out.splitlines()) == 2  # the header and the last event: no "more"
    data = orjson.loads(cli("--json", "history", "m", "--status", "fired")[1])
    assert [e["event"] for e in data["events"]] == ["fired"] * 3
    assert data["cursor"] is None
    assert data["events"][0]["at"].endswith("+00:00")  # ISO 8601, not epoch ms
    code, out, err = cli("history", "m", "--status", "bogus")
    assert code == 1
    assert "status: 'bogus' is not a history status; give one of fired, skipped" in err
    assert out == ""
    assert "no events" in cli("history", "m", "--status", "dead")[1]


def test_dead_ls_pages(cli: Cli, redis_url: str, prefix: str) -> None:
    with redis_sync.Redis.from_url(redis_url) as raw:
        raw.sadd(Keys(prefix).queues, "mail")
        for n in range(3):
            raw.xadd(
                Keys(prefix).dead("mail"),
                {"reason": "max_retries", "execution_id": f"e{n}", "task": "send", "job": "[]"},
            )
    code, out, _ = cli("dead", "ls", "--queue", "mail", "--limit", "2")
    assert code == 0
    assert "more: rsched dead ls --queue mail --cursor" in out
    data = orjson.loads(cli("--json", "dead", "ls", "--queue", "mail", "--limit", "3")[1])
    assert [d["execution_id"] for d in data["dead_letters"]] == ["e2", "e1", "e0"]
    assert data["cursor"] is None


def test_schedules_file_durations_and_zones(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "jobs.toml"
    path.write_text(
        '[[schedule]]\nid = "f"\ntask = "t"\nevery = "1h30m"\ntimezone = "US/Eastern"\n'
        'retry_base_s = "10s"\n'
    )
    assert cli("sync", str(path))[0] == 0
    spec = orjson.loads(cli("--json", "show", "f")[1])["schedule"]
    assert (spec["every"], spec["retry_base_s"], spec["timezone"]) == (
        5400,
        10,
        "America/New_York",
    )
    assert cli("sync", str(path))[1].endswith("0 to add, 0 to update, 0 to remove, 1 unchanged\n")


def test_cron_preview_takes_the_zones_a_schedule_takes(cli: Cli) -> None:
    code, _, err = cli("cron", "0 9 * * *", "--tz", "EST5EDT")
    assert code == 1
    assert "--tz: 'EST5EDT' is a time zone abbreviation" in err
    code, out, _ = cli("cron", "0 9 * * *", "--tz", "us/eastern", "-n", "1")
    assert code == 0
    assert "in America/New_York" in out
