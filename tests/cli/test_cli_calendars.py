"""The ``rsched`` commands on exclusion calendars (``calendars``, ``calendar show|set|import|rm``),
``--exclude`` and ``--jitter`` on a schedule's spec, ``rsched show`` marking what a calendar
excludes, and ``rsched cron --exclude FILE``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from rsched._cli.main import main
from tests.support.command import Cli, as_json
from tests.support.schedulers import daily_far_from_now

_WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")

ICS = """BEGIN:VCALENDAR
VERSION:2.0
X-WR-CALNAME:Festivi
BEGIN:VEVENT
DTSTART;VALUE=DATE:20261225
DTEND;VALUE=DATE:20261227
SUMMARY:Natale e Santo Stefano
END:VEVENT
BEGIN:VEVENT
DTSTART;VALUE=DATE:20270101
SUMMARY:Capodanno
END:VEVENT
END:VCALENDAR
"""


def test_set_show_list_and_remove(cli: Cli) -> None:
    assert cli("calendars") == (0, "no calendars\n", "")
    code, out, err = cli(
        "calendar", "set", "hol", "--date", "2026-12-25", "--date", "2026-12-26",
        "--range", "2026-08-10..2026-08-20", "--weekday", "sun", "--description", "closures",
    )  # fmt: skip
    assert code == 0, err
    assert out.startswith("calendar hol set")
    listed = as_json(cli("calendars", "--json"))
    assert [(c["name"], c["dates"], c["weekdays"]) for c in listed] == [
        ("hol", ["2026-12-25", "2026-12-26"], ["sun"])
    ]
    code, out, _ = cli("calendar", "show", "hol")
    assert "2026-08-10 .. 2026-08-20" in out
    assert "closures" in out
    code, _, err = cli("calendar", "set", "hol")
    assert code == 2
    assert "--date" in err
    code, _, err = cli("calendar", "set", "hol", "--date", "2026-13-01")
    assert code != 0
    assert "dates" in err
    code, _, err = cli("add", "daily", "--task", "t", "--cron", "0 9 * * *", "--exclude", "hol")
    assert code == 0, err
    code, _, err = cli("calendar", "rm", "hol")
    assert code != 0
    assert "daily" in err
    assert cli("update", "daily", "--clear", "exclude")[0] == 0
    assert cli("calendar", "rm", "hol")[:2] == (0, "calendar hol removed\n")
    code, _, err = cli("calendar", "show", "hol")
    assert code != 0
    assert "rsched calendar set" in err


def test_import_an_ics_or_a_dates_file(cli: Cli, tmp_path: Path) -> None:
    ics = tmp_path / "festivi.ics"
    ics.write_text(ICS)
    code, out, err = cli("calendar", "import", "festivi", str(ics))
    assert code == 0, err
    assert "1 date(s), 1 range(s)" in out
    shown = as_json(cli("calendar", "show", "festivi", "--json"))
    assert shown["description"] == "Festivi"
    assert shown["dates"] == ["2027-01-01"]
    assert shown["ranges"] == [["2026-12-25", "2026-12-26"]]
    plain = tmp_path / "more.txt"
    plain.write_text("# closures\n2027-04-05\n2027-08-10..2027-08-14  # summer\n")
    assert cli("calendar", "import", "festivi", str(plain), "--merge")[0] == 0
    merged = as_json(cli("calendar", "show", "festivi", "--json"))
    assert merged["dates"] == ["2027-01-01", "2027-04-05"]
    assert len(merged["ranges"]) == 2
    bad = tmp_path / "bad.txt"
    bad.write_text("2027-01-01\nnot a date\n")
    code, _, err = cli("calendar", "import", "x", str(bad))
    assert code == 2
    assert "line 2" in err


def test_show_marks_excluded_and_jittered_occurrences(cli: Cli) -> None:
    # `show` lists the next five occurrences: a daily cron twelve hours away, and a calendar of
    # the weekdays of its first four, so that whatever the day four are excluded and one runs.
    cron = daily_far_from_now()
    now = datetime.now(UTC)
    first = now.date() + timedelta(days=int(int(cron.split()[1]) < now.hour))
    days = [_WEEKDAYS[(first + timedelta(days=i)).weekday()] for i in range(4)]
    assert cli("calendar", "set", "four-days", *(a for d in days for a in ("--weekday", d)))[0] == 0
    code, _, err = cli(
        "add", "p", "--task", "t", "--cron", cron, "--tz", "UTC",
        "--exclude", "four-days", "--jitter", "10m",
    )  # fmt: skip
    assert code == 0, err
    code, out, _ = cli("show", "p")
    assert "exclude:" in out
    assert "jitter:" in out
    assert out.count("excluded by four-days: not run") == 4
    assert "jitter +" in out
    shown = as_json(cli("show", "p", "--json"))
    assert shown["schedule"]["exclude"] == ["four-days"]
    assert shown["schedule"]["jitter"] == 600
    upcoming = shown["upcoming"]
    assert [o["excluded_by"] for o in upcoming].count("four-days") == 4
    assert len(shown["next"]) == sum(1 for o in upcoming if o["excluded_by"] is None)
    times = as_json(cli("next", "p", "-n", "3", "--json"))
    assert len(times) == 3  # on the days the calendar leaves, each at its jittered time
    code, _, err = cli("add", "q", "--task", "t", "--every", "60", "--exclude", "missing")
    assert code != 0
    assert "--exclude" in err
    assert "missing" in err


def test_cron_preview_leaves_a_file_s_dates_out(tmp_path: Path, capsys: Any) -> None:
    dates = tmp_path / "holidays.txt"
    dates.write_text("2027-01-01\n2027-01-06\n")
    args = ["cron", "0 9 * * *", "--tz", "Europe/Rome", "--after", "2026-12-31T12:00", "-n", "4"]
    assert main([*args, "--exclude", str(dates), "--json"]) == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert [t["at"][:10] for t in doc["times"]] == [
        "2027-01-02", "2027-01-03", "2027-01-04", "2027-01-05",
    ]  # fmt: skip
    assert doc["excluded_by"] == ["holidays"]
    assert main([*args, "--exclude", str(dates)]) == 0
    assert "leaving out what holidays exclude" in capsys.readouterr().out
    assert main([*args, "--exclude", str(tmp_path / "nothing.ics")]) == 2
    assert "cannot read it" in capsys.readouterr().err
